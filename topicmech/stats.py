"""Sampling statistics the chapters and the tests share: count vectors, their exact tests, and errors.

Chapter 1 checks the samplers against their exact moments with :func:`doc_counts`,
:func:`count_chi2`, :func:`pair_stats`, :func:`max_abs_z` and :func:`distinct_topics_moments`;
chapter 4 measures a trained value matrix against the optimum with :func:`relative_errors`. The
tests re-check the same claims over many seeds with the same functions.
"""

from __future__ import annotations

import math
from decimal import Decimal, InvalidOperation
from typing import Any

import numpy as np
import torch

from .data import SimplifiedTopicModel, TopicModel

__all__ = ["doc_counts", "count_chi2", "pair_stats", "max_abs_z", "distinct_topics_moments", "relative_errors",
           "block_share", "reported_bounds"]


def doc_counts(tokens: torch.Tensor, size: int) -> np.ndarray:
    """Count vectors, shape ``(num_docs, size)``, float64: how often each id occurs in each document
    (unweighted; :func:`topicmech.theory.estimates.doc_counts` weights each position).

    ``tokens``: LongTensor of shape ``(num_docs, N)`` with ids in ``[0, size)``.
    """
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2:
        raise ValueError(f"tokens must be a tensor of shape (num_docs, N), got {type(tokens).__name__}")
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
        raise ValueError(f"size must be a positive integer, got {size!r}")
    M = tokens.shape[0]
    flat = (torch.arange(M)[:, None] * size + tokens).reshape(-1)             # (M * N,)
    return torch.bincount(flat, minlength=M * size).reshape(M, size).double().numpy()


def count_chi2(counts: np.ndarray, p: np.ndarray, P: np.ndarray) -> tuple[float, int]:
    """Chi-square statistic of summed count vectors against their exact mean and covariance.

    ``counts``: ``(num_docs, size)`` from :func:`doc_counts` (every document of one length ``N``);
    ``p``: the exact marginal, shape ``(size,)``; ``P``: the exact pair probabilities
    ``Pr(x_i = a, x_j = b)``, ``i != j``, shape ``(size, size)``. The covariance of one count vector
    is ``N diag(p) + N(N-1) P - N^2 p p^T`` (rank ``size - 1``). Returns ``(X^2, size - 1)``: the
    statistic and its degrees of freedom.
    """
    M, N = counts.shape[0], counts[0].sum()
    cov = N * np.diag(p) + N * (N - 1) * P - N**2 * np.outer(p, p)           # (size, size), rank size-1
    x = (counts.sum(0) - M * N * p) / math.sqrt(M)
    return float(x @ np.linalg.pinv(cov, hermitian=True, rcond=1e-10) @ x), len(p) - 1


def pair_stats(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unbiased pair-frequency estimate and its standard error, both shape ``(size, size)``.

    Averages ``(c c^T - diag c) / (N(N-1))`` over the documents' count vectors ``c`` (rows of
    ``counts``, every document of one length ``N``) without forming a ``(num_docs, size, size)``
    array; the standard error comes from the spread of that per-document quantity.
    """
    M, N = counts.shape[0], counts[0].sum()
    K = N * (N - 1)                                                           # ordered pairs per doc
    s1 = counts.T @ counts - np.diag(counts.sum(0))                           # sum_d (c c^T - diag c)
    s2 = (counts**2).T @ counts**2                                            # sum_d (c_a c_b)^2, a != b
    np.fill_diagonal(s2, ((counts**2 - counts) ** 2).sum(0))                  # sum_d (c_a^2 - c_a)^2
    mean = s1 / (M * K)
    var = s2 / (M * K**2) - mean**2                                           # per-document variance
    return mean, np.sqrt(var / M)


def max_abs_z(est: np.ndarray, se: np.ndarray, exact: np.ndarray, false_alarm: float) -> tuple[float, float]:
    """The largest ``|z|`` of the entries ``a <= b`` of ``est`` against ``exact``, and its bound.

    ``z = (est - exact) / se`` entrywise (shapes ``(size, size)``, e.g. from :func:`pair_stats`);
    the bound is the two-sided Bonferroni quantile ``z_{1 - false_alarm / (2 m)}`` for the ``m``
    entries, so a correct sampler exceeds it with probability at most ``false_alarm``.
    """
    from scipy import stats  # lazy: scipy.stats costs about a second to import

    if not 0.0 < false_alarm < 1.0:
        raise ValueError(f"false_alarm must be in (0, 1), got {false_alarm!r}")
    iu = np.triu_indices(len(exact))
    z = (est - exact)[iu] / se[iu]
    return float(np.abs(z).max()), float(stats.norm.isf(false_alarm / (2 * len(z))))


def block_share(z: np.ndarray, num_topics: int, words_per_topic: int) -> float:
    """Share of the mean square of a ``(V, V)`` word matrix carried by its topic-block means.

    Each entry is replaced by the mean of its ``(v, v)`` topic block; the result is the mean
    square of that block-constant matrix over the mean square of ``z``. Independent noise
    gives about ``1 / v**2``; a pattern that is constant on topic blocks gives 1.
    """
    z = np.asarray(z, dtype=np.float64)
    T, v = num_topics, words_per_topic
    if T < 1 or v < 1 or z.shape != (T * v, T * v):
        raise ValueError(f"z must have shape ({T * v}, {T * v}) for num_topics={num_topics} "
                         f"and words_per_topic={words_per_topic}, got shape {z.shape}")
    blocks = z.reshape(T, v, T, v).mean(axis=(1, 3))
    return float((np.kron(blocks, np.ones((v, v))) ** 2).mean() / (z**2).mean())


def distinct_topics_moments(model: TopicModel, doc_len: int) -> tuple[float, float]:
    """Exact mean and variance of the number of distinct topics in a document of ``doc_len`` tokens.

    The number is ``m`` minus a sum of ``m`` indicators "topic ``t`` is missing": for the
    simplified model ``m = tau`` candidate topics, each missing with probability
    ``(1 - 1/tau)^N`` (two with ``(1 - 2/tau)^N``); under LDA ``m = T`` and topic ``t`` is missing
    with probability ``prod_k ((T-1) alpha + k) / (T alpha + k)`` (two: ``T - 2`` for ``T - 1``).
    """
    if not isinstance(model, TopicModel):
        raise ValueError(f"model must be a topicmech.data.TopicModel, got {type(model).__name__}")
    if isinstance(model, SimplifiedTopicModel):
        m = model.topics_per_doc                                              # candidate topics: those of S
        miss1, miss2 = (1 - 1 / m) ** doc_len, (1 - 2 / m) ** doc_len
    else:
        m, a = model.num_topics, model.alpha
        miss1 = float(np.prod([((m - 1) * a + k) / (m * a + k) for k in range(doc_len)]))
        miss2 = float(np.prod([((m - 2) * a + k) / (m * a + k) for k in range(doc_len)]))
    return m * (1 - miss1), m * miss1 * (1 - miss1) + m * (m - 1) * (miss2 - miss1**2)


def relative_errors(learned: Any, target: Any, attend_to_masked: bool) -> dict[str, float]:
    """Errors of learned orbit means on the scale of each exact quantity.

    ``learned`` and ``target`` carry ``diag``, ``same_topic``, ``diff_topic`` and ``mask_col``
    (the entries w_diag, w_same, w_diff and the ``[MASK]`` column mu of the notation page; e.g.
    :class:`topicmech.theory.ValueBlocks`), a star marking the target's. Returns ``"boost"``,
    the error of ``w_diag - w_same`` relative to ``w*_diag - w*_same`` (with hidden keys, where
    ``w*_diag = w*_same``, relative to ``w*_same - w*_diff``); ``"topic"``,
    ``(w_same - w_diff) / (w*_same - w*_diff) - 1``; ``"diff_topic"``, the error of w_diff
    relative to ``|w*_diff|``; ``"mask_col"``, the error of mu relative to ``mu*`` (with hidden
    keys, mu itself).
    """
    topic = target.same_topic - target.diff_topic                    # w*_same - w*_diff
    # hidden keys: w*_diag = w*_same, so the boost is measured on the topic scale
    boost_scale = target.diag - target.same_topic if attend_to_masked else topic
    return {
        "boost": ((learned.diag - learned.same_topic) - (target.diag - target.same_topic)) / boost_scale,
        "topic": (learned.same_topic - learned.diff_topic) / topic - 1,
        "diff_topic": (learned.diff_topic - target.diff_topic) / abs(target.diff_topic),
        "mask_col": ((learned.mask_col - target.mask_col) / target.mask_col if attend_to_masked
                     else learned.mask_col),
    }


def reported_bounds(text: str, spread: float | None = None) -> tuple[float, float]:
    """The range of a value reported as ``text`` (e.g. ``"0.010"``) with a ``spread`` (e.g. a
    standard deviation; ``None`` or NaN when none is given): the value plus or minus the larger
    of the spread and half a unit of its last reported digit (``"0.010"`` is known to 0.0005)."""
    try:
        value = Decimal(text)
    except (InvalidOperation, TypeError):
        raise ValueError(f"text must be a number as reported, got {text!r}") from None
    half = float(Decimal(1).scaleb(value.as_tuple().exponent)) / 2
    if spread is not None and not math.isnan(float(spread)) and not float(spread) >= 0:
        raise ValueError(f"spread must be >= 0, got {spread!r}")
    sd = 0.0 if spread is None or math.isnan(float(spread)) else float(spread)
    return float(value) - max(half, sd), float(value) + max(half, sd)
