"""Tests of :func:`topicmech.theory.weighted_block_gap` (book ch. 4, the authors' stage-1 constant).

The weighted gap ``(w_diag + (v - 1) w_same) / v - w_diff`` of the exact stage-1 optimum tends,
as ``N -> inf``, to ``1 / (v (1 - (1 - p_c) p_m))`` with visible masked keys (the constant the
authors state) and to ``1 / v`` with hidden masked keys. These tests check the finite-N
values against the dense optimum, the limits to 1e-6 on parameter sets well beyond the
book's, the ridge route to the minimum-norm optimum, and the input validation.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from topicmech import theory
from topicmech.setting import Masking, Setting

# (T, v, tau, p_m, p_c, p_r): the book's settings first, then corners of the parameter space.
PARAMETER_SETS = [
    (10, 10, 2, 0.15, 0.1, 0.1),
    (5, 4, 2, 0.15, 0.1, 0.1),
    (3, 7, 1, 0.5, 0.3, 0.2),
    (8, 2, 5, 0.9, 0.5, 0.5),   # no [MASK] token at all (p_[M] = 0)
    (4, 1, 3, 0.3, 0.0, 0.7),   # one word per topic, no keep branch
    (20, 3, 19, 0.05, 0.9, 0.0),
    (2, 2, 1, 0.6, 0.0, 0.0),   # only [MASK] replacement
]
CONVENTIONS = (True, False)


def setting(params: tuple, N: int | float, si: bool) -> Setting:
    """The Setting of a parameter set (T, v, tau, p_m, p_c, p_r) at length N."""
    T, v, tau, p_m, p_c, p_r = params
    return Setting(T, v, tau, N, masking=Masking(p_m, p_c, p_r), attend_to_masked=si)


def closed_form_limit(v: int, p_m: float, p_c: float, attend_to_masked: bool) -> float:
    return 1.0 / (v * (1.0 - (1.0 - p_c) * p_m)) if attend_to_masked else 1.0 / v


@pytest.mark.parametrize("si", CONVENTIONS)
@pytest.mark.parametrize("params", PARAMETER_SETS[:4])
def test_finite_n_matches_the_dense_optimum(params, si):
    T, v, tau, p_m, p_c, p_r = params
    for N in (2, 7, 64):
        W = theory.optimal_value_matrix(setting(params, N, si))
        means = theory.orbit_means(W, T, v)
        expected = (means.diag + (v - 1) * means.same_topic) / v - means.diff_topic
        gap = theory.weighted_block_gap(setting(params, N, si))
        blocks = theory.value_block_coefficients(setting(params, N, si))
        assert abs(gap - expected) < 1e-10
        assert abs(gap - blocks.topic_eigenvalue / v) < 1e-12  # the gap is the topic eigenvalue over v


def test_the_authors_numbers():
    """v = 4, T = 5, tau = 2, p = 0.15/0.1/0.1 with visible keys, to the five digits recorded."""
    expected = {20: 0.27443, 100: 0.28599, 1000: 0.28871, 100_000: 0.28901, math.inf: 0.28902}
    for N, value in expected.items():
        assert abs(theory.weighted_block_gap(Setting(5, 4, 2, N, attend_to_masked=True)) - value) < 6e-6
    assert abs(theory.weighted_block_gap(Setting(5, 4, 2, math.inf, attend_to_masked=False)) - 0.25) < 1e-15


@pytest.mark.parametrize("si", CONVENTIONS)
@pytest.mark.parametrize("params", PARAMETER_SETS)
def test_finite_n_values_tend_to_the_closed_form_limit(params, si):
    """Richardson extrapolation 2 g(2N) - g(N) at N = 10^6 hits the closed form to 1e-6."""
    T, v, tau, p_m, p_c, p_r = params
    limit = theory.weighted_block_gap(setting(params, math.inf, si))
    assert limit == pytest.approx(closed_form_limit(v, p_m, p_c, si), abs=1e-15)

    def gap(N: int) -> float:
        return theory.weighted_block_gap(setting(params, N, si))

    g1, g2 = gap(10**6), gap(2 * 10**6)
    assert abs(2 * g2 - g1 - limit) < 1e-6, (g1, g2, limit)
    # and the distance to the limit shrinks along the way (no overshoot in N)
    distances = [abs(gap(N) - limit) for N in (10, 100, 1_000, 10_000)]
    assert all(d2 <= d1 + 1e-15 for d1, d2 in zip(distances, distances[1:])), distances
    assert abs(g1 - limit) <= distances[-1] + 1e-15


@pytest.mark.parametrize("si", CONVENTIONS)
@pytest.mark.parametrize("params", PARAMETER_SETS[:3])
def test_minimum_norm_limit_has_the_same_gap(params, si):
    """At N = inf the minimum-norm optimum has the same weighted gap: the two limits commute here."""
    T, v, tau, p_m, p_c, p_r = params
    W = theory.optimal_value_matrix(setting(params, math.inf, si))
    means = theory.orbit_means(W, T, v)
    same = means.same_topic if v > 1 else 0.0
    assert abs((means.diag + (v - 1) * same) / v - means.diff_topic - closed_form_limit(v, p_m, p_c, si)) < 1e-10


@pytest.mark.parametrize("si", CONVENTIONS)
def test_ridge_tends_to_the_minimum_norm_optimum(si):
    """Weight decay: a unique optimum for every l2 > 0, converging to the min-norm one as l2 -> 0."""
    T, v, tau = 5, 4, 2
    for N in (20, math.inf):
        s = Setting(T, v, tau, N, attend_to_masked=si)
        W_mn = theory.optimal_value_matrix(s)
        Sigma, _ = theory.moments(s)
        # Sigma is PSD, so Sigma + l2 I >= l2 I > 0: the ridge objective is strictly convex for every l2 > 0
        assert np.linalg.eigvalsh(Sigma).min() > -1e-14
        distances = []
        for lam in np.logspace(0, -8, 9):
            W = theory.optimal_value_matrix(s, l2=lam)
            distances.append(float(np.linalg.norm(W - W_mn)))
        assert all(d2 < d1 for d1, d2 in zip(distances, distances[1:])), distances
        assert distances[-1] < 1e-3 * distances[0]


def test_tau_equal_t_is_rejected():
    with pytest.raises(ValueError, match="topics_per_doc"):
        theory.weighted_block_gap(Setting(4, 3, 4, 10, attend_to_masked=True))


@pytest.mark.parametrize(
    ("changes", "name"),
    [
        (dict(mask_prob=1.0, keep_prob=0.0), "mask_prob"),   # no true word visible
        (dict(topics_per_doc=5), "topics_per_doc"),          # tau = T
    ],
)
def test_bad_input_names_the_argument(changes, name):
    """The gap's own conditions; Setting validates the fields (tests/test_setting.py)."""
    with pytest.raises(ValueError, match=name):
        theory.weighted_block_gap(Setting(5, 4, 2, 20, attend_to_masked=True).replace(**changes))
    with pytest.raises(ValueError, match="setting"):
        theory.weighted_block_gap((5, 4, 2, 20))  # type: ignore[arg-type]
