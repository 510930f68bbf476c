"""The N -> inf limit of the tied attention (``doc_len=math.inf``), in both key conventions: the
limit value matrix, the exact limit loss, the closed form with hidden keys, and the finite-N
optima converging to the limit optimum (Monte Carlo, with stated tolerances)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from topicmech import theory as th
from topicmech.setting import Masking, Setting

CONVENTIONS = pytest.mark.parametrize("visible", [False, True], ids=["hidden", "visible"])


def limit(T=5, v=3, tau=2, *, visible, **masking):
    return Setting(T, v, tau, math.inf, masking=Masking(**masking), attend_to_masked=visible)


@CONVENTIONS
def test_stage1_limit_blocks_are_the_limit_of_the_finite_optima(visible):
    """lim W*(N): the orbit values of W*(N) approach it like 1/N (error at N = 10^4 below 1/50 of that at 100)."""
    lim = th.stage1_limit_blocks(limit(visible=visible))
    errors = []
    for n in (100, 10_000):
        b = th.value_block_coefficients(limit(visible=visible).replace(doc_len=n))
        errors.append(max(abs(getattr(b, k) - getattr(lim, k)) for k in ("diag", "same_topic", "diff_topic",
                                                                          "mask_col", "topic_eigenvalue")))
    assert errors[1] < errors[0] / 50 and errors[1] < 1e-3, errors
    # every column sums to 1 over the words; the visible-key limit keeps a same-word boost
    assert lim.diag + 2 * lim.same_topic + 12 * lim.diff_topic == pytest.approx(1.0, abs=1e-14)
    assert (lim.diag - lim.same_topic > 0.1) == visible


@CONVENTIONS
def test_limit_uniform_loss_is_the_stage1_limit_loss(visible):
    """At alpha = beta = 1 the case enumeration reproduces the exact N = inf stage-1 loss of lim W*(N)."""
    s = limit(visible=visible)
    obj = th.tied_attention_objective(s)
    W = th.block_matrix(th.stage1_limit_blocks(s), s.T, s.v)
    assert obj.loss(1.0, 1.0) == pytest.approx(th.population_loss(W, *th.moments(s)), abs=1e-13)


@pytest.mark.parametrize("T,tau,p_c,p_r", [(5, 2, 0.1, 0.1), (8, 4, 0.1, 0.1), (12, 3, 0.2, 0.05), (3, 2, 0.1, 0.3)])
def test_hidden_limit_closed_form(T, tau, p_c, p_r):
    """Hidden keys: the loss depends only on the weighted ratio, optimal at 1 + T p_c / p_r (any 2 <= tau < T)."""
    s = limit(T, 3, tau, visible=False, keep_prob=p_c, random_prob=p_r)
    obj = th.tied_attention_objective(s)
    r = 2.7
    alphas = np.array([1.5, 2.7, 3.2])
    betas = 3 * r - 2 * alphas                                         # the same weighted ratio (v = 3)
    assert np.ptp(obj.loss(alphas, betas)) < 1e-14
    o = th.tied_attention_optimum(s)
    assert not o.identified and not o.at_bound and o.alpha == o.beta
    assert o.weighted_ratio == pytest.approx(1 + T * p_c / p_r, rel=1e-8)
    assert o.gain > 0 and o.gradient_norm < 1e-10


def test_visible_limit_is_identified_and_stationary():
    o = th.tied_attention_optimum(limit(8, 3, 2, visible=True))
    assert o.identified and not o.at_bound and o.gradient_norm < 1e-10
    obj = th.tied_attention_objective(o.setting)
    for da, db in ((1.01, 1.0), (1.0, 1.01), (0.99, 1.0), (1.0, 0.99)):       # a strict local minimum
        assert obj.loss(o.alpha * da, o.beta * db) > o.loss
    assert o.alpha > o.beta > 1 and o.setting.doc_len == math.inf
    assert set(o.to_dict()) >= {"alpha", "beta", "weighted_ratio", "identified"}


@CONVENTIONS
def test_finite_n_loss_converges_to_the_limit_loss(visible):
    """The Monte-Carlo gain of a fixed (alpha, beta) over uniform attention approaches the limit's."""
    s = limit(visible=visible)
    target = th.tied_attention_objective(s)
    gain_inf = target.loss(1.0, 1.0) - target.loss(2.0, 3.0)
    gaps = []
    for n, docs in ((16, 20_000), (256, 3_000)):
        diff, se = th.tied_attention_objective(s.replace(doc_len=n), seed=1, num_docs=docs).loss_difference(2.0, 3.0)
        gaps.append((abs(-diff - gain_inf), se))
    (gap16, se16), (gap256, se256) = gaps
    assert gap256 < 4 * se256 + 0.05 * abs(gain_inf), gaps            # 4 standard errors plus 5% (the 1/N bias)
    assert gap256 < gap16, gaps


@CONVENTIONS
def test_finite_n_optima_converge_to_the_limit(visible):
    """Weighted ratio at N = 32, 128, 512 against the limit: within 4 standard errors plus 1% at N = 512."""
    s = limit(visible=visible)
    lim = th.tied_attention_optimum(s)
    runs = {n: th.tied_attention_optimum(s.replace(doc_len=n), num_docs=docs)
            for n, docs in ((32, 20_000), (128, 10_000), (512, 4_000))}
    dist = {n: abs(o.weighted_ratio - lim.weighted_ratio) for n, o in runs.items()}
    o512 = runs[512]
    assert dist[512] < 4 * o512.weighted_ratio_se + 0.01 * lim.weighted_ratio, dist
    if visible:   # both scores are identified; each within 4 standard errors (log scale) plus 2%
        assert abs(math.log(o512.alpha / lim.alpha)) < 4 * o512.log_alpha_se + 0.02
        assert abs(math.log(o512.beta / lim.beta)) < 4 * o512.log_beta_se + 0.02
    else:         # hidden keys: a clear finite-N excess at N = 32 that shrinks with N
        assert dist[32] > 5 * runs[32].weighted_ratio_se and dist[128] < dist[32], dist


def test_limit_bad_input():
    with pytest.raises(ValueError, match="mask_prob"):
        th.stage1_limit_blocks(limit(visible=True, mask_prob=1.0))
    with pytest.raises(ValueError, match="topics_per_doc"):
        th.tied_attention_optimum(limit(5, 3, 5, visible=True))
    with pytest.raises(ValueError, match="alpha"):
        th.tied_attention_objective(limit(visible=True)).loss(0.0, 1.0)


@CONVENTIONS
def test_limit_choices_mask_query_and_value_matrix(visible):
    """The two choices of the limit that chapter 5 varies: an untied [MASK] query (uniform
    attention whatever alpha, beta) and the minimum-norm W^V at N = inf."""
    s = limit(8, 3, 2, visible=visible)
    tied = th.TiedAttentionLimitObjective(s)
    untied = th.TiedAttentionLimitObjective(s, mask_query="uniform")
    min_norm = th.TiedAttentionLimitObjective(s, value_matrix="min_norm")
    # at uniform attention the [MASK] query attends uniformly either way
    assert untied.loss(1.0, 1.0) == pytest.approx(tied.loss(1.0, 1.0), abs=1e-14)
    assert np.allclose(min_norm.W_star, th.optimal_value_matrix(s), atol=1e-12)
    if not visible:
        # hidden keys: no [MASK] key, and lim W*(N) is the minimum-norm optimum (B / v)
        assert untied.loss(3.0, 5.0) == pytest.approx(tied.loss(3.0, 5.0), abs=1e-14)
        assert np.allclose(min_norm.W_star, tied.W_star, atol=1e-12)
        return
    # visible keys: a large beta costs the tied [MASK] query, not the untied one
    assert tied.loss(1.0, 50.0) - tied.loss(1.0, 1.0) > untied.loss(1.0, 50.0) - untied.loss(1.0, 1.0)
    # the gradient of the untied objective matches central differences
    h = 1e-6
    _, g = untied.gradient(math.log(2.0), math.log(3.0))
    fd = [(untied.loss(2.0 * math.exp(h), 3.0) - untied.loss(2.0 * math.exp(-h), 3.0)) / (2 * h),
          (untied.loss(2.0, 3.0 * math.exp(h)) - untied.loss(2.0, 3.0 * math.exp(-h))) / (2 * h)]
    assert np.allclose(g, fd, rtol=1e-5, atol=1e-10)
    # the optima: untied a copier (alpha -> 0), min-norm topical with no weight on the word
    o_u = th.tied_attention_optimum(s, mask_query="uniform")
    o_m = th.tied_attention_optimum(s, value_matrix="min_norm")
    assert o_u.at_bound and o_u.alpha < 1e-4 and o_u.mask_query == "uniform"
    assert not o_m.at_bound and o_m.alpha > 2 and abs(o_m.beta - 1) < 1e-5
    assert o_m.value_matrix == "min_norm" and o_m.gradient_norm < 1e-10


def test_limit_choices_bad_input():
    with pytest.raises(ValueError, match="mask_query"):
        th.TiedAttentionLimitObjective(limit(visible=True), mask_query="free")
    with pytest.raises(ValueError, match="value_matrix"):
        th.tied_attention_optimum(limit(visible=True), value_matrix="decay")
    with pytest.raises(ValueError, match="doc_len"):
        th.tied_attention_optimum(limit(visible=True).replace(doc_len=32), mask_query="uniform")
