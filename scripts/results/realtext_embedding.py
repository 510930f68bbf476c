"""Chapter 9's embedding-optimum check over ten seeds, ``realtext_embedding``: the authors' tied-head embedding
optimum (uniform attention, W^V = I, a bias, squared loss) on the Wikipedia sample's moments in the theory's
convention (topicmech.realtext.embedding_run: the 300 most frequent words, moments over 10 corruptions of every
sequence, ridge 1e-5, L-BFGS), at full rank and at d = 64, beside the paper's model trained 400 steps on the same
words; a seed draws the corruptions, the trained model and the frequency-matched shuffles.

Run from the repository root:  nice .venv/bin/python scripts/results/realtext_embedding.py
"""

from __future__ import annotations

from topicmech import realtext, results

SEEDS = list(range(10))
KWARGS = dict(attend_to_masked=True, corpus="wikipedia", max_words=300, seq_len=128, passes=10, l2=1e-5,
              steps=200, d=64, train_steps=400, shuffles=5)


def main() -> None:
    path = results.store("realtext_embedding", realtext.embedding_run, SEEDS, kwargs=KWARGS, n_jobs=2,
                         command="python scripts/results/realtext_embedding.py")
    print("wrote", path, flush=True)


if __name__ == "__main__":
    main()
