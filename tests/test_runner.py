"""Tests for topicmech.runner: the seeded sweeps, the local process pool and any given executor."""

from __future__ import annotations

import os
import sys
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass

import cloudpickle
import numpy as np
import pytest
import torch

from topicmech import runner, utils
from topicmech.data import SimplifiedTopicModel
from topicmech.model import OneLayerTransformer
from topicmech.train import train as train_model


@dataclass
class Times:
    first: int
    second: int

    @property
    def ratio(self) -> float:
        return self.second / self.first


def _train_point(seed: int, lr: float) -> list[float]:
    """A short training that depends only on its seed and learning rate (its own generators)."""
    model = OneLayerTransformer(7, attention="learned", value="learned", seed=seed, attend_to_masked=True)
    hist = train_model(model, SimplifiedTopicModel(3, 2, 1), steps=5, batch_size=8, doc_len=6, lr=lr, seed=seed)
    return hist.loss


def _reseeded_point(seed: int, lr: float) -> list[float]:
    """As :func:`_train_point`, plus a draw from the global torch RNG (reseeded before each call)."""
    return _train_point(seed, lr) + [float(torch.rand(1))]


GRID = {"lr": [0.1, 0.2]}
SEEDS = [0, 3]


# ---- the local pool ------------------------------------------------------------------------


def test_parallel_map_matches_a_list_comprehension(monkeypatch):
    items = [3, 1, 2]
    assert runner.parallel_map(lambda x: x * x, items, n_jobs=2) == [9, 1, 4]
    assert runner.parallel_map(lambda x: x * x, items, n_jobs=1) == [9, 1, 4]
    assert runner.parallel_map(lambda x: torch.get_num_threads(), items, n_jobs=2) == [1, 1, 1]
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:                                                       # the worker's wrapper itself sets one thread
        from threadpoolctl import threadpool_limits

        with threadpool_limits(None):                          # restores this process's BLAS threads after
            runner._init_worker({}, cloudpickle.dumps(lambda x: torch.get_num_threads()))
            assert runner._in_worker(cloudpickle.dumps(0)) == 1
    finally:
        torch.set_num_threads(threads)
    monkeypatch.setenv("TOPICMECH_SEED_OFFSET", "7")           # workers see the caller's current offset
    assert runner.parallel_map(lambda x: (os.environ["TOPICMECH_SEED_OFFSET"], utils.shift_seed(x)), [0, 1], n_jobs=2) \
        == [("7", utils.shift_seed(0)), ("7", utils.shift_seed(1))]
    monkeypatch.delenv("TOPICMECH_SEED_OFFSET")
    monkeypatch.setenv("TOPICMECH_JOBS", "3")
    assert runner.default_jobs() == 3
    monkeypatch.delenv("TOPICMECH_JOBS")
    import joblib
    for cores, jobs in ((16, 4), (2, 2), (1, 1)):                # one per core, at most four
        monkeypatch.setattr(joblib, "cpu_count", lambda cores=cores: cores)
        assert runner.default_jobs() == jobs
    monkeypatch.setenv("TOPICMECH_JOBS", "2")
    seen = []                                                   # forked workers: one per item, up to n_jobs
    assert runner.parallel_map(lambda x: seen.append(x) or x, range(3)) == list(range(3)) and seen == []
    monkeypatch.setattr(runner, "start_method", lambda: "spawn")  # spawned: one worker per four items,
    assert runner.parallel_map(lambda x: seen.append(x) or x, range(7)) == list(range(7)) and seen == list(range(7))
    monkeypatch.delenv("TOPICMECH_JOBS")                        # so seven items stay in this process
    for bad in ("0", "-1", "two"):
        monkeypatch.setenv("TOPICMECH_JOBS", bad)
        with pytest.raises(ValueError, match="TOPICMECH_JOBS"):
            runner.default_jobs()
    with pytest.raises(ValueError, match="n_jobs"):
        runner.parallel_map(abs, items, n_jobs=0)


def test_parallel_map_spawned_workers_run_notebook_functions(monkeypatch):
    # the path taken off Linux: fresh interpreters that receive fn by value (cloudpickle)
    monkeypatch.setattr(runner, "start_method", lambda: "spawn")
    offset = 5
    assert runner.parallel_map(lambda x: (x + offset, torch.get_num_threads()), [1, 2], n_jobs=2) == [(6, 1), (7, 1)]


def test_start_method(monkeypatch):
    assert runner.start_method() == ("fork" if sys.platform.startswith("linux") else "spawn")
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)    # a forked child could not use CUDA
    assert runner.start_method() == "spawn"


def test_parallel_map_leaves_no_worker_behind():
    import psutil

    before = {p.pid for p in psutil.Process().children(recursive=True)}   # e.g. a spawned pool's resource tracker
    assert os.getpid() not in runner.parallel_map(lambda _: os.getpid(), range(4), n_jobs=2)   # ran in workers
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before


# ---- sweeps ---------------------------------------------------------------------------------


def test_run_seeds_collects_in_order():
    sweep = runner.run_seeds(lambda seed: {"x": float(seed), "arr": np.arange(3) + seed}, [3, 1, 2])
    assert sweep.seeds == [3, 1, 2] and len(sweep) == 3
    np.testing.assert_array_equal(sweep.values("x"), [3.0, 1.0, 2.0])
    assert sweep.values("arr").shape == (3, 3)
    np.testing.assert_array_equal(sweep.values(lambda r: r["x"] * 2), [6.0, 2.0, 4.0])
    assert runner.run_seeds(lambda s: s, 4).seeds == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="no entry"):
        sweep.values("y")


def test_run_seeds_reads_attributes_and_reseeds_global_state():
    sweep = runner.run_seeds(lambda seed: Times(10, 10 * (seed + 1)), 3)
    np.testing.assert_array_equal(sweep.values("ratio"), [1.0, 2.0, 3.0])
    a = runner.run_seeds(lambda seed: float(torch.rand(1)), [5, 6])
    b = runner.run_seeds(lambda seed: float(torch.rand(1)), [5, 6])
    np.testing.assert_array_equal(a.values(), b.values())
    with pytest.raises(ValueError, match="attribute"):
        sweep.values("nope")


@pytest.mark.parametrize("seeds", [[], [1, 1], [-1], [True], 0])
def test_run_seeds_rejects_bad_seeds(seeds):
    with pytest.raises(ValueError, match="seeds"):
        runner.run_seeds(lambda s: s, seeds)


def test_run_grid_in_two_processes_matches_one():
    """Results depend only on the seed and the parameters, so two processes give the serial sweep."""
    one, two = (runner.run_grid(_reseeded_point, GRID, seeds=SEEDS, n_jobs=n) for n in (1, 2))
    assert [r["seed"] for r in two.records] == [0, 3, 0, 3]
    gen = runner.run_grid(lambda seed, n: n + seed, {"n": [1, 2]}, seeds=(s for s in [0, 3]))  # read once
    assert [r["result"] for r in gen.records] == [1, 4, 2, 5]
    assert [r["result"] for r in two.records] == [r["result"] for r in one.records]


def test_run_grid_sweeps_the_product_with_seeds_innermost():
    calls = []

    def fn(seed, n, k):
        calls.append((n, k, seed))
        return {"y": 100 * n + 10 * k + seed}

    sweep = runner.run_grid(fn, {"n": [1, 2], "k": [0, 1]}, seeds=2)
    assert calls[:3] == [(1, 0, 0), (1, 0, 1), (1, 1, 0)] and len(sweep) == 8
    np.testing.assert_array_equal(sweep.values("y", n=2, k=1), [210.0, 211.0])
    assert len(sweep.select(n=1)) == 4
    assert len(sweep.values("y", k=0)) == 4 and sweep.select(n=2, k=1).seeds == [0, 1]
    with pytest.raises(ValueError, match="parameter"):
        sweep.select(m=1)
    with pytest.raises(ValueError, match="grid"):
        runner.run_grid(fn, {})
    with pytest.raises(ValueError, match="seed"):
        runner.run_grid(fn, {"seed": [1]})
    with pytest.raises(ValueError, match="non-empty"):
        runner.run_grid(fn, {"n": []})


def test_docstring_examples_run():
    import doctest

    result = doctest.testmod(runner)
    assert result.attempted > 0 and result.failed == 0, result


# ---- tables --------------------------------------------------------------------------------


def test_tidy_and_aggregate():
    sweep = runner.run_grid(lambda seed, n: {"y": float(n + seed), "arr": np.zeros(2), "k": np.int64(3)},
                              {"n": [1, 2]}, seeds=3)
    rows = runner.tidy(sweep)
    assert rows[0] == {"seed": 0, "n": 1, "y": 1.0, "k": 3} and type(rows[0]["k"]) is int
    assert runner.tidy(sweep, keys=["y"])[4] == {"seed": 1, "n": 2, "y": 3.0}
    agg = runner.aggregate(rows, ["n"], ["y"])
    assert [a["n"] for a in agg] == [1, 2]
    assert agg[1]["y_mean"] == 3.0 and agg[1]["y_std"] == pytest.approx(1.0) and agg[1]["y_min"] == 2.0
    assert runner.aggregate(rows, [], ["y"])[0]["count"] == 6 and agg[0]["count"] == 3
    with pytest.raises(ValueError, match="not a scalar"):
        runner.tidy(sweep, keys=["arr"])
    with pytest.raises(ValueError, match="no entry"):
        runner.tidy(sweep, keys=["z"])
    with pytest.raises(ValueError, match="clashes"):
        runner.tidy(runner.run_grid(lambda seed, n: {"n": 1.0}, {"n": [1]}))
    with pytest.raises(ValueError, match="mappings"):
        runner.tidy(runner.run_seeds(lambda seed: 1.0, 2))
    with pytest.raises(ValueError, match="Sweep"):
        runner.tidy([{"a": 1}])
    with pytest.raises(ValueError, match="missing"):
        runner.aggregate(rows, ["m"], ["y"])
    with pytest.raises(ValueError, match="sequences"):
        runner.aggregate(rows, "n", ["y"])
    with pytest.raises(ValueError, match="empty"):
        runner.aggregate([], ["n"], ["y"])


def test_sweep_axes_order_and_cache():
    calls = []

    def fn(seed, a=0, b=0):
        calls.append((seed, a, b))
        return {"y": 10 * a + b + seed / 10, "arr": np.ones(3)}

    rows = runner.sweep_axes(fn, {"a": [1, 2], "b": [0, 5]}, seeds=[0, 1], base={"a": 1, "b": 0})
    assert [(r["param"], r["value"], r["seed"]) for r in rows] == [
        ("a", 1, 0), ("a", 1, 1), ("a", 2, 0), ("a", 2, 1), ("b", 0, 0), ("b", 0, 1), ("b", 5, 0), ("b", 5, 1)]
    assert "arr" not in rows[0] and rows[-1]["y"] == pytest.approx(15.1)
    assert len(calls) == 6                                                # the base point (a=1, b=0) runs once per seed
    with pytest.raises(ValueError, match="axes"):
        runner.sweep_axes(fn, {}, seeds=1)
    with pytest.raises(ValueError, match="axis names"):
        runner.sweep_axes(fn, {"seed": [1]}, seeds=1)
    with pytest.raises(ValueError, match="seeds"):
        runner.sweep_axes(fn, {"a": [1]}, seeds=[0, 0])
    with pytest.raises(ValueError, match="mapping"):
        runner.sweep_axes(lambda seed, a: 1.0, {"a": [1]}, seeds=1)


def test_sweep_axes_in_two_processes_matches_one():
    def fn(seed, a=0):
        return {"y": float(torch.rand(1)) + a}          # global torch RNG, reseeded per point

    one = runner.sweep_axes(fn, {"a": [0, 1]}, seeds=[0, 1], n_jobs=1)
    assert runner.sweep_axes(fn, {"a": [0, 1]}, seeds=[0, 1], n_jobs=2) == one
    assert runner.sweep_axes(fn, {"a": (a for a in [0, 1])}, seeds=[0, 1], n_jobs=1) == one   # an axis read once


# ---- any executor ---------------------------------------------------------------------------


def test_a_thread_pool_gives_the_serial_results():
    serial = runner.run_grid(_train_point, GRID, SEEDS, n_jobs=1)
    with ThreadPoolExecutor(max_workers=2) as pool:
        threaded = runner.run_grid(_train_point, GRID, SEEDS, executor=pool)
    assert threaded.records == serial.records
    with ThreadPoolExecutor(max_workers=2) as pool:
        assert runner.parallel_map(lambda x: x * x, [3, 1, 2], executor=pool) == [9, 1, 4]


def test_a_process_pool_gives_the_serial_results(monkeypatch):
    monkeypatch.setenv("TOPICMECH_SEED_OFFSET", "3")          # the workers run with the caller's offset
    serial = runner.run_grid(_reseeded_point, GRID, SEEDS, n_jobs=1)
    rows = runner.sweep_axes(lambda seed, a=0: {"y": float(torch.rand(1)) + a}, {"a": [0, 1]}, SEEDS, n_jobs=1)
    with ProcessPoolExecutor(max_workers=2) as pool:
        pooled = runner.run_grid(_reseeded_point, GRID, SEEDS, executor=pool)
        assert runner.sweep_axes(lambda seed, a=0: {"y": float(torch.rand(1)) + a}, {"a": [0, 1]}, SEEDS,
                                 executor=pool) == rows
        seeds = runner.run_seeds(lambda seed: utils.shift_seed(seed), SEEDS, executor=pool)
    assert pooled.records == serial.records
    assert seeds.results == [3, 6]


def test_executor_errors():
    with pytest.raises(ValueError, match="executor"):
        runner.parallel_map(abs, [1], executor="dask")
    with ThreadPoolExecutor(max_workers=1) as pool:
        with pytest.raises(ValueError, match="n_jobs"):
            runner.run_seeds(lambda s: s, 2, n_jobs=2, executor=pool)
        with pytest.raises(ZeroDivisionError):                # an error in a call reaches the caller
            runner.parallel_map(lambda x: 1 / x, [1, 0], executor=pool)


def test_a_dask_cluster_gives_the_serial_results():
    distributed = pytest.importorskip("distributed")
    serial = runner.run_grid(_reseeded_point, GRID, SEEDS, n_jobs=1)
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        on_dask = runner.run_grid(_reseeded_point, GRID, SEEDS, executor=client.get_executor())
    assert on_dask.records == serial.records
