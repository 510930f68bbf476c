"""House style and the few figures every chapter reuses.

Heatmaps keep words sorted by topic and draw the topic boundaries, so block structure shows at a glance.
The house style is seaborn's white grid with its colour-blind palette, written out as matplotlib
settings (:data:`SEABORN_THEME`): importing seaborn pulls in ``scipy.stats`` and costs about 1.2 s
per page, so only the pages that draw with seaborn itself import it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import torch

from .probes import ATTENTION_FIELDS

if TYPE_CHECKING:  # pragma: no cover - annotations only: plotting imports no chapter module
    import pandas as pd

    from .dynamics import JointRun, StageTimes
    from .word_pairs import AttentionStats

__all__ = ["SEABORN_THEME", "set_style", "heatmap_by_topic", "compare_heatmaps", "loss_curve", "plot_attention_gap",
           "plot_embedding_thresholds", "plot_tracked", "plot_attention", "label_token_axes",
           "stage_legend_handles", "summary_table"]

_COLORBLIND = ["#0173b2", "#de8f05", "#029e73", "#d55e00", "#cc78bc", "#ca9161", "#fbafe4", "#949494", "#ece133",
               "#56b4e9"]

#: What ``seaborn.set_theme(style="whitegrid", palette="colorblind", context="notebook")`` sets, as
#: matplotlib settings (the tests compare them with seaborn's), except its own default colour map.
#:
#: :meta hide-value:
SEABORN_THEME: dict[str, object] = {
    "axes.axisbelow": True, "axes.edgecolor": ".8", "axes.facecolor": "white", "axes.grid": True,
    "axes.labelcolor": ".15", "axes.labelsize": 12.0, "axes.linewidth": 1.25,
    "axes.prop_cycle": matplotlib.cycler(color=_COLORBLIND), "axes.titlesize": 12.0,
    "axes.spines.bottom": True, "axes.spines.left": True, "axes.spines.right": True, "axes.spines.top": True,
    "figure.facecolor": "white", "font.family": ["sans-serif"],
    "font.sans-serif": ["Arial", "DejaVu Sans", "Liberation Sans", "Bitstream Vera Sans", "sans-serif"],
    "font.size": 12.0, "grid.color": ".8", "grid.linestyle": "-", "grid.linewidth": 1.0,
    "legend.fontsize": 11.0, "legend.title_fontsize": 12.0, "lines.linewidth": 1.5, "lines.markersize": 6.0,
    "lines.solid_capstyle": "round", "patch.edgecolor": "w", "patch.force_edgecolor": True, "patch.linewidth": 1.0,
    "text.color": ".15", "xtick.bottom": False, "xtick.color": ".15", "xtick.direction": "out",
    "xtick.labelsize": 11.0, "xtick.major.size": 6.0, "xtick.major.width": 1.25, "xtick.minor.size": 4.0,
    "xtick.minor.width": 1.0, "xtick.top": False, "ytick.color": ".15", "ytick.direction": "out",
    "ytick.labelsize": 11.0, "ytick.left": False, "ytick.major.size": 6.0, "ytick.major.width": 1.25,
    "ytick.minor.size": 4.0, "ytick.minor.width": 1.0, "ytick.right": False,
}


def set_style() -> None:
    """Seaborn's white-grid style with a colour-blind palette (:data:`SEABORN_THEME`) and compact figures."""
    matplotlib.rcParams.update(SEABORN_THEME)
    matplotlib.rcParams.update({"figure.figsize": (6.0, 4.0), "figure.dpi": 90, "savefig.dpi": 90,
                                "axes.titlesize": "medium"})


def summary_table(rows: Sequence[Mapping[str, Any]], columns: Mapping[str, tuple[str, str]]) -> pd.DataFrame:
    """A narrow table of strings for display, one row per row of ``rows``.

    ``columns`` maps each display label to ``(name, spec)``: a row's ``name`` entry formatted with
    the format spec (``""`` for strings), or, when the rows have no ``name`` but ``{name}_mean`` and
    ``{name}_std`` (as :func:`topicmech.runner.aggregate` gives), ``"mean ± sd"`` with both numbers
    in that spec. Keep the numbers themselves for the checks: the table holds only text.

    Examples
    --------
    >>> rows = [{"alpha": 0.5, "gap_mean": 0.2381, "gap_std": 0.0036}]
    >>> summary_table(rows, {"α": ("alpha", ".2f"), "gap": ("gap", ".3f")}).iloc[0].tolist()
    ['0.50', '0.238 ± 0.004']
    """
    import pandas as pd

    if not rows:
        raise ValueError("rows must not be empty")
    out: dict[str, list[str]] = {}
    for label, (name, spec) in columns.items():
        cells = []
        for r in rows:
            if name in r:
                cells.append(format(r[name], spec))
            elif f"{name}_mean" in r and f"{name}_std" in r:
                cells.append(f"{format(r[f'{name}_mean'], spec)} ± {format(r[f'{name}_std'], spec)}")
            else:
                raise ValueError(f"column {name!r} (for {label!r}) is in no form in the rows; columns: {sorted(r)}")
        out[label] = cells
    return pd.DataFrame(out)


def _np(x: torch.Tensor | np.ndarray) -> np.ndarray:
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def heatmap_by_topic(
    matrix: torch.Tensor | np.ndarray,
    words_per_topic: int,
    *,
    ax: plt.Axes | None = None,
    title: str = "",
    center: float | None = 0.0,
    cmap: str = "RdBu_r",
    limits: tuple[float, float] | None = None,
    colorbar: bool = True,
    label_mask: bool = True,
    colorbar_label: str | None = None,
    mask_label_at: str = "top",
) -> plt.Axes:
    """Heatmap of a token-by-token matrix with topic boundaries drawn; returns the Axes.

    Parameters
    ----------
    matrix : array, shape (V, V) or (V + 1, V + 1)
        Words sorted by topic (the package's convention); with ``V + 1`` the last row and
        column are ``[MASK]`` (marked when ``label_mask``).
    words_per_topic : int
        ``v``, for the boundary lines.
    center : float or None
        Value at the middle of the diverging colour map ``cmap``, whose limits are then
        symmetric about it (None: sequential ``viridis`` from the smallest to the largest entry).
    limits : (low, high) or None
        Colour limits, overriding the ones ``center`` gives (to share one scale across panels).
    colorbar : bool
        Draw a colour bar beside the heatmap.
    colorbar_label : str or None
        Label of the colour bar (None: no label).
    mask_label_at : {"top", "bottom"}
        Where the ``[MASK]`` marker goes: above the last column (the default) or below it,
        out of the way of a panel title.
    """
    M = _np(matrix)
    if M.ndim != 2:
        raise ValueError(f"matrix must be 2-D, got shape {M.shape}")
    if mask_label_at not in ("top", "bottom"):
        raise ValueError(f"mask_label_at must be 'top' or 'bottom', got {mask_label_at!r}")
    if ax is None:
        _, ax = plt.subplots(figsize=(4.2, 3.6))
    if limits is not None:
        low, high = limits
    elif center is not None:
        half = float(np.nanmax(np.abs(M - center)))                           # NaN entries stay blank
        low, high = center - half, center + half
    else:
        low, high = float(np.nanmin(M)), float(np.nanmax(M))
    rows, cols = M.shape
    image = ax.imshow(M, cmap=cmap if center is not None else "viridis", vmin=low, vmax=high,
                      extent=(0, cols, rows, 0), interpolation="nearest")   # cell (i, j) spans [j, j+1] x [i, i+1]
    ax.set_xticks([])
    ax.set_yticks([])
    ax.grid(False)
    if colorbar:
        bar = ax.figure.colorbar(image, ax=ax, shrink=0.8)
        if colorbar_label is not None:
            bar.set_label(colorbar_label)
    V = (M.shape[0] // words_per_topic) * words_per_topic
    for b in range(words_per_topic, V, words_per_topic):
        ax.axhline(b, color="k", lw=0.4, alpha=0.5)
        ax.axvline(b, color="k", lw=0.4, alpha=0.5)
    if label_mask and M.shape[0] == V + 1:
        ax.axhline(V, color="k", lw=1.0)
        ax.axvline(V, color="k", lw=1.0)
        if mask_label_at == "top":
            ax.text(V + 0.5, -0.6, "[M]", ha="center", va="bottom", fontsize=9)
        else:
            ax.text(V + 0.5, rows + 0.6, "[M]", ha="center", va="top", fontsize=9)
    ax.set_title(title)
    return ax


def compare_heatmaps(
    matrices: Sequence[torch.Tensor | np.ndarray],
    titles: Sequence[str],
    words_per_topic: int,
    *,
    center: float | None = 0.0,
    shared_scale: bool = True,
    colorbar_label: str | None = None,
    mask_label_at: str = "top",
    ncols: int | None = None,
) -> plt.Figure:
    """Heatmaps side by side (e.g. predicted next to learned), optionally on one colour scale.

    ``colorbar_label`` and ``mask_label_at`` are passed to :func:`heatmap_by_topic` for
    every panel. ``ncols`` panels go in a row (default: all in one row); more panels wrap
    onto further rows, so that four panels can make a 2 x 2 grid that stays readable at
    page width.
    """
    if len(matrices) != len(titles):
        raise ValueError(f"got {len(matrices)} matrices but {len(titles)} titles")
    if ncols is None:
        ncols = len(matrices)
    if isinstance(ncols, bool) or not isinstance(ncols, int) or ncols < 1:
        raise ValueError(f"ncols must be a positive integer, got {ncols!r}")
    ncols = min(ncols, len(matrices))
    nrows = -(-len(matrices) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.0 * ncols, 3.6 * nrows), squeeze=False)
    for ax in axes.ravel()[len(matrices):]:
        ax.set_axis_off()                      # a last row that is not full
    arrays = [_np(m) for m in matrices]
    lim = max(float(np.nanmax(np.abs(a - (center or 0.0)))) for a in arrays) if shared_scale else None
    for ax, a, t in zip(axes.ravel(), arrays, titles):
        limits = (center - lim, center + lim) if lim is not None and center is not None else None
        heatmap_by_topic(a, words_per_topic, ax=ax, title=t, center=center, limits=limits,
                         colorbar_label=colorbar_label, mask_label_at=mask_label_at)
    fig.tight_layout()
    return fig


def label_token_axes(fig: plt.Figure, value: str = "inner product") -> plt.Figure:
    """Label every heatmap of ``fig`` as token by token and every colour bar with ``value``.

    For the ``(D, D)`` heatmaps of :func:`compare_heatmaps` (words sorted by topic, ``[MASK]``
    last); returns ``fig``.
    """
    if not isinstance(fig, plt.Figure):
        raise ValueError(f"fig must be a matplotlib Figure, got {type(fig).__name__}")
    if not isinstance(value, str) or not value:
        raise ValueError(f"value must be a non-empty label, got {value!r}")
    for ax in fig.axes:
        if ax.get_label() == "<colorbar>":
            ax.set_ylabel(value, fontsize=10)
        else:
            ax.set_xlabel("token (sorted by topic, [MASK] last)", fontsize=10)
            ax.set_ylabel("token", fontsize=10)
    return fig


def loss_curve(history, *, ax: plt.Axes | None = None, reference: float | None = None,
               reference_label: str = "optimum", window: int = 50, label: str | None = None) -> plt.Axes:
    """Smoothed training loss of ``history`` (a :class:`topicmech.train.History`), with an optional
    horizontal reference line; returns the Axes."""
    if ax is None:
        _, ax = plt.subplots(figsize=(5.0, 3.2))
    ax.plot(history.step, history.smoothed_loss(window), label=label or f"training loss (mean of {window})")
    if reference is not None:
        ax.axhline(reference, color="k", ls="--", lw=1, label=reference_label)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.legend()
    return ax


def plot_attention_gap(stats: AttentionStats, *, ax: plt.Axes | None = None, title: str = "", alpha: float = 0.05,
                       vmax: float | None = None, method: Literal["percentile", "normal"] = "percentile") -> plt.Axes:
    """Layer-by-head heatmap of the attention ``gap`` (in units of uniform attention, as
    :class:`~topicmech.word_pairs.AttentionStats` holds it) with colour limit ``vmax`` (default: the largest
    absolute gap); ``+`` (``-``) marks heads whose Bonferroni-corrected interval (``method`` of
    :meth:`~topicmech.word_pairs.AttentionStats.significant`) lies above (below) 0."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6.0, 3.2))
    g = stats.gap
    v = vmax if vmax is not None else float(np.nanmax(np.abs(g)))
    im = ax.imshow(g, cmap="RdBu_r", vmin=-v, vmax=v, aspect="auto")
    for (layer, h), s in np.ndenumerate(stats.significant(alpha, method=method)):
        if s:
            ax.text(h, layer, "+" if s > 0 else "\u2212", ha="center", va="center", fontsize=9,
                    color="white" if abs(g[layer, h]) > 0.6 * v else "black")
    ax.set(xticks=range(g.shape[1]), yticks=range(g.shape[0]), xlabel="head", ylabel="layer", title=title)
    ax.grid(False)
    ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.02, label="same − different topic\n(units of uniform attention)")
    return ax


def plot_embedding_thresholds(frames: Mapping[str, pd.DataFrame], *, metric: str = "cosine",
                              ax: plt.Axes | None = None) -> plt.Axes:
    """Gap with intervals against the threshold for ``metric`` ("cosine" or "inner"), one line per
    :func:`~topicmech.pretrained.embedding_stats_by_threshold` frame in ``frames``."""
    if ax is None:
        _, ax = plt.subplots(figsize=(5.0, 3.4))
    for k, (label, df) in enumerate(frames.items()):
        d = df[df["metric"] == metric]
        x, y = d["threshold"].to_numpy() + 0.008 * (k - (len(frames) - 1) / 2), d["gap"].to_numpy()
        ax.errorbar(x, y, yerr=np.vstack([y - d["gap_low"].to_numpy(), d["gap_high"].to_numpy() - y]), marker="o",
                    capsize=3, label=label)
    ax.axhline(0.0, color="grey", lw=0.8)
    ax.set(xlabel="topic-specificity threshold on p(topic | word)", ylabel=f"{metric}: same − different topic")
    ax.legend()
def _shade(ax: plt.Axes, times: StageTimes, end: float) -> None:
    """Shade stage 1 (up to ``times.value_step``) and stage 2 (from ``times.attention_step``) of ``ax``."""
    ax.axvspan(0, times.value_step, color="C0", alpha=0.12, lw=0)
    if times.attention_step is not None:
        ax.axvspan(times.attention_step, end, color="C1", alpha=0.12, lw=0)


def stage_legend_handles(overlap: bool = False) -> list:
    """Legend entries for the stage shading of :func:`plot_tracked` and :func:`plot_attention`.

    Stage 1 (until ``t_V``) and stage 2 (from ``t_A``); with ``overlap`` also the colour where
    the stage-2 shading lies over the stage-1 shading (on white).
    """
    from matplotlib.patches import Patch

    c0, c1 = (np.array(matplotlib.colors.to_rgb(c)) for c in ("C0", "C1"))
    a = 0.12
    both = (1 - a) * ((1 - a) + a * c0) + a * c1
    handles = [Patch(color=(*c0, a), label="stage 1 (until $t_V$)"),
               Patch(color=(*c1, a), label="stage 2 (from $t_A$)")]
    if overlap:
        handles.append(Patch(color=both, label="both: the stages overlap"))
    return handles


def plot_tracked(
    run: JointRun, *, axes: Sequence[Any] | None = None, loss_reference: float | None = None,
    loss_window: int = 50, title: str | None = None, shade: bool = True, legend: bool = True,
    step_scale: Literal["linear", "sqrt", "log"] = "linear", score_linthresh: float | None = None,
) -> plt.Figure:
    """Four panels on a shared step axis: ``W^V`` gap, key-query matrix, attention, loss; returns the figure.

    Draws into ``axes`` (4 Axes) or a new figure; ``shade`` shades the two stages;
    ``loss_reference`` adds a line to the loss panel (smoothed over ``loss_window`` steps);
    ``step_scale="sqrt"`` or ``"log"`` (linear below step 10) keeps a short stage 1 visible.
    The key-query panel is on a symmetric-log scale, so that a score contrast that starts
    negative and crosses zero stays drawn: linear within ``+-score_linthresh``, logarithmic
    outside (default: the power of 10 at or below the size of the first nonzero contrast).
    """
    if step_scale not in ("linear", "sqrt", "log"):
        raise ValueError(f"step_scale must be 'linear', 'sqrt' or 'log', got {step_scale!r}")
    if score_linthresh is not None and not (np.isfinite(score_linthresh) and score_linthresh > 0):
        raise ValueError(f"score_linthresh must be a finite number > 0, got {score_linthresh!r}")
    if axes is None:
        fig, axes = plt.subplots(4, 1, figsize=(6.4, 7.4), sharex=True)
    elif len(axes) != 4:
        raise ValueError(f"axes must hold 4 Axes, got {len(axes)}")
    else:
        fig = axes[0].figure
    h, s, times = run.history, run.steps, run.times
    ax_v, ax_a, ax_att, ax_l = axes
    if "value_gap" in h.probes:
        ax_v.plot(s, run.probe("value_gap"), color="C0", label=r"$\|W^V - W^{*}\| / \|W^{*}\|$")
    ax_v.set(ylabel=r"$W^V$ gap", ylim=(0, None))
    contrast = run.probe("kq_same_topic").astype(float)
    if score_linthresh is None:
        nonzero = np.abs(contrast[np.isfinite(contrast) & (contrast != 0)])
        score_linthresh = 10.0 ** math.floor(math.log10(nonzero[0])) if nonzero.size else 1e-3
    ax_a.plot(s, run.probe("kq_norm"), color="C1", label=r"$\|A\|_F$")
    ax_a.plot(s, contrast, color="C2", label="same-topic score contrast")
    ax_a.set_yscale("symlog", linthresh=score_linthresh)
    ax_a.axhline(0.0, color="k", lw=0.6, alpha=0.5, label="zero")
    ax_a.set_ylabel("key-query score")
    plot_attention(run, ax_att, shade=False, legend=False)
    ax_l.plot(h.step, h.smoothed_loss(loss_window), color="C0", lw=1, label="training loss")
    if loss_reference is not None:
        ax_l.axhline(loss_reference, color="k", ls="--", lw=1, label=r"$W^{*}$, uniform attention")
    ax_l.set(ylabel="loss", xlabel="step")
    if shade and times is not None:
        for ax in axes:
            _shade(ax, times, float(s[-1]))
        ymax = ax_v.get_ylim()[1]
        for step, name, colour in ((times.value_step, "1", "C0"), (times.attention_step, "2", "C1")):
            if step is not None:
                ax_v.text(step, 0.92 * ymax, f" stage {name}", ha="left", va="top", fontsize=8, color=colour)
    if step_scale == "log":
        ax_l.set_xscale("symlog", linthresh=10)
    elif step_scale == "sqrt":
        ax_l.set_xscale("function", functions=(np.sqrt, np.square))
        ax_l.set_xticks([t for t in (0, 20, 100, 250, 500, 1000, 2000, 4000, 8000, 16000) if t <= s[-1]])
    ax_l.set_xlim(0, float(s[-1]))
    if legend:
        for ax in axes:
            ax.legend(fontsize=7, loc="best")
    if title:
        ax_v.set_title(title)
    return fig


def plot_attention(
    run: JointRun, ax: Any | None = None, *, fields: Sequence[str] = ATTENTION_FIELDS, shade: bool = True,
    legend: bool = True, title: str | None = None,
) -> plt.Axes:
    """Average attention by relation over training (the ``"attention"`` probe) in one panel; returns the Axes.

    ``fields``: which of :data:`topicmech.probes.ATTENTION_FIELDS` to draw; ``shade``: the stages, as in
    :func:`plot_tracked`.
    """
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
    ax.axhline(1.0, color="k", lw=0.6, alpha=0.5, label="uniform")
    ax.set_ylabel("attention / uniform")
    if shade and run.times is not None:
        _shade(ax, run.times, float(s[-1]))
    if legend:
        ax.legend(fontsize=7, loc="best")
    if title:
        ax.set_title(title)
    return ax
