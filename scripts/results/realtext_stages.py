"""Chapter 9's multi-seed evidence: the word-level masked language model trained on the Wikipedia sample at
the chapter's quick size, over ten seeds.

Writes results/realtext_stages.json through topicmech.results.store. Each seed is one call of
topicmech.realtext.learning_run: LDA of 20 topics (2 passes, seed 0), the 500 most frequent words of its
vocabulary, sequences of 128 tokens, the paper's one-layer one-head model (d = 64, tied head with a bias)
trained for 400 steps of Adam (3e-3, batch 32) in the theory's key convention, probes every 10 steps; the
final, untrained and frequency-matched-shuffle ratios, the attention ratio on pairs 16 or more apart, the
stage times of topicmech.realtext.stage_times and the curves.

Run from the repository root:  nice .venv/bin/python scripts/results/realtext_stages.py
"""

from __future__ import annotations

from topicmech import realtext, results

SEEDS = list(range(10))
KWARGS = dict(attend_to_masked=True, corpus="wikipedia", steps=400, max_words=500, seq_len=128, probe_every=10)


def main() -> None:
    path = results.store("realtext_stages", realtext.learning_run, SEEDS, kwargs=KWARGS, n_jobs=2,
                         command="python scripts/results/realtext_stages.py")
    print("wrote", path, flush=True)


if __name__ == "__main__":
    main()
