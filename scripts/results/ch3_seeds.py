"""Chapter 3's multi-seed evidence.

One file, written through topicmech.results.store:

- results/ch3_seeds.json: every trained-model measurement chapter 3 states, at the chapter's
  quick setting (T = 5, v = 4, tau = 2, N = 20, BERT corruption 0.15/0.1/0.1, attention frozen
  uniform, W^V = I, only the embedding (and the bias) trained with Adam, batch 256, the
  chapter's schedules topicmech.embeddings.DEFAULT_PHASES and SHORT_PHASES), in the theory's
  convention (masked positions visible as keys) except the hidden-keys exercise, on ten seeds
  (topicmech.embeddings.chapter_seed): the tied head with a bias against its exact optimum,
  the identity head against W*, the tied head at d = 2, 3, T, T + 3, D against the closed-form
  allocation, cross-entropy, and the exercises (d = 1, hidden keys).

Run from the repository root (about 40 seconds of one core per seed):
    nice .venv/bin/python scripts/results/ch3_seeds.py
(TOPICMECH_JOBS=2 runs two seeds at a time).
"""

from __future__ import annotations

import os

import torch

from topicmech import embeddings, results


def main() -> None:
    torch.set_num_threads(1)
    n_jobs = int(os.environ.get("TOPICMECH_JOBS", "1"))
    path = results.store("ch3_seeds", embeddings.chapter_seed, list(range(10)), n_jobs=n_jobs,
                         command="python scripts/results/ch3_seeds.py")
    print("wrote", path, flush=True)


if __name__ == "__main__":
    main()
