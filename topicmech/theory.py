"""Exact population quantities for the one-layer model under uniform attention (book ch. 3-5).

Pure functions of a :class:`topicmech.setting.Setting`, except the tied-embedding optimiser
(numerical) and the Monte-Carlo stage-2 gradient. Notation as in the book: ``T, v, V = T v,
D = V + 1`` ([MASK] has id ``V``), ``tau``, ``N`` (``doc_len``, may be ``math.inf``),
``p_m, p_c, p_r`` and ``p_[M] = 1 - p_c - p_r``. Matrices act on column vectors: ``W[out_token, in_token]``, the
prediction is ``W @ xbar``; attention scores are ``A[key_token, query_token]``. With
``setting.attend_to_masked`` True every position is a key; with False selected positions are hidden
and the [MASK] row and column of ``Sigma``, ``C`` and ``W*`` are 0. Population loss:
``L(W) = tr(W Sigma W^T) - 2 tr(W C^T) + 1``; ridge adds ``l2 ||W||_F^2``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .data import SimplifiedTopicModel, bert_mask
from .setting import Setting, check_attend_to_masked
from .utils import check_float, check_positive_int, numpy_rng, spawn_seeds

__all__ = [
    "ValueBlocks", "kappa", "moments", "population_loss", "optimal_value_matrix", "value_block_coefficients",
    "block_matrix", "orbit_means", "orbit_deviation", "diag_excess", "topic_eigenvalue_hidden",
    "weighted_block_gap", "bayes_risk", "least_squares_value_matrix", "embedding_loss", "tied_embedding_optimum",
    "empirical_key_query_gradient", "key_query_gradient", "key_query_gradient_limit", "sigma_eigenvalues",
    "lda_effective_topics", "lda_alpha_matching", "lda_moments", "lda_optimal_value_matrix", "lda_value_blocks",
    "lda_sigma_eigenvalues",
]

# Relative threshold below which an eigenvalue of Sigma counts as zero (pseudo-inverse).
_RCOND = 1e-12


# ---- the setting ---------------------------------------------------------------------------------
def _check_setting(setting: object) -> Setting:
    """``setting`` if it is a :class:`topicmech.setting.Setting` (validated when built), else ValueError."""
    if not isinstance(setting, Setting):
        raise ValueError(f"setting must be a topicmech.Setting, got {setting!r}")
    return setting


def _qq_coefficients(s: Setting) -> tuple[float, float]:
    """``E_S[q_S q_S^T] = kB B + kJ J`` on the word block."""
    T, v, tau = s.T, s.v, s.tau
    kJ = (tau - 1) / (T * (T - 1) * tau * v * v) if T > 1 else 0.0
    return 1.0 / (T * tau * v * v) - kJ, kJ


# ---- kappa and the moments ----------------------------------------------------------------------
def _kappa(N: float | int, p_m: float) -> float:
    if math.isinf(N):
        return 0.0
    n = int(N) - 1
    if p_m == 0.0:
        return 1.0 / n
    k = np.arange(1, n + 1, dtype=np.float64)
    log_fact = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, n + 1, dtype=np.float64)))])
    log_binom = log_fact[n] - log_fact[1:] - log_fact[n - np.arange(1, n + 1)]  # (n,)
    log_pmf = log_binom + k * math.log1p(-p_m) + (n - k) * math.log(p_m)
    p_pos = -math.expm1(n * math.log(p_m))  # P(K >= 1)
    return float(np.sum(np.exp(log_pmf) / k) / p_pos)


def kappa(setting: Setting) -> float:
    """``kappa = E[1/K | K >= 1]`` with ``K ~ Binomial(N - 1, 1 - p_m)``, exactly (0 for ``N = math.inf``).

    ``K`` is the number of visible keys of a selected position with hidden keys. Reads
    ``setting.doc_len`` and ``setting.masking.mask_prob`` (``< 1``) only.
    """
    s = _check_setting(setting)
    if s.p_m >= 1.0:
        raise ValueError(f"mask_prob must be < 1 for kappa (K >= 1 is impossible), got {s.p_m!r}")
    return _kappa(s.N, s.p_m)


def _moments_from(p: Setting, Iw: Any, Q: Any, uu: Any, ue: Any, eu: Any, ee: Any) -> tuple[Any, Any]:
    """Sigma, C from the basis ``Iw`` (identity on the words), ``Q = E_S[q q^T]``, ``u u^T``, ``u e^T``, ``e u^T``,
    ``e e^T`` (``u`` uniform on the words, ``e = e_[MASK]``): dense arrays or :class:`_Alg`."""

    def outer(x: tuple[float, float, float], y: tuple[float, float, float]) -> Any:
        """``E_S[(x0 q + x1 u + x2 e)(y0 q + y1 u + y2 e)^T]``, using ``E_S q_S = u``."""
        return (x[0] * y[0] * Q + (x[0] * y[1] + x[1] * y[0] + x[1] * y[1]) * uu
                + (x[0] + x[1]) * y[2] * ue + x[2] * (y[0] + y[1]) * eu + x[2] * y[2] * ee)

    def diag(x: tuple[float, float, float]) -> Any:
        """``E_S diag(x0 q + x1 u + x2 e)``."""
        return (x[0] + x[1]) / p.V * Iw + x[2] * ee

    V, N = p.V, p.N
    q = (1.0, 0.0, 0.0)
    if not p.attend_to_masked:
        kap = _kappa(N, p.p_m)
        return kap / V * Iw + (1.0 - kap) * Q, Q
    c = (p.p_c, p.p_r, p.p_M)  # law of the selected token
    d = (1.0 - p.p_m + p.p_m * p.p_c, p.p_m * p.p_r, p.p_m * p.p_M)  # law of any other token
    if math.isinf(N):
        return outer(d, d), outer(q, d)
    Sigma = (diag(c) + (N - 1) * (outer(c, d) + outer(d, c)) + (N - 1) * diag(d)
             + ((N - 1) * (N - 2)) * outer(d, d)) / N**2
    C = (p.p_c / V * Iw + p.p_r * uu + p.p_M * ue + (N - 1) * outer(q, d)) / N
    return Sigma, C


def _dense_moments(p: Setting) -> tuple[np.ndarray, np.ndarray]:
    V, D = p.V, p.D
    topic = np.arange(V) // p.v
    u, e = np.append(np.full(V, 1.0 / V), 0.0), np.eye(D)[V]
    Iw, B, J = np.zeros((3, D, D))
    Iw[:V, :V] = np.eye(V)
    B[:V, :V] = topic[:, None] == topic[None, :]
    J[:V, :V] = 1.0
    kB, kJ = _qq_coefficients(p)
    return _moments_from(p, Iw, kB * B + kJ * J, np.outer(u, u), np.outer(u, e), np.outer(e, u), np.outer(e, e))


def moments(setting: Setting) -> tuple[np.ndarray, np.ndarray]:
    """Exact second moments ``Sigma = E[xbar xbar^T]`` and ``C = E[y xbar^T]`` at a selected position.

    Parameters
    ----------
    setting : Setting
        ``T, v, tau``, ``N`` (``math.inf`` gives the long-document limit), the masking (random
        words are uniform over the V words) and the key convention: with
        ``attend_to_masked=False`` the [MASK] row and column are 0.

    Returns
    -------
    Sigma, C : ndarray, shape (D, D)
        ``Sigma`` symmetric (input tokens); ``C[target, input]``.
    """
    return _dense_moments(_check_setting(setting))


def population_loss(W: np.ndarray, Sigma: np.ndarray, C: np.ndarray) -> float:
    """Population loss ``L(W) = tr(W Sigma W^T) - 2 tr(W C^T) + 1``; all arrays of shape (D, D)."""
    W, Sigma, C = (np.asarray(x, dtype=np.float64) for x in (W, Sigma, C))
    return float(np.einsum("ij,jk,ik->", W, Sigma, W) - 2.0 * np.sum(W * C) + 1.0)


def _solve_right(C: np.ndarray, Sigma: np.ndarray, l2: float) -> np.ndarray:
    """``C (Sigma + l2 I)^{-1}``, or the minimum-norm ``C Sigma^+`` when singular and l2 = 0."""
    S = Sigma + l2 * np.eye(Sigma.shape[0])
    evals = np.linalg.eigvalsh(0.5 * (S + S.T))
    top = max(float(np.max(np.abs(evals))), np.finfo(float).tiny)
    if float(np.min(evals)) > 1e3 * _RCOND * top:
        return np.linalg.solve(S.T, C.T).T  # S is symmetric; solve S W^T = C^T
    return C @ np.linalg.pinv(S, rcond=_RCOND, hermitian=True)


def optimal_value_matrix(setting: Setting, l2: float = 0.0) -> np.ndarray:
    """Stage-1 optimum ``W* = C (Sigma + l2 I)^{-1}`` under uniform attention, by a dense solve.

    With hidden keys the solve runs on the word block and the [MASK] column is 0. A singular
    ``Sigma`` with ``l2 == 0`` (``doc_len=math.inf``) gives the minimum-norm ``C Sigma^+``. At
    finite N with ``l2 == 0`` every attended column sums to 1 over the word rows, so the [MASK]
    column is ``1/V`` with visible keys whenever [MASK] occurs.

    Parameters
    ----------
    setting : Setting
        As in :func:`moments`.
    l2 : float
        Ridge coefficient >= 0.

    Returns
    -------
    W_star : ndarray, shape (D, D)
        ``W*[out_token, in_token]``; the [MASK] row is 0.
    """
    p = _check_setting(setting)
    lam = check_float("l2", l2, positive=False)
    return _optimum_from_moments(*_dense_moments(p), attend_to_masked=p.attend_to_masked, l2=lam)


def _optimum_from_moments(Sigma: np.ndarray, C: np.ndarray, *, attend_to_masked: bool, l2: float) -> np.ndarray:
    """``C (Sigma + l2 I)^{-1}``; with hidden keys on the word block only, the ``[MASK]`` row and column 0."""
    k = Sigma.shape[0] if attend_to_masked else Sigma.shape[0] - 1              # attended tokens
    W = np.zeros_like(Sigma)
    W[:k, :k] = _solve_right(C[:k, :k], Sigma[:k, :k], l2)
    return W


def _sigma_extremes(Sigma: np.ndarray, attend_to_masked: bool) -> tuple[float, float]:
    """Smallest positive (above ``_RCOND`` times the largest) and largest eigenvalue of ``Sigma``,
    on the word block with hidden keys."""
    S = Sigma if attend_to_masked else Sigma[:-1, :-1]
    evals = np.linalg.eigvalsh(0.5 * (S + S.T))
    top = float(evals[-1])
    return float(evals[evals > _RCOND * top][0]), top


# ---- symmetry algebra route (O(1) in V) ---------------------------------------------------------
@dataclass(frozen=True)
class _Alg:
    """``[[xI I + xB B + xJ J, c 1], [r 1^T, m]]`` by its spectral coordinates.

    It acts as ``lw`` on within-topic contrasts, ``lt`` on topic contrasts and as the 2x2 ``K``
    on span{1/sqrt(V), e_M}; sums, products and pseudo-inverses act coordinate-wise.
    """

    lw: float
    lt: float
    K: np.ndarray  # (2, 2)
    v: int
    V: int

    @classmethod
    def from_coeffs(cls, v: int, V: int, xI: float = 0.0, xB: float = 0.0, xJ: float = 0.0,
                    c: float = 0.0, r: float = 0.0, m: float = 0.0) -> _Alg:
        s = math.sqrt(V)
        K = np.array([[xI + v * xB + V * xJ, c * s], [r * s, m]], dtype=np.float64)
        return cls(float(xI), float(xI + v * xB), K, v, V)

    def coeffs(self) -> tuple[float, float, float, float, float, float]:
        """(xI, xB, xJ, c, r, m)."""
        s = math.sqrt(self.V)
        xB = (self.lt - self.lw) / self.v
        xJ = (self.K[0, 0] - self.lt) / self.V
        return self.lw, xB, xJ, self.K[0, 1] / s, self.K[1, 0] / s, self.K[1, 1]

    def __add__(self, other: _Alg) -> _Alg:
        return _Alg(self.lw + other.lw, self.lt + other.lt, self.K + other.K, self.v, self.V)

    def __rmul__(self, scalar: float) -> _Alg:
        return _Alg(scalar * self.lw, scalar * self.lt, scalar * self.K, self.v, self.V)

    def __truediv__(self, scalar: float) -> _Alg:
        return (1.0 / scalar) * self

    def __matmul__(self, other: _Alg) -> _Alg:
        return _Alg(self.lw * other.lw, self.lt * other.lt, self.K @ other.K, self.v, self.V)

    def word_block(self) -> _Alg:
        """Restriction to the words ([MASK] row, column and entry set to 0)."""
        return _Alg(self.lw, self.lt, np.array([[self.K[0, 0], 0.0], [0.0, 0.0]]), self.v, self.V)

    def pinv(self, l2: float = 0.0, words_only: bool = False) -> _Alg:
        """``(X + l2 I)^+`` for symmetric X; ``words_only`` treats the [MASK] coordinate as absent."""
        X = _Alg(self.lw + l2, self.lt + l2, self.K + l2 * np.eye(2), self.v, self.V)
        X = X.word_block() if words_only else X
        w, U = np.linalg.eigh(0.5 * (X.K + X.K.T))
        tol = _RCOND * max(abs(X.lw), abs(X.lt), float(np.max(np.abs(w))), np.finfo(float).tiny)

        def inv(x: float) -> float:
            return 0.0 if abs(x) <= tol else 1.0 / x

        return _Alg(inv(X.lw), inv(X.lt), (U * np.array([inv(x) for x in w])) @ U.T, self.v, self.V)


def _alg_moments(p: Setting) -> tuple[_Alg, _Alg]:
    el, V = functools.partial(_Alg.from_coeffs, p.v, p.V), p.V
    kB, kJ = _qq_coefficients(p)
    return _moments_from(p, el(xI=1.0), el(xB=kB, xJ=kJ), el(xJ=1.0 / V**2), el(c=1.0 / V), el(r=1.0 / V), el(m=1.0))


@dataclass(frozen=True)
class ValueBlocks:
    """Orbit values of a block-form value matrix.

    ``W_words = diag I + same_topic (B - I) + diff_topic (J - B)``, the [MASK] column is
    ``mask_col`` on every word row and the [MASK] row is 0.

    Attributes
    ----------
    diag : float
        ``w_diag``, the same-word entry ``W[w, w]``.
    same_topic : float
        ``w_same``, ``W[a, b]`` for distinct words of one topic (nan when v == 1).
    diff_topic : float
        ``w_diff``, ``W[a, b]`` for words of different topics (nan when T == 1).
    mask_col : float
        ``w_mask``, ``W[w, MASK]`` (0 with hidden keys, by convention).
    topic_eigenvalue : float
        ``lambda_t = (w_diag - w_same) + v (w_same - w_diff)`` on topic contrasts (nan when T == 1).
    """

    diag: float
    same_topic: float
    diff_topic: float
    mask_col: float
    topic_eigenvalue: float

    @property
    def within_eigenvalue(self) -> float:
        """``lambda_w = w_diag - w_same`` on within-topic contrasts (the same-word boost)."""
        return self.diag - self.same_topic


def _value_blocks(p: Setting, lam: float) -> ValueBlocks:
    Sigma, C = _alg_moments(p)
    W = C @ Sigma.pinv(lam) if p.attend_to_masked else C.word_block() @ Sigma.pinv(lam, words_only=True)
    xI, xB, xJ, c, _r, _m = W.coeffs()
    return ValueBlocks(diag=float(xI + xB + xJ), same_topic=float(xB + xJ) if p.v > 1 else math.nan,
                       diff_topic=float(xJ) if p.T > 1 else math.nan, mask_col=float(c),
                       topic_eigenvalue=float(W.lt) if p.T > 1 else math.nan)


def value_block_coefficients(setting: Setting, l2: float = 0.0) -> ValueBlocks:
    """Orbit values of the stage-1 optimum, computed in the symmetry algebra.

    ``Sigma`` and ``C`` lie in span{I, B, J} plus constant [MASK] row and column, an algebra
    diagonalised by within-topic contrasts, topic contrasts and span{1, e_M}: the cost is
    independent of V. Matches :func:`optimal_value_matrix` (same conventions) to rounding.

    Parameters
    ----------
    setting, l2
        As in :func:`optimal_value_matrix`.

    Returns
    -------
    blocks : ValueBlocks
        Expand with :func:`block_matrix`.
    """
    return _value_blocks(_check_setting(setting), check_float("l2", l2, positive=False))


def _orbit_masks(T: int, v: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Boolean (V, V) masks: same word, same topic (distinct words), different topic."""
    topic = np.arange(T * v) // v
    same = topic[:, None] == topic[None, :]
    eye = np.eye(T * v, dtype=bool)
    return eye, same & ~eye, ~same


def block_matrix(blocks: ValueBlocks, num_topics: int, words_per_topic: int) -> np.ndarray:
    """Expand orbit values into the dense (D, D) matrix ([MASK] row 0, [MASK] column ``mask_col``)."""
    T = check_positive_int("num_topics", num_topics)
    v = check_positive_int("words_per_topic", words_per_topic)
    V = T * v
    W = np.zeros((V + 1, V + 1))
    for mask, value in zip(_orbit_masks(T, v), (blocks.diag, blocks.same_topic, blocks.diff_topic)):
        W[:V, :V][mask] = value
    W[:V, V] = blocks.mask_col
    return W


def _word_orbits(matrix: np.ndarray, num_topics: int, words_per_topic: int) -> tuple[np.ndarray, int, int]:
    T = check_positive_int("num_topics", num_topics)
    v = check_positive_int("words_per_topic", words_per_topic)
    M = np.asarray(matrix, dtype=np.float64)
    if M.shape != (T * v + 1, T * v + 1):
        raise ValueError(f"matrix must have shape {(T * v + 1, T * v + 1)}, got {M.shape}")
    return M, T, v


def orbit_means(matrix: np.ndarray, num_topics: int, words_per_topic: int) -> ValueBlocks:
    """Means of a (D, D) matrix over the three word orbits and the [MASK] column.

    Summarises a learned or Monte-Carlo matrix like :func:`value_block_coefficients`;
    ``topic_eigenvalue`` is ``(diag - same) + v (same - diff)`` of the means.
    """
    M, T, v = _word_orbits(matrix, num_topics, words_per_topic)
    V = T * v
    a, b, g = (float(M[:V, :V][mask].mean()) if mask.any() else math.nan for mask in _orbit_masks(T, v))
    lt = (a - b) + v * (b - g) if (v > 1 and T > 1) else math.nan
    return ValueBlocks(a, b, g, float(M[:V, V].mean()), lt)


def orbit_deviation(matrix: np.ndarray, num_topics: int, words_per_topic: int) -> float:
    """Largest deviation of a (D, D) matrix from block form.

    ``max |entry - orbit mean|`` over the three word orbits, the [MASK] column and the [MASK]
    row on the words (about 1e-15 for the exact optimum).
    """
    M, T, v = _word_orbits(matrix, num_topics, words_per_topic)
    V = T * v
    orbits = [M[:V, :V][mask] for mask in _orbit_masks(T, v) if mask.any()] + [M[:V, V], M[V, :V]]
    return max(float(np.max(np.abs(vals - vals.mean()))) for vals in orbits)


# ---- closed forms -------------------------------------------------------------------------------
def diag_excess(setting: Setting) -> float:
    """Same-word boost ``w_diag - w_same`` of W* with visible keys.

    ``N p_c / [(p_c + p_r) + (N - 1)(1 - p_m p_[M])]``, tending to ``p_c / (1 - p_m p_[M])``
    as N -> inf; independent of T, v, tau (and 0 with hidden keys). Reads ``setting.doc_len``
    and ``setting.masking`` only (the value holds for visible keys whatever ``attend_to_masked``).
    """
    s = _check_setting(setting)
    N, p_m, p_c, p_r, p_M = s.N, s.p_m, s.p_c, s.p_r, s.p_M
    if math.isinf(N):
        return p_c / (1.0 - p_m * p_M)
    return N * p_c / ((p_c + p_r) + (N - 1) * (1.0 - p_m * p_M))


def topic_eigenvalue_hidden(setting: Setting) -> float:
    """Topic-contrast eigenvalue of W* with hidden keys.

    ``lambda_t = 1 / (1 + kappa (tau (T - 1) / (T - tau) - 1))``; then ``w_diff = (1 - lambda_t) / V``
    and ``w_diag = w_same = w_diff + lambda_t / v``. It is 0 when ``tau == T >= 2`` and nan when
    T == 1. Reads ``num_topics``, ``topics_per_doc``, ``doc_len`` and ``mask_prob`` only (the
    value holds for hidden keys whatever ``attend_to_masked``).
    """
    s = _check_setting(setting)
    T, tau = s.T, s.tau
    kap = kappa(s)
    if T == 1:
        return math.nan
    if tau == T:
        return 0.0
    return 1.0 / (1.0 + kap * (tau * (T - 1) / (T - tau) - 1.0))


def weighted_block_gap(setting: Setting) -> float:
    """Frequency-weighted same-topic minus different-topic value of W*: ``(w_diag + (v - 1) w_same) / v - w_diff``.

    Equals ``topic_eigenvalue / v`` of :func:`value_block_coefficients`. ``doc_len=math.inf``
    gives the N -> inf limit in closed form: ``1 / (v (1 - (1 - p_c) p_m))`` with visible keys
    (the authors' stage-1 constant), ``1 / v`` with hidden keys.

    Parameters
    ----------
    setting : Setting
        As in :func:`moments`, with ``tau < T`` and ``1 - (1 - p_c) p_m > 0``.
    """
    p = _check_setting(setting)
    if p.tau >= p.T:
        raise ValueError(f"topics_per_doc must be < num_topics={p.T}, got {p.tau!r}")
    visible_true = 1.0 - (1.0 - p.p_c) * p.p_m
    if visible_true <= 0.0:
        raise ValueError(f"mask_prob and keep_prob must leave a true word visible (1 - (1 - keep_prob) mask_prob "
                         f"> 0), got mask_prob={p.p_m!r}, keep_prob={p.p_c!r}")
    if math.isinf(p.N):
        return 1.0 / (p.v * visible_true) if p.attend_to_masked else 1.0 / p.v
    blocks = _value_blocks(p, 0.0)
    same = blocks.same_topic if p.v > 1 else 0.0  # no same-topic pair of distinct words when v = 1
    return float((blocks.diag + (p.v - 1) * same) / p.v - blocks.diff_topic)


def bayes_risk(setting: Setting) -> float:
    """Topic-level Bayes risk ``1 - 1/(tau v)`` (N -> inf): the loss of predicting ``q_S``.

    Reads ``setting.words_per_topic`` and ``setting.topics_per_doc`` only.
    """
    s = _check_setting(setting)
    return 1.0 - 1.0 / (s.tau * s.v)


def sigma_eigenvalues(setting: Setting) -> tuple[float, float]:
    """Smallest positive and largest eigenvalue of ``Sigma`` (word block with hidden keys).

    SGD on ``W^V`` (gradient ``2 (W Sigma - C)``) is stable for ``lr < 1 / lambda_max`` and
    converges in about ``1 / (2 lr lambda_min)`` steps. Eigenvalues below ``1e-12 lambda_max``
    count as 0. ``setting`` as in :func:`moments`.
    """
    p = _check_setting(setting)
    return _sigma_extremes(_dense_moments(p)[0], p.attend_to_masked)


# ---- data-driven optimum ------------------------------------------------------------------------
def _check_sample(inputs: Any, selected: Any, docs: Any, num_tokens: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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


def _doc_counts(tokens: np.ndarray, weights: np.ndarray, D: int) -> np.ndarray:
    """Per-document weighted token counts: (n, N) ids and weights -> (n, D)."""
    n = tokens.shape[0]
    flat = (np.arange(n)[:, None] * D + tokens).ravel()
    return np.bincount(flat, weights=weights.ravel().astype(np.float64), minlength=n * D).reshape(n, D)


def _chunks(x: np.ndarray, s: np.ndarray, y: np.ndarray, D: int, attend_to_masked: bool, budget: int = 1 << 21):
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
    inputs, selected, docs : tensors or ndarrays, shape (num_docs, doc_len)
        Corrupted ids (``[MASK] = num_tokens - 1``), selection mask (bool), true word ids.
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
    x, s, y = _check_sample(inputs, selected, docs, num_tokens)
    lam = check_float("l2", l2, positive=False)
    D = int(num_tokens)
    Sxx, Cyx, total = np.zeros((D, D)), np.zeros((D, D)), 0.0
    for xs, ss, ys, att, n_att in _chunks(x, s, y, D, attend_to_masked):
        n_sel = (ss & (n_att > 0)[:, None]).sum(axis=1).astype(np.float64)  # (n,) positions used
        keep = n_sel > 0
        if not keep.any():
            continue
        xs, ss, ys, att, n_att, n_sel = xs[keep], ss[keep], ys[keep], att[keep], n_att[keep], n_sel[keep]
        xbar = _doc_counts(xs, att, D) / n_att[:, None]  # (n, D), the same for every selected position
        Sxx += (xbar * n_sel[:, None]).T @ xbar
        Cyx += _doc_counts(ys, ss, D).T @ xbar
        total += float(n_sel.sum())
    if total == 0:
        raise ValueError("selected has no usable position (none selected, or none with a visible key)")
    Sxx /= total
    Cyx /= total
    if lam > 0:
        return np.linalg.solve(Sxx + lam * np.eye(D), Cyx.T).T
    return np.linalg.lstsq(Sxx, Cyx.T, rcond=_RCOND)[0].T


# ---- tied embeddings ----------------------------------------------------------------------------
def embedding_loss(M: np.ndarray, Sigma: np.ndarray, C: np.ndarray) -> float:
    """Tied-embedding objective ``tr(M Sigma M^T) - 2 tr(M C^T)``, the loss minus 1, for ``M = E^T E``."""
    return population_loss(M, Sigma, C) - 1.0


def _symmetric_optimum(Sigma: np.ndarray, C: np.ndarray) -> np.ndarray:
    """Unconstrained symmetric minimiser: solves ``M Sigma + Sigma M = C + C^T`` (minimum norm)."""
    lam, U = np.linalg.eigh(Sigma)
    R = U.T @ (C + C.T) @ U
    den = lam[:, None] + lam[None, :]
    Mt = np.divide(R, den, out=np.zeros_like(R), where=np.abs(den) > _RCOND * max(abs(lam).max(), 1e-300))
    return U @ Mt @ U.T


def _tied_loss_grad(E: np.ndarray, Sigma: np.ndarray, Cs: np.ndarray) -> tuple[float, np.ndarray]:
    """Loss ``tr(M Sigma M) - 2 tr(M Cs)`` and its gradient ``2 E (Sigma M + M Sigma - 2 Cs)``."""
    M = E.T @ E  # (D, D)
    SM = Sigma @ M
    return float(np.sum(SM * M.T) - 2.0 * np.sum(M * Cs)), 2.0 * E @ (SM + SM.T - 2.0 * Cs)


def tied_embedding_optimum(Sigma: np.ndarray, C: np.ndarray, d: int, seed: int = 0, steps: int = 3000,
                           restarts: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """Embeddings minimising :func:`embedding_loss` over ``M = E^T E`` of rank <= d.

    Non-convex in E for d < D: L-BFGS (``scipy.optimize``, float64) from ``restarts`` starts,
    keeping the best. The first start is the top-d positive part of the unconstrained symmetric
    optimum (tiny seeded jitter), the others random. A numerical optimum, deterministic for a
    given ``seed``.

    Parameters
    ----------
    Sigma, C : ndarray, shape (D, D)
        Moments from :func:`moments`.
    d : int
        Embedding dimension >= 1.
    steps, restarts : int
        Maximum L-BFGS iterations per start; number of starts.

    Returns
    -------
    E : ndarray, shape (d, D)
        Column ``E[:, w]`` embeds token w (the last one is [MASK]).
    M : ndarray, shape (D, D)
        ``E^T E``.
    """
    d = check_positive_int("d", d)
    steps = check_positive_int("steps", steps)
    restarts = check_positive_int("restarts", restarts)
    rng = numpy_rng(seed)
    S, Cn = np.asarray(Sigma, dtype=np.float64), np.asarray(C, dtype=np.float64)
    if S.ndim != 2 or S.shape[0] != S.shape[1]:
        raise ValueError(f"Sigma must be a square matrix, got shape {S.shape}")
    if Cn.shape != S.shape:
        raise ValueError(f"C must have the shape of Sigma {S.shape}, got {Cn.shape}")
    D = S.shape[0]
    S = 0.5 * (S + S.T)
    Cs = 0.5 * (Cn + Cn.T)  # tr(M C^T) = tr(M Cs) for symmetric M

    Msym = _symmetric_optimum(S, Cn)
    lam, U = np.linalg.eigh(Msym)
    top = np.argsort(lam)[::-1][: min(d, D)]
    E0 = np.zeros((d, D))
    E0[:top.size] = (U[:, top] * np.sqrt(np.clip(lam[top], 0.0, None))).T
    scale = math.sqrt(max(float(np.trace(Msym)), 1e-12) / (d * D))
    starts = [E0 + 1e-3 * scale * rng.standard_normal((d, D))]
    starts += [scale * rng.standard_normal((d, D)) for _ in range(restarts - 1)]

    def fun(x: np.ndarray) -> tuple[float, np.ndarray]:
        loss, grad = _tied_loss_grad(x.reshape(d, D), S, Cs)
        return loss, grad.ravel()

    from scipy import optimize  # here, not at import: scipy.optimize adds ~40 MiB to every process

    options = {"maxiter": steps, "maxcor": 20, "ftol": 0.0, "gtol": 1e-13 * max(1.0, float(np.abs(Cs).max()))}
    best_E, best_loss = starts[0], math.inf
    for E_init in starts:
        res = optimize.minimize(fun, E_init.ravel(), jac=True, method="L-BFGS-B", options=options)
        if res.fun < best_loss:
            best_loss, best_E = float(res.fun), res.x.reshape(d, D)
    return best_E, best_E.T @ best_E


# ---- stage-2 gradient with respect to the key-query product -------------------------------------
def _key_query_sum(W: np.ndarray, x: np.ndarray, s: np.ndarray, y: np.ndarray,
                   attend_to_masked: bool) -> tuple[np.ndarray, int]:
    """Sum over the usable selected positions of their ``dL/dA`` terms (flat, D*D) and their count."""
    D = W.shape[0]
    G = np.zeros(D * D)
    count = 0
    for xs, ss, ys, att, n_att in _chunks(x, s, y, D, attend_to_masked):
        dq, iq = np.nonzero(ss & (n_att > 0)[:, None])  # (M,) selected query positions
        if dq.size == 0:
            continue
        xbar = _doc_counts(xs, att, D) / np.maximum(n_att, 1)[:, None]  # (n, D)
        P = xbar @ W.T  # (n, D) predictions W xbar
        g = P @ W  # (n, D): g[d, u] = P_d^T W[:, u]
        pp = np.einsum("nd,nd->n", P, P)  # (n,)
        yq, tq, keys = ys[dq, iq], xs[dq, iq], xs[dq]  # (M,) targets, (M,) queries, (M, N) key tokens
        # r_i^T W (e_{x_k} - xbar_i) = g[x_k] - W[y, x_k] - (|P|^2 - P[y])
        score = g[dq[:, None], keys] - W[yq[:, None], keys] - (pp[dq] - P[dq, yq])[:, None]  # (M, N)
        weight = (2.0 / n_att[dq])[:, None] * score * att[dq]  # (M, N)
        G += np.bincount((keys * D + tq[:, None]).ravel(), weights=weight.ravel(), minlength=D * D)
        count += dq.size
    return G, count


def _sample_chunks(p: Setting, num_docs: int, seed: int, chunk: int):
    """``(docs, inputs, selected)`` as numpy arrays, ``chunk`` documents at a time, two derived seeds each."""
    model = SimplifiedTopicModel(p.T, p.v, p.tau)
    n_chunks = -(-num_docs // chunk)
    seeds = spawn_seeds(seed, 2 * n_chunks)
    for c in range(n_chunks):
        docs = model.sample(min(chunk, num_docs - c * chunk), int(p.N), seed=seeds[2 * c])
        inputs, selected = bert_mask(docs, p.V, p.p_m, p.p_c, p.p_r, seed=seeds[2 * c + 1])
        yield docs.numpy(), inputs.numpy(), selected.numpy()


def empirical_key_query_gradient(value_matrix: np.ndarray, inputs: Any, selected: Any, docs: Any, *,
                                 attend_to_masked: bool) -> np.ndarray:
    """Gradient ``G = dL/dA`` at ``A = 0`` (uniform attention) on a given sample.

    Each selected position i with ``n_i >= 1`` attended keys adds
    ``(2 / n_i) r_i^T W (x_k - xbar_i)`` to ``G[x_k, x_i]`` for every attended key k, with
    ``r_i = W xbar_i - e_{y_i}``; the total is divided by the number of such positions.

    Parameters
    ----------
    value_matrix : ndarray, shape (D, D)
        W.
    inputs, selected, docs : tensors or ndarrays, shape (num_docs, doc_len)
        As in :func:`least_squares_value_matrix`.
    attend_to_masked : bool, keyword only
        The key convention.

    Returns
    -------
    G : ndarray, shape (D, D)
        ``G[key_token, query_token]``; gradient descent moves A along -G.
    """
    attend_to_masked = check_attend_to_masked(attend_to_masked)
    W = np.asarray(value_matrix, dtype=np.float64)
    if W.ndim != 2 or W.shape[0] != W.shape[1]:
        raise ValueError(f"value_matrix must be square (D, D), got shape {W.shape}")
    G, count = _key_query_sum(W, *_check_sample(inputs, selected, docs, W.shape[0]), attend_to_masked)
    if count == 0:
        raise ValueError("selected has no usable position (none selected, or none with a visible key)")
    return (G / count).reshape(W.shape)


def key_query_gradient(value_matrix: np.ndarray, setting: Setting, num_docs: int, seed: int = 0) -> np.ndarray:
    """Monte-Carlo estimate of ``G = dL/dA`` at uniform attention with a fixed value matrix.

    Samples ``num_docs`` documents (:class:`topicmech.data.SimplifiedTopicModel`, corrupted by
    :func:`topicmech.data.bert_mask`) in chunks with derived seeds, and applies
    :func:`empirical_key_query_gradient` to all of them.

    Parameters
    ----------
    value_matrix : ndarray, shape (D, D)
        Usually :func:`optimal_value_matrix` of the same setting.
    setting : Setting
        As in :func:`moments` (``doc_len`` finite).
    num_docs, seed : int
        Documents sampled; their seed.

    Returns
    -------
    G : ndarray, shape (D, D)
        ``G[key_token, query_token]``.
    """
    p = _check_setting(setting)
    if math.isinf(p.N):
        raise ValueError(f"doc_len must be finite for sampling, got {p.N!r}")
    n_docs = check_positive_int("num_docs", num_docs)
    W = np.asarray(value_matrix, dtype=np.float64)
    if W.shape != (p.D, p.D):
        raise ValueError(f"value_matrix must have shape {(p.D, p.D)}, got {W.shape}")
    G, total = np.zeros(p.D * p.D), 0
    for docs, inputs, selected in _sample_chunks(p, n_docs, seed, 1 << 15):
        G_c, n_c = _key_query_sum(W, inputs, selected, docs, p.attend_to_masked)
        G += G_c
        total += n_c
    if total == 0:
        raise ValueError("no selected position with a visible key was sampled; increase num_docs or mask_prob")
    return (G / total).reshape(p.D, p.D)


def key_query_gradient_limit(setting: Setting) -> dict[str, float]:
    """Leading-order ``dL/dA`` for a word query: hidden keys, N -> inf, ``W = B / v``.

    Only kept queries carry a topic signal: ``G_same = -2 p_c (tau - 1) / (V tau^2 v^2)`` for a
    key of the query's topic (the same word included) and ``G_diff = -G_same / (T - 1)``
    otherwise. Reads ``num_topics``, ``words_per_topic``, ``topics_per_doc`` and ``keep_prob``
    only (not ``doc_len``, ``mask_prob`` or ``attend_to_masked``).

    Returns
    -------
    limit : dict
        ``"same_word"``, ``"same_topic"``, ``"diff_topic"`` and ``"ratio"``
        (``same_topic / diff_topic = -(T - 1)``); nan entries when T == 1.
    """
    s = _check_setting(setting)
    T, v, tau, p_c = s.T, s.v, s.tau, s.p_c
    V = T * v
    g_same = -2.0 * p_c * (tau - 1) / (V * tau**2 * v**2)
    g_diff = 2.0 * p_c * (tau - 1) / (V * tau**2 * v**2 * (T - 1)) if T > 1 else math.nan
    return {"same_word": g_same, "same_topic": g_same, "diff_topic": g_diff,
            "ratio": -(T - 1.0) if T > 1 else math.nan}


# ---- LDA documents: the simplified model's closed forms at an effective number of topics ----------
def lda_effective_topics(num_topics: int, dirichlet_alpha: float) -> float:
    """Topics per document ``tau_eff = (T a + 1) / (a + 1)`` of the simplified model with LDA's co-occurrences.

    ``a`` is LDA's Dirichlet concentration ``dirichlet_alpha``. Two positions share a topic with
    probability ``(a + 1) / (T a + 1)``, ``1 / tau`` in the simplified model; ``tau_eff`` runs
    from 1 (``a -> 0``) to ``T`` (``a -> inf``).

    Examples
    --------
    >>> lda_effective_topics(10, 0.1)
    1.8181818181818181
    """
    T = check_positive_int("num_topics", num_topics)
    a = check_float("dirichlet_alpha", dirichlet_alpha)
    return (T * a + 1.0) / (a + 1.0)


def lda_alpha_matching(setting: Setting) -> float:
    """The ``dirichlet_alpha = (tau - 1) / (T - tau)`` whose LDA has the co-occurrences of ``setting``.

    Inverts :func:`lda_effective_topics`; reads ``num_topics`` and ``topics_per_doc`` only,
    with ``2 <= topics_per_doc < num_topics``.
    """
    s = _check_setting(setting)
    T, tau = s.T, s.tau
    if not 2 <= tau < T:
        raise ValueError(f"topics_per_doc must satisfy 2 <= topics_per_doc < num_topics={T}, got {tau!r}")
    return (tau - 1) / (T - tau)


def lda_moments(setting: Setting, dirichlet_alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Exact ``Sigma = E[xbar xbar^T]`` and ``C = E[y xbar^T]`` (shape (D, D)) for LDA documents.

    The moments are affine in ``1 / tau_eff`` (:func:`lda_effective_topics`), so they are the
    affine combination (exact; an extrapolation when ``tau_eff > 2``) of :func:`moments` at
    ``tau = 1`` and ``tau = 2``.

    Parameters
    ----------
    setting : Setting
        As in :func:`moments`, with ``num_topics >= 2``; ``topics_per_doc`` is not read (LDA
        mixes topics with a Dirichlet prior).
    dirichlet_alpha : float
        LDA's Dirichlet concentration, > 0.
    """
    s = _check_setting(setting)
    if s.T < 2:
        raise ValueError(f"num_topics must be >= 2 for LDA moments, got {s.T!r}")
    tau_eff = lda_effective_topics(s.T, dirichlet_alpha)
    S1, C1 = moments(s.replace(topics_per_doc=1))
    S2, C2 = moments(s.replace(topics_per_doc=2))
    w = 2.0 * (1.0 - 1.0 / tau_eff)      # 1/tau_eff = 1 -> w = 0; 1/tau_eff = 1/2 -> w = 1
    return S1 + w * (S2 - S1), C1 + w * (C2 - C1)


def lda_optimal_value_matrix(setting: Setting, dirichlet_alpha: float, l2: float = 0.0) -> np.ndarray:
    """Stage-1 optimum ``W* = C (Sigma + l2 I)^{-1}`` (shape (D, D)) of ``W^V`` for LDA documents.

    Moments from :func:`lda_moments` (same arguments, ``topics_per_doc`` not read), ridge
    ``l2 >= 0``; as in :func:`optimal_value_matrix` (hidden keys: word block only, ``[MASK]``
    row and column 0), which it equals at ``dirichlet_alpha = lda_alpha_matching(setting)``.
    """
    lam = check_float("l2", l2, positive=False)
    Sigma, C = lda_moments(setting, dirichlet_alpha)
    return _optimum_from_moments(Sigma, C, attend_to_masked=setting.attend_to_masked, l2=lam)


def lda_sigma_eigenvalues(setting: Setting, dirichlet_alpha: float) -> tuple[float, float]:
    """:func:`sigma_eigenvalues` for LDA documents: smallest positive and largest eigenvalue of the
    :func:`lda_moments` ``Sigma`` (word block with hidden keys), same arguments."""
    Sigma, _ = lda_moments(setting, dirichlet_alpha)
    return _sigma_extremes(Sigma, setting.attend_to_masked)


def lda_value_blocks(setting: Setting, dirichlet_alpha: float, l2: float = 0.0) -> ValueBlocks:
    """Orbit values (:class:`ValueBlocks`) of :func:`lda_optimal_value_matrix`, same arguments."""
    W_star = lda_optimal_value_matrix(setting, dirichlet_alpha, l2=l2)
    return orbit_means(W_star, setting.T, setting.v)
