"""The embedding route: trained token embeddings ``W_E`` (shape ``(d, D)``) under frozen uniform attention.

The prediction at a selected position is ``f = W_U W_E xbar`` with an identity head
(``W_U = I``, ``d = D``) or a tied head (``W_U = W_E^T``). Here: the training recipe
(:func:`embedding_model` and :data:`DEFAULT_PHASES` for ``topicmech.train.train(phases=...)``)
and probes of a learned embedding. The tied-head optima in closed form are in
:mod:`topicmech.theory` (``tied_embedding_blocks``, and ``tied_bias_optimum`` for the authors'
head with a logit bias, ``embedding_model(..., bias=True)``). Columns of ``W_E`` are embeddings.
:class:`~topicmech.probes.TopicCosines` and :func:`~topicmech.probes.topic_cosines` are
re-exported here from :mod:`topicmech.probes`, where they are documented.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import torch

from . import theory
from .data import SimplifiedTopicModel
from .model import OneLayerTransformer
from .probes import TopicCosines, topic_cosines
from .setting import Setting
from .theory import orbit_means
from .train import train
from .utils import check_matrix, check_positive_int

__all__ = [
    "DEFAULT_PHASES", "SHORT_PHASES", "embedding_model", "topic_spread", "TopicCosines",
    "topic_cosines", "topic_separation", "normalized_gram", "block_vector", "topic_level",
    "block_differences", "CLAIM_SEEDS", "train_embedding", "chapter_seed",
]

#: Seeds over which ``tests/test_chapter_claims_3.py`` re-checks chapter 3's claims about trained
#: models (the chapter itself trains each model once, with seed 0).
CLAIM_SEEDS: tuple[int, ...] = tuple(range(10))

#: ``(steps, lr)`` per phase of chapter 3, for ``topicmech.train.train(phases=...)`` (Adam, batch 256).
#: Adam's step is about ``lr`` per entry whatever the curvature, so they serve every setting.
DEFAULT_PHASES: tuple[tuple[int, float], ...] = ((300, 1e-2), (300, 3e-3), (400, 1e-3))
#: Half as long, for qualitative checks (chapter 3 uses it for cross-entropy).
SHORT_PHASES: tuple[tuple[int, float], ...] = ((150, 1e-2), (150, 3e-3), (200, 1e-3))


def embedding_model(num_tokens: int, d_model: int | None = None, *, head: Literal["tied", "identity"] = "tied",
                    attend_to_masked: bool, init_scale: float | None = None, bias: bool = False,
                    seed: int = 0) -> OneLayerTransformer:
    """The chapter-3 model: learned embeddings, uniform attention, ``W_V = I``; only ``W_E`` (and ``b_pred``) train.

    ``num_tokens`` is ``D``; ``d_model`` must be ``D`` (the default) for ``head="identity"``
    (``W_U = I``; ``"tied"``: ``W_U = W_E^T``). ``init_scale`` defaults to 0.1 for the tied head
    (``W_E = 0`` is a saddle) and 0.01 for the identity head. ``bias=True`` adds a trained logit
    bias ``b_pred`` (the authors' ``b^pred``). ``attend_to_masked`` (no default) as in
    :class:`~topicmech.model.OneLayerTransformer`.
    """
    if head not in ("tied", "identity"):
        raise ValueError(f"head must be 'tied' or 'identity', got {head!r}")
    if init_scale is None:
        init_scale = 0.1 if head == "tied" else 0.01
    return OneLayerTransformer(num_tokens, d_model=d_model, embedding="learned", attention="uniform", value="identity",
                               head=head, attend_to_masked=attend_to_masked, init_scale=init_scale, bias=bias, seed=seed)


def _check_words(num_cols: int, words_per_topic: int) -> tuple[int, int]:
    v = check_positive_int("words_per_topic", words_per_topic)
    V = (num_cols // v) * v
    if V == 0 or num_cols not in (V, V + 1):
        raise ValueError(f"the matrix must have V or V + 1 token columns, V a multiple of words_per_topic={v}, "
                         f"got {num_cols}")
    return V, v


def topic_spread(W_E: torch.Tensor | np.ndarray, words_per_topic: int) -> float:
    """Relative within-topic spread ``sqrt(sum_w ||e_w - m_t(w)||^2 / sum_w ||e_w||^2)`` of the word embeddings.

    ``m_t`` is the mean embedding of topic ``t``: 0 when same-topic embeddings coincide, 1 when
    every topic's embeddings average to 0. ``W_E`` has shape ``(d, V)`` or ``(d, V + 1)``
    (the ``[MASK]`` column is ignored).
    """
    E = check_matrix("W_E", W_E)
    V, v = _check_words(E.shape[1], words_per_topic)
    Ew = E[:, :V]                                                    # (d, V)
    means = Ew.reshape(E.shape[0], V // v, v).mean(axis=2)           # (d, T)
    dev = Ew - np.repeat(means, v, axis=1)                           # (d, V)
    total = float(np.sum(Ew**2))
    if total == 0.0:
        raise ValueError("W_E has all-zero word embeddings; the spread is undefined")
    return float(math.sqrt(np.sum(dev**2) / total))


def topic_separation(gram: torch.Tensor | np.ndarray, words_per_topic: int) -> float:
    """Within-topic spread of the word embeddings relative to the distance between topics.

    Root-mean-square distance from a word embedding to its topic's mean embedding, divided by the
    root-mean-square distance between the mean embeddings of two different topics, from the Gram
    matrix ``gram = W_E^T W_E`` alone (``[MASK]`` ignored): 0 exactly when the words of each
    topic share one embedding. Needs at least two topics that do not all share one mean.
    """
    G = check_matrix("gram", gram, square=True)
    V, v = _check_words(G.shape[0], words_per_topic)
    T = V // v
    if T < 2:
        raise ValueError(f"need at least two topics, got V={V} words of {v} per topic")
    Gw = G[:V, :V]
    Gbar = Gw.reshape(T, v, T, v).mean(axis=(1, 3))          # (T, T) inner products of topic means
    within2 = np.diag(Gw).mean() - np.diag(Gbar).mean()      # mean ||e_w - m_t(w)||^2
    between2 = 2 * np.diag(Gbar).mean() - 2 * Gbar[~np.eye(T, dtype=bool)].mean()  # ||m_s - m_t||^2
    if not between2 > 0:
        raise ValueError("the topics' mean embeddings coincide; the separation is undefined")
    return float(math.sqrt(max(float(within2), 0.0) / float(between2)))


def normalized_gram(gram: torch.Tensor | np.ndarray, words_per_topic: int) -> np.ndarray:
    """Gram matrix divided by the mean squared norm of the word embeddings (one colour scale across losses)."""
    G = check_matrix("gram", gram, square=True)
    V, _ = _check_words(G.shape[0], words_per_topic)
    scale = float(np.mean(np.diag(G)[:V]))
    if not scale > 0:
        raise ValueError(f"gram has a non-positive mean word norm {scale!r}")
    return G / scale


def block_vector(matrix: torch.Tensor | np.ndarray, num_topics: int, words_per_topic: int) -> np.ndarray:
    """The four block means of a ``(D, D)`` matrix (an embedding, its Gram matrix, ``W^V``).

    ``[same word, same topic, different topic, [MASK] column]``: the means over the word
    orbits and over the ``[MASK]`` column's word rows (:func:`topicmech.theory.orbit_means`).
    """
    M = check_matrix("matrix", matrix, square=True)
    T = check_positive_int("num_topics", num_topics)
    v = check_positive_int("words_per_topic", words_per_topic)
    if M.shape[0] != T * v + 1:
        raise ValueError(f"matrix must have shape {(T * v + 1, T * v + 1)} for num_topics={T}, "
                         f"words_per_topic={v}, got {M.shape}")
    b = orbit_means(M, T, v)
    return np.array([b.diag, b.same_topic, b.diff_topic, b.mask_col])


def topic_level(blocks: np.ndarray, words_per_topic: int) -> np.ndarray:
    """The block means a tied-head optimum pins down: ``[same topic, different topic, [MASK]]``.

    ``blocks`` is a :func:`block_vector`. The same-topic level averages over all ``v``
    words of a topic, the word itself included: ``(w_diag + (v - 1) w_same) / v``.
    """
    diag, same, diff, mask = _check_blocks(blocks)
    v = check_positive_int("words_per_topic", words_per_topic)
    return np.array([(diag + (v - 1) * same) / v, diff, mask])


def _check_blocks(blocks: np.ndarray) -> np.ndarray:
    b = np.asarray(blocks, dtype=np.float64)
    if b.shape != (4,):
        raise ValueError(f"blocks must be a block_vector of shape (4,), got shape {b.shape}")
    return b


def block_differences(matrix: torch.Tensor | np.ndarray, num_topics: int, words_per_topic: int) -> np.ndarray:
    """Differences of block means that a tied head with a bias determines, unlike the levels.

    ``[weighted gap, same word - different topic, same topic - different topic]``; the
    weighted gap is the first entry of :func:`topic_level` minus the second (our reading of
    the authors' quantity, :func:`topicmech.theory.weighted_topic_gap`).
    """
    b = block_vector(matrix, num_topics, words_per_topic)
    same_level, diff, _ = topic_level(b, words_per_topic)
    return np.array([same_level - diff, b[0] - b[2], b[1] - b[2]])


def train_embedding(data: SimplifiedTopicModel, d: int, head: Literal["tied", "identity"], *, doc_len: int,
                    phases: tuple[tuple[int, float], ...] = DEFAULT_PHASES, loss: str = "squared",
                    attend_to_masked: bool, bias: bool = False, seed: int = 0) -> OneLayerTransformer:
    """One chapter-3 model (:func:`embedding_model` with ``D = V + 1`` tokens) trained on ``data`` with
    Adam, batch 256, the ``(steps, lr)`` ``phases`` and ``loss``; ``seed`` seeds both the start and the
    documents."""
    model = embedding_model(data.num_tokens, d, head=head, attend_to_masked=attend_to_masked, bias=bias,
                            seed=seed)
    train(model, data, phases=phases, doc_len=doc_len, batch_size=256, loss=loss, optimizer="adam", seed=seed)
    return model


def _gram(model: OneLayerTransformer) -> np.ndarray:
    return model.embedding_gram().detach().double().numpy()


def chapter_seed(seed: int, *, num_topics: int = 5, words_per_topic: int = 4, topics_per_doc: int = 2,
                 doc_len: int = 20, phases: object = DEFAULT_PHASES,
                 short_phases: object = SHORT_PHASES) -> dict[str, float]:
    """Chapter 3's trained-model measurements for one ``seed`` (the theory's convention, masked keys
    visible, except the hidden-keys exercise), computed as the chapter computes them.

    Trains, with :func:`train_embedding`: the tied head with a bias at ``d = D``; the identity head;
    the tied head at ``d`` in ``(2, 3, T, T + 3, D)`` (all with ``phases``); and with ``short_phases``
    the identity head and the tied head at ``d = T`` with cross-entropy, the tied head at ``d = 1``,
    and the identity head with masked keys hidden. Returns (errors are absolute differences of
    block means from the exact optimum, :func:`block_vector`):

    ``bias.gap`` (learned weighted gap ``Delta_M``), ``bias.err_gap`` and ``bias.err_diff`` (the
    largest error of the two other :func:`block_differences`); ``id.err_E``, ``id.err_gram``,
    ``id.gap``; ``tied.err`` (largest :func:`topic_level` error over the ``d``), ``tied.gap_ratio``
    (smallest learned over predicted gap), ``tied.within_frac`` (same-word excess at ``d = D`` over
    the predicted one); ``sep.d2``, ``sep.d3``, ``sep.dT``, ``sep.dD`` (:func:`topic_separation`);
    ``cos.d2_diff_max``, ``cos.dT_diff_max``, ``cos.dT_same_min``, ``cos.dD_same_min``
    (:func:`topic_cosines`); ``spread.dT``, ``spread.dD`` (:func:`topic_spread`); normalised gaps
    ``norm_gap.{sq,ce}_{id,tied}`` and ``ce.tied_diff`` (:func:`normalized_gram`); ``ex.d1_gap``,
    ``ex.hidden_excess`` (same word minus same topic) and ``ex.hidden_spread``.
    """
    T, v = check_positive_int("num_topics", num_topics), check_positive_int("words_per_topic", words_per_topic)
    D = T * v + 1
    data = SimplifiedTopicModel(T, v, topics_per_doc)
    setting = Setting(T, v, topics_per_doc, doc_len, attend_to_masked=True)
    Sigma, C = theory.moments(setting)
    W_star = theory.optimal_value_matrix(setting)
    ds = (2, 3, T, T + 3, D)

    def fit(d: int, head: Literal["tied", "identity"], **kw: object) -> OneLayerTransformer:
        kw.setdefault("attend_to_masked", True)
        return train_embedding(data, d, head, doc_len=doc_len, seed=seed, **kw)  # type: ignore[arg-type]

    out: dict[str, float] = {}
    opt = theory.tied_bias_optimum(setting)
    learned = block_differences(_gram(fit(D, "tied", phases=phases, bias=True)), T, v)
    err = np.abs(learned - [opt.weighted_gap, opt.diag_minus_diff, opt.same_minus_diff])
    out.update({"bias.gap": learned[0], "bias.err_gap": err[0], "bias.err_diff": err[1:].max()})

    model_id = fit(D, "identity", phases=phases)
    gram_id = _gram(model_id)
    b_gram = block_vector(gram_id, T, v)
    out["id.err_E"] = np.abs(block_vector(model_id.W_E.detach().double().numpy(), T, v)
                             - block_vector(W_star, T, v)).max()
    out["id.err_gram"] = np.abs(b_gram - block_vector(W_star.T @ W_star, T, v)).max()
    out["id.gap"] = b_gram[1] - b_gram[2]

    errs, ratios, sep, cos, spread, gram_tied = [], [], {}, {}, {}, {}
    for d in ds:
        model = fit(d, "tied", phases=phases)
        G = gram_tied[d] = _gram(model)
        tb = theory.tied_embedding_blocks(Sigma, C, T, v, d)
        got, want = block_vector(G, T, v), np.array([tb.diag, tb.same_topic, tb.diff_topic, tb.mask_col])
        errs.append(np.abs(topic_level(got, v) - topic_level(want, v)).max())
        ratios.append((got[1] - got[2]) / tb.topic_gap)
        sep[d], cos[d], spread[d] = topic_separation(G, v), topic_cosines(G, v), topic_spread(model.W_E, v)
        if d == D:
            out["tied.within_frac"] = (got[0] - got[1]) / (tb.diag - tb.same_topic)
    out.update({"tied.err": max(errs), "tied.gap_ratio": min(ratios),
                "sep.d2": sep[2], "sep.d3": sep[3], "sep.dT": sep[T], "sep.dD": sep[D],
                "cos.d2_diff_max": cos[2].max_diff_topic, "cos.dT_diff_max": cos[T].max_diff_topic,
                "cos.dT_same_min": cos[T].min_same_topic, "cos.dD_same_min": cos[D].min_same_topic,
                "spread.dT": spread[T], "spread.dD": spread[D]})

    norm = {"sq_id": normalized_gram(gram_id, v), "sq_tied": normalized_gram(gram_tied[T], v)}
    for key, head, d in (("ce_id", "identity", D), ("ce_tied", "tied", T)):
        model = fit(d, head, phases=short_phases, loss="cross_entropy")
        norm[key] = normalized_gram(model.embedding_gram(), v)
    for key, G in norm.items():
        b = orbit_means(G, T, v)
        out[f"norm_gap.{key}"] = b.same_topic - b.diff_topic
    out["ce.tied_diff"] = orbit_means(norm["ce_tied"], T, v).diff_topic

    b1 = orbit_means(_gram(fit(1, "tied", phases=short_phases)), T, v)
    out["ex.d1_gap"] = b1.same_topic - b1.diff_topic
    model_h = fit(D, "identity", phases=short_phases, attend_to_masked=False)
    b_h = orbit_means(_gram(model_h), T, v)
    out["ex.hidden_excess"] = b_h.diag - b_h.same_topic
    out["ex.hidden_spread"] = topic_spread(model_h.W_E, v)
    return {k: float(x) for k, x in out.items()}
