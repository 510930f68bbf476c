"""Probes: summarise a matrix or an attention pattern by topic relation.

Book: chapter 2 introduces :func:`block_means`; chapter 5 introduces
:func:`attention_by_relation`; chapters 6-7 track both during training.

Every probe sorts pairs of tokens into three relations, the orbits of the topic
model's symmetry: the **same word**, **same topic** (different word) and **different
topic**.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

__all__ = ["BlockMeans", "block_means", "relation_masks", "attention_by_relation", "AttentionByRelation",
           "topic_contrasts"]


class BlockMeans(NamedTuple):
    """Means of a word-by-word matrix over the three relations.

    Attributes
    ----------
    diag : float
        Mean of the diagonal (same word).
    same_topic : float
        Mean over pairs of different words of the same topic.
    diff_topic : float
        Mean over pairs of words of different topics.
    mask_col : float or None
        Mean of the ``[MASK]`` column over word rows (None when the matrix has no
        ``[MASK]`` row/column).
    """

    diag: float
    same_topic: float
    diff_topic: float
    mask_col: float | None = None

    @property
    def topic_gap(self) -> float:
        """``same_topic - diff_topic``."""
        return self.same_topic - self.diff_topic


def _as_numpy(x: torch.Tensor | np.ndarray) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().double().numpy()
    return np.asarray(x, dtype=float)


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

    Parameters
    ----------
    matrix : Tensor or ndarray, shape (V, V) or (V + 1, V + 1)
        Rows and columns index tokens; with ``V + 1`` the last index is ``[MASK]``.
    topic_of_word : LongTensor or ndarray, shape (V,)

    Returns
    -------
    BlockMeans
        ``nan`` for a relation with no pairs (e.g. same topic when ``v = 1``).
    """
    M = _as_numpy(matrix)
    V = len(topic_of_word)
    if M.ndim != 2 or M.shape[0] != M.shape[1] or M.shape[0] not in (V, V + 1):
        raise ValueError(f"matrix must have shape ({V}, {V}) or ({V + 1}, {V + 1}), got {M.shape}")
    W = M[:V, :V]
    same, topic, diff = relation_masks(topic_of_word)

    def mean(mask: np.ndarray) -> float:
        return float(W[mask].mean()) if mask.any() else float("nan")

    mask_col = float(M[:V, V].mean()) if M.shape[0] == V + 1 else None
    return BlockMeans(mean(same), mean(topic), mean(diff), mask_col)


def topic_contrasts(A: torch.Tensor | np.ndarray, topic_of_word: torch.Tensor | np.ndarray) -> dict[str, float]:
    """Contrasts of a key-query score matrix over word queries.

    Returns ``{"same_word": A[same word] - A[diff topic], "same_topic": A[same topic] - A[diff topic]}``,
    means over word pairs (rows: key, columns: query).
    """
    m = block_means(A, topic_of_word)
    return {"same_word": m.diag - m.diff_topic, "same_topic": m.same_topic - m.diff_topic}


class AttentionByRelation(NamedTuple):
    """Average attention from a word query to one key, by relation, times ``N``.

    A value of 1 means uniform attention; ``same_topic / diff_topic`` is the topic ratio.

    Attributes
    ----------
    self_ : float
        The query's own position.
    same_word : float
        Other positions holding the same word.
    same_topic : float
        Positions holding a different word of the same topic.
    diff_topic : float
        Positions holding a word of another topic.
    """

    self_: float
    same_word: float
    same_topic: float
    diff_topic: float

    @property
    def topic_ratio(self) -> float:
        """``same_topic / diff_topic``."""
        return self.same_topic / self.diff_topic


def attention_by_relation(pattern: torch.Tensor, inputs: torch.Tensor, topic_of_word: torch.Tensor) -> AttentionByRelation:
    """Average attention weight by the relation between query and key tokens.

    Parameters
    ----------
    pattern : Tensor, shape (batch, query, key)
        Attention weights (rows sum to 1).
    inputs : LongTensor, shape (batch, N)
        Tokens; only pairs of real words (id < V) count.
    topic_of_word : LongTensor, shape (V,)

    Returns
    -------
    AttentionByRelation
        Mean weight in each relation, multiplied by ``N``.
    """
    if (not isinstance(inputs, torch.Tensor) or inputs.dim() != 2 or inputs.dtype.is_floating_point
            or inputs.dtype.is_complex or inputs.dtype == torch.bool):
        raise ValueError(f"inputs must be a LongTensor of shape (batch, N), got "
                         f"{getattr(inputs, 'dtype', type(inputs).__name__)} of shape {tuple(getattr(inputs, 'shape', ()))}")
    if not isinstance(pattern, torch.Tensor) or pattern.dim() != 3 or pattern.shape[0] != inputs.shape[0] \
            or pattern.shape[1:] != (inputs.shape[1],) * 2:
        raise ValueError(f"pattern must have shape (batch, N, N) matching inputs {tuple(inputs.shape)}, "
                         f"got {tuple(getattr(pattern, 'shape', ()))}")
    topic_of_word = torch.as_tensor(topic_of_word)
    if topic_of_word.dim() != 1 or topic_of_word.numel() == 0:
        raise ValueError(f"topic_of_word must be a non-empty 1-D tensor, got shape {tuple(topic_of_word.shape)}")
    V = len(topic_of_word)
    if inputs.numel() and (int(inputs.min()) < 0 or int(inputs.max()) > V):
        raise ValueError(f"inputs hold token ids outside [0, {V}] (words and [MASK]): "
                         f"min {int(inputs.min())}, max {int(inputs.max())}")
    N = inputs.shape[1]
    is_word = inputs < V                                                        # (B, N)
    tok = inputs.clamp(max=V - 1)
    topic = topic_of_word[tok]                                                  # (B, N)
    pair = is_word[:, :, None] & is_word[:, None, :]                            # (B, query, key)
    eye = torch.eye(N, dtype=torch.bool)[None]
    same_tok = tok[:, :, None] == tok[:, None, :]
    same_top = topic[:, :, None] == topic[:, None, :]
    masks = (pair & eye, pair & same_tok & ~eye, pair & same_top & ~same_tok, pair & ~same_top)

    def mean(mask: torch.Tensor) -> float:
        return float(pattern[mask].mean()) * N if mask.any() else float("nan")

    return AttentionByRelation(*(mean(m) for m in masks))
