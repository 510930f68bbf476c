"""Shared helpers for the benchmark scripts: machine description, timing, tables, JSON.

Every script in this folder measures something, prints a table (median, min and max
over several runs) and writes its results to ``benchmarks/results/<name>.json``; the
book's performance page reads those files and never reruns a benchmark.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"

# Reference: the authors' released code on the demonstration setting, measured on this machine type.
REFERENCE_WALL_S = 224.0
REFERENCE_PEAK_MIB = 600.0
TARGET_WALL_S = 7.0
TARGET_PEAK_MIB = 300.0

# Reference: the authors' HF-BERT research code with learned attention (W^K, W^Q, W^V
# trained, batch 40, documents of 150 words, cross-entropy, Adam), per optimisation step,
# 2 threads on a quiet Intel Xeon with 2 cores; an earlier quiet run gave 36.8 ms.
REFERENCE_LEARNED_MS_PER_STEP = 34.0
REFERENCE_LEARNED_THREADS = 2
REFERENCE_LEARNED_MS_PER_STEP_EARLIER = 36.8
TARGET_LEARNED_MS_PER_STEP = 4.0   # the package's train(), one torch thread


DEVICE_ENV = "TOPICMECH_BENCH_DEVICE"   # set by --device; inherited by the worker processes


def add_device_option(ap: Any) -> None:
    """``--device {auto,cpu,cuda}`` on a benchmark's argument parser (auto: topicmech's default device,
    CUDA in full mode when present)."""
    ap.add_argument("--device", choices=("auto", "cpu", "cuda"), default=os.environ.get(DEVICE_ENV, "auto"),
                    help="where the models run (default auto: CUDA in TOPICMECH_MODE=full when present)")


def apply_device(args: Any) -> str:
    """Fix the device of this benchmark and of its workers from ``args.device``; return its name."""
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device on this machine")
    os.environ[DEVICE_ENV] = args.device
    return str(device())


def device() -> Any:
    """The device the benchmark runs on: ``--device``, else :func:`topicmech.utils.default_device`."""
    import torch

    from topicmech.utils import default_device

    name = os.environ.get(DEVICE_ENV, "auto")
    return default_device() if name == "auto" else torch.device(name)


def results_name(name: str) -> str:
    """The results file of a benchmark: ``name`` on the CPU, ``name_cuda`` on a GPU, so the stored CPU
    figures are never overwritten by a GPU run."""
    return name if device().type == "cpu" else f"{name}_{device().type}"


def load_average() -> list[float]:
    """1, 5 and 15-minute load averages (``uptime``)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return [float("nan")] * 3


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine(threads: int | None = None) -> dict[str, Any]:
    """What the numbers were measured on."""
    import numpy as np
    import torch

    try:
        uptime = subprocess.run(["uptime"], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        uptime = ""
    info = {
        "cpu_model": cpu_model(),
        "logical_cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "torch_threads": threads if threads is not None else torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "device": str(device()),
        "mode": os.environ.get("TOPICMECH_MODE", "quick"),
        "load_average": load_average(),
        "uptime": uptime,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    return info


def describe(info: dict[str, Any]) -> str:
    return (f"{info['cpu_model']}, {info['usable_cores']} cores, Python {info['python']}, torch {info['torch']}, "
            f"numpy {info['numpy']}, mode {info['mode']}" + (f", GPU {info['cuda']}" if info.get("cuda") else "")
            + f"\nload average (1/5/15 min): {info['load_average']}")


def summary(values: Sequence[float]) -> dict[str, float]:
    """Median, min, max and the raw values."""
    vals = [float(v) for v in values]
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "runs": vals}


def repeat(fn: Callable[[], Any], runs: int, warmup: int = 1) -> dict[str, dict[str, float]]:
    """Time ``fn`` ``runs`` times after ``warmup`` calls: wall and CPU (process) seconds."""
    for _ in range(warmup):
        fn()
    wall, cpu = [], []
    for _ in range(runs):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - w0)
        cpu.append(time.process_time() - c0)
    return {"wall_s": summary(wall), "cpu_s": summary(cpu)}


def repeat_steps(fn: Callable[[], Any], runs: int, steps: int, warmup: int = 1) -> dict[str, dict[str, float]]:
    """:func:`repeat` for a ``fn`` that takes ``steps`` optimisation steps: its wall and CPU seconds,
    with wall and CPU milliseconds per step and steps per second (median, min, max of ``runs``)."""
    if steps < 1:
        raise ValueError(f"steps must be a positive number of steps per run, got {steps!r}")
    t = repeat(fn, runs, warmup)
    wall, cpu = t["wall_s"]["runs"], t["cpu_s"]["runs"]
    return {"ms_per_step": summary([1e3 * w / steps for w in wall]),
            "cpu_ms_per_step": summary([1e3 * c / steps for c in cpu]),
            "steps_per_s": summary([steps / w for w in wall]), **t}


def fmt(x: float, digits: int = 3) -> str:
    if x != x:  # nan
        return "nan"
    if x == 0:
        return "0"
    a = abs(x)
    if a >= 1e5 or a < 1e-3:
        return f"{x:.{digits - 1}e}"
    return f"{x:.{max(0, digits - 1 - int(__import__('math').floor(__import__('math').log10(a))))}f}"


def table(rows: Iterable[Sequence[Any]], header: Sequence[str]) -> str:
    """A plain-text table with right-aligned columns."""
    rows = [[c if isinstance(c, str) else fmt(c) for c in r] for r in rows]
    widths = [max(len(str(h)), *(len(r[i]) for r in rows)) if rows else len(str(h)) for i, h in enumerate(header)]
    line = "  ".join(str(h).rjust(w) for h, w in zip(header, widths))
    out = [line, "-" * len(line)]
    out += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(out)


def write_results(name: str, payload: dict[str, Any]) -> Path:
    """Write ``payload`` to ``results/<name>.json`` (``<name>_cuda.json`` when run on a GPU)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{results_name(name)}.json"
    path.write_text(json.dumps(payload, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    return path


def run_worker(script: Path, args: Sequence[str], env: dict[str, str] | None = None, timeout: float = 1800) -> dict[str, Any]:
    """Run ``script --worker args`` in a fresh Python process; it prints one JSON line last."""
    full_env = {**os.environ, **(env or {})}
    full_env.setdefault("PYTHONPATH", str(ROOT))
    proc = subprocess.run([sys.executable, str(script), "--worker", *args], capture_output=True, text=True,
                          env=full_env, timeout=timeout, cwd=str(ROOT))
    if proc.returncode != 0:
        raise RuntimeError(f"worker {script.name} {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def threads_env(threads: int) -> dict[str, str]:
    """Environment for a worker with a given thread count (OpenMP and MKL agree with torch)."""
    return {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "TOPICMECH_THREADS": str(threads)}
