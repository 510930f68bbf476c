"""Chapter 7's multi-seed evidence: the compensation runs and the two-layer, two-head model
(squared loss and cross-entropy), each on 20 seeds, in the chapter's quick-mode configuration
(learned-attention setting T = 5, v = 4, tau = 2, N = 16, the released code's convention).

Writes ``results/ch7_compensation.json``, ``results/ch7_deep.json`` and ``results/ch7_deep_ce.json``.
Run from the repository root: ``.venv/bin/python scripts/results/ch7_beyond.py`` (about 4 minutes
on one core; ``TOPICMECH_JOBS`` sets the worker processes).
"""

from __future__ import annotations

import os
import sys

import torch

from topicmech import results, sweeps

SEEDS = list(range(20))
SMALL = dict(num_topics=5, words_per_topic=4, topics_per_doc=2, doc_len=16, attend_to_masked=False)
RUNS = {
    "ch7_compensation": (sweeps.compensation_seed, {**SMALL, "steps": 400, "lr": 1e-2}),
    "ch7_deep": (sweeps.deep_seed, {**SMALL, "steps": 500, "lr": 3e-2, "loss": "squared"}),
    "ch7_deep_ce": (sweeps.deep_seed, {**SMALL, "steps": 500, "lr": 3e-2, "loss": "cross_entropy"}),
}


def main() -> None:
    torch.set_num_threads(1)
    n_jobs = int(os.environ.get("TOPICMECH_JOBS", "1"))
    names = sys.argv[1:] or list(RUNS)
    for name in names:
        fn, kwargs = RUNS[name]
        path = results.store(name, fn, SEEDS, command="python scripts/results/ch7_beyond.py " + name,
                             kwargs=kwargs, n_jobs=n_jobs)
        print("wrote", path)


if __name__ == "__main__":
    main()
