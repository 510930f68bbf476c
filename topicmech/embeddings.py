"""The embedding route: trained token embeddings under frozen uniform attention.

Book: chapter 3 (*Embeddings learn topic structure*) and its appendix. The model is
:class:`topicmech.model.OneLayerTransformer` with ``embedding="learned"``,
``attention="uniform"`` and ``value="identity"``; only the embedding ``W_E`` (shape
``(d, D)``) is trained. The prediction at a selected position is ``f = W_U W_E xbar``
with an identity head (``W_U = I``, needs ``d = D``) or a tied head (``W_U = W_E^T``).

What this module adds to :mod:`topicmech.theory`:

- :func:`embedding_model` and :func:`train_in_phases`: the chapter's training recipe
  (Adam with a step-decayed learning rate, so the learned Gram matrix settles close to
  the population optimum). Adam's step is about ``lr`` per entry whatever the curvature,
  so the default phases do not depend on the setting; plain SGD has no safe default
  (the tied loss is quartic in ``W_E``) and must be given its phases;
- :func:`topic_spread`, :func:`topic_cosines`, :func:`normalized_gram`: probes of a
  learned embedding;
- :func:`tied_embedding_blocks`: the tied-head optimum through the symmetry algebra
  (rank allocated to eigenspaces by their loss gain), which predicts the Gram block
  means for every ``d`` and which ``d`` make same-topic embeddings identical;
- :class:`TiedBiasModel`, :func:`tied_bias_optimum`, :func:`weighted_topic_gap`: the
  authors' setting, a tied head with a trained bias ``f = W_E^T W_E xbar + b``, its exact
  optimum at full rank and the frequency-weighted gap the authors state.

Notation as in the book: ``T = num_topics``, ``v = words_per_topic``, ``V = T v``,
``D = V + 1`` (``[MASK]`` last), ``d = d_model``. Columns of ``W_E`` are embeddings.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

import numpy as np
import torch

from .data import TopicModel
from .model import OneLayerTransformer
from .train import History, train
from .utils import check_positive_int, spawn_seeds

__all__ = [
    "DEFAULT_PHASES",
    "SHORT_PHASES",
    "embedding_model",
    "train_in_phases",
    "topic_spread",
    "TopicCosines",
    "topic_cosines",
    "normalized_gram",
    "TiedBlocks",
    "tied_embedding_blocks",
    "TiedBiasModel",
    "weighted_topic_gap",
    "TiedBiasOptimum",
    "tied_bias_optimum",
]

#: Learning-rate schedule of chapter 3 and the default of :func:`train_in_phases`:
#: ``(steps, lr)`` per phase, Adam, batch 256. Adam's step is about ``lr`` per entry
#: whatever the curvature, so the same phases serve every ``T, v, tau, N`` and masking rate.
DEFAULT_PHASES: tuple[tuple[int, float], ...] = ((300, 1e-2), (300, 3e-3), (400, 1e-3))
#: Half as long, for qualitative checks (chapter 3 uses it for cross-entropy).
SHORT_PHASES: tuple[tuple[int, float], ...] = ((150, 1e-2), (150, 3e-3), (200, 1e-3))


def _as_array(x: torch.Tensor | np.ndarray, name: str) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().double().numpy()
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 2:
        raise ValueError(f"{name} must be a 2-D matrix, got shape {a.shape}")
    return a


def embedding_model(
    num_tokens: int,
    d_model: int | None = None,
    *,
    head: Literal["tied", "identity"] = "tied",
    attend_to_masked: bool = True,
    init_scale: float | None = None,
    bias: bool = False,
    seed: int = 0,
) -> OneLayerTransformer:
    """The chapter-3 model: learned embeddings, uniform attention, ``W_V = I``.

    Parameters
    ----------
    num_tokens : int
        ``D = V + 1``.
    d_model : int, optional
        Embedding dimension ``d``; must be ``D`` (the default) for ``head="identity"``.
    head : {"tied", "identity"}
        Prediction head ``W_E^T`` or ``I``.
    attend_to_masked : bool
        Whether selected positions are visible keys.
    init_scale : float, optional
        Standard deviation of the initial ``W_E``. Defaults to 0.1 for the tied head
        (``W_E = 0`` is a saddle of the tied loss, so a larger start leaves it quickly)
        and 0.01 for the identity head.
    bias : bool
        Add a trained prediction bias ``b`` (the authors' ``b^pred``, initialised at 0):
        returns a :class:`TiedBiasModel`, ``f = W_U W_E xbar + b``. Default False.
    seed : int
        Initialisation seed.

    Returns
    -------
    OneLayerTransformer
        Only ``W_E`` (and ``b`` when ``bias=True``) is trainable.
    """
    if head not in ("tied", "identity"):
        raise ValueError(f"head must be 'tied' or 'identity', got {head!r}")
    if not isinstance(bias, bool):
        raise ValueError(f"bias must be True or False, got {bias!r}")
    if init_scale is None:
        init_scale = 0.1 if head == "tied" else 0.01
    cls = TiedBiasModel if bias else OneLayerTransformer
    return cls(
        num_tokens,
        d_model=d_model,
        embedding="learned",
        attention="uniform",
        value="identity",
        head=head,
        attend_to_masked=attend_to_masked,
        init_scale=init_scale,
        seed=seed,
    )


def train_in_phases(
    model: torch.nn.Module,
    data: TopicModel | torch.Tensor,
    *,
    doc_len: int | None = None,
    phases: Sequence[tuple[int, float]] | None = None,
    batch_size: int = 256,
    loss: Literal["squared", "cross_entropy"] = "squared",
    optimizer: Literal["sgd", "adam"] = "adam",
    seed: int = 0,
    **train_kwargs: object,
) -> History:
    """Train with a piecewise-constant (step-decayed) learning rate.

    Calls :func:`topicmech.train.train` once per phase (a fresh optimizer each time,
    data seeds derived from ``seed``) and concatenates the histories. Decaying the
    learning rate shrinks the stochastic-gradient noise, so the learned matrices land
    closer to the population optimum than a constant rate would allow.

    Parameters
    ----------
    model : nn.Module
        Trained in place.
    data : TopicModel or LongTensor of shape (num_docs, N)
        As in :func:`topicmech.train.train`.
    doc_len : int, optional
        ``N``, required for a topic model.
    phases : sequence of (int, float), optional
        ``(steps, lr)`` per phase, each ``steps >= 1`` and ``lr > 0``. Default for Adam:
        :data:`DEFAULT_PHASES`. Adam divides each gradient entry by its running scale, so
        its step is about ``lr`` per entry whatever the curvature of the setting (``T, v,
        tau, N`` and the masking rates change the curvature, not the step), and no
        setting-derived rate is needed. SGD has no default: with the tied head the loss is
        quartic in ``W_E`` and its curvature grows with the embeddings, so no rate is safe
        for every setting; ``optimizer="sgd"`` without ``phases`` raises ValueError.
    batch_size, loss, optimizer :
        As in :func:`topicmech.train.train`.
    seed : int
        Non-negative seed; phase ``i`` uses a seed spawned from it.
    **train_kwargs
        Passed to every :func:`topicmech.train.train` call (e.g. ``mask_prob``).

    Returns
    -------
    History
        Steps numbered across phases; probes (if any) from every phase.
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    if phases is None:
        if optimizer != "adam":
            raise ValueError(
                f"no default phases for optimizer={optimizer!r}: the step size of SGD depends on the curvature, "
                "which grows with the embeddings; pass phases=[(steps, lr), ...] explicitly, or use optimizer='adam'"
            )
        phases = DEFAULT_PHASES
    phases = list(phases)
    if not phases:
        raise ValueError(f"phases must contain at least one (steps, lr) pair, got {phases!r}")
    for ph in phases:
        if (not isinstance(ph, (tuple, list)) or len(ph) != 2 or isinstance(ph[0], bool)
                or not isinstance(ph[0], (int, np.integer)) or ph[0] < 1
                or not isinstance(ph[1], (int, float)) or not (ph[1] > 0) or not math.isfinite(ph[1])):
            raise ValueError(f"phases must be (steps >= 1, lr > 0) pairs, got {ph!r}")
    seeds = spawn_seeds(seed, len(phases))
    out = History()
    offset = 0
    for (steps, lr), s in zip(phases, seeds):
        h = train(model, data, steps=int(steps), batch_size=batch_size, doc_len=doc_len, loss=loss,
                  optimizer=optimizer, lr=float(lr), seed=s, **train_kwargs)  # type: ignore[arg-type]
        out.step.extend(offset + t for t in h.step)
        out.loss.extend(h.loss)
        out.probe_step.extend(offset + t for t in h.probe_step)
        for k, vals in h.probes.items():
            out.probes.setdefault(k, []).extend(vals)
        offset += int(steps)
    return out


def _check_words(num_cols: int, words_per_topic: int) -> tuple[int, int]:
    v = check_positive_int("words_per_topic", words_per_topic)
    V = (num_cols // v) * v
    if V == 0 or num_cols not in (V, V + 1):
        raise ValueError(
            f"the matrix must have V or V + 1 token columns with V a multiple of words_per_topic={v}, got {num_cols}"
        )
    return V, v


def topic_spread(W_E: torch.Tensor | np.ndarray, words_per_topic: int) -> float:
    """Relative within-topic spread of the word embeddings.

    ``sqrt(sum_w ||e_w - m_t(w)||^2 / sum_w ||e_w||^2)``, where ``e_w`` is the embedding
    (column) of word ``w`` and ``m_t`` the mean embedding of topic ``t``. It is 0 exactly
    when words of the same topic have identical embeddings and 1 when every topic's
    embeddings average to 0. The ``[MASK]`` column (the last, when there are ``V + 1``
    columns) is ignored.

    Parameters
    ----------
    W_E : Tensor or ndarray, shape (d, V) or (d, V + 1)
    words_per_topic : int

    Returns
    -------
    spread : float in [0, 1]
    """
    E = _as_array(W_E, "W_E")
    V, v = _check_words(E.shape[1], words_per_topic)
    Ew = E[:, :V]                                                    # (d, V)
    means = Ew.reshape(E.shape[0], V // v, v).mean(axis=2)           # (d, T)
    dev = Ew - np.repeat(means, v, axis=1)                           # (d, V)
    total = float(np.sum(Ew**2))
    if total == 0.0:
        raise ValueError("W_E has all-zero word embeddings; the spread is undefined")
    return float(math.sqrt(np.sum(dev**2) / total))


class TopicCosines(NamedTuple):
    """Cosine similarities between word embeddings, by topic relation.

    Attributes
    ----------
    min_same_topic : float
        Smallest cosine over pairs of distinct words of one topic (1: identical directions).
    mean_same_topic : float
        Mean over those pairs.
    mean_diff_topic : float
        Mean cosine over pairs of words of different topics.
    max_diff_topic : float
        Largest cosine over those pairs (near 1: two topics merged).
    """

    min_same_topic: float
    mean_same_topic: float
    mean_diff_topic: float
    max_diff_topic: float


def topic_cosines(gram: torch.Tensor | np.ndarray, words_per_topic: int) -> TopicCosines:
    """Cosines ``G_ab / sqrt(G_aa G_bb)`` of word embeddings from their Gram matrix.

    Parameters
    ----------
    gram : Tensor or ndarray, shape (V, V) or (V + 1, V + 1)
        ``W_E^T W_E``; the ``[MASK]`` row/column, if present, is ignored.
    words_per_topic : int

    Returns
    -------
    TopicCosines
    """
    G = _as_array(gram, "gram")
    if G.shape[0] != G.shape[1]:
        raise ValueError(f"gram must be square, got shape {G.shape}")
    V, v = _check_words(G.shape[0], words_per_topic)
    Gw = G[:V, :V]
    norms = np.sqrt(np.clip(np.diag(Gw), 0.0, None))                # (V,)
    if np.any(norms == 0.0):
        raise ValueError("gram has a word with a zero embedding; cosines are undefined")
    cos = Gw / np.outer(norms, norms)                                # (V, V)
    topic = np.arange(V) // v
    same = (topic[:, None] == topic[None, :]) & ~np.eye(V, dtype=bool)
    diff = topic[:, None] != topic[None, :]
    nan = float("nan")
    return TopicCosines(
        float(cos[same].min()) if same.any() else nan,
        float(cos[same].mean()) if same.any() else nan,
        float(cos[diff].mean()) if diff.any() else nan,
        float(cos[diff].max()) if diff.any() else nan,
    )


def normalized_gram(gram: torch.Tensor | np.ndarray, words_per_topic: int) -> np.ndarray:
    """Gram matrix divided by the mean squared norm of the word embeddings.

    Puts embeddings trained with different losses (whose overall scale differs) on
    one colour scale: the mean of the word diagonal becomes 1.

    Parameters
    ----------
    gram : Tensor or ndarray, shape (V, V) or (V + 1, V + 1)
    words_per_topic : int

    Returns
    -------
    ndarray, same shape as ``gram``
    """
    G = _as_array(gram, "gram")
    if G.shape[0] != G.shape[1]:
        raise ValueError(f"gram must be square, got shape {G.shape}")
    V, _ = _check_words(G.shape[0], words_per_topic)
    scale = float(np.mean(np.diag(G)[:V]))
    if not scale > 0:
        raise ValueError(f"gram has a non-positive mean word norm {scale!r}")
    return G / scale


@dataclass(frozen=True)
class TiedBlocks:
    """The tied-head optimum read through the symmetry algebra (book ch. 3 appendix).

    The word coordinates split into within-topic contrasts (dimension ``T (v - 1)``),
    topic contrasts (``T - 1``) and the plane spanned by the all-ones word vector and
    ``[MASK]``. ``Sigma`` and ``W* = C Sigma^{-1}`` act on the first two as scalars
    (``sigma_*``, ``lam_*``); one unit of rank placed in such an eigenspace lowers the
    loss by ``sigma lam_+^2``. Rank goes to the largest gains first.

    Attributes
    ----------
    d : int
        Embedding dimension.
    rank_mean, rank_topic, rank_within : int
        Rank spent on the (all-ones, ``[MASK]``) plane, on topic contrasts and on
        within-topic contrasts.
    sigma_within, sigma_topic, lam_within, lam_topic : float
        Eigenvalues of Sigma and of W* on the two word eigenspaces.
    gain_within, gain_topic : float
        Loss decrease per unit of rank, ``sigma lam_+^2``.
    gain_mean : tuple of float
        Loss decrease of the best PSD matrix of rank 0, 1, 2 on the plane.
    diag, same_topic, diff_topic, mask_col, mask_mask : float
        Predicted block means of the Gram matrix ``E^T E``: same word, same topic (off
        the diagonal), different topic, the ``[MASK]`` column over words, and
        ``|e_MASK|^2``.
    loss : float
        The tied objective ``tr(M Sigma M) - 2 tr(M C^T)`` at this candidate.
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
    """Best PSD M of rank 0, 1, 2 minimising tr(M S2 M) - 2 tr(M C2^T) on a 2x2 block."""
    # rank 1: M = a n n^T, |n| = 1, best a = (n^T C2 n)_+ / (n^T S2 n), gain (n^T C2 n)_+^2 / (n^T S2 n)
    def rank1(theta: float) -> tuple[float, np.ndarray]:
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
        if rank1(m1)[0] >= rank1(m2)[0]:
            hi = m2
        else:
            lo = m1
    g1, M1 = rank1(0.5 * (lo + hi))
    # rank 2: the unconstrained symmetric optimum (M S2 + S2 M = C2 + C2^T) if it is PSD;
    # otherwise the convex problem's optimum lies on the boundary of the cone (rank <= 1)
    lam, U = np.linalg.eigh(S2)
    R = U.T @ (C2 + C2.T) @ U
    den = lam[:, None] + lam[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        Mt = np.where(np.abs(den) > 1e-15, R / den, 0.0)
    Ms = U @ Mt @ U.T
    g2, M2 = g1, M1
    if np.all(np.linalg.eigvalsh(Ms) >= -1e-14):
        gs = -(float(np.sum((Ms @ S2) * Ms)) - 2.0 * float(np.sum(Ms * C2)))
        if gs > g1:
            g2, M2 = gs, Ms
    return [0.0, g1, g2], [np.zeros((2, 2)), M1, M2]


def tied_embedding_blocks(
    Sigma: np.ndarray,
    C: np.ndarray,
    num_topics: int,
    words_per_topic: int,
    d: int,
) -> TiedBlocks:
    """Tied-head optimum ``M = E^T E`` (rank <= d, PSD) through the symmetry algebra.

    The tied objective equals ``||(M - W*) Sigma^{1/2}||_F^2`` up to a constant, with
    ``W* = C Sigma^{-1}``. Sigma and W* are invariant under relabelling words inside a
    topic and permuting topics, so they act as scalars on within-topic contrasts and on
    topic contrasts, and as 2x2 matrices on span{all-ones word vector, e_MASK}. Among
    matrices that respect this decomposition, the best one keeps, for each unit of rank,
    the eigenspace with the largest gain ``sigma lam_+^2`` (the 2x2 plane is solved
    directly). This function computes that candidate and its Gram block means in closed
    form. It is our derivation; that no rank-d PSD matrix mixing the eigenspaces does
    better is checked numerically against :func:`topicmech.theory.tied_embedding_optimum`
    (book appendix to ch. 3), not proven.

    Parameters
    ----------
    Sigma, C : ndarray, shape (D, D)
        From :func:`topicmech.theory.moments` (``D = T v + 1``, ``[MASK]`` last).
    num_topics, words_per_topic : int
        ``T >= 2`` and ``v >= 2``.
    d : int
        Embedding dimension >= 1.

    Returns
    -------
    TiedBlocks
        Ties between equal gains (e.g. zero gains) are broken towards the smaller rank.
    """
    T = check_positive_int("num_topics", num_topics)
    v = check_positive_int("words_per_topic", words_per_topic)
    d = check_positive_int("d", d)
    if T < 2 or v < 2:
        raise ValueError(f"need num_topics >= 2 and words_per_topic >= 2, got {num_topics!r}, {words_per_topic!r}")
    S = _as_array(Sigma, "Sigma")
    Cm = _as_array(C, "C")
    V = T * v
    D = V + 1
    if S.shape != (D, D):
        raise ValueError(f"Sigma must have shape {(D, D)}, got {S.shape}")
    if Cm.shape != (D, D):
        raise ValueError(f"C must have shape {(D, D)}, got {Cm.shape}")
    # unit vectors of the two word eigenspaces and an orthonormal basis of the plane
    u_w = np.zeros(D)
    u_w[0], u_w[1] = 1.0, -1.0
    u_w /= math.sqrt(2.0)                                             # within-topic contrast
    u_t = np.zeros(D)
    u_t[:v], u_t[v:2 * v] = 1.0, -1.0
    u_t /= math.sqrt(2.0 * v)                                         # topic contrast
    P = np.zeros((D, 2))
    P[:V, 0] = 1.0 / math.sqrt(V)
    P[V, 1] = 1.0                                                     # (D, 2): [1/sqrt(V), e_MASK]
    s_w, s_t = float(u_w @ S @ u_w), float(u_t @ S @ u_t)
    c_w, c_t = float(u_w @ Cm @ u_w), float(u_t @ Cm @ u_t)
    lam_w = c_w / s_w if s_w > 0 else 0.0
    lam_t = c_t / s_t if s_t > 0 else 0.0
    g_w = s_w * max(lam_w, 0.0) ** 2
    g_t = s_t * max(lam_t, 0.0) ** 2
    g_plane, M_plane = _plane_optimum(P.T @ S @ P, P.T @ Cm @ P)
    n_w, n_t = T * (v - 1), T - 1
    # enumerate allocations; the best rank for within-topic contrasts is all or nothing
    cands = []
    for r2 in range(3):
        for rt in range(n_t + 1):
            room = d - r2 - rt
            if room < 0:
                continue
            for rw in {0, min(room, n_w)}:
                gain = g_plane[r2] + rt * g_t + rw * g_w
                cands.append((gain, r2 + rt + rw, r2, rt, rw))
    top_gain = max(c[0] for c in cands)
    tol = 1e-12 * max(1.0, abs(top_gain))
    # ties (rank that buys nothing) are broken towards the smaller total rank
    best = min((c for c in cands if c[0] >= top_gain - tol), key=lambda c: (c[1], -c[0]))
    gain, _, r2, rt, rw = best
    M2 = M_plane[r2]
    common = M2[0, 0] / V                        # every word pair, from the plane
    top = max(lam_t, 0.0) * rt
    wit = max(lam_w, 0.0) * rw
    diag = common + top / (T * v) + wit / V
    same = common + top / (T * v) - wit / (T * v * (v - 1))
    diff = common - top / (T * (T - 1) * v)
    return TiedBlocks(
        d=d, rank_mean=r2, rank_topic=rt, rank_within=rw,
        sigma_within=s_w, sigma_topic=s_t, lam_within=lam_w, lam_topic=lam_t,
        gain_within=g_w, gain_topic=g_t, gain_mean=(g_plane[0], g_plane[1], g_plane[2]),
        diag=float(diag), same_topic=float(same), diff_topic=float(diff),
        mask_col=float(M2[0, 1] / math.sqrt(V)), mask_mask=float(M2[1, 1]),
        loss=float(-gain),
    )


class TiedBiasModel(OneLayerTransformer):
    """:class:`~topicmech.model.OneLayerTransformer` plus a trained prediction bias ``b_pred``.

    The logits are those of the parent model plus ``b_pred`` (shape ``(D,)``, initialised
    at 0), the authors' ``b^pred``. Build it with ``embedding_model(..., bias=True)``; it
    takes the same arguments as the parent class. The parent model is unchanged.
    """

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.b_pred = torch.nn.Parameter(torch.zeros(self.num_tokens))

    def run_with_cache(self, inputs: torch.Tensor, selected: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """As the parent's, with ``b_pred`` added to ``"logits"``."""
        cache = super().run_with_cache(inputs, selected)
        cache["logits"] = cache["logits"] + self.b_pred
        return cache

    def forward(self, inputs: torch.Tensor, selected: torch.Tensor | None = None) -> torch.Tensor:
        """Logits plus ``b_pred``, shape ``(batch, N, D)``."""
        return super().forward(inputs, selected) + self.b_pred


def weighted_topic_gap(matrix: torch.Tensor | np.ndarray, num_topics: int, words_per_topic: int) -> float:
    """Mean over same-topic word pairs (same word included) minus mean over different-topic pairs.

    For a ``(D, D)`` or ``(V, V)`` matrix with word block ``G`` this is
    ``(alpha + (v - 1) beta) / v - gamma``, where ``alpha``, ``beta``, ``gamma`` are the
    mean diagonal, same-topic off-diagonal and different-topic entries: the
    frequency-weighted difference in which the authors state their constant. For a
    matrix invariant under the topic symmetries it equals ``lam_topic / v``, the
    topic-contrast eigenvalue over ``v``. Adding a constant to every entry leaves it
    unchanged.

    Parameters
    ----------
    matrix : Tensor or ndarray, shape (V, V) or (V + 1, V + 1)
    num_topics, words_per_topic : int

    Returns
    -------
    gap : float
    """
    G = _as_array(matrix, "matrix")
    T = check_positive_int("num_topics", num_topics)
    if T < 2:
        raise ValueError(f"num_topics must be >= 2, got {num_topics!r}")
    if G.shape[0] != G.shape[1]:
        raise ValueError(f"matrix must be square, got shape {G.shape}")
    V, v = _check_words(G.shape[0], words_per_topic)
    if V != T * v:
        raise ValueError(f"matrix has {V} word columns, expected num_topics * words_per_topic = {T * v}")
    Gw = G[:V, :V]
    topic = np.arange(V) // v
    same = topic[:, None] == topic[None, :]
    return float(Gw[same].mean() - Gw[~same].mean())


@dataclass(frozen=True)
class TiedBiasOptimum:
    """Optimum of the tied head with a bias at full rank (book ch. 3, the authors' setting).

    The prediction is ``f = M xbar + b`` with ``M = W_E^T W_E``. The optimal bias is
    ``b = mu_y - M mu_x`` and ``M`` minimises the centred objective
    ``tr(M S_c M) - 2 tr(M C_c^T)`` over positive semi-definite matrices, with
    ``S_c = Sigma - mu_x mu_x^T``, ``C_c = C - mu_y mu_x^T``. ``S_c`` annihilates the
    all-ones vector, so ``M`` is only determined up to adding ``c 1 1^T`` (the bias
    absorbs it); this holds the minimum-norm choice, and the differences of its
    entries are the identified quantities.

    Attributes
    ----------
    M : ndarray, shape (D, D)
        Minimum-norm optimal ``E^T E``.
    bias : ndarray, shape (D,)
        Optimal ``b`` for that ``M``.
    weighted_gap : float
        :func:`weighted_topic_gap` of ``M``, ``(alpha + (v - 1) beta) / v - gamma``.
    diag_minus_diff, same_minus_diff : float
        Mean same-word and mean same-topic (distinct words) entries minus the mean
        different-topic entry.
    min_eig_perp : float
        Smallest eigenvalue of ``M`` on the complement of the all-ones vector; ``>= 0``
        means the PSD constraint is not active (checked; otherwise a convex solve is used).
    loss : float
        Population squared loss at the optimum.
    """

    M: np.ndarray
    bias: np.ndarray
    weighted_gap: float
    diag_minus_diff: float
    same_minus_diff: float
    min_eig_perp: float
    loss: float


def tied_bias_optimum(
    num_topics: int,
    words_per_topic: int,
    topics_per_doc: int,
    doc_len: int | float,
    mask_prob: float = 0.15,
    keep_prob: float = 0.1,
    random_prob: float = 0.1,
    *,
    attend_to_masked: bool,
) -> TiedBiasOptimum:
    """Exact optimum of ``f = W_E^T W_E xbar + b`` (uniform attention, ``W_V = I``, ``d = D``).

    Uses the exact moments of :func:`topicmech.theory.moments`. The means are
    ``mu_x = Sigma 1`` and ``mu_y = C 1`` (every ``xbar`` sums to 1; with hidden keys a
    selected position that sees no key at all, probability at most ``mask_prob^(N-1)``,
    is ignored as in the moments). The unconstrained symmetric minimiser solves the
    Lyapunov equation ``M S_c + S_c M = C_c + C_c^T`` (minimum-norm solution); when it is
    positive semi-definite on the complement of the all-ones vector, adding a multiple of
    ``1 1^T`` makes it PSD without changing the loss, so it solves the constrained
    problem. Otherwise (not met in the book's settings) the PSD problem is solved by
    :func:`topicmech.theory.tied_embedding_optimum` with ``d = D``.

    Parameters
    ----------
    num_topics, words_per_topic, topics_per_doc : int
        ``T >= 2``, ``v >= 2``, ``1 <= tau < T``.
    doc_len : int or math.inf
        ``N >= 2`` or ``math.inf`` (the long-document limit).
    mask_prob, keep_prob, random_prob : float
        ``p_m, p_c, p_r``.
    attend_to_masked : bool
        Keyword only: visible (True) or hidden (False) masked keys.

    Returns
    -------
    TiedBiasOptimum
    """
    from . import theory as th

    T = check_positive_int("num_topics", num_topics)
    v = check_positive_int("words_per_topic", words_per_topic)
    if T < 2 or v < 2:
        raise ValueError(f"need num_topics >= 2 and words_per_topic >= 2, got {num_topics!r}, {words_per_topic!r}")
    if not isinstance(attend_to_masked, bool):
        raise ValueError(f"attend_to_masked must be True or False, got {attend_to_masked!r}")
    S, C = th.moments(T, v, topics_per_doc, doc_len, mask_prob, keep_prob, random_prob,
                      attend_to_masked=attend_to_masked)
    D = S.shape[0]
    one = np.ones(D)
    mu_x, mu_y = S @ one, C @ one                                       # (D,), (D,)
    Sc = S - np.outer(mu_x, mu_x)
    Cc = C - np.outer(mu_y, mu_x)
    M = th._symmetric_optimum(Sc, Cc)                                   # (D, D), min-norm
    M = 0.5 * (M + M.T)
    Q = np.linalg.qr(np.column_stack([one, np.eye(D)[:, :-1]]))[0][:, 1:]  # (D, D-1), basis of 1-perp
    min_eig = float(np.linalg.eigvalsh(Q.T @ M @ Q).min())
    scale = max(1.0, float(np.abs(M).max()))
    if min_eig < -1e-9 * scale:  # the PSD constraint binds: solve the convex problem
        _, M = th.tied_embedding_optimum(Sc, Cc, D, restarts=1)
        min_eig = float(np.linalg.eigvalsh(Q.T @ M @ Q).min())
    bias = mu_y - M @ mu_x
    loss = float(np.sum((M @ Sc) * M) - 2.0 * np.sum(M * Cc) + 1.0 - mu_y @ mu_y)
    V = T * v
    Gw = M[:V, :V]
    topic = np.arange(V) // v
    same = topic[:, None] == topic[None, :]
    off = same & ~np.eye(V, dtype=bool)
    diff_mean = float(Gw[~same].mean())
    return TiedBiasOptimum(
        M=M, bias=bias, weighted_gap=weighted_topic_gap(M, T, v),
        diag_minus_diff=float(np.diag(Gw).mean()) - diff_mean,
        same_minus_diff=float(Gw[off].mean()) - diff_mean,
        min_eig_perp=min_eig, loss=loss,
    )
