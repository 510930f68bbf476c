"""The authors' embedding setting: a tied head with a trained bias (book ch. 3, appendix Step 9).

The optimum's frequency-weighted same-topic minus different-topic difference tends, with
masked keys visible, to the authors' constant ``1 / (v (1 - (1 - p_c) p_m))``, and a short
training run lands on the optimum.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import topicmech as tm
from topicmech import embeddings as te
from topicmech import theory as th
from topicmech.setting import Masking, Setting

# parameter sets beyond the book's (T, v, tau, p_m, p_c, p_r)
SETTINGS = [
    (6, 3, 2, 0.2, 0.2, 0.1),
    (4, 5, 3, 0.3, 0.0, 0.2),
    (8, 2, 1, 0.15, 0.1, 0.1),
]


def authors_constant(v: int, p_m: float, p_c: float) -> float:
    return 1.0 / (v * (1.0 - (1.0 - p_c) * p_m))


@pytest.mark.parametrize("T, v, tau, p_m, p_c, p_r", SETTINGS)
def test_limit_is_the_authors_constant_with_visible_keys(T, v, tau, p_m, p_c, p_r):
    const = authors_constant(v, p_m, p_c)
    lim = th.tied_bias_optimum(tm.Setting(T, v, tau, math.inf, masking=tm.Masking(p_m, p_c, p_r), attend_to_masked=True))
    assert abs(lim.weighted_gap - const) < 1e-6
    assert lim.min_eig_perp > -1e-9
    # finite N approaches it (distance shrinks about 10x per decade of N)
    dist = [abs(th.tied_bias_optimum(tm.Setting(T, v, tau, n, masking=tm.Masking(p_m, p_c, p_r), attend_to_masked=True)).weighted_gap - const)
            for n in (100, 1000, 10_000)]
    assert dist[0] > 5 * dist[1] > 25 * dist[2], dist
    # hidden keys tend to 1/v instead
    hid = th.tied_bias_optimum(tm.Setting(T, v, tau, math.inf, masking=tm.Masking(p_m, p_c, p_r), attend_to_masked=False))
    assert abs(hid.weighted_gap - 1.0 / v) < 1e-6


@pytest.mark.parametrize("attend", [True, False])
@pytest.mark.parametrize("T, v, tau, p_m, p_c, p_r", SETTINGS)
def test_weighted_gap_equals_stage1_value_gap_at_finite_n(T, v, tau, p_m, p_c, p_r, attend):
    opt = th.tied_bias_optimum(tm.Setting(T, v, tau, 25, masking=tm.Masking(p_m, p_c, p_r), attend_to_masked=attend))
    setting = Setting(T, v, tau, 25, masking=Masking(p_m, p_c, p_r), attend_to_masked=attend)
    ref = th.weighted_block_gap(setting)
    assert abs(opt.weighted_gap - ref) < 1e-9
    assert opt.min_eig_perp > -1e-9
    # the bias only shifts the word block by a constant relative to the tied head without bias
    S, C = th.moments(setting)
    tb = th.tied_embedding_blocks(S, C, T, v, S.shape[0])
    assert abs((tb.diag + (v - 1) * tb.same_topic) / v - tb.diff_topic - opt.weighted_gap) < 1e-9
    assert abs((tb.same_topic - tb.diff_topic) - opt.same_minus_diff) < 1e-9


def test_optimum_beats_random_perturbations_and_bias_is_optimal():
    T, v, tau, N = 4, 3, 2, 15
    S, C = th.moments(Setting(T, v, tau, N, attend_to_masked=True))
    opt = th.tied_bias_optimum(tm.Setting(T, v, tau, N, attend_to_masked=True))
    D = S.shape[0]

    def loss(M, b):  # E||M xbar + b - y||^2 from the moments
        mx, my = S @ np.ones(D), C @ np.ones(D)
        return float(np.sum((M @ S) * M) - 2 * np.sum(M * C) + 2 * b @ M @ mx - 2 * b @ my + b @ b + 1.0)

    base = loss(opt.M, opt.bias)
    assert abs(base - opt.loss) < 1e-10
    rng = np.random.default_rng(0)
    for _ in range(20):
        E = rng.normal(size=(D, D))
        P = 1e-2 * (E + E.T)
        assert loss(opt.M + P, opt.bias) >= base - 1e-12
        assert loss(opt.M, opt.bias + 1e-2 * rng.normal(size=D)) >= base - 1e-12
    J = np.ones((D, D))
    M2 = opt.M + 0.7 * J  # the free direction: the re-optimised bias absorbs it
    b2 = (C @ np.ones(D)) - M2 @ (S @ np.ones(D))
    assert abs(loss(M2, b2) - base) < 1e-10


def test_bias_model_api_and_validation():
    m = te.embedding_model(13, 4, head="tied", bias=True, seed=0, attend_to_masked=True)
    assert {n for n, p in m.named_parameters() if p.requires_grad} == {"W_E", "b_pred"}
    assert tm.fast.fast_path(m) == "uniform"                     # trains on the fast path
    x = torch.randint(0, 13, (3, 6))
    with torch.no_grad():
        base = m(x)
        m.b_pred.fill_(0.5)
        assert torch.allclose(m(x), base + 0.5)
        assert torch.allclose(m.run_with_cache(x)["logits"], base + 0.5)
    assert te.embedding_model(13, 4, seed=0, attend_to_masked=True).b_pred is None
    with pytest.raises(ValueError, match="bias"):
        te.embedding_model(13, 4, bias=1, attend_to_masked=True)
    with pytest.raises(ValueError, match="attend_to_masked"):
        th.tied_bias_optimum(tm.Setting(4, 3, 2, 10, attend_to_masked=1))
    with pytest.raises(ValueError, match="words_per_topic"):
        th.weighted_topic_gap(np.eye(13), 4, 5)


@pytest.mark.slow
def test_training_lands_on_the_optimum_over_seeds():
    T, v, tau, N = 5, 4, 2, 20
    D = T * v + 1
    torch.set_num_threads(1)
    opt = th.tied_bias_optimum(tm.Setting(T, v, tau, N, attend_to_masked=True))
    target = np.array([opt.weighted_gap, opt.diag_minus_diff, opt.same_minus_diff])
    data = tm.SimplifiedTopicModel(T, v, tau)
    errs = []
    for seed in (0, 1, 2):
        model = te.embedding_model(D, head="tied", bias=True, attend_to_masked=True, seed=seed)
        tm.train.train(model, data, phases=te.DEFAULT_PHASES, doc_len=N, batch_size=256, optimizer="adam", seed=seed)
        G = model.embedding_gram().detach().double().numpy()
        b = th.orbit_means(G, T, v)
        learned = np.array([th.weighted_topic_gap(G, T, v), b.diag - b.diff_topic, b.same_topic - b.diff_topic])
        errs.append(np.abs(learned - target))
    errs = np.array(errs)
    assert errs[:, 0].max() < 0.005, errs      # the authors' quantity, the book's tolerance
    assert errs[:, 1:].max() < 0.03, errs
