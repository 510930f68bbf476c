"""Stage 2 in closed form and by Monte Carlo: the gradient in the key-query scores, the drive that
sets the stage-2 learning rate, and the authors' optimal tied attention (book ch. 5 and its appendix).

``G = dL/dA`` at uniform attention (``A = 0``) with ``W^V`` fixed, ``G[key_token, query_token]``:
on a sample (:func:`empirical_key_query_gradient`), by Monte Carlo (:func:`key_query_gradient`),
its N -> inf limit (:func:`key_query_gradient_limit`) and its exact hidden-key value
(:func:`hidden_key_gradient`, :func:`stage2_drive`, :func:`default_stage2_lr`).

Tied attention: scores depend only on the relation of key and query token on the masked document
(same token ``c_1``, same topic ``c_2``, otherwise ``c_3``; the authors' ratios
``alpha = c_2 / c_3``, ``beta = c_1 / c_3``), with ``W^V`` frozen at the stage-1 optimum; the loss
is estimated on one fixed Monte-Carlo sample (:func:`tied_attention_objective`,
:func:`tied_attention_optimum`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..probes import topic_eigenvalue
from ..setting import Masking, Setting, check_attend_to_masked
from ..utils import check_float, check_positive_int, check_seed
from .estimates import check_sample, chunks, doc_counts, sample_chunks
from .value import (
    ValueBlocks,
    block_matrix,
    check_setting,
    kappa,
    moments,
    optimal_value_matrix,
    population_loss,
    value_block_coefficients,
)

__all__ = [
    "empirical_key_query_gradient", "key_query_gradient", "key_query_gradient_limit", "TARGET_GROWTH_RATE",
    "hidden_key_gradient", "stage2_drive", "default_stage2_lr", "TiedAttentionObjective", "TiedAttentionOptimum",
    "tied_attention_objective", "tied_attention_optimum", "tied_score_matrix", "weighted_ratio",
    "TiedAttentionLimitObjective", "TiedAttentionLimit", "stage1_limit_blocks",
]


# ---- the gradient in the key-query scores ---------------------------------------------------------
def _key_query_sum(W: np.ndarray, x: np.ndarray, s: np.ndarray, y: np.ndarray,
                   attend_to_masked: bool) -> tuple[np.ndarray, int]:
    """Sum over the usable selected positions of their ``dL/dA`` terms (flat, D*D) and their count."""
    D = W.shape[0]
    G = np.zeros(D * D)
    count = 0
    for xs, ss, ys, att, n_att in chunks(x, s, y, D, attend_to_masked):
        dq, iq = np.nonzero(ss & (n_att > 0)[:, None])  # (M,) selected query positions
        if dq.size == 0:
            continue
        xbar = doc_counts(xs, att, D) / np.maximum(n_att, 1)[:, None]  # (n, D)
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




def empirical_key_query_gradient(value_matrix: np.ndarray, inputs: Any, selected: Any, docs: Any, *,
                                 attend_to_masked: bool) -> np.ndarray:
    """Gradient ``G = dL/dA`` at ``A = 0`` (uniform attention) on a given sample.

    Each selected position i with ``n_i >= 1`` attended keys adds
    ``(2 / n_i) r_i^T W (x_k - xbar_i)`` to ``G[x_k, x_i]`` for every attended key k, with
    ``r_i = W xbar_i - e_{y_i}``; the total is divided by the number of such positions.

    Parameters
    ----------
    value_matrix : ndarray, shape (D, D)
        The value matrix ``W`` (held fixed) at which the gradient is taken.
    inputs : tensor or ndarray, shape (num_docs, doc_len)
        Corrupted ids, as in :func:`least_squares_value_matrix`.
    selected : tensor or ndarray of bool, shape (num_docs, doc_len)
        The selection mask, as there.
    docs : tensor or ndarray, shape (num_docs, doc_len)
        True word ids, as there.
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
    G, count = _key_query_sum(W, *check_sample(inputs, selected, docs, W.shape[0]), attend_to_masked)
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
    num_docs : int
        Documents sampled.
    seed : int
        Their seed.

    Returns
    -------
    G : ndarray, shape (D, D)
        ``G[key_token, query_token]``.
    """
    p = check_setting(setting)
    if math.isinf(p.N):
        raise ValueError(f"doc_len must be finite for sampling, got {p.N!r}")
    n_docs = check_positive_int("num_docs", num_docs)
    W = np.asarray(value_matrix, dtype=np.float64)
    if W.shape != (p.D, p.D):
        raise ValueError(f"value_matrix must have shape {(p.D, p.D)}, got {W.shape}")
    G, total = np.zeros(p.D * p.D), 0
    for docs, inputs, selected in sample_chunks(p, n_docs, seed, 1 << 15):
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
    s = check_setting(setting)
    T, v, tau, p_c = s.T, s.v, s.tau, s.p_c
    V = T * v
    g_same = -2.0 * p_c * (tau - 1) / (V * tau**2 * v**2)
    g_diff = 2.0 * p_c * (tau - 1) / (V * tau**2 * v**2 * (T - 1)) if T > 1 else math.nan
    return {"same_word": g_same, "same_topic": g_same, "diff_topic": g_diff,
            "ratio": -(T - 1.0) if T > 1 else math.nan}




# ---- its exact value with hidden keys, and the learning rate it sets --------------------------------
def hidden_key_gradient(setting: Setting, topic_eigenvalue: float | None = None) -> dict[str, float]:
    """Exact ``E[dL/dA]`` at uniform attention, hidden keys, finite ``N`` (our derivation, appendix).

    Reads ``num_topics``, ``words_per_topic``, ``topics_per_doc``, ``doc_len``, ``mask_prob`` and
    ``keep_prob`` (the result is for hidden keys whatever ``attend_to_masked``).

    For a value matrix with word block in span{B, J} and topic eigenvalue ``lambda``, the
    word-query entries are ``G = lambda (1 - kappa) G_inf`` with ``kappa = E[1/K | K >= 1]``
    and ``G_inf`` from :func:`key_query_gradient_limit`.

    ``topic_eigenvalue`` defaults to that of the stage-1 optimum with hidden keys (for ``c B``
    it is ``c v``). Returns ``"same_word"``, ``"same_topic"``, ``"diff_topic"``, ``"mask_query"``
    (0), ``"ratio"`` (``-(T - 1)``) and ``"factor"`` (``lambda (1 - kappa)``).
    """
    hidden = check_setting(setting).hidden()
    if topic_eigenvalue is None:
        lam = value_block_coefficients(hidden).topic_eigenvalue
    else:
        lam = check_float("topic_eigenvalue", topic_eigenvalue, positive=False)
    limit = key_query_gradient_limit(hidden)
    factor = lam * (1.0 - kappa(hidden))
    return {**{k: factor * limit[k] for k in ("same_word", "same_topic", "diff_topic")},
            "mask_query": 0.0, "ratio": limit["ratio"], "factor": factor}


def stage2_drive(setting: Setting) -> float:
    """Exact initial stage-2 drive ``lambda_G`` on the topic contrasts (hidden keys).

    ``lambda_G = -[(g_d - g_s) + v (g_s - g_t)]`` from the entries of ``G = dL/dA`` at uniform
    attention and the stage-1 optimum (:func:`hidden_key_gradient`); the
    topic contrast of ``A`` first grows like ``exp(2 lr lambda_G t / sqrt(d))``. 0 when
    ``topics_per_doc == 1``. Reads what :func:`hidden_key_gradient` reads.
    """
    g = hidden_key_gradient(setting)
    return float(-topic_eigenvalue(g["same_word"], g["same_topic"], g["diff_topic"], setting.v)) + 0.0


#: Initial e-folding rate per SGD step of the topic contrast of ``A`` that :func:`default_stage2_lr`
#: aims at (600 steps cover about 18 e-folds: from 0.1 to saturation, with room to spare).
TARGET_GROWTH_RATE: float = 0.03


def default_stage2_lr(setting: Setting, target_rate: float = TARGET_GROWTH_RATE) -> float:
    """SGD learning rate for stage 2 that makes ``A`` first grow at ``target_rate`` per step.

    Inverts :func:`topicmech.traces.predicted_growth_rate`: ``lr = target_rate sqrt(D) / (2 lambda_G)``, with
    ``lambda_G`` the exact hidden-key drive (:func:`stage2_drive`), which
    shrinks quickly with the vocabulary. Raises ValueError where it is not positive
    (``topics_per_doc == 1`` or ``keep_prob == 0``: uniform attention is then stationary).
    ``setting`` as in :func:`stage2_drive`.
    """
    rate = check_float("target_rate", target_rate)
    s = check_setting(setting)
    lam = stage2_drive(s)
    if not lam > 1e-12:
        raise ValueError(f"no stage-2 drive at topics_per_doc={s.tau!r}, keep_prob={s.p_c!r} "
                         f"(lambda_G = {lam:.3g}), so no learning rate can be derived; set lr explicitly")
    D = s.D
    return rate * math.sqrt(D) / (2.0 * lam)


# ---- the authors' tied attention -------------------------------------------------------------------
# Box for (log alpha, log beta) in the minimisation; an optimum on its edge is flagged.
_LOG_BOUND = 12.0
# Documents sampled per chunk (memory stays bounded; chunks are nested across num_docs).
_CHUNK = 1 << 14


def weighted_ratio(alpha: float, beta: float, words_per_topic: int) -> float:
    """The authors' frequency-weighted ratio ``((v - 1) / v) alpha + beta / v``."""
    v = check_positive_int("words_per_topic", words_per_topic)
    return (v - 1) / v * float(alpha) + float(beta) / v


def tied_score_matrix(alpha: float, beta: float, num_topics: int, words_per_topic: int) -> np.ndarray:
    """Tied attention weights in token space, ``Cmat[key_token, query_token]``, shape ``(D, D)``.

    ``beta`` when ``u == q`` ([MASK]-[MASK] included), ``alpha`` for distinct words of one
    topic, 1 otherwise (a word paired with [MASK] included). The scores are ``A = log(Cmat)``.
    """
    a, b = check_float("alpha", alpha), check_float("beta", beta)
    T = check_positive_int("num_topics", num_topics)
    v = check_positive_int("words_per_topic", words_per_topic)
    group = np.append(np.arange(T * v) // v, T)  # (D,): [MASK] is a topic of its own
    Cmat = np.where(group[:, None] == group[None, :], a, 1.0)
    np.fill_diagonal(Cmat, b)
    return Cmat


def _check_tied_setting(setting: object, allow_limit: bool = False) -> Setting:
    """``setting`` (a :class:`topicmech.setting.Setting`) with this estimator's extra conditions
    (``allow_limit``: ``doc_len`` may be ``math.inf``)."""
    p = check_setting(setting)
    if p.v < 2:
        raise ValueError(f"words_per_topic must be >= 2 (alpha is not identified otherwise), got {p.v!r}")
    if p.tau >= p.T:
        raise ValueError(f"topics_per_doc must be < num_topics={p.T} (documents carry no topic otherwise), "
                         f"got {p.tau!r}")
    if not isinstance(p.N, int) and not (allow_limit and math.isinf(p.N)):
        raise ValueError(f"doc_len must be a finite integer >= 2, got {p.N!r}")
    if not 0.0 < p.p_m < 1.0:
        raise ValueError(f"mask_prob must be in (0, 1) (some positions selected, some keys visible), got {p.p_m!r}")
    return p


def _position_stats(inputs: np.ndarray, selected: np.ndarray, docs: np.ndarray, W: np.ndarray, v: int,
                    attend_to_masked: bool) -> tuple[np.ndarray, ...]:
    """Per position: document (P,), Gram entries 00, 01, 02, 11, 12, 22 of ``u0 = W n``, ``u1 = W n_g``,
    ``u2 = n_q W e_q`` (P, 6), their ``y``-th entries (P, 3), normalisers ``|n|, |n_g|, n_q`` (P, 3);
    and the used positions per document (n,)."""
    D = W.shape[0]
    T = (D - 1) // v
    att = np.ones_like(selected) if attend_to_masked else ~selected  # (n, N) keys
    counts = doc_counts(inputs, att, D)  # (n, D) key-token counts
    total = counts.sum(axis=1)  # (n,)
    use = selected & (total > 0)[:, None]  # (n, N) positions with at least one key
    dq, iq = np.nonzero(use)  # (P,)
    q, y = inputs[dq, iq], docs[dq, iq]  # (P,) shown token, true word
    group_of = np.append(np.arange(D - 1) // v, T)  # (D,)
    g = group_of[q]  # (P,)
    member = np.eye(T + 1)[group_of]  # (D, T+1)
    u0_doc = counts @ W.T  # (n, D)
    u1_doc = np.einsum("du,ug,ku->dgk", counts, member, W, optimize=True)  # (n, T+1, D)
    s1_doc = counts @ member  # (n, T+1)
    u0, u1 = u0_doc[dq], u1_doc[dq, g]  # (P, D)
    nq = counts[dq, q]  # (P,)
    u2 = nq[:, None] * W[:, q].T  # (P, D)
    gram = np.stack([np.einsum("pd,pd->p", a, b) for a, b in
                     ((u0, u0), (u0, u1), (u0, u2), (u1, u1), (u1, u2), (u2, u2))], axis=1)  # (P, 6)
    rows = np.arange(dq.size)
    hit = np.stack([u0[rows, y], u1[rows, y], u2[rows, y]], axis=1)  # (P, 3)
    norm = np.stack([total[dq], s1_doc[dq, g], nq], axis=1)  # (P, 3)
    return dq, gram, hit, norm, use.sum(axis=1).astype(np.float64)


def _tied_terms(gram: np.ndarray, hit: np.ndarray, norm: np.ndarray, alpha: np.ndarray, beta: np.ndarray,
                grad: bool = False):
    """Tied-attention loss for P query cases and K pairs, (P, K); with ``grad`` also d/dlog(alpha), d/dlog(beta).

    A case is summarised by the Gram entries 00, 01, 02, 11, 12, 22 of ``u0 = W n``, ``u1 = W n_g``,
    ``u2 = n_q W e_q`` (P, 6), their expected ``y``-th entries (P, 3) and ``|n|, |n_g|, n_q`` (P, 3), where
    ``n`` are the key-token weights, ``n_g`` those of the query's group and ``n_q`` that of the query token:
    the attended mix is ``(u0 + (alpha - 1) u1 + (beta - alpha) u2) / Z``.
    """
    al, be = (np.asarray(x, dtype=np.float64)[None, :] for x in (alpha, beta))
    a, b = al - 1.0, be - al  # (1, K) coefficients of u1 and u2
    G, h, s = gram, hit, norm
    g00, g01, g02, g11, g12, g22 = (G[:, i:i + 1] for i in range(6))  # (P, 1)
    quad = g00 + 2 * a * g01 + 2 * b * g02 + a * a * g11 + 2 * a * b * g12 + b * b * g22  # (P, K)
    lin = h[:, 0:1] + a * h[:, 1:2] + b * h[:, 2:3]  # (P, K)
    Z = s[:, 0:1] + a * s[:, 1:2] + b * s[:, 2:3]  # (P, K) > 0
    loss = quad / Z**2 - 2.0 * lin / Z + 1.0
    if not grad:
        return loss
    common = -2.0 * quad / Z**3 + 2.0 * lin / Z**2  # d loss / d Z
    dl_da = 2 * (g01 + a * g11 + b * g12) / Z**2 - 2.0 * h[:, 1:2] / Z + common * s[:, 1:2]
    dl_db = 2 * (g02 + a * g12 + b * g22) / Z**2 - 2.0 * h[:, 2:3] / Z + common * s[:, 2:3]
    return loss, (dl_da - dl_db) * al, dl_db * be  # chain rule: a = alpha - 1, b = beta - alpha


class TiedAttentionObjective:
    """Monte-Carlo loss of the tied attention on one fixed sample (from :func:`tied_attention_objective`).

    Attributes: the ``setting``; ``W_star`` (``W^V``, frozen at W*, shape (D, D)); ``num_docs``
    and ``num_positions`` (documents with a used position, selected positions entering the loss).
    """

    def __init__(self, setting: Setting, W_star: np.ndarray, doc: np.ndarray, gram: np.ndarray,
                 hit: np.ndarray, norm: np.ndarray, n_sel: np.ndarray) -> None:
        self.setting, self.W_star = setting, W_star
        self._doc, self._gram, self._hit, self._norm, self._n_sel = doc, gram, hit, norm, n_sel
        self.num_docs, self.num_positions = int(n_sel.size), int(doc.size)

    def _per_position(self, alpha: np.ndarray, beta: np.ndarray, grad: bool = False):
        """Loss per position for K pairs, (P, K); with ``grad`` also its d/dlog(alpha), d/dlog(beta)."""
        return _tied_terms(self._gram, self._hit, self._norm, alpha, beta, grad)

    def _per_doc(self, x: np.ndarray) -> np.ndarray:
        """Sum over each document's positions: (P, K) -> (n, K)."""
        n, K = self.num_docs, x.shape[1]
        idx = (self._doc[:, None] * K + np.arange(K)[None, :]).ravel()
        return np.bincount(idx, weights=x.ravel(), minlength=n * K).reshape(n, K)

    def _pairs(self, alpha: object, beta: object) -> tuple[np.ndarray, np.ndarray]:
        a, b = np.broadcast_arrays(np.atleast_1d(np.asarray(alpha, dtype=np.float64)),
                                   np.atleast_1d(np.asarray(beta, dtype=np.float64)))
        for name, x, raw in (("alpha", a, alpha), ("beta", b, beta)):
            if not (np.all(np.isfinite(x)) and np.all(x > 0)):
                raise ValueError(f"{name} must be positive and finite, got {raw!r}")
        return a.ravel(), b.ravel()

    def _ratio_and_se(self, L_d: np.ndarray) -> tuple[float, float]:
        n_d = self._n_sel
        est = float(L_d.sum() / n_d.sum())
        r = (L_d - est * n_d) / n_d.mean()
        return est, float(np.sqrt(np.sum(r * r) / (self.num_docs * (self.num_docs - 1))))

    def loss(self, alpha: float | np.ndarray, beta: float | np.ndarray) -> float | np.ndarray:
        """Estimated population loss at ``(alpha, beta)`` (broadcast; a float for scalars; 1, 1 is uniform)."""
        a, b = self._pairs(alpha, beta)
        out = np.empty(a.size)
        step = max(1, (1 << 22) // max(self.num_positions, 1))
        for i in range(0, a.size, step):
            out[i:i + step] = self._per_position(a[i:i + step], b[i:i + step]).sum(axis=0)
        out /= self.num_positions
        shape = np.broadcast(np.asarray(alpha), np.asarray(beta)).shape
        return float(out[0]) if shape == () else out.reshape(shape)

    def loss_and_se(self, alpha: float, beta: float) -> tuple[float, float]:
        """Estimated loss and its standard error (ratio estimator over documents)."""
        a, b = self._pairs(alpha, beta)
        return self._ratio_and_se(self._per_doc(self._per_position(a[:1], b[:1]))[:, 0])

    def loss_difference(self, alpha: float, beta: float, alpha0: float = 1.0,
                        beta0: float = 1.0) -> tuple[float, float]:
        """``loss(alpha, beta) - loss(alpha0, beta0)`` on the same sample and its (smaller) standard error."""
        a, b = self._pairs([alpha, alpha0], [beta, beta0])
        L_d = self._per_doc(self._per_position(a, b))  # (n, 2)
        return self._ratio_and_se(L_d[:, 0] - L_d[:, 1])

    def gradient(self, log_alpha: float, log_beta: float) -> tuple[float, np.ndarray]:
        """Loss and its gradient with respect to ``(log alpha, log beta)``."""
        loss, ga, gb = self._per_position(np.array([math.exp(log_alpha)]), np.array([math.exp(log_beta)]), grad=True)
        P = self.num_positions
        return float(loss.sum() / P), np.array([ga.sum() / P, gb.sum() / P])

    def location_covariance(self, log_alpha: float, log_beta: float, h: float = 1e-4) -> np.ndarray:
        """Sandwich covariance ``H^{-1} S H^{-1}`` of a stationary point in ``(log alpha, log beta)``.

        ``S``: covariance of the mean gradient over documents; ``H``: central differences of the gradient.
        """
        x, steps = np.array([log_alpha, log_beta], dtype=np.float64), h * np.eye(2)
        H = np.column_stack([(self.gradient(*(x + e))[1] - self.gradient(*(x - e))[1]) / (2 * h) for e in steps])
        H = 0.5 * (H + H.T)
        _, ga, gb = self._per_position(np.array([math.exp(x[0])]), np.array([math.exp(x[1])]), grad=True)
        g_d = self._per_doc(np.concatenate([ga, gb], axis=1))  # (n, 2)
        n_d = self._n_sel
        g_mean = g_d.sum(axis=0) / n_d.sum()
        infl = (g_d - n_d[:, None] * g_mean[None, :]) / n_d.mean()  # (n, 2)
        S = infl.T @ infl / (self.num_docs * (self.num_docs - 1))
        Hinv = np.linalg.inv(H)
        return Hinv @ S @ Hinv

    def head(self, max_positions: int) -> TiedAttentionObjective:
        """The objective on the first documents of the sample, up to ``max_positions`` positions."""
        m = check_positive_int("max_positions", max_positions)
        if m >= self.num_positions:
            return self
        n = max(2, int(self._doc[m - 1]) + 1)
        keep = self._doc < n
        return TiedAttentionObjective(self.setting, self.W_star, self._doc[keep], self._gram[keep], self._hit[keep],
                                      self._norm[keep], self._n_sel[:n])


def tied_attention_objective(setting: Setting, *, seed: int = 0,
                             num_docs: int = 100_000) -> TiedAttentionObjective | TiedAttentionLimitObjective:
    """Sample documents and masks once (chunks of 16,384, nested across ``num_docs``) and return the loss on them.

    ``W^V`` is :func:`optimal_value_matrix` of ``setting``. With ``doc_len=math.inf`` the loss is
    the exact long-document limit instead (:class:`TiedAttentionLimitObjective`; ``seed`` and
    ``num_docs`` are then not used).

    Parameters
    ----------
    setting : Setting
        ``v >= 2``, ``1 <= tau < T``, ``N`` finite or ``math.inf``, ``0 < p_m < 1``; both key conventions.
    seed : int
        Sample seed.
    num_docs : int
        Sample size (documents).
    """
    p = _check_tied_setting(setting, allow_limit=True)
    if math.isinf(p.N):
        return TiedAttentionLimitObjective(p)
    seed, n_docs = check_seed(seed), check_positive_int("num_docs", num_docs)
    W_star = optimal_value_matrix(p)
    parts: list[tuple[np.ndarray, ...]] = []
    offset = 0
    for docs, inputs, selected in sample_chunks(p, n_docs, seed, _CHUNK):
        dq, gram, hit, norm, n_sel = _position_stats(inputs, selected, docs, W_star, p.v, p.attend_to_masked)
        keep = n_sel > 0  # documents with at least one used position
        parts.append(((np.cumsum(keep) - 1 + offset)[dq], gram, hit, norm, n_sel[keep]))
        offset += int(keep.sum())
    doc, gram, hit, norm, n_sel = (np.concatenate([part[i] for part in parts]) for i in range(5))
    if doc.size == 0 or n_sel.size < 2:
        raise ValueError("the sample has fewer than two documents with a selected position; increase num_docs")
    return TiedAttentionObjective(p, W_star, doc, gram, hit, norm, n_sel)


@dataclass(frozen=True)
class TiedAttentionOptimum:
    """The optimum of the tied-score family on one Monte-Carlo sample.

    Parameters
    ----------
    alpha : float
        Optimal ``c_2 / c_3`` (same topic).
    beta : float
        Optimal ``c_1 / c_3`` (same token).
    weighted_ratio : float
        ``((v - 1) / v) alpha + beta / v``, the quantity the authors bound.
    loss : float
        Estimated loss at the optimum.
    uniform_loss : float
        Estimated loss at ``alpha = beta = 1`` (same sample).
    uniform_loss_exact : float
        The exact stage-1 loss that ``uniform_loss`` estimates.
    gain : float
        ``uniform_loss - loss``.
    loss_se : float
        Standard error of the loss level.
    gain_se : float
        Standard error of the gain.
    log_alpha_se : float
        Standard error (sandwich) of ``log alpha``.
    log_beta_se : float
        Standard error (sandwich) of ``log beta``.
    weighted_ratio_se : float
        Standard error (sandwich) of ``weighted_ratio``.
    at_bound : bool
        The optimum lies on the edge ``|log alpha|, |log beta| = 12`` of the search box.
    num_docs : int
        Documents with a used position.
    num_positions : int
        Selected positions.
    num_topics : int
        ``T`` of the setting (its fields are kept flat, for JSON; :attr:`setting` rebuilds it).
    words_per_topic : int
        ``v``.
    topics_per_doc : int
        ``tau``.
    doc_len : int
        ``N``.
    mask_prob : float
        ``p_m``.
    keep_prob : float
        ``p_c``.
    random_prob : float
        ``p_r``.
    attend_to_masked : bool
        The key convention.
    seed : int
        The sample seed.
    """

    alpha: float
    beta: float
    weighted_ratio: float
    loss: float
    loss_se: float
    uniform_loss: float
    uniform_loss_exact: float
    gain: float
    gain_se: float
    log_alpha_se: float
    log_beta_se: float
    weighted_ratio_se: float
    at_bound: bool
    num_docs: int
    num_positions: int
    num_topics: int
    words_per_topic: int
    topics_per_doc: int
    doc_len: int
    mask_prob: float
    keep_prob: float
    random_prob: float
    attend_to_masked: bool
    seed: int

    @property
    def setting(self) -> Setting:
        """The :class:`topicmech.setting.Setting` of the run."""
        return Setting(self.num_topics, self.words_per_topic, self.topics_per_doc, self.doc_len,
                       masking=Masking(self.mask_prob, self.keep_prob, self.random_prob),
                       attend_to_masked=self.attend_to_masked)

    def to_dict(self) -> dict[str, object]:
        """Plain ``dict`` (JSON-serialisable)."""
        return asdict(self)


def tied_attention_optimum(setting: Setting, *, seed: int = 0, num_docs: int = 100_000,
                           value_matrix: str = "limit",
                           mask_query: str = "tied") -> TiedAttentionOptimum | TiedAttentionLimit:
    """Optimal tied attention scores ``(alpha, beta)`` with ``W^V`` at the stage-1 optimum.

    Finite ``doc_len``: minimises :func:`tied_attention_objective` (same arguments) over
    ``(log alpha, log beta)``: a coarse grid (-3 to 6, first 20,000 positions) picks the start,
    then L-BFGS-B, exact gradient; a :class:`TiedAttentionOptimum` with sampling errors.

    ``doc_len=math.inf``: the N -> inf optimum, a :class:`TiedAttentionLimit`, from the exact
    limit loss (:class:`TiedAttentionLimitObjective`, a finite expectation over the query types
    for one topic set), minimised to a gradient below ``1e-10``; ``seed`` and ``num_docs`` are
    not used. With hidden keys that loss depends on ``(alpha, beta)`` only through the weighted
    ratio, whose optimum is ``1 + T p_c / p_r`` for ``tau >= 2`` (``identified`` is False, and
    ``alpha = beta``; with ``tau = 1`` it is flat). ``value_matrix`` and ``mask_query`` vary two
    choices of the limit (see :class:`TiedAttentionLimitObjective`); at finite ``doc_len`` they
    must keep their defaults.

    Examples
    --------
    >>> import math
    >>> from topicmech import Setting
    >>> lim = tied_attention_optimum(Setting(8, 3, 2, math.inf, attend_to_masked=False))
    >>> round(lim.weighted_ratio, 6), lim.identified
    (9.0, False)
    """
    p = _check_tied_setting(setting, allow_limit=True)
    if math.isinf(p.N):
        return _tied_limit_optimum(p, value_matrix=value_matrix, mask_query=mask_query)
    if (value_matrix, mask_query) != ("limit", "tied"):
        raise ValueError(f"value_matrix and mask_query can be changed only at doc_len=math.inf, got "
                         f"{value_matrix!r}, {mask_query!r} at doc_len={p.N!r}")
    seed = check_seed(seed)
    obj = tied_attention_objective(p, seed=seed, num_docs=num_docs)
    from scipy import optimize  # here, not at import: scipy.optimize adds ~40 MiB to every process

    grid = np.linspace(-3.0, 6.0, 19)
    la, lb = np.meshgrid(grid, grid, indexing="ij")
    coarse = obj.head(20_000).loss(np.exp(la), np.exp(lb))  # (19, 19), on a sub-sample: only a start
    i, j = np.unravel_index(int(np.argmin(coarse)), coarse.shape)
    res = optimize.minimize(lambda x: obj.gradient(x[0], x[1]), np.array([grid[i], grid[j]]), jac=True,
                            method="L-BFGS-B", bounds=[(-_LOG_BOUND, _LOG_BOUND)] * 2,
                            options={"ftol": 1e-15, "gtol": 1e-11, "maxiter": 500})
    x = np.asarray(res.x, dtype=np.float64)
    alpha, beta = math.exp(x[0]), math.exp(x[1])
    loss, loss_se = obj.loss_and_se(alpha, beta)
    uniform, _ = obj.loss_and_se(1.0, 1.0)
    diff, diff_se = obj.loss_difference(alpha, beta)
    at_bound = bool(np.any(np.abs(x) > _LOG_BOUND - 1e-6))
    la_se = lb_se = wr_se = math.nan
    if not at_bound:
        cov = obj.location_covariance(x[0], x[1])
        la_se, lb_se = (float(math.sqrt(max(cov[k, k], 0.0))) for k in range(2))
        jac = np.array([(p.v - 1) / p.v * alpha, beta / p.v])
        wr_se = float(math.sqrt(max(jac @ cov @ jac, 0.0)))
    exact = population_loss(obj.W_star, *moments(p))
    return TiedAttentionOptimum(
        alpha=alpha, beta=beta, weighted_ratio=weighted_ratio(alpha, beta, p.v), loss=loss, loss_se=loss_se,
        uniform_loss=uniform, uniform_loss_exact=float(exact), gain=-diff, gain_se=diff_se,
        log_alpha_se=la_se, log_beta_se=lb_se, weighted_ratio_se=wr_se, at_bound=at_bound,
        num_docs=obj.num_docs, num_positions=obj.num_positions, num_topics=p.T, words_per_topic=p.v,
        topics_per_doc=p.tau, doc_len=int(p.N), mask_prob=p.p_m, keep_prob=p.p_c, random_prob=p.p_r,
        attend_to_masked=p.attend_to_masked, seed=seed)



# ---- the long-document limit of the tied attention -------------------------------------------------
def stage1_limit_blocks(setting: Setting) -> ValueBlocks:
    """Orbit values of ``lim_{N -> inf} W*(N)``, the stage-1 optimum of long documents (closed form).

    Every attended column of ``W*(N)`` sums to 1 over the words at every N, so the limit has
    ``w_diff = (1 - lambda_t) / V``, ``w_same = w_diff + (lambda_t - lambda_w) / v`` and
    ``w_diag = w_same + lambda_w``, with, in the theory's convention (visible keys),
    ``lambda_t = 1 / (1 - (1 - p_c) p_m)``, ``lambda_w = p_c / (1 - p_m p_[M])`` and the [MASK]
    column ``1 / V``; in the released code's convention (hidden keys) ``lambda_t = 1``,
    ``lambda_w = 0`` and the [MASK] column 0 (``W* -> B / v``). This is not the minimum-norm
    optimum at ``doc_len=math.inf`` (:func:`optimal_value_matrix`), which has ``lambda_w = 0`` in
    both conventions: at N = inf the same-word boost does not change the stage-1 loss, but it
    changes the tied-attention loss. Reads ``T, v`` and the masking; needs ``mask_prob < 1``.
    """
    p = check_setting(setting)
    if not p.p_m < 1.0:
        raise ValueError(f"mask_prob must be < 1 for the long-document limit, got {p.p_m!r}")
    if p.attend_to_masked:
        lt, lw, mask_col = 1.0 / (1.0 - (1.0 - p.p_c) * p.p_m), p.p_c / (1.0 - p.p_m * p.p_M), 1.0 / p.V
    else:
        lt, lw, mask_col = 1.0, 0.0, 0.0
    w_diff = (1.0 - lt) / p.V
    w_same = w_diff + (lt - lw) / p.v
    return ValueBlocks(diag=w_same + lw, same_topic=w_same if p.v > 1 else math.nan,
                       diff_topic=w_diff if p.T > 1 else math.nan, mask_col=mask_col,
                       topic_eigenvalue=lt if p.T > 1 else math.nan)


def _limit_cases(p: Setting, W: np.ndarray, mask_query_uniform: bool = False) -> tuple[np.ndarray, ...]:
    """Weights (C,), Gram entries (C, 6), expected hits (C, 3) and normalisers (C, 3) of the query
    cases of the N -> inf limit, for the topic set S = the first tau topics (all sets are alike).
    ``mask_query_uniform``: a [MASK] query attends uniformly (its own group and token get no weight
    of their own, so its mix does not depend on alpha, beta)."""
    T, v, tau, V, D = p.T, p.v, p.tau, p.V, p.D
    group = np.append(np.arange(V) // v, T)  # (D,): [MASK] is a group of its own
    in_S = np.zeros(D)
    in_S[:tau * v] = 1.0
    if p.attend_to_masked:  # every position is a key: true word, random word or [MASK]
        f = (1.0 - p.p_m + p.p_m * p.p_c) * in_S / (tau * v) + p.p_m * p.p_r / V * np.append(np.ones(V), 0.0)
        f[V] = p.p_m * p.p_M
    else:  # only unselected positions: their true words
        f = in_S / (tau * v)
    y_S = in_S / (tau * v)  # the law of the true word given S
    cases = [(p.p_c, 0, np.eye(D)[0]),  # kept: the query shows its own word (word 0, in S)
             (p.p_M, V, y_S),  # [MASK]
             (p.p_r * tau / p.T, 0, y_S),  # a random word that lies in S
             (p.p_r * (1.0 - tau / p.T), tau * v, y_S)]  # a random word outside S
    weights, gram, hit, norm = [], [], [], []
    for w, q, y in cases:
        if w <= 0.0:
            continue
        f_g = f * (group == group[q])
        f_q = f[q]
        if mask_query_uniform and q == V:
            f_g, f_q = np.zeros_like(f), 0.0
        u = np.stack([W @ f, W @ f_g, f_q * W[:, q]])  # (3, D)
        gram.append([u[i] @ u[j] for i, j in ((0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2))])
        hit.append(u @ y)
        norm.append([f.sum(), f_g.sum(), f_q])
        weights.append(w)
    return tuple(np.asarray(x, dtype=np.float64) for x in (weights, gram, hit, norm))


class TiedAttentionLimitObjective:
    """The exact N -> inf loss of the tied attention (from :func:`tied_attention_objective` with
    ``doc_len=math.inf``).

    As N -> inf the key counts of a document concentrate on their expected frequencies given its
    topic set S, so the attended mix is deterministic given S and the query token; the loss is a
    finite expectation over the query types (kept word, ``[MASK]``, random word in or outside S)
    for one S, all sets being alike under relabelling. Attributes: ``setting``, ``W_star`` (shape
    (D, D)) and ``identified`` (False with hidden keys, where the loss depends on ``alpha, beta``
    only through the weighted ratio).

    Two choices of ours can be varied. ``value_matrix``: ``"limit"`` (default) takes ``W^V`` as
    ``lim W*(N)`` (:func:`stage1_limit_blocks`, with the same-word boost of the theory's
    convention); ``"min_norm"`` takes the minimum-norm stage-1 optimum at ``doc_len=math.inf``
    (:func:`optimal_value_matrix`, the one weight decay selects; no same-word boost).
    ``mask_query``: ``"tied"`` (default) reads a [MASK] query and a [MASK] key as the same token
    (weight ``beta``); ``"uniform"`` lets a [MASK] query attend uniformly whatever ``alpha, beta``.
    """

    def __init__(self, setting: Setting, *, value_matrix: str = "limit", mask_query: str = "tied") -> None:
        if value_matrix not in ("limit", "min_norm"):
            raise ValueError(f"value_matrix must be 'limit' or 'min_norm', got {value_matrix!r}")
        if mask_query not in ("tied", "uniform"):
            raise ValueError(f"mask_query must be 'tied' or 'uniform', got {mask_query!r}")
        self.setting = setting
        self.value_matrix, self.mask_query = value_matrix, mask_query
        if value_matrix == "limit":
            self.W_star = block_matrix(stage1_limit_blocks(setting), setting.T, setting.v)
        else:
            self.W_star = np.asarray(optimal_value_matrix(setting), dtype=np.float64)
        self._w, self._gram, self._hit, self._norm = _limit_cases(setting, self.W_star,
                                                                  mask_query_uniform=mask_query == "uniform")
        self.identified = bool(setting.attend_to_masked)

    def loss(self, alpha: float | np.ndarray, beta: float | np.ndarray) -> float | np.ndarray:
        """The limit loss at ``(alpha, beta)`` (broadcast; a float for scalars; 1, 1 is uniform)."""
        a, b = np.broadcast_arrays(np.asarray(alpha, dtype=np.float64), np.asarray(beta, dtype=np.float64))
        if not (np.all(np.isfinite(a)) and np.all(a > 0) and np.all(np.isfinite(b)) and np.all(b > 0)):
            raise ValueError(f"alpha and beta must be positive and finite, got {alpha!r}, {beta!r}")
        out = self._w @ _tied_terms(self._gram, self._hit, self._norm, a.ravel(), b.ravel())
        return float(out[0]) if a.shape == () else out.reshape(a.shape)

    def gradient(self, log_alpha: float, log_beta: float) -> tuple[float, np.ndarray]:
        """Loss and its gradient with respect to ``(log alpha, log beta)``."""
        loss, ga, gb = _tied_terms(self._gram, self._hit, self._norm, np.array([math.exp(log_alpha)]),
                                   np.array([math.exp(log_beta)]), grad=True)
        return float(self._w @ loss[:, 0]), np.array([self._w @ ga[:, 0], self._w @ gb[:, 0]])


@dataclass(frozen=True)
class TiedAttentionLimit:
    """The N -> inf optimum of the tied-score family (from :func:`tied_attention_optimum` with
    ``doc_len=math.inf``).

    Parameters
    ----------
    alpha : float
        Optimal ``c_2 / c_3`` (same topic); with hidden keys (``identified`` False) the point
        ``alpha = beta`` of the optimal line.
    beta : float
        Optimal ``c_1 / c_3`` (same token); ``beta = alpha`` with hidden keys.
    weighted_ratio : float
        ``((v - 1) / v) alpha + beta / v``.
    identified : bool
        False when the limit loss depends on ``(alpha, beta)`` only through the weighted ratio
        (hidden keys).
    loss : float
        The limit loss at the optimum.
    uniform_loss : float
        The limit loss at ``alpha = beta = 1``.
    gain : float
        ``uniform_loss - loss``.
    gradient_norm : float
        Norm of the gradient in ``(log alpha, log beta)`` at the optimum (the numerical error).
    at_bound : bool
        The optimum lies on the edge ``|log alpha|, |log beta| = 12`` of the search box.
    num_topics : int
        ``T`` of the setting (its fields are kept flat, for JSON; ``doc_len`` is
        ``math.inf``; :attr:`setting` rebuilds it).
    words_per_topic : int
        ``v``.
    topics_per_doc : int
        ``tau``.
    mask_prob : float
        ``p_m``.
    keep_prob : float
        ``p_c``.
    random_prob : float
        ``p_r``.
    attend_to_masked : bool
        The key convention.
    """

    alpha: float
    beta: float
    weighted_ratio: float
    identified: bool
    loss: float
    uniform_loss: float
    gain: float
    gradient_norm: float
    at_bound: bool
    num_topics: int
    words_per_topic: int
    topics_per_doc: int
    mask_prob: float
    keep_prob: float
    random_prob: float
    attend_to_masked: bool
    value_matrix: str = "limit"
    mask_query: str = "tied"

    @property
    def doc_len(self) -> float:
        return math.inf

    @property
    def setting(self) -> Setting:
        """The :class:`topicmech.setting.Setting` (``doc_len=math.inf``)."""
        return Setting(self.num_topics, self.words_per_topic, self.topics_per_doc, math.inf,
                       masking=Masking(self.mask_prob, self.keep_prob, self.random_prob),
                       attend_to_masked=self.attend_to_masked)

    def to_dict(self) -> dict[str, object]:
        """Plain ``dict`` (JSON-serialisable; ``doc_len`` is left out)."""
        return asdict(self)


def _tied_limit_optimum(p: Setting, value_matrix: str = "limit", mask_query: str = "tied") -> TiedAttentionLimit:
    from scipy import optimize  # here, not at import: scipy.optimize adds ~40 MiB to every process

    obj = TiedAttentionLimitObjective(p, value_matrix=value_matrix, mask_query=mask_query)
    grid = np.linspace(-3.0, 9.0, 25)
    if obj.identified:
        la, lb = np.meshgrid(grid, grid, indexing="ij")
        coarse = obj.loss(np.exp(la), np.exp(lb))
        i, j = np.unravel_index(int(np.argmin(coarse)), coarse.shape)
        start = np.array([grid[i], grid[j]])

        def fun(x: np.ndarray) -> tuple[float, np.ndarray]:
            return obj.gradient(x[0], x[1])
    else:  # the loss depends on the weighted ratio only: minimise along alpha = beta
        start = np.array([grid[int(np.argmin(obj.loss(np.exp(grid), np.exp(grid))))]])

        def fun(x: np.ndarray) -> tuple[float, np.ndarray]:
            loss, g = obj.gradient(x[0], x[0])
            return loss, np.array([g.sum()])
    res = optimize.minimize(fun, start, jac=True, method="L-BFGS-B", bounds=[(-_LOG_BOUND, _LOG_BOUND)] * start.size,
                            options={"ftol": 1e-16, "gtol": 1e-13, "maxiter": 1000})
    x = np.asarray(res.x, dtype=np.float64)
    for _ in range(4):  # Newton steps on the exact gradient (Hessian by central differences) polish the location
        g = fun(x)[1]
        steps = 1e-5 * np.eye(x.size)
        H = np.column_stack([(fun(x + e)[1] - fun(x - e)[1]) / 2e-5 for e in steps])
        if np.any(np.abs(x) > _LOG_BOUND - 1e-3) or not np.all(np.linalg.eigvalsh(0.5 * (H + H.T)) > 0):
            break
        x_new = np.clip(x - np.linalg.solve(H, g), -_LOG_BOUND, _LOG_BOUND)
        if not fun(x_new)[0] <= fun(x)[0] + 1e-15:
            break
        x = x_new
    la, lb = (x[0], x[1]) if obj.identified else (x[0], x[0])
    alpha, beta = math.exp(la), math.exp(lb)
    loss, grad = obj.gradient(la, lb)
    at_bound = bool(np.any(np.abs(x) > _LOG_BOUND - 1e-6))
    uniform = obj.loss(1.0, 1.0)
    return TiedAttentionLimit(
        alpha=alpha, beta=beta, weighted_ratio=weighted_ratio(alpha, beta, p.v), identified=obj.identified,
        loss=loss, uniform_loss=uniform, gain=uniform - loss, gradient_norm=float(np.linalg.norm(grad)),
        at_bound=at_bound, num_topics=p.T, words_per_topic=p.v, topics_per_doc=p.tau, mask_prob=p.p_m,
        keep_prob=p.p_c, random_prob=p.p_r, attend_to_masked=p.attend_to_masked, value_matrix=value_matrix,
        mask_query=mask_query)
