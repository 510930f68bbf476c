"""Stage 2: ``W^V`` frozen at its stage-1 form, ``W^K`` and ``W^Q`` trained (chapter 5 and its appendix).

:class:`Stage2Setting` holds the chapter's settings, :func:`run_stage2` trains, :func:`gradient_summary`
summarises Monte-Carlo estimates of ``G = dL/dA`` (its exact value is
:func:`topicmech.theory.hidden_key_gradient`); :func:`topicmech.traces.predicted_growth_rate` and
:func:`topicmech.traces.growth_rate` give the initial exponential growth of
``A = W_K^T W_Q / sqrt(d)``. ``A[key_token, query_token]``; ``G`` has the same orientation.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from . import theory
from .data import SimplifiedTopicModel, bert_mask
from .model import OneLayerTransformer
from .probes import attention_by_relation, relation_masks, topic_contrasts, topic_eigenvalue
from .setting import BERT_MASKING, Masking, Setting
from .traces import growth_rate, predicted_growth_rate
from .train import History, train
from .utils import check_float, check_positive_int

__all__ = [
    "tied_limit_grid", "run_metrics", "conventions_seed", "tied_convergence_seed",
    "Stage2Setting", "stage2_model", "run_stage2", "GradientSummary",
    "gradient_summary", "MaskQueryAttention",
    "mask_query_attention", "mask_column_z", "mask_column_null_max_z", "ScoreMatrixLosses",
    "score_matrix_losses",
]


@dataclass(frozen=True)
class Stage2Setting:
    """A stage-2 run: its :class:`~topicmech.setting.Setting` (data, masking, key convention) and plain SGD.

    Attributes
    ----------
    setting : Setting
        ``T, v, tau, N``, the masking and the key convention of the run.
    lr : float, optional
        Learning rate (large: ``dL/dA`` is of order 1e-4); default :func:`topicmech.theory.default_stage2_lr`
        (of the setting with hidden keys), stored, so pass ``lr=None`` to :meth:`replace` with new data parameters.
    steps : int
        SGD steps.
    batch_size : int
        Fresh documents per step.
    probe_every : int
        Steps between recordings of the contrasts of ``A``.
    init_scale : float
        Standard deviation of the Gaussian initial ``W_K`` and ``W_Q``.
    """

    setting: Setting
    lr: float | None = None
    steps: int = 600
    batch_size: int = 128
    init_scale: float = 0.1
    probe_every: int = 10

    def __post_init__(self) -> None:
        if not isinstance(self.setting, Setting):
            raise ValueError(f"setting must be a topicmech.Setting, got {self.setting!r}")
        for name in ("steps", "batch_size", "probe_every"):
            check_positive_int(name, getattr(self, name))
        check_float("init_scale", self.init_scale)
        if self.lr is None:
            lr = theory.default_stage2_lr(self.setting.hidden())
            object.__setattr__(self, "lr", lr)  # frozen dataclass: set the derived default once
        check_float("lr", self.lr)

    @classmethod
    def quick(cls, *, attend_to_masked: bool) -> Stage2Setting:
        """The chapter's default: T=5, v=4, tau=2, N=20, 600 steps of 128 documents, lr 100 (derived: 103.6)."""
        return cls(Setting.stage2_quick(attend_to_masked=attend_to_masked), lr=100.0)

    @classmethod
    def full(cls, *, attend_to_masked: bool) -> Stage2Setting:
        """Paper-scale vocabulary: T=10, v=10, tau=2, N=64, 800 steps, lr 2700 (derived: 2830)."""
        return cls(Setting(10, 10, 2, 64, attend_to_masked=attend_to_masked), lr=2700.0, steps=800,
                   batch_size=128, init_scale=0.1, probe_every=20)

    def replace(self, **changes: Any) -> Stage2Setting:
        """A copy with ``changes``: fields of this class, or of the :class:`~topicmech.setting.Setting`
        (``doc_len``, ``mask_prob``, ``attend_to_masked``, ...), validated again."""
        own = {k: changes.pop(k) for k in ("setting", "lr", "steps", "batch_size", "init_scale", "probe_every")
               if k in changes}
        if changes:
            own["setting"] = own.get("setting", self.setting).replace(**changes)
        return dataclasses.replace(self, **own)

    def topic_model(self) -> SimplifiedTopicModel:
        """The data source, :class:`~topicmech.data.SimplifiedTopicModel`."""
        return SimplifiedTopicModel(self.setting.num_topics, self.setting.words_per_topic,
                                    self.setting.topics_per_doc)

    def W_star(self) -> np.ndarray:
        """The stage-1 optimum ``W*`` in the setting's convention (:func:`topicmech.theory.optimal_value_matrix`),
        shape ``(D, D)``."""
        return theory.optimal_value_matrix(self.setting)


def stage2_model(value_matrix: np.ndarray | torch.Tensor, *, attend_to_masked: bool, init_scale: float = 0.1,
                 seed: int = 0) -> OneLayerTransformer:
    """One-hot, identity-head model with learned ``W_K, W_Q`` (Gaussian, std ``init_scale``) and ``W_V`` frozen.

    ``value_matrix`` (shape ``(D, D)``, ``W[output, input]``, e.g. the stage-1 optimum) is
    copied into ``W_V``, which gets ``requires_grad=False``.
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
    config: Stage2Setting, *, seed: int = 0, value_matrix: np.ndarray | None = None,
) -> tuple[OneLayerTransformer, History]:
    """Stage 2: freeze ``W^V`` at the stage-1 form and train ``W^K, W^Q`` by SGD on
    fresh documents.

    The key convention is ``config.setting``'s. ``seed`` seeds the initialisation,
    ``10_000 + seed`` the documents and masks; ``value_matrix`` defaults to
    ``config.W_star()``. The history holds the probes ``"same_word"``, ``"same_topic"``
    (contrasts of ``A``, :func:`topicmech.probes.topic_contrasts`) and
    ``"mask_query_spread"`` (std of the ``[MASK]``-query column of ``A`` over word
    keys).
    """
    if not isinstance(config, Stage2Setting):
        raise ValueError(f"config must be a Stage2Setting, got {type(config).__name__}")
    setting = config.setting
    W = config.W_star() if value_matrix is None else value_matrix
    model = stage2_model(
        W, attend_to_masked=setting.attend_to_masked, init_scale=config.init_scale,
        seed=seed,
    )
    data = config.topic_model()
    topic = data.topic_of_word
    V = setting.V

    def contrast(name: str):
        return lambda m: topic_contrasts(m.key_query_matrix(), topic)[name]

    probes = {
        "same_word": contrast("same_word"),
        "same_topic": contrast("same_topic"),
        "mask_query_spread": lambda m: float(m.key_query_matrix()[:V, V].std()),
    }
    history = train(
        model, data, steps=config.steps, batch_size=config.batch_size,
        doc_len=setting.doc_len, loss="squared", optimizer="sgd", lr=config.lr,
        masking=setting.masking, seed=10_000 + seed,
        probes=probes, probe_every=config.probe_every,
    )
    return model, history


@dataclass(frozen=True)
class GradientSummary:
    """Orbit means of several independent Monte-Carlo estimates of ``G = dL/dA``; ``*_se`` are standard errors.

    Attributes
    ----------
    same_word : float
        Mean of ``G[u, q]`` over word keys ``u`` and word queries ``q`` with ``u = q``.
    same_topic : float
        The same mean over distinct words ``u != q`` of one topic.
    diff_topic : float
        The same mean over words of different topics.
    same_word_se : float
        Standard error of ``same_word`` over the estimates.
    same_topic_se : float
        Standard error of ``same_topic``.
    diff_topic_se : float
        Standard error of ``diff_topic``.
    ratio : float
        Mean of the per-estimate ratio ``same_topic / diff_topic``.
    ratio_se : float
        Standard error of that ratio.
    mask_key : float
        Mean of ``G[[MASK], q]`` over word queries (0 with hidden keys).
    mask_query_mean : float
        Mean of the ``[MASK]``-query column over word keys.
    mask_query_max_z : float
        Largest ``|z|`` of an entry of that column against its mean, standard error pooled over
        the keys (:func:`mask_column_z`). The entries are correlated, so the null law of the
        largest ``|z|`` is :func:`mask_column_null_max_z`.
    max_column_sum : float
        Largest ``|sum_u G[u, q]|`` (0 up to rounding: softmax shift invariance).
    words_per_topic : int
        ``v``, the words of each topic.
    num_estimates : int
        The number of independent Monte-Carlo estimates averaged.
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
        """Eigenvalue ``-[(same_word - same_topic) + v (same_topic - diff_topic)]`` of ``-G`` on topic contrasts."""
        v = self.words_per_topic
        return -topic_eigenvalue(self.same_word, self.same_topic, self.diff_topic, v)

    def topic_contrast_z(self) -> float:
        """``(same_topic - diff_topic)`` in units of its standard error (negative: descent raises same-topic scores)."""
        return (self.same_topic - self.diff_topic) / math.hypot(self.same_topic_se, self.diff_topic_se)


def _mask_z(cols: np.ndarray) -> np.ndarray:
    """z of each entry against its column mean, SE pooled over keys: (B, S, V) -> (B, V)."""
    S, V = cols.shape[1], cols.shape[2]
    dev = cols - cols.mean(2, keepdims=True)                 # remove each estimate's column mean
    mean = dev.mean(1)                                       # (B, V)
    pooled_var = ((dev - mean[:, None, :]) ** 2).sum((1, 2)) / ((S - 1) * V)   # (B,)
    scale = np.sqrt(pooled_var / S)[:, None]
    return np.divide(mean, scale, out=np.zeros_like(mean), where=scale > 0)


def _mask_columns(gradients: Sequence[np.ndarray], num_topics: int, words_per_topic: int) -> np.ndarray:
    T = check_positive_int("num_topics", num_topics)
    v = check_positive_int("words_per_topic", words_per_topic)
    V, D = T * v, T * v + 1
    Gs = np.stack([np.asarray(G, dtype=np.float64) for G in gradients]) if len(gradients) else np.zeros((0, D, D))
    if Gs.shape[0] < 2 or Gs.shape[1:] != (D, D):
        raise ValueError(f"gradients must hold at least 2 estimates of shape {(D, D)}, got {Gs.shape}")
    return Gs[:, :V, V]                                      # (S, V)


def mask_column_z(gradients: Sequence[np.ndarray], num_topics: int, words_per_topic: int) -> np.ndarray:
    """The ``V`` z-scores of ``mask_query_max_z`` of :class:`GradientSummary`: each word key's entry of the
    ``[MASK]``-query column of ``G`` (mean over the estimates) minus the column mean, over the
    standard error pooled over the keys; shape ``(V,)``."""
    return _mask_z(_mask_columns(gradients, num_topics, words_per_topic)[None])[0]


def mask_column_null_max_z(gradients: Sequence[np.ndarray], num_topics: int, words_per_topic: int, *,
                           draws: int = 20_000, seed: int = 0) -> np.ndarray:
    """Draws of the largest ``|z|`` of :func:`mask_column_z` under the null of a constant column.

    The ``V`` entries of one estimate are correlated (words of one topic move together), so the
    ``V`` z-scores are not independent. Each draw takes as many Gaussian estimates as given,
    with mean 0 and the covariance of the given estimates' columns, and computes the same
    statistic; shape ``(draws,)``.
    """
    col = _mask_columns(gradients, num_topics, words_per_topic)
    n = check_positive_int("draws", draws)
    S, V = col.shape
    dev = col - col.mean(0, keepdims=True)
    _, sing, vt = np.linalg.svd(dev, full_matrices=False)
    root = vt.T * (sing / math.sqrt(S - 1))                  # (V, S): root @ root.T is the covariance
    rng = np.random.default_rng(seed)
    out = np.empty(n)
    for i in range(0, n, 2048):
        k = min(2048, n - i)
        sim = rng.standard_normal((k, S, root.shape[1])) @ root.T          # (k, S, V)
        out[i:i + k] = np.abs(_mask_z(sim)).max(1)
    return out


@dataclass(frozen=True)
class ScoreMatrixLosses:
    """Squared loss of several fixed score matrices on one sample (:func:`score_matrix_losses`).

    ``per_doc[k, b]`` is the loss summed over the selected positions of document ``b`` with the
    ``k``-th matrix, ``num_selected[b]`` their number. Losses are per selected position.
    """

    per_doc: np.ndarray
    num_selected: np.ndarray

    def _ratio(self, x: np.ndarray) -> tuple[float, float]:
        n = self.num_selected
        est = float(x.sum() / n.sum())
        r = (x - est * n) / n.mean()
        return est, float(np.sqrt(np.sum(r * r) / (n.size * (n.size - 1))))

    def loss(self, k: int) -> tuple[float, float]:
        """Loss of matrix ``k`` and its standard error (ratio estimator over documents)."""
        return self._ratio(self.per_doc[k])

    def difference(self, k: int, j: int) -> tuple[float, float]:
        """``loss(k) - loss(j)`` on the same sample and its standard error."""
        return self._ratio(self.per_doc[k] - self.per_doc[j])


def score_matrix_losses(value_matrix: np.ndarray, scores: Sequence[np.ndarray], setting: Setting, *,
                        num_docs: int = 20_000, seed: int = 0) -> ScoreMatrixLosses:
    """Squared loss of the stage-2 model with ``W^V = value_matrix`` and token-space scores fixed.

    Each ``scores[k]`` (shape ``(D, D)``, ``A[key_token, query_token]``, as
    :meth:`~topicmech.model.OneLayerTransformer.key_query_matrix`) is put into the model
    (``W_K = sqrt(D) I``, ``W_Q = A``) and evaluated on one sample of ``num_docs`` documents
    and masks of ``setting`` (common random numbers, so differences are sharp).
    """
    if not isinstance(setting, Setting) or math.isinf(setting.doc_len):
        raise ValueError(f"setting must be a Setting with a finite doc_len, got {setting!r}")
    n = check_positive_int("num_docs", num_docs)
    if n < 2:
        raise ValueError(f"num_docs must be at least 2, got {num_docs}")
    D = setting.D
    data = SimplifiedTopicModel(setting.T, setting.v, setting.tau)
    docs = data.sample(n, setting.doc_len, seed=seed)
    inputs, selected = bert_mask(docs, setting.V, setting.masking, seed=seed + 1)
    model = stage2_model(value_matrix, attend_to_masked=setting.attend_to_masked)
    target = torch.nn.functional.one_hot(docs, D).double()
    rows = []
    for k, A in enumerate(scores):
        A = np.asarray(A, dtype=np.float64)
        if A.shape != (D, D) or not np.all(np.isfinite(A)):
            raise ValueError(f"scores[{k}] must be a finite {(D, D)} matrix, got shape {A.shape}")
        with torch.no_grad():
            model.W_K.copy_(math.sqrt(model.d_model) * torch.eye(D, dtype=model.W_K.dtype))
            model.W_Q.copy_(torch.as_tensor(A, dtype=model.W_Q.dtype))
            f = model(inputs, selected).double()
        rows.append((((f - target) ** 2).sum(-1) * selected).sum(1).numpy())
    return ScoreMatrixLosses(np.array(rows), selected.sum(1).double().numpy())


def gradient_summary(gradients: Sequence[np.ndarray], num_topics: int, words_per_topic: int) -> GradientSummary:
    """Summarise at least two independent ``(D, D)`` estimates of ``dL/dA`` (e.g. :func:`topicmech.theory.key_query_gradient`).

    ``num_topics`` and ``words_per_topic`` must be ``>= 2`` (all three orbits must exist).
    """
    T = check_positive_int("num_topics", num_topics)
    v = check_positive_int("words_per_topic", words_per_topic)
    if T < 2 or v < 2:
        raise ValueError(f"need num_topics >= 2 and words_per_topic >= 2, got {T} and {v}")
    V, D = T * v, T * v + 1
    Gs = np.stack([np.asarray(G, dtype=np.float64) for G in gradients]) if len(gradients) else np.zeros((0, D, D))
    S = Gs.shape[0]
    if S < 2 or Gs.shape[1:] != (D, D):
        raise ValueError(f"gradients must hold at least 2 estimates of shape {(D, D)}, got {Gs.shape}")
    orbits = np.stack([Gs[:, :V, :V][:, m].mean(1) for m in relation_masks(np.arange(V) // v)], 1)  # (S, 3) orbit means
    mean = orbits.mean(0)
    se = orbits.std(0, ddof=1) / math.sqrt(S)
    ratios = orbits[:, 1] / orbits[:, 2]                               # (S,)
    col = Gs[:, :V, V]                                                 # (S, V) [MASK]-query column, word keys
    max_z = float(np.abs(_mask_z(col[None])[0]).max())
    return GradientSummary(
        same_word=float(mean[0]), same_topic=float(mean[1]), diff_topic=float(mean[2]),
        same_word_se=float(se[0]), same_topic_se=float(se[1]), diff_topic_se=float(se[2]),
        ratio=float(ratios.mean()), ratio_se=float(ratios.std(ddof=1) / math.sqrt(S)),
        mask_key=float(Gs[:, V, :V].mean()), mask_query_mean=float(col.mean()), mask_query_max_z=max_z,
        max_column_sum=float(np.abs(Gs.sum(1)).max()), words_per_topic=v, num_estimates=S,
    )




@dataclass(frozen=True)
class MaskQueryAttention:
    """Mean attention (times ``N``) of ``[MASK]`` queries to visible word keys in the hidden word's topic or
    another (``same_topic``, ``diff_topic``), over ``num_queries`` queries."""

    same_topic: float
    diff_topic: float
    num_queries: int

    @property
    def ratio(self) -> float:
        """``same_topic / diff_topic`` (1 when a [MASK] query has no topic preference)."""
        return self.same_topic / self.diff_topic


def mask_query_attention(pattern: torch.Tensor, inputs: torch.Tensor, selected: torch.Tensor, docs: torch.Tensor,
                         topic_of_word: torch.Tensor, *, attend_to_masked: bool) -> MaskQueryAttention:
    """Does a ``[MASK]`` query look more at visible word keys of the hidden (true) word's topic? (Expected: no.)

    ``pattern`` (batch, query, key) holds attention weights computed with ``selected``;
    ``inputs`` and ``docs`` (batch, N) the corrupted tokens (``[MASK]`` is ``V = len(topic_of_word)``)
    and the true words; ``attend_to_masked`` says which keys were visible.
    """
    if not isinstance(attend_to_masked, bool):
        raise ValueError(f"attend_to_masked must be True or False, got {attend_to_masked!r}")
    topic = torch.as_tensor(topic_of_word)
    V = topic.numel()
    ok = all(isinstance(t, torch.Tensor) and t.dim() == 2 and not t.dtype.is_floating_point and t.dtype != torch.bool
             for t in (inputs, docs)) and docs.shape == inputs.shape
    if not ok or int(inputs.min()) < 0 or int(inputs.max()) > V or int(docs.min()) < 0 or int(docs.max()) >= V:
        raise ValueError(f"inputs and docs must be LongTensors of one shape (batch, N), ids in [0, {V}] and [0, {V})")
    B, N = inputs.shape
    if not isinstance(selected, torch.Tensor) or selected.dtype != torch.bool or selected.shape != inputs.shape:
        raise ValueError(f"selected must be a BoolTensor of shape {(B, N)}")
    if not isinstance(pattern, torch.Tensor) or tuple(pattern.shape) != (B, N, N):
        raise ValueError(f"pattern must have shape {(B, N, N)}, got {tuple(getattr(pattern, 'shape', ()))}")
    query = inputs == V                                                         # (B, N) [MASK] queries
    visible = torch.ones_like(selected) if attend_to_masked else ~selected
    key = (inputs < V) & visible                                                # (B, N) visible word keys
    pair = query[:, :, None] & key[:, None, :]                                  # (B, query, key)
    same = topic[docs][:, :, None] == topic[inputs.clamp(max=V - 1)][:, None, :]  # hidden word's topic = key's
    if not (pair & same).any() or not (pair & ~same).any():
        raise ValueError("no [MASK] query with visible word keys in both relations; use more documents")
    p = pattern.detach()
    return MaskQueryAttention(float(p[pair & same].mean()) * N, float(p[pair & ~same].mean()) * N, int(query.sum()))


def tied_limit_grid(num_topics: Sequence[int], topics_per_doc: Sequence[int], *, words_per_topic: int,
                    attend_to_masked: bool, masking: Masking = BERT_MASKING, value_matrix: str = "limit",
                    mask_query: str = "tied") -> list[dict[str, Any]]:
    """The N -> inf optimum of the tied attention (:func:`topicmech.theory.tied_attention_optimum`
    with ``doc_len=math.inf``) at every ``(T, tau)`` with ``tau < T`` of the two lists.

    Returns one dict per setting: ``num_topics``, ``topics_per_doc``, ``alpha``, ``beta``,
    ``weighted_ratio``, ``ratio_over_tau``, ``ratio_over_T``, ``at_bound`` (the optimum runs to the
    edge of the search box, there ``alpha -> 0``) and ``identified``. ``value_matrix`` and
    ``mask_query`` vary two choices of the limit
    (:class:`topicmech.theory.TiedAttentionLimitObjective`).
    """
    v = check_positive_int("words_per_topic", words_per_topic)
    rows = []
    for T in num_topics:
        for tau in topics_per_doc:
            if tau >= T:
                continue
            o = theory.tied_attention_optimum(Setting(T, v, tau, math.inf, masking=masking,
                                                      attend_to_masked=attend_to_masked),
                                              value_matrix=value_matrix, mask_query=mask_query)
            rows.append({"num_topics": int(T), "topics_per_doc": int(tau), "alpha": o.alpha, "beta": o.beta,
                         "weighted_ratio": o.weighted_ratio, "ratio_over_tau": o.weighted_ratio / tau,
                         "ratio_over_T": o.weighted_ratio / T, "at_bound": o.at_bound, "identified": o.identified})
    return rows


# ---- stored multi-seed evidence (scripts/results/ch5_stage2_seeds.py) -------------------------------
def run_metrics(model: OneLayerTransformer, history: History, heldout: torch.Tensor, topic: torch.Tensor, *,
                prefix: str = "") -> dict[str, float]:
    """What chapter 5 reads off one stage-2 run, as ``{prefix + metric: number}``.

    ``heldout`` (shape ``(B, N)``) are unmasked documents never seen in training and ``topic`` the
    topic of each word (shape ``(V,)``). Metrics: ``topic_ratio``, ``self_rel`` and ``word_rel``
    (attention to the query's own position and to copies of its word, over that to a same-topic
    token), ``self`` (attention to its own position, times ``N``); the same-topic and same-word
    contrasts of ``A`` at the end (``topic_final``, ``word_final``), the peak of the same-topic one
    over its end (``topic_peak_over_final``) and ``copier`` (the same-word contrast ends above five
    times the same-topic one).
    """
    with torch.no_grad():
        att = attention_by_relation(model.attention_pattern(heldout), heldout, topic)
    topic_c, word_c = history.probe("same_topic"), history.probe("same_word")
    final = float(topic_c[-1])
    out = {"topic_ratio": att.topic_ratio, "self": att.self_, "self_rel": att.self_ / att.same_topic,
           "word_rel": att.same_word / att.same_topic, "topic_final": final, "word_final": float(word_c[-1]),
           "topic_peak_over_final": float(np.max(topic_c)) / final if final > 0 else math.inf,
           "copier": bool(word_c[-1] > 5 * final)}
    return {prefix + k: (float(v) if not isinstance(v, bool) else v) for k, v in out.items()}


def conventions_seed(seed: int, *, heldout_docs: int = 2000, size: str = "quick") -> dict[str, float]:
    """One seed of chapter 5's stage 2 in both key conventions, at the chapter's quick setting
    (``size="quick"``, :meth:`Stage2Setting.quick`) or at the paper's vocabulary
    (``size="full"``, :meth:`Stage2Setting.full`: T = v = 10, N = 64, 800 steps; there the
    same-topic contrast can end below 0, so ``topic_peak_over_final`` is not recorded).

    Trains :func:`run_stage2` at ``seed`` with hidden keys (the released code's convention, metrics
    ``hidden.*``) and with visible keys (the theory's convention, ``visible.*``), and reads each on
    ``heldout_docs`` held-out unmasked documents drawn with seed ``12345 + seed``
    (:func:`run_metrics`); :data:`topicmech.dynamics.CONVENTIONS` names the same two conventions
    ``"code"`` and ``"theory"``. Adds, with hidden keys, the fitted initial growth rate of the
    same-topic contrast over the rate predicted from the exact gradient
    (``hidden.rate_ratio``, window 0.02 to 0.3 of :func:`topicmech.traces.growth_rate`; and
    ``hidden.rate_ratio_early``, window 0.01 to 0.05).
    """
    heldout_docs = check_positive_int("heldout_docs", heldout_docs)
    if size not in ("quick", "full"):
        raise ValueError(f"size must be 'quick' or 'full', got {size!r}")
    make = Stage2Setting.quick if size == "quick" else Stage2Setting.full
    out: dict[str, float] = {}
    for name, visible in (("hidden", False), ("visible", True)):
        config = make(attend_to_masked=visible)
        model, hist = run_stage2(config, seed=seed)
        data = config.topic_model()
        heldout = data.sample(heldout_docs, config.setting.N, seed=12345 + seed)
        metrics = run_metrics(model, hist, heldout, data.topic_of_word, prefix=name + ".")
        if size == "full":  # the same-topic contrast can end below 0: peak / end is no ratio
            metrics.pop(name + ".topic_peak_over_final")
        out.update(metrics)
        if not visible:
            pred = predicted_growth_rate(config.lr, theory.stage2_drive(config.setting), config.setting.D)
            steps, contrast = np.array(hist.probe_step), hist.probe("same_topic")
            out["hidden.rate_ratio"] = growth_rate(steps, contrast) / pred
            out["hidden.rate_ratio_early"] = growth_rate(steps, contrast, 0.01, 0.05) / pred
    return out


def tied_convergence_seed(seed: int, *, doc_lens: Sequence[int], num_docs: Sequence[int], num_topics: int = 8,
                          words_per_topic: int = 3, topics_per_doc: int = 2,
                          conventions: Sequence[str] = ("hidden", "visible")) -> dict[str, float]:
    """The finite-N tied optimum (:func:`topicmech.theory.tied_attention_optimum`) on one sample per
    document length, in both conventions, for the convergence to the N -> inf limit.

    ``seed`` draws the samples; ``num_docs[k]`` documents at ``doc_lens[k]``. Returns
    ``{convention}.N{N}.rho`` and ``.rho_se`` (the weighted ratio and its sandwich standard error),
    ``.alpha`` and ``.beta``, for ``convention`` in ``hidden`` (the released code's) and ``visible``
    (the theory's; :data:`topicmech.dynamics.CONVENTIONS` calls them ``"code"`` and ``"theory"``);
    ``conventions`` picks which of the two to compute.
    """
    if not conventions or any(c not in ("hidden", "visible") for c in conventions):
        raise ValueError(f"conventions must be a non-empty list of 'hidden' and 'visible', got {conventions!r}")
    if len(doc_lens) != len(num_docs) or not len(doc_lens):
        raise ValueError(f"doc_lens and num_docs must be non-empty and of one length, got {doc_lens!r}, "
                         f"{num_docs!r}")
    out: dict[str, float] = {}
    for name, visible in (("hidden", False), ("visible", True)):
        if name not in conventions:
            continue
        for N, n_docs in zip(doc_lens, num_docs):
            s = Setting(num_topics, words_per_topic, topics_per_doc, int(N), attend_to_masked=visible)
            o = theory.tied_attention_optimum(s, seed=seed, num_docs=int(n_docs))
            key = f"{name}.N{int(N)}."
            out.update({key + "rho": o.weighted_ratio, key + "rho_se": o.weighted_ratio_se,
                        key + "alpha": o.alpha, key + "beta": o.beta})
    return out
