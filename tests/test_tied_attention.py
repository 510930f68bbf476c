"""Unit tests for the tied attention of topicmech.theory (the authors' stage-2 result, chapter 5).

Cheap settings only (the chapter's quick setting T=5, v=4, tau=2, N=20 and a few thousand
documents); the grid over tau and T is in benchmarks/tied_attention_grid.py.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from topicmech import stage2
from topicmech import theory as th
from topicmech.data import SimplifiedTopicModel, bert_mask
from topicmech.setting import Setting
from topicmech.utils import spawn_seeds

T, v, tau, N = 5, 4, 2, 20
V, D = T * v, T * v + 1
QUICK = Setting.stage2_quick(attend_to_masked=False)               # T, v, tau, N above, hidden keys


@pytest.fixture(scope="module", params=[False, True], ids=["hidden", "visible"])
def optimum(request):
    return th.tied_attention_optimum(QUICK.replace(attend_to_masked=request.param), num_docs=20_000)


def test_tied_score_matrix():
    C = th.tied_score_matrix(3.0, 5.0, T, v)
    assert C.shape == (D, D)
    assert np.all(np.diag(C) == 5.0)                                  # same token, [MASK]-[MASK] included
    assert C[0, 1] == 3.0 and C[0, v] == 1.0                          # same topic / different topic
    assert np.all(C[:V, V] == 1.0) and np.all(C[V, :V] == 1.0)        # [MASK] vs word: different topic
    assert np.allclose(th.tied_score_matrix(1.0, 1.0, T, v), 1.0)     # uniform attention
    assert th.weighted_ratio(3.0, 5.0, v) == pytest.approx(0.75 * 3 + 0.25 * 5)


@pytest.mark.parametrize("attend_to_masked", [False, True])
def test_objective_matches_the_model(attend_to_masked):
    """The 12-statistic formula equals the squared loss of OneLayerTransformer with A = log(Cmat)."""
    n_docs, seed = 200, 3
    obj = th.tied_attention_objective(QUICK.replace(attend_to_masked=attend_to_masked), seed=seed, num_docs=n_docs)
    s = spawn_seeds(seed, 2)                                          # the objective's first chunk
    docs = SimplifiedTopicModel(T, v, tau).sample(n_docs, N, seed=s[0])
    inputs, selected = bert_mask(docs, V, seed=s[1])
    model = stage2.stage2_model(obj.W_star, attend_to_masked=attend_to_masked)
    target = torch.nn.functional.one_hot(docs, D).double()           # (B, N, D)
    used = selected if attend_to_masked else selected & (~selected).any(dim=1, keepdim=True)
    for alpha, beta in [(1.0, 1.0), (2.5, 0.7), (0.3, 4.0)]:
        A = np.log(th.tied_score_matrix(alpha, beta, T, v))           # (key, query)
        with torch.no_grad():                                         # W_K^T W_Q / sqrt(D) = A
            model.W_Q.copy_(torch.eye(D))
            model.W_K.copy_(torch.as_tensor(math.sqrt(D) * A.T, dtype=model.W_K.dtype))
            logits = model(inputs, selected).double()                 # (B, N, D)
        ref = float(((logits - target) ** 2).sum(-1)[used].mean())
        assert obj.loss(alpha, beta) == pytest.approx(ref, abs=1e-6)  # float32 model


def test_gradient_matches_finite_differences():
    obj = th.tied_attention_objective(QUICK.visible(), num_docs=2000)
    x, h = np.array([0.4, -0.3]), 1e-5
    _, g = obj.gradient(*x)
    for k in range(2):
        e = np.zeros(2)
        e[k] = h
        fd = (obj.gradient(*(x + e))[0] - obj.gradient(*(x - e))[0]) / (2 * h)
        assert g[k] == pytest.approx(fd, rel=1e-5, abs=1e-10)


def test_uniform_attention_reproduces_stage1_loss(optimum):
    """alpha = beta = 1 is uniform attention: the estimate matches the exact stage-1 loss."""
    obj = th.tied_attention_objective(optimum.setting, num_docs=20_000)
    est, se = obj.loss_and_se(1.0, 1.0)
    assert est == pytest.approx(optimum.uniform_loss, abs=1e-12)
    Sigma, C = th.moments(optimum.setting)
    exact = th.population_loss(obj.W_star, Sigma, C)
    assert optimum.uniform_loss_exact == pytest.approx(exact, abs=1e-12)
    assert abs(est - exact) < 4 * se, (est, exact, se)                # within 4 standard errors


def test_alpha_above_one(optimum):
    """Same-topic keys get more weight than different-topic keys at the optimum (both conventions)."""
    assert not optimum.at_bound
    assert math.log(optimum.alpha) > 5 * optimum.log_alpha_se, optimum  # alpha > 1 by > 5 standard errors
    assert optimum.weighted_ratio > 1.5
    assert optimum.gain > 10 * optimum.gain_se                         # the optimum beats uniform attention


def test_optimum_beats_brute_force_grid(optimum):
    """On the same sample the optimiser is at least as good as a grid, and close to its best point."""
    obj = th.tied_attention_objective(optimum.setting, num_docs=20_000)
    grid = np.linspace(-1.0, 4.0, 21)                                 # log alpha, log beta, step 0.25
    la, lb = np.meshgrid(grid, grid, indexing="ij")
    losses = obj.loss(np.exp(la), np.exp(lb))                         # (21, 21)
    assert optimum.loss <= losses.min() + 1e-12
    assert losses.min() - optimum.loss < optimum.loss_se              # grid resolution costs < 1 standard error
    i, _ = np.unravel_index(int(np.argmin(losses)), losses.shape)
    assert abs(grid[i] - math.log(optimum.alpha)) <= 0.5 + 1e-9                 # within two grid steps
    # an independent sample: its grid minimum agrees with our optimum within the estimator error
    other = th.tied_attention_objective(optimum.setting, seed=1,
                                        num_docs=10_000)
    losses1 = other.loss(np.exp(la), np.exp(lb))
    k = np.unravel_index(int(np.argmin(losses1)), losses1.shape)
    l1, se1 = other.loss_and_se(math.exp(grid[k[0]]), math.exp(grid[k[1]]))
    assert abs(l1 - optimum.loss) < 4 * math.hypot(se1, optimum.loss_se), (l1, optimum.loss)


def test_result_fields(optimum):
    d = optimum.to_dict()
    assert d["weighted_ratio"] == pytest.approx(th.weighted_ratio(optimum.alpha, optimum.beta, v))
    assert optimum.num_positions > optimum.num_docs > 0
    assert optimum.loss == pytest.approx(optimum.uniform_loss - optimum.gain, abs=1e-12)
    with pytest.raises(dataclasses.FrozenInstanceError):
        optimum.alpha = 2.0                                           # frozen


@pytest.mark.parametrize(
    "changes, kwargs, name",
    [
        (dict(words_per_topic=1), {}, "words_per_topic"),
        (dict(topics_per_doc=5), {}, "topics_per_doc"),
        (dict(mask_prob=0.0), {}, "mask_prob"),
        ({}, dict(num_docs=0), "num_docs"),
        ({}, dict(seed=-1), "seed"),
    ],
)
def test_bad_input_raises(changes, kwargs, name):
    """The estimator's own conditions; Setting validates the rest (tests/test_setting.py)."""
    with pytest.raises(ValueError, match=name):
        th.tied_attention_optimum(QUICK.replace(**changes), **{"num_docs": 100, **kwargs})
    with pytest.raises(ValueError, match="setting"):
        th.tied_attention_optimum((T, v, tau, N))


def test_bad_ratios_raise():
    with pytest.raises(ValueError, match="alpha"):
        th.tied_score_matrix(0.0, 1.0, T, v)
    with pytest.raises(ValueError, match="beta"):
        th.tied_score_matrix(1.0, float("nan"), T, v)
    obj = th.tied_attention_objective(QUICK, num_docs=100)
    with pytest.raises(ValueError, match="alpha"):
        obj.loss(-1.0, 1.0)
    with pytest.raises(ValueError, match="max_positions"):
        obj.head(0)
