"""Seeded sweeps and the process pool that runs them, locally or on any executor.

:func:`run_seeds` and :func:`run_grid` call a function once per seed (and grid point) and collect
a :class:`Sweep`; :func:`sweep_axes` varies one parameter at a time; :func:`tidy` and
:func:`aggregate` turn results into tables. Every entry point runs its calls through
:func:`parallel_map`: by default a local pool of forked worker processes, or any
``concurrent.futures.Executor`` given as ``executor`` (a ``ProcessPoolExecutor``, a
``dask.distributed`` client's ``get_executor()``). Each call seeds itself, so the results are the
same as in a serial run, in submission order, wherever they ran.
"""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from .utils import check_positive_int, check_seeds, seed_everything

__all__ = [
    "Sweep", "run_seeds", "run_grid", "sweep_axes", "tidy", "aggregate", "parallel_map", "map_seeded", "call_seeded",
    "start_method", "default_jobs",
]


def default_jobs() -> int:
    """Worker processes of the local pool: ``TOPICMECH_JOBS`` (a positive int) when set, else one per
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


def parallel_map(fn: Callable[[Any], Any], items: Iterable[Any], *, n_jobs: int | None = None,
                 executor: Executor | None = None) -> list[Any]:
    """``[fn(x) for x in items]``, run by ``executor`` or by a local pool of ``n_jobs`` worker
    processes; lambdas and functions defined in a notebook work either way.

    ``executor=None`` (default): the standard library's ``concurrent.futures.ProcessPoolExecutor``,
    made for this call. On Linux the workers are forked (:func:`start_method`): they start in
    milliseconds, inherit ``fn`` and the items (a loaded model, a corpus: nothing is copied), and
    are gone when the call returns, so a Jupyter kernel shuts down as fast as without them.
    Otherwise they are spawned, ``fn`` and the items travel by cloudpickle and each worker imports
    torch (about 2 s), so by default a spawned pool has at most one worker per four items (none for
    fewer than eight items on two cores); a forked pool has up to one per item. Either way at most
    :func:`default_jobs`. Each worker runs one torch thread and one BLAS thread.

    ``executor``: any ``concurrent.futures.Executor`` (a ``ProcessPoolExecutor``, a
    ``ThreadPoolExecutor``, ``dask.distributed.Client(...).get_executor()``) runs the calls as
    given (``n_jobs`` must then be None): ``fn`` and each item travel by cloudpickle, the workers
    need ``topicmech`` installed and keep their own thread settings. Threads share this process's
    global random state: there, only a ``fn`` that draws from its own generators gives serial results.

    Every call runs with this process's ``TOPICMECH_MODE`` and ``TOPICMECH_SEED_OFFSET``, so a
    result that depends only on its item's seed is the same as in a serial run. Results travel
    back by pickling and come in the order of ``items``.
    """
    items = list(items)
    if executor is not None:
        if not callable(getattr(executor, "submit", None)):
            raise ValueError(f"executor must be a concurrent.futures.Executor, got {executor!r}")
        if n_jobs is not None:
            raise ValueError(f"n_jobs sizes the local pool only, got n_jobs={n_jobs!r} with an executor")
        return _map_on(executor, fn, items)
    method = start_method()
    if n_jobs is None:
        n_jobs = max(1, min(default_jobs(), len(items) if method == "fork" else len(items) // 4))
    n_jobs = check_positive_int("n_jobs", n_jobs)
    if n_jobs == 1 or len(items) < 2:
        return [fn(x) for x in items]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    env = _caller_env()   # as they are now, whatever the workers inherited
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
_WORKER_ENV = ("TOPICMECH_MODE", "TOPICMECH_SEED_OFFSET")


def start_method() -> Literal["fork", "spawn"]:
    """How the local pool of :func:`parallel_map` starts its workers now: ``"fork"`` on Linux,
    ``"spawn"`` elsewhere (forking is unsafe on macOS and impossible on Windows) and once this
    process has initialised CUDA (a forked child cannot use it)."""
    return "fork" if sys.platform.startswith("linux") and not torch.cuda.is_initialized() else "spawn"


def call_seeded(fn: Callable[..., Any], seed: int, params: dict[str, Any], reseed: bool = True) -> Any:
    """One run of a sweep: ``fn(seed=seed, **params)`` (``fn(seed)`` when ``params`` is empty),
    after :func:`topicmech.utils.seed_everything` when ``reseed``."""
    if reseed:
        seed_everything(seed)
    return fn(seed=seed, **params) if params else fn(seed)


def map_seeded(fn: Callable[..., Any], tasks: list[tuple[int, dict[str, Any]]], reseed: bool = True, *,
               n_jobs: int | None = None, executor: Executor | None = None) -> list[Any]:
    """:func:`call_seeded` on every ``(seed, params)`` task, run by :func:`parallel_map`."""
    return parallel_map(lambda t: call_seeded(fn, t[0], t[1], reseed), tasks, n_jobs=n_jobs, executor=executor)


def _caller_env() -> dict[str, str | None]:
    """The variables every call of :func:`parallel_map` runs with, as they are in this process now."""
    return {k: os.environ.get(k) for k in _WORKER_ENV}


def _set_env(env: dict[str, str | None]) -> None:
    """Set (or unset) the variables of :func:`_caller_env` where they differ."""
    for k, v in env.items():
        if os.environ.get(k) != v:
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _init_worker(env: dict[str, str | None], fn_bytes: bytes | None) -> None:
    """Set up a worker of the local pool once: the caller's run mode and seed offset, one torch
    thread and one BLAS thread (two workers with two BLAS threads each would crowd two cores), and
    in a spawned worker the cloudpickled ``fn``."""
    global _WORKER_FN
    _set_env(env)
    torch.set_num_threads(1)
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)
    if fn_bytes is not None:
        import cloudpickle

        _WORKER_FN = cloudpickle.loads(fn_bytes)


def _in_worker(job: tuple[int, int] | bytes) -> Any:
    """One item of the local pool: ``(call, index)`` in a forked worker, a cloudpickled item in a
    spawned one."""
    if isinstance(job, tuple):
        fn, items = _FORKED[job[0]]
        return fn(items[job[1]])
    import cloudpickle

    return _WORKER_FN(cloudpickle.loads(job))


def _map_on(executor: Executor, fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
    """:func:`parallel_map` on a given executor: one task per item, results in submission order."""
    import cloudpickle

    env, fn_bytes = _caller_env(), cloudpickle.dumps(fn)
    futures = [executor.submit(_call_pickled, env, fn_bytes, cloudpickle.dumps(x)) for x in items]
    try:
        return [f.result() for f in futures]
    except BaseException:
        for f in futures:
            f.cancel()
        raise


def _call_pickled(env: dict[str, str | None], fn_bytes: bytes, item_bytes: bytes) -> Any:
    """One task of :func:`parallel_map` on an executor: the caller's variables, then ``fn(item)``."""
    import cloudpickle

    _set_env(env)
    return cloudpickle.loads(fn_bytes)(cloudpickle.loads(item_bytes))


@dataclass
class Sweep:
    """Results of :func:`run_seeds` or :func:`run_grid`.

    ``records`` holds one dict per call: its parameters (``"seed"`` and any grid keys) and,
    under ``"result"``, what the function returned (:func:`tidy` makes rows).
    """

    records: list[dict[str, Any]]

    def __len__(self) -> int:
        return len(self.records)

    @property
    def seeds(self) -> list[int]:
        """The seed of each record."""
        return [r["seed"] for r in self.records]

    @property
    def results(self) -> list[Any]:
        """What the function returned, one entry per record."""
        return [r["result"] for r in self.records]

    def select(self, **where: Any) -> Sweep:
        """The records whose parameters equal ``where`` (e.g. ``sweep.select(doc_len=20)``)."""
        for k in [k for k in where if self.records and k not in self.records[0]]:
            raise ValueError(f"no parameter {k!r}; parameters: {sorted(set(self.records[0]) - {'result'})}")
        return Sweep([r for r in self.records if all(r[k] == v for k, v in where.items())])

    def values(self, key: str | Callable[[Any], Any] | None = None, **where: Any) -> np.ndarray:
        """Stack ``result[key]`` (mappings), ``result.key``, ``key(result)`` (callable) or the result (None).

        Only records matching ``where`` (as in :meth:`select`) count.
        """

        def get(res: Any) -> Any:
            if key is None or callable(key):
                return res if key is None else key(res)
            if isinstance(res, Mapping):
                if key not in res:
                    raise ValueError(f"no entry {key!r} in the results; entries: {sorted(res)}")
                return res[key]
            if not hasattr(res, key):
                raise ValueError(f"result of type {type(res).__name__} has no attribute {key!r}")
            return getattr(res, key)

        out = [get(res) for res in self.select(**where).results]
        return np.asarray(out, dtype=float) if all(np.isscalar(o) for o in out) else np.asarray(out)


def _sweep(fn: Callable[..., Any], grid: Mapping[str, list], seeds: Iterable[int] | int, reseed: bool,
           n_jobs: int | None, executor: Executor | None) -> Sweep:
    if not callable(fn):
        raise ValueError(f"fn must be callable, got {fn!r}")
    seed_list = check_seeds(seeds)
    tasks = [(seed, dict(zip(grid, combo))) for combo in itertools.product(*grid.values()) for seed in seed_list]
    results = map_seeded(fn, tasks, reseed, n_jobs=n_jobs, executor=executor)
    return Sweep([{"seed": seed, **params, "result": res} for (seed, params), res in zip(tasks, results)])


def run_seeds(fn: Callable[[int], Any], seeds: Iterable[int] | int, *, reseed: bool = True,
              n_jobs: int | None = None, executor: Executor | None = None) -> Sweep:
    """Call ``fn(seed)`` once per seed; records ``{"seed": seed, "result": fn(seed)}`` in order.

    ``fn`` should pass ``seed`` to every random call; ``seeds``: distinct non-negative ints,
    or ``n`` for ``range(n)``; ``reseed`` also calls :func:`topicmech.utils.seed_everything`
    before each call; the calls run on ``executor``, or else on ``n_jobs`` local processes
    (:func:`parallel_map`), with the same results either way.
    """
    return _sweep(fn, {}, seeds, reseed, n_jobs, executor)


def run_grid(
    fn: Callable[..., Any], grid: Mapping[str, Sequence[Any]], seeds: Iterable[int] | int = 1, *, reseed: bool = True,
    n_jobs: int | None = None, executor: Executor | None = None,
) -> Sweep:
    """Call ``fn(seed=seed, **params)`` for every combination of ``grid`` and every seed.

    ``grid`` maps names to values, swept in the order given with seeds innermost; ``seeds``,
    ``reseed``, ``n_jobs`` and ``executor`` as in :func:`run_seeds` (default: seed 0). Records: ``{"seed", **params, "result"}``.

    Examples
    --------
    >>> sweep = run_grid(lambda seed, n: {"y": n * 10 + seed}, {"n": [1, 2]}, seeds=2)
    >>> sweep.values("y", n=2)
    array([20., 21.])
    """
    if not isinstance(grid, Mapping) or not grid:
        raise ValueError(f"grid must be a non-empty mapping of parameter names to values, got {grid!r}")
    axes = {k: [] if isinstance(v, (str, bytes)) or not isinstance(v, Iterable) else list(v) for k, v in grid.items()}
    for k in [k for k, v in axes.items() if k in ("seed", "result") or not v]:
        raise ValueError(f"grid[{k!r}] = {grid[k]!r}: need a non-empty sequence and a key other than 'seed', 'result'")
    return _sweep(fn, axes, seeds, reseed, n_jobs, executor)


def _is_scalar(x: object) -> bool:
    return isinstance(x, (bool, int, float, str, np.integer, np.floating, np.bool_)) or x is None


def _plain(x: object) -> object:
    return x.item() if isinstance(x, (np.bool_, np.integer, np.floating)) else x


def tidy(sweep: Sweep, keys: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Flatten a :class:`Sweep` of mappings into rows ``{"seed", <parameters>, <results>}``.

    ``keys`` selects result entries (default: every scalar one); values become Python scalars.

    Examples
    --------
    >>> def fn(seed, n):
    ...     return {"y": n + seed, "arr": [1, 2]}
    >>> sweep = run_grid(fn, {"n": [10, 20]}, seeds=2)
    >>> tidy(sweep)[1]
    {'seed': 1, 'n': 10, 'y': 11}
    """
    if not isinstance(sweep, Sweep):
        raise ValueError(f"sweep must be a topicmech.runner.Sweep, got {type(sweep).__name__}")
    rows = []
    for rec in sweep.records:
        res = rec["result"]
        if not isinstance(res, Mapping):
            raise ValueError(f"tidy needs results that are mappings, got {type(res).__name__}")
        row = {k: _plain(v) for k, v in rec.items() if k != "result"}
        for k in (res if keys is None else keys):
            if k not in res:
                raise ValueError(f"no entry {k!r} in the results; entries: {sorted(res)}")
            if k in row:
                raise ValueError(f"result entry {k!r} clashes with a parameter of the same name")
            if _is_scalar(res[k]):
                row[k] = _plain(res[k])
            elif keys is not None:
                raise ValueError(f"result entry {k!r} is not a scalar (type {type(res[k]).__name__})")
        rows.append(row)
    return rows


def sweep_axes(fn: Callable[..., Mapping[str, Any]], axes: Mapping[str, Sequence[Any]], seeds: Iterable[int] | int, *,
               base: Mapping[str, Any] | None = None, reseed: bool = True,
               n_jobs: int | None = None, executor: Executor | None = None) -> list[dict[str, Any]]:
    """Vary one parameter at a time around ``base``, over several seeds; return tidy rows.

    Unlike :func:`run_grid` (the product of the axes), each axis of ``axes``
    (name to values) is swept with the others at ``base``; shared points run once. ``fn(seed=seed,
    **params)`` returns a mapping; ``reseed`` calls :func:`topicmech.utils.seed_everything` first;
    the distinct points run on ``executor`` or ``n_jobs`` local processes, as in :func:`run_seeds`.
    Rows ``{"param", "value", "seed", <scalar results>}`` by axis, value, seed.

    Examples
    --------
    >>> def fn(seed, a=0, b=0):
    ...     return {"y": 10 * a + b}
    >>> rows = sweep_axes(fn, {"a": [1, 2], "b": [5]}, seeds=1)
    >>> [(r["param"], r["value"], r["y"]) for r in rows]
    [('a', 1, 10), ('a', 2, 20), ('b', 5, 5)]
    """
    if not callable(fn):
        raise ValueError(f"fn must be callable, got {fn!r}")
    if not isinstance(axes, Mapping) or not axes:
        raise ValueError(f"axes must be a non-empty mapping of parameter names to values, got {axes!r}")
    base = dict(base or {})
    axes = {k: [] if isinstance(v, (str, bytes)) or not isinstance(v, Iterable) else list(v) for k, v in axes.items()}
    for k, vals in axes.items():
        if k in ("seed", "param", "value"):
            raise ValueError(f"axis names must not be 'seed', 'param' or 'value', got {k!r}")
        if not vals:
            raise ValueError(f"axes[{k!r}] must be a non-empty sequence, got {vals!r}")
    seed_list = check_seeds(seeds)
    points = [(axis, value, seed, {**base, axis: value}) for axis, vals in axes.items() for value in vals
              for seed in seed_list]
    keys = [(seed, tuple(sorted((k, repr(v)) for k, v in params.items()))) for _, _, seed, params in points]
    tasks = {key: (seed, params) for key, (_, _, seed, params) in zip(keys, points)}   # shared points run once
    results = dict(zip(tasks, map_seeded(fn, list(tasks.values()), reseed, n_jobs=n_jobs,
                                                executor=executor)))
    rows = []
    for key, (axis, value, seed, _) in zip(keys, points):
        if not isinstance(results[key], Mapping):
            raise ValueError(f"fn must return a mapping, got {type(results[key]).__name__}")
        row: dict[str, Any] = {"param": axis, "value": _plain(value), "seed": seed}
        row.update({k: _plain(v) for k, v in results[key].items() if _is_scalar(v) and k not in row})
        rows.append(row)
    return rows


def aggregate(rows: Sequence[Mapping[str, Any]], by: Sequence[str], values: Sequence[str]) -> list[dict[str, Any]]:
    """Group tidy rows by the ``by`` columns (first-seen order; empty: one group) and summarise ``values``.

    Each group's row holds the ``by`` columns, ``"{col}_mean"``, ``"{col}_std"`` (sample, 0 for
    one row), ``"{col}_min"``, ``"{col}_max"`` and ``"count"``.

    Examples
    --------
    >>> rows = [{"n": 1, "y": 1.0}, {"n": 1, "y": 3.0}, {"n": 2, "y": 5.0}]
    >>> aggregate(rows, ["n"], ["y"])[0]["y_mean"]
    2.0
    """
    if isinstance(by, str) or isinstance(values, str):
        raise ValueError("by and values must be sequences of column names, not strings")
    if not rows:
        raise ValueError("rows must not be empty")
    for col in (*by, *values):
        if any(col not in r for r in rows):
            raise ValueError(f"column {col!r} is missing from some rows; columns: {sorted(rows[0])}")
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for r in rows:
        groups.setdefault(tuple(r[c] for c in by), []).append(r)
    out = []
    for key, members in groups.items():
        row: dict[str, Any] = dict(zip(by, key))
        for col in values:
            x = np.asarray([m[col] for m in members], dtype=float)
            row.update({f"{col}_mean": float(x.mean()), f"{col}_std": float(x.std(ddof=1)) if x.size > 1 else 0.0,
                        f"{col}_min": float(x.min()), f"{col}_max": float(x.max())})
        row["count"] = len(members)
        out.append(row)
    return out
