"""Benchmark 7: which engine should run the book's small sweeps?

One sweep of the size the chapters run (``seeds`` stage-1 trainings of chapter 7's setting,
:func:`topicmech.sweeps.stage1_point`, T = 10, v = 4, tau = 2, N = 32, about 0.1-0.3 s each)
through :func:`topicmech.runner.run_seeds`, on four engines:

* ``serial``: ``n_jobs=1``, one call after another in this process;
* ``local pool (default)``: ``executor=None``, the package's default, a pool of forked workers
  started for the sweep (on Linux; spawned elsewhere);
* ``ProcessPoolExecutor (spawn)``: the standard library's pool with fresh interpreters, started
  for the sweep and passed as ``executor=``;
* ``dask LocalCluster``: ``dask.distributed`` with two worker processes of one thread each,
  ``executor=client.get_executor()``; timed once with the cluster's start-up included and once
  on a cluster already running (the way a researcher keeps one open for many sweeps).

Every engine returns exactly the serial results (asserted). Times are wall-clock seconds for the
whole sweep, median, minimum and maximum over ``--runs`` repetitions; each worker uses one
torch thread.

    python benchmarks/bench_executors.py [--runs 3] [--seeds 4 8 16]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

WORKERS = 2


def point(seed: int) -> float:
    """One sweep point: chapter 7's stage-1 training (squared loss, SGD), its topic gap."""
    import topicmech as tm
    from topicmech import sweeps

    setting = tm.Setting(10, 4, 2, 32, attend_to_masked=False)
    out = sweeps.stage1_point(seed, setting=setting, optimizer="sgd", lr=10.0, steps=300,
                              anneal_steps=100)
    return float(out["topic_gap"])


def timed(fn) -> tuple[float, list[float]]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seeds", type=int, nargs="+", default=[4, 8, 16])
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch
    from dask.distributed import Client, LocalCluster

    from topicmech import runner

    torch.set_num_threads(1)

    def sweep(seeds, **kw):
        return list(runner.run_seeds(point, range(seeds), **kw).results)

    def spawn_pool(seeds):
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=WORKERS, mp_context=ctx) as pool:
            return sweep(seeds, executor=pool)

    def dask_cold(seeds):
        with LocalCluster(n_workers=WORKERS, threads_per_worker=1, processes=True,
                          dashboard_address=":0") as cluster, Client(cluster) as client:
            return sweep(seeds, executor=client.get_executor(pure=False))

    cluster = LocalCluster(n_workers=WORKERS, threads_per_worker=1, processes=True,
                           dashboard_address=":0")
    client = Client(cluster)
    warm = client.get_executor(pure=False)   # no result caching between repeated runs
    sweep(2, executor=warm)                # workers import topicmech once, before timing

    engines = {
        "serial": lambda s: sweep(s, n_jobs=1),
        "local pool (default)": lambda s: sweep(s, n_jobs=WORKERS),
        "ProcessPoolExecutor (spawn)": spawn_pool,
        "dask LocalCluster, start-up included": dask_cold,
        "dask LocalCluster, already running": lambda s: sweep(s, executor=warm),
    }
    rows, results = [], {}
    for seeds in args.seeds:
        reference = sweep(seeds, n_jobs=1)
        for name, fn in engines.items():
            times = []
            for _ in range(args.runs):
                dt, out = timed(partial(fn, seeds))
                assert out == reference, f"{name} gave different results from the serial run"
                times.append(dt)
            s = C.summary(times)
            results.setdefault(name, {})[str(seeds)] = s
            rows.append([name, str(seeds), C.fmt(s["median"]), C.fmt(s["min"]), C.fmt(s["max"])])
    client.close()
    cluster.close()
    info = C.machine(threads=1)
    print(C.describe(info))
    print(C.table(rows, ["engine", "seeds", "median s", "min s", "max s"]))
    C.write_results("executors", {"machine": info, "workers": WORKERS, "runs": args.runs,
                                  "seconds": results,
                                  "point": "sweeps.stage1_point, T=10 v=4 tau=2 N=32, 400 SGD steps"})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
