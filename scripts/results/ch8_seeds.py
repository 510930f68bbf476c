"""Chapter 8's evidence over LDA seeds and passage draws.

One file, written through topicmech.results.store:

- results/ch8_seeds.json: chapter 8's headline statistics on ten replicates
  (topicmech.pretrained.chapter_replicate). Replicate r uses seed r for everything the chapter
  seeds with 0: the LDA fit (20 topics, six passes) of the Wikipedia sample and of the Lee
  corpus, the draw of passages (one passage of at most 128 WordPieces from each of 100
  articles, the chapter's quick sizes; 60 articles for the authors' metric), the bootstrap
  replicates and the random control's weights. The encoder is the bundled all-MiniLM-L6-v2
  (a sentence-embedding model, not a masked language model); its forward passes on unmasked
  text involve neither convention of key visibility.

Run from the repository root (about 35 seconds of one or two cores per replicate):
    nice .venv/bin/python scripts/results/ch8_seeds.py
"""

from __future__ import annotations

import torch

from topicmech import pretrained, results

SEEDS = list(range(10))
QUICK_SIZES = {"max_docs": 100, "chunks_per_doc": 1, "am_max_docs": 60}


def main() -> None:
    torch.set_num_threads(1)
    path = results.store("ch8_seeds", pretrained.chapter_replicate, SEEDS, kwargs=QUICK_SIZES, n_jobs=1,
                         command="python scripts/results/ch8_seeds.py")
    print("wrote", path, flush=True)


if __name__ == "__main__":
    main()
