"""Training dynamics: probes tracked during training and stage timing.

Probes plug into ``topicmech.train.train(probes=...)``; attention statistics are multiples
of uniform attention, and ``A = model.key_query_matrix()`` is indexed ``A[key, query]``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from . import theory
from .data import (
    HELDOUT_SEED,
    SimplifiedTopicModel,
    TopicModel,
    bert_mask,
    check_topic_model,
    heldout_batch,
    topic_model_for,
)
from .losses import mlm_loss
from .model import OneLayerTransformer
from .probes import (
    AttentionByRelation,
    BlockMeans,
    attention_by_relation,
    block_means,
    growing_topic_contrast,
    relation_reader,
    topic_contrasts,
)
from .setting import Setting
from .traces import closing_step, growth_rate, loglog_slope, reaching_step
from .train import History
from .train import train as _train
from .utils import check_float, check_matrix, check_positive_int

__all__ = [
    "value_gap", "attention_stats", "standard_probes", "gradient_norms",
    "GradientScaling", "gradient_scaling", "StageTimes", "stage_times", "JointRun", "train_joint",
    "run_summary", "joint_metrics", "weight_probes", "weight_timings", "stage_metrics", "curve_timings",
    "two_stage_seed",
    "CONVENTIONS", "CURVE_EVERY", "onset_amplitude", "scale_sweep_seed", "SWEEP_METRICS",
    "uniform_descent_gap",
]

_Loss = Literal["squared", "cross_entropy"]


def _as_float_tensor(x: torch.Tensor | np.ndarray, name: str) -> torch.Tensor:
    return torch.from_numpy(check_matrix(name, x))


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


def attention_stats(
    model: nn.Module, inputs: torch.Tensor, topic_of_word: torch.Tensor, selected: torch.Tensor | None = None,
) -> AttentionByRelation:
    """:func:`topicmech.probes.attention_by_relation` of ``model.attention_pattern(inputs, selected)``.

    For the package's one-layer and two-layer models; not :func:`topicmech.pretrained.attention_stats`,
    which reads a pretrained encoder on real text."""
    with torch.no_grad():
        pattern = model.attention_pattern(inputs, selected)                    # (B, query, key)
    return attention_by_relation(pattern, inputs, topic_of_word)


def _word_gap(means: BlockMeans) -> float:
    """Diagonal minus same-topic mean of a :class:`BlockMeans`."""
    return means.diag - means.same_topic


def standard_probes(
    topic_model: TopicModel, W_star: torch.Tensor | np.ndarray | None,
    heldout: tuple[torch.Tensor, torch.Tensor | None],
) -> dict[str, Callable[[nn.Module], Any]]:
    """The probes chapter 6 tracks, as a dict for ``topicmech.train.train(probes=...)``.

    ``"value_gap"`` (:func:`value_gap` to ``W_star``, left out if None; no ``[MASK]`` column
    when masked keys are hidden), ``"value_topic_gap"`` (same- minus different-topic mean of
    ``W^V``), ``"value_word_gap"`` (its diagonal minus same-topic mean), ``"kq_norm"`` (``||A||_F``), ``"kq_same_word"``, ``"kq_same_topic"``
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
    probes["value_word_gap"] = lambda m: _word_gap(block_means(m.value_matrix(), topic))
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


def weight_probes(model: nn.Module) -> dict[str, Callable[[nn.Module], float]]:
    """Norms of ``W^V``, ``W^K``, ``W^Q`` and their distances from where they stand now (the start).

    ``"W_V_norm"``, ``"W_K_norm"``, ``"W_Q_norm"`` (``||W||_F``) and ``"W_V_move"``,
    ``"W_K_move"``, ``"W_Q_move"`` (``||W - W(0)||_F``, ``W(0)`` a copy of ``model``'s matrices
    taken by this call), as a dict for ``topicmech.train.train(probes=...)``.
    """
    names = ("W_V", "W_K", "W_Q")
    missing = [n for n in names if not isinstance(getattr(model, n, None), torch.Tensor)]
    if missing:
        raise ValueError(f"model must have the matrices W_V, W_K, W_Q; {type(model).__name__} lacks {missing}")
    start = {n: getattr(model, n).detach().clone() for n in names}
    probes: dict[str, Callable[[nn.Module], float]] = {}
    for n in names:
        probes[f"{n}_norm"] = lambda m, n=n: float(getattr(m, n).detach().norm())
        probes[f"{n}_move"] = lambda m, n=n: float((getattr(m, n).detach() - start[n]).norm())
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
    init_scales: Sequence[float], setting: Setting, *, topic_model: TopicModel | None = None, num_docs: int = 2000,
    loss: _Loss = "squared", seed: int = 0, model_seed: int = 0,
) -> GradientScaling:
    """``||dL/dW^V||``, ``||dL/dW^K||``, ``||dL/dW^Q||`` at initialisation, for several ``eps``.

    Each of the (at least two, positive) ``init_scales`` initialises a learned model with
    ``init_scale=eps`` and the same ``model_seed``; gradients are taken on one batch of
    ``num_docs`` documents (``seed``) corrupted as in ``setting``, whose convention the model uses;
    the data is ``topic_model`` if given, else the setting's (:func:`topicmech.data.topic_model_for`). At small ``eps`` the slopes are near 0 for ``W_V``
    and near 2 for ``W_K`` and ``W_Q``.
    """
    scales = np.asarray(list(init_scales), dtype=float)
    if scales.ndim != 1 or scales.size < 2 or not np.all(np.isfinite(scales)) or np.any(scales <= 0):
        raise ValueError(f"init_scales must hold at least two positive floats, got {init_scales!r}")
    topic_model = topic_model_for(setting, topic_model)
    docs = topic_model.sample(num_docs, setting.doc_len, seed)                  # (n, N)
    inputs, selected = bert_mask(docs, topic_model.vocab_size, setting.masking, seed=seed + 1)
    rows = []
    for eps in scales:
        model = OneLayerTransformer(topic_model.num_tokens, attention="learned", value="learned",
                                    init_scale=float(eps), attend_to_masked=setting.attend_to_masked, seed=model_seed)
        rows.append(gradient_norms(model, inputs, selected, docs, loss=loss))
    norms = {k: np.array([r[k] for r in rows]) for k in ("W_V", "W_K", "W_Q")}
    return GradientScaling(scales, norms, {k: loglog_slope(scales, v) for k, v in norms.items()})


@dataclass(frozen=True)
class StageTimes:
    """When each stage happens: ``W^V`` has closed ``value_fraction`` of its gap at ``value_step``.

    The attention contrast has covered ``attention_fraction`` of its rise at ``attention_step``
    (None if it never rises). For synthetic runs; not :class:`topicmech.realtext.StageTimes`,
    chapter 9's rule on a word-level model of real text.
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
    """Stage times of a run tracked with :func:`standard_probes` (not
    :func:`topicmech.realtext.stage_times`, chapter 9's rule on real text).

    :func:`topicmech.traces.closing_step` of ``value_probe`` at ``value_fraction`` and
    :func:`topicmech.traces.reaching_step` of
    ``attention_probe`` at ``attention_fraction`` with ``reference``.
    """
    if not isinstance(history, History):
        raise ValueError(f"history must be a topicmech.train.History, got {type(history).__name__}")
    steps = np.asarray(history.probe_step)
    return StageTimes(closing_step(steps, history.probe(value_probe), value_fraction),
                      reaching_step(steps, history.probe(attention_probe), attention_fraction, reference),
                      value_fraction, attention_fraction)


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

    def truncated(self, steps: int) -> JointRun:
        """The run as it stood after ``steps`` training steps: loss and probes up to there, stage
        times recomputed (``model`` stays the final model). Training draws fresh documents from
        the step's seed, so this equals a run stopped at ``steps``."""
        steps = check_positive_int("steps", steps)
        h = self.history
        if steps > h.step[-1]:
            raise ValueError(f"steps={steps} is beyond the run's {h.step[-1]} steps")
        k = int(np.searchsorted(np.asarray(h.probe_step), steps, side="right"))
        n = int(np.searchsorted(np.asarray(h.step), steps, side="right"))
        cut = History(h.step[:n], h.loss[:n], h.probe_step[:k], {name: v[:k] for name, v in h.probes.items()})
        times = stage_times(cut) if self.times is not None else None
        return JointRun(self.model, cut, self.W_star, times, {**self.config, "steps": steps})


def _initial_model(num_tokens: int, init_scale: float, attend_to_masked: bool, seed: int) -> OneLayerTransformer:
    """The model :func:`train_joint` starts from."""
    return OneLayerTransformer(num_tokens, attention="learned", value="learned", init_scale=init_scale,
                               attend_to_masked=attend_to_masked, seed=seed)


def train_joint(
    setting: Setting, *, topic_model: TopicModel | None = None, steps: int,
    optimizer: Literal["sgd", "adam"] = "sgd", lr: float | None = None, init_scale: float = 0.1,
    batch_size: int = 128, loss: _Loss = "squared", seed: int = 0, probe_every: int = 20, num_heldout: int = 128,
    heldout_seed: int = HELDOUT_SEED, W_star: np.ndarray | None = None,
) -> JointRun:
    """Train ``W^V``, ``W^K`` and ``W^Q`` together from a small initialisation, tracking the two stages.

    A one-hot, identity-head :class:`topicmech.model.OneLayerTransformer` with learned attention
    and value (entries of standard deviation ``init_scale``) is trained by
    :func:`topicmech.train.train` on fresh documents of ``setting`` (data: ``topic_model`` if
    given, else the setting's simplified model), seeded by ``seed`` like the initialisation, with
    :func:`standard_probes` read every ``probe_every`` steps on a clean
    :func:`topicmech.data.heldout_batch` of ``num_heldout`` documents, and the
    :func:`weight_probes` (norms of the three matrices and their distances from the start).

    Default ``lr``: Adam 1e-2; SGD :func:`topicmech.theory.stage1_sgd_lr` (``0.5 / lambda_max``
    squared, ``2 / lambda_max`` cross-entropy), ``lambda_max`` the top eigenvalue of the exact stage-1 ``Sigma``
    (:func:`topicmech.theory.sigma_range`; simplified or LDA data only). Default ``W_star``:
    :func:`topicmech.theory.optimal_value_matrix` for a
    :class:`topicmech.data.SimplifiedTopicModel`, else none (no ``"value_gap"``, no stage times).
    """
    topic_model = topic_model_for(setting, topic_model)
    doc_len, attend_to_masked = setting.doc_len, setting.attend_to_masked
    if lr is None and optimizer == "adam":
        lr = 1e-2
    elif lr is None:
        lam_max = theory.sigma_range(setting, topic_model=topic_model, needs="lr")[1]
        lr = theory.stage1_sgd_lr(lam_max, loss=loss)
    if W_star is None and isinstance(topic_model, SimplifiedTopicModel):
        W_star = theory.optimal_value_matrix(setting)
    model = _initial_model(topic_model.num_tokens, init_scale, attend_to_masked, seed)
    probes = standard_probes(topic_model, W_star, heldout_batch(topic_model, num_heldout, doc_len, seed=heldout_seed))
    probes.update(weight_probes(model))
    config = dict(doc_len=doc_len, steps=steps, optimizer=optimizer, lr=lr, init_scale=init_scale,
                  attend_to_masked=attend_to_masked, batch_size=batch_size, loss=loss,
                  **setting.masking.as_dict(), seed=seed, probe_every=probe_every)
    history = _train(model, topic_model, steps=steps, batch_size=batch_size, doc_len=doc_len, loss=loss,
                     optimizer=optimizer, lr=lr, seed=seed, probes=probes, probe_every=probe_every,
                     masking=setting.masking)
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


def joint_metrics(run: JointRun, *, uniform_loss: float | None = None) -> dict[str, float]:
    """:func:`run_summary` of a run with stage times, plus what chapter 6 reads off its end state.

    Added: ``"kq_same_word"``, ``"kq_same_topic"`` (final score contrasts of ``A``),
    ``"peak_topic_attention"``, ``"final_topic_attention"``, ``"topic_fall"`` (peak minus final
    same-topic attention), ``"copier"`` (1.0 when self over same-topic attention exceeds 1.5 and
    same-topic attention fell more than 0.1 from its peak, else 0.0), ``"gap_rise"``
    (``final_gap - plateau_gap``), ``"loss_drop"`` (``plateau_loss - final_loss``),
    ``"early_growth"`` and ``"topical_share"`` (``||A||`` at step 50 over step 0, and the topic
    contrast per unit norm of ``A`` at step 50 over its final value), ``"growth_rate"``
    (:func:`topicmech.traces.growth_rate` of the topic contrast from 0.02 to 0.3; nan if it
    never gets there) and, given ``uniform_loss``, ``"loss_below_uniform"``.
    """
    out = run_summary(run)
    s, att = run.steps, run.probe("attention")
    norm, topic = run.probe("kq_norm"), run.probe("kq_same_topic")
    peak = float(att[:, 2].max())
    out.update(
        kq_same_word=float(run.probe("kq_same_word")[-1]), kq_same_topic=float(topic[-1]),
        peak_topic_attention=peak, final_topic_attention=float(att[-1, 2]), topic_fall=peak - float(att[-1, 2]),
        copier=float(out["self_attention_ratio"] > 1.5 and peak - att[-1, 2] > 0.1),
        gap_rise=out["final_gap"] - out["plateau_gap"], loss_drop=out["plateau_loss"] - out["final_loss"],
        early_growth=float(np.interp(50, s, norm) / norm[0]),
        topical_share=float(np.interp(50, s, topic / norm) / (topic[-1] / norm[-1])),
    )
    try:
        out["growth_rate"] = growth_rate(s, topic, 0.02, 0.3)
    except ValueError:
        out["growth_rate"] = math.nan
    if uniform_loss is not None:
        out["loss_below_uniform"] = float(uniform_loss) - out["final_loss"]
    return out


#: Stride (steps) of the curves that :func:`stage_metrics` returns.
CURVE_EVERY = 50

#: The two key conventions by the names the book uses, and their ``attend_to_masked`` values.
#: ``"theory"`` is the theory's convention (masked positions visible as keys), ``"code"`` the released
#: code's (selected positions hidden as keys); :mod:`topicmech.stage2` calls them ``"visible"`` and
#: ``"hidden"``.
CONVENTIONS: dict[str, bool] = {"theory": True, "code": False}


def weight_timings(run: JointRun, *, fraction: float = 0.1) -> dict[str, float]:
    """When each of ``W^V``, ``W^K``, ``W^Q`` leaves its start, from the :func:`weight_probes`.

    ``"<W>_leave"`` is the first probed step at which ``||W - W(0)||_F`` has covered ``fraction``
    of its largest value over the run (:func:`topicmech.traces.reaching_step` with
    ``reference="max"``; the last step if it never moves); ``"<W>_norm_start"``,
    ``"<W>_norm_end"`` and ``"<W>_move_end"`` are the norms and the distance at both ends, and
    ``"K_over_V_leave"`` is ``W_K_leave / W_V_leave`` (inf if ``W_V_leave == 0``).
    """
    if not 0 < fraction < 1:
        raise ValueError(f"fraction must lie in (0, 1), got {fraction!r}")
    missing = [n for n in ("W_V_move", "W_K_move", "W_Q_move") if n not in run.history.probes]
    if missing:
        raise ValueError(f"run has no weight probes {missing} (train it with train_joint)")
    s = run.steps
    out: dict[str, float] = {}
    for n in ("W_V", "W_K", "W_Q"):
        move, norm = run.probe(f"{n}_move"), run.probe(f"{n}_norm")
        leave = reaching_step(s, move, fraction, "max")
        out[f"{n}_leave"] = float(s[-1] if leave is None else leave)
        out[f"{n}_norm_start"], out[f"{n}_norm_end"] = float(norm[0]), float(norm[-1])
        out[f"{n}_move_end"] = float(move[-1])
    out["K_over_V_leave"] = math.inf if out["W_V_leave"] == 0 else out["W_K_leave"] / out["W_V_leave"]
    return out


def stage_metrics(run: JointRun, *, uniform_loss: float | None = None) -> dict[str, Any]:
    """Everything chapter 6 reads off one joint-training run, as numbers and curves.

    :func:`joint_metrics` (without ``"growth_rate"`` for an Adam run, which skips the
    exponential phase it is read on; for SGD, 0.0 with ``"growth_rate_read"`` 0.0 when the
    contrast never grows from 0.02 to 0.3, else ``"growth_rate_read"`` is 1.0; when the attention
    contrast ends at or below its start, as a copier's can, ``"t_A"`` and ``"ratio"`` are read
    against its peak instead of its final value and ``"t_A_from_peak"`` is 1.0) and
    :func:`weight_timings`; ``"curve_step"`` and ``"curve_W_V"``, ``"curve_W_K"``,
    ``"curve_W_Q"`` (``||W - W(0)||_F``) and ``"curve_attn_contrast"`` every
    :data:`CURVE_EVERY` steps.
    """
    out: dict[str, Any] = joint_metrics(run, uniform_loss=uniform_loss)
    if run.config.get("optimizer") == "adam":
        del out["growth_rate"]
    else:  # 0.0 (with "growth_rate_read" 0.0) when the contrast never grows from 0.02 to 0.3
        out["growth_rate_read"] = float(math.isfinite(out["growth_rate"]))
        out["growth_rate"] = out["growth_rate"] if math.isfinite(out["growth_rate"]) else 0.0
    # a copier's contrast can end at or below its start: then t_A is read against its peak
    out["t_A_from_peak"] = float(math.isnan(out["t_A"]))
    if math.isnan(out["t_A"]):
        peak_step = stage_times(run.history, reference="max").attention_step
        out["t_A"] = float(run.steps[-1] if peak_step is None else peak_step)
        out["ratio"] = math.inf if out["t_V"] == 0 else out["t_A"] / out["t_V"]
    out.update(weight_timings(run))
    keep = run.steps % CURVE_EVERY == 0
    out["curve_step"] = run.steps[keep].astype(float).tolist()
    for n in ("W_V", "W_K", "W_Q"):
        out[f"curve_{n}"] = run.probe(f"{n}_move")[keep].tolist()
    out["curve_attn_contrast"] = run.probe("attn_contrast")[keep].tolist()
    return out


def curve_timings(row: Mapping[str, Any], prefix: str, *, level: float = 0.5,
                  at_step: int = CURVE_EVERY) -> dict[str, float]:
    """Timings on one absolute yardstick, read from the curves that :func:`stage_metrics` stores.

    ``row`` holds ``prefix + "curve_step"``, ``"curve_W_V"``, ``"curve_W_K"``, ``"curve_W_Q"`` and
    ``"curve_attn_contrast"`` (e.g. a stored row with ``prefix="sgd.code."``). For each of
    ``W_V``, ``W_K``, ``W_Q``: ``"<W>_level_step"``, the first curve step at which
    ``||W - W(0)||_F`` reaches ``level``, the same level for all three matrices (unlike the
    run-relative ``"<W>_leave"`` of :func:`weight_timings`; nan if it never does), and
    ``"<W>_at"``, the distance at curve step ``at_step``. ``"t_A_peak"`` is the first curve step at
    which the attention contrast has covered 10% of its rise to its peak (nan if it never rises).
    Curve steps are :data:`CURVE_EVERY` apart, so every step here is read up to that many late.
    """
    level = check_float("level", level)
    key = prefix + "curve_step"
    if key not in row:
        raise ValueError(f"row has no curves under prefix {prefix!r} (no {key!r})")
    steps = np.asarray(row[key], dtype=float)
    where = np.nonzero(steps == at_step)[0]
    if where.size == 0:
        raise ValueError(f"at_step={at_step!r} is not a curve step (curves every {CURVE_EVERY} steps)")
    out: dict[str, float] = {}
    for n in ("W_V", "W_K", "W_Q"):
        move = np.asarray(row[f"{prefix}curve_{n}"], dtype=float)
        hit = np.nonzero(move >= level)[0]
        out[f"{n}_level_step"] = float(steps[hit[0]]) if hit.size else math.nan
        out[f"{n}_at"] = float(move[where[0]])
    peak = reaching_step(steps, row[f"{prefix}curve_attn_contrast"], 0.1, "max")
    out["t_A_peak"] = math.nan if peak is None else float(peak)
    return out


def two_stage_seed(seed: int, *, sgd_steps: int, adam_steps: int, sgd_lr: float = 10.0, adam_lr: float = 3e-3,
                   init_scale: float = 0.1, batch_size: int = 128, probe_every: int = 10, num_topics: int = 5,
                   words_per_topic: int = 4, topics_per_doc: int = 2, doc_len: int = 20,
                   optimizers: tuple[str, ...] = ("sgd", "adam")) -> dict[str, Any]:
    """Chapter 6's four joint-training runs of one seed, as numbers for stored multi-seed results.

    :func:`train_joint` on ``Setting(num_topics, words_per_topic, topics_per_doc, doc_len)`` with
    SGD (``sgd_steps``, ``sgd_lr``) and with Adam (``adam_steps``, ``adam_lr``), each in both
    :data:`CONVENTIONS`; the :func:`stage_metrics` of each run (with ``loss_below_uniform``
    against the uniform-attention optimum of its convention) under the prefix
    ``"<optimizer>.<convention>."``, e.g. ``"sgd.theory.t_V"``. ``optimizers`` picks a subset
    (``("sgd",)`` for the long SGD runs alone).
    """
    plans = {"sgd": (sgd_steps, sgd_lr), "adam": (adam_steps, adam_lr)}
    unknown = [o for o in optimizers if o not in plans]
    if unknown or not optimizers:
        raise ValueError(f"optimizers must be a non-empty subset of {tuple(plans)}, got {optimizers!r}")
    out: dict[str, Any] = {}
    for optimizer in optimizers:
        steps, lr = plans[optimizer]
        for name, visible in CONVENTIONS.items():
            setting = Setting(num_topics, words_per_topic, topics_per_doc, doc_len, attend_to_masked=visible)
            run = train_joint(setting, steps=steps, optimizer=optimizer, lr=lr, init_scale=init_scale,
                              batch_size=batch_size, seed=seed, probe_every=probe_every)
            uniform_loss = theory.population_loss(run.W_star, *theory.moments(setting))
            metrics = stage_metrics(run, uniform_loss=uniform_loss)
            out.update({f"{optimizer}.{name}.{k}": v for k, v in metrics.items()})
    return out


def onset_amplitude(run: JointRun, topic_of_word: torch.Tensor | np.ndarray) -> float:
    """Topic contrast that the exponential phase of stage 2 starts from, at the run's initialisation.

    :func:`topicmech.probes.growing_topic_contrast` of the initial ``W^K``, ``W^Q`` of a
    :func:`train_joint` run (rebuilt from its seed and initial scale): under plain SGD the topic
    contrast of ``A`` grows like this amplitude times ``exp(r_2 t)``, whatever the sign of the
    initial ``A``'s own contrast (its antisymmetric part, ``(W^K - W^Q)``, decays).
    """
    if not isinstance(run, JointRun):
        raise ValueError(f"run must be a JointRun, got {type(run).__name__}")
    c = run.config
    m = _initial_model(run.model.num_tokens, c["init_scale"], c["attend_to_masked"], c["seed"])
    return growing_topic_contrast(m.W_K.detach(), m.W_Q.detach(), topic_of_word)


def uniform_descent_gap(run: JointRun, setting: Setting, steps: Sequence[int] | np.ndarray) -> np.ndarray:
    """The ``W^V`` gap that noiseless stage 1 would leave: gradient descent from the run's initial ``W^V``.

    Plain gradient descent at the run's learning rate on the population loss with attention held
    uniform, ``W <- W - lr * 2 (W Sigma - C)``, so ``W(t) - W* = (W(0) - W*)(I - 2 lr Sigma)^t``
    (``Sigma``, ``C`` from :func:`topicmech.theory.moments` of ``setting``; ``W(0)`` rebuilt from
    the run's seed and initial scale). Returns :func:`value_gap` at each of ``steps`` (the
    ``[MASK]`` column left out when masked keys are hidden, as in the run's probe): what the
    initial weights alone leave, without SGD noise. ``run`` must be a plain-SGD
    :func:`train_joint` run of ``setting`` (same convention); the steps must be ``>= 0``.
    """
    if not isinstance(run, JointRun) or run.W_star is None:
        raise ValueError(f"run must be a JointRun with a W_star, got {type(run).__name__}")
    c = run.config
    if c.get("optimizer") != "sgd":
        raise ValueError(f"run must be trained by plain SGD, got optimizer={c.get('optimizer')!r}")
    if not isinstance(setting, Setting) or setting.attend_to_masked != c["attend_to_masked"]:
        raise ValueError(f"setting must be a Setting in the run's convention "
                         f"(attend_to_masked={c['attend_to_masked']!r}), got {setting!r}")
    t = np.asarray(steps, dtype=float)
    if t.ndim != 1 or not np.all(np.isfinite(t)) or np.any(t < 0):
        raise ValueError(f"steps must be a 1-d sequence of steps >= 0, got {steps!r}")
    m = _initial_model(run.model.num_tokens, c["init_scale"], c["attend_to_masked"], c["seed"])
    W0 = m.value_matrix().detach().to(torch.float64).numpy()
    Ws = np.asarray(run.W_star, dtype=np.float64)
    if W0.shape != Ws.shape:
        raise ValueError(f"setting has {Ws.shape[0]} tokens, the run's model {W0.shape[0]}")
    Sigma, _ = theory.moments(setting)
    lam, U = np.linalg.eigh(0.5 * (Sigma + Sigma.T))
    E = (W0 - Ws) @ U                                       # error in Sigma's eigenbasis
    cols = slice(None, -1) if not c["attend_to_masked"] else slice(None)
    norm = float(np.linalg.norm(Ws[:, cols]))
    factor = 1.0 - 2.0 * float(c["lr"]) * lam
    gaps = []
    for step in t:
        Et = (E * factor**step) @ U.T
        gaps.append(float(np.linalg.norm(Et[:, cols])) / norm)
    return np.array(gaps)


#: What :func:`scale_sweep_seed` keeps of :func:`stage_metrics` for each run.
SWEEP_METRICS = ("t_V", "t_A", "ratio", "W_V_leave", "W_K_leave", "W_Q_leave", "W_V_norm_start",
                 "W_V_norm_end", "W_K_norm_end", "topic_attention_ratio", "self_attention_ratio",
                 "growth_rate", "copier")


def scale_sweep_seed(seed: int, *, scales: Sequence[float], steps: Sequence[int], lr: float = 10.0,
                     batch_size: int = 128, probe_every: int = 10, levels: Sequence[float] = (0.02, 0.1, 0.3),
                     num_topics: int = 5, words_per_topic: int = 4, topics_per_doc: int = 2,
                     doc_len: int = 20, conventions: Sequence[str] = ("code", "theory")) -> dict[str, float]:
    """Plain-SGD joint training of one seed at several initial scales, as numbers for stored results.

    For each convention of :data:`CONVENTIONS` in ``conventions`` and each ``scales[i]`` (trained
    for ``steps[i]``), under the prefix ``"<convention>.<scale:g>."``: the :data:`SWEEP_METRICS`
    of :func:`stage_metrics`; ``"cross_<level:g>"``, the first probed step at which the topic
    contrast of ``A`` reaches ``level`` (the last step, with ``"crossed_<level:g>"`` 0.0, if it
    never does; else 1.0); ``"kq_at_t_A"``, that contrast at ``t_A``; ``"A0_norm"`` and
    ``"A0_contrast"``, ``||A||_F`` and its topic contrast at step 0; and ``"amplitude"``, the
    :func:`onset_amplitude`. The same seed draws the same initial matrices at every scale.
    """
    if len(scales) == 0 or len(scales) != len(steps):
        raise ValueError(f"scales and steps must be non-empty and of equal length, got {scales!r}, {steps!r}")
    unknown = [c for c in conventions if c not in CONVENTIONS]
    if unknown or not conventions:
        raise ValueError(f"conventions must be a non-empty subset of {tuple(CONVENTIONS)}, got {conventions!r}")
    data = SimplifiedTopicModel(num_topics, words_per_topic, topics_per_doc)
    out: dict[str, float] = {}
    for name in conventions:
        setting = Setting(num_topics, words_per_topic, topics_per_doc, doc_len, attend_to_masked=CONVENTIONS[name])
        for scale, n in zip(scales, steps):
            run = train_joint(setting, steps=n, optimizer="sgd", lr=lr, init_scale=scale,
                              batch_size=batch_size, seed=seed, probe_every=probe_every)
            metrics = stage_metrics(run)
            row = {k: float(metrics[k]) for k in SWEEP_METRICS}
            s, contrast = run.steps, run.probe("kq_same_topic")
            for level in levels:
                hit = np.nonzero(contrast >= level)[0]
                row[f"cross_{level:g}"] = float(s[hit[0]] if hit.size else s[-1])
                row[f"crossed_{level:g}"] = float(hit.size > 0)
            row["kq_at_t_A"] = float(np.interp(row["t_A"], s, contrast))
            row["A0_norm"], row["A0_contrast"] = float(run.probe("kq_norm")[0]), float(contrast[0])
            row["amplitude"] = onset_amplitude(run, data.topic_of_word)
            out.update({f"{name}.{scale:g}.{k}": v for k, v in row.items()})
    return out
