"""Run every benchmark, print their tables, and write ``benchmarks/results/*.json``.

    python benchmarks/run_all.py            # all benchmarks, default repetitions (about 15-25 min on 2 busy cores)
    python benchmarks/run_all.py --quick    # fewer repetitions, and no run of every page (a few minutes)
    python benchmarks/run_all.py --only demo data

``make bench`` calls this script. Each benchmark runs in its own Python process. The
demonstration-setting benchmark runs once more at the end (``demo_rerun.json``), so a
burst of load from other users during the first run shows up as a disagreement between
the two. Set ``TOPICMECH_MODE=full`` to use a GPU when one is present and to extend the
scaling grid; ``--device cpu|cuda`` fixes the device (results on a GPU go to ``<name>_cuda.json``,
with the device named in their ``machine`` entry).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import _common as C  # noqa: E402

BENCHMARKS = {
    "demo": ("bench_demo.py", [], ["--runs", "3", "--generic-runs", "1"]),
    "learned": ("bench_learned.py", [], ["--runs", "2", "--steps", "15"]),
    "data": ("bench_data.py", [], ["--runs", "3", "--ref-docs", "100", "--docs", "4000"]),
    "theory": ("bench_theory.py", [], ["--runs", "3", "--dense-max", "1000"]),
    "scaling": ("bench_scaling.py", [], ["--runs", "2"]),
    "chapters": ("bench_chapters.py", [], None),   # run in full (see main); in full mode chapters 5 to 7
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--only", nargs="+", choices=sorted(BENCHMARKS), help="run only these")
    ap.add_argument("--no-rerun", action="store_true", help="skip the final rerun of the demonstration setting")
    C.add_device_option(ap)
    args = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": str(C.ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           C.DEVICE_ENV: args.device}   # every benchmark on this device; GPU results in <name>_cuda.json
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("MPLBACKEND", "Agg")
    names = args.only or list(BENCHMARKS)
    print(f"topicmech benchmarks on {C.cpu_model()}, load average {C.load_average()}", flush=True)
    failed = []
    t0 = time.perf_counter()
    for name in names:
        script, full_args, quick_args = BENCHMARKS[name]
        if name == "chapters":
            if args.quick and not args.only:
                continue                          # every page of the book: minutes, not for --quick
            if os.environ.get("TOPICMECH_MODE") == "full":
                full_args = ["--only", "05_attention", "06_two_stages", "07_beyond"]   # where training dominates
        print(f"\n=== {name} ({script}) ===", flush=True)
        cmd = [sys.executable, str(HERE / script), *(quick_args if args.quick and quick_args is not None else full_args)]
        if subprocess.run(cmd, env=env, cwd=str(C.ROOT)).returncode != 0:
            failed.append(name)
    if "demo" in names and not args.no_rerun:
        print("\n=== demo, rerun at the end (fast path, 1 thread) ===", flush=True)
        cmd = [sys.executable, str(HERE / "bench_demo.py"), "--threads", "1", "--generic-runs", "0",
               "--runs", "3" if args.quick else "5", "--name", "demo_rerun"]
        if subprocess.run(cmd, env=env, cwd=str(C.ROOT)).returncode != 0:
            failed.append("demo rerun")
    print(f"\nall benchmarks: {time.perf_counter() - t0:.0f} s; load average now {C.load_average()}")
    if failed:
        print(f"FAILED: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
