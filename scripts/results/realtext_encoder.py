"""Chapter 9's comparison model: a small standard encoder (transformers' BertForMaskedLM built offline from a
BertConfig of 2 layers, 2 heads, width 64, feed-forward 128, no weights loaded, no dropout) trained from scratch
on the documents of scripts/results/realtext_stages.py, over ten seeds.

Writes results/realtext_encoder.json through topicmech.results.store. Each seed is one call of
topicmech.realtext.encoder_run: the Wikipedia sample's 500 most frequent LDA words, sequences of 128 tokens, the
chapter's topic words, 400 steps of Adam (1e-3, batch 32) with BERT corruption and cross-entropy through
topicmech.train.train in the theory's key convention, probes every 10 steps; the final, untrained and
frequency-matched-shuffle ratios (the attention averaged over layers and heads, as the authors do for BERT),
the attention ratio per layer and the curves.

Run from the repository root:  nice .venv/bin/python scripts/results/realtext_encoder.py
"""

from __future__ import annotations

from topicmech import realtext, results

SEEDS = list(range(10))
KWARGS = dict(attend_to_masked=True, corpus="wikipedia", steps=400, max_words=500, seq_len=128, layers=2, heads=2,
              hidden=64, intermediate=128, lr=1e-3, probe_every=10)


def main() -> None:
    path = results.store("realtext_encoder", realtext.encoder_run, SEEDS, kwargs=KWARGS, n_jobs=2,
                         command="python scripts/results/realtext_encoder.py")
    print("wrote", path, flush=True)


if __name__ == "__main__":
    main()
