"""Readings of a training trace: when it closes or reaches a level, how fast it grows, log-log slopes.

A trace is a pair ``(steps, values)`` of 1-D arrays of equal length, e.g. ``history.probe_step``
and ``history.probe(name)`` of :class:`topicmech.train.History`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np

from .utils import check_float, check_positive_int

__all__ = ["loglog_slope", "closing_step", "reaching_step", "growth_rate", "predicted_growth_rate",
           "onset_step", "count_interval"]

_Trace = Sequence[float] | np.ndarray


def _trace(steps: _Trace, values: _Trace, fraction: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    s, v = np.asarray(steps), np.asarray(values, dtype=float)
    if s.ndim != 1 or v.ndim != 1 or s.shape != v.shape or s.size == 0:
        raise ValueError(f"steps and values must be 1-D, non-empty, of the same length, got {s.shape}, {v.shape}")
    if not np.all(np.isfinite(v)):
        raise ValueError("values must be finite")
    if fraction is not None and not (0.0 < float(fraction) <= 1.0):
        raise ValueError(f"fraction must be in (0, 1], got {fraction!r}")
    return s, v


def loglog_slope(x: _Trace, y: _Trace) -> float:
    """Least-squares slope ``p`` of ``log y`` against ``log x`` (``y ~ x^p``), for positive 1-D ``x``, ``y``."""
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if xs.shape != ys.shape or xs.ndim != 1 or xs.size < 2:
        raise ValueError(f"x and y must be 1-D of the same length >= 2, got shapes {xs.shape} and {ys.shape}")
    if np.any(xs <= 0) or np.any(ys <= 0):
        raise ValueError("x and y must be positive for a log-log slope")
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


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


def growth_rate(steps: _Trace, values: _Trace, low: float = 0.02, high: float = 0.3) -> float:
    """Growth rate per step: slope of ``log(values)`` over the first window where ``low <= values <= high``.

    The window (the exponential phase) runs from the first value ``>= low`` (``0 < low < high``)
    to before the first later value ``> high``; fewer than two positive points there raise
    ValueError. ``values`` is e.g. the ``"same_topic"`` probe of :func:`topicmech.stage2.run_stage2`.
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
    if i1 - i0 < 2 or np.any(v[i0:i1] <= 0):
        raise ValueError(f"fewer than two positive points between low={low!r} and high={high!r}")
    return float(np.polyfit(s[i0:i1].astype(float), np.log(v[i0:i1]), 1)[0])


def predicted_growth_rate(lr: float, eigenvalue: float, d_model: int) -> float:
    """Initial e-folding rate ``2 lr lambda / sqrt(d)`` per plain-SGD step of the topic contrast of ``A = W_K^T W_Q / sqrt(d)``.

    With ``-G = -dL/dA`` at uniform attention acting as ``lambda`` (``eigenvalue``, e.g.
    :func:`topicmech.probes.topic_growth_eigenvalue` or
    :attr:`topicmech.stage2.GradientSummary.topic_eigenvalue`) on topic contrasts, ``W_K a`` and
    ``W_Q a`` feed each other, so ``a^T A a`` grows by ``(1 + lr lambda / sqrt(d))^2`` per step;
    ``d_model`` is ``d`` (``D`` for one-hot embeddings).
    """
    lr = check_float("lr", lr)
    lam = float(eigenvalue) if isinstance(eigenvalue, (int, float, np.integer, np.floating)) \
        and not isinstance(eigenvalue, bool) else math.nan
    if not math.isfinite(lam):
        raise ValueError(f"eigenvalue must be a finite float, got {eigenvalue!r}")
    return 2.0 * lr * lam / math.sqrt(check_positive_int("d_model", d_model))


def onset_step(level: float, amplitude: float, rate: float) -> float:
    """Steps for ``amplitude * exp(rate * t)`` to reach ``level``: ``ln(level / amplitude) / rate``.

    The linear-phase prediction of when stage 2 shows, e.g. with ``amplitude`` from
    :func:`topicmech.probes.growing_topic_contrast` and ``rate`` from :func:`predicted_growth_rate`;
    all three must be positive.
    """
    for name, x in (("level", level), ("amplitude", amplitude), ("rate", rate)):
        if not (isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)
                and math.isfinite(float(x)) and float(x) > 0):
            raise ValueError(f"{name} must be a positive finite number, got {x!r}")
    return math.log(float(level) / float(amplitude)) / float(rate)


def count_interval(successes: int, trials: int, level: float = 0.95) -> tuple[float, float]:
    """Exact (Clopper-Pearson) two-sided ``level`` interval for a proportion seen as ``successes`` of ``trials``.

    E.g. how many of the stored seeds end as copiers: 10 of 10 gives about ``(0.69, 1.0)`` at
    95%. ``trials >= 1``, ``0 <= successes <= trials``, ``0 < level < 1``.
    """
    n = check_positive_int("trials", trials)
    if isinstance(successes, bool) or not isinstance(successes, (int, np.integer)) or not 0 <= successes <= n:
        raise ValueError(f"successes must be an int between 0 and trials={n}, got {successes!r}")
    q = check_float("level", level)
    if not 0 < q < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    from scipy.stats import beta

    k, tail = int(successes), (1 - q) / 2
    lo = 0.0 if k == 0 else float(beta.ppf(tail, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - tail, k + 1, n - k))
    return lo, hi
