"""Recipes for setting the authors' reported experiments beside ours (the reproduction page).

The one-layer model is trained jointly on LDA data shaped like the authors' released synthetic
set (10 topics of 10 words, ``alpha = 0.1``, documents of 100 to 150 words); attention is read
by the authors' three categories and the norms of ``W^K``, ``W^Q``, ``W^V`` are recorded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch

from .data import LDATopicModel, TopicModel, check_topic_model
from .model import OneLayerTransformer, TwoLayerTransformer
from .probes import masked_means, pair_relations
from .traces import reaching_step
from .train import train
from .utils import check_positive_int

__all__ = ["RELATIONS", "SyntheticRun", "authors_lda", "authors_attention_categories", "synthetic_run",
           "deep_norms", "all_trained_gram", "leave_zero_step", "verdict"]

#: The authors' three attention categories, in the order of their table.
RELATIONS: tuple[str, str, str] = ("same_word", "same_topic", "diff_topic")


def authors_lda() -> LDATopicModel:
    """The topic model of the authors' released synthetic data: 10 topics x 10 words, ``alpha = 0.1``."""
    return LDATopicModel(10, 10, 0.1)


def authors_attention_categories(pattern: torch.Tensor, inputs: torch.Tensor,
                                 topic_of_word: torch.Tensor) -> dict[str, float]:
    """Mean attention weight per (query, key) pair of words in the authors' three categories.

    ``"same_word"`` (same token id, the query's own position included), ``"same_topic"``
    (another word of the topic), ``"diff_topic"``; uniform attention over ``N`` keys reads
    ``1/N`` everywhere (the scale of the authors' table), an empty category NaN.

    Parameters
    ----------
    pattern : Tensor, shape (batch, query, key)
    inputs : LongTensor, shape (batch, N)
        Token ids in ``[0, V]``; ``[MASK]`` (id ``V = len(topic_of_word)``) is left out.
    topic_of_word : LongTensor, shape (V,)
    """
    pairs, same_word, same_topic = pair_relations(pattern, inputs, topic_of_word)
    return dict(zip(RELATIONS, masked_means(pattern, [pairs & same_word, pairs & same_topic & ~same_word,
                                                       pairs & ~same_topic])))


@dataclass
class SyntheticRun:
    """What :func:`synthetic_run` measures.

    Attributes
    ----------
    attention : dict of str to float
        :func:`authors_attention_categories` on the held-out documents after training.
    steps : ndarray of int, shape (k,)
        Steps at which the norms were read (0 = initialisation).
    norms : dict of str to ndarray, shape (k,)
        Frobenius norms of ``"W_K"``, ``"W_Q"``, ``"W_V"`` at those steps.
    """

    attention: dict[str, float]
    steps: np.ndarray
    norms: dict[str, np.ndarray] = field(default_factory=dict)


def synthetic_run(seed: int, *, optimizer: Literal["sgd", "adam"], lr: float, steps: int,
                  train_docs: tuple[torch.Tensor, torch.Tensor], heldout: torch.Tensor,
                  topic_model: TopicModel | None = None, init_scale: float = 1e-3, batch_size: int = 40,
                  probe_every: int = 10) -> SyntheticRun:
    """Train ``W^K``, ``W^Q``, ``W^V`` jointly with cross-entropy and measure attention and norms.

    One-layer model with one-hot embeddings, identity head and hidden masked keys (the authors'
    code); BERT corruption 0.15/0.1/0.1; batches resampled with replacement from ``train_docs``.

    Parameters
    ----------
    seed : int
        Seeds the initialisation and the batches.
    train_docs : (docs, lengths)
        Right-padded documents and their lengths (:func:`topicmech.fast.sample_variable_length`).
    heldout : LongTensor, shape (num_docs, N)
        Clean documents on which attention is read.
    topic_model : TopicModel, optional
        Supplies ``topic_of_word``; default :func:`authors_lda`.
    init_scale, batch_size, probe_every
        Gaussian initialisation scale, documents per step (40 as released), steps between norm readings.
    """
    steps = check_positive_int("steps", steps)
    if not (isinstance(train_docs, tuple) and len(train_docs) == 2):
        raise ValueError("train_docs must be a tuple (docs, lengths)")
    if not isinstance(heldout, torch.Tensor) or heldout.dim() != 2:
        raise ValueError(f"heldout must be a LongTensor of shape (num_docs, N), "
                         f"got {getattr(heldout, 'shape', heldout)!r}")
    topic_model = authors_lda() if topic_model is None else check_topic_model(topic_model)
    docs, lengths = train_docs
    model = OneLayerTransformer(topic_model.num_tokens, attention="learned", value="learned",
                                attend_to_masked=False, init_scale=init_scale, seed=seed)
    probes = {name: (lambda m, name=name: float(getattr(m, name).norm())) for name in ("W_K", "W_Q", "W_V")}
    hist = train(model, docs, lengths=lengths, steps=steps, batch_size=batch_size, loss="cross_entropy",
                 optimizer=optimizer, lr=lr, seed=seed + 7919, probes=probes, probe_every=probe_every)
    with torch.no_grad():
        pattern = model.attention_pattern(heldout)                              # (n, query, key)
    attention = authors_attention_categories(pattern, heldout, topic_model.topic_of_word)
    return SyntheticRun(attention=attention, steps=np.asarray(hist.probe_step),
                        norms={k: hist.probe(k) for k in probes})


def deep_norms(seed: int, *, optimizer: Literal["sgd", "adam"], lr: float, steps: int, docs: torch.Tensor,
               topic_model: TopicModel | None = None, num_layers: int = 4, d_model: int = 16,
               init_scale: float = 1e-3, batch_size: int = 20, probe_every: int = 5) -> SyntheticRun:
    """Norms of ``W^K``, ``W^Q``, ``W^V`` along the training of a deep encoder (the authors' 4-layer plot).

    :class:`~topicmech.model.TwoLayerTransformer` with ``num_layers`` one-head blocks (learned
    embeddings, residual connections, LayerNorm, tied head), cross-entropy, hidden masked keys,
    batches resampled from the equal-length ``docs``. Each norm is the root sum of squares over
    the layers; ``attention`` is left empty.
    """
    topic_model = authors_lda() if topic_model is None else check_topic_model(topic_model)
    model = TwoLayerTransformer(topic_model.num_tokens, d_model, num_layers=num_layers, attend_to_masked=False,
                                init_scale=init_scale, seed=seed)
    probes = {name: (lambda m, i=i: float(sum(W[i].norm() ** 2 for W in m.W_QKV)) ** 0.5)
              for i, name in enumerate(("W_Q", "W_K", "W_V"))}       # W_QKV[layer] stacks (q, k, v)
    hist = train(model, docs, steps=steps, batch_size=batch_size, loss="cross_entropy", optimizer=optimizer,
                 lr=lr, seed=seed + 7919, probes=probes, probe_every=probe_every)
    return SyntheticRun(attention={}, steps=np.asarray(hist.probe_step), norms={k: hist.probe(k) for k in probes})


def all_trained_gram(seed: int, *, loss: Literal["cross_entropy", "squared"], optimizer: Literal["sgd", "adam"],
                     lr: float, steps: int, train_docs: tuple[torch.Tensor, torch.Tensor],
                     topic_model: TopicModel | None = None, d_model: int = 32, init_scale: float = 0.1,
                     batch_size: int = 40) -> np.ndarray:
    """Train every component and return the word-embedding Gram matrix ``W_E^T W_E``, shape ``(D, D)``.

    The authors' embedding heatmap: embeddings of width ``d_model``, ``W^K``, ``W^Q``, ``W^V`` and
    the tied head trained together, hidden masked keys, BERT corruption 0.15/0.1/0.1, batches
    resampled from ``train_docs`` as in :func:`synthetic_run`.
    """
    topic_model = authors_lda() if topic_model is None else check_topic_model(topic_model)
    docs, lengths = train_docs
    model = OneLayerTransformer(topic_model.num_tokens, d_model, embedding="learned", attention="learned",
                                value="learned", head="tied", attend_to_masked=False, init_scale=init_scale,
                                seed=seed)
    train(model, docs, lengths=lengths, steps=steps, batch_size=batch_size, loss=loss, optimizer=optimizer, lr=lr,
          seed=seed + 7919)
    return model.embedding_gram().detach().double().numpy()


def leave_zero_step(steps: Sequence[int] | np.ndarray, norms: Sequence[float] | np.ndarray,
                    fraction: float = 0.1) -> int | None:
    """First step at which a norm has covered ``fraction`` of its rise from step 0 to the end (None if it never rises).

    :func:`topicmech.traces.reaching_step` with ``reference="final"``.
    """
    return reaching_step(steps, norms, fraction=fraction, reference="final")


def verdict(checks: Sequence[bool], *, essential: Sequence[bool] | None = None) -> str:
    """``"reproduced"`` if every check holds, ``"not"`` if an essential one fails, else ``"partly"``.

    ``checks``: whether each of the authors' comparisons holds in our measurement;
    ``essential`` marks those without which the row is not reproduced (default: the first).
    """
    checks = [bool(c) for c in checks]
    if not checks:
        raise ValueError("checks must hold at least one comparison")
    essential = [True] + [False] * (len(checks) - 1) if essential is None else [bool(e) for e in essential]
    if len(essential) != len(checks):
        raise ValueError(f"essential must have {len(checks)} entries, got {len(essential)}")
    if all(checks):
        return "reproduced"
    if any(e and not c for c, e in zip(checks, essential)):
        return "not"
    return "partly"
