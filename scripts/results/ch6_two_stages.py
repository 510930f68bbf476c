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
SGD in the theory's convention to drift on to copying.

Run from the repository root (about 9 minutes of one core; TOPICMECH_JOBS sets the workers):
    nice .venv/bin/python scripts/results/ch6_two_stages.py [ch6_two_stages] [ch6_sgd_long]
(names pick which files to write; none writes both).
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


def main() -> None:
    torch.set_num_threads(1)
    n_jobs = int(os.environ.get("TOPICMECH_JOBS", "1"))
    plans = {"ch6_two_stages": KWARGS, "ch6_sgd_long": LONG_SGD}
    names = sys.argv[1:] or list(plans)
    unknown = [n for n in names if n not in plans]
    if unknown:
        raise SystemExit(f"unknown result names {unknown}; choose from {list(plans)}")
    for name in names:
        path = results.store(name, dynamics.two_stage_seed, SEEDS, kwargs=plans[name], n_jobs=n_jobs,
                             command=f"python scripts/results/ch6_two_stages.py {name}")
        print("wrote", path, flush=True)


if __name__ == "__main__":
    main()
