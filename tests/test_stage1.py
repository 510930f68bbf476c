"""Unit tests for topicmech.stage1 (training W^V under uniform attention; chapter 4)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from topicmech import Setting, stage1, theory
from topicmech.setting import Masking

T, V_PER, TAU = 3, 2, 2
V = T * V_PER
D = V + 1


@pytest.fixture(scope="module")
def small_model() -> Setting:
    """The small setting, visible keys."""
    return Setting(T, V_PER, TAU, 8, attend_to_masked=True)


def test_train_value_matrix_shapes_and_probes(small_model):
    run = stage1.train_value_matrix(small_model, phases=[(7, 5.0), (5, 2.0)], probe_every=3)
    assert run.W_V.shape == (D, D) and run.W_V.dtype == np.float64
    assert run.steps == 12 and run.loss.shape == (12,)
    assert run.blocks.shape == (len(run.probe_step), 4)
    # step 0, every 3 steps and the end of each phase, without duplicates
    assert run.probe_step.tolist() == [0, 3, 6, 7, 10, 12]
    assert np.all(run.blocks[0] == 0.0)  # init_scale=0 starts at W^V = 0
    final = run.final_blocks()
    assert np.allclose(run.blocks[-1], [final.diag, final.same_topic, final.diff_topic, final.mask_col])


def test_train_value_matrix_is_deterministic(small_model):
    a = stage1.train_value_matrix(small_model, phases=[(10, 5.0)], seed=3)
    b = stage1.train_value_matrix(small_model, phases=[(10, 5.0)], seed=3)
    c = stage1.train_value_matrix(small_model, phases=[(10, 5.0)], seed=4)
    assert np.array_equal(a.W_V, b.W_V)
    assert not np.array_equal(a.W_V, c.W_V)


def test_hidden_keys_never_train_the_mask_column(small_model):
    run = stage1.train_value_matrix(small_model.hidden(), phases=[(10, 5.0)])
    assert np.all(run.W_V[:, V] == 0.0)


def test_cross_entropy_keeps_column_sums_at_zero(small_model):
    run = stage1.train_value_matrix(small_model, loss="cross_entropy", phases=[(20, 20.0)])
    assert np.abs(run.W_V.sum(axis=0)).max() < 1e-5
    assert np.abs(run.W_V).max() > 1e-2


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(phases=[]), "phases"),
        (dict(phases=[(5, 0.0)]), "phases"),
        (dict(phases=[(0, 1.0)]), "phases"),
        (dict(phases=[(2.5, 1.0)]), "phases"),
        (dict(phases="fast"), "phases"),
        (dict(loss="hinge"), "loss"),
        (dict(batch_size=0), "batch_size"),
        (dict(probe_every=0), "probe_every"),
        (dict(seed=-1), "seed"),
    ],
)
def test_train_value_matrix_rejects_bad_input(small_model, kwargs, match):
    with pytest.raises(ValueError, match=match):
        stage1.train_value_matrix(small_model, **{"phases": [(1, 1.0)], **kwargs})


def test_train_value_matrix_rejects_non_setting_and_non_topic_model(small_model):
    with pytest.raises(ValueError, match="setting"):
        stage1.train_value_matrix(torch.zeros(4, 8, dtype=torch.long))
    with pytest.raises(ValueError, match="topic_model"):
        stage1.train_value_matrix(small_model, topic_model=torch.zeros(4, 8, dtype=torch.long))


def test_block_errors_vanish_at_the_exact_optimum():
    exact = theory.value_block_coefficients(Setting(T, V_PER, TAU, 16, attend_to_masked=True))
    W = theory.optimal_value_matrix(Setting(T, V_PER, TAU, 16, attend_to_masked=True))
    assert np.abs(stage1.block_errors(W, exact, T, V_PER)).max() < 1e-10
    assert np.abs(stage1.block_errors(torch.tensor(W), exact, T, V_PER)).max() < 1e-10
    shifted = W.copy()
    shifted[:V, :V] += 0.1 * np.eye(V)
    assert np.allclose(stage1.block_errors(shifted, exact, T, V_PER), [0.1, 0, 0, 0])


def test_centre_columns_removes_column_shifts():
    rng = np.random.default_rng(0)
    W = rng.normal(size=(D, D))
    shift = rng.normal(size=D)
    a = stage1.centre_columns(W, V)
    b = stage1.centre_columns(W + shift[None, :], V)
    assert np.allclose(a[:V], b[:V])  # word rows: the shift is gone
    assert np.allclose(a[:V].mean(axis=0), 0.0)
    assert np.array_equal(a[V], W[V])  # the [MASK] output row is left alone
    assert np.allclose(stage1.centre_columns(torch.tensor(W), V), a)


def test_contrast_correlation_is_shift_and_scale_invariant():
    rng = np.random.default_rng(1)
    W = rng.normal(size=(D, D))
    other = 3.0 * W + rng.normal(size=D)[None, :]
    assert stage1.contrast_correlation(W, other, V) == pytest.approx(1.0)
    assert stage1.contrast_correlation(W, -W, V) == pytest.approx(-1.0)
    assert np.isnan(stage1.contrast_correlation(W, np.ones((D, D)), V))


def test_column_topic_margin():
    blocks = theory.ValueBlocks(diag=0.5, same_topic=0.3, diff_topic=0.1, mask_col=0.2, topic_eigenvalue=0.0)
    W = theory.block_matrix(blocks, T, V_PER)
    assert stage1.column_topic_margin(W, T, V_PER) == pytest.approx(0.2)
    shifted = W + np.arange(D)[None, :]  # column shifts do not matter
    assert stage1.column_topic_margin(shifted, T, V_PER) == pytest.approx(0.2)
    W[0, V_PER] = 0.9  # one different-topic entry above the same-topic ones of its column
    assert stage1.column_topic_margin(W, T, V_PER) == pytest.approx(0.3 - 0.9)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: stage1.centre_columns(np.zeros((5, 5)), V), "matrix"),
        (lambda: stage1.centre_columns(np.zeros((D, D)), 0), "vocab_size"),
        (lambda: stage1.column_topic_margin(np.zeros((5, 5)), T, V_PER), "matrix"),
        (lambda: stage1.column_topic_margin(np.zeros((3, 3)), 1, 2), "num_topics"),
    ],
)
def test_helpers_reject_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_default_phases_are_what_train_value_matrix_runs(small_model):
    setting = small_model.replace(attend_to_masked=False, mask_prob=0.3)
    phases = stage1.default_phases(setting)
    run = stage1.train_value_matrix(setting)
    assert run.phases == phases
    _, hi = theory.sigma_eigenvalues(Setting(T, V_PER, TAU, 8, masking=Masking(0.3), attend_to_masked=False))
    assert phases[0][1] == pytest.approx(theory.SAFE_FRACTION / hi)
    assert len(phases) == len(stage1.PHASE_DECAY) and min(n for n, _ in phases) >= stage1.MIN_PHASE_STEPS
    ridge = stage1.default_phases(setting, l2=0.01)
    assert ridge[0][1] == pytest.approx(theory.SAFE_FRACTION / (hi + 0.01))


@pytest.mark.parametrize(
    "kwargs, match",
    [(dict(loss="hinge"), "loss"), (dict(tol=0.0), "tol"), (dict(tol=1.5), "tol"), (dict(l2=-1.0), "l2"),
     (dict(setting=None), "setting")],
)
def test_default_phases_reject_bad_input(small_model, kwargs, match):
    with pytest.raises(ValueError, match=match):
        stage1.default_phases(**{"setting": small_model, **kwargs})
