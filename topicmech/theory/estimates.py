"""Estimates from a sample: the least-squares value matrix, and the sampling and counting helpers
that the Monte-Carlo estimators of :mod:`topicmech.theory` share."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..data import SimplifiedTopicModel, bert_mask
from ..setting import Setting, check_attend_to_masked
from ..utils import check_float, check_positive_int, spawn_seeds
from .value import RCOND

__all__ = ["least_squares_value_matrix", "check_sample", "doc_counts", "chunks", "sample_chunks"]


def check_sample(inputs: Any, selected: Any, docs: Any, num_tokens: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``inputs, selected, docs`` as int64, bool, int64 arrays of one shape, ids checked against ``num_tokens``."""
    D = check_positive_int("num_tokens", num_tokens)
    if D < 2:
        raise ValueError(f"num_tokens must be >= 2 (words plus [MASK]), got {num_tokens!r}")
    x, s, y = (np.asarray(a.detach().cpu() if isinstance(a, torch.Tensor) else a) for a in (inputs, selected, docs))
    if x.ndim != 2:
        raise ValueError(f"inputs must be 2-D [num_docs, doc_len], got shape {x.shape}")
    for name, arr in (("selected", s), ("docs", y)):
        if arr.shape != x.shape:
            raise ValueError(f"{name} must have the shape of inputs {x.shape}, got {arr.shape}")
    if s.dtype != np.bool_:
        raise ValueError(f"selected must be boolean, got dtype {s.dtype}")
    for name, arr, hi in (("inputs", x, D), ("docs", y, D - 1)):
        if not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(f"{name} must hold integer token ids, got dtype {arr.dtype}")
        if arr.size and (arr.min() < 0 or arr.max() >= hi):
            raise ValueError(f"{name} must hold ids in [0, {hi}), got range [{arr.min()}, {arr.max()}]")
    return x.astype(np.int64, copy=False), s, y.astype(np.int64, copy=False)


def doc_counts(tokens: np.ndarray, weights: np.ndarray, D: int) -> np.ndarray:
    """Per-document weighted token counts: (n, N) ids and weights -> (n, D) (the unweighted
    counts of a torch tensor are :func:`topicmech.stats.doc_counts`)."""
    n = tokens.shape[0]
    flat = (np.arange(n)[:, None] * D + tokens).ravel()
    return np.bincount(flat, weights=weights.ravel().astype(np.float64), minlength=n * D).reshape(n, D)


def chunks(x: np.ndarray, s: np.ndarray, y: np.ndarray, D: int, attend_to_masked: bool, budget: int = 1 << 21):
    """Chunks ``(x, s, y, att, n_att)`` of documents, so that (chunk, max(D, N^2)) arrays stay near ``budget``."""
    step = max(1, budget // max(D, x.shape[1] ** 2, 1))
    for start in range(0, x.shape[0], step):
        xs, ss, ys = x[start:start + step], s[start:start + step], y[start:start + step]
        att = np.ones_like(ss) if attend_to_masked else ~ss  # (n, N) visible keys
        yield xs, ss, ys, att, att.sum(axis=1)


def least_squares_value_matrix(inputs: Any, selected: Any, docs: Any, num_tokens: int, *,
                               attend_to_masked: bool, l2: float = 0.0) -> np.ndarray:
    """Least-squares value matrix fitted on a sample (uniform attention, one-hot inputs).

    Minimises ``mean ||W xbar - e_y||^2 + l2 ||W||_F^2`` over the selected positions with at
    least one visible key (minimum-norm solution when rank deficient and ``l2 == 0``).

    Parameters
    ----------
    inputs : tensor or ndarray, shape (num_docs, doc_len)
        Corrupted ids (``[MASK] = num_tokens - 1``).
    selected : tensor or ndarray of bool, shape (num_docs, doc_len)
        The selection mask.
    docs : tensor or ndarray, shape (num_docs, doc_len)
        True word ids.
    num_tokens : int
        D = V + 1.
    attend_to_masked : bool, keyword only
        The key convention (True: selected positions are visible keys).
    l2 : float
        Ridge coefficient >= 0.

    Returns
    -------
    W : ndarray, shape (D, D)
    """
    attend_to_masked = check_attend_to_masked(attend_to_masked)
    x, s, y = check_sample(inputs, selected, docs, num_tokens)
    lam = check_float("l2", l2, positive=False)
    D = int(num_tokens)
    Sxx, Cyx, total = np.zeros((D, D)), np.zeros((D, D)), 0.0
    for xs, ss, ys, att, n_att in chunks(x, s, y, D, attend_to_masked):
        n_sel = (ss & (n_att > 0)[:, None]).sum(axis=1).astype(np.float64)  # (n,) positions used
        keep = n_sel > 0
        if not keep.any():
            continue
        xs, ss, ys, att, n_att, n_sel = xs[keep], ss[keep], ys[keep], att[keep], n_att[keep], n_sel[keep]
        xbar = doc_counts(xs, att, D) / n_att[:, None]  # (n, D), the same for every selected position
        Sxx += (xbar * n_sel[:, None]).T @ xbar
        Cyx += doc_counts(ys, ss, D).T @ xbar
        total += float(n_sel.sum())
    if total == 0:
        raise ValueError("selected has no usable position (none selected, or none with a visible key)")
    Sxx /= total
    Cyx /= total
    if lam > 0:
        return np.linalg.solve(Sxx + lam * np.eye(D), Cyx.T).T
    return np.linalg.lstsq(Sxx, Cyx.T, rcond=RCOND)[0].T




def sample_chunks(p: Setting, num_docs: int, seed: int, chunk: int):
    """``(docs, inputs, selected)`` of the setting ``p`` as numpy arrays, ``chunk`` documents at a time, two
    derived seeds each (:class:`topicmech.data.SimplifiedTopicModel`, :func:`topicmech.data.bert_mask`)."""
    model = SimplifiedTopicModel(p.T, p.v, p.tau)
    n_chunks = -(-num_docs // chunk)
    seeds = spawn_seeds(seed, 2 * n_chunks)
    for c in range(n_chunks):
        docs = model.sample(min(chunk, num_docs - c * chunk), int(p.N), seed=seeds[2 * c])
        inputs, selected = bert_mask(docs, p.V, p.masking, seed=seeds[2 * c + 1])
        yield docs.numpy(), inputs.numpy(), selected.numpy()

