"""Statistics over pairs of words by topic relation (chapter 8), from arrays, with bootstrap intervals:
(a) similarity of word vectors, same-topic against different-topic pairs (bootstrap over words), and
(b) the masks and the summary of attention by relation (bootstrap over documents).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import numpy as np
import torch

from .corpus import WordTopics
from .utils import as_float64, check_choice, check_positive_int, check_probability, numpy_rng

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = ["RELATIONS", "shares_topic", "PairStats", "EmbeddingStats", "embedding_pair_stats", "embedding_ratios",
           "relation_masks_for_words", "classify_pairs", "AttentionStats", "attention_stats_from_sums"]

RELATIONS = ("self", "same_word", "same_topic", "diff_topic")


def shares_topic(membership: np.ndarray) -> np.ndarray:
    """Whether the topic sets of two words intersect, shape ``(n, n)``, from the boolean ``membership`` (n, T)
    of :meth:`~topicmech.corpus.WordTopics.membership`: the same-topic relation of every statistic here."""
    M = np.asarray(membership).astype(np.int32)
    return (M @ M.T) > 0


def _resample_counts(n: int, n_boot: int, seed: int) -> np.ndarray:
    """Multiplicities of ``n`` units in ``n_boot`` bootstrap resamples, shape ``(n_boot, n)``: ``n`` draws with
    replacement per resample, counted (three to eight times faster than ``Generator.multinomial`` here)."""
    draws = numpy_rng(seed).integers(n, size=(n_boot, n)) + n * np.arange(n_boot)[:, None]   # row-offset ids
    return np.bincount(draws.ravel(), minlength=n_boot * n).reshape(n_boot, n).astype(np.float64)


def _percentile_ci(samples: np.ndarray, level: float) -> np.ndarray:
    """Rows ``(low, high)`` of the percentile interval at ``level`` over axis 0."""
    return np.nanquantile(samples, [(1.0 - level) / 2.0, 1.0 - (1.0 - level) / 2.0], axis=0)


def _check_level(level: float) -> float:
    if not 0.0 < check_probability("level", level) < 1.0:
        raise ValueError(f"level must be strictly between 0 and 1, got {level!r}")
    return float(level)


@dataclass(frozen=True)
class PairStats:
    """Mean similarity (``metric``, "inner" or "cosine") of a word with itself and over ordered pairs of distinct
    words by relation, ``gap = same_topic - diff_topic``, and ``ci`` their bootstrap intervals at ``level``."""

    metric: str
    same_word: float
    same_topic: float
    diff_topic: float
    gap: float
    ci: dict[str, tuple[float, float]]
    level: float

    @property
    def ratio(self) -> float:
        """``same_topic / diff_topic`` (inf or nan when ``diff_topic`` is 0)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return float(np.float64(self.same_topic) / np.float64(self.diff_topic))


@dataclass(frozen=True)
class EmbeddingStats:
    """:class:`PairStats` ``inner`` and ``cosine`` of ``words``, with the counts of same-topic and
    different-topic pairs (see :func:`embedding_pair_stats`)."""

    inner: PairStats
    cosine: PairStats
    words: tuple[str, ...]
    num_same_pairs: int
    num_diff_pairs: int
    n_boot: int

    @property
    def num_words(self) -> int:
        return len(self.words)

    def to_frame(self) -> pd.DataFrame:
        """One row per metric: means by relation, the gap, its interval and the ratio."""
        import pandas as pd
        rows = [{"metric": s.metric, "same word": s.same_word, "same topic": s.same_topic,
                 "different topic": s.diff_topic, "gap": s.gap, "gap low": s.ci["gap"][0],
                 "gap high": s.ci["gap"][1], "ratio": s.ratio} for s in (self.inner, self.cosine)]
        return pd.DataFrame(rows).set_index("metric")


def _pair_means(C: np.ndarray, X: np.ndarray, M: np.ndarray, partition: bool) -> dict[str, np.ndarray]:
    """Means by relation and pair counts of rows ``X`` (n, d) under word weights ``C`` (B, n), topics ``M`` (n, T);
    with one topic per word, within a topic sum_{i != j} c_i c_j x_i.x_j = |sum_i c_i x_i|^2 - sum_i c_i^2 |x_i|^2."""
    sq = C * C                                                         # (B, n)
    norms2 = np.einsum("nd,nd->n", X, X)                               # (n,)
    if partition:
        labels = M.argmax(axis=1)
        cnt_s, sim_s = np.zeros(C.shape[0]), np.zeros(C.shape[0])
        total = np.zeros((C.shape[0], X.shape[1]))                     # (B, d): the topics' sums add up
        for t in np.unique(labels):
            idx = np.flatnonzero(labels == t)
            Ct = C[:, idx]                                             # (B, n_t)
            Z = Ct @ X[idx]                                            # (B, d)
            total += Z
            s = Ct.sum(axis=1)
            cnt_s += s * s
            sim_s += np.einsum("bd,bd->b", Z, Z)
        cnt_s, sim_s = cnt_s - sq.sum(axis=1), sim_s - sq @ norms2
    else:
        S = shares_topic(M) & ~np.eye(len(M), dtype=bool)                # (n, n) same-topic pairs
        cnt_s = np.einsum("bn,bn->b", C, C @ S)
        sim_s = np.einsum("bn,bn->b", C, C @ np.where(S, X @ X.T, 0.0))
        total = C @ X                                                  # (B, d)
    tot = C.sum(axis=1)
    cnt_all = tot * tot - sq.sum(axis=1)
    sim_all = np.einsum("bd,bd->b", total, total) - sq @ norms2
    with np.errstate(invalid="ignore", divide="ignore"):
        same, diff = sim_s / cnt_s, (sim_all - sim_s) / (cnt_all - cnt_s)
        return {"same_word": (C @ norms2) / tot, "same_topic": same, "diff_topic": diff, "gap": same - diff,
                "num_same": cnt_s, "num_diff": cnt_all - cnt_s}


def _pair_point(vectors: np.ndarray | torch.Tensor, membership: np.ndarray) -> tuple[dict, np.ndarray, bool, int, int]:
    """Check ``vectors`` (n, d) and ``membership`` (n, T); return ``(point, M, partition, n_same, n_diff)``,
    ``point`` mapping "inner" and "cosine" to ``(rows, means)`` (normalised rows for "cosine")."""
    X = as_float64(vectors)                                            # (n, d)
    M = np.asarray(membership, dtype=bool)
    if X.ndim != 2 or M.ndim != 2 or X.shape[0] != M.shape[0]:
        raise ValueError(f"vectors (n, d) and membership (n, T) must agree, got {X.shape} and {M.shape}")
    if not M.any(axis=1).all():
        raise ValueError("every word needs at least one topic (a row of membership is all False)")
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    if (norms == 0).any():
        raise ValueError("a vector has zero norm; its cosine is undefined")
    partition = bool((M.sum(axis=1) == 1).all())
    point = {m: (Y, _pair_means(np.ones((1, len(X))), Y, M, partition)) for m, Y in (("inner", X), ("cosine", X / norms))}
    n_same, n_diff = (int(round(point["inner"][1][k][0])) for k in ("num_same", "num_diff"))
    if n_same == 0 or n_diff == 0:
        raise ValueError(f"need same-topic and different-topic pairs, got {n_same} and {n_diff}")
    return point, M, partition, n_same, n_diff


def embedding_pair_stats(vectors: np.ndarray | torch.Tensor, membership: np.ndarray, *,
                         words: Sequence[str] | None = None, n_boot: int = 1000, level: float = 0.95,
                         seed: int = 0) -> EmbeddingStats:
    """Inner product and cosine of ``vectors`` (n, d) over ordered pairs of distinct words whose topic sets
    (rows of ``membership``, (n, T)) intersect or not; the bootstrap resamples *words* and recomputes every
    pair among them, since pairs that share a word are dependent. ``words`` names the rows."""
    point, M, partition, n_same, n_diff = _pair_point(vectors, membership)
    n_boot, level = check_positive_int("n_boot", n_boot), _check_level(level)
    words = tuple(words) if words is not None else tuple(str(i) for i in range(len(M)))
    if len(words) != len(M):
        raise ValueError(f"{len(words)} words for {len(M)} vectors")
    Cb = _resample_counts(len(M), n_boot, seed)
    keys = ("same_word", "same_topic", "diff_topic", "gap")
    out = {}
    for metric, (Y, p) in point.items():
        boot = _pair_means(Cb, Y, M, partition)
        ci = {k: tuple(float(x) for x in _percentile_ci(boot[k], level)) for k in keys}
        out[metric] = PairStats(metric, *(float(p[k][0]) for k in keys), ci, level)
    return EmbeddingStats(out["inner"], out["cosine"], words, n_same, n_diff, n_boot)


def embedding_ratios(vectors: np.ndarray | torch.Tensor, membership: np.ndarray) -> dict[str, float]:
    """The authors' embedding metrics (means as in :func:`embedding_pair_stats`): ``cosine_ratio, dot_ratio`` (same
    over different topic), ``cosine_same, cosine_diff, dot_same, dot_diff, num_same_pairs, num_diff_pairs``."""
    point, _, _, ns, nd = _pair_point(vectors, membership)
    ds, dd, cs, cd = (float(point[m][1][k][0]) for m in ("inner", "cosine") for k in ("same_topic", "diff_topic"))
    with np.errstate(divide="ignore", invalid="ignore"):
        return {"cosine_ratio": float(np.float64(cs) / cd), "dot_ratio": float(np.float64(ds) / dd),
                "cosine_same": cs, "cosine_diff": cd, "dot_same": ds, "dot_diff": dd,
                "num_same_pairs": ns, "num_diff_pairs": nd}


def relation_masks_for_words(words: Sequence[str], word_topics: WordTopics, *, min_distance: int = 0) -> dict[str, np.ndarray]:
    """Masks ``(W, W)`` of the pairs ``(query, key)`` of words of one passage that both have a topic, by relation:
    ``self`` (the same position), ``same_word`` (another position of the same word), ``same_topic`` (different
    words whose topic sets intersect) and ``diff_topic``; the last three without pairs under ``min_distance`` apart
    (the classification itself is :func:`classify_pairs`)."""
    if isinstance(min_distance, bool) or not isinstance(min_distance, (int, np.integer)) or min_distance < 0:
        raise ValueError(f"min_distance must be a non-negative int, got {min_distance!r}")
    M = word_topics.membership(words)                                  # (W, T)
    has = M.any(axis=1)                                                # (W,) words with a topic
    ids = {}
    word_id = np.array([ids.setdefault(w, len(ids)) for w in words], dtype=np.int64)   # (W,) one id per word
    pos = np.arange(len(words))
    masks = classify_pairs(same_word=word_id[:, None] == word_id[None, :], same_topic=shares_topic(M),
                           far=np.abs(pos[:, None] - pos[None, :]) >= min_distance)
    both = has[:, None] & has[None, :]
    return {name: both & mask for name, mask in masks.items()}


def classify_pairs(
    same_word: np.ndarray, same_topic: np.ndarray, far: np.ndarray,
) -> dict[str, np.ndarray]:
    """The four relations of the pairs ``(query i, key j)`` of one passage.

    From ``(W, W)`` boolean matrices: ``same_word[i, j]`` (the same word),
    ``same_topic[i, j]`` (their topic sets intersect) and ``far[i, j]`` (at least
    ``min_distance`` apart). The diagonal ``i = j`` is the relation ``self``.
    """
    itself = np.eye(len(same_word), dtype=bool)
    return {
        "self": itself,
        "same_word": same_word & ~itself & far,
        "same_topic": same_topic & ~same_word & far,
        "diff_topic": ~same_topic & far,
    }


@dataclass(frozen=True)
class AttentionStats:
    """Attention by topic relation (see :func:`~topicmech.pretrained.attention_stats`): ``(L, H)`` arrays of mean attention times the
    passage length (1 is uniform) ``self_``, ``same_word``, ``same_topic``, ``diff_topic``, ``gap`` (same minus
    different topic) and its interval ``ci_low``, ``ci_high`` from the replicates ``boot_gap``; ``num_pairs``
    counts the word pairs of each relation over ``num_docs`` documents and ``num_chunks`` passages."""

    self_: np.ndarray
    same_word: np.ndarray
    same_topic: np.ndarray
    diff_topic: np.ndarray
    gap: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    boot_gap: np.ndarray = field(repr=False)
    level: float
    num_pairs: dict[str, int]
    num_docs: int
    num_chunks: int
    pieces: str
    sums: np.ndarray | None = field(default=None, repr=False)
    counts: np.ndarray | None = field(default=None, repr=False)

    @property
    def shape(self) -> tuple[int, int]:
        """(layers, heads)."""
        return self.gap.shape  # type: ignore[return-value]

    @property
    def ratio(self) -> np.ndarray:
        """``same_topic / diff_topic``, shape (L, H)."""
        return self.same_topic / self.diff_topic

    def significant(self, alpha: float = 0.05, *, correction: Literal["bonferroni", "none"] = "bonferroni",
                    method: Literal["percentile", "normal"] = "percentile") -> np.ndarray:
        """+1 / -1 / 0 per head where the interval of ``gap`` at level ``1 - alpha`` (Bonferroni: ``1 - alpha / (L H)``)
        lies above / below / around 0. ``method="percentile"``: the percentile interval of the replicates
        (``ValueError`` if they cannot resolve that level); ``"normal"``: ``gap`` plus or minus the normal quantile
        times the bootstrap standard error of ``gap`` (the standard deviation of the replicates), which rests on all
        replicates rather than on the few beyond a small tail."""
        m = self.gap.size if check_choice("correction", correction, ("bonferroni", "none")) == "bonferroni" else 1
        tail = check_probability("alpha", alpha) / m / 2.0
        if check_choice("method", method, ("percentile", "normal")) == "normal":
            from scipy import stats as _stats  # lazy, as in topicmech.stats
            half = float(_stats.norm.isf(tail)) * np.nanstd(self.boot_gap, axis=0, ddof=1)
            lo, hi = self.gap - half, self.gap + half
            return np.where(lo > 0, 1, np.where(hi < 0, -1, 0))
        if tail * self.boot_gap.shape[0] < 2:
            raise ValueError(f"n_boot={self.boot_gap.shape[0]} is too small for a two-sided tail of {tail:.2g}; "
                             f"use n_boot >= {int(np.ceil(2 / tail))}")
        lo, hi = _percentile_ci(self.boot_gap, 1.0 - 2.0 * tail)
        return np.where(lo > 0, 1, np.where(hi < 0, -1, 0))

    def resampled(self, seed: int, *, n_boot: int | None = None) -> AttentionStats:
        """The same statistics with fresh bootstrap replicates (``seed``; ``n_boot`` defaults to this one's count),
        from the per-document sums kept by :func:`attention_stats_from_sums`: the means do not change, the interval
        and :meth:`significant` may."""
        if self.sums is None or self.counts is None:
            raise ValueError("these AttentionStats keep no per-document sums (build them with attention_stats_from_sums)")
        return attention_stats_from_sums(self.sums, self.counts, n_boot=n_boot or self.boot_gap.shape[0],
                                         level=self.level, seed=seed, num_chunks=self.num_chunks, pieces=self.pieces)

    def to_frame(self) -> pd.DataFrame:
        """Long table, one row per (layer, head)."""
        import pandas as pd
        layer, head = np.meshgrid(*(np.arange(k) for k in self.shape), indexing="ij")
        return pd.DataFrame({k: np.ravel(v) for k, v in dict(
            layer=layer, head=head, self=self.self_, same_word=self.same_word, same_topic=self.same_topic,
            diff_topic=self.diff_topic, gap=self.gap, gap_low=self.ci_low, gap_high=self.ci_high, ratio=self.ratio).items()})


def attention_stats_from_sums(sums: np.ndarray, counts: np.ndarray, *, n_boot: int = 10000, level: float = 0.95,
                              seed: int = 0, num_chunks: int | None = None, pieces: str = "sum") -> AttentionStats:
    """:class:`AttentionStats` from per-document ``sums`` (n_docs, 4, L, H) of scaled attention and
    ``counts`` (n_docs, 4) of word pairs, relations in the order ``self, same_word, same_topic,
    diff_topic``; each bootstrap replicate resamples documents."""
    S, N = np.asarray(sums, dtype=np.float64), np.asarray(counts, dtype=np.float64)
    if S.ndim != 4 or S.shape[1] != 4 or N.shape != S.shape[:2]:
        raise ValueError(f"sums must have shape (n_docs, 4, L, H) and counts (n_docs, 4), got {S.shape} and {N.shape}")
    n_boot, level = check_positive_int("n_boot", n_boot), _check_level(level)
    tot_n = N.sum(axis=0)
    if tot_n[2] == 0 or tot_n[3] == 0:
        raise ValueError(f"need same-topic and different-topic word pairs, got {int(tot_n[2])} and {int(tot_n[3])}")
    with np.errstate(invalid="ignore", divide="ignore"):
        means = S.sum(axis=0) / tot_n[:, None, None]                         # (4, L, H)
        Cb = _resample_counts(S.shape[0], n_boot, seed)                       # (B, n_docs)
        bs, bd = (np.einsum("bn,nlh->blh", Cb, S[:, r]) / (Cb @ N[:, r])[:, None, None] for r in (2, 3))
    lo, hi = _percentile_ci(bs - bd, level)
    return AttentionStats(*means, means[2] - means[3], lo, hi, bs - bd, level,
                          {r: int(tot_n[i]) for i, r in enumerate(RELATIONS)}, int(S.shape[0]),
                          int(num_chunks if num_chunks is not None else S.shape[0]), pieces, S, N)
