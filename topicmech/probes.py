"""Probes: summarise a matrix or an attention pattern by topic relation.

Pairs of tokens fall into three relations, the orbits of the topic model's symmetry: the
**same word**, the **same topic** (different words) and **different topics**.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch

from .utils import as_float64, check_matrix, check_positive_int

__all__ = ["BlockMeans", "block_means", "relation_masks", "TopicCosines", "topic_cosines", "topic_eigenvalue", "topic_growth_eigenvalue", "attention_by_relation",
           "AttentionByRelation", "ATTENTION_FIELDS",
           "pair_relations", "masked_means", "relation_reader", "topic_contrasts",
           "growing_topic_contrast"]


class BlockMeans(NamedTuple):
    """Means of a word-by-word matrix over the diagonal, same-topic and different-topic pairs.

    ``mask_col`` is the mean of the ``[MASK]`` column over word rows (None without a
    ``[MASK]`` row and column).
    """

    diag: float
    same_topic: float
    diff_topic: float
    mask_col: float | None = None

    @property
    def topic_gap(self) -> float:
        """``same_topic - diff_topic``."""
        return self.same_topic - self.diff_topic


def relation_masks(topic_of_word: torch.Tensor | np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Boolean masks of shape ``(V, V)`` for same word, same topic (off-diagonal), different topic."""
    topic = np.asarray(topic_of_word.cpu() if isinstance(topic_of_word, torch.Tensor) else topic_of_word)
    if topic.ndim != 1 or topic.size == 0:
        raise ValueError(f"topic_of_word must be a non-empty 1-D array, got shape {topic.shape}")
    same_topic = topic[:, None] == topic[None, :]
    eye = np.eye(topic.size, dtype=bool)
    return eye, same_topic & ~eye, ~same_topic


def block_means(matrix: torch.Tensor | np.ndarray, topic_of_word: torch.Tensor | np.ndarray) -> BlockMeans:
    """Mean of the diagonal, same-topic and different-topic entries of a word-by-word matrix.

    ``matrix`` has shape (V, V) or (V + 1, V + 1), the last index then ``[MASK]``;
    ``topic_of_word`` shape (V,). A relation without pairs (e.g. same topic at ``v = 1``) gives nan.
    """
    M = as_float64(matrix)
    V = len(topic_of_word)
    if M.ndim != 2 or M.shape[0] != M.shape[1] or M.shape[0] not in (V, V + 1):
        raise ValueError(f"matrix must have shape ({V}, {V}) or ({V + 1}, {V + 1}), got {M.shape}")
    W = M[:V, :V]
    means = [float(W[m].mean()) if m.any() else float("nan") for m in relation_masks(topic_of_word)]
    return BlockMeans(*means, float(M[:V, V].mean()) if M.shape[0] == V + 1 else None)


def topic_contrasts(A: torch.Tensor | np.ndarray, topic_of_word: torch.Tensor | np.ndarray) -> dict[str, float]:
    """Contrasts ``{"same_word", "same_topic"}`` of a key-query score matrix: mean score minus the different-topic mean.

    Means over word pairs (rows: key, columns: query), as in :func:`block_means`.
    """
    m = block_means(A, topic_of_word)
    return {"same_word": m.diag - m.diff_topic, "same_topic": m.same_topic - m.diff_topic}


def growing_topic_contrast(W_K: torch.Tensor | np.ndarray, W_Q: torch.Tensor | np.ndarray,
                           topic_of_word: torch.Tensor | np.ndarray) -> float:
    """Topic contrast of the part of ``A = W_K^T W_Q / sqrt(d)`` that grows in stage 2 (one-hot inputs).

    With ``P`` the projector on word vectors constant within topics and summing to zero (the
    topic eigenspace of the orbit-averaged stage-2 gradient), plain SGD near ``A = 0`` makes
    ``S = (W_K + W_Q) P`` grow and ``(W_K - W_Q) P`` decay, so ``P A P`` tends to
    ``S^T S / (4 sqrt(d))`` times the growth factor: the amplitude that the exponential phase
    starts from. ``W_K``, ``W_Q`` have shape ``(d, D)`` with ``D`` the words, or the words and
    ``[MASK]`` last (which ``P`` leaves out). Returns the ``"same_topic"`` entry of
    :func:`topic_contrasts` of ``S^T S / (4 sqrt(d))`` (positive: it is a Gram matrix).
    """
    K, Q = as_float64(W_K), as_float64(W_Q)
    V = len(topic_of_word)
    if K.ndim != 2 or K.shape != Q.shape or K.shape[1] not in (V, V + 1):
        raise ValueError(f"W_K and W_Q must share a shape (d, {V}) or (d, {V + 1}), got "
                         f"{tuple(K.shape)} and {tuple(Q.shape)}")
    t = torch.as_tensor(topic_of_word).cpu().numpy()
    counts = np.bincount(t)
    if counts.size < 2 or not np.all(counts == counts[0]):
        raise ValueError("topic_of_word must describe at least two topics of equal size")
    P = np.zeros((K.shape[1], K.shape[1]))
    P[:V, :V] = (t[:, None] == t[None, :]) / counts[0] - 1.0 / V
    S = (np.asarray(K) + np.asarray(Q)) @ P
    return topic_contrasts(S.T @ S / (4.0 * math.sqrt(K.shape[0])), topic_of_word)["same_topic"]


class AttentionByRelation(NamedTuple):
    """Average attention from a word query to one key, by relation, times ``N`` (1 is uniform).

    ``self_``: the query's own position; ``same_word``: other positions of the same word;
    ``same_topic``: a different word of the same topic; ``diff_topic``: a word of another topic.
    """

    self_: float
    same_word: float
    same_topic: float
    diff_topic: float

    @property
    def topic_ratio(self) -> float:
        """``same_topic / diff_topic``."""
        return self.same_topic / self.diff_topic


#: The names of the entries of :class:`AttentionByRelation`, in order (the ``"attention"`` probe
#: of :func:`topicmech.dynamics.standard_probes` stores them as the columns of an array).
ATTENTION_FIELDS: tuple[str, ...] = ("self", "same_word", "same_topic", "diff_topic")


def pair_relations(
    pattern: torch.Tensor, inputs: torch.Tensor, topic_of_word: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Checked inputs of the attention probes: BoolTensors ``(pairs, same_word, same_topic)``, each of shape
    (batch, query, key): both tokens are words (``[MASK]``, id ``V``, is left out), they are the same
    word id, their words share a topic.

    ``pattern``: weights of shape (batch, query, key); ``inputs``: LongTensor of shape (batch, N)
    with ids in ``[0, V]``; ``topic_of_word``: shape (V,). ``ValueError`` naming the bad argument.
    """
    relations = _pair_relations(inputs, topic_of_word)
    if not isinstance(pattern, torch.Tensor) or pattern.shape != (inputs.shape[0], inputs.shape[1], inputs.shape[1]):
        raise ValueError(f"pattern must have shape (batch, N, N) matching inputs {tuple(inputs.shape)}, "
                         f"got {tuple(getattr(pattern, 'shape', ()))}")
    return relations


def _pair_relations(inputs: torch.Tensor, topic_of_word: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if (not isinstance(inputs, torch.Tensor) or inputs.dim() != 2 or inputs.dtype.is_floating_point
            or inputs.dtype.is_complex or inputs.dtype == torch.bool):
        got = f"{getattr(inputs, 'dtype', type(inputs).__name__)} of shape {tuple(getattr(inputs, 'shape', ()))}"
        raise ValueError(f"inputs must be a LongTensor of shape (batch, N), got {got}")
    topic_of_word = torch.as_tensor(topic_of_word)
    if topic_of_word.dim() != 1 or topic_of_word.numel() == 0:
        raise ValueError(f"topic_of_word must be a non-empty 1-D tensor, got shape {tuple(topic_of_word.shape)}")
    V = len(topic_of_word)
    if inputs.numel() and (int(inputs.min()) < 0 or int(inputs.max()) > V):
        raise ValueError(f"inputs hold token ids outside [0, {V}] (words and [MASK]): "
                         f"min {int(inputs.min())}, max {int(inputs.max())}")
    is_word = inputs < V                                                        # (B, N)
    tok = inputs.clamp(max=V - 1)
    topic = topic_of_word[tok]                                                  # (B, N)
    pairs = is_word[:, :, None] & is_word[:, None, :]                           # (B, query, key)
    return pairs, tok[:, :, None] == tok[:, None, :], topic[:, :, None] == topic[:, None, :]


def masked_means(pattern: torch.Tensor, masks: list[torch.Tensor]) -> list[float]:
    """Mean of ``pattern`` over each BoolTensor of ``masks`` (same shape), nan for an empty mask or one
    that holds a nan; one product of the pattern with a weight vector per mask."""
    return _mask_reader(torch.stack(masks).flatten(1), 1.0)(pattern.flatten())


def _mask_reader(masks: torch.Tensor, scale: float) -> Callable[[torch.Tensor], list[float]]:
    """``scale`` times the mean of a flat tensor over each row of the BoolTensor ``masks`` (masks, elements)."""
    counts = masks.sum(1)
    weights = masks.to(torch.float64) * (scale / counts.clamp(min=1).to(torch.float64))[:, None]
    empty = counts == 0

    def read(values: torch.Tensor) -> list[float]:
        values = values.detach().to(torch.float64)
        nan = values.isnan()
        means = weights @ values.masked_fill(nan, 0.0)
        if bool(nan.any()):                                                     # a nan counts in its masks only
            means = means.masked_fill((masks & nan).any(1), torch.nan)
        return means.masked_fill(empty, torch.nan).tolist()

    return read


def attention_by_relation(
    pattern: torch.Tensor, inputs: torch.Tensor, topic_of_word: torch.Tensor,
) -> AttentionByRelation:
    """Mean attention weight by the relation between query and key tokens, times ``N``.

    ``pattern``: weights of shape (batch, query, key); ``inputs``: LongTensor of shape
    (batch, N), of which only pairs of real words (id < V) count; ``topic_of_word``: shape (V,).
    A relation without pairs gives nan. To read many patterns on one batch, build the
    reader once with :func:`relation_reader`.
    """
    return relation_reader(inputs, topic_of_word)(pattern)


def relation_reader(inputs: torch.Tensor, topic_of_word: torch.Tensor) -> Callable[[torch.Tensor], AttentionByRelation]:
    """:func:`attention_by_relation` on the fixed batch ``inputs``, as a function of the pattern alone: the
    relations of every (query, key) pair are classified once, and each reading is one product of the
    pattern with four weight vectors (a training probe reads hundreds of patterns on one batch)."""
    pairs, same_word, same_topic = _pair_relations(inputs, topic_of_word)
    eye = torch.eye(inputs.shape[1], dtype=torch.bool)[None]
    masks = torch.stack([pairs & eye, pairs & same_word & ~eye, pairs & same_topic & ~same_word,
                         pairs & ~same_topic]).flatten(1)                       # (4, B * N * N)
    means = _mask_reader(masks, float(inputs.shape[1]))                         # mean, times N
    shape = (inputs.shape[0], inputs.shape[1], inputs.shape[1])

    def read(pattern: torch.Tensor) -> AttentionByRelation:
        if not isinstance(pattern, torch.Tensor) or pattern.shape != shape:
            raise ValueError(f"pattern must have shape (batch, N, N) = {shape} matching inputs, "
                             f"got {tuple(getattr(pattern, 'shape', ()))}")
        return AttentionByRelation(*means(pattern.flatten()))

    return read


def topic_eigenvalue(w_diag: float, w_same: float, w_diff: float, words_per_topic: int) -> float:
    """Eigenvalue ``lambda_t = (w_diag - w_same) + v (w_same - w_diff)`` on topic contrasts of a block-form matrix.

    The matrix ``w_diag I + w_same (B - I) + w_diff (J - B)`` on the words acts so on vectors constant
    within topics and summing to zero (the closed forms of :mod:`topicmech.theory` read it too) (``v = words_per_topic``, not validated: a formula for callers
    that have checked their blocks).
    """
    return (w_diag - w_same) + words_per_topic * (w_same - w_diff)


def topic_growth_eigenvalue(G: np.ndarray | torch.Tensor, topic_of_word: torch.Tensor | np.ndarray) -> float:
    """Eigenvalue of ``-G`` on the topic contrasts, after averaging ``G = dL/dA`` over the symmetry orbits.

    With the orbit means ``G_diag``, ``G_same``, ``G_diff`` (:func:`block_means`
    of ``G[key, query]``), ``G`` acts on vectors constant within topics and summing to zero as
    ``(G_diag - G_same) + v (G_same - G_diff)``; the result is minus that, positive when gradient
    descent raises same-topic scores. Averaging first removes most Monte-Carlo noise.
    """
    m = block_means(G, topic_of_word)
    counts = np.bincount(torch.as_tensor(topic_of_word).cpu().numpy())
    if counts.size < 2 or not np.all(counts == counts[0]) or counts[0] < 2:
        raise ValueError("topic_of_word must describe at least two topics of equal size >= 2")
    return -topic_eigenvalue(m.diag, m.same_topic, m.diff_topic, int(counts[0]))


class TopicCosines(NamedTuple):
    """Cosine similarities between word embeddings: min and mean over distinct same-topic pairs, mean and max over different-topic pairs."""

    min_same_topic: float
    mean_same_topic: float
    mean_diff_topic: float
    max_diff_topic: float


def topic_cosines(gram: torch.Tensor | np.ndarray, words_per_topic: int) -> TopicCosines:
    """Cosines ``G_ab / sqrt(G_aa G_bb)`` of word embeddings from ``gram = W_E^T W_E`` (``[MASK]`` ignored)."""
    G = check_matrix("gram", gram, square=True)
    v = check_positive_int("words_per_topic", words_per_topic)
    V = (G.shape[0] // v) * v
    if V == 0 or G.shape[0] not in (V, V + 1):
        raise ValueError(f"the matrix must have V or V + 1 token columns, V a multiple of "
                         f"words_per_topic={v}, got {G.shape[0]}")
    Gw = G[:V, :V]
    norms = np.sqrt(np.clip(np.diag(Gw), 0.0, None))                # (V,)
    if np.any(norms == 0.0):
        raise ValueError("gram has a word with a zero embedding; cosines are undefined")
    cos = Gw / np.outer(norms, norms)                                # (V, V)
    _, same, diff = relation_masks(np.arange(V) // v)               # distinct same-topic pairs, other topics
    return TopicCosines(*(float(f(cos[m])) if m.any() else math.nan
                          for m, f in ((same, np.min), (same, np.mean), (diff, np.mean), (diff, np.max))))
