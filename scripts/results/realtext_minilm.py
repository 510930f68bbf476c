"""Chapter 9's side-by-side table: the pretrained encoder all-MiniLM-L6-v2 (a distilled sentence-embedding
model, not a masked language model) and its randomly initialised twin, measured by the authors' metric on the
Wikipedia sample with chapter 9's LDA fit, over three seeds (the passages drawn, and the twin's weights).

Writes results/realtext_minilm.json through topicmech.results.store; each seed is one call of
topicmech.realtext.minilm_run (the 0.2 % threshold without overlap, embedding-layer vectors, 60 passages of
128 WordPieces).

Run from the repository root:  nice .venv/bin/python scripts/results/realtext_minilm.py
"""

from __future__ import annotations

from topicmech import realtext, results

SEEDS = [0, 1, 2]


def main() -> None:
    path = results.store("realtext_minilm", realtext.minilm_run, SEEDS, kwargs={},
                         command="python scripts/results/realtext_minilm.py")
    print("wrote", path, flush=True)


if __name__ == "__main__":
    main()
