"""Exact stage-1 quantities under uniform attention: moments, the optimum W*, its blocks and closed forms.

Pure functions of a :class:`topicmech.setting.Setting`. Notation as in the book: ``T, v, V = T v,
D = V + 1`` ([MASK] has id ``V``), ``tau``, ``N`` (``doc_len``, may be ``math.inf``),
``p_m, p_c, p_r`` and ``p_[M] = 1 - p_c - p_r``. Matrices act on column vectors:
``W[out_token, in_token]``, the prediction is ``W @ xbar``. With ``setting.attend_to_masked``
True every position is a key; with False selected positions are hidden and the [MASK] row and
column of ``Sigma``, ``C`` and ``W*`` are 0. Population loss ``L(W) = tr(W Sigma W^T) -
2 tr(W C^T) + 1``; ridge adds ``l2 ||W||_F^2``. The entries of the word block of W* are
``w_diag`` (same word), ``w_same`` (same topic) and ``w_diff`` (different topics).
:func:`~topicmech.probes.topic_eigenvalue` is re-exported here from :mod:`topicmech.probes`,
where it is documented.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..probes import relation_masks, topic_eigenvalue
from ..setting import Setting
from ..utils import check_float, check_positive_int

__all__ = [
    "ValueBlocks", "kappa", "moments", "population_loss", "optimal_value_matrix", "value_block_coefficients",
    "block_matrix", "orbit_means", "orbit_deviation", "diag_excess", "topic_eigenvalue_hidden",
    "weighted_block_gap", "bayes_risk", "sigma_eigenvalues", "SAFE_FRACTION", "stage1_sgd_lr", "topic_eigenvalue",
    "check_setting", "optimum_from_moments",
    "sigma_extremes", "RCOND", "centred_moments", "optimal_value_with_bias", "fixed_selection_moments",
]

#: Relative threshold below which an eigenvalue of ``Sigma`` counts as zero (pseudo-inverse).
RCOND = 1e-12


# ---- the setting ---------------------------------------------------------------------------------
def check_setting(setting: object) -> Setting:
    """``setting`` if it is a :class:`topicmech.setting.Setting` (validated when built), else ValueError.

    For the other modules of :mod:`topicmech.theory`.
    """
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
    s = check_setting(setting)
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


def _dense_blocks(p: Setting) -> tuple[np.ndarray, ...]:
    """The dense D x D building blocks of the moments: the word identity, the two-position
    co-occurrence Q, and the outer products of the uniform word vector u and [MASK]'s e."""
    V, D = p.V, p.D
    topic = np.arange(V) // p.v
    u, e = np.append(np.full(V, 1.0 / V), 0.0), np.eye(D)[V]
    Iw, B, J = np.zeros((3, D, D))
    Iw[:V, :V] = np.eye(V)
    B[:V, :V] = topic[:, None] == topic[None, :]
    J[:V, :V] = 1.0
    kB, kJ = _qq_coefficients(p)
    return Iw, kB * B + kJ * J, np.outer(u, u), np.outer(u, e), np.outer(e, u), np.outer(e, e)


def _dense_moments(p: Setting) -> tuple[np.ndarray, np.ndarray]:
    return _moments_from(p, *_dense_blocks(p))


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
    return _dense_moments(check_setting(setting))


def population_loss(W: np.ndarray, Sigma: np.ndarray, C: np.ndarray) -> float:
    """Population loss ``L(W) = tr(W Sigma W^T) - 2 tr(W C^T) + 1``; all arrays of shape (D, D)."""
    W, Sigma, C = (np.asarray(x, dtype=np.float64) for x in (W, Sigma, C))
    return float(np.einsum("ij,jk,ik->", W, Sigma, W) - 2.0 * np.sum(W * C) + 1.0)


def _solve_right(C: np.ndarray, Sigma: np.ndarray, l2: float) -> np.ndarray:
    """``C (Sigma + l2 I)^{-1}``, or the minimum-norm ``C Sigma^+`` when singular and l2 = 0."""
    S = Sigma + l2 * np.eye(Sigma.shape[0])
    evals = np.linalg.eigvalsh(0.5 * (S + S.T))
    top = max(float(np.max(np.abs(evals))), np.finfo(float).tiny)
    if float(np.min(evals)) > 1e3 * RCOND * top:
        return np.linalg.solve(S.T, C.T).T  # S is symmetric; solve S W^T = C^T
    return C @ np.linalg.pinv(S, rcond=RCOND, hermitian=True)


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
    p = check_setting(setting)
    lam = check_float("l2", l2, positive=False)
    return optimum_from_moments(*_dense_moments(p), attend_to_masked=p.attend_to_masked, l2=lam)


def optimum_from_moments(Sigma: np.ndarray, C: np.ndarray, *, attend_to_masked: bool, l2: float) -> np.ndarray:
    """``W* = C (Sigma + l2 I)^{-1}``; with hidden keys on the word block only, the ``[MASK]`` row and column 0."""
    k = Sigma.shape[0] if attend_to_masked else Sigma.shape[0] - 1              # attended tokens
    W = np.zeros_like(Sigma)
    W[:k, :k] = _solve_right(C[:k, :k], Sigma[:k, :k], l2)
    return W


def sigma_extremes(Sigma: np.ndarray, attend_to_masked: bool) -> tuple[float, float]:
    """Smallest positive (above ``RCOND`` times the largest) and largest eigenvalue of ``Sigma``,
    on the word block with hidden keys."""
    S = Sigma if attend_to_masked else Sigma[:-1, :-1]
    evals = np.linalg.eigvalsh(0.5 * (S + S.T))
    top = float(evals[-1])
    return float(evals[evals > RCOND * top][0]), top


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
        tol = RCOND * max(abs(X.lw), abs(X.lt), float(np.max(np.abs(w))), np.finfo(float).tiny)

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
    setting : Setting
        As in :func:`optimal_value_matrix`.
    l2 : float
        Ridge weight, as in :func:`optimal_value_matrix`.

    Returns
    -------
    blocks : ValueBlocks
        Expand with :func:`block_matrix`.
    """
    return _value_blocks(check_setting(setting), check_float("l2", l2, positive=False))


def _word_masks(T: int, v: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Same word, same topic (distinct words), different topic: (V, V) masks of :func:`topicmech.probes.relation_masks`."""
    return relation_masks(np.arange(T * v) // v)


def block_matrix(blocks: ValueBlocks, num_topics: int, words_per_topic: int) -> np.ndarray:
    """Expand orbit values into the dense (D, D) matrix ([MASK] row 0, [MASK] column ``mask_col``)."""
    T = check_positive_int("num_topics", num_topics)
    v = check_positive_int("words_per_topic", words_per_topic)
    V = T * v
    W = np.zeros((V + 1, V + 1))
    for mask, value in zip(_word_masks(T, v), (blocks.diag, blocks.same_topic, blocks.diff_topic)):
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
    w_diag, w_same, w_diff = (float(M[:V, :V][mask].mean()) if mask.any() else math.nan for mask in _word_masks(T, v))
    lt = topic_eigenvalue(w_diag, w_same, w_diff, v) if (v > 1 and T > 1) else math.nan
    return ValueBlocks(w_diag, w_same, w_diff, float(M[:V, V].mean()), lt)


def orbit_deviation(matrix: np.ndarray, num_topics: int, words_per_topic: int) -> float:
    """Largest deviation of a (D, D) matrix from block form.

    ``max |entry - orbit mean|`` over the three word orbits, the [MASK] column and the [MASK]
    row on the words (about 1e-15 for the exact optimum).
    """
    M, T, v = _word_orbits(matrix, num_topics, words_per_topic)
    V = T * v
    orbits = [M[:V, :V][mask] for mask in _word_masks(T, v) if mask.any()] + [M[:V, V], M[V, :V]]
    return max(float(np.max(np.abs(vals - vals.mean()))) for vals in orbits)


# ---- closed forms -------------------------------------------------------------------------------
def diag_excess(setting: Setting) -> float:
    """Same-word boost ``w_diag - w_same`` of W* in the theory's convention (visible keys).

    ``N p_c / [(p_c + p_r) + (N - 1)(1 - p_m p_[M])]``, tending to ``p_c / (1 - p_m p_[M])``
    as N -> inf; independent of T, v, tau. This closed form is for one convention and
    **ignores** ``setting.attend_to_masked``: it reads ``setting.doc_len`` and
    ``setting.masking`` only, and a Setting in the released code's convention gets the
    theory's-convention value too. In the released code's convention the boost is 0 for every
    setting; ``diag - same_topic`` of :func:`value_block_coefficients` gives the boost in the
    Setting's own convention.
    """
    s = check_setting(setting)
    N, p_m, p_c, p_r, p_M = s.N, s.p_m, s.p_c, s.p_r, s.p_M
    if math.isinf(N):
        return p_c / (1.0 - p_m * p_M)
    return N * p_c / ((p_c + p_r) + (N - 1) * (1.0 - p_m * p_M))


def topic_eigenvalue_hidden(setting: Setting) -> float:
    """Topic-contrast eigenvalue of W* in the released code's convention (hidden keys).

    ``lambda_t = 1 / (1 + kappa (tau (T - 1) / (T - tau) - 1))``; then ``w_diff = (1 - lambda_t) / V``
    and ``w_diag = w_same = w_diff + lambda_t / v``. It is 0 when ``tau == T >= 2`` and nan when
    T == 1. This closed form is for one convention and **ignores** ``setting.attend_to_masked``:
    it reads ``num_topics``, ``topics_per_doc``, ``doc_len`` and ``mask_prob`` only (``kappa``
    is taken with hidden keys), and a Setting in the theory's convention gets the
    released-code value too. ``topic_eigenvalue`` of :func:`value_block_coefficients` gives the
    eigenvalue in the Setting's own convention.
    """
    s = check_setting(setting)
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
    p = check_setting(setting)
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
    s = check_setting(setting)
    return 1.0 - 1.0 / (s.tau * s.v)


def sigma_eigenvalues(setting: Setting) -> tuple[float, float]:
    """Smallest positive and largest eigenvalue of ``Sigma`` (word block with hidden keys).

    SGD on ``W^V`` (gradient ``2 (W Sigma - C)``) is stable for ``lr < 1 / lambda_max`` and
    converges in about ``1 / (2 lr lambda_min)`` steps. Eigenvalues below ``1e-12 lambda_max``
    count as 0. ``setting`` as in :func:`moments`.
    """
    p = check_setting(setting)
    return sigma_extremes(_dense_moments(p)[0], p.attend_to_masked)


#: First SGD learning rate on ``W^V`` as a fraction of the stability limit (:func:`stage1_sgd_lr`).
SAFE_FRACTION: float = 0.5


def stage1_sgd_lr(lambda_max: float, *, loss: str, l2: float = 0.0) -> float:
    """The default SGD learning rate on ``W^V`` from the top eigenvalue ``lambda_max`` of ``Sigma``.

    ``SAFE_FRACTION`` of the stability limit of the loss's curvature: ``0.5 / (lambda_max + l2)``
    for the squared loss (gradient ``2 (W (Sigma + l2 I) - C)``), four times the rate,
    ``2 / (lambda_max + 4 l2)``, for cross-entropy (its Hessian in the logits, ``diag(p) - p p^T``,
    is at most a quarter of the squared-loss one). ``lambda_max`` from :func:`sigma_eigenvalues`.
    """
    lam = check_float("lambda_max", lambda_max)
    l2 = check_float("l2", l2, positive=False)
    if loss not in ("squared", "cross_entropy"):
        raise ValueError(f"loss must be 'squared' or 'cross_entropy', got {loss!r}")
    scale = 4.0 if loss == "cross_entropy" else 1.0
    return SAFE_FRACTION * scale / ((lam + l2) + (scale - 1.0) * l2)


# ---- the authors' logit bias and their constant proportion of selected positions ----------------
def centred_moments(setting: Setting) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Centred moments ``Sigma_c = Sigma - mu_x mu_x^T`` and ``C_c = C - mu_y mu_x^T``, with the means
    ``mu_x = E[xbar]`` and ``mu_y = E[y]``, for the model with a free logit bias ``b_pred``.

    The attention weights sum to 1 and so do the entries of ``xbar`` (``1^T xbar = 1``), so
    ``mu_x = Sigma 1`` and ``mu_y = C 1`` exactly, and ``Sigma_c 1 = 0``. ``setting`` as in
    :func:`moments` (with hidden keys the [MASK] rows and columns stay 0).

    Returns
    -------
    Sigma_c, C_c : ndarray, shape (D, D)
    mu_x, mu_y : ndarray, shape (D,)
    """
    Sigma, C = _dense_moments(check_setting(setting))
    ones = np.ones(Sigma.shape[0])
    mu_x, mu_y = Sigma @ ones, C @ ones
    return Sigma - np.outer(mu_x, mu_x), C - np.outer(mu_y, mu_x), mu_x, mu_y


def optimal_value_with_bias(setting: Setting, l2: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Stage-1 optimum ``(W, b)`` of ``f = W xbar + b_pred`` (uniform attention, squared loss, ridge
    ``l2 ||W||_F^2`` on ``W`` only, ``b_pred`` free): ``W = C_c (Sigma_c + l2 I)^+``, ``b = mu_y - W mu_x``
    (:func:`centred_moments`; with ``l2 = 0`` the minimum-norm ``W``, which has zero row sums).

    Because ``1^T xbar = 1``, the bias adds no predictor: ``W + b 1^T`` is :func:`optimal_value_matrix`
    when ``l2 = 0`` and ``Sigma`` is invertible on the attended tokens.

    Returns
    -------
    W : ndarray, shape (D, D)
        With hidden keys the [MASK] row and column are 0.
    b : ndarray, shape (D,)
        The logit bias (0 on the [MASK] row).
    """
    p = check_setting(setting)
    lam = check_float("l2", l2, positive=False)
    Sigma_c, C_c, mu_x, mu_y = centred_moments(p)
    k = p.D if p.attend_to_masked else p.V
    W = np.zeros_like(Sigma_c)
    S = Sigma_c[:k, :k] + lam * np.eye(k)
    W[:k, :k] = C_c[:k, :k] @ np.linalg.pinv(0.5 * (S + S.T), rcond=1e-10, hermitian=True)
    return W, mu_y - W @ mu_x


def fixed_selection_moments(setting: Setting, num_selected: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`moments` when every document has exactly ``num_selected`` selected positions (the
    authors' "constant proportion" ``p_m = num_selected / N``) instead of each position being
    selected independently with probability ``p_m``.

    The selected position's own token and the corruption are as in :func:`moments`; only the joint
    law of the other positions changes (``num_selected - 1`` of the other ``N - 1`` are selected).
    ``setting.masking.mask_prob`` is not used. Needs a finite ``N`` and ``1 <= num_selected < N``.
    """
    p = check_setting(setting)
    if math.isinf(p.N):
        raise ValueError("fixed_selection_moments needs a finite doc_len (as N -> inf the selection rules agree)")
    N = int(p.N)
    m = check_positive_int("num_selected", num_selected)
    if m >= N:
        raise ValueError(f"num_selected must be < doc_len={N}, got {num_selected!r}")
    V = p.V
    Iw, Q, uu, ue, eu, ee = _dense_blocks(p)
    if not p.attend_to_masked:                                   # N - m visible keys, exactly
        kap = 1.0 / (N - m)
        return kap / V * Iw + (1.0 - kap) * Q, Q

    def outer(x: tuple[float, ...], y: tuple[float, ...]) -> np.ndarray:
        return (x[0] * y[0] * Q + (x[0] * y[1] + x[1] * y[0] + x[1] * y[1]) * uu
                + (x[0] + x[1]) * y[2] * ue + x[2] * (y[0] + y[1]) * eu + x[2] * y[2] * ee)

    def diag(x: tuple[float, ...]) -> np.ndarray:
        return (x[0] + x[1]) / V * Iw + x[2] * ee

    c, o = (p.p_c, p.p_r, p.p_M), (1.0, 0.0, 0.0)                # selected / unselected token laws
    a = (m - 1) / (N - 1)                                        # another position is selected
    d = tuple(a * ci + (1 - a) * oi for ci, oi in zip(c, o))
    pair = 0.0 * Iw
    if N > 2:                                                    # two other positions, jointly
        n2 = (N - 1) * (N - 2)
        pss, pso, poo = (m - 1) * (m - 2) / n2, (m - 1) * (N - m) / n2, (N - m) * (N - m - 1) / n2
        pair = pss * outer(c, c) + pso * (outer(c, o) + outer(o, c)) + poo * outer(o, o)
    Sigma = (diag(c) + (N - 1) * (outer(c, d) + outer(d, c)) + (N - 1) * diag(d) + (N - 1) * (N - 2) * pair) / N**2
    C = (p.p_c / V * Iw + p.p_r * uu + p.p_M * ue + (N - 1) * outer((1.0, 0.0, 0.0), d)) / N
    return Sigma, C
