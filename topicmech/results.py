"""Stored multi-seed results: computed by a script, saved as JSON under ``results/`` with their
provenance, read by the pages, and checked against a quick rerun.

A stored result is one function of a seed, ``fn(seed, **kwargs) -> {metric: number}``, run
over many seeds. :func:`store` runs it and writes ``results/<name>.json``::

    {"name": ...,
     "provenance": {"function": "module:qualname", "kwargs": {...}, "seeds": [...],
                    "command": ..., "commit": ..., "date": ..., "machine": {...},
                    "versions": {...}, "mode": ...},
     "per_seed": [{"seed": 0, "metric": value, ...}, ...],
     "summary": {"metric": {"mean": ..., "lo": ..., "hi": ..., "min": ...,
                            "max": ..., "n": ...}}}

Only :func:`store` writes these files (no typed numbers). :func:`load` reads one back as a
:class:`StoredResult`; :func:`rerun` recomputes a few of its seeds from the recorded function
and arguments, so a page and a test can check that the stored numbers are still what the code
computes (:meth:`StoredResult.check_rerun`).

Where :func:`load` looks, in this order (:func:`locations`): the folder named by the environment
variable ``TOPICMECH_RESULTS`` when it is set; ``results/`` at the top of the repository when the
package runs from a checkout; the copy installed with the package (``topicmech/stored/``, the
same files, shipped as package data by ``pyproject.toml``), for readers who installed the
package and run an exported notebook outside the repository.
"""

from __future__ import annotations

import datetime as _dt
import functools
import importlib
import importlib.metadata
import importlib.resources
import json
import math
import os
import platform
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats as _scipy_stats

from .runner import run_seeds
from .utils import check_seeds, run_mode, seed_offset

__all__ = ["RESULTS_DIR", "Interval", "StoredResult", "interval", "prediction_interval", "provenance",
           "store", "load", "rerun", "locations", "benchmark"]

_ENV = "TOPICMECH_RESULTS"
_REPO = Path(__file__).resolve().parents[1]
#: the installed copy: package data ``topicmech/stored/*.json`` (``results/`` mapped in pyproject.toml)
_PACKAGED = "stored"
#: the installed copy of ``benchmarks/results/*.json``
_PACKAGED_BENCHMARKS = "stored_benchmarks"


def _checkout_dir() -> Path | None:
    """``results/`` at the top of the repository, when the package runs from a checkout."""
    folder = _REPO / "results"
    return folder if (_REPO / "pyproject.toml").is_file() and folder.is_dir() else None


def _packaged_dir() -> Any | None:
    """The copy of the stored results installed with the package (a ``Traversable``), if any."""
    try:
        folder = importlib.resources.files(__package__).joinpath(_PACKAGED)
    except (ModuleNotFoundError, TypeError):  # pragma: no cover - imported outside the package
        return None
    return folder if folder.is_dir() else None


def locations() -> list[tuple[str, Any]]:
    """Where :func:`load` looks for stored results, in order, as ``(label, folder)`` pairs:
    ``TOPICMECH_RESULTS`` when it is set, the repository's ``results/`` when running from a
    checkout, and the copy installed with the package when there is one."""
    found: list[tuple[str, Any]] = []
    if os.environ.get(_ENV):
        found.append((_ENV, Path(os.environ[_ENV])))
    checkout = _checkout_dir()
    if checkout is not None:
        found.append(("the repository's results/", checkout))
    packaged = _packaged_dir()
    if packaged is not None:
        found.append(("the copy installed with the package", packaged))
    return found


def _default_dir() -> Any:
    """The first of :func:`locations` (where :data:`RESULTS_DIR` points)."""
    found = locations()
    return found[0][1] if found else _REPO / "results"


#: Where stored results live (the first of :func:`locations` when the package was imported):
#: ``TOPICMECH_RESULTS`` if set, else ``results/`` at the top of the repository in a checkout,
#: else the copy installed with the package. Its value depends on the machine, so it is not shown here.
#:
#: :meta hide-value:
RESULTS_DIR: Path = _default_dir()


@dataclass(frozen=True)
class Interval:
    """Mean of ``n`` per-seed values with a two-sided t-interval ``[lo, hi]`` at ``level``, and their range."""

    mean: float
    lo: float
    hi: float
    min: float
    max: float
    n: int
    level: float = 0.95

    def __contains__(self, value: float) -> bool:
        return self.lo <= value <= self.hi


def interval(values: Iterable[float], *, level: float = 0.95) -> Interval:
    """The mean of ``values`` with its t-interval at ``level`` (a single value gives ``lo = hi = mean``)."""
    x = np.asarray(list(values), dtype=float)
    if x.size == 0 or not np.all(np.isfinite(x)):
        raise ValueError(f"interval needs finite values, got {x.tolist()}")
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    mean = float(x.mean())
    half = 0.0
    if x.size > 1:
        half = float(_scipy_stats.t.ppf(0.5 + level / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))
    return Interval(mean, mean - half, mean + half, float(x.min()), float(x.max()), int(x.size), level)


def prediction_interval(values: Iterable[float], *, level: float = 0.95) -> tuple[float, float]:
    """The two-sided t prediction interval at ``level`` for one new value drawn like ``values``
    (independent, roughly normal): ``mean -+ t * sd * sqrt(1 + 1/n)``; needs two values or more."""
    x = np.asarray(list(values), dtype=float)
    if x.size < 2 or not np.all(np.isfinite(x)):
        raise ValueError(f"prediction_interval needs two or more finite values, got {x.tolist()}")
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    half = float(_scipy_stats.t.ppf(0.5 + level / 2, x.size - 1) * x.std(ddof=1) * math.sqrt(1 + 1 / x.size))
    return float(x.mean()) - half, float(x.mean()) + half


def _git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).resolve().parents[1],
                             capture_output=True, text=True, timeout=10)
        # the stored files themselves do not count: a script that writes several files
        # would otherwise mark every file after its first as "+dirty"
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--",
                                ".", ":(exclude)results"],
                               cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if out.returncode != 0:
        return "unknown"
    return out.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def _versions() -> dict[str, str]:
    names = ("torch", "numpy", "scipy", "gensim", "transformers")
    found = {"python": platform.python_version()}
    for name in names:
        module = sys.modules.get(name)
        if module is None:
            try:
                module = importlib.import_module(name)
            except ImportError:
                continue
        found[name] = str(getattr(module, "__version__", "unknown"))
    try:
        found["topicmech"] = importlib.metadata.version("topicmech")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout without installing
        found["topicmech"] = "unknown"

    return found


def _function_name(fn: Callable[..., Any]) -> str:
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not module or "<" in qualname:
        raise ValueError(f"a stored result needs a module-level function, got {fn!r}")
    return f"{module}:{qualname}"


def _resolve(name: str) -> Callable[..., Any]:
    module, _, qualname = name.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def provenance(fn: Callable[..., Any], kwargs: Mapping[str, Any], seeds: Sequence[int], *,
               command: str) -> dict[str, Any]:
    """What produced a stored result: the function and its arguments, the seeds, the command, the
    commit, the date, the machine, the package versions and the run mode."""
    return {
        "function": _function_name(fn),
        "kwargs": dict(kwargs),
        "seeds": [int(s) for s in seeds],
        "command": command,
        "commit": _git_commit(),
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                    "cpus": os.cpu_count()},
        "versions": _versions(),
        "mode": run_mode(),
    }


def _metrics(seed: int, result: Any, name: str) -> dict[str, Any]:
    if not isinstance(result, Mapping):
        raise ValueError(f"{name}: the function must return a mapping of metric names to numbers, "
                         f"got {type(result).__name__} for seed {seed}")
    row: dict[str, Any] = {"seed": int(seed)}
    for key, value in result.items():
        if isinstance(value, (bool, np.bool_)):
            row[key] = bool(value)
        elif isinstance(value, (int, float, np.integer, np.floating)):
            row[key] = float(value) if isinstance(value, (float, np.floating)) else int(value)
        elif isinstance(value, (list, tuple, np.ndarray)):
            row[key] = np.asarray(value, dtype=float).tolist()
        elif isinstance(value, str):
            row[key] = value
        else:
            raise ValueError(f"{name}: metric {key!r} must be a number, a bool, a string or a list of numbers, "
                             f"got {type(value).__name__}")
    return row


def _summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    out = {}
    for key in rows[0]:
        if key == "seed":
            continue
        values = [r[key] for r in rows]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            iv = interval(values)
            out[key] = {"mean": iv.mean, "lo": iv.lo, "hi": iv.hi, "min": iv.min, "max": iv.max, "n": iv.n}
    return out


@dataclass(frozen=True)
class StoredResult:
    """A stored result read back: its ``name``, ``provenance``, ``per_seed`` rows and ``summary``."""

    name: str
    provenance: dict[str, Any]
    per_seed: list[dict[str, Any]]
    summary: dict[str, dict[str, float]]

    @property
    def seeds(self) -> list[int]:
        return [int(r["seed"]) for r in self.per_seed]

    def values(self, metric: str) -> np.ndarray:
        """The per-seed values of ``metric`` (``KeyError`` naming the stored metrics if absent)."""
        if metric not in self.per_seed[0]:
            raise KeyError(f"{self.name} has no metric {metric!r}; it has {sorted(self.per_seed[0])}")
        return np.asarray([r[metric] for r in self.per_seed], dtype=float)

    def interval(self, metric: str, *, level: float = 0.95) -> Interval:
        return interval(self.values(metric), level=level)

    def check_rerun(self, rows: Sequence[Mapping[str, Any]], *, rtol: float = 1e-4, atol: float = 1e-6) -> None:
        """Assert that recomputed ``rows`` (from :func:`rerun`) agree with the stored ones; ``AssertionError``
        naming the first mismatch.

        At seed offset 0 the rerun used the stored seeds, so each metric must equal the stored value
        of its seed to ``rtol``/``atol``. Under ``TOPICMECH_SEED_OFFSET`` the rerun drew fresh seeds,
        so each number must instead lie in the stored range widened by twice its width on each side,
        ``[min - 2w, max + 2w]`` with ``w = max - min`` (at least ``atol``). A fresh seed can also
        draw fresh data (a new corpus, new held-out documents), which the stored seeds may share,
        so the range is wide: the check catches a changed computation, not a one-seed fluctuation. A list (a curve) is compared
        by its last value; strings and bools must agree with some stored seed.
        """
        if seed_offset() != 0:
            self._check_in_range(rows, atol)
            return
        stored = {int(r["seed"]): r for r in self.per_seed}
        for row in rows:
            seed = int(row["seed"])
            if seed not in stored:
                raise AssertionError(f"{self.name}: seed {seed} is not stored (seeds {self.seeds})")
            for key, value in row.items():
                want = stored[seed].get(key)
                if isinstance(value, str) or isinstance(want, str):
                    ok = value == want
                else:
                    ok = bool(np.allclose(np.asarray(value, float), np.asarray(want, float), rtol=rtol, atol=atol))
                if not ok:
                    raise AssertionError(f"{self.name}: seed {seed}, {key}: recomputed {value!r}, stored {want!r}")

    def _check_in_range(self, rows: Sequence[Mapping[str, Any]], atol: float) -> None:
        for row in rows:
            for key, value in row.items():
                if key == "seed":
                    continue
                stored = [r.get(key) for r in self.per_seed]
                if isinstance(value, (str, bool)):
                    if value not in stored:
                        raise AssertionError(f"{self.name}: {key} = {value!r} on a fresh seed, stored only {stored!r}")
                    continue
                x = np.asarray(stored, dtype=float)
                v = np.asarray(value, dtype=float)
                if v.ndim:  # a curve: a fresh seed wanders point by point, so its end is compared
                    x, v = x[:, -1], v[-1]
                lo, hi = x.min(), x.max()
                width = 2 * max(hi - lo, atol)
                if not lo - width <= v <= hi + width:
                    raise AssertionError(f"{self.name}: {key} = {value!r} on a fresh seed lies outside the stored "
                                         f"range [{lo!r}, {hi!r}] widened by twice its width")


def store(name: str, fn: Callable[..., Mapping[str, Any]], seeds: Iterable[int] | int, *, command: str,
          kwargs: Mapping[str, Any] | None = None, executor: Executor | None = None,
          n_jobs: int | None = None, directory: str | os.PathLike | None = None) -> Path:
    """Run ``fn(seed, **kwargs)`` for every seed (on ``executor`` or ``n_jobs`` local processes) and
    write ``<directory>/<name>.json`` with its provenance. The default directory is
    ``TOPICMECH_RESULTS`` if set, else the repository's ``results/`` (never the installed copy:
    outside a checkout without ``TOPICMECH_RESULTS``, ``directory`` is required).

    ``fn`` must be a module-level function returning a mapping of metric names to numbers, bools,
    strings or lists of numbers, and ``kwargs`` JSON-serialisable, so that :func:`rerun` can call
    it again. ``command`` is the command line that produced the file (for the provenance).
    """
    if not isinstance(name, str) or not name or "/" in name:
        raise ValueError(f"name must be a plain file stem, got {name!r}")
    _function_name(fn)  # fail before running anything if a rerun could not find fn
    if directory is not None:
        path = Path(directory)
    elif os.environ.get(_ENV):
        path = Path(os.environ[_ENV])
    elif (_REPO / "pyproject.toml").is_file():  # a checkout
        path = _REPO / "results"
    else:
        raise ValueError(f"store({name!r}) writes into TOPICMECH_RESULTS or the repository's results/; "
                         f"neither is available here (the package runs from {_REPO}, not a checkout), "
                         f"so pass directory=")
    kwargs = dict(kwargs or {})
    json.dumps(kwargs)  # fail early on arguments a rerun could not read back
    seed_list = check_seeds(seeds)
    sweep = run_seeds(functools.partial(fn, **kwargs), seed_list, n_jobs=n_jobs, executor=executor)
    rows = [_metrics(rec["seed"], rec["result"], name) for rec in sweep.records]
    payload = {"name": name, "provenance": provenance(fn, kwargs, seed_list, command=command),
               "per_seed": rows, "summary": _summary(rows)}
    path.mkdir(parents=True, exist_ok=True)
    target = path / f"{name}.json"
    target.write_text(json.dumps(payload, indent=1, sort_keys=False) + "\n")
    return target


def load(name: str, *, directory: str | os.PathLike | None = None) -> StoredResult:
    """Read ``<name>.json`` from ``directory``, or else from the first of :func:`locations` that
    holds it. ``ValueError`` naming ``name`` if it is not a plain file stem; ``FileNotFoundError``
    naming the file, every folder looked in, and the script that writes it."""
    if not isinstance(name, str) or not name or "/" in name or "\\" in name or name.endswith(".json"):
        raise ValueError(f"name must be a stored result's file stem (as 'ch3_seeds'), got {name!r}")
    filename = f"{name}.json"
    where = [("directory=", Path(directory))] if directory is not None else locations()
    for _, folder in where:
        path = folder.joinpath(filename)
        if path.is_file():
            raw = json.loads(path.read_text(encoding="utf-8"))
            return StoredResult(raw["name"], raw["provenance"], raw["per_seed"], raw["summary"])
    looked = "; ".join(f"{label}: {folder}" for label, folder in where) or "nowhere (no folder of results found)"
    raise FileNotFoundError(f"no stored result {filename}; looked in {looked}. It is written by a script in "
                            f"scripts/results/ of the repository; set {_ENV} to a folder that holds it")


def benchmark(name: str) -> dict[str, Any]:
    """The stored benchmark record ``benchmarks/results/<name>.json`` (written by a script in
    ``benchmarks/``), as a dict: read from the repository in a checkout, else from the copy
    installed with the package. ``ValueError`` naming ``name`` if it is not a plain file stem;
    ``FileNotFoundError`` naming every folder looked in."""
    if not isinstance(name, str) or not name or "/" in name or "\\" in name or name.endswith(".json"):
        raise ValueError(f"name must be a benchmark record's file stem (as 'tied_attention'), got {name!r}")
    folders: list[Any] = []
    checkout = _REPO / "benchmarks" / "results"
    if (_REPO / "pyproject.toml").is_file() and checkout.is_dir():
        folders.append(checkout)
    try:
        packaged = importlib.resources.files(__package__).joinpath(_PACKAGED_BENCHMARKS)
    except (ModuleNotFoundError, TypeError):  # pragma: no cover - imported outside the package
        packaged = None
    if packaged is not None and packaged.is_dir():
        folders.append(packaged)
    for folder in folders:
        path = folder.joinpath(f"{name}.json")
        if path.is_file():
            return json.loads(path.read_text(encoding="utf-8"))
    looked = "; ".join(str(f) for f in folders) or "nowhere (no benchmarks/results found)"
    raise FileNotFoundError(f"no benchmark record {name}.json; looked in {looked}")


def rerun(result: StoredResult, seeds: Sequence[int] | None = None, **changes: Any) -> list[dict[str, Any]]:
    """Recompute ``seeds`` (default: the first stored seed) of ``result`` from its recorded function
    and arguments (``changes`` override arguments), serially, as rows like ``result.per_seed``."""
    fn = _resolve(result.provenance["function"])
    kwargs = {**result.provenance["kwargs"], **changes}
    seed_list = list(seeds) if seeds is not None else result.seeds[:1]
    return [_metrics(seed, fn(seed, **kwargs), result.name) for seed in seed_list]
