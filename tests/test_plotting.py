"""The shared figures: colour limits, colour bars, topic boundaries, and the style without seaborn."""

import subprocess
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from topicmech import plotting  # noqa: E402


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def test_diverging_limits_are_symmetric_about_center():
    M = np.array([[0.0, 2.0], [-0.5, 1.0]])
    ax = plotting.heatmap_by_topic(M, 1)
    assert ax.images[0].get_clim() == (-2.0, 2.0)
    ax = plotting.heatmap_by_topic(M, 1, center=1.0)
    assert ax.images[0].get_clim() == (-0.5, 2.5)


def test_sequential_and_explicit_limits():
    M = np.array([[0.1, 0.4], [0.2, 0.3]])
    assert plotting.heatmap_by_topic(M, 1, center=None).images[0].get_clim() == (0.1, 0.4)
    ax = plotting.heatmap_by_topic(M, 1, center=None, limits=(0.0, 1.0), colorbar=False)
    assert ax.images[0].get_clim() == (0.0, 1.0)
    assert len(ax.figure.axes) == 1                      # no colour-bar axes


def test_topic_boundaries_and_mask_row():
    V, v = 6, 2
    ax = plotting.heatmap_by_topic(np.zeros((V + 1, V + 1)), v)
    # two interior boundaries in each direction, plus the [MASK] separators
    assert len(ax.lines) == 2 * 2 + 2
    assert ax.images[0].get_extent() == [0, V + 1, V + 1, 0]   # cell (i, j) spans [j, j+1] x [i, i+1]


def test_compare_heatmaps_shares_one_scale():
    fig = plotting.compare_heatmaps([np.eye(3), 3 * np.eye(3)], ["a", "b"], 1)
    assert [ax.images[0].get_clim() for ax in fig.axes if ax.images] == [(-3.0, 3.0)] * 2
    with pytest.raises(ValueError, match="titles"):
        plotting.compare_heatmaps([np.eye(3)], ["a", "b"], 1)


def test_bad_matrix_is_rejected():
    with pytest.raises(ValueError, match="2-D"):
        plotting.heatmap_by_topic(np.zeros(3), 1)


def test_house_style_does_not_import_seaborn():
    code = ("import sys, matplotlib; matplotlib.use('Agg'); from topicmech import plotting; plotting.set_style(); "
            "assert 'seaborn' not in sys.modules and 'scipy.stats' not in sys.modules; "
            "import matplotlib.pyplot as plt; assert plt.rcParams['axes.facecolor'] == 'white'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_house_style_is_seaborns_theme():
    """Every setting seaborn's theme makes (but its own colour map) is in SEABORN_THEME, with seaborn's value."""
    code = """
import matplotlib
matplotlib.use("Agg")
from matplotlib.colors import to_rgba
from topicmech import plotting
defaults = dict(matplotlib.rcParams)
matplotlib.rcParams.update(plotting.SEABORN_THEME)     # set_style adds compact figure sizes on top
ours = dict(matplotlib.rcParams)
matplotlib.rcdefaults()
import seaborn as sns
sns.set_theme(style="whitegrid", palette="colorblind", context="notebook")
theirs = dict(matplotlib.rcParams)
changed = {k for k in theirs if theirs[k] != defaults[k]} - {"image.cmap"}
assert changed <= set(plotting.SEABORN_THEME), changed - set(plotting.SEABORN_THEME)
def same(a, b):
    try:
        return a == b or to_rgba(a) == to_rgba(b)
    except (TypeError, ValueError):
        return False
cycle = lambda rc: [to_rgba(c["color"]) for c in rc["axes.prop_cycle"]]
assert cycle(ours) == cycle(theirs)
bad = {k: (ours[k], theirs[k]) for k in plotting.SEABORN_THEME if k != "axes.prop_cycle" and not same(ours[k], theirs[k])}
assert not bad, bad
"""
    subprocess.run([sys.executable, "-c", code], check=True)


def test_nan_entries_do_not_break_the_colour_limits():
    M = np.array([[np.nan, 1.0], [-3.0, 0.5]])
    assert plotting.heatmap_by_topic(M, 1).images[0].get_clim() == (-3.0, 3.0)
    assert plotting.heatmap_by_topic(M, 1, center=None).images[0].get_clim() == (-3.0, 1.0)


def test_plot_tracked_and_plot_attention():
    from topicmech import Setting, dynamics

    run = dynamics.train_joint(Setting(5, 4, 2, 20, attend_to_masked=False), steps=60, lr=10.0, init_scale=0.1, batch_size=32,
                               probe_every=10, num_heldout=16)
    for scale in ("linear", "sqrt", "log"):
        fig = plotting.plot_tracked(run, loss_reference=0.88, step_scale=scale, title="t")
        assert len(fig.axes) == 4
    with pytest.raises(ValueError, match="step_scale"):
        plotting.plot_tracked(run, step_scale="cube")
    # the key-query panel is symlog: a contrast of either sign is drawn whole
    ax_a = plotting.plot_tracked(run, score_linthresh=1e-4).axes[1]
    assert ax_a.get_yscale() == "symlog"
    drawn = ax_a.lines[1].get_ydata()
    assert np.array_equal(drawn, run.probe("kq_same_topic").astype(float))
    with pytest.raises(ValueError, match="score_linthresh"):
        plotting.plot_tracked(run, score_linthresh=0.0)
    ax = plotting.plot_attention(run, fields=("same_topic", "diff_topic"))
    assert len(ax.lines) == 3                                    # two fields and the uniform line
    with pytest.raises(ValueError, match="fields"):
        plotting.plot_attention(run, fields=("topic",))
    with pytest.raises(ValueError, match="axes"):
        plotting.plot_tracked(run, axes=plt.subplots(2, 1)[1])
    plt.close("all")


def test_label_token_axes_labels_heatmaps_and_colour_bars():
    fig = plotting.compare_heatmaps([np.eye(5), -np.eye(5)], ["a", "b"], 2)
    assert plotting.label_token_axes(fig, "Gram entry") is fig
    bars = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
    maps = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    assert bars and maps
    assert all(ax.get_ylabel() == "Gram entry" for ax in bars)
    assert all(ax.get_xlabel().startswith("token") and ax.get_ylabel() == "token" for ax in maps)
    with pytest.raises(ValueError, match="fig"):
        plotting.label_token_axes(maps[0])
    with pytest.raises(ValueError, match="value"):
        plotting.label_token_axes(fig, "")


def test_summary_table_formats_plain_and_mean_sd_columns():
    rows = [
        {"loss": "squared", "l2": 0.001, "gap_mean": 0.23812, "gap_std": 0.00361},
        {"loss": "cross_entropy", "l2": 0.0, "gap_mean": 5.37912, "gap_std": 0.0026},
    ]
    table = plotting.summary_table(rows, {"loss": ("loss", ""), "L2": ("l2", "g"), "gap": ("gap", ".3f")})
    assert list(table.columns) == ["loss", "L2", "gap"]
    assert table["gap"].tolist() == ["0.238 ± 0.004", "5.379 ± 0.003"]
    assert table["L2"].tolist() == ["0.001", "0"]
    assert table["loss"].tolist() == ["squared", "cross_entropy"]
    with pytest.raises(ValueError, match="'nope'"):
        plotting.summary_table(rows, {"x": ("nope", ".2f")})
    with pytest.raises(ValueError, match="rows"):
        plotting.summary_table([], {"x": ("gap", ".2f")})


def test_compare_heatmaps_wraps_panels_into_rows():
    mats = [k * np.eye(3) for k in range(1, 4)]
    fig = plotting.compare_heatmaps(mats, ["a", "b", "c"], 1, ncols=2)
    maps = [ax for ax in fig.axes if ax.images]
    assert len(maps) == 3
    # two rows of two: the fourth slot is switched off
    assert fig.get_size_inches().tolist() == [8.0, 7.2]
    assert sum(not ax.axison for ax in fig.axes) == 1
    assert [ax.images[0].get_clim() for ax in maps] == [(-3.0, 3.0)] * 3
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="ncols"):
            plotting.compare_heatmaps(mats, ["a", "b", "c"], 1, ncols=bad)
