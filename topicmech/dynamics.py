"""Training dynamics: probes tracked during training and stage timing.

Probes plug into ``topicmech.train.train(probes=...)``; attention statistics are multiples
of uniform attention, and ``A = model.key_query_matrix()`` is indexed ``A[key, query]``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from . import theory
from .data import SimplifiedTopicModel, TopicModel, bert_mask, check_topic_model
from .losses import mlm_loss
from .model import OneLayerTransformer
from .probes import AttentionByRelation, attention_by_relation, block_means, relation_reader, topic_contrasts
from .setting import Masking, Setting
from .stage1 import sigma_range
from .train import History
from .train import train as _train
from .utils import as_float64, check_positive_int

__all__ = [
    "value_gap", "heldout_batch", "attention_stats", "standard_probes", "gradient_norms",
    "GradientScaling", "gradient_scaling", "loglog_slope", "closing_step", "reaching_step", "StageTimes",
    "stage_times", "growth_rate", "topic_growth_eigenvalue", "predicted_growth_rate", "JointRun", "train_joint",
    "run_summary",
]

_Loss = Literal["squared", "cross_entropy"]
_Trace = Sequence[float] | np.ndarray


def _as_float_tensor(x: torch.Tensor | np.ndarray, name: str) -> torch.Tensor:
    try:
        x = x if isinstance(x, torch.Tensor) else np.asarray(x, dtype=np.float64)
        return torch.as_tensor(x).detach().double().cpu()
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an array, got {type(x).__name__}") from None


def value_gap(model: nn.Module, W_star: torch.Tensor | np.ndarray, *, ignore_mask_column: bool = False) -> float:
    """Relative distance ``||W - W*||_F / ||W*||_F`` of ``W = model.value_matrix()`` to ``W*`` (1 at ``W = 0``).

    ``ignore_mask_column`` leaves out the input-``[MASK]`` column, never trained when
    ``attend_to_masked=False``.
    """
    if not hasattr(model, "value_matrix"):
        raise ValueError(f"model must have a value_matrix() method, got {type(model).__name__}")
    W = model.value_matrix().detach().to(torch.float64).cpu()                 # (D, D)
    Ws = _as_float_tensor(W_star, "W_star")
    if Ws.shape != W.shape:
        raise ValueError(f"W_star must have shape {tuple(W.shape)}, got {tuple(Ws.shape)}")
    if ignore_mask_column:
        W, Ws = W[:, :-1], Ws[:, :-1]
    norm = float(Ws.norm())
    if not norm > 0:
        raise ValueError("W_star must not be the zero matrix")
    return float((W - Ws).norm()) / norm


def heldout_batch(
    topic_model: TopicModel, num_docs: int, doc_len: int, *, seed: int = 12345, corrupt: bool = False,
    mask_prob: float = 0.15, keep_prob: float = 0.1, random_prob: float = 0.1,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A fixed batch ``(inputs, selected)``, shape ``(num_docs, doc_len)``, on which to read attention.

    ``corrupt=False`` (default, as the authors' inspection script) gives clean documents and
    ``selected=None``; ``corrupt=True`` applies :func:`topicmech.data.bert_mask` with
    ``mask_prob``, ``keep_prob``, ``random_prob``. The default ``seed`` is shared by every run.
    """
    check_topic_model(topic_model)
    docs = topic_model.sample(num_docs, doc_len, seed)                         # (n, N)
    if not corrupt:
        return docs, None
    return bert_mask(docs, topic_model.vocab_size, mask_prob, keep_prob, random_prob, seed + 1)


def attention_stats(
    model: nn.Module, inputs: torch.Tensor, topic_of_word: torch.Tensor, selected: torch.Tensor | None = None,
) -> AttentionByRelation:
    """:func:`topicmech.probes.attention_by_relation` of ``model.attention_pattern(inputs, selected)``."""
    with torch.no_grad():
        pattern = model.attention_pattern(inputs, selected)                    # (B, query, key)
    return attention_by_relation(pattern, inputs, topic_of_word)


def standard_probes(
    topic_model: TopicModel, W_star: torch.Tensor | np.ndarray | None,
    heldout: tuple[torch.Tensor, torch.Tensor | None],
) -> dict[str, Callable[[nn.Module], Any]]:
    """The probes chapter 6 tracks, as a dict for ``topicmech.train.train(probes=...)``.

    ``"value_gap"`` (:func:`value_gap` to ``W_star``, left out if None; no ``[MASK]`` column
    when masked keys are hidden), ``"value_topic_gap"`` (same- minus different-topic mean of
    ``W^V``), ``"kq_norm"`` (``||A||_F``), ``"kq_same_word"``, ``"kq_same_topic"``
    (:func:`topicmech.probes.topic_contrasts` of ``A``), and on the batch ``heldout =
    (inputs, selected)`` (e.g. :func:`heldout_batch`) ``"attention"`` (the
    :data:`topicmech.probes.ATTENTION_FIELDS` as an array) and ``"attn_contrast"`` (same- minus different-topic).
    """
    check_topic_model(topic_model)
    if not (isinstance(heldout, tuple) and len(heldout) == 2 and isinstance(heldout[0], torch.Tensor)):
        raise ValueError("heldout must be a tuple (inputs, selected) as returned by heldout_batch")
    topic = topic_model.topic_of_word
    inputs, selected = heldout
    probes: dict[str, Callable[[nn.Module], Any]] = {}
    if W_star is not None:
        Ws = _as_float_tensor(W_star, "W_star")
        probes["value_gap"] = lambda m: value_gap(m, Ws, ignore_mask_column=not getattr(m, "attend_to_masked", True))
    probes["value_topic_gap"] = lambda m: block_means(m.value_matrix(), topic).topic_gap
    probes["kq_norm"] = lambda m: float(m.key_query_matrix().norm())
    probes["kq_same_word"] = lambda m: topic_contrasts(m.key_query_matrix(), topic)["same_word"]
    probes["kq_same_topic"] = lambda m: topic_contrasts(m.key_query_matrix(), topic)["same_topic"]
    cache: dict[str, Any] = {"model": None, "params": [], "value": None}
    read = relation_reader(inputs, topic)                                       # the batch's pairs, classified once

    def attention(m: nn.Module) -> AttentionByRelation:
        # one forward pass for both attention probes, redone for another model or when a parameter's
        # values differ from the copies kept at the last pass
        params = [p.detach() for p in m.parameters()]
        if cache["model"] is not m or len(params) != len(cache["params"]) \
                or not all(torch.equal(p, q) for p, q in zip(params, cache["params"])):
            with torch.no_grad():
                cache["model"], cache["params"] = m, [p.clone() for p in params]
                cache["value"] = read(m.attention_pattern(inputs, selected))
        return cache["value"]

    probes["attention"] = lambda m: np.asarray(attention(m), dtype=float)
    probes["attn_contrast"] = lambda m: attention(m).same_topic - attention(m).diff_topic
    return probes


def gradient_norms(
    model: nn.Module, inputs: torch.Tensor, selected: torch.Tensor, targets: torch.Tensor, *, loss: _Loss = "squared",
) -> dict[str, float]:
    """``||dL/dW||_F`` of the masked-LM ``loss`` for each trained matrix among ``W_E, W_K, W_Q, W_V, W_U``.

    ``inputs`` (corrupted tokens), ``selected`` (loss positions) and ``targets`` (true
    tokens) have shape (batch, N). The parameters and their ``.grad`` are left unchanged.
    """
    names = [n for n in ("W_E", "W_K", "W_Q", "W_V", "W_U")
             if isinstance(getattr(model, n, None), nn.Parameter) and getattr(model, n).requires_grad]
    if not names:
        raise ValueError("model has no trainable matrix among W_E, W_K, W_Q, W_V, W_U")
    if selected.shape != inputs.shape or targets.shape != inputs.shape:
        raise ValueError(f"inputs, selected and targets must share a shape, got {tuple(inputs.shape)}, "
                         f"{tuple(selected.shape)}, {tuple(targets.shape)}")
    if not bool(selected.any()):
        raise ValueError("selected has no selected position")
    grads = torch.autograd.grad(mlm_loss(model(inputs, selected), targets, selected, loss),
                                [getattr(model, n) for n in names])
    return {n: float(g.norm()) for n, g in zip(names, grads)}


@dataclass
class GradientScaling:
    """Gradient norms over initialisation scales (:func:`gradient_scaling`).

    ``norms[name][i]`` is ``||dL/dW||_F`` of ``W_V``, ``W_K`` or ``W_Q`` at ``init_scales[i]``;
    ``slopes[name]`` is its log-log slope against ``init_scales`` (2 means ``O(eps^2)``).
    """

    init_scales: np.ndarray
    norms: dict[str, np.ndarray]
    slopes: dict[str, float]

    def rows(self) -> list[tuple[float, ...]]:
        """Table rows ``(eps, norm of each matrix in the order of self.norms)``."""
        return [(float(e), *(float(n[i]) for n in self.norms.values())) for i, e in enumerate(self.init_scales)]


def gradient_scaling(
    init_scales: Sequence[float], topic_model: TopicModel, doc_len: int, *, num_docs: int = 2000,
    attend_to_masked: bool = False, loss: _Loss = "squared",
    mask_prob: float = 0.15, keep_prob: float = 0.1, random_prob: float = 0.1, seed: int = 0, model_seed: int = 0,
) -> GradientScaling:
    """``||dL/dW^V||``, ``||dL/dW^K||``, ``||dL/dW^Q||`` at initialisation, for several ``eps``.

    Each of the (at least two, positive) ``init_scales`` initialises a learned model with
    ``init_scale=eps`` and the same ``model_seed``; gradients are taken on one corrupted batch
    of ``num_docs`` documents (``seed``). At small ``eps`` the slopes are near 0 for ``W_V``
    and near 2 for ``W_K`` and ``W_Q``.
    """
    scales = np.asarray(list(init_scales), dtype=float)
    if scales.ndim != 1 or scales.size < 2 or not np.all(np.isfinite(scales)) or np.any(scales <= 0):
        raise ValueError(f"init_scales must hold at least two positive floats, got {init_scales!r}")
    check_topic_model(topic_model)
    docs = topic_model.sample(num_docs, doc_len, seed)                          # (n, N)
    inputs, selected = bert_mask(docs, topic_model.vocab_size, mask_prob, keep_prob, random_prob, seed + 1)
    rows = []
    for eps in scales:
        model = OneLayerTransformer(topic_model.num_tokens, attention="learned", value="learned",
                                    init_scale=float(eps), attend_to_masked=attend_to_masked, seed=model_seed)
        rows.append(gradient_norms(model, inputs, selected, docs, loss=loss))
    norms = {k: np.array([r[k] for r in rows]) for k in ("W_V", "W_K", "W_Q")}
    return GradientScaling(scales, norms, {k: loglog_slope(scales, v) for k, v in norms.items()})


def loglog_slope(x: _Trace, y: _Trace) -> float:
    """Least-squares slope ``p`` of ``log y`` against ``log x`` (``y ~ x^p``), for positive 1-D ``x``, ``y``."""
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if xs.shape != ys.shape or xs.ndim != 1 or xs.size < 2:
        raise ValueError(f"x and y must be 1-D of the same length >= 2, got shapes {xs.shape} and {ys.shape}")
    if np.any(xs <= 0) or np.any(ys <= 0):
        raise ValueError("x and y must be positive for a log-log slope")
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def _trace(steps: _Trace, values: _Trace, fraction: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    s, v = np.asarray(steps), np.asarray(values, dtype=float)
    if s.ndim != 1 or v.ndim != 1 or s.shape != v.shape or s.size == 0:
        raise ValueError(f"steps and values must be 1-D, non-empty, of the same length, got {s.shape}, {v.shape}")
    if not np.all(np.isfinite(v)):
        raise ValueError("values must be finite")
    if fraction is not None and not (0.0 < float(fraction) <= 1.0):
        raise ValueError(f"fraction must be in (0, 1], got {fraction!r}")
    return s, v


def closing_step(steps: _Trace, values: _Trace, fraction: float = 0.9, target: float | None = None) -> int:
    """First step at which a shrinking trace (e.g. ``"value_gap"``) has closed ``fraction`` of its gap to ``target``.

    The threshold is ``target + (1 - fraction) * (values[0] - target)``, ``0 < fraction <= 1``
    (``steps[0]`` if the trace starts at or below it). ``target`` defaults to ``min(values)``, the
    plateau actually reached (under SGD noise the gap never reaches 0); the minimum makes the
    step conservative (late).
    """
    s, v = _trace(steps, values, fraction)
    f = float(fraction)
    t = float(v.min()) if target is None else float(target)
    hit = np.nonzero(v <= t + (1.0 - f) * (v[0] - t))[0]
    if hit.size == 0:
        raise ValueError(f"the trace never closes {f:.0%} of its gap to target={t!r}")
    return int(s[hit[0]])


def reaching_step(
    steps: _Trace, values: _Trace, fraction: float = 0.1, reference: Literal["final", "max"] | float = "final",
) -> int | None:
    """First step at which a growing trace (e.g. ``"attn_contrast"``) has covered ``fraction`` of its rise.

    The threshold is ``values[0] + fraction * (ref - values[0])``, ``0 < fraction <= 1``, with
    ``ref`` given by ``reference``: ``"final"``, the last value (a run stopped before
    saturation gives an earlier step), ``"max"``, the largest value, or a float. None when the
    trace never rises above its start.
    """
    s, v = _trace(steps, values, fraction)
    if reference == "final":
        ref = float(v[-1])
    elif reference == "max":
        ref = float(v.max())
    elif isinstance(reference, (int, float)) and not isinstance(reference, bool):
        ref = float(reference)
    else:
        raise ValueError(f"reference must be 'final', 'max' or a float, got {reference!r}")
    if not ref > v[0]:
        return None
    hit = np.nonzero(v >= v[0] + float(fraction) * (ref - v[0]))[0]
    return int(s[hit[0]]) if hit.size else None


@dataclass(frozen=True)
class StageTimes:
    """When each stage happens: ``W^V`` has closed ``value_fraction`` of its gap at ``value_step``.

    The attention contrast has covered ``attention_fraction`` of its rise at ``attention_step``
    (None if it never rises).
    """

    value_step: int
    attention_step: int | None
    value_fraction: float = 0.9
    attention_fraction: float = 0.1

    @property
    def ratio(self) -> float:
        """``attention_step / value_step`` (inf if ``value_step == 0``, nan if attention never rises)."""
        if self.attention_step is None:
            return math.nan
        return math.inf if self.value_step == 0 else self.attention_step / self.value_step


def stage_times(
    history: History, *, value_fraction: float = 0.9, attention_fraction: float = 0.1,
    reference: Literal["final", "max"] | float = "final",
    value_probe: str = "value_gap", attention_probe: str = "attn_contrast",
) -> StageTimes:
    """Stage times of a run tracked with :func:`standard_probes`.

    :func:`closing_step` of ``value_probe`` at ``value_fraction`` and :func:`reaching_step` of
    ``attention_probe`` at ``attention_fraction`` with ``reference``.
    """
    if not isinstance(history, History):
        raise ValueError(f"history must be a topicmech.train.History, got {type(history).__name__}")
    steps = np.asarray(history.probe_step)
    return StageTimes(closing_step(steps, history.probe(value_probe), value_fraction),
                      reaching_step(steps, history.probe(attention_probe), attention_fraction, reference),
                      value_fraction, attention_fraction)


def growth_rate(steps: _Trace, values: _Trace, low: float, high: float) -> float:
    """Growth rate per step: slope of ``log(values)`` over the first window where ``low <= values <= high``.

    The window runs from the first value ``>= low`` (``0 < low < high``) to the last ``<= high`` after it.
    """
    s, v = _trace(steps, values)
    if not (0 < low < high):
        raise ValueError(f"need 0 < low < high, got low={low!r}, high={high!r}")
    start = np.nonzero(v >= low)[0]
    if start.size == 0:
        raise ValueError(f"the trace never reaches low={low!r}")
    i0 = int(start[0])
    above = np.nonzero(v[i0:] > high)[0]
    i1 = i0 + (int(above[0]) if above.size else v.size - i0)
    if i1 - i0 < 2:
        raise ValueError(f"fewer than two points between low={low!r} and high={high!r}")
    return float(np.polyfit(s[i0:i1].astype(float), np.log(v[i0:i1]), 1)[0])


def topic_growth_eigenvalue(G: np.ndarray | torch.Tensor, topic_of_word: torch.Tensor | np.ndarray) -> float:
    """Eigenvalue of ``-G`` on the topic contrasts, after averaging ``G = dL/dA`` over the symmetry orbits.

    With the orbit means ``G_diag``, ``G_same``, ``G_diff`` (:func:`topicmech.probes.block_means`
    of ``G[key, query]``), ``G`` acts on vectors constant within topics and summing to zero as
    ``(G_diag - G_same) + v (G_same - G_diff)``; the result is minus that, positive when gradient
    descent raises same-topic scores. Averaging first removes most Monte-Carlo noise.
    """
    m = block_means(G, topic_of_word)
    counts = np.bincount(torch.as_tensor(topic_of_word).cpu().numpy())
    if counts.size < 2 or not np.all(counts == counts[0]) or counts[0] < 2:
        raise ValueError("topic_of_word must describe at least two topics of equal size >= 2")
    return -theory.topic_eigenvalue(m.diag, m.same_topic, m.diff_topic, int(counts[0]))


def predicted_growth_rate(
    G: np.ndarray | torch.Tensor, lr: float, d_model: int, topic_of_word: torch.Tensor | np.ndarray | None = None,
) -> float:
    """Stage-2 growth rate ``2 lr sigma / sqrt(d)`` per step of ``A = W_K^T W_Q / sqrt(d)`` under plain SGD.

    ``G = dL/dA`` at uniform attention (e.g. :func:`topicmech.theory.key_query_gradient`);
    ``sigma`` is :func:`topic_growth_eigenvalue` with ``topic_of_word``, else the top singular
    value of ``-G``. ``W_K``, ``W_Q`` grow like ``exp(lr sigma t / sqrt(d))``, their product twice as fast.
    """
    g = as_float64(G)
    if g.ndim != 2 or g.shape[0] != g.shape[1]:
        raise ValueError(f"G must be a square matrix, got shape {g.shape}")
    if isinstance(lr, bool) or not (isinstance(lr, (int, float)) and lr > 0 and math.isfinite(lr)):
        raise ValueError(f"lr must be a positive float, got {lr!r}")
    d = check_positive_int("d_model", d_model)
    sigma = float(np.linalg.norm(g, 2)) if topic_of_word is None else topic_growth_eigenvalue(g, topic_of_word)
    return 2.0 * float(lr) * sigma / math.sqrt(d)


@dataclass
class JointRun:
    """Result of :func:`train_joint`: the model, its ``history`` (loss and :func:`standard_probes`), and more.

    ``W_star`` is the reference of ``"value_gap"`` and ``times`` the :func:`stage_times` (both
    None without a closed form); ``config`` holds the arguments of the run.
    """

    model: OneLayerTransformer
    history: History
    W_star: np.ndarray | None
    times: StageTimes | None
    config: dict = field(default_factory=dict)

    def probe(self, name: str) -> np.ndarray:
        """Shortcut for ``self.history.probe(name)``."""
        return self.history.probe(name)

    @property
    def steps(self) -> np.ndarray:
        """Probe steps, shape ``(k,)``."""
        return np.asarray(self.history.probe_step)


def train_joint(
    topic_model: TopicModel, doc_len: int, *, steps: int, optimizer: Literal["sgd", "adam"] = "sgd",
    lr: float | None = None, init_scale: float = 0.1, attend_to_masked: bool = False, batch_size: int = 128,
    loss: _Loss = "squared", mask_prob: float = 0.15, keep_prob: float = 0.1, random_prob: float = 0.1,
    seed: int = 0, probe_every: int = 20, num_heldout: int = 128, heldout_seed: int = 12345,
    W_star: np.ndarray | None = None,
) -> JointRun:
    """Train ``W^V``, ``W^K`` and ``W^Q`` together from a small initialisation, tracking the two stages.

    A one-hot, identity-head :class:`topicmech.model.OneLayerTransformer` with learned attention
    and value (entries of standard deviation ``init_scale``) is trained by
    :func:`topicmech.train.train` on fresh documents, seeded by ``seed`` like the
    initialisation, with :func:`standard_probes` read every ``probe_every`` steps on a clean
    :func:`heldout_batch` of ``num_heldout`` documents.

    Default ``lr``: Adam 1e-2; SGD :func:`topicmech.theory.stage1_sgd_lr` (``0.5 / lambda_max``
    squared, ``2 / lambda_max`` cross-entropy), ``lambda_max`` the top eigenvalue of the exact stage-1 ``Sigma``
    (:func:`topicmech.stage1.sigma_range`; simplified or LDA data only). Default ``W_star``:
    :func:`topicmech.theory.optimal_value_matrix` for a
    :class:`topicmech.data.SimplifiedTopicModel`, else none (no ``"value_gap"``, no stage times).
    """
    check_topic_model(topic_model)
    doc_len = check_positive_int("doc_len", doc_len)
    masking = dict(mask_prob=mask_prob, keep_prob=keep_prob, random_prob=random_prob)
    if lr is None and optimizer == "adam":
        lr = 1e-2
    elif lr is None:
        lam_max = sigma_range(topic_model, doc_len, attend_to_masked=attend_to_masked, needs="lr", **masking)[1]
        lr = theory.stage1_sgd_lr(lam_max, loss=loss)
    if W_star is None and isinstance(topic_model, SimplifiedTopicModel):
        W_star = theory.optimal_value_matrix(Setting(topic_model.num_topics, topic_model.words_per_topic,
                                                     topic_model.topics_per_doc, doc_len,
                                                     masking=Masking(**masking), attend_to_masked=attend_to_masked))
    model = OneLayerTransformer(topic_model.num_tokens, attention="learned", value="learned",
                                init_scale=init_scale, attend_to_masked=attend_to_masked, seed=seed)
    probes = standard_probes(topic_model, W_star, heldout_batch(topic_model, num_heldout, doc_len, seed=heldout_seed))
    config = dict(doc_len=doc_len, steps=steps, optimizer=optimizer, lr=lr, init_scale=init_scale,
                  attend_to_masked=attend_to_masked, batch_size=batch_size, loss=loss, **masking, seed=seed,
                  probe_every=probe_every)
    history = _train(model, topic_model, steps=steps, batch_size=batch_size, doc_len=doc_len, loss=loss,
                     optimizer=optimizer, lr=lr, seed=seed, probes=probes, probe_every=probe_every, **masking)
    times = stage_times(history) if W_star is not None else None
    return JointRun(model, history, None if W_star is None else np.asarray(W_star), times, config)


def run_summary(run: JointRun, *, plateau_window: int = 500, final_window: int = 200) -> dict[str, float]:
    """Stage times and end-of-run statistics of a run with stage times, as one flat dict.

    ``"t_V"``, ``"t_A"`` (nan if attention never rises), ``"ratio"`` (``t_A / t_V``),
    ``"A_growth_stage1"`` (``||A||`` at ``t_V`` over step 0), ``"topic_attention_ratio"`` and
    ``"self_attention_ratio"`` (same- over different-topic, own position over same-topic
    attention at the end), ``"plateau_loss"`` (mean over ``plateau_window`` steps from ``t_V + 50``),
    ``"final_loss"`` (last ``final_window`` steps), ``"plateau_gap"``, ``"final_gap"`` (lowest, last ``W^V`` gap).
    """
    if run.times is None:
        raise ValueError("run has no stage times (it was trained without W_star)")
    plateau_window = check_positive_int("plateau_window", plateau_window)
    final_window = check_positive_int("final_window", final_window)
    s, att, kq, gap = run.steps, run.probe("attention"), run.probe("kq_norm"), run.probe("value_gap")
    t_v = run.times.value_step
    loss = np.asarray(run.history.loss, dtype=float)
    plateau = loss[t_v + 50: t_v + 50 + plateau_window]
    return {
        "t_V": float(t_v),
        "t_A": math.nan if run.times.attention_step is None else float(run.times.attention_step),
        "ratio": run.times.ratio,
        "A_growth_stage1": float(np.interp(t_v, s, kq) / kq[0]),
        "topic_attention_ratio": float(att[-1, 2] / att[-1, 3]),
        "self_attention_ratio": float(att[-1, 0] / att[-1, 2]),
        "plateau_loss": float(plateau.mean()) if plateau.size else math.nan,
        "final_loss": float(loss[-final_window:].mean()),
        "plateau_gap": float(gap.min()),
        "final_gap": float(gap[-1]),
    }
