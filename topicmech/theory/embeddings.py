"""Tied embeddings ``M = E^T E`` under uniform attention (book ch. 3 and its appendix).

The tied-head objective ``tr(M Sigma M^T) - 2 tr(M C^T)`` (the loss minus 1) and its numerical
optimum over rank-``d`` PSD matrices (:func:`tied_embedding_optimum`), the same optimum through
the symmetry algebra (:func:`tied_embedding_blocks`) and the authors' tied head with a logit bias
(:func:`tied_bias_optimum`). ``Sigma`` and ``C`` come from :func:`topicmech.theory.moments`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..setting import Setting
from ..utils import as_float64, check_positive_int, numpy_rng
from .value import RCOND, check_setting, moments, orbit_means, population_loss

__all__ = ["embedding_loss", "symmetric_optimum", "tied_embedding_optimum", "TiedBlocks", "tied_embedding_blocks",
           "weighted_topic_gap", "TiedBiasOptimum", "tied_bias_optimum", "tied_bias_from_moments",
           "AllocationGains", "allocation_gains"]


def embedding_loss(M: np.ndarray, Sigma: np.ndarray, C: np.ndarray) -> float:
    """Tied-embedding objective ``tr(M Sigma M^T) - 2 tr(M C^T)``, the loss minus 1, for ``M = E^T E``."""
    return population_loss(M, Sigma, C) - 1.0


def symmetric_optimum(Sigma: np.ndarray, C: np.ndarray) -> np.ndarray:
    """Unconstrained symmetric minimiser of ``tr(M Sigma M) - 2 tr(M C^T)``: the minimum-norm solution of
    ``M Sigma + Sigma M = C + C^T`` (``Sigma`` symmetric, by its eigendecomposition)."""
    lam, U = np.linalg.eigh(Sigma)
    R = U.T @ (C + C.T) @ U
    den = lam[:, None] + lam[None, :]
    Mt = np.divide(R, den, out=np.zeros_like(R), where=np.abs(den) > RCOND * max(abs(lam).max(), 1e-300))
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
    Sigma : ndarray, shape (D, D)
        The input moment ``Sigma`` from :func:`moments`.
    C : ndarray, shape (D, D)
        The cross moment ``C`` from :func:`moments`.
    d : int
        Embedding dimension >= 1.
    steps : int
        Maximum L-BFGS iterations per start.
    restarts : int
        Number of starts.

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

    Msym = symmetric_optimum(S, Cn)
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




@dataclass(frozen=True)
class TiedBlocks:
    """The tied-head optimum read through the symmetry algebra (:func:`tied_embedding_blocks`), dimension ``d``.

    Attributes
    ----------
    d : int
        The embedding dimension.
    rank_mean : int
        Rank spent on the plane spanned by the all-ones word vector and ``e_MASK``.
    rank_topic : int
        Rank spent on topic contrasts.
    rank_within : int
        Rank spent on within-topic contrasts.
    sigma_within : float
        Eigenvalue of ``Sigma`` on within-topic contrasts.
    sigma_topic : float
        Eigenvalue of ``Sigma`` on topic contrasts.
    lam_within : float
        Eigenvalue of ``W*`` on within-topic contrasts.
    lam_topic : float
        Eigenvalue of ``W*`` on topic contrasts.
    gain_within : float
        Loss decrease per unit of rank on within-topic contrasts.
    gain_topic : float
        Loss decrease per unit of rank on topic contrasts.
    gain_mean : tuple of float
        Loss decrease of the best PSD matrix of rank 0, 1, 2 on the plane.
    diag : float
        Gram block mean over the same word.
    same_topic : float
        Gram block mean over distinct words of one topic.
    diff_topic : float
        Gram block mean over words of different topics.
    mask_col : float
        Mean of the ``[MASK]`` column of the Gram matrix over words.
    mask_mask : float
        ``|e_MASK|^2``.
    loss : float
        ``tr(M Sigma M) - 2 tr(M C^T)`` at this candidate.
    """

    d: int
    rank_mean: int
    rank_topic: int
    rank_within: int
    sigma_within: float
    sigma_topic: float
    lam_within: float
    lam_topic: float
    gain_within: float
    gain_topic: float
    gain_mean: tuple[float, float, float]
    diag: float
    same_topic: float
    diff_topic: float
    mask_col: float
    mask_mask: float
    loss: float

    @property
    def identical_within_topic(self) -> bool:
        """Whether no rank goes to within-topic contrasts, so that same-topic embeddings coincide."""
        return self.rank_within == 0

    @property
    def topic_gap(self) -> float:
        """``same_topic - diff_topic``."""
        return self.same_topic - self.diff_topic


def _plane_optimum(S2: np.ndarray, C2: np.ndarray) -> tuple[list[float], list[np.ndarray]]:
    """Best PSD M of rank 0, 1, 2 minimising tr(M S2 M) - 2 tr(M C2^T) on a 2x2 block: gains and matrices."""
    def rank1(theta: float) -> tuple[float, np.ndarray]:  # M = a n n^T, best a = (n^T C2 n)_+ / (n^T S2 n)
        n = np.array([math.cos(theta), math.sin(theta)])
        q, c = float(n @ S2 @ n), float(n @ C2 @ n)
        if c <= 0 or q <= 0:
            return 0.0, np.zeros((2, 2))
        return c * c / q, (c / q) * np.outer(n, n)

    grid = np.linspace(0.0, math.pi, 721)
    k = int(np.argmax([rank1(t)[0] for t in grid]))
    lo, hi = grid[max(k - 1, 0)], grid[min(k + 1, len(grid) - 1)]
    for _ in range(80):  # golden-section refinement of the angle
        m1, m2 = lo + 0.382 * (hi - lo), lo + 0.618 * (hi - lo)
        lo, hi = (lo, m2) if rank1(m1)[0] >= rank1(m2)[0] else (m1, hi)
    g1, M1 = rank1(0.5 * (lo + hi))
    # rank 2: the unconstrained symmetric optimum (M S2 + S2 M = C2 + C2^T) if it is PSD;
    # otherwise the convex problem's optimum lies on the boundary of the cone (rank <= 1)
    Ms = symmetric_optimum(S2, C2)
    g2, M2 = g1, M1
    if np.all(np.linalg.eigvalsh(Ms) >= -1e-14):
        gs = -(float(np.sum((Ms @ S2) * Ms)) - 2.0 * float(np.sum(Ms * C2)))
        if gs > g1:
            g2, M2 = gs, Ms
    return [0.0, g1, g2], [np.zeros((2, 2)), M1, M2]


def tied_embedding_blocks(Sigma: np.ndarray, C: np.ndarray, num_topics: int, words_per_topic: int,
                          d: int) -> TiedBlocks:
    """Tied-head optimum ``M = E^T E`` (rank <= d, PSD) through the symmetry algebra (our derivation).

    The objective is ``||(M - W*) Sigma^{1/2}||_F^2`` up to a constant, ``W* = C Sigma^{-1}``
    (``Sigma, C`` from :func:`moments`; ``T, v >= 2``). ``Sigma`` and ``W*`` act
    as scalars on within-topic (dimension ``T (v - 1)``) and topic (``T - 1``) contrasts and as
    2x2 matrices on span{all-ones word vector, ``e_MASK``}; each unit of rank goes to the largest
    gain ``sigma lam_+^2`` (ties towards the smaller rank). That no PSD matrix mixing the
    eigenspaces does better is checked against :func:`tied_embedding_optimum`,
    not proven.
    """
    T = check_positive_int("num_topics", num_topics)
    v = check_positive_int("words_per_topic", words_per_topic)
    d = check_positive_int("d", d)
    if T < 2 or v < 2:
        raise ValueError(f"need num_topics >= 2 and words_per_topic >= 2, got {num_topics!r}, {words_per_topic!r}")
    V, D = T * v, T * v + 1
    S, Cm = as_float64(Sigma), as_float64(C)
    for name, M in (("Sigma", S), ("C", Cm)):
        if M.shape != (D, D):
            raise ValueError(f"{name} must have shape {(D, D)}, got {M.shape}")
    u_w, u_t, P = np.zeros(D), np.zeros(D), np.zeros((D, 2))
    u_w[0], u_w[1] = 1.0 / math.sqrt(2.0), -1.0 / math.sqrt(2.0)     # within-topic contrast
    u_t[:v], u_t[v:2 * v] = 1.0 / math.sqrt(2.0 * v), -1.0 / math.sqrt(2.0 * v)  # topic contrast
    P[:V, 0] = 1.0 / math.sqrt(V)
    P[V, 1] = 1.0                                                     # (D, 2): [1/sqrt(V), e_MASK]
    s_w, s_t = float(u_w @ S @ u_w), float(u_t @ S @ u_t)
    c_w, c_t = float(u_w @ Cm @ u_w), float(u_t @ Cm @ u_t)
    lam_w, lam_t = (c_w / s_w if s_w > 0 else 0.0), (c_t / s_t if s_t > 0 else 0.0)
    g_w, g_t = s_w * max(lam_w, 0.0) ** 2, s_t * max(lam_t, 0.0) ** 2
    g_plane, M_plane = _plane_optimum(P.T @ S @ P, P.T @ Cm @ P)
    n_w, n_t = T * (v - 1), T - 1
    cands = []  # (gain, total rank, plane, topic, within); within-topic rank is all or nothing
    for r2 in range(3):
        for rt in range(min(n_t, d - r2) + 1):
            for rw in {0, min(d - r2 - rt, n_w)}:
                cands.append((g_plane[r2] + rt * g_t + rw * g_w, r2 + rt + rw, r2, rt, rw))
    top_gain = max(c[0] for c in cands)
    tol = 1e-12 * max(1.0, abs(top_gain))
    gain, _, r2, rt, rw = min((c for c in cands if c[0] >= top_gain - tol), key=lambda c: (c[1], -c[0]))
    M2 = M_plane[r2]
    common = M2[0, 0] / V                        # every word pair, from the plane
    top = max(lam_t, 0.0) * rt
    wit = max(lam_w, 0.0) * rw
    return TiedBlocks(
        d=d, rank_mean=r2, rank_topic=rt, rank_within=rw,
        sigma_within=s_w, sigma_topic=s_t, lam_within=lam_w, lam_topic=lam_t,
        gain_within=g_w, gain_topic=g_t, gain_mean=(g_plane[0], g_plane[1], g_plane[2]),
        diag=float(common + top / (T * v) + wit / V),
        same_topic=float(common + top / (T * v) - wit / (T * v * (v - 1))),
        diff_topic=float(common - top / (T * (T - 1) * v)),
        mask_col=float(M2[0, 1] / math.sqrt(V)), mask_mask=float(M2[1, 1]),
        loss=float(-gain),
    )



@dataclass(frozen=True)
class AllocationGains:
    """The hypotheses of the book's embedding theorem for one setting (:func:`allocation_gains`).

    Attributes
    ----------
    lam_topic : float
        Eigenvalue of ``W* = C Sigma^+`` on topic contrasts.
    lam_within : float
        Eigenvalue of ``W*`` on within-topic contrasts.
    gain_topic : float
        Loss decrease per unit of tied-head rank on a topic contrast, ``sigma lam_+^2``.
    gain_within : float
        The same on a within-topic contrast.
    gain_plane : float
        Loss decrease of the best rank-1 PSD matrix on the plane span{all-ones word vector,
        ``e_MASK``} (its best direction).
    """

    lam_topic: float
    lam_within: float
    gain_topic: float
    gain_within: float
    gain_plane: float

    @property
    def eigen_margin(self) -> float:
        """The margin ``lam_topic - |lam_within|``, positive when the identity head's gap is."""
        return self.lam_topic - abs(self.lam_within)


def _plane_rank1_gain(S2: np.ndarray, C2: np.ndarray) -> float:
    """Best ``(n^T C2 n)_+^2 / (n^T S2 n)`` over unit n in R^2: three nested angle grids, vectorised.

    The same quantity as ``_plane_optimum(S2, C2)[0][1]`` (grid plus golden section), faster.
    """
    K = 0.5 * (C2 + C2.T)
    lo, hi = 0.0, math.pi
    best = 0.0
    for _ in range(3):
        theta = np.linspace(lo, hi, 721)
        n = np.stack([np.cos(theta), np.sin(theta)])                    # (2, 721)
        q = np.einsum("ik,ij,jk->k", n, S2, n)
        c = np.einsum("ik,ij,jk->k", n, K, n)
        g = np.where((c > 0) & (q > 0), c * c / np.where(q > 0, q, 1.0), 0.0)
        k = int(np.argmax(g))
        best = max(best, float(g[k]))
        step = theta[1] - theta[0]
        lo, hi = theta[k] - step, theta[k] + step
    return best


def allocation_gains(setting: Setting) -> AllocationGains:
    """Eigenvalues of ``W*`` and rank gains of the tied head on the three eigenspaces (``T, v >= 2``).

    What :func:`tied_embedding_blocks` reads from ``Sigma, C`` (``moments(setting)``), without
    the allocation: ``lam_topic``, ``lam_within``, the gains ``sigma lam_+^2`` of one unit of
    rank on a topic and a within-topic contrast, and the gain of the best direction of the
    plane. The book's embedding theorem needs ``lam_topic > |lam_within|`` (identity head) and
    ``gain_plane > gain_topic > gain_within`` (tied head, rank to the plane first, then to topics).
    """
    s = check_setting(setting)
    T, v = s.T, s.v
    if T < 2 or v < 2:
        raise ValueError(f"need num_topics >= 2 and words_per_topic >= 2, got {T!r}, {v!r}")
    S, Cm = moments(s)
    V, D = T * v, T * v + 1
    u_w, u_t, P = np.zeros(D), np.zeros(D), np.zeros((D, 2))
    u_w[0], u_w[1] = 1.0 / math.sqrt(2.0), -1.0 / math.sqrt(2.0)
    u_t[:v], u_t[v:2 * v] = 1.0 / math.sqrt(2.0 * v), -1.0 / math.sqrt(2.0 * v)
    P[:V, 0], P[V, 1] = 1.0 / math.sqrt(V), 1.0
    s_w, s_t = float(u_w @ S @ u_w), float(u_t @ S @ u_t)
    lam_w = float(u_w @ Cm @ u_w) / s_w if s_w > 0 else 0.0
    lam_t = float(u_t @ Cm @ u_t) / s_t if s_t > 0 else 0.0
    return AllocationGains(
        lam_topic=lam_t, lam_within=lam_w,
        gain_topic=s_t * max(lam_t, 0.0) ** 2, gain_within=s_w * max(lam_w, 0.0) ** 2,
        gain_plane=_plane_rank1_gain(P.T @ S @ P, P.T @ Cm @ P),
    )


def weighted_topic_gap(matrix: torch.Tensor | np.ndarray, num_topics: int, words_per_topic: int) -> float:
    """Mean over same-topic word pairs (same word included) minus mean over different-topic pairs.

    ``(w_diag + (v - 1) w_same) / v - w_diff`` in the orbit means of a ``(V, V)`` or ``(D, D)``
    matrix: our reading of the authors' "mean same-topic minus mean different-topic entry" (the same
    word counted as same topic), ``lam_topic / v`` for a symmetric matrix,
    unchanged by adding a constant.
    """
    G = as_float64(matrix)
    T = check_positive_int("num_topics", num_topics)
    v = check_positive_int("words_per_topic", words_per_topic)
    if G.ndim != 2 or G.shape[0] != G.shape[1]:
        raise ValueError(f"matrix must be a square 2-D matrix, got shape {G.shape}")
    V = T * v
    if G.shape[0] not in (V, V + 1):
        raise ValueError(f"matrix must have V = num_topics * words_per_topic = {V} or V + 1 columns, got "
                         f"{G.shape[0]} (num_topics={T}, words_per_topic={v})")
    if T < 2:
        raise ValueError(f"need num_topics >= 2 and num_topics * words_per_topic equal to the {V} word columns, "
                         f"got num_topics={T}, words_per_topic={v}")
    Gw = G[:V, :V]
    topic = np.arange(V) // v
    same = topic[:, None] == topic[None, :]
    return float(Gw[same].mean() - Gw[~same].mean())



@dataclass(frozen=True)
class TiedBiasOptimum:
    """Optimum of ``f = M xbar + b``, ``M = W_E^T W_E`` PSD, at full rank (:func:`tied_bias_optimum`).

    Attributes
    ----------
    M : ndarray, shape (D, D)
        An optimal positive semi-definite ``M`` (determined up to ``c 1 1^T``, which the bias
        absorbs; the minimum-norm one when it is PSD).
    bias : ndarray, shape (D,)
        ``b = mu_y - M mu_x``.
    weighted_gap : float
        :func:`weighted_topic_gap` of ``M`` (the book's ``Delta_M``).
    diag_minus_diff : float
        Mean same-word entry minus the mean different-topic entry.
    same_minus_diff : float
        Mean same-topic entry (distinct words) minus the mean different-topic entry.
    min_eig : float
        Smallest eigenvalue of ``M`` on all of ``R^D`` (``>= 0`` up to rounding: ``M = E^T E``
        for some ``E`` with ``d = D``, so the PSD constraint is inactive).
    min_eig_perp : float
        Smallest eigenvalue of ``M`` compressed to the complement of the all-ones vector. On
        its own, ``>= 0`` does not make ``M + c 1 1^T`` PSD for some ``c`` (``> 0`` strictly
        does); it does when ``M 1 = 0``, as for the minimum-norm stationary point.
    route : str
        ``"stationary"`` (the minimum-norm stationary point is PSD), ``"shifted"`` (it is
        positive definite on the complement of 1 and ``c 1 1^T`` makes it PSD) or
        ``"numerical"`` (the constraint binds: :func:`tied_embedding_optimum` with ``d = D``).
    loss : float
        Population squared loss.
    """

    M: np.ndarray
    bias: np.ndarray
    weighted_gap: float
    diag_minus_diff: float
    same_minus_diff: float
    min_eig: float
    min_eig_perp: float
    route: str
    loss: float


def tied_bias_optimum(setting: Setting) -> TiedBiasOptimum:
    """Exact optimum of ``f = W_E^T W_E xbar + b`` (uniform attention, ``W_V = I``, ``d = D``; ``T, v >= 2``).

    From :func:`moments` of ``setting`` (``doc_len`` may be ``math.inf``): ``mu_x = Sigma 1``,
    ``mu_y = C 1``; ``M`` minimises ``tr(M S_c M) - 2 tr(M C_c^T)`` with
    ``S_c = Sigma - mu_x mu_x^T``, ``C_c = C - mu_y mu_x^T`` over PSD matrices. The minimum-norm
    solution ``M_0`` of ``M S_c + S_c M = C_c + C_c^T`` has ``M_0 1 = 0`` (``S_c 1 = C_c 1 =
    C_c^T 1 = 0``); it is the answer when PSD. Otherwise, when ``M_0`` is positive definite on
    the complement of 1, ``M_0 + c 1 1^T`` (same loss) is PSD for large ``c`` (Schur
    complement); otherwise :func:`tied_embedding_optimum` with ``d = D`` solves the problem.
    """
    s = check_setting(setting)
    T, v = s.T, s.v
    if T < 2 or v < 2:
        raise ValueError(f"need num_topics >= 2 and words_per_topic >= 2, got {T!r}, {v!r}")
    S, C = moments(s)
    D = S.shape[0]
    one = np.ones(D)
    mu_x, mu_y = S @ one, C @ one                                       # (D,), (D,)
    Sc, Cc = S - np.outer(mu_x, mu_x), C - np.outer(mu_y, mu_x)
    M = symmetric_optimum(Sc, Cc)                                   # (D, D), min-norm
    M = 0.5 * (M + M.T)
    tol = 1e-9 * max(1.0, float(np.abs(M).max()))
    Q = np.linalg.qr(np.column_stack([one, np.eye(D)[:, :-1]]))[0][:, 1:]  # (D, D-1), basis of 1-perp

    def eigs(A: np.ndarray) -> tuple[float, float]:
        return float(np.linalg.eigvalsh(A).min()), float(np.linalg.eigvalsh(Q.T @ A @ Q).min())

    min_eig, min_eig_perp = eigs(M)
    route = "stationary"
    if min_eig < -tol and min_eig_perp > tol:   # Schur complement: M + c 1 1^T is PSD for large c
        u = one / math.sqrt(D)
        K, k = Q.T @ M @ Q, Q.T @ M @ u
        c = max(0.0, float(k @ np.linalg.solve(K, k)) - float(u @ M @ u)) / D
        M = M + (c * (1.0 + 1e-9) + tol) * np.outer(one, one)
        min_eig, min_eig_perp = eigs(M)
        route = "shifted"
    if min_eig < -tol:                          # the PSD constraint binds: solve the convex problem
        _, M = tied_embedding_optimum(Sc, Cc, D, restarts=1)
        min_eig, min_eig_perp = eigs(M)
        route = "numerical"
    b = orbit_means(M, T, v)
    return TiedBiasOptimum(
        M=M, bias=mu_y - M @ mu_x, weighted_gap=weighted_topic_gap(M, T, v),
        diag_minus_diff=b.diag - b.diff_topic, same_minus_diff=b.same_topic - b.diff_topic,
        min_eig=min_eig, min_eig_perp=min_eig_perp, route=route,
        loss=float(np.sum((M @ Sc) * M) - 2.0 * np.sum(M * Cc) + 1.0 - mu_y @ mu_y),
    )


def tied_bias_from_moments(Sigma: np.ndarray, C: np.ndarray, *, d: int | None = None, l2: float = 0.0,
                           steps: int = 200, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The authors' tied head with a bias, ``f = M xbar + b`` with ``M = E^T E`` of rank ``<= d`` (default
    ``D``), from any moments ``Sigma = E[xbar xbar^T]``, ``C = E[y xbar^T]`` whose ``xbar`` sum to 1 (so
    ``mu_x = Sigma 1`` and ``mu_y = C 1``), such as those of a corpus; returns ``(M, b)``, shapes ``(D, D)``
    and ``(D,)``.

    As :func:`tied_bias_optimum`: ``b = mu_y - M mu_x`` and ``M`` minimises the tied-head loss with the
    centred moments, here plus ``l2 ||M||_F^2`` (``l2 > 0`` makes the optimum unique when ``Sigma`` is
    ill-conditioned, as rare words make it). The minimum-norm stationary point when it is positive
    semi-definite and ``d = D``; otherwise :func:`tied_embedding_optimum` (one start, at most ``steps``
    L-BFGS iterations, ``seed`` its jitter), since on real moments the constraint usually binds.
    """
    S, Cm = as_float64(Sigma), as_float64(C)
    if S.ndim != 2 or S.shape[0] != S.shape[1] or Cm.shape != S.shape:
        raise ValueError(f"Sigma and C must be square matrices of one shape, got {S.shape} and {Cm.shape}")
    D = S.shape[0]
    d = D if d is None else min(check_positive_int("d", d), D)
    l2 = float(l2)
    if not math.isfinite(l2) or l2 < 0:
        raise ValueError(f"l2 must be a finite number >= 0, got {l2!r}")
    one = np.ones(D)
    mu_x, mu_y = S @ one, Cm @ one                                      # (D,), (D,)
    Sc = S - np.outer(mu_x, mu_x) + l2 * np.eye(D)
    Cc = Cm - np.outer(mu_y, mu_x)
    M = symmetric_optimum(Sc, Cc)                                       # (D, D), min-norm
    M = 0.5 * (M + M.T)
    if d < D or np.linalg.eigvalsh(M).min() < -1e-9 * max(1.0, float(np.abs(M).max())):
        _, M = tied_embedding_optimum(Sc, Cc, d, seed=seed, steps=steps, restarts=1)
    return M, mu_y - M @ mu_x
