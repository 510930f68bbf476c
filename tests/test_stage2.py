"""Unit tests for topicmech.stage2 (the helpers of chapter 5 and its appendix).

The multi-seed claims of the chapter are in tests/test_chapter_claims_5.py; here each
helper is checked on its own: shapes, exact identities, input validation.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from topicmech import Masking, Setting, stage2, traces
from topicmech import theory as th
from topicmech.data import SimplifiedTopicModel, bert_mask

T, v, tau, N = 5, 4, 2, 20
SETTING = Setting(T, v, tau, N, attend_to_masked=True)
V, D = T * v, T * v + 1


def test_setting_presets_and_validation():
    q, f = stage2.Stage2Setting.quick(attend_to_masked=False), stage2.Stage2Setting.full(attend_to_masked=False)
    assert (q.setting.T, q.setting.v, q.setting.tau, q.setting.N) == (5, 4, 2, 20)
    assert q.setting.D == 21 and f.setting.D == 101
    W = q.W_star()
    assert W.shape == (21, 21) and np.allclose(W[:, -1], 0) and np.allclose(W[-1], 0)
    # both presets aim at a similar predicted growth rate 2 lr lambda_inf / sqrt(D)
    rates = []
    for c in (q, f):
        s = c.setting
        lim = th.key_query_gradient_limit(s)
        rates.append(traces.predicted_growth_rate(c.lr, s.V * lim["diff_topic"], s.D))
    assert 0.025 < min(rates) and max(rates) < 0.04, rates
    for bad in (dict(lr=0.0), dict(lr=float("nan")), dict(steps=0), dict(topics_per_doc=9), dict(doc_len=1),
                dict(keep_prob=0.7, random_prob=0.5), dict(init_scale=-1.0), dict(batch_size=True),
                dict(setting=None)):
        with pytest.raises(ValueError):
            q.replace(**bad)


def test_stage2_model_freezes_value():
    W = np.arange(D * D, dtype=float).reshape(D, D) / D**2
    m = stage2.stage2_model(W, attend_to_masked=False, init_scale=0.05, seed=3)
    assert torch.allclose(m.W_V.double(), torch.as_tensor(W), atol=1e-6)
    assert not m.W_V.requires_grad and m.W_K.requires_grad and m.W_Q.requires_grad
    assert m.attend_to_masked is False and m.attention == "learned"
    with pytest.raises(ValueError):
        stage2.stage2_model(np.zeros((3, 4)), attend_to_masked=True)
    with pytest.raises(ValueError):
        stage2.stage2_model(np.full((3, 3), np.nan), attend_to_masked=True)
    with pytest.raises(ValueError):
        stage2.stage2_model(W, attend_to_masked=1)


def test_run_stage2_short_run_records_probes():
    s = stage2.Stage2Setting(Setting.stage2_quick(attend_to_masked=False), steps=20, probe_every=5, batch_size=16)
    model, hist = stage2.run_stage2(s, seed=1)
    assert hist.probe_step == [0, 5, 10, 15, 20]
    assert set(hist.probes) == {"same_word", "same_topic", "mask_query_spread"}
    W = s.W_star()
    assert torch.allclose(model.W_V.double(), torch.as_tensor(W), atol=1e-6)  # W_V did not move
    with pytest.raises(ValueError):
        stage2.run_stage2("quick")


def test_gradient_summary_on_synthetic_block_matrices():
    rng = np.random.default_rng(0)
    topic = np.arange(V) // v
    same = topic[:, None] == topic[None, :]
    base = np.zeros((D, D))
    base[:V, :V] = np.where(same, -3.0, 1.0)
    np.fill_diagonal(base[:V, :V], -3.0)
    Gs = [base + 1e-3 * rng.standard_normal((D, D)) for _ in range(6)]
    s = stage2.gradient_summary(Gs, T, v)
    assert s.num_estimates == 6 and s.words_per_topic == v
    assert s.same_topic == pytest.approx(-3.0, abs=1e-3) and s.diff_topic == pytest.approx(1.0, abs=1e-3)
    assert s.ratio == pytest.approx(-3.0, abs=1e-2) and 0 < s.ratio_se < 1e-2
    assert s.topic_eigenvalue == pytest.approx(-v * (-3.0 - 1.0), rel=1e-2)
    assert s.topic_contrast_z() < -100
    assert s.mask_query_max_z < 6                          # pure noise in the [MASK]-query column
    biased = [G.copy() for G in Gs]
    for G in biased:
        G[:V, V] += np.where(topic == 0, 0.01, 0.0)          # a topic preference for [MASK] queries ...
    assert stage2.gradient_summary(biased, T, v).mask_query_max_z > 20   # ... is detected
    with pytest.raises(ValueError):
        stage2.gradient_summary(Gs[:1], T, v)
    with pytest.raises(ValueError):
        stage2.gradient_summary([np.zeros((4, 4))] * 2, T, v)
    with pytest.raises(ValueError):
        stage2.gradient_summary(Gs, 1, v)


def test_hidden_key_gradient_identities():
    lim = th.key_query_gradient_limit(SETTING.hidden())
    g_inf = th.hidden_key_gradient(Setting(T, v, tau, math.inf, attend_to_masked=False), topic_eigenvalue=1.0)
    for k in ("same_word", "same_topic", "diff_topic"):
        assert g_inf[k] == pytest.approx(lim[k], rel=1e-12)
    g = th.hidden_key_gradient(SETTING.hidden())
    lam = th.value_block_coefficients(SETTING.hidden()).topic_eigenvalue
    assert g["factor"] == pytest.approx(lam * (1 - th.kappa(SETTING.hidden())), rel=1e-12)
    assert g["same_topic"] / g["diff_topic"] == pytest.approx(-(T - 1), rel=1e-12)
    assert g["mask_query"] == 0.0
    assert th.hidden_key_gradient(SETTING.hidden().replace(keep_prob=0.0))["same_topic"] == 0.0
    assert th.hidden_key_gradient(Setting(T, v, 1, N, attend_to_masked=False))["diff_topic"] == 0.0
    with pytest.raises(ValueError):
        th.hidden_key_gradient(SETTING.hidden(), topic_eigenvalue=float("inf"))
    with pytest.raises(ValueError):
        th.hidden_key_gradient(SETTING.hidden().replace(keep_prob=1.5))


def test_hidden_key_gradient_matches_monte_carlo_for_block_value_matrix():
    """W = B (the authors' 0/1 block): lambda = v; Monte Carlo within 5 standard errors."""
    topic = np.arange(V) // v
    W = np.zeros((D, D))
    W[:V, :V] = topic[:, None] == topic[None, :]
    Gs = [th.key_query_gradient(W, SETTING.hidden(), 8000, seed=s) for s in range(4)]
    s = stage2.gradient_summary(Gs, T, v)
    g = th.hidden_key_gradient(SETTING.hidden(), topic_eigenvalue=float(v))
    assert abs(s.same_topic - g["same_topic"]) < 5 * s.same_topic_se
    assert abs(s.diff_topic - g["diff_topic"]) < 5 * s.diff_topic_se


def test_growth_rates():
    assert traces.predicted_growth_rate(100.0, 1e-3, 25) == pytest.approx(2 * 100 * 1e-3 / 5)
    steps = np.arange(0, 200, 10)
    vals = 1e-3 * np.exp(0.03 * steps)
    vals[0] = 5e-3                                           # an initial transient below lo is skipped
    assert traces.growth_rate(steps, vals) == pytest.approx(0.03, rel=1e-9)
    for bad in (dict(low=0.3, high=0.02), dict(low=-1.0)):
        with pytest.raises(ValueError):
            traces.growth_rate(steps, vals, **bad)
    with pytest.raises(ValueError):
        traces.growth_rate(steps, np.full(steps.shape, 1e-4))   # never reaches lo
    with pytest.raises(ValueError):
        traces.growth_rate(steps[:3], vals)
    with pytest.raises(ValueError):
        traces.predicted_growth_rate(0.0, 1e-3, 25)
    with pytest.raises(ValueError, match="eigenvalue"):
        traces.predicted_growth_rate(1.0, float("nan"), 25)


def test_mask_query_attention_uniform_pattern_is_one():
    tm_ = SimplifiedTopicModel(T, v, tau)
    docs = tm_.sample(200, N, seed=0)
    inputs, selected = bert_mask(docs, V, Masking(0.3, 0.1, 0.1), seed=1)
    for atm in (True, False):
        pattern = torch.full((len(docs), N, N), 0.05, dtype=torch.float64)   # the same weight everywhere
        r = stage2.mask_query_attention(pattern, inputs, selected, docs, tm_.topic_of_word, attend_to_masked=atm)
        assert r.num_queries == int((inputs == V).sum())
        assert r.ratio == pytest.approx(1.0, abs=1e-12)
    with pytest.raises(ValueError):
        stage2.mask_query_attention(pattern, inputs, selected.long(), docs, tm_.topic_of_word, attend_to_masked=False)
    with pytest.raises(ValueError):
        stage2.mask_query_attention(pattern[:, :3], inputs, selected, docs, tm_.topic_of_word, attend_to_masked=False)
    with pytest.raises(ValueError):
        stage2.mask_query_attention(pattern, inputs, selected, docs, tm_.topic_of_word, attend_to_masked="no")


def test_mask_column_z_and_null():
    rng = np.random.default_rng(0)
    Gs = [rng.standard_normal((D, D)) for _ in range(8)]
    z = stage2.mask_column_z(Gs, T, v)
    assert z.shape == (V,)
    assert math.isclose(np.abs(z).max(), stage2.gradient_summary(Gs, T, v).mask_query_max_z)
    null = stage2.mask_column_null_max_z(Gs, T, v, draws=3000, seed=0)
    assert null.shape == (3000,) and np.all(null > 0)
    # independent entries: the null median of the largest |z| over V = 20 is about 2.1
    assert 1.6 < np.median(null) < 2.8, np.median(null)
    with pytest.raises(ValueError, match="gradients"):
        stage2.mask_column_z(Gs[:1], T, v)
    with pytest.raises(ValueError, match="draws"):
        stage2.mask_column_null_max_z(Gs, T, v, draws=0)


def test_score_matrix_losses_uniform_and_validation():
    config = stage2.Stage2Setting.quick(attend_to_masked=True)
    W = config.W_star()
    A0 = np.zeros((D, D))
    L = stage2.score_matrix_losses(W, [A0, A0 + 3.0, np.log(th.tied_score_matrix(2.0, 2.0, T, v))],
                                   config.setting, num_docs=500, seed=0)
    # a constant shift of every score does not change the attention
    assert abs(L.difference(1, 0)[0]) < 1e-9
    loss, se = L.loss(0)
    assert 0 < loss < 2 and 0 < se < 0.05
    # the model's own loss at uniform attention agrees with the training loop's definition
    model = stage2.stage2_model(W, attend_to_masked=True)
    with torch.no_grad():
        model.W_K.zero_()
    docs = SimplifiedTopicModel(T, v, tau).sample(500, N, seed=0)
    inputs, selected = bert_mask(docs, V, config.setting.masking, seed=1)
    with torch.no_grad():
        f = model(inputs, selected).double()
    e = torch.nn.functional.one_hot(docs, D).double()
    direct = float((((f - e) ** 2).sum(-1) * selected).sum() / selected.sum())
    assert abs(direct - loss) < 1e-9
    with pytest.raises(ValueError, match="scores"):
        stage2.score_matrix_losses(W, [np.zeros((3, 3))], config.setting, num_docs=10)
    with pytest.raises(ValueError, match="num_docs"):
        stage2.score_matrix_losses(W, [A0], config.setting, num_docs=1)
    with pytest.raises(ValueError, match="doc_len"):
        stage2.score_matrix_losses(W, [A0], config.setting.replace(doc_len=math.inf), num_docs=10)


def test_run_metrics_of_a_short_run():
    """run_metrics reads a run as chapter 5 does; attention ratios are of order one after 20 steps."""
    config = stage2.Stage2Setting.quick(attend_to_masked=True).replace(steps=20, probe_every=10)
    model, hist = stage2.run_stage2(config, seed=0)
    data = config.topic_model()
    row = stage2.run_metrics(model, hist, data.sample(200, config.setting.N, seed=1), data.topic_of_word,
                             prefix="visible.")
    assert set(row) == {f"visible.{k}" for k in ("topic_ratio", "self", "self_rel", "word_rel", "topic_final",
                                                  "word_final", "topic_peak_over_final", "copier")}
    assert isinstance(row["visible.copier"], bool)
    assert 0.5 < row["visible.topic_ratio"] < 2 and 0.5 < row["visible.self_rel"] < 2


def test_tied_convergence_seed_keys_and_bad_input():
    out = stage2.tied_convergence_seed(0, doc_lens=[16], num_docs=[500], conventions=["hidden"])
    assert set(out) == {f"hidden.N16.{k}" for k in ("rho", "rho_se", "alpha", "beta")}
    assert out["hidden.N16.rho"] > 1 and out["hidden.N16.rho_se"] > 0
    with pytest.raises(ValueError, match="doc_lens"):
        stage2.tied_convergence_seed(0, doc_lens=[16, 32], num_docs=[500])
    with pytest.raises(ValueError, match="conventions"):
        stage2.tied_convergence_seed(0, doc_lens=[16], num_docs=[500], conventions=["both"])


def test_conventions_seed_names_a_bad_size():
    with pytest.raises(ValueError, match="size must be 'quick' or 'full', got 'paper'"):
        stage2.conventions_seed(0, size="paper")
