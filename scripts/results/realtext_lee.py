"""Chapter 9's check of the package defaults on a second corpus: the Lee background corpus (short news
articles shipped with gensim), on which no chapter trains a model.

Writes results/realtext_lee.json through topicmech.results.store. Each seed is one call of
topicmech.realtext.default_run: topicmech.corpus.fit_lda, word_documents, topic_words and
train_word_mlm all with their defaults (LDA of 20 topics, sequences of 64 tokens, 1,500 steps of Adam),
in the theory's key convention; the final, untrained and frequency-matched-shuffle ratios and the stage
times.

Run from the repository root:  nice .venv/bin/python scripts/results/realtext_lee.py
"""

from __future__ import annotations

from topicmech import realtext, results

SEEDS = list(range(3))
KWARGS = dict(attend_to_masked=True, corpus="lee")


def main() -> None:
    path = results.store("realtext_lee", realtext.default_run, SEEDS, kwargs=KWARGS, n_jobs=2,
                         command="python scripts/results/realtext_lee.py")
    print("wrote", path, flush=True)


if __name__ == "__main__":
    main()
