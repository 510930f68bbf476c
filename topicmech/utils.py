"""Seeding, threads, run mode (quick or paper scale) and the input checks shared by every module.

Every chapter's first code cell calls :func:`setup_notebook`.
"""

from __future__ import annotations

import gc
import itertools
import math
import os
import random
import sys
from collections.abc import Callable, Iterable
from typing import Any, Literal

import numpy as np
import torch

__all__ = [
    "MODE", "seed_offset", "shift_seed", "spawn_seeds", "numpy_rng", "check_seed", "run_mode", "is_full",
    "seed_everything", "setup_notebook", "make_generator", "default_device", "default_jobs", "parallel_map",
    "call_seeded", "map_seeded", "as_float64", "check_matrix", "start_method",
]

Mode = Literal["quick", "full"]


def run_mode() -> Mode:
    """The run mode from ``TOPICMECH_MODE``: ``"quick"`` (default, chapters in about a minute) or
    ``"full"`` (paper scale); ``ValueError`` for anything else."""
    mode = os.environ.get("TOPICMECH_MODE", "quick").strip().lower() or "quick"
    if mode not in ("quick", "full"):
        raise ValueError(f"TOPICMECH_MODE must be 'quick' or 'full', got {mode!r}")
    return mode  # type: ignore[return-value]


MODE: Mode = run_mode()


def is_full() -> bool:
    """True when the paper-scale mode is on (``TOPICMECH_MODE=full``)."""
    return run_mode() == "full"


def default_device() -> torch.device:
    """CUDA in full mode when present, else the CPU."""
    return torch.device("cuda") if is_full() and torch.cuda.is_available() else torch.device("cpu")


def default_jobs() -> int:
    """Worker processes for sweeps: ``TOPICMECH_JOBS`` (a positive int) when set, else one per
    available core, at most 4 (each worker imports torch: about 300 MiB)."""
    raw = os.environ.get("TOPICMECH_JOBS", "").strip()
    if not raw:
        from joblib import cpu_count  # the cores this process may use (affinity and container limits)

        return max(1, min(4, cpu_count()))
    try:
        jobs = int(raw)
    except ValueError:
        jobs = 0
    if jobs < 1:
        raise ValueError(f"TOPICMECH_JOBS must be a positive integer, got {raw!r}")
    return jobs


def parallel_map(fn: Callable[[Any], Any], items: Iterable[Any], *, n_jobs: int | None = None) -> list[Any]:
    """``[fn(x) for x in items]``, spread over ``n_jobs`` worker processes by the standard library's
    :class:`concurrent.futures.ProcessPoolExecutor`; lambdas and functions defined in a notebook work.

    On Linux the workers are forked (:func:`start_method`): they start in milliseconds, inherit
    ``fn`` and the items (a loaded model, a corpus: nothing is copied), and are gone when the call
    returns, so a Jupyter kernel shuts down as fast as without them. Otherwise they are spawned,
    ``fn`` and the items travel by cloudpickle and each worker imports torch (about 2 s), so by
    default a spawned pool has at most one worker per four items (none for fewer than eight items
    on two cores); a forked pool has up to one per item. Either way at most :func:`default_jobs`.
    Each worker runs one torch thread and one BLAS thread with this process's ``TOPICMECH_MODE`` and
    ``TOPICMECH_SEED_OFFSET``, so a result that depends only on its item's seed is the same as in
    a serial run. Results travel back by pickling.
    """
    items = list(items)
    method = start_method()
    if n_jobs is None:
        n_jobs = max(1, min(default_jobs(), len(items) if method == "fork" else len(items) // 4))
    n_jobs = check_positive_int("n_jobs", n_jobs)
    if n_jobs == 1 or len(items) < 2:
        return [fn(x) for x in items]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    env = {k: os.environ.get(k) for k in _WORKER_ENV}   # as they are now, whatever the workers inherited
    if method == "fork":    # the workers inherit fn and the items: only their indices travel
        call = next(_CALLS)
        _FORKED[call] = (fn, items)
        fn_bytes, jobs = None, [(call, i) for i in range(len(items))]
    else:                   # fresh interpreters: fn (once per worker) and the items travel by value
        import cloudpickle

        fn_bytes, jobs = cloudpickle.dumps(fn), [cloudpickle.dumps(x) for x in items]
    try:
        with ProcessPoolExecutor(max_workers=min(n_jobs, len(items)), mp_context=multiprocessing.get_context(method),
                                 initializer=_init_worker, initargs=(env, fn_bytes)) as pool:
            return list(pool.map(_in_worker, jobs))
    finally:
        if method == "fork":
            del _FORKED[call]


_FORKED: dict[int, tuple[Callable[[Any], Any], list[Any]]] = {}   # the calls of parallel_map that fork now
_CALLS = itertools.count()
_WORKER_FN: Callable[[Any], Any] | None = None                       # fn of a spawned worker


def start_method() -> Literal["fork", "spawn"]:
    """How :func:`parallel_map` starts its workers now: ``"fork"`` on Linux, ``"spawn"`` elsewhere
    (forking is unsafe on macOS and impossible on Windows) and once this process has initialised
    CUDA (a forked child cannot use it)."""
    return "fork" if sys.platform.startswith("linux") and not torch.cuda.is_initialized() else "spawn"


_WORKER_ENV = ("TOPICMECH_MODE", "TOPICMECH_SEED_OFFSET")


def call_seeded(fn: Callable[..., Any], seed: int, params: dict[str, Any], reseed: bool = True) -> Any:
    """One run of a sweep: ``fn(seed=seed, **params)`` (``fn(seed)`` when ``params`` is empty),
    after :func:`seed_everything` when ``reseed``."""
    if reseed:
        seed_everything(seed)
    return fn(seed=seed, **params) if params else fn(seed)


def map_seeded(fn: Callable[..., Any], tasks: list[tuple[int, dict[str, Any]]], reseed: bool = True, *,
               n_jobs: int | None = None) -> list[Any]:
    """:func:`call_seeded` on every ``(seed, params)`` task, spread over processes by :func:`parallel_map`."""
    return parallel_map(lambda t: call_seeded(fn, t[0], t[1], reseed), tasks, n_jobs=n_jobs)


def _init_worker(env: dict[str, str | None], fn_bytes: bytes | None) -> None:
    """Set up a worker of :func:`parallel_map` once: the caller's run mode and seed offset, one torch
    thread and one BLAS thread (two workers with two BLAS threads each would crowd two cores), and
    in a spawned worker the cloudpickled ``fn``."""
    global _WORKER_FN
    for k, v in env.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    torch.set_num_threads(1)
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)
    if fn_bytes is not None:
        import cloudpickle

        _WORKER_FN = cloudpickle.loads(fn_bytes)


def _in_worker(job: tuple[int, int] | bytes) -> Any:
    """One item of :func:`parallel_map`: ``(call, index)`` in a forked worker, a cloudpickled item in a
    spawned one."""
    if isinstance(job, tuple):
        fn, items = _FORKED[job[0]]
        return fn(items[job[1]])
    import cloudpickle

    return _WORKER_FN(cloudpickle.loads(job))


def seed_offset() -> int:
    """The shift ``TOPICMECH_SEED_OFFSET`` (a non-negative int, default 0) added to every seed the
    package uses, so one variable reruns the whole book on fresh randomness."""
    raw = os.environ.get("TOPICMECH_SEED_OFFSET", "0").strip() or "0"
    try:
        offset = int(raw)
    except ValueError:
        offset = -1
    if offset < 0:
        raise ValueError(f"TOPICMECH_SEED_OFFSET must be a non-negative integer, got {raw!r}")
    return offset


def check_seed(seed: object) -> int:
    """Raise ``ValueError`` naming ``seed`` unless it is an int in ``[0, 2**64)``; return it."""
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or not 0 <= seed < 2**64:
        raise ValueError(f"seed must be an int in [0, 2**64), got {seed!r}")
    return int(seed)


def shift_seed(seed: int) -> int:
    """``seed`` plus :func:`seed_offset`, modulo ``2**64``: the seed actually used."""
    return (check_seed(seed) + seed_offset()) % 2**64


def spawn_seeds(seed: int, n: int) -> list[int]:
    """``n`` independent child seeds of ``seed`` (``numpy.random.SeedSequence.spawn``), not yet shifted."""
    n = check_positive_int("n", n)
    return [int(c.generate_state(1)[0]) for c in np.random.SeedSequence(check_seed(seed)).spawn(n)]


def numpy_rng(seed: int) -> np.random.Generator:
    """A NumPy ``Generator`` seeded with the shifted ``seed``."""
    return np.random.default_rng(shift_seed(seed))


def seed_everything(seed: int, *, deterministic: bool | None = None) -> None:
    """Seed Python, NumPy and torch with the shifted ``seed``.

    ``deterministic`` (default: only when :func:`default_device` is CUDA) also calls
    ``torch.use_deterministic_algorithms(True, warn_only=True)``. On the CPU with one thread every
    kernel the package uses is already reproducible, and the call costs about 1 s (it imports
    ``torch._inductor``) and fills every fresh tensor with NaN."""
    seed = shift_seed(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if deterministic is None:
        deterministic = default_device().type == "cuda"
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)


def make_generator(seed: int | torch.Generator) -> torch.Generator:
    """``seed`` itself if it is a ``torch.Generator``, else a fresh CPU generator seeded with the shifted seed."""
    return seed if isinstance(seed, torch.Generator) else torch.Generator().manual_seed(shift_seed(seed))


def setup_notebook(seed: int = 0, *, threads: int = 1) -> Mode:
    """Set ``threads`` torch threads (one by default: two on two busy cores can be far slower),
    seed everything, draw figures inline in house style; return the run mode.

    It also moves every object alive at this point out of reach of the garbage collector
    (``gc.freeze``): mostly what the imports created, about 240,000 objects with torch, matplotlib
    and pandas. They live as long as the kernel anyway, and walking them all again when the kernel
    exits takes about 0.6 s per page."""
    torch.set_num_threads(check_positive_int("threads", threads))
    seed_everything(seed)
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except ImportError:  # pragma: no cover - IPython ships with the book's requirements
        shell = None
    if shell is not None and shell.__class__.__name__ == "ZMQInteractiveShell":
        shell.run_line_magic("matplotlib", "inline")  # even if MPLBACKEND=Agg is set
    from . import plotting  # local import: plotting pulls in matplotlib

    plotting.set_style()
    global _IMPORTS_FROZEN
    if not _IMPORTS_FROZEN:            # once: a later call would also freeze the session's own objects
        gc.freeze()
        _IMPORTS_FROZEN = True
    return run_mode()


_IMPORTS_FROZEN = False


def check_positive_int(name: str, value: object) -> int:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is an int >= 1; return it."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def check_seeds(seeds: Iterable[int] | int) -> list[int]:
    """Distinct non-negative seeds as a list (an int ``n`` means ``range(n)``); ``ValueError`` naming ``seeds``."""
    if isinstance(seeds, (int, np.integer)) and not isinstance(seeds, bool):
        seeds = range(check_positive_int("seeds", seeds))
    if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Iterable):
        raise ValueError(f"seeds must be an int or an iterable of ints, got {seeds!r}")
    out = list(seeds)
    if (not out or any(isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 0 for s in out)
            or len(set(out)) != len(out)):
        raise ValueError(f"seeds must be a non-empty list of distinct non-negative ints, got {out!r}")
    return [int(s) for s in out]


def check_choice(name: str, value: object, options: tuple[str, ...]) -> str:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is one of ``options``; return it."""
    if not isinstance(value, str) or value not in options:
        raise ValueError(f"{name} must be one of {options}, got {value!r}")
    return value


def _as_float(value: object) -> float:
    """``float(value)``, or NaN for a bool, a string or anything that does not convert."""
    try:
        return math.nan if isinstance(value, (bool, str, bytes)) else float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan


def as_float64(x: torch.Tensor | np.ndarray | Any) -> np.ndarray:
    """``x`` as a float64 NumPy array; a tensor is detached and moved to the CPU first. No copy is
    made when ``x`` already is float64 on the CPU: copy the result before changing it in place."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().double().numpy()
    return np.asarray(x, dtype=np.float64)


def check_float(name: str, value: object, *, positive: bool = True) -> float:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is a finite float > 0 (>= 0 if not
    ``positive``); return it as a float."""
    x = _as_float(value)
    if not math.isfinite(x) or x < 0 or (positive and x == 0):
        raise ValueError(f"{name} must be a finite float {'> 0' if positive else '>= 0'}, got {value!r}")
    return x


def check_matrix(name: str, x: torch.Tensor | np.ndarray | Any, *, shape: tuple[int, int] | None = None,
                 square: bool = False) -> np.ndarray:
    """``x`` as a new float64 2-D NumPy array (a copy, safe to change in place), else ``ValueError``
    naming ``name``: not an array, not 2-D, not ``shape`` or, with ``square``, not square."""
    try:
        M = np.array(as_float64(x))
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an array, got {type(x).__name__}") from None
    if M.ndim != 2:
        raise ValueError(f"{name} must be a 2-D matrix, got shape {M.shape}")
    if square and M.shape[0] != M.shape[1]:
        raise ValueError(f"{name} must be square, got shape {M.shape}")
    if shape is not None and M.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {M.shape}")
    return M


def check_probability(name: str, value: object) -> float:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is a float in [0, 1]; return it."""
    p = _as_float(value)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{name} must be a probability in [0, 1], got {value!r}")
    return p


def check_masking(mask_prob: float, keep_prob: float, random_prob: float) -> tuple[float, float, float]:
    """Check the BERT corruption probabilities (``keep_prob + random_prob <= 1``); return them as floats."""
    p_m = check_probability("mask_prob", mask_prob)
    p_c = check_probability("keep_prob", keep_prob)
    p_r = check_probability("random_prob", random_prob)
    if p_c + p_r > 1.0 + 1e-12:
        raise ValueError(f"keep_prob + random_prob must be <= 1, got keep_prob={keep_prob!r}, "
                         f"random_prob={random_prob!r}")
    return p_m, p_c, p_r
