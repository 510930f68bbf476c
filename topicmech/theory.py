"""Exact population quantities for the one-layer model under uniform attention.

Everything here is a pure function of the data parameters (no training), except the
tied-embedding optimiser (a small deterministic numerical optimisation) and the
Monte-Carlo stage-2 gradient (which samples data through :mod:`topicmech.data`).
The derivations are in the book's appendices (stage 1: *Appendix: the stage-1 value matrix, derived*).

Map of the module
-----------------
* **Moments** (ch. 4): :func:`moments` gives ``Sigma = E[xbar xbar^T]`` and
  ``C = E[y xbar^T]`` exactly, at finite ``doc_len`` or in the limit ``doc_len=math.inf``;
  :func:`kappa` is ``E[1/K | K >= 1]`` for the hidden-key convention;
  :func:`sigma_eigenvalues` gives the extreme eigenvalues of ``Sigma`` (the stability limit
  and the slowest time scale of SGD on ``W^V``, from which the training helpers derive
  their default step sizes).
* **Value matrix, stage 1** (ch. 4): :func:`optimal_value_matrix` (dense solve,
  ``W* = C Sigma^{-1}``, ridge, minimum norm), :func:`value_block_coefficients`
  (the same optimum through the symmetry algebra span{I, B, J} plus the [MASK]
  coordinate, O(1) in the vocabulary size), :func:`block_matrix`,
  :func:`orbit_means`, :func:`orbit_deviation`, :func:`least_squares_value_matrix`
  (the data-driven optimum for a sample), :func:`population_loss`.
* **Closed forms** (ch. 4): :func:`diag_excess` (same-word boost, visible keys),
  :func:`topic_eigenvalue_hidden` (hidden keys), :func:`bayes_risk`,
  :func:`weighted_block_gap` (same-topic minus different-topic mean, with its N -> inf limit).
* **Embeddings** (ch. 3): :func:`tied_embedding_optimum`, :func:`embedding_loss`.
* **Attention, stage 2** (ch. 5): :func:`key_query_gradient` (Monte Carlo),
  :func:`empirical_key_query_gradient` (the same on a given sample),
  :func:`key_query_gradient_limit` (hidden keys, ``N -> inf`` closed form).

Notation (shared with the book's notation page)
-----------------------------------------------
* ``T, v, V = T v``: ``num_topics``, ``words_per_topic``, ``vocab_size`` (int).
* ``D = V + 1``: ``num_tokens``; ``[MASK]`` has id ``V``.
* ``tau, N``: ``topics_per_doc``, ``doc_len`` (int; ``N`` may be ``math.inf``).
* ``p_m, p_c, p_r``: ``mask_prob``, ``keep_prob``, ``random_prob``; the ``[MASK]`` share of
  selected tokens is ``p_[M] = 1 - p_c - p_r``.
* ``Sigma, C, W*``: ``Sigma``, ``C``, ``W``, each of shape ``(D, D)``.
* ``A, dL/dA``: ``A``, ``G``, each of shape ``(D, D)``.

Conventions
-----------
* Matrices act on column vectors: ``W[out_token, in_token]`` and the prediction at a
  selected position is ``f = W @ xbar``.
* ``attend_to_masked=True`` (SI, standard BERT): every position, including the
  selected ones and the query itself, is a key, ``xbar = (1/N) sum_k x_k``.
  ``attend_to_masked=False`` (CS, the authors' code): selected positions are hidden as
  keys, ``xbar`` is the mean of the unselected tokens (positions without any visible
  key are dropped); the [MASK] row and column of ``Sigma``, ``C`` and ``W*`` are 0.
* Loss at a selected position: ``||W xbar - e_y||^2``; population loss
  ``L(W) = tr(W Sigma W^T) - 2 tr(W C^T) + 1``; ridge adds ``l2 * ||W||_F^2``.
* Attention scores ``s = x_key^T A x_query``: ``A[key_token, query_token]``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .utils import check_masking, check_positive_int, numpy_rng, spawn_seeds

__all__ = [
    "ValueBlocks",
    "kappa",
    "moments",
    "population_loss",
    "optimal_value_matrix",
    "value_block_coefficients",
    "block_matrix",
    "orbit_means",
    "orbit_deviation",
    "diag_excess",
    "topic_eigenvalue_hidden",
    "weighted_block_gap",
    "bayes_risk",
    "least_squares_value_matrix",
    "embedding_loss",
    "tied_embedding_optimum",
    "empirical_key_query_gradient",
    "key_query_gradient",
    "key_query_gradient_limit",
    "sigma_eigenvalues",
]

# Relative threshold below which an eigenvalue of Sigma counts as zero (pseudo-inverse).
_RCOND = 1e-12


# ----------------------------------------------------------------------------------------
# Validation
# ----------------------------------------------------------------------------------------


def _check_doc_len(doc_len: object) -> float | int:
    """``doc_len`` is an int >= 2 or ``math.inf``."""
    if isinstance(doc_len, float) and math.isinf(doc_len) and doc_len > 0:
        return math.inf
    n = check_positive_int("doc_len", doc_len)
    if n < 2:
        raise ValueError(f"doc_len must be >= 2 (or math.inf), got {doc_len!r}")
    return n


def _check_l2(l2: object) -> float:
    try:
        lam = float(l2)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"l2 must be a finite float >= 0, got {l2!r}") from None
    if not (math.isfinite(lam) and lam >= 0.0):
        raise ValueError(f"l2 must be a finite float >= 0, got {l2!r}")
    return lam


@dataclass(frozen=True)
class _Params:
    T: int
    v: int
    tau: int
    N: float | int
    p_m: float
    p_c: float
    p_r: float
    si: bool

    @property
    def V(self) -> int:
        return self.T * self.v

    @property
    def D(self) -> int:
        return self.V + 1

    @property
    def p_M(self) -> float:
        return max(0.0, 1.0 - self.p_c - self.p_r)

    @property
    def a(self) -> float:
        """Weight of q_S in the law of an arbitrary (not-necessarily-selected) token."""
        return 1.0 - self.p_m + self.p_m * self.p_c

    @property
    def b(self) -> float:
        """Weight of the uniform law u (random replacement)."""
        return self.p_m * self.p_r

    @property
    def m(self) -> float:
        """Probability that an arbitrary position shows [MASK]."""
        return self.p_m * self.p_M

    def qq_coefficients(self) -> tuple[float, float]:
        """E_S[q_S q_S^T] = kB * B + kJ * J on the word block."""
        T, v, tau = self.T, self.v, self.tau
        kJ = (tau - 1) / (T * (T - 1) * tau * v * v) if T > 1 else 0.0
        kB = 1.0 / (T * tau * v * v) - kJ
        return kB, kJ


def _check_topics(num_topics: object, words_per_topic: object, topics_per_doc: object) -> tuple[int, int, int]:
    T = check_positive_int("num_topics", num_topics)
    v = check_positive_int("words_per_topic", words_per_topic)
    tau = check_positive_int("topics_per_doc", topics_per_doc)
    if tau > T:
        raise ValueError(f"topics_per_doc must be <= num_topics={T}, got {topics_per_doc!r}")
    return T, v, tau


def _params(
    num_topics: object,
    words_per_topic: object,
    topics_per_doc: object,
    doc_len: object,
    mask_prob: object,
    keep_prob: object,
    random_prob: object,
    attend_to_masked: object,
) -> _Params:
    T, v, tau = _check_topics(num_topics, words_per_topic, topics_per_doc)
    N = _check_doc_len(doc_len)
    p_m, p_c, p_r = check_masking(mask_prob, keep_prob, random_prob)  # type: ignore[arg-type]
    if not isinstance(attend_to_masked, (bool, np.bool_)):
        raise ValueError(f"attend_to_masked must be a bool, got {attend_to_masked!r}")
    si = bool(attend_to_masked)
    if not si and p_m >= 1.0:
        raise ValueError(
            f"mask_prob must be < 1 when attend_to_masked=False (no visible key otherwise), got {mask_prob!r}"
        )
    return _Params(T, v, tau, N, p_m, p_c, p_r, si)


# ----------------------------------------------------------------------------------------
# kappa and moments (dense route)
# ----------------------------------------------------------------------------------------


def kappa(doc_len: int | float, mask_prob: float = 0.15) -> float:
    """``kappa = E[1/K | K >= 1]`` with ``K ~ Binomial(doc_len - 1, 1 - mask_prob)``.

    ``K`` is the number of visible keys seen by a selected position when selected
    positions are hidden (``attend_to_masked=False``). Computed exactly as a finite sum
    (log-space binomial weights, so ``doc_len`` up to ~10^7 is fine).

    Parameters
    ----------
    doc_len : int or math.inf
        Document length N >= 2; ``math.inf`` gives 0.
    mask_prob : float
        Selection probability p_m in [0, 1); p_m = 1 leaves no visible key.

    Returns
    -------
    kappa : float
    """
    N = _check_doc_len(doc_len)
    p_m = check_masking(mask_prob, 0.0, 0.0)[0]
    if p_m >= 1.0:
        raise ValueError(f"mask_prob must be < 1 for kappa (K >= 1 is impossible), got {mask_prob!r}")
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


def _dense_basis(p: _Params) -> dict[str, np.ndarray]:
    """Dense building blocks: u, e_M (D,), I_w, B, J, Q = E_S[q q^T] (D, D)."""
    V, D, v = p.V, p.D, p.v
    topic = np.arange(V) // v
    u = np.zeros(D)
    u[:V] = 1.0 / V
    e = np.zeros(D)
    e[V] = 1.0
    Iw = np.zeros((D, D))
    Iw[:V, :V] = np.eye(V)
    B = np.zeros((D, D))
    B[:V, :V] = topic[:, None] == topic[None, :]
    J = np.zeros((D, D))
    J[:V, :V] = 1.0
    kB, kJ = p.qq_coefficients()
    return {"u": u, "e": e, "I": Iw, "B": B, "J": J, "Q": kB * B + kJ * J}


def _dense_outer_mean(basis: dict[str, np.ndarray], x: tuple[float, float, float], y: tuple[float, float, float]) -> np.ndarray:
    """E_S[(x0 q + x1 u + x2 e)(y0 q + y1 u + y2 e)^T], dense (D, D); uses E_S q_S = u."""
    u, e, Q = basis["u"], basis["e"], basis["Q"]
    uu, ue, eu, ee = np.outer(u, u), np.outer(u, e), np.outer(e, u), np.outer(e, e)
    return (
        x[0] * y[0] * Q
        + (x[0] * y[1] + x[1] * y[0] + x[1] * y[1]) * uu
        + (x[0] + x[1]) * y[2] * ue
        + x[2] * (y[0] + y[1]) * eu
        + x[2] * y[2] * ee
    )


def _dense_diag_mean(basis: dict[str, np.ndarray], x: tuple[float, float, float]) -> np.ndarray:
    """E_S diag(x0 q + x1 u + x2 e), dense (D, D)."""
    V = basis["u"].size - 1
    return (x[0] + x[1]) / V * basis["I"] + x[2] * np.outer(basis["e"], basis["e"])


def _dense_moments(p: _Params) -> tuple[np.ndarray, np.ndarray]:
    bs = _dense_basis(p)
    V, N = p.V, p.N
    q = (1.0, 0.0, 0.0)
    if not p.si:
        kap = kappa(N, p.p_m)
        Sigma = kap * bs["I"] / V + (1.0 - kap) * bs["Q"]
        return Sigma, bs["Q"].copy()
    c = (p.p_c, p.p_r, p.p_M)  # law of the selected token
    d = (p.a, p.b, p.m)  # law of any other token
    if math.isinf(N):
        return _dense_outer_mean(bs, d, d), _dense_outer_mean(bs, q, d)
    Sigma = (
        _dense_diag_mean(bs, c)
        + (N - 1) * (_dense_outer_mean(bs, c, d) + _dense_outer_mean(bs, d, c))
        + (N - 1) * _dense_diag_mean(bs, d)
        + (N - 1) * (N - 2) * _dense_outer_mean(bs, d, d)
    ) / N**2
    C = (
        p.p_c * bs["I"] / V
        + p.p_r * np.outer(bs["u"], bs["u"])
        + p.p_M * np.outer(bs["u"], bs["e"])
        + (N - 1) * _dense_outer_mean(bs, q, d)
    ) / N
    return Sigma, C


def moments(
    num_topics: int,
    words_per_topic: int,
    topics_per_doc: int,
    doc_len: int | float,
    mask_prob: float = 0.15,
    keep_prob: float = 0.1,
    random_prob: float = 0.1,
    attend_to_masked: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact second moments ``Sigma = E[xbar xbar^T]`` and ``C = E[y xbar^T]``.

    The expectation runs over documents (topic set S, words i.i.d. uniform over the
    words of S), the BERT corruption, and a selected position (book: appendix to ch. 4, *The moments*).

    Parameters
    ----------
    num_topics, words_per_topic, topics_per_doc : int
        T >= 1, v >= 1, 1 <= tau <= T.
    doc_len : int or math.inf
        N >= 2; ``math.inf`` gives the long-document limits (Section 8.5).
    mask_prob, keep_prob, random_prob : float
        p_m, p_c, p_r (the [MASK] share is 1 - p_c - p_r; random words are uniform over
        the V real words).
    attend_to_masked : bool
        True: selected positions are visible keys (SI). False: hidden (CS); then the
        [MASK] row and column of both matrices are 0.

    Returns
    -------
    Sigma : ndarray, shape (D, D)
        Symmetric, rows/columns = input tokens.
    C : ndarray, shape (D, D)
        Rows = target token, columns = input token.

    See Also
    --------
    optimal_value_matrix, value_block_coefficients : the least-squares optimum (book ch. 4).
    """
    p = _params(num_topics, words_per_topic, topics_per_doc, doc_len, mask_prob, keep_prob, random_prob, attend_to_masked)
    return _dense_moments(p)


def population_loss(W: np.ndarray, Sigma: np.ndarray, C: np.ndarray) -> float:
    """Population loss ``L(W) = tr(W Sigma W^T) - 2 tr(W C^T) + 1`` (squared loss, one-hot target).

    Parameters
    ----------
    W, Sigma, C : ndarray, shape (D, D)

    Returns
    -------
    loss : float
    """
    W, Sigma, C = (np.asarray(x, dtype=np.float64) for x in (W, Sigma, C))
    return float(np.einsum("ij,jk,ik->", W, Sigma, W) - 2.0 * np.sum(W * C) + 1.0)


def _solve_right(C: np.ndarray, Sigma: np.ndarray, l2: float) -> np.ndarray:
    """``C (Sigma + l2 I)^{-1}``, or the minimum-norm ``C Sigma^+`` when singular and l2 = 0."""
    n = Sigma.shape[0]
    S = Sigma + l2 * np.eye(n)
    evals = np.linalg.eigvalsh(0.5 * (S + S.T))
    top = max(float(np.max(np.abs(evals))), np.finfo(float).tiny)
    if float(np.min(evals)) > 1e3 * _RCOND * top:
        return np.linalg.solve(S.T, C.T).T  # S is symmetric; solve S W^T = C^T
    return C @ np.linalg.pinv(S, rcond=_RCOND, hermitian=True)


def optimal_value_matrix(
    num_topics: int,
    words_per_topic: int,
    topics_per_doc: int,
    doc_len: int | float,
    mask_prob: float = 0.15,
    keep_prob: float = 0.1,
    random_prob: float = 0.1,
    attend_to_masked: bool = True,
    l2: float = 0.0,
) -> np.ndarray:
    """Stage-1 optimum of the value matrix under uniform attention, by a dense solve.

    ``W* = C (Sigma + l2 I)^{-1}`` with the exact moments of :func:`moments`. With
    ``attend_to_masked=False`` the solve runs on the word block and the [MASK] row and
    column are set to 0 ([MASK] never enters xbar, so its column is unconstrained).
    When Sigma is singular and ``l2 == 0`` (``doc_len=math.inf``) the minimum-norm
    solution ``C Sigma^+`` is returned (what gradient descent from 0 converges to).

    At finite N with ``l2 == 0``, every *attended* column of W* sums to 1 over the word
    rows: ``1^T y = 1 = 1^T xbar``, so ``1^T`` is an exact linear predictor of ``1^T y``
    and, Sigma being positive definite on the attended tokens, ``1^T W* = 1^T`` there. In
    particular the [MASK] column is exactly ``1/V`` with visible keys (when [MASK] occurs,
    ``mask_prob * (1 - keep_prob - random_prob) > 0``); with hidden keys, or when [MASK]
    never occurs, the [MASK] column is not attended and is returned as 0.

    Parameters
    ----------
    num_topics, words_per_topic, topics_per_doc, doc_len, mask_prob, keep_prob, random_prob, attend_to_masked
        As in :func:`moments`.
    l2 : float
        Ridge coefficient >= 0 (minimises ``L(W) + l2 * ||W||_F^2``).

    Returns
    -------
    W : ndarray, shape (D, D)
        Rows = output token, columns = input token; the [MASK] row is 0.

    See Also
    --------
    value_block_coefficients : the same optimum in O(1) through the symmetry algebra.
    Book ch. 4 (value matrix, stage 1).
    """
    p = _params(num_topics, words_per_topic, topics_per_doc, doc_len, mask_prob, keep_prob, random_prob, attend_to_masked)
    lam = _check_l2(l2)
    Sigma, C = _dense_moments(p)
    if p.si:
        return _solve_right(C, Sigma, lam)
    V = p.V
    W = np.zeros((p.D, p.D))
    W[:V, :V] = _solve_right(C[:V, :V], Sigma[:V, :V], lam)
    return W


# ----------------------------------------------------------------------------------------
# Symmetry algebra route (O(1) in V)
# ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Alg:
    """An element of the invariant algebra, stored by its spectral coordinates.

    A matrix of the form ``[[xI I + xB B + xJ J, c 1], [r 1^T, m]]`` (word block, [MASK]
    column, [MASK] row, [MASK]-[MASK] entry) acts as ``lw`` on within-topic contrasts,
    ``lt`` on topic contrasts and as the 2x2 matrix ``K`` on span{1/sqrt(V), e_M}.
    Sums, products, (pseudo-)inverses act coordinate-wise.
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
        xI = self.lw
        xB = (self.lt - self.lw) / self.v
        xJ = (self.K[0, 0] - self.lt) / self.V
        return xI, xB, xJ, self.K[0, 1] / s, self.K[1, 0] / s, self.K[1, 1]

    def __add__(self, other: _Alg) -> _Alg:
        return _Alg(self.lw + other.lw, self.lt + other.lt, self.K + other.K, self.v, self.V)

    def __rmul__(self, scalar: float) -> _Alg:
        return _Alg(scalar * self.lw, scalar * self.lt, scalar * self.K, self.v, self.V)

    def __matmul__(self, other: _Alg) -> _Alg:
        return _Alg(self.lw * other.lw, self.lt * other.lt, self.K @ other.K, self.v, self.V)

    def word_block(self) -> _Alg:
        """Restriction to the words ([MASK] row/column/entry set to 0)."""
        K = np.array([[self.K[0, 0], 0.0], [0.0, 0.0]])
        return _Alg(self.lw, self.lt, K, self.v, self.V)

    def pinv(self, l2: float = 0.0, words_only: bool = False) -> _Alg:
        """``(X + l2 I)^+`` for symmetric X; ``words_only`` treats the [MASK] coordinate as absent."""
        K = self.K + l2 * np.eye(2)
        lw, lt = self.lw + l2, self.lt + l2
        if words_only:
            K = np.array([[K[0, 0], 0.0], [0.0, 0.0]])
        top = max(abs(lw), abs(lt), float(np.max(np.abs(np.linalg.eigvalsh(K)))), np.finfo(float).tiny)
        tol = _RCOND * top

        def inv(x: float) -> float:
            return 0.0 if abs(x) <= tol else 1.0 / x

        if words_only:
            Kp = np.array([[inv(K[0, 0]), 0.0], [0.0, 0.0]])
        else:
            w, U = np.linalg.eigh(0.5 * (K + K.T))
            Kp = (U * np.array([inv(x) for x in w])) @ U.T
        return _Alg(inv(lw), inv(lt), Kp, self.v, self.V)


def _alg_outer_mean(p: _Params, x: tuple[float, float, float], y: tuple[float, float, float]) -> _Alg:
    """Algebra version of :func:`_dense_outer_mean`."""
    v, V = p.v, p.V
    kB, kJ = p.qq_coefficients()
    return _Alg.from_coeffs(
        v, V,
        xB=x[0] * y[0] * kB,
        xJ=x[0] * y[0] * kJ + (x[0] * y[1] + x[1] * y[0] + x[1] * y[1]) / V**2,
        c=(x[0] + x[1]) * y[2] / V,
        r=x[2] * (y[0] + y[1]) / V,
        m=x[2] * y[2],
    )


def _alg_diag_mean(p: _Params, x: tuple[float, float, float]) -> _Alg:
    return _Alg.from_coeffs(p.v, p.V, xI=(x[0] + x[1]) / p.V, m=x[2])


def _alg_moments(p: _Params) -> tuple[_Alg, _Alg]:
    v, V, N = p.v, p.V, p.N
    q = (1.0, 0.0, 0.0)
    if not p.si:
        kap = kappa(N, p.p_m)
        kB, kJ = p.qq_coefficients()
        Q = _Alg.from_coeffs(v, V, xB=kB, xJ=kJ)
        return _Alg.from_coeffs(v, V, xI=kap / V) + (1.0 - kap) * Q, Q
    c = (p.p_c, p.p_r, p.p_M)
    d = (p.a, p.b, p.m)
    if math.isinf(N):
        return _alg_outer_mean(p, d, d), _alg_outer_mean(p, q, d)
    Sigma = (1.0 / N**2) * (
        _alg_diag_mean(p, c)
        + (N - 1) * (_alg_outer_mean(p, c, d) + _alg_outer_mean(p, d, c))
        + (N - 1) * _alg_diag_mean(p, d)
        + ((N - 1) * (N - 2)) * _alg_outer_mean(p, d, d)
    )
    C = (1.0 / N) * (
        _Alg.from_coeffs(v, V, xI=p.p_c / V, xJ=p.p_r / V**2, c=p.p_M / V)
        + (N - 1) * _alg_outer_mean(p, q, d)
    )
    return Sigma, C


@dataclass(frozen=True)
class ValueBlocks:
    """Orbit values of a symmetric (block-form) value matrix.

    ``W_words = diag I + same_topic (B - I) + diff_topic (J - B)``, the [MASK] input
    column equals ``mask_col`` on every word row, and the [MASK] row is 0.

    Attributes
    ----------
    diag : float
        alpha, the same-word entry W[w, w].
    same_topic : float
        beta, W[a, b] for a != b in the same topic (nan when words_per_topic == 1).
    diff_topic : float
        gamma, W[a, b] for a, b in different topics (nan when num_topics == 1).
    mask_col : float
        mu, W[w, MASK]: 1/V at finite N with visible keys, ``l2 == 0`` and a [MASK] token
        that occurs (attended columns of W* sum to 1); 0 under ``attend_to_masked=False``
        by convention (the column is not attended there).
    topic_eigenvalue : float
        Eigenvalue on topic-contrast vectors, ``(alpha - beta) + v (beta - gamma)``
        (nan when num_topics == 1).
    """

    diag: float
    same_topic: float
    diff_topic: float
    mask_col: float
    topic_eigenvalue: float

    @property
    def within_eigenvalue(self) -> float:
        """Eigenvalue on within-topic contrasts, ``alpha - beta`` (the same-word boost)."""
        return self.diag - self.same_topic


def _blocks_from_alg(W: _Alg, T: int, v: int) -> ValueBlocks:
    xI, xB, xJ, c, _r, _m = W.coeffs()
    return ValueBlocks(
        diag=float(xI + xB + xJ),
        same_topic=float(xB + xJ) if v > 1 else math.nan,
        diff_topic=float(xJ) if T > 1 else math.nan,
        mask_col=float(c),
        topic_eigenvalue=float(W.lt) if T > 1 else math.nan,
    )


def value_block_coefficients(
    num_topics: int,
    words_per_topic: int,
    topics_per_doc: int,
    doc_len: int | float,
    mask_prob: float = 0.15,
    keep_prob: float = 0.1,
    random_prob: float = 0.1,
    attend_to_masked: bool = True,
    l2: float = 0.0,
) -> ValueBlocks:
    """Orbit values of the stage-1 optimum, computed in the symmetry algebra.

    Sigma and C lie in span{I, B, J} on the words plus a constant [MASK] column, a
    constant [MASK] row and a [MASK]-[MASK] entry. This algebra is diagonalised by the
    within-topic contrasts, the topic contrasts and the 2-dimensional space
    span{1, e_M}, so ``W* = C (Sigma + l2 I)^+`` needs only scalar and 2x2 operations:
    the cost is independent of the vocabulary size (V = 10^6 is instant). Conventions
    (ridge, minimum norm, hidden keys) are those of :func:`optimal_value_matrix`, which
    it matches to rounding error.

    Parameters
    ----------
    num_topics, words_per_topic, topics_per_doc, doc_len, mask_prob, keep_prob, random_prob, attend_to_masked, l2
        As in :func:`optimal_value_matrix`.

    Returns
    -------
    blocks : ValueBlocks
        ``diag``, ``same_topic``, ``diff_topic``, ``mask_col``, ``topic_eigenvalue``;
        expand with :func:`block_matrix`.
    """
    p = _params(num_topics, words_per_topic, topics_per_doc, doc_len, mask_prob, keep_prob, random_prob, attend_to_masked)
    lam = _check_l2(l2)
    Sigma, C = _alg_moments(p)
    if p.si:
        W = C @ Sigma.pinv(lam)
    else:
        W = C.word_block() @ Sigma.pinv(lam, words_only=True)
    return _blocks_from_alg(W, p.T, p.v)


def block_matrix(blocks: ValueBlocks, num_topics: int, words_per_topic: int) -> np.ndarray:
    """Expand orbit values into the dense (D, D) matrix.

    Parameters
    ----------
    blocks : ValueBlocks
    num_topics, words_per_topic : int

    Returns
    -------
    W : ndarray, shape (D, D)
        Word block ``diag I + same (B - I) + diff (J - B)``, [MASK] column ``mask_col``
        on the word rows, [MASK] row (including the [MASK]-[MASK] entry) 0.
    """
    T = check_positive_int("num_topics", num_topics)
    v = check_positive_int("words_per_topic", words_per_topic)
    V = T * v
    topic = np.arange(V) // v
    same = topic[:, None] == topic[None, :]  # (V, V)
    eye = np.eye(V, dtype=bool)
    W = np.zeros((V + 1, V + 1))
    words = W[:V, :V]
    words[~same] = blocks.diff_topic
    words[same & ~eye] = blocks.same_topic
    words[eye] = blocks.diag
    W[:V, V] = blocks.mask_col
    return W


def _orbit_masks(T: int, v: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    V = T * v
    topic = np.arange(V) // v
    same = topic[:, None] == topic[None, :]
    eye = np.eye(V, dtype=bool)
    return eye, same & ~eye, ~same


def orbit_means(matrix: np.ndarray, num_topics: int, words_per_topic: int) -> ValueBlocks:
    """Means of a (D, D) matrix over the three word orbits and the [MASK] column.

    Use it to summarise a learned or Monte-Carlo value matrix in the same terms as
    :func:`value_block_coefficients`.

    Parameters
    ----------
    matrix : ndarray, shape (D, D)
    num_topics, words_per_topic : int

    Returns
    -------
    blocks : ValueBlocks
        ``topic_eigenvalue`` is ``(diag - same) + v (same - diff)`` of the means.
    """
    T = check_positive_int("num_topics", num_topics)
    v = check_positive_int("words_per_topic", words_per_topic)
    M = np.asarray(matrix, dtype=np.float64)
    V = T * v
    if M.shape != (V + 1, V + 1):
        raise ValueError(f"matrix must have shape {(V + 1, V + 1)}, got {M.shape}")
    eye, same, diff = _orbit_masks(T, v)
    words = M[:V, :V]
    a = float(words[eye].mean())
    b = float(words[same].mean()) if same.any() else math.nan
    g = float(words[diff].mean()) if diff.any() else math.nan
    lt = (a - b) + v * (b - g) if (v > 1 and T > 1) else math.nan
    return ValueBlocks(a, b, g, float(M[:V, V].mean()), lt)


def orbit_deviation(matrix: np.ndarray, num_topics: int, words_per_topic: int) -> float:
    """Largest deviation of a (D, D) matrix from its orbit means.

    Checks the block form of Section 8.3: the word block is constant on the three
    orbits (same word, same topic, different topic), the [MASK] column is constant on
    the words and the [MASK] row is constant on the words.

    Returns
    -------
    dev : float
        ``max |entry - orbit mean|`` over those orbits (about 1e-15 for the exact optimum).
    """
    T = check_positive_int("num_topics", num_topics)
    v = check_positive_int("words_per_topic", words_per_topic)
    M = np.asarray(matrix, dtype=np.float64)
    V = T * v
    if M.shape != (V + 1, V + 1):
        raise ValueError(f"matrix must have shape {(V + 1, V + 1)}, got {M.shape}")
    words = M[:V, :V]
    dev = 0.0
    for mask in _orbit_masks(T, v):
        if mask.any():
            vals = words[mask]
            dev = max(dev, float(np.max(np.abs(vals - vals.mean()))))
    for vals in (M[:V, V], M[V, :V]):
        dev = max(dev, float(np.max(np.abs(vals - vals.mean()))))
    return dev


# ----------------------------------------------------------------------------------------
# Closed forms
# ----------------------------------------------------------------------------------------


def diag_excess(
    doc_len: int | float,
    mask_prob: float = 0.15,
    keep_prob: float = 0.1,
    random_prob: float = 0.1,
) -> float:
    """Same-word boost ``alpha - beta`` of W* with visible keys (``attend_to_masked=True``).

    ``alpha - beta = N p_c / [(p_c + p_r) + (N - 1)(1 - p_m p_[M])]``, which tends to
    ``p_c / (1 - p_m p_[M])`` as N -> inf (book: appendix to ch. 4). It comes only from
    the selected token seeing itself and vanishes when ``keep_prob == 0``. Under hidden
    keys it is exactly 0. It does not depend on T, v or tau.

    Parameters
    ----------
    doc_len : int or math.inf
    mask_prob, keep_prob, random_prob : float

    Returns
    -------
    excess : float
    """
    N = _check_doc_len(doc_len)
    p_m, p_c, p_r = check_masking(mask_prob, keep_prob, random_prob)
    p_M = max(0.0, 1.0 - p_c - p_r)
    if math.isinf(N):
        return p_c / (1.0 - p_m * p_M)
    return N * p_c / ((p_c + p_r) + (N - 1) * (1.0 - p_m * p_M))


def topic_eigenvalue_hidden(
    num_topics: int,
    topics_per_doc: int,
    doc_len: int | float,
    mask_prob: float = 0.15,
) -> float:
    """Topic-contrast eigenvalue of W* with hidden keys (``attend_to_masked=False``).

    ``lambda_topic = 1 / (1 + kappa (tau (T - 1) / (T - tau) - 1))`` with
    ``kappa = E[1/K | K >= 1]`` (book: appendix to ch. 4). Then
    ``gamma = (1 - lambda_topic) / V``, ``alpha = beta = gamma + lambda_topic / v``.
    It tends to 1 as N -> inf (W* -> B / v). When ``topics_per_doc == num_topics >= 2``
    documents carry no topic information and the value is 0; for ``num_topics == 1``
    there are no topic contrasts and the value is nan.

    Parameters
    ----------
    num_topics, topics_per_doc : int
    doc_len : int or math.inf
    mask_prob : float

    Returns
    -------
    lambda_topic : float
    """
    T = check_positive_int("num_topics", num_topics)
    tau = check_positive_int("topics_per_doc", topics_per_doc)
    if tau > T:
        raise ValueError(f"topics_per_doc must be <= num_topics={T}, got {topics_per_doc!r}")
    kap = kappa(doc_len, mask_prob)
    if T == 1:
        return math.nan
    if tau == T:
        return 0.0
    return 1.0 / (1.0 + kap * (tau * (T - 1) / (T - tau) - 1.0))


def weighted_block_gap(
    num_topics: int,
    words_per_topic: int,
    topics_per_doc: int,
    doc_len: int | float,
    mask_prob: float = 0.15,
    keep_prob: float = 0.1,
    random_prob: float = 0.1,
    *,
    attend_to_masked: bool,
) -> float:
    """Frequency-weighted same-topic minus different-topic value of the stage-1 optimum.

    ``(alpha + (v - 1) beta) / v - gamma``: the mean entry of ``W*`` over all ``v^2``
    same-topic word pairs (the same word included) minus its mean over different-topic
    pairs. It equals ``topic_eigenvalue / v`` of :func:`value_block_coefficients`. At
    finite ``doc_len`` it is read off the exact optimum of :func:`value_block_coefficients`;
    ``doc_len=math.inf`` returns the limit ``N -> inf`` of those finite-N values in closed
    form:

    * ``1 / (v (1 - (1 - p_c) p_m))`` with visible masked keys (``attend_to_masked=True``),
      the constant the authors state for their stage-1 result;
    * ``1 / v`` with hidden masked keys (``attend_to_masked=False``), where ``W* -> B / v``.

    Parameters
    ----------
    num_topics, words_per_topic, topics_per_doc : int
        T >= 2, v >= 1 and 1 <= tau < T (with tau = T a document carries no topic
        information and the gap is 0).
    doc_len : int or math.inf
        N >= 2, or ``math.inf`` for the closed-form limit.
    mask_prob, keep_prob, random_prob : float
        p_m, p_c, p_r in [0, 1] with p_c + p_r <= 1. Some true word must stay visible,
        ``1 - (1 - p_c) p_m > 0``; with hidden keys also p_m < 1.
    attend_to_masked : bool
        Keyword only: True for visible masked keys, False for hidden ones.

    Returns
    -------
    gap : float

    Raises
    ------
    ValueError
        For a non-integer size, ``topics_per_doc >= num_topics``, a probability outside
        [0, 1], ``keep_prob + random_prob > 1``, no visible true word, or ``mask_prob == 1``
        with hidden keys; the message names the argument.

    See Also
    --------
    value_block_coefficients : the orbit values alpha, beta, gamma themselves.
    """
    T, v, tau = _check_topics(num_topics, words_per_topic, topics_per_doc)
    if tau >= T:
        raise ValueError(f"topics_per_doc must be < num_topics={T}, got {topics_per_doc!r}")
    N = _check_doc_len(doc_len)
    p_m, p_c, p_r = check_masking(mask_prob, keep_prob, random_prob)
    if not isinstance(attend_to_masked, (bool, np.bool_)):
        raise ValueError(f"attend_to_masked must be a bool, got {attend_to_masked!r}")
    visible_true = 1.0 - (1.0 - p_c) * p_m
    if visible_true <= 0.0:
        raise ValueError(
            f"mask_prob and keep_prob must leave a true word visible (1 - (1 - keep_prob) mask_prob > 0), "
            f"got mask_prob={mask_prob!r}, keep_prob={keep_prob!r}"
        )
    if not attend_to_masked and p_m >= 1.0:
        raise ValueError(f"mask_prob must be < 1 when attend_to_masked=False, got {mask_prob!r}")
    if math.isinf(N):
        return 1.0 / (v * visible_true) if attend_to_masked else 1.0 / v
    blocks = value_block_coefficients(T, v, tau, N, p_m, p_c, p_r, bool(attend_to_masked))
    same = blocks.same_topic if v > 1 else 0.0  # no same-topic pair of distinct words when v = 1
    return float((blocks.diag + (v - 1) * same) / v - blocks.diff_topic)


def bayes_risk(num_topics: int, words_per_topic: int, topics_per_doc: int) -> float:
    """Topic-level Bayes risk ``1 - 1/(tau v)`` of the squared loss in the N -> inf limit.

    The best prediction knowing the topic set S is ``q_S`` (uniform over the tau v words
    of S), with loss ``E||q_S - e_y||^2 = 1 - 1/(tau v)``.

    Returns
    -------
    risk : float
    """
    _T, v, tau = _check_topics(num_topics, words_per_topic, topics_per_doc)
    return 1.0 - 1.0 / (tau * v)


# ----------------------------------------------------------------------------------------
# Data-driven optimum
# ----------------------------------------------------------------------------------------


def _as_numpy(x: Any, name: str) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    try:
        return np.asarray(x)
    except Exception:  # pragma: no cover - defensive
        raise ValueError(f"{name} must be an array or tensor, got {type(x).__name__}") from None


def _check_sample(inputs: Any, selected: Any, docs: Any, num_tokens: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    D = check_positive_int("num_tokens", num_tokens)
    if D < 2:
        raise ValueError(f"num_tokens must be >= 2 (words plus [MASK]), got {num_tokens!r}")
    x = _as_numpy(inputs, "inputs")
    s = _as_numpy(selected, "selected")
    y = _as_numpy(docs, "docs")
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


def _chunk_size(doc_len: int, D: int, budget: int = 1 << 21) -> int:
    """Documents per chunk so that (chunk, max(D, doc_len^2)) arrays stay near ``budget`` floats."""
    return max(1, budget // max(D, doc_len * doc_len, 1))


def least_squares_value_matrix(
    inputs: Any,
    selected: Any,
    docs: Any,
    num_tokens: int,
    attend_to_masked: bool = True,
    l2: float = 0.0,
) -> np.ndarray:
    """Least-squares value matrix fitted on a sample (uniform attention, one-hot inputs).

    For every selected position, ``xbar`` is the uniform average of the attended
    corrupted tokens (all positions with ``attend_to_masked=True``; the unselected
    positions otherwise, and positions with no visible key are skipped), and the
    target is the true word. Returns the minimiser of the empirical loss
    ``mean ||W xbar - e_y||^2 + l2 ||W||_F^2``; with ``l2 == 0`` and a rank-deficient
    design (e.g. [MASK] never visible) the minimum-norm solution. Vectorised: in both
    conventions xbar is the same for every selected position of a document, so the
    normal equations are accumulated per document.

    Parameters
    ----------
    inputs : LongTensor or int ndarray, shape (num_docs, doc_len)
        Corrupted token ids (``[MASK] = num_tokens - 1``).
    selected : BoolTensor or bool ndarray, shape (num_docs, doc_len)
        Positions selected for prediction.
    docs : LongTensor or int ndarray, shape (num_docs, doc_len)
        True word ids.
    num_tokens : int
        D = V + 1.
    attend_to_masked : bool
    l2 : float

    Returns
    -------
    W : ndarray, shape (D, D)
        Rows = output token, columns = input token.
    """
    x, s, y = _check_sample(inputs, selected, docs, num_tokens)
    lam = _check_l2(l2)
    D = int(num_tokens)
    n_docs, N = x.shape
    Sxx = np.zeros((D, D))
    Cyx = np.zeros((D, D))
    total = 0.0
    step = _chunk_size(N, D)
    for start in range(0, n_docs, step):
        xs, ss, ys = x[start:start + step], s[start:start + step], y[start:start + step]
        att = np.ones_like(ss) if attend_to_masked else ~ss  # (n, N) visible keys
        n_att = att.sum(axis=1)  # (n,)
        n_sel = (ss & (n_att > 0)[:, None]).sum(axis=1).astype(np.float64)  # (n,) positions used
        keep = n_sel > 0
        if not keep.any():
            continue
        xs, ss, ys, att, n_att, n_sel = xs[keep], ss[keep], ys[keep], att[keep], n_att[keep], n_sel[keep]
        xbar = _doc_counts(xs, att, D) / n_att[:, None]  # (n, D)
        ycnt = _doc_counts(ys, ss, D)  # (n, D) true words at selected positions
        Sxx += (xbar * n_sel[:, None]).T @ xbar
        Cyx += ycnt.T @ xbar
        total += float(n_sel.sum())
    if total == 0:
        raise ValueError("selected has no usable position (none selected, or none with a visible key)")
    Sxx /= total
    Cyx /= total
    if lam > 0:
        return np.linalg.solve(Sxx + lam * np.eye(D), Cyx.T).T
    return np.linalg.lstsq(Sxx, Cyx.T, rcond=_RCOND)[0].T



# ----------------------------------------------------------------------------------------
# Tied embeddings (book ch. 3)
# ----------------------------------------------------------------------------------------


def embedding_loss(M: np.ndarray, Sigma: np.ndarray, C: np.ndarray) -> float:
    """Tied-embedding objective ``tr(M Sigma M^T) - 2 tr(M C^T)`` (the loss minus its constant 1).

    With ``W^V = I`` and head ``E^T``, the prediction is ``E^T E xbar = M xbar`` and the
    population loss is ``embedding_loss(M, Sigma, C) + 1`` (the appendix on embeddings derives it).

    Parameters
    ----------
    M : ndarray, shape (D, D)
        ``E^T E`` (or any candidate value matrix).
    Sigma, C : ndarray, shape (D, D)
        From :func:`moments`.

    Returns
    -------
    loss : float
    """
    return population_loss(M, Sigma, C) - 1.0


def _symmetric_optimum(Sigma: np.ndarray, C: np.ndarray) -> np.ndarray:
    """Unconstrained symmetric minimiser: solves ``M Sigma + Sigma M = C + C^T``."""
    lam, U = np.linalg.eigh(Sigma)
    R = U.T @ (C + C.T) @ U
    den = lam[:, None] + lam[None, :]
    Mt = np.divide(R, den, out=np.zeros_like(R), where=np.abs(den) > _RCOND * max(abs(lam).max(), 1e-300))
    return U @ Mt @ U.T


def _tied_loss_grad(E: np.ndarray, Sigma: np.ndarray, Cs: np.ndarray) -> tuple[float, np.ndarray]:
    """Loss ``tr(M Sigma M) - 2 tr(M Cs)`` and its gradient ``2 E (Sigma M + M Sigma - 2 Cs)``."""
    M = E.T @ E  # (D, D)
    SM = Sigma @ M
    loss = float(np.sum(SM * M.T) - 2.0 * np.sum(M * Cs))
    return loss, 2.0 * E @ (SM + SM.T - 2.0 * Cs)


def _exact_line_step(E: np.ndarray, P: np.ndarray, Sigma: np.ndarray, Cs: np.ndarray) -> float:
    """Global minimiser t of the quartic ``f(E + t P)`` (M(t) = M + t M1 + t^2 M2)."""
    M = E.T @ E
    M1 = E.T @ P + P.T @ E
    M2 = P.T @ P

    def ip(X: np.ndarray, Y: np.ndarray) -> float:  # tr(X Sigma Y) for symmetric X, Y
        return float(np.sum((X @ Sigma) * Y.T))

    c1 = 2 * ip(M1, M) - 2 * np.sum(M1 * Cs)
    c2 = ip(M1, M1) + 2 * ip(M2, M) - 2 * np.sum(M2 * Cs)
    c3 = 2 * ip(M1, M2)
    c4 = ip(M2, M2)
    roots = np.roots([4 * c4, 3 * c3, 2 * c2, c1])
    real = roots[np.abs(roots.imag) <= 1e-9 * (1 + np.abs(roots.real))].real
    if real.size == 0:
        return 0.0
    f = ((c4 * real + c3) * real + c2) * real * real + c1 * real
    return float(real[np.argmin(f)])


def _lbfgs_tied(E: np.ndarray, Sigma: np.ndarray, Cs: np.ndarray, steps: int, history: int = 20) -> np.ndarray:
    """L-BFGS (two-loop recursion) with exact quartic line search; float64, numpy only."""
    loss, g = _tied_loss_grad(E, Sigma, Cs)
    g_tol = 1e-13 * max(1.0, float(np.abs(Cs).max()))
    S_hist: list[np.ndarray] = []
    Y_hist: list[np.ndarray] = []
    for _ in range(steps):
        if float(np.abs(g).max()) < g_tol:
            break
        q = g.copy()
        alphas = []
        for s_k, y_k in zip(reversed(S_hist), reversed(Y_hist)):
            rho = 1.0 / np.sum(y_k * s_k)
            a_k = rho * np.sum(s_k * q)
            alphas.append((rho, a_k))
            q -= a_k * y_k
        if S_hist:
            q *= np.sum(S_hist[-1] * Y_hist[-1]) / np.sum(Y_hist[-1] * Y_hist[-1])
        for (s_k, y_k), (rho, a_k) in zip(zip(S_hist, Y_hist), reversed(alphas)):
            q += (a_k - rho * np.sum(y_k * q)) * s_k
        P = -q
        if np.sum(P * g) >= 0:  # not a descent direction: restart from steepest descent
            S_hist.clear()
            Y_hist.clear()
            P = -g
        t = _exact_line_step(E, P, Sigma, Cs)
        if t == 0.0:
            break
        E_new = E + t * P
        loss_new, g_new = _tied_loss_grad(E_new, Sigma, Cs)
        s_k, y_k = E_new - E, g_new - g
        if np.sum(s_k * y_k) > 1e-300:
            S_hist.append(s_k)
            Y_hist.append(y_k)
            if len(S_hist) > history:
                S_hist.pop(0)
                Y_hist.pop(0)
        if loss_new > loss:  # numerical noise at convergence
            break
        E, loss, g = E_new, loss_new, g_new
    return E


def tied_embedding_optimum(
    Sigma: np.ndarray,
    C: np.ndarray,
    d: int,
    seed: int = 0,
    steps: int = 3000,
    restarts: int = 3,
) -> tuple[np.ndarray, np.ndarray]:
    """Embedding matrix minimising the tied-embedding loss ``tr(M Sigma M) - 2 tr(M C^T)``, ``M = E^T E``.

    The optimal ``M`` is the Sigma-weighted projection of W* onto the PSD matrices of
    rank <= d (the appendix on embeddings). The problem is non-convex in E for d < D, so
    this runs L-BFGS (float64, numpy, exact line search: the loss is a quartic
    polynomial along any line) from ``restarts`` starting points and keeps the best.
    The first start is the top-d positive part of the unconstrained symmetric optimum
    (with a tiny seeded jitter), the others are random. The result is a numerical
    optimum, not a certificate of global optimality for d < D. Deterministic for a
    given ``seed``; about 0.1 s for D = 21.

    Parameters
    ----------
    Sigma, C : ndarray, shape (D, D)
        Moments from :func:`moments`.
    d : int
        Embedding dimension >= 1.
    seed : int
        Seed of the random restarts.
    steps : int
        Maximum L-BFGS iterations per restart.
    restarts : int
        Number of starting points >= 1.

    Returns
    -------
    E : ndarray, shape (d, D)
        Column ``E[:, w]`` is the embedding of token w (the last one is [MASK]).
    M : ndarray, shape (D, D)
        The Gram matrix ``E^T E``.

    See Also
    --------
    embedding_loss : the objective.
    Book ch. 3 (embeddings): with d = T, words of the same topic get identical embeddings.
    """
    d = check_positive_int("d", d)
    steps = check_positive_int("steps", steps)
    restarts = check_positive_int("restarts", restarts)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    S = np.asarray(Sigma, dtype=np.float64)
    Cn = np.asarray(C, dtype=np.float64)
    if S.ndim != 2 or S.shape[0] != S.shape[1]:
        raise ValueError(f"Sigma must be a square matrix, got shape {S.shape}")
    if Cn.shape != S.shape:
        raise ValueError(f"C must have the shape of Sigma {S.shape}, got {Cn.shape}")
    D = S.shape[0]
    S = 0.5 * (S + S.T)
    Cs = 0.5 * (Cn + Cn.T)  # tr(M C^T) = tr(M Cs) for symmetric M
    rng = numpy_rng(seed)

    # deterministic start: best PSD rank-d part of the symmetric optimum
    Msym = _symmetric_optimum(S, Cn)
    lam, U = np.linalg.eigh(Msym)
    top = np.argsort(lam)[::-1][: min(d, D)]
    E0 = (U[:, top] * np.sqrt(np.clip(lam[top], 0.0, None))).T  # (min(d, D), D)
    if E0.shape[0] < d:
        E0 = np.vstack([E0, np.zeros((d - E0.shape[0], D))])
    scale = math.sqrt(max(float(np.trace(Msym)), 1e-12) / (d * D))
    starts = [E0 + 1e-3 * scale * rng.standard_normal((d, D))]
    starts += [scale * rng.standard_normal((d, D)) for _ in range(restarts - 1)]

    best_E, best_loss = starts[0], math.inf
    for E_init in starts:
        E = _lbfgs_tied(E_init, S, Cs, steps)
        val = _tied_loss_grad(E, S, Cs)[0]
        if val < best_loss:
            best_loss, best_E = val, E
    return best_E, best_E.T @ best_E


# ----------------------------------------------------------------------------------------
# Stage-2 gradient with respect to the key-query product (book ch. 5)
# ----------------------------------------------------------------------------------------


def empirical_key_query_gradient(
    value_matrix: np.ndarray,
    inputs: Any,
    selected: Any,
    docs: Any,
    attend_to_masked: bool = True,
) -> np.ndarray:
    """Gradient ``G = dL/dA`` at ``A = 0`` (uniform attention) on a given sample.

    The scores are ``s_ki = x_k^T A x_i`` (key k, query i). Each selected position i
    with ``n_i >= 1`` attended keys adds ``(2 / n_i) r_i^T W (x_k - xbar_i)`` to
    ``G[x_k, x_i]`` for every attended key k, where ``r_i = W xbar_i - e_{y_i}``; the
    total is divided by the number of those positions (the appendix on attention derives it).
    Selected positions without a visible key (hidden keys only) enter neither the sum
    nor the count, as in the loss. Vectorised over documents.

    Parameters
    ----------
    value_matrix : ndarray, shape (D, D)
        W, rows = output token, columns = input token.
    inputs, selected, docs : arrays or tensors, shape (num_docs, doc_len)
        Corrupted ids, selection mask, true ids (as in :func:`least_squares_value_matrix`).
    attend_to_masked : bool

    Returns
    -------
    G : ndarray, shape (D, D)
        Rows = key token, columns = query token. Gradient descent moves A along -G.
    """
    W = np.asarray(value_matrix, dtype=np.float64)
    if W.ndim != 2 or W.shape[0] != W.shape[1]:
        raise ValueError(f"value_matrix must be square (D, D), got shape {W.shape}")
    D = W.shape[0]
    x, s, y = _check_sample(inputs, selected, docs, D)
    n_docs, N = x.shape
    G = np.zeros(D * D)
    count = 0
    step = _chunk_size(N, D)
    for start in range(0, n_docs, step):
        xs, ss, ys = x[start:start + step], s[start:start + step], y[start:start + step]
        att = np.ones_like(ss) if attend_to_masked else ~ss  # (n, N) visible keys
        n_att = att.sum(axis=1)  # (n,)
        ok = n_att > 0
        dq, iq = np.nonzero(ss & ok[:, None])  # (M,) selected query positions
        if dq.size == 0:
            continue
        xbar = _doc_counts(xs, att, D) / np.maximum(n_att, 1)[:, None]  # (n, D)
        P = xbar @ W.T  # (n, D) predictions W xbar
        g = P @ W  # (n, D): g[d, u] = P_d^T W[:, u]
        pp = np.einsum("nd,nd->n", P, P)  # (n,)
        yq = ys[dq, iq]  # (M,) targets
        tq = xs[dq, iq]  # (M,) query tokens
        keys = xs[dq]  # (M, N) key tokens
        # r_i^T W (e_{x_k} - xbar_i) = g[x_k] - W[y, x_k] - (|P|^2 - P[y])
        score = g[dq[:, None], keys] - W[yq[:, None], keys] - (pp[dq] - P[dq, yq])[:, None]  # (M, N)
        weight = (2.0 / n_att[dq])[:, None] * score * att[dq]  # (M, N)
        G += np.bincount((keys * D + tq[:, None]).ravel(), weights=weight.ravel(), minlength=D * D)
        count += dq.size
    if count == 0:
        raise ValueError("selected has no usable position (none selected, or none with a visible key)")
    return (G / count).reshape(D, D)


def key_query_gradient(
    value_matrix: np.ndarray,
    num_topics: int,
    words_per_topic: int,
    topics_per_doc: int,
    doc_len: int,
    num_docs: int,
    mask_prob: float = 0.15,
    keep_prob: float = 0.1,
    random_prob: float = 0.1,
    attend_to_masked: bool = True,
    seed: int = 0,
) -> np.ndarray:
    """Monte-Carlo estimate of ``G = dL/dA`` at uniform attention with a fixed value matrix.

    Samples ``num_docs`` documents from :class:`topicmech.data.SimplifiedTopicModel`,
    corrupts them with :func:`topicmech.data.bert_mask` and applies
    :func:`empirical_key_query_gradient`. Documents are processed in chunks (each with
    its own derived seed), so memory stays bounded; 50,000 documents of length 20 take
    well under a second.

    Parameters
    ----------
    value_matrix : ndarray, shape (D, D)
        Usually :func:`optimal_value_matrix` at the same parameters (stage-1 optimum).
    num_topics, words_per_topic, topics_per_doc : int
    doc_len : int
        N >= 2 (finite).
    num_docs : int
    mask_prob, keep_prob, random_prob : float
    attend_to_masked : bool
    seed : int

    Returns
    -------
    G : ndarray, shape (D, D)
        Rows = key token, columns = query token.

    See Also
    --------
    key_query_gradient_limit : leading-order closed form (hidden keys, N -> inf).
    Book ch. 5 (attention, stage 2).
    """
    from .data import SimplifiedTopicModel, bert_mask

    p = _params(num_topics, words_per_topic, topics_per_doc, doc_len, mask_prob, keep_prob, random_prob, attend_to_masked)
    if math.isinf(p.N):
        raise ValueError(f"doc_len must be finite for sampling, got {doc_len!r}")
    n_docs = check_positive_int("num_docs", num_docs)
    W = np.asarray(value_matrix, dtype=np.float64)
    if W.shape != (p.D, p.D):
        raise ValueError(f"value_matrix must have shape {(p.D, p.D)}, got {W.shape}")
    model = SimplifiedTopicModel(p.T, p.v, p.tau)
    chunk = 1 << 15
    n_chunks = -(-n_docs // chunk)
    seeds = spawn_seeds(seed, 2 * n_chunks)
    G = np.zeros((p.D, p.D))
    total = 0
    for c in range(n_chunks):
        n = min(chunk, n_docs - c * chunk)
        docs = model.sample(n, int(p.N), seed=seeds[2 * c])
        inputs, selected = bert_mask(docs, p.V, mask_prob=p.p_m, keep_prob=p.p_c, random_prob=p.p_r, seed=seeds[2 * c + 1])
        sel = _as_numpy(selected, "selected")
        if attend_to_masked:
            used = int(sel.sum())
        else:
            used = int((sel & (~sel).any(axis=1, keepdims=True)).sum())
        if used == 0:
            continue
        G += used * empirical_key_query_gradient(W, inputs, selected, docs, attend_to_masked)
        total += used
    if total == 0:
        raise ValueError("no selected position with a visible key was sampled; increase num_docs or mask_prob")
    return G / total


def key_query_gradient_limit(
    num_topics: int,
    words_per_topic: int,
    topics_per_doc: int,
    keep_prob: float = 0.1,
) -> dict[str, float]:
    """Leading-order ``dL/dA`` entries for a word query, hidden keys, N -> inf, W = B / v.

    Only kept queries (probability p_c) carry a topic signal (the appendix on attention):
    ``G_same = -2 p_c (tau - 1) / (V tau^2 v^2)`` for a key in the query's topic (the
    same word included) and ``G_diff = +2 p_c (tau - 1) / (V tau^2 v^2 (T - 1))`` for a
    key in another topic, so ``G_same / G_diff = -(T - 1)``. Both vanish when
    ``keep_prob == 0`` or ``topics_per_doc == 1``.

    Returns
    -------
    limit : dict
        Keys ``"same_word"``, ``"same_topic"``, ``"diff_topic"`` and ``"ratio"``
        (``same_topic / diff_topic = -(T - 1)``, nan when ``num_topics == 1``).
    """
    T, v, tau = _check_topics(num_topics, words_per_topic, topics_per_doc)
    p_c = check_masking(0.0, keep_prob, 0.0)[1]
    V = T * v
    g_same = -2.0 * p_c * (tau - 1) / (V * tau**2 * v**2)
    g_diff = 2.0 * p_c * (tau - 1) / (V * tau**2 * v**2 * (T - 1)) if T > 1 else math.nan
    return {
        "same_word": g_same,
        "same_topic": g_same,
        "diff_topic": g_diff,
        "ratio": -(T - 1.0) if T > 1 else math.nan,
    }


def sigma_eigenvalues(
    num_topics: int,
    words_per_topic: int,
    topics_per_doc: int,
    doc_len: int | float,
    mask_prob: float = 0.15,
    keep_prob: float = 0.1,
    random_prob: float = 0.1,
    attend_to_masked: bool = True,
) -> tuple[float, float]:
    """Smallest positive and largest eigenvalue of the stage-1 input moment ``Sigma``.

    Under squared loss the gradient of ``L(W)`` is ``2 (W Sigma - C)``, so plain SGD on
    ``W^V`` (uniform attention) is stable for ``lr < 1 / lambda_max`` and removes the
    error along the slowest direction in about ``1 / (2 lr lambda_min)`` steps. With
    ``attend_to_masked=False`` only the word block counts (``[MASK]`` never enters
    ``xbar``, its row and column of ``Sigma`` are 0); eigenvalues below ``1e-12`` times
    the largest (``doc_len=math.inf``) are treated as 0 and skipped.

    Parameters
    ----------
    num_topics, words_per_topic, topics_per_doc, doc_len, mask_prob, keep_prob, random_prob, attend_to_masked
        As in :func:`moments`.

    Returns
    -------
    lambda_min, lambda_max : float
        Exact up to rounding (dense symmetric eigensolver on :func:`moments`).
    """
    p = _params(num_topics, words_per_topic, topics_per_doc, doc_len, mask_prob, keep_prob, random_prob,
                attend_to_masked)
    Sigma, _ = _dense_moments(p)
    if not p.si:
        Sigma = Sigma[: p.V, : p.V]
    evals = np.linalg.eigvalsh(0.5 * (Sigma + Sigma.T))
    top = float(evals[-1])
    pos = evals[evals > _RCOND * top]
    return float(pos[0]), top
