"""House style and the few figures every chapter reuses.

Heatmaps keep words sorted by topic and draw the topic boundaries, so block structure shows at a glance.
The house style is seaborn's white grid with its colour-blind palette, written out as matplotlib
settings (:data:`SEABORN_THEME`): importing seaborn pulls in ``scipy.stats`` and costs about 1.2 s
per page, so only the pages that draw with seaborn itself import it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import torch

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from .word_pairs import AttentionStats

__all__ = ["SEABORN_THEME", "set_style", "heatmap_by_topic", "compare_heatmaps", "loss_curve", "plot_attention_gap",
           "plot_embedding_thresholds"]

_COLORBLIND = ["#0173b2", "#de8f05", "#029e73", "#d55e00", "#cc78bc", "#ca9161", "#fbafe4", "#949494", "#ece133",
               "#56b4e9"]

#: What ``seaborn.set_theme(style="whitegrid", palette="colorblind", context="notebook")`` sets, as
#: matplotlib settings (the tests compare them with seaborn's), except its own default colour map.
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
    """
    M = _np(matrix)
    if M.ndim != 2:
        raise ValueError(f"matrix must be 2-D, got shape {M.shape}")
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
        ax.figure.colorbar(image, ax=ax, shrink=0.8)
    V = (M.shape[0] // words_per_topic) * words_per_topic
    for b in range(words_per_topic, V, words_per_topic):
        ax.axhline(b, color="k", lw=0.4, alpha=0.5)
        ax.axvline(b, color="k", lw=0.4, alpha=0.5)
    if label_mask and M.shape[0] == V + 1:
        ax.axhline(V, color="k", lw=1.0)
        ax.axvline(V, color="k", lw=1.0)
        ax.text(V + 0.5, -0.6, "[M]", ha="center", va="bottom", fontsize=7)
    ax.set_title(title)
    return ax


def compare_heatmaps(
    matrices: Sequence[torch.Tensor | np.ndarray],
    titles: Sequence[str],
    words_per_topic: int,
    *,
    center: float | None = 0.0,
    shared_scale: bool = True,
) -> plt.Figure:
    """Side-by-side heatmaps (e.g. predicted next to learned), optionally on one colour scale."""
    if len(matrices) != len(titles):
        raise ValueError(f"got {len(matrices)} matrices but {len(titles)} titles")
    fig, axes = plt.subplots(1, len(matrices), figsize=(4.0 * len(matrices), 3.6), squeeze=False)
    arrays = [_np(m) for m in matrices]
    lim = max(float(np.nanmax(np.abs(a - (center or 0.0)))) for a in arrays) if shared_scale else None
    for ax, a, t in zip(axes[0], arrays, titles):
        limits = (center - lim, center + lim) if lim is not None and center is not None else None
        heatmap_by_topic(a, words_per_topic, ax=ax, title=t, center=center, limits=limits)
    fig.tight_layout()
    return fig


def loss_curve(history, *, ax: plt.Axes | None = None, reference: float | None = None,
               reference_label: str = "optimum", window: int = 50, label: str | None = None) -> plt.Axes:
    """Smoothed training loss, with an optional horizontal reference line."""
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
                       vmax: float | None = None) -> plt.Axes:
    """Layer-by-head heatmap of the attention ``gap`` with colour limit ``vmax`` (default: the largest
    absolute gap); ``+`` (``-``) marks heads whose Bonferroni-corrected interval lies above (below) 0."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6.0, 3.2))
    g = stats.gap
    v = vmax if vmax is not None else float(np.nanmax(np.abs(g)))
    im = ax.imshow(g, cmap="RdBu_r", vmin=-v, vmax=v, aspect="auto")
    for (layer, h), s in np.ndenumerate(stats.significant(alpha)):
        if s:
            ax.text(h, layer, "+" if s > 0 else "\u2212", ha="center", va="center", fontsize=9,
                    color="white" if abs(g[layer, h]) > 0.6 * v else "black")
    ax.set(xticks=range(g.shape[1]), yticks=range(g.shape[0]), xlabel="head", ylabel="layer", title=title)
    ax.grid(False)
    ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.02, label="same − different topic")
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
    return ax
