"""Chapter 9's further multi-seed evidence, over ten seeds each:

* ``realtext_stages_small_init``: the chapter's quick run (as scripts/results/realtext_stages.py) from a
  near-zero initialisation, standard deviation 0.001 instead of 0.02 (topicmech.realtext.learning_run);
* ``realtext_value_visible`` / ``realtext_value_hidden``: the stage-1 check on the corpus's moments in the
  theory's and the released code's key convention (topicmech.realtext.value_run: the 300 most frequent
  words, moments over 10 corruptions of every sequence, ridge 1e-5, 3,000 SGD steps), the chapter's
  settings; a seed draws the corruptions of the moments and the SGD stream.

Run from the repository root:  nice .venv/bin/python scripts/results/realtext_more.py [name ...]
"""

from __future__ import annotations

import sys

from topicmech import realtext, results

SEEDS = list(range(10))
STAGES = dict(attend_to_masked=True, corpus="wikipedia", steps=400, max_words=500, seq_len=128, probe_every=10)
VALUE = dict(corpus="wikipedia", max_words=300, steps=3000, passes=10, seq_len=128, l2=1e-5)
RUNS = {
    "realtext_stages_small_init": (realtext.learning_run, dict(STAGES, init_scale=0.001)),
    "realtext_value_visible": (realtext.value_run, dict(VALUE, attend_to_masked=True)),
    "realtext_value_hidden": (realtext.value_run, dict(VALUE, attend_to_masked=False)),
}


def main(names: list[str]) -> None:
    for name in names or RUNS:
        fn, kwargs = RUNS[name]
        path = results.store(name, fn, SEEDS, kwargs=kwargs, n_jobs=2,
                             command="python scripts/results/realtext_more.py " + name)
        print("wrote", path, flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
