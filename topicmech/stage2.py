"""Stage 2 of the two-stage picture: ``W^V`` frozen, ``W^K`` and ``W^Q`` trained.

Book: chapter 5 (*Stage 2: attention learns topic structure*) and its appendix
(*app-attention*); the tests in ``tests/test_chapter_claims_5.py`` call the same
functions, so the book and the tests cannot drift apart.

What is here:

- :class:`Stage2Setting`: the chapter's quick and paper-scale settings, with the SGD
  learning rate derived from the setting by :func:`default_stage2_lr` (the rate at which
  the exact initial drive makes ``A`` grow by :data:`TARGET_GROWTH_RATE` per step);
- :func:`stage2_model`: a one-hot, identity-head :class:`~topicmech.model.OneLayerTransformer`
  with learned attention and a frozen value matrix;
- :func:`run_stage2`: build that model with ``W^V`` at the stage-1 optimum and train
  ``W^K, W^Q`` with :func:`topicmech.train.train`, recording the contrasts of ``A``;
- :func:`gradient_summary`: orbit means of Monte-Carlo ``dL/dA`` over several seeds,
  with standard errors (the error bar of the ratio ``G_same / G_diff``);
- :func:`hidden_key_gradient`: the exact expectation of ``dL/dA`` at finite ``N`` with
  hidden keys for a value matrix in span{B, J} (our derivation, appendix);
- :func:`predicted_growth_rate`, :func:`fitted_growth_rate`: the exponential growth of
  ``A = W_K^T W_Q / sqrt(d)`` at the start of stage 2 (a two-layer linear network);
- :func:`mask_query_attention`: attention of ``[MASK]`` queries to keys inside and
  outside the hidden word's topic.

Notation as on the book's notation page: ``A[key_token, query_token]``; ``G = dL/dA``
has the same orientation; gradient descent moves ``A`` along ``-G``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from . import theory
from .data import SimplifiedTopicModel
from .model import OneLayerTransformer
from .probes import topic_contrasts
from .tied_attention import tied_attention_optimum  # noqa: F401  (documented in topicmech.tied_attention)
from .train import History, train
from .utils import check_masking, check_positive_int

__all__ = [
    "Stage2Setting",
    "TARGET_GROWTH_RATE",
    "default_stage2_lr",
    "stage2_model",
    "run_stage2",
    "GradientSummary",
    "gradient_summary",
    "hidden_key_gradient",
    "predicted_growth_rate",
    "fitted_growth_rate",
    "MaskQueryAttention",
    "mask_query_attention",
]


def _check_positive_float(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise ValueError(f"{name} must be a positive finite float, got {value!r}")
    x = float(value)
    if not (math.isfinite(x) and x > 0):
        raise ValueError(f"{name} must be a positive finite float, got {value!r}")
    return x


@dataclass(frozen=True)
class Stage2Setting:
    """Data, masking and optimiser settings of a stage-2 run.

    Attributes
    ----------
    num_topics, words_per_topic, topics_per_doc, doc_len : int
        ``T, v, tau, N`` of the simplified topic model.
    lr : float, optional
        Learning rate of plain SGD. The loss is nearly flat in ``A`` at uniform attention
        (``dL/dA`` is of order 1e-4), so the rate is large; :func:`predicted_growth_rate`
        turns it into the initial e-folding rate of ``A``. Default (``None``):
        :func:`default_stage2_lr`, the rate at which the topic contrast of ``A`` first grows
        by :data:`TARGET_GROWTH_RATE` per step (exact hidden-key drive,
        :func:`topicmech.sweeps.stage2_drive`); the same rate is used with visible keys.
        Raises ValueError where there is no drive (``topics_per_doc == 1`` or
        ``keep_prob == 0``): pass ``lr``. The derived value is stored in ``lr``, so
        ``dataclasses.replace`` keeps it: pass ``lr=None`` when replacing data parameters.
    steps, batch_size : int
        SGD steps, fresh documents per step.
    init_scale : float
        Standard deviation of the Gaussian initialisation of ``W_K`` and ``W_Q``.
    probe_every : int
        Steps between recordings of the contrasts of ``A``.
    mask_prob, keep_prob, random_prob : float
        BERT corruption ``p_m, p_c, p_r``.
    """

    num_topics: int = 5
    words_per_topic: int = 4
    topics_per_doc: int = 2
    doc_len: int = 20
    lr: float | None = None
    steps: int = 600
    batch_size: int = 128
    init_scale: float = 0.1
    probe_every: int = 10
    mask_prob: float = 0.15
    keep_prob: float = 0.1
    random_prob: float = 0.1

    def __post_init__(self) -> None:
        for name in ("num_topics", "words_per_topic", "topics_per_doc", "doc_len", "steps", "batch_size",
                     "probe_every"):
            check_positive_int(name, getattr(self, name))
        if self.topics_per_doc > self.num_topics:
            raise ValueError(f"topics_per_doc must be <= num_topics={self.num_topics}, got {self.topics_per_doc!r}")
        if self.doc_len < 2:
            raise ValueError(f"doc_len must be >= 2, got {self.doc_len!r}")
        _check_positive_float("init_scale", self.init_scale)
        check_masking(self.mask_prob, self.keep_prob, self.random_prob)
        if self.lr is None:
            lr = default_stage2_lr(self.num_topics, self.words_per_topic, self.topics_per_doc, self.doc_len,
                                   self.mask_prob, self.keep_prob)
            object.__setattr__(self, "lr", lr)  # frozen dataclass: set the derived default once
        _check_positive_float("lr", self.lr)

    @classmethod
    def quick(cls) -> Stage2Setting:
        """The chapter's default: T=5, v=4, tau=2, N=20 (D=21), 600 SGD steps of 128 documents.

        The learning rate is fixed at 100, the value the chapter's claims were checked
        with; the derived default (:func:`default_stage2_lr`) would be 103.6.
        """
        return cls(lr=100.0)

    @classmethod
    def full(cls) -> Stage2Setting:
        """Paper-scale vocabulary: T=10, v=10, tau=2, N=64 (D=101).

        ``dL/dA`` is about 12 times smaller and ``sqrt(d)`` about twice as large as in
        :meth:`quick`, so the learning rate is scaled up to keep the predicted initial
        growth rate of ``A`` near :data:`TARGET_GROWTH_RATE`. It is fixed at 2700 (the
        derived default, :func:`default_stage2_lr`, would be 2830).
        """
        return cls(num_topics=10, words_per_topic=10, topics_per_doc=2, doc_len=64, lr=2700.0, steps=800,
                   batch_size=128, init_scale=0.1, probe_every=20)

    @property
    def vocab_size(self) -> int:
        """``V = T v``."""
        return self.num_topics * self.words_per_topic

    @property
    def num_tokens(self) -> int:
        """``D = V + 1``."""
        return self.vocab_size + 1

    def topic_model(self) -> SimplifiedTopicModel:
        """The data source, :class:`~topicmech.data.SimplifiedTopicModel`."""
        return SimplifiedTopicModel(self.num_topics, self.words_per_topic, self.topics_per_doc)

    def stage1_value_matrix(self, attend_to_masked: bool) -> np.ndarray:
        """The stage-1 optimum ``W*`` (:func:`topicmech.theory.optimal_value_matrix`), shape ``(D, D)``."""
        return theory.optimal_value_matrix(self.num_topics, self.words_per_topic, self.topics_per_doc, self.doc_len,
                                           self.mask_prob, self.keep_prob, self.random_prob,
                                           attend_to_masked=attend_to_masked)


#: Initial e-folding rate per SGD step of the topic contrast of ``A`` that
#: :func:`default_stage2_lr` aims at: 600 steps then cover about 18 e-folds, enough to grow
#: from an initialisation of 0.1 to saturation with room to spare, and slow enough that the
#: step stays small once attention saturates.
TARGET_GROWTH_RATE: float = 0.03


def default_stage2_lr(
    num_topics: int,
    words_per_topic: int,
    topics_per_doc: int,
    doc_len: int,
    mask_prob: float = 0.15,
    keep_prob: float = 0.1,
    target_rate: float = TARGET_GROWTH_RATE,
) -> float:
    """SGD learning rate for stage 2 that makes ``A`` first grow at ``target_rate`` per step.

    Inverts :func:`predicted_growth_rate`: ``lr = target_rate sqrt(D) / (2 lambda_G)`` with
    ``lambda_G`` the exact initial drive on topic contrasts at uniform attention, hidden
    keys, ``W^V`` at its stage-1 optimum (:func:`topicmech.sweeps.stage2_drive`). The
    drive shrinks quickly with the vocabulary (about 12 times from T = 5, v = 4 to
    T = v = 10), so a fixed rate would either crawl or overshoot.

    Parameters
    ----------
    num_topics, words_per_topic, topics_per_doc, doc_len : int
    mask_prob, keep_prob : float
    target_rate : float
        Initial e-folding rate per step (> 0).

    Returns
    -------
    lr : float

    Raises
    ------
    ValueError
        When the drive is not positive (``topics_per_doc == 1`` or ``keep_prob == 0``:
        uniform attention is then a stationary point and no rate can be derived); pass
        ``lr`` explicitly.
    """
    from .sweeps import stage2_drive

    rate = _check_positive_float("target_rate", target_rate)
    lam = stage2_drive(num_topics, words_per_topic, topics_per_doc, doc_len, mask_prob, keep_prob)
    if not lam > 1e-12:
        raise ValueError(
            f"no stage-2 drive at topics_per_doc={topics_per_doc!r}, keep_prob={keep_prob!r} (lambda_G = {lam:.3g}), "
            "so no learning rate can be derived; set lr explicitly"
        )
    D = num_topics * words_per_topic + 1
    return rate * math.sqrt(D) / (2.0 * lam)


def stage2_model(
    value_matrix: np.ndarray | torch.Tensor,
    *,
    attend_to_masked: bool,
    init_scale: float = 0.1,
    seed: int = 0,
) -> OneLayerTransformer:
    """One-hot, identity-head model with learned ``W_K, W_Q`` and ``W_V`` frozen at ``value_matrix``.

    Parameters
    ----------
    value_matrix : array, shape (D, D)
        Rows = output token, columns = input token (e.g. the stage-1 optimum).
    attend_to_masked : bool
        Key visibility of selected positions during training.
    init_scale : float
        Standard deviation of the initial ``W_K`` and ``W_Q``; the initial scores are of
        order ``init_scale**2``.
    seed : int
        Initialisation seed.

    Returns
    -------
    model : OneLayerTransformer
        ``attention="learned"``; ``W_V`` holds ``value_matrix`` and has ``requires_grad=False``.
    """
    W = torch.as_tensor(np.asarray(value_matrix, dtype=np.float64) if not isinstance(value_matrix, torch.Tensor)
                        else value_matrix.detach().double())
    if W.dim() != 2 or W.shape[0] != W.shape[1] or W.shape[0] < 2:
        raise ValueError(f"value_matrix must be a square (D, D) matrix with D >= 2, got shape {tuple(W.shape)}")
    if not torch.isfinite(W).all():
        raise ValueError("value_matrix must be finite")
    model = OneLayerTransformer(W.shape[0], attention="learned", value="learned", init_scale=init_scale,
                                attend_to_masked=attend_to_masked, seed=seed)
    with torch.no_grad():
        model.W_V.copy_(W.to(model.W_V.dtype))
    return model.freeze("W_V")


def run_stage2(
    setting: Stage2Setting,
    *,
    attend_to_masked: bool,
    seed: int = 0,
    value_matrix: np.ndarray | None = None,
) -> tuple[OneLayerTransformer, History]:
    """Stage 2: freeze ``W^V`` at the stage-1 form and train ``W^K, W^Q`` by SGD on fresh documents.

    Parameters
    ----------
    setting : Stage2Setting
    attend_to_masked : bool
        Key visibility of selected positions (``False``: the authors' code).
    seed : int
        Seeds the initialisation (``seed``) and the documents and masks (``10_000 + seed``).
    value_matrix : ndarray, shape (D, D), optional
        Frozen ``W^V``; defaults to ``setting.stage1_value_matrix(attend_to_masked)``.

    Returns
    -------
    model : OneLayerTransformer
    history : History
        Probes ``"same_word"`` and ``"same_topic"`` (contrasts of ``A`` against the
        different-topic mean, :func:`topicmech.probes.topic_contrasts`) and
        ``"mask_query_spread"`` (standard deviation of the ``[MASK]``-query column of
        ``A`` over word keys), every ``setting.probe_every`` steps.
    """
    if not isinstance(setting, Stage2Setting):
        raise ValueError(f"setting must be a Stage2Setting, got {type(setting).__name__}")
    W = setting.stage1_value_matrix(attend_to_masked) if value_matrix is None else value_matrix
    model = stage2_model(W, attend_to_masked=attend_to_masked, init_scale=setting.init_scale, seed=seed)
    data = setting.topic_model()
    topic = data.topic_of_word
    V = setting.vocab_size

    def contrast(name: str):
        return lambda m: topic_contrasts(m.key_query_matrix(), topic)[name]

    probes = {
        "same_word": contrast("same_word"),
        "same_topic": contrast("same_topic"),
        "mask_query_spread": lambda m: float(m.key_query_matrix()[:V, V].std()),
    }
    history = train(model, data, steps=setting.steps, batch_size=setting.batch_size, doc_len=setting.doc_len,
                    loss="squared", optimizer="sgd", lr=setting.lr, mask_prob=setting.mask_prob,
                    keep_prob=setting.keep_prob, random_prob=setting.random_prob, seed=10_000 + seed,
                    probes=probes, probe_every=setting.probe_every)
    return model, history


@dataclass(frozen=True)
class GradientSummary:
    """Orbit means of several independent Monte-Carlo estimates of ``G = dL/dA``.

    Word-query entries are averaged over the three orbits of the symmetry group (same
    word, same topic with a different word, different topic); ``*_se`` are standard
    errors of the mean over the estimates.

    Attributes
    ----------
    same_word, same_topic, diff_topic : float
        Means of ``G[u, q]`` for word keys ``u`` and word queries ``q``.
    same_word_se, same_topic_se, diff_topic_se : float
    ratio, ratio_se : float
        Mean and standard error of the per-estimate ratio ``same_topic / diff_topic``.
    mask_key : float
        Mean of ``G[[MASK], q]`` over word queries (0 with hidden keys).
    mask_query_mean : float
        Mean of the ``[MASK]``-query column over word keys.
    mask_query_max_z : float
        Largest ``|z|`` of a ``[MASK]``-query entry against the column mean, with the
        standard error pooled over the word keys (about 3 or less when the column is
        constant up to Monte-Carlo noise).
    max_column_sum : float
        Largest ``|sum_u G[u, q]|`` over query columns and estimates (0 up to rounding:
        softmax shift invariance).
    words_per_topic, num_estimates : int
    """

    same_word: float
    same_topic: float
    diff_topic: float
    same_word_se: float
    same_topic_se: float
    diff_topic_se: float
    ratio: float
    ratio_se: float
    mask_key: float
    mask_query_mean: float
    mask_query_max_z: float
    max_column_sum: float
    words_per_topic: int
    num_estimates: int

    @property
    def topic_eigenvalue(self) -> float:
        """Eigenvalue of ``-G`` (word block, orbit means) on topic contrasts.

        ``-[(same_word - same_topic) + v (same_topic - diff_topic)]``: the rate at which
        gradient descent raises ``A`` along a topic contrast.
        """
        v = self.words_per_topic
        return -((self.same_word - self.same_topic) + v * (self.same_topic - self.diff_topic))

    def topic_contrast_z(self) -> float:
        """``(same_topic - diff_topic)`` in units of its standard error (negative: descent raises same-topic scores)."""
        return (self.same_topic - self.diff_topic) / math.hypot(self.same_topic_se, self.diff_topic_se)


def gradient_summary(
    gradients: Sequence[np.ndarray],
    num_topics: int,
    words_per_topic: int,
) -> GradientSummary:
    """Summarise independent estimates of ``dL/dA``.

    The estimates typically come from :func:`topicmech.theory.key_query_gradient` with
    different seeds.

    Parameters
    ----------
    gradients : sequence of ndarray, each of shape (D, D)
        At least two independent estimates (rows = key token, columns = query token).
    num_topics, words_per_topic : int
        ``T >= 2`` and ``v >= 2`` (all three orbits must exist).

    Returns
    -------
    GradientSummary
    """
    T = check_positive_int("num_topics", num_topics)
    v = check_positive_int("words_per_topic", words_per_topic)
    if T < 2 or v < 2:
        raise ValueError(f"need num_topics >= 2 and words_per_topic >= 2, got {T} and {v}")
    V, D = T * v, T * v + 1
    Gs = np.stack([np.asarray(G, dtype=np.float64) for G in gradients]) if len(gradients) else np.zeros((0, D, D))
    if Gs.shape[0] < 2:
        raise ValueError(f"gradients must hold at least 2 estimates, got {Gs.shape[0]}")
    if Gs.shape[1:] != (D, D):
        raise ValueError(f"each gradient must have shape {(D, D)}, got {Gs.shape[1:]}")
    S = Gs.shape[0]
    topic = np.arange(V) // v
    same = topic[:, None] == topic[None, :]
    eye = np.eye(V, dtype=bool)
    words = Gs[:, :V, :V]                                            # (S, V, V)
    orbits = np.stack([words[:, eye].mean(1), words[:, same & ~eye].mean(1), words[:, ~same].mean(1)], 1)  # (S, 3)
    mean = orbits.mean(0)
    se = orbits.std(0, ddof=1) / math.sqrt(S)
    ratios = orbits[:, 1] / orbits[:, 2]                               # (S,)
    col = Gs[:, :V, V]                                                 # (S, V) [MASK]-query column, word keys
    dev = col - col.mean(1, keepdims=True)                             # remove each estimate's column mean
    resid = dev - dev.mean(0, keepdims=True)
    pooled_var = float((resid**2).sum() / ((S - 1) * V))
    scale = math.sqrt(pooled_var / S)
    max_z = float(np.abs(dev.mean(0)).max() / scale) if scale > 0 else 0.0
    return GradientSummary(
        same_word=float(mean[0]), same_topic=float(mean[1]), diff_topic=float(mean[2]),
        same_word_se=float(se[0]), same_topic_se=float(se[1]), diff_topic_se=float(se[2]),
        ratio=float(ratios.mean()), ratio_se=float(ratios.std(ddof=1) / math.sqrt(S)),
        mask_key=float(Gs[:, V, :V].mean()), mask_query_mean=float(col.mean()), mask_query_max_z=max_z,
        max_column_sum=float(np.abs(Gs.sum(1)).max()), words_per_topic=v, num_estimates=S,
    )


def hidden_key_gradient(
    num_topics: int,
    words_per_topic: int,
    topics_per_doc: int,
    doc_len: int | float,
    mask_prob: float = 0.15,
    keep_prob: float = 0.1,
    topic_eigenvalue: float | None = None,
) -> dict[str, float]:
    """Exact ``E[dL/dA]`` at uniform attention, hidden keys, finite ``N`` (our derivation).

    For a value matrix whose word block lies in span{B, J} (no extra weight on the
    diagonal, which is the stage-1 optimum with hidden keys) and whose topic eigenvalue
    is ``lambda`` (``lambda = v (beta - gamma)``), the word-query entries are

        ``G = lambda (1 - kappa) G_inf``,  ``kappa = E[1/K | K >= 1]``,

    where ``G_inf`` is :func:`topicmech.theory.key_query_gradient_limit` (``N -> inf``,
    ``W = B / v``): the ``J`` part of W drops out, the terms quadratic in W vanish, and
    the ``[MASK]`` and random-word queries contribute nothing. The appendix derives it.

    Parameters
    ----------
    num_topics, words_per_topic, topics_per_doc : int
    doc_len : int or math.inf
    mask_prob, keep_prob : float
    topic_eigenvalue : float, optional
        ``lambda`` of the frozen value matrix; defaults to the stage-1 optimum with hidden
        keys (:func:`topicmech.theory.value_block_coefficients`). For ``c B`` (the code's
        0/1 block times ``c``) it is ``c v``.

    Returns
    -------
    dict
        ``"same_word"``, ``"same_topic"``, ``"diff_topic"`` (word queries),
        ``"mask_query"`` (0), ``"ratio"`` (``-(T - 1)``) and ``"factor"``
        (``lambda (1 - kappa)``).
    """
    p_m, p_c, _ = check_masking(mask_prob, keep_prob, 0.0)
    if topic_eigenvalue is None:
        lam = theory.value_block_coefficients(num_topics, words_per_topic, topics_per_doc, doc_len, p_m, p_c, 0.0,
                                              attend_to_masked=False).topic_eigenvalue
    else:
        if isinstance(topic_eigenvalue, bool) or not isinstance(topic_eigenvalue, (int, float, np.floating)) \
                or not math.isfinite(float(topic_eigenvalue)):
            raise ValueError(f"topic_eigenvalue must be a finite float, got {topic_eigenvalue!r}")
        lam = float(topic_eigenvalue)
    limit = theory.key_query_gradient_limit(num_topics, words_per_topic, topics_per_doc, keep_prob=p_c)
    factor = lam * (1.0 - theory.kappa(doc_len, p_m))
    return {
        "same_word": factor * limit["same_word"],
        "same_topic": factor * limit["same_topic"],
        "diff_topic": factor * limit["diff_topic"],
        "mask_query": 0.0,
        "ratio": limit["ratio"],
        "factor": factor,
    }


def predicted_growth_rate(lr: float, topic_eigenvalue: float, d_model: int) -> float:
    """Initial e-folding rate per SGD step of the topic contrast of ``A = W_K^T W_Q / sqrt(d)``.

    With ``-G`` acting as ``lambda`` on topic contrasts, ``W_K a`` and ``W_Q a`` feed each
    other (``x <- x + lr lambda y / sqrt(d)``, ``y <- y + lr lambda x / sqrt(d)``), so
    ``a^T A a`` grows by ``(1 + lr lambda / sqrt(d))^2`` per step: rate ``2 lr lambda / sqrt(d)``.

    Parameters
    ----------
    lr : float
        SGD learning rate.
    topic_eigenvalue : float
        ``lambda``, e.g. :attr:`GradientSummary.topic_eigenvalue`.
    d_model : int
        ``d`` (``D`` for one-hot embeddings).
    """
    lr = _check_positive_float("lr", lr)
    d = check_positive_int("d_model", d_model)
    if isinstance(topic_eigenvalue, bool) or not math.isfinite(float(topic_eigenvalue)):
        raise ValueError(f"topic_eigenvalue must be a finite float, got {topic_eigenvalue!r}")
    return 2.0 * lr * float(topic_eigenvalue) / math.sqrt(d)


def fitted_growth_rate(
    steps: Sequence[int] | np.ndarray,
    values: Sequence[float] | np.ndarray,
    lo: float = 0.02,
    hi: float = 0.3,
) -> float:
    """Slope of ``log(values)`` against ``steps`` while the values first rise from ``lo`` to ``hi``.

    The window starts at the first value ``>= lo`` and ends before the first later value
    ``> hi``: the exponential phase, after the random initial component has been
    overtaken and before saturation.

    Parameters
    ----------
    steps : array, shape (n,)
    values : array, shape (n,)
        E.g. the ``"same_topic"`` probe of :func:`run_stage2`.
    lo, hi : float
        Window bounds, ``0 < lo < hi``.

    Returns
    -------
    rate : float
        Least-squares slope (per step).

    Raises
    ------
    ValueError
        If the window holds fewer than 3 points.
    """
    s = np.asarray(steps, dtype=np.float64)
    y = np.asarray(values, dtype=np.float64)
    if s.ndim != 1 or s.shape != y.shape:
        raise ValueError(f"steps and values must be 1-D of equal length, got shapes {s.shape} and {y.shape}")
    lo, hi = _check_positive_float("lo", lo), _check_positive_float("hi", hi)
    if lo >= hi:
        raise ValueError(f"lo must be < hi, got lo={lo!r}, hi={hi!r}")
    start = np.flatnonzero(y >= lo)
    if start.size == 0:
        raise ValueError(f"values never reach lo={lo}")
    i0 = int(start[0])
    above = np.flatnonzero(y[i0:] > hi)
    i1 = i0 + (int(above[0]) if above.size else y.size - i0)
    if i1 - i0 < 3 or np.any(y[i0:i1] <= 0):
        raise ValueError(f"the window [{lo}, {hi}] holds {i1 - i0} positive points; need at least 3")
    return float(np.polyfit(s[i0:i1], np.log(y[i0:i1]), 1)[0])


@dataclass(frozen=True)
class MaskQueryAttention:
    """Average attention of ``[MASK]`` queries to visible word keys, times ``N``.

    Attributes
    ----------
    same_topic : float
        Keys whose token is in the hidden (true) word's topic.
    diff_topic : float
        Keys in another topic.
    num_queries : int
        ``[MASK]`` queries counted.
    """

    same_topic: float
    diff_topic: float
    num_queries: int

    @property
    def ratio(self) -> float:
        """``same_topic / diff_topic`` (1 when a [MASK] query has no topic preference)."""
        return self.same_topic / self.diff_topic


def mask_query_attention(
    pattern: torch.Tensor,
    inputs: torch.Tensor,
    selected: torch.Tensor,
    docs: torch.Tensor,
    topic_of_word: torch.Tensor,
    attend_to_masked: bool,
) -> MaskQueryAttention:
    """Does a ``[MASK]`` query look more at keys of the hidden word's topic?

    Compares the mean attention from positions showing ``[MASK]`` to visible word keys
    whose token shares the topic of the true word behind the ``[MASK]`` with the mean
    to keys of other topics. The query cannot know the hidden word, so a ratio near 1 is
    expected (chapter 5).

    Parameters
    ----------
    pattern : Tensor, shape (batch, query, key)
        Attention weights computed with ``selected`` (hidden keys at weight 0).
    inputs : LongTensor, shape (batch, N)
        Corrupted tokens (``[MASK]`` has id ``V = len(topic_of_word)``).
    selected : BoolTensor, shape (batch, N)
    docs : LongTensor, shape (batch, N)
        True words.
    topic_of_word : LongTensor, shape (V,)
    attend_to_masked : bool
        Which keys were visible.

    Returns
    -------
    MaskQueryAttention
    """
    if not isinstance(attend_to_masked, bool):
        raise ValueError(f"attend_to_masked must be True or False, got {attend_to_masked!r}")
    for name, t in (("inputs", inputs), ("docs", docs)):
        if not isinstance(t, torch.Tensor) or t.dim() != 2 or t.dtype.is_floating_point or t.dtype == torch.bool:
            raise ValueError(f"{name} must be a LongTensor of shape (batch, N), got {type(t).__name__} "
                             f"{tuple(getattr(t, 'shape', ()))}")
    if docs.shape != inputs.shape:
        raise ValueError(f"docs must have the shape of inputs {tuple(inputs.shape)}, got {tuple(docs.shape)}")
    if not isinstance(selected, torch.Tensor) or selected.dtype != torch.bool or selected.shape != inputs.shape:
        got = f"{getattr(selected, 'dtype', type(selected).__name__)} {tuple(getattr(selected, 'shape', ()))}"
        raise ValueError(f"selected must be a BoolTensor of shape {tuple(inputs.shape)}, got {got}")
    B, N = inputs.shape
    if not isinstance(pattern, torch.Tensor) or tuple(pattern.shape) != (B, N, N):
        raise ValueError(f"pattern must have shape {(B, N, N)}, got {tuple(getattr(pattern, 'shape', ()))}")
    topic = torch.as_tensor(topic_of_word)
    V = topic.numel()
    if int(inputs.min()) < 0 or int(inputs.max()) > V:
        raise ValueError(f"inputs hold ids outside [0, {V}]: min {int(inputs.min())}, max {int(inputs.max())}")
    if int(docs.min()) < 0 or int(docs.max()) >= V:
        raise ValueError(f"docs hold ids outside [0, {V}): min {int(docs.min())}, max {int(docs.max())}")
    query = inputs == V                                                         # (B, N) [MASK] queries
    visible = torch.ones_like(selected) if attend_to_masked else ~selected
    key = (inputs < V) & visible                                                # (B, N) visible word keys
    hidden_topic = topic[docs]                                                  # (B, N)
    key_topic = topic[inputs.clamp(max=V - 1)]                                  # (B, N)
    pair = query[:, :, None] & key[:, None, :]                                  # (B, query, key)
    same = hidden_topic[:, :, None] == key_topic[:, None, :]
    n_same, n_diff = int((pair & same).sum()), int((pair & ~same).sum())
    if n_same == 0 or n_diff == 0:
        raise ValueError("no [MASK] query with visible word keys in both relations; use more documents")
    p = pattern.detach()
    return MaskQueryAttention(float(p[pair & same].mean()) * N, float(p[pair & ~same].mean()) * N,
                              int(query.sum()))
