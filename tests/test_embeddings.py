"""Unit tests for topicmech.embeddings (book chapter 3 helpers)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import topicmech as tm
from topicmech import embeddings as te
from topicmech import theory as th

T, V_PER, TAU, N = 5, 4, 2, 20  # parameter set P0 of the appendix on embeddings
P0 = tm.Setting(T, V_PER, TAU, N, attend_to_masked=True)
D = T * V_PER + 1


# ---- probes ----------------------------------------------------------------------------


def test_topic_spread_zero_for_topic_constant_embeddings():
    rng = np.random.default_rng(0)
    centroids = rng.normal(size=(3, T))                      # (d, T)
    E = np.repeat(centroids, V_PER, axis=1)                  # (d, V): identical within topics
    E = np.hstack([E, rng.normal(size=(3, 1))])              # [MASK] column is ignored
    assert te.topic_spread(E, V_PER) < 1e-12
    assert te.topic_spread(torch.from_numpy(E), V_PER) < 1e-12


def test_topic_spread_one_for_zero_mean_topics_and_between():
    E = np.zeros((2, 2 * V_PER))
    E[0, :V_PER] = [1, -1, 1, -1]
    E[1, V_PER:] = [2, -2, 0, 0]
    assert math.isclose(te.topic_spread(E, V_PER), 1.0)
    E2 = E + np.repeat(np.array([[1.0, 0.0], [0.0, 1.0]]), V_PER, axis=1)
    assert 0.0 < te.topic_spread(E2, V_PER) < 1.0


@pytest.mark.parametrize(
    "bad, match",
    [(np.zeros((2, 8)), "all-zero"), (np.ones((2, 7)), "multiple"), (np.ones(8), "2-D")],
)
def test_topic_spread_rejects_bad_input(bad, match):
    with pytest.raises(ValueError, match=match):
        te.topic_spread(bad, V_PER)
    with pytest.raises(ValueError, match="words_per_topic"):
        te.topic_spread(np.ones((2, 8)), 0)


def test_topic_cosines_on_a_block_gram():
    blocks = th.ValueBlocks(diag=1.0, same_topic=0.8, diff_topic=0.1, mask_col=0.0, topic_eigenvalue=math.nan)
    G = th.block_matrix(blocks, T, V_PER)
    G[-1, -1] = 1.0
    c = te.topic_cosines(G, V_PER)
    assert math.isclose(c.min_same_topic, 0.8) and math.isclose(c.mean_same_topic, 0.8)
    assert math.isclose(c.mean_diff_topic, 0.1) and math.isclose(c.max_diff_topic, 0.1)
    with pytest.raises(ValueError, match="square"):
        te.topic_cosines(np.ones((D, D - 1)), V_PER)
    with pytest.raises(ValueError, match="zero embedding"):
        te.topic_cosines(np.zeros((D, D)), V_PER)


def test_normalized_gram_has_unit_mean_word_norm():
    rng = np.random.default_rng(1)
    E = rng.normal(size=(4, D))
    G = te.normalized_gram(E.T @ E, V_PER)
    assert math.isclose(float(np.mean(np.diag(G)[:-1])), 1.0)
    with pytest.raises(ValueError, match="non-positive"):
        te.normalized_gram(np.zeros((D, D)), V_PER)


# ---- model and training recipe ---------------------------------------------------------


def test_embedding_model_trains_only_the_embedding():
    m = te.embedding_model(D, 3, head="tied", seed=0, attend_to_masked=True)
    assert [n for n, p in m.named_parameters() if p.requires_grad] == ["W_E"]
    assert m.W_E.shape == (3, D) and m.attention == "uniform" and m.value == "identity"
    m_id = te.embedding_model(D, head="identity", attend_to_masked=True)
    assert m_id.W_E.shape == (D, D) and m_id.head == "identity"
    assert float(m_id.W_E.detach().std()) < float(m.W_E.detach().std())  # smaller default start for the identity head
    with pytest.raises(ValueError, match="head"):
        te.embedding_model(D, 3, head="learned", attend_to_masked=True)
    with pytest.raises(ValueError, match="d_model"):
        te.embedding_model(D, 3, head="identity", attend_to_masked=True)


def test_train_with_phases_concatenates_and_validates():
    data = tm.SimplifiedTopicModel(T, V_PER, TAU)
    m = te.embedding_model(D, 5, seed=0, attend_to_masked=True)
    kw = dict(doc_len=N, batch_size=8, optimizer="adam")
    h = tm.train.train(m, data, phases=[(5, 1e-2), (3, 1e-3)], seed=0,
                       probes={"norm": lambda mod: float(mod.W_E.norm())}, probe_every=2, **kw)
    assert h.step == list(range(1, 9)) and len(h.loss) == 8
    assert h.probe_step == [0, 2, 4, 5, 7, 8] and len(h.probe("norm")) == len(h.probe_step)
    # same seed, same result; phases are successive train() calls, each with a fresh optimizer
    m2 = te.embedding_model(D, 5, seed=0, attend_to_masked=True)
    tm.train.train(m2, data, phases=[(5, 1e-2), (3, 1e-3)], seed=0, **kw)
    assert torch.equal(m.W_E, m2.W_E)
    m3 = te.embedding_model(D, 5, seed=0, attend_to_masked=True)
    for (steps, lr), s in zip([(5, 1e-2), (3, 1e-3)], tm.utils.spawn_seeds(0, 2)):
        tm.train.train(m3, data, steps=steps, lr=lr, seed=s, **kw)
    assert torch.equal(m.W_E, m3.W_E)
    for bad in ([], [(0, 1e-2)], [(5, -1.0)], [(5,)], [(2.5, 1e-2)], [(5, "0.01")], [(5, True)]):
        with pytest.raises(ValueError, match="phases"):
            tm.train.train(m, data, phases=bad, **kw)
    for bad_seed in (-1, [0], [0, 1, 2], "01"):
        with pytest.raises(ValueError, match="seed"):
            tm.train.train(m, data, phases=[(5, 1e-2), (3, 1e-3)], seed=bad_seed, **kw)
    with pytest.raises(ValueError, match="phases"):  # phases replaces steps and lr
        tm.train.train(m, data, phases=[(5, 1e-2)], lr=1e-2, **kw)


# ---- the tied-head optimum through the symmetry algebra ------------------------------


@pytest.mark.parametrize("attend_to_masked", [True, False])
@pytest.mark.parametrize("params", [(5, 4, 2, 20), (4, 3, 2, 10), (6, 2, 3, 50)])
def test_tied_blocks_match_the_numerical_optimum(params, attend_to_masked):
    T_, v_, tau_, N_ = params
    S, C = th.moments(tm.Setting(T_, v_, tau_, N_, attend_to_masked=attend_to_masked))
    for d in sorted({1, 2, T_ - 1, T_, T_ + 1, T_ * v_ + 1}):
        tb = th.tied_embedding_blocks(S, C, T_, v_, d)
        _, M = th.tied_embedding_optimum(S, C, d, restarts=1)
        b = th.orbit_means(M, T_, v_)
        assert abs(tb.loss - th.embedding_loss(M, S, C)) < 1e-9, d
        for got, want in ((tb.diag, b.diag), (tb.same_topic, b.same_topic), (tb.diff_topic, b.diff_topic),
                          (tb.mask_col, b.mask_col), (tb.mask_mask, M[-1, -1])):
            assert abs(got - want) < 1e-6, (d, got, want)


def test_tied_blocks_reference_numbers_and_rank_allocation():
    # the table of the appendix on embeddings (visible keys, P0)
    S, C = th.moments(P0)
    ref = {3: (0.1670, 0.1670, 0.0298), 5: (0.2768, 0.2768, 0.0024), 6: (0.2827, 0.2748, 0.0024),
           10: (0.3063, 0.2669, 0.0024), 21: (0.3654, 0.2472, 0.0024)}
    for d, (dg, st, df) in ref.items():
        tb = th.tied_embedding_blocks(S, C, T, V_PER, d)
        assert (round(tb.diag, 4), round(tb.same_topic, 4), round(tb.diff_topic, 4)) == (dg, st, df), d
    tb1 = th.tied_embedding_blocks(S, C, T, V_PER, 1)
    assert (tb1.rank_mean, tb1.rank_topic, tb1.rank_within) == (1, 0, 0)
    assert abs(tb1.topic_gap) < 1e-12  # d = 1: no topic structure at all
    for d in range(2, T + 1):
        tb = th.tied_embedding_blocks(S, C, T, V_PER, d)
        assert (tb.rank_mean, tb.rank_topic, tb.rank_within) == (1, d - 1, 0)
        assert tb.identical_within_topic and tb.topic_gap > 0
    tb = th.tied_embedding_blocks(S, C, T, V_PER, D)
    assert (tb.rank_topic, tb.rank_within) == (T - 1, T * (V_PER - 1)) and not tb.identical_within_topic
    assert tb.gain_topic > 100 * tb.gain_within > 0


def test_tied_blocks_hidden_keys_stop_at_rank_T():
    S, C = th.moments(P0.hidden())
    tb = th.tied_embedding_blocks(S, C, T, V_PER, 12)
    assert tb.rank_within == 0 and abs(tb.lam_within) < 1e-12 and tb.identical_within_topic


def test_tied_blocks_rejects_bad_input():
    S, C = th.moments(P0)
    with pytest.raises(ValueError, match="d"):
        th.tied_embedding_blocks(S, C, T, V_PER, 0)
    with pytest.raises(ValueError, match="Sigma"):
        th.tied_embedding_blocks(S[:-1, :-1], C, T, V_PER, 2)
    with pytest.raises(ValueError, match="C must"):
        th.tied_embedding_blocks(S, C[:, :-1], T, V_PER, 2)
    with pytest.raises(ValueError, match="num_topics"):
        th.tied_embedding_blocks(S, C, 1, 20, 2)


@pytest.mark.parametrize("attend_to_masked", [True, False])
@pytest.mark.parametrize("params", [(5, 4, 2, 20), (3, 2, 1, 4), (10, 5, 3, 64)])
def test_allocation_gains_match_the_tied_blocks(params, attend_to_masked):
    setting = tm.Setting(*params, attend_to_masked=attend_to_masked)
    T_, v_ = params[:2]
    S, C = th.moments(setting)
    tb = th.tied_embedding_blocks(S, C, T_, v_, 1)
    g = th.embeddings.allocation_gains(setting)
    got = (g.lam_topic, g.lam_within, g.gain_topic, g.gain_within, g.gain_plane)
    want = (tb.lam_topic, tb.lam_within, tb.gain_topic, tb.gain_within, tb.gain_mean[1])
    assert np.allclose(got, want, rtol=1e-9, atol=1e-14), (got, want)
    assert g.eigen_margin == g.lam_topic - abs(g.lam_within)
    vb = th.value_block_coefficients(setting)  # the eigenvalues of W*
    assert abs(g.lam_topic - vb.topic_eigenvalue) < 1e-9
    assert abs(g.lam_within - vb.within_eigenvalue) < 1e-9


def test_allocation_gains_tie_at_one_topic_with_hidden_keys():
    # tau = 1, hidden keys: W* and Sigma act alike on every topic-constant vector
    g = th.embeddings.allocation_gains(tm.Setting(5, 4, 1, 20, attend_to_masked=False))
    assert abs(g.gain_plane - g.gain_topic) < 1e-9 * g.gain_topic
    assert abs(g.lam_topic - 1.0) < 1e-9 and g.gain_within == 0.0
    g_vis = th.embeddings.allocation_gains(tm.Setting(5, 4, 1, 20, attend_to_masked=True))
    assert g_vis.gain_plane > g_vis.gain_topic > g_vis.gain_within > 0


def test_allocation_gains_rejects_bad_input():
    with pytest.raises(ValueError, match="setting"):
        th.embeddings.allocation_gains((5, 4, 2, 20))


# ---- the tied head with a bias (the authors' setting) -----------------------------------


def test_weighted_topic_gap_is_shift_invariant_and_reads_the_topic_eigenvalue():
    S, C = th.moments(P0)
    W = th.optimal_value_matrix(P0)
    gap = th.weighted_topic_gap(W, T, V_PER)
    assert abs(gap - th.weighted_block_gap(P0)) < 1e-10
    assert abs(th.weighted_topic_gap(W + 3.0, T, V_PER) - gap) < 1e-10
    assert abs(th.weighted_topic_gap(torch.from_numpy(W[:-1, :-1]), T, V_PER) - gap) < 1e-10
    tb = th.tied_embedding_blocks(S, C, T, V_PER, D)
    assert abs(gap - tb.lam_topic / V_PER) < 1e-10


def test_tied_bias_optimum_bias_and_means():
    opt = th.tied_bias_optimum(tm.Setting(T, V_PER, TAU, N, attend_to_masked=True))
    S, C = th.moments(P0)
    one = np.ones(D)
    assert np.allclose(opt.bias, C @ one - opt.M @ (S @ one), atol=1e-12)
    assert np.allclose(opt.M, opt.M.T, atol=1e-12)
    b = th.orbit_means(opt.M, T, V_PER)
    assert abs(opt.diag_minus_diff - (b.diag - b.diff_topic)) < 1e-12
    assert abs(opt.same_minus_diff - (b.same_topic - b.diff_topic)) < 1e-12
    assert opt.diag_minus_diff > opt.same_minus_diff > 0


# ---- block summaries -------------------------------------------------------------------


def test_block_vector_reads_the_orbit_means():
    rng = np.random.default_rng(1)
    M = rng.normal(size=(D, D))
    b = th.orbit_means(M, T, V_PER)
    np.testing.assert_allclose(te.block_vector(M, T, V_PER),
                               [b.diag, b.same_topic, b.diff_topic, b.mask_col])
    np.testing.assert_allclose(te.block_vector(torch.from_numpy(M), T, V_PER),
                               te.block_vector(M, T, V_PER))


def test_topic_level_and_block_differences():
    rng = np.random.default_rng(2)
    M = rng.normal(size=(D, D))
    b = te.block_vector(M, T, V_PER)
    same_level = (b[0] + (V_PER - 1) * b[1]) / V_PER       # all same-topic pairs, diagonal too
    np.testing.assert_allclose(te.topic_level(b, V_PER), [same_level, b[2], b[3]])
    diffs = te.block_differences(M, T, V_PER)
    np.testing.assert_allclose(diffs, [th.weighted_topic_gap(M, T, V_PER), b[0] - b[2], b[1] - b[2]])
    # adding a constant changes no difference
    np.testing.assert_allclose(te.block_differences(M + 3.0, T, V_PER), diffs, atol=1e-12)


@pytest.mark.parametrize("bad", [np.zeros((D - 1, D - 1)), np.zeros((D, D - 1)), np.zeros(D), "M"])
def test_block_vector_rejects_bad_matrices(bad):
    with pytest.raises(ValueError, match="matrix"):
        te.block_vector(bad, T, V_PER)


def test_topic_level_rejects_bad_input():
    with pytest.raises(ValueError, match="blocks"):
        te.topic_level(np.zeros(3), V_PER)
    with pytest.raises(ValueError, match="words_per_topic"):
        te.topic_level(np.zeros(4), 0)
    with pytest.raises(ValueError, match="num_topics"):
        te.block_differences(np.zeros((D, D)), 0, V_PER)


def test_chapter_seed_reports_every_measurement_and_repeats():
    """A very short run: the keys the chapter reads, finite values, and the same numbers twice
    (the stored ten seeds are checked against a rerun in tests/test_results.py)."""
    kwargs = {"phases": [[4, 1e-2]], "short_phases": [[3, 1e-2]]}
    got = te.chapter_seed(1, **kwargs)
    for key in ("bias.gap", "bias.err_gap", "id.err_E", "tied.err", "tied.gap_ratio", "sep.dT",
                "cos.d2_diff_max", "norm_gap.ce_tied", "ce.tied_diff", "ex.d1_gap",
                "ex.hidden_spread"):
        assert math.isfinite(got[key]), key
    assert got == te.chapter_seed(1, **kwargs)


def test_train_embedding_rejects_bad_input():
    data = tm.SimplifiedTopicModel(3, 2, 1)
    with pytest.raises(ValueError, match="head"):
        te.train_embedding(data, 7, "untied", doc_len=5, attend_to_masked=True)
    with pytest.raises(ValueError, match="phases"):
        te.train_embedding(data, 7, "tied", doc_len=5, phases=[(0, 1e-2)], attend_to_masked=True)
    with pytest.raises(ValueError, match="num_topics"):
        te.chapter_seed(0, num_topics=0)
