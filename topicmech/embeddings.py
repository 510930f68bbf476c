"""The embedding route: trained token embeddings ``W_E`` (shape ``(d, D)``) under frozen uniform attention.

The prediction at a selected position is ``f = W_U W_E xbar`` with an identity head
(``W_U = I``, ``d = D``) or a tied head (``W_U = W_E^T``). Here: the training recipe
(:func:`embedding_model`, :func:`train_in_phases`), probes of a learned embedding, the tied-head
optimum through the symmetry algebra (:func:`tied_embedding_blocks`) and the authors' tied head
with a logit bias (``embedding_model(..., bias=True)``, :func:`tied_bias_optimum`). Columns of ``W_E`` are embeddings.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

import numpy as np
import torch

from . import theory as th
from .data import TopicModel
from .model import OneLayerTransformer
from .probes import relation_masks
from .train import History, train
from .utils import as_float64, check_matrix, check_positive_int, spawn_seeds

__all__ = [
    "DEFAULT_PHASES", "SHORT_PHASES", "embedding_model", "train_in_phases", "topic_spread", "TopicCosines",
    "topic_cosines", "normalized_gram", "TiedBlocks", "tied_embedding_blocks", "weighted_topic_gap",
    "TiedBiasOptimum", "tied_bias_optimum",
]

#: ``(steps, lr)`` per phase of chapter 3 and of :func:`train_in_phases` (Adam, batch 256).
#: Adam's step is about ``lr`` per entry whatever the curvature, so they serve every setting.
DEFAULT_PHASES: tuple[tuple[int, float], ...] = ((300, 1e-2), (300, 3e-3), (400, 1e-3))
#: Half as long, for qualitative checks (chapter 3 uses it for cross-entropy).
SHORT_PHASES: tuple[tuple[int, float], ...] = ((150, 1e-2), (150, 3e-3), (200, 1e-3))


def _as_array(x: torch.Tensor | np.ndarray, name: str, square: bool = False) -> np.ndarray:
    # used only by tied_embedding_blocks, which moves to topicmech.theory (then delete this)
    a = as_float64(x)
    if a.ndim != 2:
        raise ValueError(f"{name} must be a 2-D matrix, got shape {a.shape}")
    if square and a.shape[0] != a.shape[1]:
        raise ValueError(f"{name} must be square, got shape {a.shape}")
    return a


def embedding_model(num_tokens: int, d_model: int | None = None, *, head: Literal["tied", "identity"] = "tied",
                    attend_to_masked: bool, init_scale: float | None = None, bias: bool = False,
                    seed: int = 0) -> OneLayerTransformer:
    """The chapter-3 model: learned embeddings, uniform attention, ``W_V = I``; only ``W_E`` (and ``b_pred``) train.

    ``num_tokens`` is ``D``; ``d_model`` must be ``D`` (the default) for ``head="identity"``
    (``W_U = I``; ``"tied"``: ``W_U = W_E^T``). ``init_scale`` defaults to 0.1 for the tied head
    (``W_E = 0`` is a saddle) and 0.01 for the identity head. ``bias=True`` adds a trained logit
    bias ``b_pred`` (the authors' ``b^pred``).
    """
    if head not in ("tied", "identity"):
        raise ValueError(f"head must be 'tied' or 'identity', got {head!r}")
    if init_scale is None:
        init_scale = 0.1 if head == "tied" else 0.01
    return OneLayerTransformer(num_tokens, d_model=d_model, embedding="learned", attention="uniform", value="identity",
                               head=head, attend_to_masked=attend_to_masked, init_scale=init_scale, bias=bias, seed=seed)


def _check_phases(name: str, phases: object) -> tuple[tuple[int, float], ...]:
    """Validate ``(steps, lr)`` phases; return them as a tuple of ``(int, float)`` pairs."""
    bad = ValueError(f"{name} must be a non-empty sequence of (steps, lr) pairs, steps >= 1 and lr > 0, got {phases!r}")
    try:
        pairs = [tuple(p) for p in phases]  # type: ignore[union-attr]
        out = tuple((int(steps), float(lr)) for steps, lr in pairs)
    except (TypeError, ValueError):
        raise bad from None
    if not out or any(isinstance(s, bool) or not isinstance(s, (int, np.integer)) for s, _ in pairs) \
            or any(isinstance(lr, (bool, str, bytes)) for _, lr in pairs) \
            or any(s < 1 or not (math.isfinite(lr) and lr > 0) for s, lr in out):
        raise bad
    return out


def train_in_phases(
    model: torch.nn.Module, data: TopicModel | torch.Tensor, *, doc_len: int | None = None,
    phases: Sequence[tuple[int, float]] | None = None, batch_size: int = 256,
    loss: Literal["squared", "cross_entropy"] = "squared", optimizer: Literal["sgd", "adam"] = "adam",
    seed: int = 0, **train_kwargs: object,
) -> History:
    """Train ``model`` in place with a piecewise-constant (step-decayed) learning rate.

    Calls :func:`topicmech.train.train` once per ``(steps, lr)`` phase (fresh optimizer, data
    seed ``i`` spawned from the non-negative ``seed``; ``data``, ``doc_len``, ``batch_size``,
    ``loss``, ``optimizer`` and ``**train_kwargs`` passed on) and concatenates the histories
    (steps numbered across phases; each phase re-records its starting probe). ``phases``
    defaults to :data:`DEFAULT_PHASES` for Adam; SGD has none (the tied loss is quartic in
    ``W_E``, no rate is safe everywhere) and raises ValueError without it.
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    if phases is None:
        if optimizer != "adam":
            raise ValueError(f"no default phases for optimizer={optimizer!r} (the SGD step depends on the "
                             "curvature); pass phases=[(steps, lr), ...] explicitly, or use optimizer='adam'")
        phases = DEFAULT_PHASES
    phases = _check_phases("phases", phases)
    out = History()
    offset = 0
    for (steps, lr), s in zip(phases, spawn_seeds(seed, len(phases))):
        h = train(model, data, steps=steps, batch_size=batch_size, doc_len=doc_len, loss=loss,
                  optimizer=optimizer, lr=lr, seed=s, **train_kwargs)  # type: ignore[arg-type]
        out.step.extend(offset + t for t in h.step)
        out.loss.extend(h.loss)
        out.probe_step.extend(offset + t for t in h.probe_step)
        for k, vals in h.probes.items():
            out.probes.setdefault(k, []).extend(vals)
        offset += steps
    return out


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


class TopicCosines(NamedTuple):
    """Cosine similarities between word embeddings: min and mean over distinct same-topic pairs, mean and max over different-topic pairs."""

    min_same_topic: float
    mean_same_topic: float
    mean_diff_topic: float
    max_diff_topic: float


def topic_cosines(gram: torch.Tensor | np.ndarray, words_per_topic: int) -> TopicCosines:
    """Cosines ``G_ab / sqrt(G_aa G_bb)`` of word embeddings from ``gram = W_E^T W_E`` (``[MASK]`` ignored)."""
    G = check_matrix("gram", gram, square=True)
    V, v = _check_words(G.shape[0], words_per_topic)
    Gw = G[:V, :V]
    norms = np.sqrt(np.clip(np.diag(Gw), 0.0, None))                # (V,)
    if np.any(norms == 0.0):
        raise ValueError("gram has a word with a zero embedding; cosines are undefined")
    cos = Gw / np.outer(norms, norms)                                # (V, V)
    _, same, diff = relation_masks(np.arange(V) // v)               # distinct same-topic pairs, other topics
    return TopicCosines(*(float(f(cos[m])) if m.any() else math.nan
                          for m, f in ((same, np.min), (same, np.mean), (diff, np.mean), (diff, np.max))))


def normalized_gram(gram: torch.Tensor | np.ndarray, words_per_topic: int) -> np.ndarray:
    """Gram matrix divided by the mean squared norm of the word embeddings (one colour scale across losses)."""
    G = check_matrix("gram", gram, square=True)
    V, _ = _check_words(G.shape[0], words_per_topic)
    scale = float(np.mean(np.diag(G)[:V]))
    if not scale > 0:
        raise ValueError(f"gram has a non-positive mean word norm {scale!r}")
    return G / scale


@dataclass(frozen=True)
class TiedBlocks:
    """The tied-head optimum read through the symmetry algebra (:func:`tied_embedding_blocks`), dimension ``d``.

    Attributes
    ----------
    rank_mean, rank_topic, rank_within : int
        Rank spent on the (all-ones, ``[MASK]``) plane, on topic and on within-topic contrasts.
    sigma_within, sigma_topic, lam_within, lam_topic, gain_within, gain_topic : float
        Eigenvalues of ``Sigma`` and ``W*`` on the two word eigenspaces; loss decrease per unit of rank.
    gain_mean : tuple of float
        Loss decrease of the best PSD matrix of rank 0, 1, 2 on the plane.
    diag, same_topic, diff_topic, mask_col, mask_mask : float
        Gram block means: same word, same topic (off-diagonal), different topic, ``[MASK]``
        column over words, ``|e_MASK|^2``.
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
        """True when no rank goes to within-topic contrasts: same-topic embeddings coincide."""
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
    lam, U = np.linalg.eigh(S2)
    R = U.T @ (C2 + C2.T) @ U
    den = lam[:, None] + lam[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        Ms = U @ np.where(np.abs(den) > 1e-15, R / den, 0.0) @ U.T
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
    (``Sigma, C`` from :func:`topicmech.theory.moments`; ``T, v >= 2``). ``Sigma`` and ``W*`` act
    as scalars on within-topic (dimension ``T (v - 1)``) and topic (``T - 1``) contrasts and as
    2x2 matrices on span{all-ones word vector, ``e_MASK``}; each unit of rank goes to the largest
    gain ``sigma lam_+^2`` (ties towards the smaller rank). That no PSD matrix mixing the
    eigenspaces does better is checked against :func:`topicmech.theory.tied_embedding_optimum`,
    not proven.
    """
    T = check_positive_int("num_topics", num_topics)
    v = check_positive_int("words_per_topic", words_per_topic)
    d = check_positive_int("d", d)
    if T < 2 or v < 2:
        raise ValueError(f"need num_topics >= 2 and words_per_topic >= 2, got {num_topics!r}, {words_per_topic!r}")
    V, D = T * v, T * v + 1
    S, Cm = _as_array(Sigma, "Sigma"), _as_array(C, "C")
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


def weighted_topic_gap(matrix: torch.Tensor | np.ndarray, num_topics: int, words_per_topic: int) -> float:
    """Mean over same-topic word pairs (same word included) minus mean over different-topic pairs.

    ``(alpha + (v - 1) beta) / v - gamma`` in the orbit means of a ``(V, V)`` or ``(D, D)``
    matrix: the authors' frequency-weighted gap, ``lam_topic / v`` for a symmetric matrix,
    unchanged by adding a constant.
    """
    G = check_matrix("matrix", matrix, square=True)
    T = check_positive_int("num_topics", num_topics)
    V, v = _check_words(G.shape[0], words_per_topic)
    if T < 2 or V != T * v:
        raise ValueError(f"need num_topics >= 2 and num_topics * words_per_topic equal to the {V} word columns, "
                         f"got num_topics={T}, words_per_topic={v}")
    Gw = G[:V, :V]
    _, _, diff = relation_masks(np.arange(V) // v)
    return float(Gw[~diff].mean() - Gw[diff].mean())


@dataclass(frozen=True)
class TiedBiasOptimum:
    """Optimum of ``f = M xbar + b``, ``M = W_E^T W_E`` PSD, at full rank (:func:`tied_bias_optimum`).

    Attributes
    ----------
    M, bias : ndarray, shape (D, D) and (D,)
        Minimum-norm optimal ``M`` (determined up to ``c 1 1^T``, which the bias absorbs) and
        ``b = mu_y - M mu_x``.
    weighted_gap, diag_minus_diff, same_minus_diff : float
        :func:`weighted_topic_gap` of ``M``; mean same-word and same-topic (distinct words)
        entries minus the different-topic mean.
    min_eig_perp, loss : float
        Smallest eigenvalue of ``M`` on the complement of the all-ones vector (``>= 0``: PSD
        constraint inactive); population squared loss.
    """

    M: np.ndarray
    bias: np.ndarray
    weighted_gap: float
    diag_minus_diff: float
    same_minus_diff: float
    min_eig_perp: float
    loss: float


def tied_bias_optimum(num_topics: int, words_per_topic: int, topics_per_doc: int, doc_len: int | float,
                      mask_prob: float = 0.15, keep_prob: float = 0.1, random_prob: float = 0.1, *,
                      attend_to_masked: bool) -> TiedBiasOptimum:
    """Exact optimum of ``f = W_E^T W_E xbar + b`` (uniform attention, ``W_V = I``, ``d = D``; ``T, v >= 2``).

    From :func:`topicmech.theory.moments`: ``mu_x = Sigma 1``, ``mu_y = C 1``; ``M`` minimises
    ``tr(M S_c M) - 2 tr(M C_c^T)`` with ``S_c = Sigma - mu_x mu_x^T``, ``C_c = C - mu_y mu_x^T``.
    The minimum-norm solution of ``M S_c + S_c M = C_c + C_c^T`` solves it when PSD on the
    complement of the all-ones vector; otherwise :func:`topicmech.theory.tied_embedding_optimum`
    with ``d = D`` is used. ``doc_len`` may be ``math.inf``.
    """
    T = check_positive_int("num_topics", num_topics)
    v = check_positive_int("words_per_topic", words_per_topic)
    if T < 2 or v < 2:
        raise ValueError(f"need num_topics >= 2 and words_per_topic >= 2, got {num_topics!r}, {words_per_topic!r}")
    S, C = th.moments(T, v, topics_per_doc, doc_len, mask_prob, keep_prob, random_prob,
                      attend_to_masked=attend_to_masked)
    D = S.shape[0]
    one = np.ones(D)
    mu_x, mu_y = S @ one, C @ one                                       # (D,), (D,)
    Sc, Cc = S - np.outer(mu_x, mu_x), C - np.outer(mu_y, mu_x)
    M = th._symmetric_optimum(Sc, Cc)                                   # (D, D), min-norm
    M = 0.5 * (M + M.T)
    Q = np.linalg.qr(np.column_stack([one, np.eye(D)[:, :-1]]))[0][:, 1:]  # (D, D-1), basis of 1-perp
    min_eig = float(np.linalg.eigvalsh(Q.T @ M @ Q).min())
    if min_eig < -1e-9 * max(1.0, float(np.abs(M).max())):  # the PSD constraint binds: solve the convex problem
        _, M = th.tied_embedding_optimum(Sc, Cc, D, restarts=1)
        min_eig = float(np.linalg.eigvalsh(Q.T @ M @ Q).min())
    b = th.orbit_means(M, T, v)
    return TiedBiasOptimum(
        M=M, bias=mu_y - M @ mu_x, weighted_gap=weighted_topic_gap(M, T, v),
        diag_minus_diff=b.diag - b.diff_topic, same_minus_diff=b.same_topic - b.diff_topic,
        min_eig_perp=min_eig, loss=float(np.sum((M @ Sc) * M) - 2.0 * np.sum(M * Cc) + 1.0 - mu_y @ mu_y),
    )
