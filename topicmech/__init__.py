"""topicmech: how transformers learn topic structure, rerun on a laptop CPU.

Companion package to the topicmech book, after Li, Li & Risteski, *How Do Transformers
Learn Topic Structure: Towards a Mechanistic Understanding* (ICML 2023).

Modules and the chapters that introduce them:

==============================  =======================================================
module                          book chapter
==============================  =======================================================
:mod:`topicmech.data`           1 Topic models as a sandbox; 2 (masking)
:mod:`topicmech.model`          2 Masked language modelling and a one-layer transformer
:mod:`topicmech.train`          2 (first training run); used by 3-7
:mod:`topicmech.probes`         2, 5 (block means, attention by topic relation)
:mod:`topicmech.theory`         3 Embeddings; 4 Stage 1 (value matrix); 5 Stage 2
:mod:`topicmech.embeddings`     3 Embeddings learn topic structure
:mod:`topicmech.stage1`         4 Stage 1: the value matrix becomes block-structured
:mod:`topicmech.stage2`         5 Stage 2: attention learns topic structure
:mod:`topicmech.dynamics`       6 Two stages in joint training
:mod:`topicmech.sweeps`         7 Beyond the assumptions
:mod:`topicmech.pretrained`     8 Real text and a pretrained transformer
:mod:`topicmech.reproduce`      Reproducing the authors' experiments
:mod:`topicmech.fast`           Performance (benchmarks)
:mod:`topicmech.plotting`       all chapters (house style)
:mod:`topicmech.utils`          all chapters (seeding, threads, quick/full mode)
==============================  =======================================================

Chapter 5 also uses :mod:`topicmech.tied_attention` (the authors' stage-2 result: the
optimal attention within the tied-score family).

Notation (the book's notation page): ``T = num_topics``, ``v = words_per_topic``,
``V = vocab_size = T v``, ``[MASK]`` has id ``V``, ``D = num_tokens = V + 1``,
``N = doc_len``, ``tau = topics_per_doc``; matrices act on column vectors (rows =
output, columns = input); attention patterns are ``(batch, query, key)``.
"""

from . import data, model, probes, theory, train, utils
from .data import LDATopicModel, SimplifiedTopicModel, bert_mask
from .model import OneLayerTransformer
from .probes import attention_by_relation, block_means
from .train import train as train_model
from .utils import MODE, is_full, seed_everything, setup_notebook

__version__ = "0.2.0"


def __getattr__(name: str):
    """Import the plotting and pretrained modules on first use.

    They pull in matplotlib, seaborn and pandas (or gensim and transformers), which would
    add over 100 MiB and seconds of start-up to every script that only trains a model.
    """
    if name in ("plotting", "pretrained", "dynamics", "sweeps", "stage1", "stage2", "embeddings", "fast",
                "tied_attention", "reproduce"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'topicmech' has no attribute {name!r}")

__all__ = [
    "data", "model", "plotting", "probes", "theory", "train", "utils",
    "SimplifiedTopicModel", "LDATopicModel", "bert_mask", "OneLayerTransformer",
    "block_means", "attention_by_relation", "train_model",
    "MODE", "is_full", "seed_everything", "setup_notebook",
]
