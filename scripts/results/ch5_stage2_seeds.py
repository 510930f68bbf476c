"""Chapter 5's multi-seed evidence.

Three files, written through topicmech.results.store:

- results/ch5_stage2_seeds.json: stage 2 (W^V frozen at the stage-1 optimum, W^K and W^Q trained
  by SGD) at the chapter's quick setting (T = 5, v = 4, tau = 2, N = 20, lr 100, 600 steps of 128
  documents, initial scale 0.1), in both key conventions (the theory's convention, masked
  positions visible as keys; the released code's convention, selected positions hidden as keys),
  on ten seeds (topicmech.stage2.conventions_seed): attention by relation on 2,000 held-out
  documents, the final contrasts of A, the peak of the same-topic contrast, whether the run ends
  as a copier, and the fitted initial growth rate over the predicted one (hidden keys).
- results/ch5_stage2_full_seeds.json: the same at the paper's vocabulary, chapter 5's full-mode
  setting (T = v = 10, tau = 2, N = 64, lr 2700, 800 steps), ten seeds; chapter 8 reads it.
- results/ch5_tied_convergence.json: the finite-N optimum of the tied attention at T = 8, v = 3,
  tau = 2 and N = 32, 64, 128, 256, 512, both conventions, on three independent samples
  (topicmech.stage2.tied_convergence_seed; 20,000 documents per sample, 10,000 at N = 512 to keep
  the run short), with the sandwich standard error of each.

Run from the repository root (about 2, 2 and 6 minutes of one core):
    nice .venv/bin/python scripts/results/ch5_stage2_seeds.py [ch5_stage2_seeds] [ch5_tied_convergence]
(names pick which files to write; none writes them all).
"""

from __future__ import annotations

import os
import sys

import torch

from topicmech import results, stage2

PLANS = {
    "ch5_stage2_seeds": (stage2.conventions_seed, list(range(10)), {"heldout_docs": 2000}),
    "ch5_stage2_full_seeds": (stage2.conventions_seed, list(range(10)),
                              {"heldout_docs": 2000, "size": "full"}),
    "ch5_tied_convergence": (stage2.tied_convergence_seed, [0, 1, 2],
                             {"doc_lens": [32, 64, 128, 256, 512],
                              "num_docs": [20000, 20000, 20000, 20000, 10000]}),
}


def main() -> None:
    torch.set_num_threads(1)
    n_jobs = int(os.environ.get("TOPICMECH_JOBS", "1"))
    names = sys.argv[1:] or list(PLANS)
    unknown = [n for n in names if n not in PLANS]
    if unknown:
        raise SystemExit(f"unknown result names {unknown}; choose from {list(PLANS)}")
    for name in names:
        fn, seeds, kwargs = PLANS[name]
        path = results.store(name, fn, seeds, kwargs=kwargs, n_jobs=n_jobs,
                             command=f"python scripts/results/ch5_stage2_seeds.py {name}")
        print("wrote", path, flush=True)


if __name__ == "__main__":
    main()
