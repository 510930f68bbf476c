"""The authors' stage-2 result: the optimal attention within the tied-score family.

Book: chapter 5 (*Stage 2: attention learns topic structure*), section on the authors'
stage-2 result. As the authors state it, with one-hot embeddings, an identity head and
``W^V`` frozen at the stage-1 optimum, restrict the attention to scores that depend only on
the relation between the query token and the key token (both read on the *masked*
document): ``c_1`` for the same token, ``c_2`` for a different word of the same topic, and
``c_3`` otherwise. The attention a query pays to its keys is ``c_k`` normalised over the
keys (column-wise softmax of the scores ``log c_k``). Only the ratios matter:
``alpha = c_2 / c_3`` (same topic) and ``beta = c_1 / c_3`` (same token). The authors'
theorem bounds the optimal frequency-weighted ratio
``((v - 1) / v) alpha + beta / v`` between ``lambda_1 tau`` and ``lambda_2 T``.

This module computes that optimum numerically at finite document length.

**[MASK] in the relations (our choice).** The authors do not say how ``[MASK]`` enters the
three relations. We treat ``[MASK]`` as a topic of its own with a single token: a ``[MASK]``
query and a ``[MASK]`` key are the *same token* (weight ``c_1``), and ``[MASK]`` paired with
any word is a *different topic* (weight ``c_3``). This is what one gets by writing the tied
scores as a token-space matrix (:func:`tied_score_matrix`), and it follows the literal
reading "``w_i = w_j`` on the masked document". Random replacements are ordinary words:
relations are read on the token shown, not on the true word. With hidden keys
(``attend_to_masked=False``, the authors' released code) selected positions are not keys at
all, so ``[MASK]`` never appears as a key; with visible keys (``attend_to_masked=True``)
every position is a key, the query itself included (it is its own "same token" key).

**The objective and its estimator.** For a selected position with shown token ``q`` and
true word ``y``, and key-token counts ``n`` (a ``D``-vector), the attention-weighted input is
``xbar = (n * c_q) / (n . c_q)`` with ``c_q[u]`` the tied weight of key token ``u``,
and the loss is ``||W xbar - e_y||^2`` (squared loss, as in stage 1). Writing
``n * c_q = n + (alpha - 1) n_g + (beta - alpha) n_q e_q`` (``n_g``: ``n`` restricted to
the group of ``q``, its topic or ``{[MASK]}``), every position reduces to twelve numbers
that do not depend on ``(alpha, beta)``: the Gram matrix of the three vectors
``W n, W n_g, n_q W e_q``, their ``y``-th entries, and the three normalisers. One
evaluation of the loss is then ``O(#positions)``, with an exact analytic gradient.

The population loss is an expectation over documents and masks. We estimate it with
common random numbers: one fixed sample of ``num_docs`` documents and masks
(:class:`TiedAttentionObjective`), so the estimate is a deterministic, smooth function of
``(log alpha, log beta)``. The estimate is a ratio (total loss over the selected positions
of all documents, divided by their number, as in the stage-1 moments); its standard error
comes from the per-document terms (delta method). The error of the *location* of the
optimum is estimated by the sandwich formula ``H^{-1} S H^{-1}``, with ``S`` the covariance
of the per-document gradients and ``H`` the Hessian of the estimate (both in
``(log alpha, log beta)``); the benchmark ``benchmarks/tied_attention_grid.py`` checks it
against the spread over independent samples.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy import optimize

from . import theory
from .data import SimplifiedTopicModel, bert_mask
from .utils import check_positive_int, check_seed, spawn_seeds

__all__ = [
    "TiedAttentionObjective",
    "TiedAttentionOptimum",
    "tied_attention_objective",
    "tied_attention_optimum",
    "tied_score_matrix",
    "weighted_ratio",
]

# Box for (log alpha, log beta) in the minimisation; an optimum on its edge is flagged.
_LOG_BOUND = 12.0
# Documents sampled per chunk (memory stays bounded; chunks are nested across num_docs).
_CHUNK = 1 << 14


def weighted_ratio(alpha: float, beta: float, words_per_topic: int) -> float:
    """The authors' frequency-weighted ratio ``((v - 1) / v) alpha + beta / v``.

    It is the average same-topic weight over the different-topic weight when the ``v``
    words of the query's topic are equally frequent among the keys.
    """
    v = check_positive_int("words_per_topic", words_per_topic)
    return (v - 1) / v * float(alpha) + float(beta) / v


def tied_score_matrix(alpha: float, beta: float, num_topics: int, words_per_topic: int) -> np.ndarray:
    """Tied attention weights in token space, ``Cmat[key_token, query_token]``, shape ``(D, D)``.

    ``Cmat[u, q]`` is ``beta`` when ``u == q`` (``[MASK]``-``[MASK]`` included), ``alpha``
    when ``u != q`` are words of the same topic, and 1 otherwise (any word paired with
    ``[MASK]``). The score matrix of the model is ``A = log(Cmat)`` (up to a constant per
    column, which the softmax ignores): a query pays key ``k`` the weight
    ``Cmat[x_k, q] / sum_k' Cmat[x_k', q]``.

    Parameters
    ----------
    alpha, beta : float
        Positive ratios ``c_2 / c_3`` and ``c_1 / c_3``.
    num_topics, words_per_topic : int

    Returns
    -------
    Cmat : ndarray, shape (D, D)
    """
    a, b = _check_ratio("alpha", alpha), _check_ratio("beta", beta)
    T = check_positive_int("num_topics", num_topics)
    v = check_positive_int("words_per_topic", words_per_topic)
    V = T * v
    group = np.append(np.arange(V) // v, T)  # (D,): [MASK] is a topic of its own
    Cmat = np.where(group[:, None] == group[None, :], a, 1.0)
    np.fill_diagonal(Cmat, b)
    return Cmat


def _check_ratio(name: str, value: object) -> float:
    if isinstance(value, (bool, str, bytes)):
        raise ValueError(f"{name} must be a positive finite float, got {value!r}")
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a positive finite float, got {value!r}") from None
    if not (math.isfinite(x) and x > 0):
        raise ValueError(f"{name} must be a positive finite float, got {value!r}")
    return x


def _check_setting(
    num_topics: object,
    words_per_topic: object,
    topics_per_doc: object,
    doc_len: object,
    mask_prob: object,
    keep_prob: object,
    random_prob: object,
    attend_to_masked: object,
) -> tuple[int, int, int, int, float, float, float, bool]:
    # the checks every closed form shares, then the ones this estimator adds
    P = theory._params(num_topics, words_per_topic, topics_per_doc, doc_len,
                       mask_prob, keep_prob, random_prob, attend_to_masked)
    T, v, tau, N, p_m, p_c, p_r, si = P.T, P.v, P.tau, P.N, P.p_m, P.p_c, P.p_r, P.si
    if v < 2:
        raise ValueError(f"words_per_topic must be >= 2 (alpha is not identified otherwise), got {words_per_topic!r}")
    if tau >= T:
        raise ValueError(f"topics_per_doc must be < num_topics={T} (documents carry no topic otherwise), "
                         f"got {topics_per_doc!r}")
    if not isinstance(N, int):
        raise ValueError(f"doc_len must be a finite integer >= 2, got {doc_len!r}")
    if not 0.0 < p_m < 1.0:
        raise ValueError(f"mask_prob must be in (0, 1) (some positions selected, some keys visible), got {mask_prob!r}")
    return T, v, tau, N, p_m, p_c, p_r, si


def _position_stats(
    inputs: np.ndarray, selected: np.ndarray, docs: np.ndarray, W: np.ndarray, v: int, attend_to_masked: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per-position sufficient statistics of one chunk of documents.

    Returns ``doc`` (P,) chunk-local document index, ``gram`` (P, 6) entries
    (00, 01, 02, 11, 12, 22) of the Gram matrix of ``u0 = W n``, ``u1 = W n_g``,
    ``u2 = n_q W e_q``; ``hit`` (P, 3) their ``y``-th entries; ``norm`` (P, 3) the
    normalisers ``(|n|, |n_g|, n_q)``; ``n_sel`` (n,) used positions per document.
    """
    n, _N = inputs.shape
    D = W.shape[0]
    V = D - 1
    T = V // v
    att = np.ones_like(selected) if attend_to_masked else ~selected  # (n, N) keys
    counts = np.bincount((np.arange(n)[:, None] * D + inputs).ravel(), weights=att.ravel().astype(np.float64),
                         minlength=n * D).reshape(n, D)  # (n, D) key-token counts
    total = counts.sum(axis=1)  # (n,)
    use = selected & (total > 0)[:, None]  # (n, N) positions with at least one key
    dq, iq = np.nonzero(use)  # (P,)
    q = inputs[dq, iq]  # (P,) shown token of the query
    y = docs[dq, iq]  # (P,) true word
    group_of = np.append(np.arange(V) // v, T)  # (D,)
    g = group_of[q]  # (P,)
    member = np.zeros((D, T + 1))
    member[np.arange(D), group_of] = 1.0  # (D, T+1)
    u0_doc = counts @ W.T  # (n, D)
    # (n, T+1, D): sum_{u in group} n_u W[:, u]
    u1_doc = np.einsum("du,ug,ku->dgk", counts, member, W, optimize=True)
    s1_doc = counts @ member  # (n, T+1)
    u0 = u0_doc[dq]  # (P, D)
    u1 = u1_doc[dq, g]  # (P, D)
    nq = counts[dq, q]  # (P,)
    u2 = nq[:, None] * W[:, q].T  # (P, D)
    gram = np.stack([np.einsum("pd,pd->p", a, b) for a, b in
                     ((u0, u0), (u0, u1), (u0, u2), (u1, u1), (u1, u2), (u2, u2))], axis=1)  # (P, 6)
    rows = np.arange(dq.size)
    hit = np.stack([u0[rows, y], u1[rows, y], u2[rows, y]], axis=1)  # (P, 3)
    norm = np.stack([total[dq], s1_doc[dq, g], nq], axis=1)  # (P, 3)
    return dq, gram, hit, norm, use.sum(axis=1).astype(np.float64)


class TiedAttentionObjective:
    """Monte-Carlo population loss of the tied attention on one fixed sample (common random numbers).

    Build it with :func:`tied_attention_objective`. All methods are deterministic functions
    of ``(alpha, beta)`` for a given sample.

    Attributes
    ----------
    num_topics, words_per_topic, topics_per_doc, doc_len : int
    attend_to_masked : bool
    num_docs : int
        Documents with at least one used position (hidden keys: at least one visible key).
    num_positions : int
        Selected positions entering the loss.
    value_matrix : ndarray, shape (D, D)
        The frozen ``W^V`` (stage-1 optimum of the same convention).
    """

    def __init__(self, *, num_topics: int, words_per_topic: int, topics_per_doc: int, doc_len: int,
                 attend_to_masked: bool, value_matrix: np.ndarray, doc: np.ndarray, gram: np.ndarray,
                 hit: np.ndarray, norm: np.ndarray, n_sel: np.ndarray) -> None:
        self.num_topics = num_topics
        self.words_per_topic = words_per_topic
        self.topics_per_doc = topics_per_doc
        self.doc_len = doc_len
        self.attend_to_masked = attend_to_masked
        self.value_matrix = value_matrix
        self._doc, self._gram, self._hit, self._norm, self._n_sel = doc, gram, hit, norm, n_sel
        self.num_docs = int(n_sel.size)
        self.num_positions = int(doc.size)

    # ---- core evaluation ---------------------------------------------------------
    def _per_position(self, alpha: np.ndarray, beta: np.ndarray, grad: bool = False):
        """Loss per position for K pairs: arrays (P, K); with ``grad`` also d/dlog(alpha), d/dlog(beta)."""
        a = np.asarray(alpha, dtype=np.float64)[None, :] - 1.0  # (1, K) coefficient of u1
        b = np.asarray(beta, dtype=np.float64)[None, :] - np.asarray(alpha, dtype=np.float64)[None, :]  # of u2
        G, h, s = self._gram, self._hit, self._norm
        g00, g01, g02, g11, g12, g22 = (G[:, i:i + 1] for i in range(6))  # (P, 1)
        quad = g00 + 2 * a * g01 + 2 * b * g02 + a * a * g11 + 2 * a * b * g12 + b * b * g22  # (P, K)
        lin = h[:, 0:1] + a * h[:, 1:2] + b * h[:, 2:3]  # (P, K)
        Z = s[:, 0:1] + a * s[:, 1:2] + b * s[:, 2:3]  # (P, K) > 0
        loss = quad / Z**2 - 2.0 * lin / Z + 1.0
        if not grad:
            return loss
        # derivatives with respect to the coefficients a (of u1) and b (of u2)
        dq_da, dq_db = 2 * (g01 + a * g11 + b * g12), 2 * (g02 + a * g12 + b * g22)
        common = -2.0 * quad / Z**3 + 2.0 * lin / Z**2  # d loss / d Z
        dl_da = dq_da / Z**2 - 2.0 * h[:, 1:2] / Z + common * s[:, 1:2]
        dl_db = dq_db / Z**2 - 2.0 * h[:, 2:3] / Z + common * s[:, 2:3]
        al = np.asarray(alpha, dtype=np.float64)[None, :]
        be = np.asarray(beta, dtype=np.float64)[None, :]
        # a = alpha - 1, b = beta - alpha; chain rule to log alpha, log beta
        return loss, (dl_da - dl_db) * al, dl_db * be

    def _per_doc(self, x: np.ndarray) -> np.ndarray:
        """Sum over each document's positions: (P, K) -> (n, K)."""
        n, K = self.num_docs, x.shape[1]
        idx = (self._doc[:, None] * K + np.arange(K)[None, :]).ravel()
        return np.bincount(idx, weights=x.ravel(), minlength=n * K).reshape(n, K)

    def _pairs(self, alpha: object, beta: object) -> tuple[np.ndarray, np.ndarray]:
        a = np.atleast_1d(np.asarray(alpha, dtype=np.float64))
        b = np.atleast_1d(np.asarray(beta, dtype=np.float64))
        a, b = np.broadcast_arrays(a, b)
        if not (np.all(np.isfinite(a)) and np.all(a > 0)):
            raise ValueError(f"alpha must be positive and finite, got {alpha!r}")
        if not (np.all(np.isfinite(b)) and np.all(b > 0)):
            raise ValueError(f"beta must be positive and finite, got {beta!r}")
        return a.ravel(), b.ravel()

    # ---- public API --------------------------------------------------------------
    def loss(self, alpha: float | np.ndarray, beta: float | np.ndarray) -> float | np.ndarray:
        """Estimated population loss at ``(alpha, beta)`` (broadcast; a float for scalars).

        ``alpha = beta = 1`` is uniform attention.
        """
        a, b = self._pairs(alpha, beta)
        out = np.empty(a.size)
        step = max(1, (1 << 22) // max(self.num_positions, 1))
        for i in range(0, a.size, step):
            out[i:i + step] = self._per_position(a[i:i + step], b[i:i + step]).sum(axis=0)
        out /= self.num_positions
        shape = np.broadcast(np.asarray(alpha), np.asarray(beta)).shape
        return float(out[0]) if shape == () else out.reshape(shape)

    def loss_and_se(self, alpha: float, beta: float) -> tuple[float, float]:
        """Estimated loss and its standard error (ratio estimator, per-document terms)."""
        a, b = self._pairs(alpha, beta)
        L_d = self._per_doc(self._per_position(a[:1], b[:1]))[:, 0]  # (n,)
        return self._ratio_and_se(L_d)

    def loss_difference(
        self, alpha: float, beta: float, alpha0: float = 1.0, beta0: float = 1.0
    ) -> tuple[float, float]:
        """``loss(alpha, beta) - loss(alpha0, beta0)`` on the same sample and its standard error.

        Both losses share the sample, so this error is smaller than that of each loss
        (0.6-0.8 times, in the book's settings).
        """
        a, b = self._pairs([alpha, alpha0], [beta, beta0])
        L_d = self._per_doc(self._per_position(a, b))  # (n, 2)
        return self._ratio_and_se(L_d[:, 0] - L_d[:, 1])

    def gradient(self, log_alpha: float, log_beta: float) -> tuple[float, np.ndarray]:
        """Loss and its gradient with respect to ``(log alpha, log beta)``."""
        loss, ga, gb = self._per_position(np.array([math.exp(log_alpha)]), np.array([math.exp(log_beta)]), grad=True)
        P = self.num_positions
        return float(loss.sum() / P), np.array([ga.sum() / P, gb.sum() / P])

    def location_covariance(self, log_alpha: float, log_beta: float, h: float = 1e-4) -> np.ndarray:
        """Sandwich covariance ``H^{-1} S H^{-1}`` of the optimum in ``(log alpha, log beta)``.

        ``S`` is the covariance of the mean gradient (from the per-document gradients, as
        for a ratio estimator) and ``H`` the Hessian of the estimate (central differences of
        the analytic gradient). Meaningful at a stationary point.
        """
        x = np.array([log_alpha, log_beta], dtype=np.float64)
        H = np.zeros((2, 2))
        for j in range(2):
            e = np.zeros(2)
            e[j] = h
            H[:, j] = (self.gradient(*(x + e))[1] - self.gradient(*(x - e))[1]) / (2 * h)
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
        return TiedAttentionObjective(
            num_topics=self.num_topics, words_per_topic=self.words_per_topic, topics_per_doc=self.topics_per_doc,
            doc_len=self.doc_len, attend_to_masked=self.attend_to_masked, value_matrix=self.value_matrix,
            doc=self._doc[keep], gram=self._gram[keep], hit=self._hit[keep], norm=self._norm[keep],
            n_sel=self._n_sel[:n])

    def _ratio_and_se(self, L_d: np.ndarray) -> tuple[float, float]:
        n_d = self._n_sel
        est = float(L_d.sum() / n_d.sum())
        r = (L_d - est * n_d) / n_d.mean()
        se = float(np.sqrt(np.sum(r * r) / (self.num_docs * (self.num_docs - 1))))
        return est, se


def tied_attention_objective(
    num_topics: int,
    words_per_topic: int,
    topics_per_doc: int,
    doc_len: int,
    mask_prob: float = 0.15,
    keep_prob: float = 0.1,
    random_prob: float = 0.1,
    *,
    attend_to_masked: bool,
    seed: int = 0,
    num_docs: int = 100_000,
) -> TiedAttentionObjective:
    """Sample documents and masks once and return the tied-attention loss on that sample.

    Documents come from :class:`topicmech.data.SimplifiedTopicModel`, corrupted by
    :func:`topicmech.data.bert_mask`, in chunks of 16,384 documents with seeds derived by
    :func:`topicmech.utils.spawn_seeds` (so the first chunks of a larger sample are the
    chunks of a smaller one, and ``TOPICMECH_SEED_OFFSET`` shifts them). ``W^V`` is frozen at
    :func:`topicmech.theory.optimal_value_matrix` of the same convention.

    Parameters
    ----------
    num_topics, words_per_topic, topics_per_doc, doc_len : int
        ``T``, ``v >= 2``, ``1 <= tau < T``, ``N >= 2``.
    mask_prob, keep_prob, random_prob : float
        BERT corruption; ``0 < mask_prob < 1``.
    attend_to_masked : bool
        Key visibility of the selected positions (keyword-only, required).
    seed : int
        Sample seed.
    num_docs : int
        Documents in the sample.

    Returns
    -------
    objective : TiedAttentionObjective
    """
    T, v, tau, N, p_m, p_c, p_r, si = _check_setting(num_topics, words_per_topic, topics_per_doc, doc_len,
                                                     mask_prob, keep_prob, random_prob, attend_to_masked)
    seed = check_seed(seed)
    n_docs = check_positive_int("num_docs", num_docs)
    W = theory.optimal_value_matrix(T, v, tau, N, p_m, p_c, p_r, attend_to_masked=si)
    model = SimplifiedTopicModel(T, v, tau)
    n_chunks = -(-n_docs // _CHUNK)
    seeds = spawn_seeds(seed, 2 * n_chunks)
    parts: list[tuple[np.ndarray, ...]] = []
    offset = 0
    for c in range(n_chunks):
        n = min(_CHUNK, n_docs - c * _CHUNK)
        docs = model.sample(n, N, seed=seeds[2 * c])
        inputs, selected = bert_mask(docs, T * v, mask_prob=p_m, keep_prob=p_c, random_prob=p_r, seed=seeds[2 * c + 1])
        dq, gram, hit, norm, n_sel = _position_stats(inputs.numpy(), selected.numpy(), docs.numpy(), W, v, si)
        keep = n_sel > 0  # documents with at least one used position
        new_index = np.cumsum(keep) - 1 + offset
        parts.append((new_index[dq], gram, hit, norm, n_sel[keep]))
        offset += int(keep.sum())
    doc, gram, hit, norm, n_sel = (np.concatenate([p[i] for p in parts]) for i in range(5))
    if doc.size == 0 or n_sel.size < 2:
        raise ValueError("the sample has fewer than two documents with a selected position; increase num_docs")
    return TiedAttentionObjective(num_topics=T, words_per_topic=v, topics_per_doc=tau, doc_len=N,
                                  attend_to_masked=si, value_matrix=W, doc=doc, gram=gram, hit=hit,
                                  norm=norm, n_sel=n_sel)


@dataclass(frozen=True)
class TiedAttentionOptimum:
    """The optimum of the tied-score family on one Monte-Carlo sample.

    Attributes
    ----------
    alpha, beta : float
        Optimal ``c_2 / c_3`` (same topic, different word) and ``c_1 / c_3`` (same token).
    weighted_ratio : float
        ``((v - 1) / v) alpha + beta / v``, the quantity the authors bound.
    loss, loss_se : float
        Estimated population loss at the optimum and its standard error (the sampling error
        of the loss level; the *gain* over uniform attention has a smaller error, ``gain_se``).
    uniform_loss : float
        The estimate at ``alpha = beta = 1`` (uniform attention) on the same sample.
    uniform_loss_exact : float
        Exact stage-1 population loss of ``W^V`` under uniform attention
        (:func:`topicmech.theory.population_loss`); ``uniform_loss`` estimates it.
    gain, gain_se : float
        ``uniform_loss - loss`` on the same sample and its standard error.
    log_alpha_se, log_beta_se, weighted_ratio_se : float
        Sandwich standard errors of the location (sampling error of the optimum itself).
    at_bound : bool
        True if the optimum lies on the edge of the search box ``|log alpha|, |log beta| <= 12``
        (the true optimum may then be at infinity).
    num_docs, num_positions : int
        Sample size (documents with a used position, selected positions).
    num_topics, words_per_topic, topics_per_doc, doc_len : int
    mask_prob, keep_prob, random_prob : float
    attend_to_masked : bool
    seed : int
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

    def to_dict(self) -> dict[str, object]:
        """Plain ``dict`` (JSON-serialisable)."""
        return asdict(self)


def _minimise(obj: TiedAttentionObjective, start: np.ndarray) -> np.ndarray:
    bounds = [(-_LOG_BOUND, _LOG_BOUND)] * 2
    res = optimize.minimize(lambda x: obj.gradient(x[0], x[1]), start, jac=True, method="L-BFGS-B",
                            bounds=bounds, options={"ftol": 1e-15, "gtol": 1e-11, "maxiter": 500})
    return np.asarray(res.x, dtype=np.float64)


def tied_attention_optimum(
    num_topics: int,
    words_per_topic: int,
    topics_per_doc: int,
    doc_len: int,
    mask_prob: float = 0.15,
    keep_prob: float = 0.1,
    random_prob: float = 0.1,
    *,
    attend_to_masked: bool,
    seed: int = 0,
    num_docs: int = 100_000,
) -> TiedAttentionOptimum:
    """Optimal tied attention scores ``(alpha, beta)`` with ``W^V`` at the stage-1 optimum.

    Minimises the Monte-Carlo population loss of :func:`tied_attention_objective` over
    ``(log alpha, log beta)``: a coarse grid (``log`` ratios from -3 to 6, on the first
    20,000 selected positions) picks the start,
    then L-BFGS-B with the exact gradient of the (deterministic) estimate. The relations,
    ``[MASK]`` included, follow the module's conventions (:func:`tied_score_matrix`).

    The estimator error is reported twice: ``loss_se`` for the loss level and the sandwich
    standard errors ``log_alpha_se``, ``log_beta_se``, ``weighted_ratio_se`` for the location.
    At the default 100,000 documents and ``T=8, v=3, N=32``, the ratio moves by at most 2%
    when the sample is doubled and its sandwich standard error is 1-2%
    (``benchmarks/tied_attention_grid.py`` measures both). A few seconds per call on one
    core (5-15 s measured on a heavily shared machine).

    Parameters
    ----------
    num_topics, words_per_topic, topics_per_doc, doc_len : int
        ``T``, ``v >= 2``, ``1 <= tau < T``, ``N >= 2``.
    mask_prob, keep_prob, random_prob : float
        BERT corruption ``p_m`` in (0, 1), ``p_c``, ``p_r`` with ``p_c + p_r <= 1``.
    attend_to_masked : bool
        True: every position is a key (the query included). False: selected positions are
        hidden as keys (the authors' released code).
    seed : int
        Seed of the Monte-Carlo sample.
    num_docs : int
        Documents in the sample.

    Returns
    -------
    optimum : TiedAttentionOptimum

    Raises
    ------
    ValueError
        Naming the argument, for non-integer sizes, ``topics_per_doc >= num_topics``,
        ``words_per_topic < 2``, probabilities outside [0, 1] or ``keep_prob + random_prob > 1``.

    Examples
    --------
    >>> opt = tied_attention_optimum(5, 4, 2, 20, attend_to_masked=False, num_docs=20_000)
    >>> opt.alpha > 1
    True
    """
    T, v, tau, N, p_m, p_c, p_r, si = _check_setting(num_topics, words_per_topic, topics_per_doc, doc_len,
                                                     mask_prob, keep_prob, random_prob, attend_to_masked)
    obj = tied_attention_objective(T, v, tau, N, p_m, p_c, p_r, attend_to_masked=si, seed=seed, num_docs=num_docs)
    grid = np.linspace(-3.0, 6.0, 19)
    la, lb = np.meshgrid(grid, grid, indexing="ij")
    coarse = obj.head(20_000).loss(np.exp(la), np.exp(lb))  # (19, 19), on a sub-sample: only a start
    i, j = np.unravel_index(int(np.argmin(coarse)), coarse.shape)
    x = _minimise(obj, np.array([grid[i], grid[j]]))
    alpha, beta = math.exp(x[0]), math.exp(x[1])
    loss, loss_se = obj.loss_and_se(alpha, beta)
    uniform, _ = obj.loss_and_se(1.0, 1.0)
    diff, diff_se = obj.loss_difference(alpha, beta)
    at_bound = bool(np.any(np.abs(x) > _LOG_BOUND - 1e-6))
    if at_bound:
        la_se = lb_se = wr_se = math.nan
    else:
        cov = obj.location_covariance(x[0], x[1])
        la_se, lb_se = (float(math.sqrt(max(cov[k, k], 0.0))) for k in range(2))
        jac = np.array([(v - 1) / v * alpha, beta / v])
        wr_se = float(math.sqrt(max(jac @ cov @ jac, 0.0)))
    Sigma, C = theory.moments(T, v, tau, N, p_m, p_c, p_r, attend_to_masked=si)
    exact = theory.population_loss(obj.value_matrix, Sigma, C)
    return TiedAttentionOptimum(
        alpha=alpha, beta=beta, weighted_ratio=weighted_ratio(alpha, beta, v), loss=loss, loss_se=loss_se,
        uniform_loss=uniform, uniform_loss_exact=float(exact), gain=-diff, gain_se=diff_se,
        log_alpha_se=la_se, log_beta_se=lb_se, weighted_ratio_se=wr_se, at_bound=at_bound,
        num_docs=obj.num_docs, num_positions=obj.num_positions, num_topics=T, words_per_topic=v,
        topics_per_doc=tau, doc_len=N, mask_prob=p_m, keep_prob=p_c, random_prob=p_r, attend_to_masked=si,
        seed=check_seed(seed),
    )
