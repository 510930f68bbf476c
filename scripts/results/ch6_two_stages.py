"""Chapter 6's multi-seed evidence: joint training of W^V, W^K, W^Q from a small initialisation,
with SGD and with Adam, in both key conventions (the theory's convention, masked positions
visible as keys; the released code's convention, selected positions hidden as keys), ten seeds.

Writes results/ch6_two_stages.json through topicmech.results.store. Each seed is one call of
topicmech.dynamics.two_stage_seed with the chapter's quick-mode settings (T = 5, v = 4, tau = 2,
N = 20, initial scale 0.1, batches of 128, probes every 10 steps): SGD at learning rate 10 for
2,000 steps and Adam at 3e-3 for 1,200 steps, about the 1,000 steps the authors show. Per run:
the stage times t_V and t_A, when each of W^V, W^K, W^Q leaves its start, their norms, the end
state of attention, and curves every 50 steps.

Run from the repository root (about 7 minutes of one core; TOPICMECH_JOBS sets the workers):
    nice .venv/bin/python scripts/results/ch6_two_stages.py
"""

from __future__ import annotations

import os

import torch

from topicmech import dynamics, results

SEEDS = list(range(10))
KWARGS = dict(sgd_steps=2000, adam_steps=1200, sgd_lr=10.0, adam_lr=3e-3, init_scale=0.1, batch_size=128,
              probe_every=10)


def main() -> None:
    torch.set_num_threads(1)
    n_jobs = int(os.environ.get("TOPICMECH_JOBS", "1"))
    path = results.store("ch6_two_stages", dynamics.two_stage_seed, SEEDS, kwargs=KWARGS, n_jobs=n_jobs,
                         command="python scripts/results/ch6_two_stages.py")
    print("wrote", path, flush=True)


if __name__ == "__main__":
    main()
