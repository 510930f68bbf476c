"""Training dynamics: probes to track during training, stage timing, and a seeded sweep runner.

Book: chapter 6 (*Two stages in joint training*) introduces everything here; chapter 7
(*Beyond the assumptions*) reuses :func:`run_seeds`, :func:`run_grid` and the probes.

**Map of the module.**

* **Probes** (functions of a model, for ``topicmech.train.train(probes=...)``):
  :func:`value_gap` (relative distance of ``W^V`` to the stage-1 optimum ``W*``),
  :func:`heldout_batch` and :func:`attention_stats` (average attention by topic relation
  on a fixed batch), and :func:`standard_probes`, the dictionary chapter 6 tracks.
* **Why W^V moves first**: :func:`gradient_norms` (gradient of the masked-LM loss with
  respect to each trained matrix) and :func:`gradient_scaling` (the same over a range
  of initialisation scales ``eps``, with log-log slopes from :func:`loglog_slope`).
* **Stage timing**: :func:`closing_step` (when a shrinking trace has closed a fraction of
  its gap), :func:`reaching_step` (when a growing trace has covered a fraction of its
  rise), :func:`stage_times` (both, for a tracked run), :func:`growth_rate` (slope of a
  log-trace), :func:`predicted_growth_rate` (the stage-2 rate ``2 lr sigma(G) / sqrt(d)``)
  and :func:`topic_growth_eigenvalue` (its ``sigma`` on the topic contrasts).
* **Runs**: :func:`train_joint` trains ``W^V``, ``W^K``, ``W^Q`` together from a small
  initialisation with :func:`standard_probes` attached, :func:`run_summary` condenses a
  run into stage times and end-of-run statistics, and :func:`plot_tracked` draws
  the tracked curves with the two stages shaded (:func:`plot_attention`: one panel).
* **Sweeps**: :func:`run_seeds` calls a function once per seed and collects what it
  returns in a :class:`Sweep`; :func:`run_grid` does the same over a grid of parameters.

Conventions are the package's (notation page): ``W_V[out, in]``, ``A[key, query]`` with
``A = model.key_query_matrix()``, attention patterns ``(batch, query, key)``,
``eps = init_scale``. Attention statistics are multiples of uniform attention (a value of
1 means "as much as a uniformly attended key").
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from .data import SimplifiedTopicModel, TopicModel, bert_mask
from .model import OneLayerTransformer
from .probes import AttentionByRelation, attention_by_relation, block_means, topic_contrasts
from .train import History, mlm_loss
from .train import train as _train
from .utils import check_positive_int, check_seeds, seed_everything

__all__ = [
    "ATTENTION_FIELDS",
    "value_gap",
    "heldout_batch",
    "attention_stats",
    "standard_probes",
    "gradient_norms",
    "GradientScaling",
    "gradient_scaling",
    "loglog_slope",
    "closing_step",
    "reaching_step",
    "StageTimes",
    "stage_times",
    "growth_rate",
    "topic_growth_eigenvalue",
    "predicted_growth_rate",
    "JointRun",
    "train_joint",
    "run_summary",
    "plot_tracked",
    "plot_attention",
    "Sweep",
    "run_seeds",
    "run_grid",
]

#: Order of the entries of the ``"attention"`` probe (see :class:`topicmech.probes.AttentionByRelation`).
ATTENTION_FIELDS: tuple[str, ...] = ("self", "same_word", "same_topic", "diff_topic")

_MATRICES = ("W_E", "W_K", "W_Q", "W_V", "W_U")


# ----------------------------------------------------------------------------------------
# Probes
# ----------------------------------------------------------------------------------------


def _as_float_tensor(x: torch.Tensor | np.ndarray, name: str) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x.detach().to(torch.float64).cpu()
    try:
        return torch.as_tensor(np.asarray(x, dtype=np.float64))
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an array, got {type(x).__name__}") from None


def value_gap(model: nn.Module, W_star: torch.Tensor | np.ndarray, *, ignore_mask_column: bool = False) -> float:
    """Relative Frobenius distance of the value map to the stage-1 optimum.

    ``||W - W*||_F / ||W*||_F`` with ``W = model.value_matrix()`` (``W^V`` itself for
    one-hot embeddings and an identity head).

    Parameters
    ----------
    model : OneLayerTransformer
        Any module with a ``value_matrix()`` method returning a ``(D, D)`` tensor.
    W_star : Tensor or ndarray, shape (D, D)
        The reference, usually :func:`topicmech.theory.optimal_value_matrix` at the
        training parameters and the same ``attend_to_masked``.
    ignore_mask_column : bool
        Leave out the last column (input ``[MASK]``) of both matrices. Use it with
        ``attend_to_masked=False``: ``[MASK]`` is then never attended, so that column of
        ``W^V`` never receives a gradient and keeps its random initial values, while
        ``W*`` sets it to 0 by convention. :func:`standard_probes` does this automatically.

    Returns
    -------
    gap : float
        1 at ``W = 0``; 0 at ``W = W*``.
    """
    if not hasattr(model, "value_matrix"):
        raise ValueError(f"model must have a value_matrix() method, got {type(model).__name__}")
    W = model.value_matrix().detach().to(torch.float64).cpu()                 # (D, D)
    Ws = _as_float_tensor(W_star, "W_star")                                     # (D, D)
    if Ws.shape != W.shape:
        raise ValueError(f"W_star must have shape {tuple(W.shape)}, got {tuple(Ws.shape)}")
    if ignore_mask_column:
        W, Ws = W[:, :-1], Ws[:, :-1]                                           # (D, D - 1)
    norm = float(Ws.norm())
    if not norm > 0:
        raise ValueError("W_star must not be the zero matrix")
    return float((W - Ws).norm()) / norm


def heldout_batch(
    topic_model: TopicModel,
    num_docs: int,
    doc_len: int,
    *,
    seed: int = 12345,
    corrupt: bool = False,
    mask_prob: float = 0.15,
    keep_prob: float = 0.1,
    random_prob: float = 0.1,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A fixed batch of documents on which to read attention during training.

    Parameters
    ----------
    topic_model : topicmech.data.TopicModel
    num_docs, doc_len : int
    seed : int
        Seed of the batch; the default is shared by every run, so runs are compared on
        the same documents.
    corrupt : bool
        ``False`` (default) returns clean documents, as the authors' inspection script
        does (it sets the mask rate to 0); ``True`` applies :func:`topicmech.data.bert_mask`.
    mask_prob, keep_prob, random_prob : float
        Corruption when ``corrupt`` is True.

    Returns
    -------
    inputs : LongTensor, shape (num_docs, doc_len)
    selected : BoolTensor, shape (num_docs, doc_len), or None
        None for clean documents (every position is a key).
    """
    if not isinstance(topic_model, TopicModel):
        raise ValueError(f"topic_model must be a TopicModel, got {type(topic_model).__name__}")
    docs = topic_model.sample(num_docs, doc_len, seed)                         # (n, N)
    if not corrupt:
        return docs, None
    inputs, selected = bert_mask(docs, topic_model.vocab_size, mask_prob, keep_prob, random_prob, seed + 1)
    return inputs, selected


def attention_stats(
    model: nn.Module,
    inputs: torch.Tensor,
    topic_of_word: torch.Tensor,
    selected: torch.Tensor | None = None,
) -> AttentionByRelation:
    """Average attention from word queries, by relation to the key, on a given batch.

    Parameters
    ----------
    model : OneLayerTransformer
        Any module with ``attention_pattern(inputs, selected)``.
    inputs : LongTensor, shape (batch, N)
    topic_of_word : LongTensor, shape (V,)
    selected : BoolTensor, shape (batch, N), optional

    Returns
    -------
    AttentionByRelation
        ``self_``, ``same_word``, ``same_topic``, ``diff_topic``, each a multiple of
        uniform attention over the ``N`` positions.
    """
    with torch.no_grad():
        pattern = model.attention_pattern(inputs, selected)                    # (B, query, key)
    return attention_by_relation(pattern, inputs, topic_of_word)


def standard_probes(
    topic_model: TopicModel,
    W_star: torch.Tensor | np.ndarray | None,
    heldout: tuple[torch.Tensor, torch.Tensor | None],
) -> dict[str, Callable[[nn.Module], Any]]:
    """The probes chapter 6 tracks, as a dictionary for ``topicmech.train.train(probes=...)``.

    Parameters
    ----------
    topic_model : topicmech.data.TopicModel
        Supplies ``topic_of_word``.
    W_star : Tensor or ndarray, shape (D, D), or None
        Stage-1 optimum for ``"value_gap"``; None leaves that probe out.
    heldout : (inputs, selected)
        The fixed batch for the attention probes, e.g. from :func:`heldout_batch`.

    Returns
    -------
    probes : dict of str to callable
        ``"value_gap"``: :func:`value_gap` (only with ``W_star``; the ``[MASK]`` column is
        left out when the model hides masked keys);
        ``"value_topic_gap"``: same-topic minus different-topic mean entry of ``W^V``;
        ``"kq_norm"``: ``||A||_F``;
        ``"kq_same_word"``, ``"kq_same_topic"``: :func:`topicmech.probes.topic_contrasts`
        of ``A`` (score of a same-word / same-topic key minus a different-topic key);
        ``"attention"``: array of shape (4,), the :data:`ATTENTION_FIELDS` of
        :func:`attention_stats` on the held-out batch;
        ``"attn_contrast"``: same-topic minus different-topic attention on that batch.

    Examples
    --------
    >>> import topicmech as tm
    >>> from topicmech import dynamics
    >>> data = tm.SimplifiedTopicModel(5, 4, 2)
    >>> probes = dynamics.standard_probes(data, None, dynamics.heldout_batch(data, 8, 20))
    >>> sorted(probes)[:3]
    ['attention', 'attn_contrast', 'kq_norm']
    """
    if not isinstance(topic_model, TopicModel):
        raise ValueError(f"topic_model must be a TopicModel, got {type(topic_model).__name__}")
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
    cache: dict[str, Any] = {"key": None, "value": None}

    def attention(m: nn.Module) -> AttentionByRelation:
        # both attention probes read the same forward pass: the statistics are recomputed only
        # when a parameter has changed in place since the last call (torch bumps ._version)
        key = (id(m), tuple(p._version for p in m.parameters()))
        if cache["key"] != key:
            cache["key"], cache["value"] = key, attention_stats(m, inputs, topic, selected)
        return cache["value"]

    probes["attention"] = lambda m: np.asarray(attention(m), dtype=float)
    probes["attn_contrast"] = lambda m: attention(m).same_topic - attention(m).diff_topic
    return probes


# ----------------------------------------------------------------------------------------
# Gradient scales at small initialisation
# ----------------------------------------------------------------------------------------


def gradient_norms(
    model: nn.Module,
    inputs: torch.Tensor,
    selected: torch.Tensor,
    targets: torch.Tensor,
    *,
    loss: Literal["squared", "cross_entropy"] = "squared",
) -> dict[str, float]:
    """Frobenius norm of the gradient of the masked-LM loss with respect to each trained matrix.

    Parameters
    ----------
    model : OneLayerTransformer
    inputs : LongTensor, shape (batch, N)
        Corrupted tokens.
    selected : BoolTensor, shape (batch, N)
        Positions where the loss is taken.
    targets : LongTensor, shape (batch, N)
        True tokens.
    loss : {"squared", "cross_entropy"}

    Returns
    -------
    norms : dict of str to float
        ``||dL/dW||_F`` for each of ``W_E``, ``W_K``, ``W_Q``, ``W_V``, ``W_U`` that the
        model trains. The model's parameters and their ``.grad`` are left unchanged.
    """
    names = [n for n in _MATRICES if isinstance(getattr(model, n, None), nn.Parameter)
             and getattr(model, n).requires_grad]
    if not names:
        raise ValueError("model has no trainable matrix among W_E, W_K, W_Q, W_V, W_U")
    if selected.shape != inputs.shape or targets.shape != inputs.shape:
        raise ValueError(f"inputs, selected and targets must share a shape, got {tuple(inputs.shape)}, "
                         f"{tuple(selected.shape)}, {tuple(targets.shape)}")
    if not bool(selected.any()):
        raise ValueError("selected has no selected position")
    params = [getattr(model, n) for n in names]
    value = mlm_loss(model(inputs, selected), targets, selected, loss)
    grads = torch.autograd.grad(value, params)
    return {n: float(g.norm()) for n, g in zip(names, grads)}


@dataclass
class GradientScaling:
    """Gradient norms over a range of initialisation scales (see :func:`gradient_scaling`).

    Attributes
    ----------
    init_scales : ndarray, shape (k,)
    norms : dict of str to ndarray, shape (k,)
        ``||dL/dW||_F`` per matrix, aligned with ``init_scales``.
    slopes : dict of str to float
        Log-log slope of each norm against ``init_scales`` (2 means ``O(eps^2)``).
    """

    init_scales: np.ndarray
    norms: dict[str, np.ndarray]
    slopes: dict[str, float]

    def rows(self) -> list[tuple[float, ...]]:
        """Table rows ``(eps, norm of each matrix in the order of self.norms)``."""
        keys = list(self.norms)
        return [(float(e), *(float(self.norms[k][i]) for k in keys)) for i, e in enumerate(self.init_scales)]


def gradient_scaling(
    init_scales: Sequence[float],
    topic_model: TopicModel,
    doc_len: int,
    *,
    num_docs: int = 2000,
    attend_to_masked: bool = False,
    loss: Literal["squared", "cross_entropy"] = "squared",
    mask_prob: float = 0.15,
    keep_prob: float = 0.1,
    random_prob: float = 0.1,
    seed: int = 0,
    model_seed: int = 0,
) -> GradientScaling:
    """Measure ``||dL/dW^V||``, ``||dL/dW^K||``, ``||dL/dW^Q||`` at initialisation, for several ``eps``.

    For each scale a :class:`topicmech.model.OneLayerTransformer` with one-hot
    embeddings, an identity head and learned ``W^K``, ``W^Q``, ``W^V`` is initialised
    with ``init_scale=eps`` and the same ``model_seed`` (so the matrices differ only by
    the factor ``eps``), and the gradient is taken on one fixed corrupted batch.

    Parameters
    ----------
    init_scales : sequence of float
        At least two positive scales.
    topic_model : topicmech.data.TopicModel
    doc_len : int
    num_docs : int
        Documents in the batch.
    attend_to_masked : bool
    loss : {"squared", "cross_entropy"}
    mask_prob, keep_prob, random_prob : float
    seed : int
        Seed of the batch.
    model_seed : int
        Seed of the initial matrices.

    Returns
    -------
    GradientScaling
        With slopes near 0 for ``W_V`` and near 2 for ``W_K`` and ``W_Q`` at small ``eps``
        (book chapter 6).
    """
    scales = np.asarray(list(init_scales), dtype=float)
    if scales.ndim != 1 or scales.size < 2 or not np.all(np.isfinite(scales)) or np.any(scales <= 0):
        raise ValueError(f"init_scales must hold at least two positive floats, got {init_scales!r}")
    if not isinstance(topic_model, TopicModel):
        raise ValueError(f"topic_model must be a TopicModel, got {type(topic_model).__name__}")
    docs = topic_model.sample(num_docs, doc_len, seed)                          # (n, N)
    inputs, selected = bert_mask(docs, topic_model.vocab_size, mask_prob, keep_prob, random_prob, seed + 1)
    rows: list[dict[str, float]] = []
    for eps in scales:
        model = OneLayerTransformer(topic_model.num_tokens, attention="learned", value="learned",
                                    init_scale=float(eps), attend_to_masked=attend_to_masked, seed=model_seed)
        rows.append(gradient_norms(model, inputs, selected, docs, loss=loss))
    norms = {k: np.array([r[k] for r in rows]) for k in ("W_V", "W_K", "W_Q")}
    slopes = {k: loglog_slope(scales, v) for k, v in norms.items()}
    return GradientScaling(scales, norms, slopes)


def loglog_slope(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    """Least-squares slope of ``log y`` against ``log x`` (the exponent ``p`` in ``y ~ x^p``).

    Parameters
    ----------
    x, y : array-like, shape (k,)
        Positive values, ``k >= 2``.

    Returns
    -------
    slope : float
    """
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if xs.shape != ys.shape or xs.ndim != 1 or xs.size < 2:
        raise ValueError(f"x and y must be 1-D of the same length >= 2, got shapes {xs.shape} and {ys.shape}")
    if np.any(xs <= 0) or np.any(ys <= 0):
        raise ValueError("x and y must be positive for a log-log slope")
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


# ----------------------------------------------------------------------------------------
# Stage timing
# ----------------------------------------------------------------------------------------


def _check_trace(steps: Sequence[int] | np.ndarray, values: Sequence[float] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(steps)
    v = np.asarray(values, dtype=float)
    if s.ndim != 1 or v.ndim != 1 or s.shape != v.shape or s.size == 0:
        raise ValueError(f"steps and values must be 1-D of the same non-zero length, got shapes {s.shape} and {v.shape}")
    if not np.all(np.isfinite(v)):
        raise ValueError("values must be finite")
    return s, v


def _check_fraction(name: str, fraction: float) -> float:
    f = float(fraction)
    if not (0.0 < f <= 1.0):
        raise ValueError(f"{name} must be in (0, 1], got {fraction!r}")
    return f


def closing_step(
    steps: Sequence[int] | np.ndarray,
    values: Sequence[float] | np.ndarray,
    fraction: float = 0.9,
    target: float | None = None,
) -> int:
    """First step at which a shrinking trace has closed ``fraction`` of its gap to ``target``.

    The threshold is ``target + (1 - fraction) * (values[0] - target)``.

    Parameters
    ----------
    steps : array-like of int, shape (k,)
    values : array-like of float, shape (k,)
        E.g. the ``"value_gap"`` probe.
    fraction : float in (0, 1]
    target : float, optional
        The level the trace settles at. Default: ``min(values)``, the plateau the trace
        actually reaches; under SGD noise the gap to ``W*`` never reaches 0, and the
        minimum (a low excursion of the noise) makes the step conservative (late).

    Returns
    -------
    step : int
        ``steps[0]`` if the trace starts at or below the threshold.
    """
    s, v = _check_trace(steps, values)
    f = _check_fraction("fraction", fraction)
    t = float(v.min()) if target is None else float(target)
    threshold = t + (1.0 - f) * (v[0] - t)
    hit = np.nonzero(v <= threshold)[0]
    if hit.size == 0:
        raise ValueError(f"the trace never closes {f:.0%} of its gap to target={t!r}")
    return int(s[hit[0]])


def reaching_step(
    steps: Sequence[int] | np.ndarray,
    values: Sequence[float] | np.ndarray,
    fraction: float = 0.1,
    reference: Literal["final", "max"] | float = "final",
) -> int | None:
    """First step at which a growing trace has covered ``fraction`` of its rise.

    The threshold is ``values[0] + fraction * (ref - values[0])``.

    Parameters
    ----------
    steps : array-like of int, shape (k,)
    values : array-like of float, shape (k,)
        E.g. the ``"attn_contrast"`` probe.
    fraction : float in (0, 1]
    reference : {"final", "max"} or float
        ``ref``: the last value (default), the largest value (for traces that peak and
        fall), or a given level.

    Returns
    -------
    step : int or None
        None when the trace never rises above its start (``ref <= values[0]``).

    Notes
    -----
    With ``reference="final"`` a run stopped before the trace saturates gives an earlier
    step, so comparisons of the form "this happens before that" stay conservative.
    """
    s, v = _check_trace(steps, values)
    f = _check_fraction("fraction", fraction)
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
    threshold = v[0] + f * (ref - v[0])
    hit = np.nonzero(v >= threshold)[0]
    return int(s[hit[0]]) if hit.size else None


@dataclass(frozen=True)
class StageTimes:
    """When each stage happens in a tracked run.

    Attributes
    ----------
    value_step : int
        Step at which ``W^V`` has closed ``value_fraction`` of its gap (stage 1 done).
    attention_step : int or None
        Step at which the attention contrast has covered ``attention_fraction`` of its
        rise (stage 2 visible); None if it never rises.
    value_fraction, attention_fraction : float
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
    history: History,
    *,
    value_fraction: float = 0.9,
    attention_fraction: float = 0.1,
    reference: Literal["final", "max"] | float = "final",
    value_probe: str = "value_gap",
    attention_probe: str = "attn_contrast",
) -> StageTimes:
    """Stage-1 and stage-2 times of a run tracked with :func:`standard_probes`.

    Parameters
    ----------
    history : topicmech.train.History
    value_fraction : float
        For :func:`closing_step` on ``value_probe`` (default 90%).
    attention_fraction : float
        For :func:`reaching_step` on ``attention_probe`` (default 10%).
    reference : {"final", "max"} or float
        Passed to :func:`reaching_step`.
    value_probe, attention_probe : str
        Probe names.

    Returns
    -------
    StageTimes
    """
    if not isinstance(history, History):
        raise ValueError(f"history must be a topicmech.train.History, got {type(history).__name__}")
    steps = np.asarray(history.probe_step)
    tv = closing_step(steps, history.probe(value_probe), value_fraction)
    ta = reaching_step(steps, history.probe(attention_probe), attention_fraction, reference)
    return StageTimes(tv, ta, value_fraction, attention_fraction)


def growth_rate(
    steps: Sequence[int] | np.ndarray,
    values: Sequence[float] | np.ndarray,
    low: float,
    high: float,
) -> float:
    """Exponential growth rate of a trace: slope of ``log(values)`` over the first window where ``low <= values <= high``.

    Parameters
    ----------
    steps, values : array-like, shape (k,)
    low, high : float
        ``0 < low < high``; the window runs from the first value >= ``low`` to the last
        value <= ``high`` after it.

    Returns
    -------
    rate : float
        Per step.
    """
    s, v = _check_trace(steps, values)
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
    """Eigenvalue of ``-G`` on the topic contrasts, after averaging ``G`` over the symmetry orbits.

    The symmetry of the topic model (relabel words within a topic, permute topics) makes
    the exact ``G`` constant on the three orbits of word pairs, ``G_words = G_diag I +
    G_same (B - I) + G_diff (J - B)`` (``G_diag``: the same word; ``G_same``: the same
    topic; ``G_diff``: different topics); on vectors that are constant within each topic
    and sum to zero, such a matrix acts as the scalar
    ``(G_diag - G_same) + v (G_same - G_diff)``. Averaging a Monte-Carlo ``G`` over the
    orbits first (:func:`topicmech.probes.block_means`) removes most of its noise, which
    otherwise splits this ``(T - 1)``-fold eigenvalue and biases the top singular value
    upwards.

    Parameters
    ----------
    G : array, shape (V, V) or (V + 1, V + 1)
        ``dL/dA`` (rows: key token, columns: query token).
    topic_of_word : LongTensor or ndarray, shape (V,)

    Returns
    -------
    lam : float
        ``-[(G_diag - G_same) + v (G_same - G_diff)]``; positive when gradient descent raises
        same-topic scores.
    """
    topic = np.asarray(topic_of_word.cpu() if isinstance(topic_of_word, torch.Tensor) else topic_of_word)
    m = block_means(G.detach().cpu().numpy() if isinstance(G, torch.Tensor) else np.asarray(G, dtype=float), topic)
    counts = np.bincount(topic)
    if counts.size < 2 or not np.all(counts == counts[0]) or counts[0] < 2:
        raise ValueError("topic_of_word must describe at least two topics of equal size >= 2")
    v = int(counts[0])
    return -((m.diag - m.same_topic) + v * (m.same_topic - m.diff_topic))


def predicted_growth_rate(
    G: np.ndarray | torch.Tensor,
    lr: float,
    d_model: int,
    topic_of_word: torch.Tensor | np.ndarray | None = None,
) -> float:
    """Stage-2 growth rate of ``A = W_K^T W_Q / sqrt(d)`` under plain SGD, from the gradient ``G = dL/dA``.

    Near ``A = 0`` the factors follow ``dW_K = -lr W_Q G^T / sqrt(d)`` and
    ``dW_Q = -lr W_K G / sqrt(d)`` per step, a linear system whose mode along a singular
    pair ``sigma`` of ``-G`` grows like ``exp(lr sigma t / sqrt(d))``; ``A``, a product of
    two such factors, grows at twice that rate (a two-layer linear network).

    Parameters
    ----------
    G : array, shape (D, D)
        ``dL/dA`` at uniform attention, e.g. :func:`topicmech.theory.key_query_gradient`
        at the stage-1 optimum.
    lr : float
        SGD learning rate.
    d_model : int
        ``d`` (the score scale is ``1/sqrt(d)``).
    topic_of_word : LongTensor or ndarray, shape (V,), optional
        If given, ``sigma`` is :func:`topic_growth_eigenvalue` (the rate of the topic
        contrast of ``A``, robust to Monte-Carlo noise); otherwise the largest singular
        value of ``G`` (the fastest direction, whatever it is).

    Returns
    -------
    rate : float
        ``2 lr sigma / sqrt(d)`` per step.
    """
    g = np.asarray(G.detach().cpu() if isinstance(G, torch.Tensor) else G, dtype=float)
    if g.ndim != 2 or g.shape[0] != g.shape[1]:
        raise ValueError(f"G must be a square matrix, got shape {g.shape}")
    if isinstance(lr, bool) or not (isinstance(lr, (int, float)) and lr > 0 and math.isfinite(lr)):
        raise ValueError(f"lr must be a positive float, got {lr!r}")
    d = check_positive_int("d_model", d_model)
    sigma = float(np.linalg.norm(g, 2)) if topic_of_word is None else topic_growth_eigenvalue(g, topic_of_word)
    return 2.0 * float(lr) * sigma / math.sqrt(d)


# ----------------------------------------------------------------------------------------
# A tracked joint-training run
# ----------------------------------------------------------------------------------------


@dataclass
class JointRun:
    """Result of :func:`train_joint`.

    Attributes
    ----------
    model : OneLayerTransformer
        The trained model.
    history : topicmech.train.History
        Loss at every step and the :func:`standard_probes` every ``probe_every`` steps.
    W_star : ndarray, shape (D, D), or None
        The stage-1 optimum used by ``"value_gap"``.
    times : StageTimes or None
        :func:`stage_times` with the defaults (None when ``W_star`` is None).
    config : dict
        The arguments of the run.
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
    topic_model: TopicModel,
    doc_len: int,
    *,
    steps: int,
    optimizer: Literal["sgd", "adam"] = "sgd",
    lr: float | None = None,
    init_scale: float = 0.1,
    attend_to_masked: bool = False,
    batch_size: int = 128,
    loss: Literal["squared", "cross_entropy"] = "squared",
    mask_prob: float = 0.15,
    keep_prob: float = 0.1,
    random_prob: float = 0.1,
    seed: int = 0,
    probe_every: int = 20,
    num_heldout: int = 128,
    heldout_seed: int = 12345,
    W_star: np.ndarray | None = None,
) -> JointRun:
    """Train ``W^V``, ``W^K`` and ``W^Q`` together from a small initialisation, tracking the two stages.

    The model is :class:`topicmech.model.OneLayerTransformer` with one-hot embeddings,
    an identity head and ``attention="learned"``, ``value="learned"``; training is
    :func:`topicmech.train.train` on fresh documents every step, with
    :func:`standard_probes` read every ``probe_every`` steps on a fixed clean batch.

    Parameters
    ----------
    topic_model : topicmech.data.TopicModel
    doc_len : int
        ``N``.
    steps : int
    optimizer : {"sgd", "adam"}
    lr : float, optional
        SGD default: ``0.5 / lambda_max`` (squared loss) or ``2 / lambda_max``
        (cross-entropy), half the stability limit set by the largest eigenvalue of the exact
        stage-1 ``Sigma`` at uniform attention (:func:`topicmech.stage1.sigma_range`;
        simplified or LDA data, other topic models raise ValueError). From a small
        initialisation ``W^V`` feels this curvature first, while ``W^K, W^Q`` start on a
        nearly flat loss. For T = 5, v = 4, tau = 2, N = 20 with hidden keys
        (``lambda_max = 1 / V``) it is 10, the rate of chapter 6. Adam default: 1e-2
        (Adam's step is about ``lr`` per entry whatever the curvature).
    init_scale : float
        ``eps``, the standard deviation of every initial matrix entry.
    attend_to_masked : bool
        False: selected positions are hidden keys (the authors' code); True: visible.
    batch_size : int
    loss : {"squared", "cross_entropy"}
    mask_prob, keep_prob, random_prob : float
    seed : int
        Seed of the initialisation and of the training documents and masks.
    probe_every : int
    num_heldout : int
        Documents in the held-out batch.
    heldout_seed : int
        Seed of the held-out batch (shared across runs by default).
    W_star : ndarray, shape (D, D), optional
        Reference for ``"value_gap"``. Default: the closed form
        :func:`topicmech.theory.optimal_value_matrix` for a
        :class:`topicmech.data.SimplifiedTopicModel`; for other topic models pass one
        (e.g. :func:`topicmech.theory.least_squares_value_matrix`) or go without
        ``"value_gap"`` and stage times.

    Returns
    -------
    JointRun
    """
    if not isinstance(topic_model, TopicModel):
        raise ValueError(f"topic_model must be a TopicModel, got {type(topic_model).__name__}")
    doc_len = check_positive_int("doc_len", doc_len)
    if optimizer not in ("sgd", "adam"):
        raise ValueError(f"optimizer must be 'sgd' or 'adam', got {optimizer!r}")
    if loss not in ("squared", "cross_entropy"):
        raise ValueError(f"loss must be 'squared' or 'cross_entropy', got {loss!r}")
    if lr is None:
        if optimizer == "adam":
            lr = 1e-2
        else:
            from .stage1 import SAFE_FRACTION, sigma_range

            lam_max = sigma_range(topic_model, doc_len, attend_to_masked=attend_to_masked, mask_prob=mask_prob,
                                  keep_prob=keep_prob, random_prob=random_prob, needs="lr")[1]
            lr = SAFE_FRACTION * (4.0 if loss == "cross_entropy" else 1.0) / lam_max
    if W_star is None and isinstance(topic_model, SimplifiedTopicModel):
        from . import theory

        W_star = theory.optimal_value_matrix(
            topic_model.num_topics, topic_model.words_per_topic, topic_model.topics_per_doc, doc_len,
            mask_prob, keep_prob, random_prob, attend_to_masked=attend_to_masked,
        )
    model = OneLayerTransformer(topic_model.num_tokens, attention="learned", value="learned",
                                init_scale=init_scale, attend_to_masked=attend_to_masked, seed=seed)
    heldout = heldout_batch(topic_model, num_heldout, doc_len, seed=heldout_seed)
    probes = standard_probes(topic_model, W_star, heldout)
    history = _train(model, topic_model, steps=steps, batch_size=batch_size, doc_len=doc_len, loss=loss,
                     optimizer=optimizer, lr=lr, mask_prob=mask_prob, keep_prob=keep_prob,
                     random_prob=random_prob, seed=seed, probes=probes, probe_every=probe_every)
    times = stage_times(history) if W_star is not None else None
    config = dict(doc_len=doc_len, steps=steps, optimizer=optimizer, lr=lr, init_scale=init_scale,
                  attend_to_masked=attend_to_masked, batch_size=batch_size, loss=loss, mask_prob=mask_prob,
                  keep_prob=keep_prob, random_prob=random_prob, seed=seed, probe_every=probe_every)
    return JointRun(model, history, None if W_star is None else np.asarray(W_star), times, config)


def run_summary(run: JointRun, *, plateau_window: int = 500, final_window: int = 200) -> dict[str, float]:
    """Stage times and end-of-run statistics of a tracked run, as one flat dictionary.

    Parameters
    ----------
    run : JointRun
        With stage times (``run.times`` not None).
    plateau_window : int
        Steps over which the stage-1 plateau loss is averaged, starting 50 steps after
        ``t_V``.
    final_window : int
        Last steps over which the final loss is averaged.

    Returns
    -------
    summary : dict of str to float
        ``"t_V"``, ``"t_A"`` (nan if attention never rises), ``"ratio"`` (``t_A / t_V``);
        ``"A_growth_stage1"``: ``||A||`` at ``t_V`` over ``||A||`` at step 0;
        ``"topic_attention_ratio"``: same-topic over different-topic attention at the end;
        ``"self_attention_ratio"``: attention to the query's own position over same-topic
        attention at the end (about 1 without self-copying);
        ``"plateau_loss"``, ``"final_loss"``: mean training loss on the stage-1 plateau and
        over the last ``final_window`` steps;
        ``"plateau_gap"``, ``"final_gap"``: lowest and last ``W^V`` gap.
    """
    if run.times is None:
        raise ValueError("run has no stage times (it was trained without W_star)")
    plateau_window = check_positive_int("plateau_window", plateau_window)
    final_window = check_positive_int("final_window", final_window)
    s, att, kq = run.steps, run.probe("attention"), run.probe("kq_norm")
    t_v = run.times.value_step
    loss = np.asarray(run.history.loss, dtype=float)
    plateau = loss[t_v + 50: t_v + 50 + plateau_window]
    gap = run.probe("value_gap")
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


def plot_tracked(
    run: JointRun,
    *,
    axes: Sequence[Any] | None = None,
    loss_reference: float | None = None,
    loss_window: int = 50,
    title: str | None = None,
    shade: bool = True,
    legend: bool = True,
    step_scale: Literal["linear", "sqrt", "log"] = "linear",
) -> Any:
    """Four panels on a shared step axis: ``W^V`` gap, key-query matrix, attention, loss.

    Stage 1 (start to ``times.value_step``) and stage 2 (``times.attention_step`` to the
    end) are shaded.

    Parameters
    ----------
    run : JointRun
    axes : sequence of 4 matplotlib Axes, optional
        Draw into these (e.g. one column of a larger figure); default: a new figure.
    loss_reference : float, optional
        Horizontal line on the loss panel (e.g. the loss of ``W*`` under uniform attention).
    loss_window : int
        Smoothing window of the training loss.
    title : str, optional
        Title of the top panel.
    shade : bool
        Shade the stages.
    legend : bool
        Draw legends.
    step_scale : {"linear", "sqrt", "log"}
        Scale of the step axis. ``"sqrt"`` (square root) or ``"log"`` (logarithmic, linear
        below step 10) keep a short stage 1 visible next to a long stage 2.

    Returns
    -------
    fig : matplotlib Figure
    """
    import matplotlib.pyplot as plt

    if axes is None:
        fig, axes = plt.subplots(4, 1, figsize=(6.4, 7.4), sharex=True)
    else:
        if len(axes) != 4:
            raise ValueError(f"axes must hold 4 Axes, got {len(axes)}")
        fig = axes[0].figure
    h, s = run.history, run.steps
    ax_v, ax_a, ax_att, ax_l = axes
    if "value_gap" in h.probes:
        ax_v.plot(s, run.probe("value_gap"), color="C0", label=r"$\|W^V - W^\star\| / \|W^\star\|$")
    ax_v.set_ylabel(r"$W^V$ gap")
    ax_v.set_ylim(bottom=0)
    ax_a.semilogy(s, run.probe("kq_norm"), color="C1", label=r"$\|A\|_F$")
    contrast = run.probe("kq_same_topic").astype(float)
    ax_a.semilogy(s, np.where(contrast > 0, contrast, np.nan), color="C2", label="same-topic score contrast")
    ax_a.set_ylabel("key-query")
    plot_attention(run, ax_att, shade=False, legend=False)
    ax_l.plot(h.step, h.smoothed_loss(loss_window), color="C0", lw=1, label="training loss")
    if loss_reference is not None:
        ax_l.axhline(loss_reference, color="k", ls="--", lw=1, label=r"$W^\star$, uniform attention")
    ax_l.set_ylabel("loss")
    ax_l.set_xlabel("step")
    if shade and run.times is not None:
        end = float(s[-1])
        for ax in axes:
            ax.axvspan(0, run.times.value_step, color="C0", alpha=0.12, lw=0)
            if run.times.attention_step is not None:
                ax.axvspan(run.times.attention_step, end, color="C1", alpha=0.12, lw=0)
        ymax = ax_v.get_ylim()[1]
        ax_v.text(run.times.value_step, 0.92 * ymax, " stage 1", ha="left", va="top", fontsize=8, color="C0")
        if run.times.attention_step is not None:
            ax_v.text(run.times.attention_step, 0.92 * ymax, " stage 2", ha="left", va="top", fontsize=8, color="C1")
    if step_scale == "log":
        ax_l.set_xscale("symlog", linthresh=10)
    elif step_scale == "sqrt":
        ax_l.set_xscale("function", functions=(np.sqrt, np.square))
        ticks = [t for t in (0, 20, 100, 250, 500, 1000, 2000, 4000, 8000, 16000) if t <= s[-1]]
        ax_l.set_xticks(ticks)
    elif step_scale != "linear":
        raise ValueError(f"step_scale must be 'linear', 'sqrt' or 'log', got {step_scale!r}")
    ax_l.set_xlim(0, float(s[-1]))
    if legend:
        for ax in axes:
            ax.legend(fontsize=7, loc="best")
    if title:
        ax_v.set_title(title)
    return fig


def plot_attention(
    run: JointRun,
    ax: Any | None = None,
    *,
    fields: Sequence[str] = ATTENTION_FIELDS,
    shade: bool = True,
    legend: bool = True,
    title: str | None = None,
) -> Any:
    """Average attention by relation over training (the ``"attention"`` probe), in one panel.

    Parameters
    ----------
    run : JointRun
    ax : matplotlib Axes, optional
    fields : sequence of str
        Which of :data:`ATTENTION_FIELDS` to draw.
    shade : bool
        Shade the two stages as in :func:`plot_tracked`.
    legend : bool
    title : str, optional

    Returns
    -------
    ax : matplotlib Axes
    """
    import matplotlib.pyplot as plt

    unknown = [f for f in fields if f not in ATTENTION_FIELDS]
    if unknown:
        raise ValueError(f"fields must be among {ATTENTION_FIELDS}, got {unknown!r}")
    if ax is None:
        _, ax = plt.subplots(figsize=(5.0, 3.0))
    s, att = run.steps, run.probe("attention")
    style = {"self": ("C4", ":"), "same_word": ("C3", "--"), "same_topic": ("C2", "-"), "diff_topic": ("C7", "-")}
    for name in fields:
        colour, ls = style[name]
        ax.plot(s, att[:, ATTENTION_FIELDS.index(name)], color=colour, ls=ls, label=name.replace("_", " "))
    ax.axhline(1.0, color="k", lw=0.6, alpha=0.5)
    ax.set_ylabel("attention / uniform")
    if shade and run.times is not None:
        ax.axvspan(0, run.times.value_step, color="C0", alpha=0.12, lw=0)
        if run.times.attention_step is not None:
            ax.axvspan(run.times.attention_step, float(s[-1]), color="C1", alpha=0.12, lw=0)
    if legend:
        ax.legend(fontsize=7, loc="best")
    if title:
        ax.set_title(title)
    return ax


# ----------------------------------------------------------------------------------------
# Seeded sweeps
# ----------------------------------------------------------------------------------------


@dataclass
class Sweep:
    """Results of :func:`run_seeds` or :func:`run_grid`, one record per call.

    Attributes
    ----------
    records : list of dict
        Each record holds the call's parameters (``"seed"`` and, for a grid, the grid
        keys) and, under ``"result"``, whatever the function returned.

    Examples
    --------
    >>> sweep = run_seeds(lambda seed: {"x": float(seed) ** 2}, [1, 2, 3])
    >>> sweep.values("x")
    array([1., 4., 9.])
    >>> sweep.summary("x")["max"]
    9.0
    """

    records: list[dict[str, Any]]

    def __len__(self) -> int:
        return len(self.records)

    @property
    def seeds(self) -> list[int]:
        """The seed of each record."""
        return [r["seed"] for r in self.records]

    @property
    def results(self) -> list[Any]:
        """What the function returned, one entry per record."""
        return [r["result"] for r in self.records]

    def values(self, key: str | Callable[[Any], Any] | None = None, **where: Any) -> np.ndarray:
        """Stack one quantity over the records.

        Parameters
        ----------
        key : str or callable, optional
            For a result that is a mapping, the entry ``result[key]``; for any other
            result, the attribute ``getattr(result, key)``; a callable is applied to
            the result; None stacks the results themselves.
        **where
            Keep only records whose parameters equal these values (e.g. ``doc_len=20``).

        Returns
        -------
        values : ndarray, shape (num_records, ...)
        """
        out = []
        for r in self.select(**where).records:
            res = r["result"]
            if key is None:
                out.append(res)
            elif callable(key):
                out.append(key(res))
            elif isinstance(res, Mapping):
                if key not in res:
                    raise ValueError(f"no entry {key!r} in the results; entries: {sorted(res)}")
                out.append(res[key])
            elif hasattr(res, key):
                out.append(getattr(res, key))
            else:
                raise ValueError(f"result of type {type(res).__name__} has no attribute {key!r}")
        return np.asarray(out, dtype=float) if all(np.isscalar(o) for o in out) else np.asarray(out)

    def select(self, **where: Any) -> Sweep:
        """The records whose parameters equal ``where`` (e.g. ``sweep.select(doc_len=20)``)."""
        for k in where:
            if self.records and k not in self.records[0]:
                raise ValueError(f"no parameter {k!r}; parameters: {sorted(set(self.records[0]) - {'result'})}")
        return Sweep([r for r in self.records if all(r[k] == v for k, v in where.items())])

    def summary(self, key: str | Callable[[Any], Any] | None = None, **where: Any) -> dict[str, float]:
        """``{"mean", "std", "min", "max", "n"}`` of a scalar quantity over the records (see :meth:`values`)."""
        v = self.values(key, **where).astype(float)
        if v.ndim != 1 or v.size == 0:
            raise ValueError(f"summary needs one scalar per record, got shape {v.shape}")
        return {"mean": float(v.mean()), "std": float(v.std(ddof=1)) if v.size > 1 else 0.0,
                "min": float(v.min()), "max": float(v.max()), "n": int(v.size)}


def run_seeds(fn: Callable[[int], Any], seeds: Iterable[int] | int, *, reseed: bool = True) -> Sweep:
    """Call ``fn(seed)`` once per seed and collect the results.

    This is the package's one way to check that a claim holds across seeds: write the
    experiment as a function of the seed that returns its metrics (a dict of floats is
    most convenient), then read them with :meth:`Sweep.values` or :meth:`Sweep.summary`.

    Parameters
    ----------
    fn : callable
        ``fn(seed) -> result``. It should pass ``seed`` on to every random call (model
        initialisation, data, masks); results are then reproducible and independent of
        call order.
    seeds : iterable of int, or int
        Distinct non-negative seeds; an int ``n`` means ``range(n)``.
    reseed : bool
        Also call :func:`topicmech.utils.seed_everything` before each call, as a guard
        against code that draws from global random state.

    Returns
    -------
    Sweep
        One record ``{"seed": seed, "result": fn(seed)}`` per seed, in order.

    Examples
    --------
    >>> def experiment(seed):
    ...     rng = np.random.default_rng(seed)
    ...     return {"mean": float(rng.normal(size=1000).mean())}
    >>> sweep = run_seeds(experiment, 5)
    >>> bool(abs(sweep.summary("mean")["mean"]) < 0.1)
    True
    """
    if not callable(fn):
        raise ValueError(f"fn must be callable, got {fn!r}")
    records = []
    for seed in check_seeds(seeds):
        if reseed:
            seed_everything(seed)
        records.append({"seed": seed, "result": fn(seed)})
    return Sweep(records)


def run_grid(
    fn: Callable[..., Any],
    grid: Mapping[str, Sequence[Any]],
    seeds: Iterable[int] | int = 1,
    *,
    reseed: bool = True,
) -> Sweep:
    """Call ``fn(seed=seed, **params)`` for every combination of ``grid`` and every seed.

    Parameters
    ----------
    fn : callable
        Takes ``seed`` and one keyword argument per grid key.
    grid : mapping of str to sequence
        E.g. ``{"doc_len": [10, 20, 40], "topics_per_doc": [1, 2]}``; the product is
        swept in the order given, seeds innermost.
    seeds : iterable of int, or int
        As in :func:`run_seeds` (default: the single seed 0).
    reseed : bool
        As in :func:`run_seeds`.

    Returns
    -------
    Sweep
        Records ``{"seed": ..., **params, "result": ...}``; select a slice with
        :meth:`Sweep.select` or pass the parameters to :meth:`Sweep.values`.

    Examples
    --------
    >>> sweep = run_grid(lambda seed, n: {"y": n * 10 + seed}, {"n": [1, 2]}, seeds=2)
    >>> sweep.values("y", n=2)
    array([20., 21.])
    """
    if not callable(fn):
        raise ValueError(f"fn must be callable, got {fn!r}")
    if not isinstance(grid, Mapping) or not grid:
        raise ValueError(f"grid must be a non-empty mapping of parameter names to values, got {grid!r}")
    for k, vals in grid.items():
        if k in ("seed", "result"):
            raise ValueError(f"grid keys must not be 'seed' or 'result', got {k!r}")
        if isinstance(vals, (str, bytes)) or not isinstance(vals, Iterable) or len(list(vals)) == 0:
            raise ValueError(f"grid[{k!r}] must be a non-empty sequence, got {vals!r}")
    seed_list = check_seeds(seeds)
    keys = list(grid)
    records = []
    for combo in itertools.product(*(list(grid[k]) for k in keys)):
        params = dict(zip(keys, combo))
        for seed in seed_list:
            if reseed:
                seed_everything(seed)
            records.append({"seed": seed, **params, "result": fn(seed=seed, **params)})
    return Sweep(records)
