"""Chapter 6's multi-seed evidence: joint training of W^V, W^K, W^Q from a small initialisation,
with SGD and with Adam, in both key conventions (the theory's convention, masked positions
visible as keys; the released code's convention, selected positions hidden as keys), ten seeds.

Writes results/ch6_two_stages.json through topicmech.results.store. Each seed is one call of
topicmech.dynamics.two_stage_seed with the chapter's quick-mode settings (T = 5, v = 4, tau = 2,
N = 20, initial scale 0.1, batches of 128, probes every 10 steps): SGD at learning rate 10 for
2,000 steps and Adam at 3e-3 for 1,200 steps, about the 1,000 steps the authors show. Per run:
the stage times t_V and t_A, when each of W^V, W^K, W^Q leaves its start, their norms, the end
state of attention, and curves every 50 steps. A second file, results/ch6_sgd_long.json, holds
SGD alone for 6,000 steps (the chapter's full-mode length) on the same seeds: long enough for
SGD in the theory's convention to drift on to copying. A third, results/ch6_scale_sweep.json,
trains SGD alone at initial scales 0.1, 0.03 and 0.01 (2,000, 3,000 and 6,000 steps; 0.01 is
the chapter's full-mode scale and length) in both conventions on the same seeds
(topicmech.dynamics.scale_sweep_seed): when the topic contrast of A reaches fixed levels, the
amplitude it grows from, and the stage times, to measure the delay per decade of scale.

Run from the repository root (about 9 minutes of one core for the first two, 5 for the third; TOPICMECH_JOBS sets the workers):
    nice .venv/bin/python scripts/results/ch6_two_stages.py [ch6_two_stages] [ch6_sgd_long] [ch6_scale_sweep]
(names pick which files to write; none writes all three).
"""

from __future__ import annotations

import os
import sys

import torch

from topicmech import dynamics, results

SEEDS = list(range(10))
KWARGS = dict(sgd_steps=2000, adam_steps=1200, sgd_lr=10.0, adam_lr=3e-3, init_scale=0.1, batch_size=128,
              probe_every=10)
LONG_SGD = dict(KWARGS, sgd_steps=6000, optimizers=("sgd",))
SWEEP = dict(scales=(0.1, 0.03, 0.01), steps=(2000, 3000, 6000), lr=10.0, batch_size=128, probe_every=10)


def main() -> None:
    torch.set_num_threads(1)
    n_jobs = int(os.environ.get("TOPICMECH_JOBS", "1"))
    plans = {"ch6_two_stages": (dynamics.two_stage_seed, KWARGS),
             "ch6_sgd_long": (dynamics.two_stage_seed, LONG_SGD),
             "ch6_scale_sweep": (dynamics.scale_sweep_seed, SWEEP)}
    names = sys.argv[1:] or list(plans)
    unknown = [n for n in names if n not in plans]
    if unknown:
        raise SystemExit(f"unknown result names {unknown}; choose from {list(plans)}")
    for name in names:
        fn, kwargs = plans[name]
        path = results.store(name, fn, SEEDS, kwargs=kwargs, n_jobs=n_jobs,
                             command=f"python scripts/results/ch6_two_stages.py {name}")
        print("wrote", path, flush=True)


if __name__ == "__main__":
    main()
