"""topicmech: how transformers learn topic structure, rerun on a laptop CPU.

Companion package to the topicmech book, after Li, Li & Risteski, *How Do Transformers Learn
Topic Structure: Towards a Mechanistic Understanding* (ICML 2023). Modules, by book chapter:

- all chapters: :mod:`topicmech.setting` (:class:`~topicmech.setting.Setting` and :class:`~topicmech.setting.Masking`:
  sizes, masking and the key convention, taken by the closed forms of ``theory`` and the recipes of
  chapters 3-5, with the exceptions the API page lists);
- 1-2: :mod:`topicmech.data` (topic models, masking), :mod:`topicmech.model`,
  :mod:`topicmech.losses`, :mod:`topicmech.train` (the loop, :func:`topicmech.train.train`),
  :mod:`topicmech.probes` (block means, attention by topic relation),
  :mod:`topicmech.traces` (stage times and growth rates of a training trace);
- 3-5: :mod:`topicmech.theory` (exact theory), :mod:`topicmech.embeddings` (3),
  :mod:`topicmech.stage1` (4), :mod:`topicmech.stage2` (5);
- 6-8: :mod:`topicmech.dynamics` (two stages), :mod:`topicmech.sweeps` (beyond the
  assumptions); real text: :mod:`topicmech.corpus` (corpora, LDA topics), :mod:`topicmech.alignment`
  (WordPieces to words), :mod:`topicmech.word_pairs` (statistics by topic relation) and
  :mod:`topicmech.pretrained` (the encoder and its measurements); 9: :mod:`topicmech.realtext` (a word-level model trained on real text);
- elsewhere: :mod:`topicmech.reproduce` (the authors' experiments), :mod:`topicmech.fast`
  (performance), :mod:`topicmech.runner` (seeded sweeps, locally or on any executor),
  :mod:`topicmech.results` (stored multi-seed results with their provenance),
  :mod:`topicmech.stats` (sampling statistics of chapters 1 and 4 and their tests),
  :mod:`topicmech.plotting`, :mod:`topicmech.notebook` (``tm.setup_notebook``, ``tm.glue_values``;
  ``show_values`` in the exported notebooks) and
  :mod:`topicmech.utils` (all chapters).

Notation as on the book's notation page: ``T = num_topics``, ``v = words_per_topic``,
``V = T v``, ``[MASK]`` has id ``V``, ``D = num_tokens = V + 1``, ``N = doc_len``,
``tau = topics_per_doc``; matrices act on column vectors; attention is ``(batch, query, key)``.
"""

from . import data, losses, model, probes, theory, traces, train, utils
from .data import LDATopicModel, SimplifiedTopicModel, bert_mask
from .model import OneLayerTransformer
from .probes import attention_by_relation, block_means
from .setting import BERT_MASKING, Masking, Setting
from .utils import MODE, is_full, seed_everything

__version__ = "0.2.0"


def __getattr__(name: str):
    """Import the heavier modules on first use (matplotlib, pandas, transformers: seconds and 100+ MiB)."""
    if name in ("plotting", "corpus", "alignment", "word_pairs", "pretrained", "dynamics", "sweeps", "stage1",
                "stage2", "embeddings", "fast", "reproduce", "runner", "stats", "results", "realtext"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    if name in ("setup_notebook", "glue_values", "notebook"):   # they pull in matplotlib
        import importlib

        notebook = importlib.import_module(".notebook", __name__)
        return notebook if name == "notebook" else getattr(notebook, name)
    raise AttributeError(f"module 'topicmech' has no attribute {name!r}")


__all__ = ["Setting", "Masking", "BERT_MASKING", "data", "losses", "model", "plotting", "probes", "runner", "theory",
           "traces", "train", "utils", "SimplifiedTopicModel",
           "LDATopicModel", "bert_mask", "OneLayerTransformer", "block_means", "attention_by_relation",
           "MODE", "is_full", "seed_everything", "setup_notebook", "glue_values"]
