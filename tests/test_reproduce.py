"""Tests for topicmech.reproduce (the reproduction page's recipes)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from topicmech import fast, stats
from topicmech import reproduce as rp


def test_authors_lda_shape() -> None:
    lda = rp.authors_lda()
    assert (lda.num_topics, lda.words_per_topic, lda.vocab_size) == (10, 10, 100)


def test_uniform_attention_reads_one_over_n() -> None:
    lda = rp.authors_lda()
    inputs = lda.sample(4, 50, 0)                                               # (4, 50)
    pattern = torch.full((4, 50, 50), 1 / 50)
    cats = rp.authors_attention_categories(pattern, inputs, lda.topic_of_word)
    assert set(cats) == set(rp.RELATIONS)
    for value in cats.values():
        assert value == pytest.approx(1 / 50)


def test_categories_count_self_as_same_word() -> None:
    # two topics of two words: tokens 0, 1 in topic 0; 2, 3 in topic 1
    topic = torch.tensor([0, 0, 1, 1])
    inputs = torch.tensor([[0, 1, 2]])
    pattern = torch.eye(3)[None]                                                # all weight on self
    cats = rp.authors_attention_categories(pattern, inputs, topic)
    assert cats["same_word"] == pytest.approx(1.0)
    assert cats["same_topic"] == pytest.approx(0.0)
    assert cats["diff_topic"] == pytest.approx(0.0)


def test_categories_skip_mask_and_report_empty() -> None:
    topic = torch.tensor([0, 0, 1, 1])
    inputs = torch.tensor([[0, 4, 0]])                                           # 4 = [MASK]
    pattern = torch.full((1, 3, 3), 1 / 3)
    cats = rp.authors_attention_categories(pattern, inputs, topic)
    assert cats["same_word"] == pytest.approx(1 / 3)
    assert np.isnan(cats["diff_topic"]) and np.isnan(cats["same_topic"])


def test_categories_bad_shapes() -> None:
    topic = torch.tensor([0, 0, 1, 1])
    with pytest.raises(ValueError, match="pattern"):
        rp.authors_attention_categories(torch.zeros(1, 3, 2), torch.zeros(1, 3, dtype=torch.long), topic)
    with pytest.raises(ValueError, match="inputs"):
        rp.authors_attention_categories(torch.zeros(1, 3, 3), torch.zeros(1, 3), topic)


def test_verdict_rules() -> None:
    assert rp.verdict([True, True]) == "reproduced"
    assert rp.verdict([True, False]) == "partly"
    assert rp.verdict([False, True]) == "not"
    assert rp.verdict([True, False], essential=[False, True]) == "not"
    with pytest.raises(ValueError, match="checks"):
        rp.verdict([])
    with pytest.raises(ValueError, match="essential"):
        rp.verdict([True], essential=[True, False])


def test_leave_zero_step() -> None:
    steps = np.arange(0, 100, 10)
    norms = np.r_[np.zeros(5), np.linspace(1, 10, 5)]
    assert rp.leave_zero_step(steps, norms, 0.1) == 50
    assert rp.leave_zero_step(steps, np.ones(10), 0.1) is None


def test_synthetic_run_adam_learns_topic_attention() -> None:
    lda = rp.authors_lda()
    train_docs = fast.sample_variable_length(lda, 500, 100, 150, seed=1)
    heldout = lda.sample(20, 100, 2)
    run = rp.synthetic_run(0, optimizer="adam", lr=0.03, steps=100, train_docs=train_docs, heldout=heldout,
                           probe_every=50)
    assert list(run.steps) == [0, 50, 100]
    assert set(run.norms) == {"W_K", "W_Q", "W_V"}
    assert run.norms["W_V"][-1] > 10 * run.norms["W_V"][0]
    # Adam moves attention towards the topic within 100 steps (measured ratio >= 3 at offsets 0/1000/2000)
    assert run.attention["same_topic"] > 1.5 * run.attention["diff_topic"], run.attention


def test_synthetic_run_bad_input() -> None:
    lda = rp.authors_lda()
    heldout = lda.sample(2, 10, 0)
    with pytest.raises(ValueError, match="train_docs"):
        rp.synthetic_run(0, optimizer="adam", lr=0.01, steps=1, train_docs=heldout, heldout=heldout)
    with pytest.raises(ValueError, match="steps"):
        rp.synthetic_run(0, optimizer="adam", lr=0.01, steps=0, train_docs=(heldout, torch.full((2,), 10)),
                         heldout=heldout)


@pytest.fixture(scope="module")
def authors_docs() -> tuple[torch.Tensor, torch.Tensor]:
    return fast.sample_variable_length(rp.authors_lda(), 2_000, 100, 150, seed=1)


def test_deep_norms_shapes(authors_docs) -> None:
    run = rp.deep_norms(0, optimizer="adam", lr=1e-3, steps=10, docs=authors_docs[0][:, :100], probe_every=5)
    assert list(run.steps) == [0, 5, 10] and set(run.norms) == {"W_K", "W_Q", "W_V"}
    assert all(len(v) == 3 and np.all(np.isfinite(v)) for v in run.norms.values())


def test_all_trained_gram_is_symmetric_psd(authors_docs) -> None:
    G = rp.all_trained_gram(0, loss="squared", optimizer="adam", lr=0.01, steps=5, train_docs=authors_docs)
    assert G.shape == (101, 101) and np.allclose(G, G.T)
    ev = np.linalg.eigvalsh(G)                                    # float32 products: relative tolerance
    assert ev.min() > -1e-5 * ev.max() and np.sum(ev > 1e-5 * ev.max()) <= 32   # PSD of rank <= d_model


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(10))
def test_deep_value_leaves_zero_first(authors_docs, seed) -> None:
    """The reproduction page's 4-layer claim: W^V crosses its 10% mark at least 10 steps before W^K, W^Q."""
    run = rp.deep_norms(seed, optimizer="adam", lr=1e-3, steps=200, docs=authors_docs[0][:, :100])
    t = {k: rp.leave_zero_step(run.steps, v, 0.1) for k, v in run.norms.items()}
    assert min(t["W_K"], t["W_Q"]) - t["W_V"] >= 10, t


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(10))
def test_all_trained_embeddings_have_topic_blocks(authors_docs, seed) -> None:
    """The reproduction page's embedding claims, per seed: topic blocks in every setting (cosine gap > 0.2),
    and squared loss with SGD least clean by more than 0.2 of same-topic cosine."""
    from topicmech.embeddings import topic_cosines

    cos = {}
    for loss in ("cross_entropy", "squared"):
        for opt, lr in (("adam", 0.01), ("sgd", 3.0)):
            G = rp.all_trained_gram(seed, loss=loss, optimizer=opt, lr=lr, steps=500, train_docs=authors_docs)
            c = topic_cosines(G, 10)
            assert c.mean_same_topic - c.mean_diff_topic > 0.2, (loss, opt, c)
            cos[(loss, opt)] = c.mean_same_topic
    others = [c for k, c in cos.items() if k != ("squared", "sgd")]
    assert cos[("squared", "sgd")] < min(others) - 0.2, cos


AUTH = {"same_word": 0.0076, "same_topic": 0.0108, "diff_topic": 0.0069}


def test_magnitude_verdict_rules() -> None:
    assert rp.magnitude_verdict(dict(AUTH), AUTH) == "reproduced: holds direction, ratio (excess x1.00), order"
    far = {"same_word": 0.004, "same_topic": 0.03, "diff_topic": 0.005}
    assert rp.magnitude_verdict(far, AUTH).startswith("partly: holds direction; misses ratio (excess x")
    swapped = {"same_word": 0.012, "same_topic": 0.0108, "diff_topic": 0.0069}
    assert rp.magnitude_verdict(swapped, AUTH) == (
        "partly: holds direction, ratio (excess x1.00); misses order (word > topic > diff)")
    flat = {"same_word": 0.01, "same_topic": 0.01, "diff_topic": 0.01}
    assert rp.magnitude_verdict(flat, AUTH).startswith(
        "not reproduced: misses direction (same topic not above diff. topic")
    assert rp.magnitude_verdict(flat, AUTH, attempted="why") == "not faithfully attempted: why"
    with pytest.raises(ValueError, match="factor"):
        rp.magnitude_verdict(flat, AUTH, factor=0.5)
    with pytest.raises(ValueError, match="ours"):
        rp.magnitude_verdict({"same_word": 1.0}, AUTH)
    # an explicit ratio overrides the one read off the means
    assert rp.magnitude_verdict(far, AUTH, ratio=1.6) == (
        "partly: holds direction, ratio (excess x1.06); misses order (topic > diff > word)")


def test_magnitude_verdict_compares_the_excess_over_uniform() -> None:
    # the authors' ratio 0.0108 / 0.0069 = 1.565: excess 0.565 over uniform attention
    theirs = AUTH["same_topic"] / AUTH["diff_topic"]
    near_uniform = {"same_word": 0.0099, "same_topic": 0.0106, "diff_topic": 0.0100}
    # ratio 1.06: within 1.5 of theirs as a ratio, but an excess of a tenth of theirs
    assert 1 / 1.5 < (0.0106 / 0.0100) / theirs < 1.5
    assert rp.magnitude_verdict(near_uniform, AUTH) == (
        "partly: holds direction; misses ratio (excess x0.11), order (topic > diff > word)")
    # the factor applies to the excess both ways: x1.5 holds, just above it misses
    at_edge = 1 + 1.5 * (theirs - 1)
    assert rp.magnitude_verdict(AUTH, AUTH, ratio=at_edge * (1 - 1e-9)).startswith("reproduced")
    assert rp.magnitude_verdict(AUTH, AUTH, ratio=at_edge * 1.01).startswith(
        "partly: holds direction, order; misses ratio (excess x1.5")
    low_edge = 1 + (theirs - 1) / 1.5
    assert rp.magnitude_verdict(AUTH, AUTH, ratio=low_edge * 1.001).startswith("reproduced")
    assert rp.magnitude_verdict(AUTH, AUTH, ratio=low_edge * 0.99).startswith("partly")
    # the authors' own ratio not above 1: never reproduced
    flat_auth = {"same_word": 0.01, "same_topic": 0.01, "diff_topic": 0.01}
    assert rp.magnitude_verdict(AUTH, flat_auth).startswith(
        "not reproduced: the authors' ratio is not above 1")


def test_category_order_ties_by_overlapping_intervals() -> None:
    means = {"same_word": 0.0108, "same_topic": 0.0109, "diff_topic": 0.0069}
    assert rp.category_order(means) == [["same_topic"], ["same_word"], ["diff_topic"]]
    wide = {"same_word": (0.0100, 0.0116), "same_topic": (0.0105, 0.0113), "diff_topic": (0.0068, 0.0070)}
    assert rp.category_order(means, wide) == [["same_topic", "same_word"], ["diff_topic"]]
    with pytest.raises(ValueError, match="intervals"):
        rp.category_order(means, {"same_word": (0, 1)})


def test_magnitude_verdict_a_tie_is_not_the_authors_order() -> None:
    # the authors' order (topic > word > diff) by means, but word and topic tie by intervals
    ours = {"same_word": 0.0107, "same_topic": 0.0108, "diff_topic": 0.0069}
    tight = {k: (v - 1e-6, v + 1e-6) for k, v in ours.items()}
    wide = {**tight, "same_word": (0.0100, 0.0115)}
    assert rp.magnitude_verdict(ours, AUTH, intervals=tight).startswith("reproduced")
    assert rp.magnitude_verdict(ours, AUTH, intervals=wide) == (
        "partly: holds direction, ratio (excess x1.00); misses order (tie: topic = word > diff)")
    # same topic tied with different topic: no direction, whatever the ratio
    flat = {"same_word": 0.01, "same_topic": 0.0100001, "diff_topic": 0.01}
    overlap = {k: (v - 1e-6, v + 1e-6) for k, v in flat.items()}
    assert rp.magnitude_verdict(flat, AUTH, intervals=overlap).startswith(
        "not reproduced: misses direction (tie: same topic = diff. topic")
    # equal means in a tie print in the order word, topic, diff
    assert rp.order_text({"same_word": 1.0, "same_topic": 2.0, "diff_topic": 1.0}) == "topic > word = diff"
    # within a tie, from the larger mean down
    tie = {k: (0.0, 3.0) for k in rp.RELATIONS}
    assert rp.order_text({"same_word": 1.0, "same_topic": 1.5, "diff_topic": 0.5}, tie) == "topic = word = diff"


def test_stage_verdict_parts() -> None:
    near0 = {"W_V": 0.01, "W_K": 0.01, "W_Q": 0.01}
    at_level = {"W_V": 1.8, "W_K": 8.0, "W_Q": 9.0}
    kw = {"starts": near0, "ends": at_level, "order": True}
    assert rp.stage_verdict(**kw, kq_leave=500, v_plateau=400).startswith("reproduced")
    assert rp.stage_verdict(**kw, kq_leave=770, v_plateau=400) == (
        "partly: holds W^V level, K/Q levels, order, W^V timing; misses K/Q timing")
    # W^V's plateau within a factor of 1.5 of the authors' 400
    assert rp.stage_verdict(**kw, kq_leave=500, v_plateau=50).endswith("misses W^V timing")
    far = {"W_V": 17.0, "W_K": 1.0, "W_Q": 1.0}
    assert rp.stage_verdict(starts=near0, ends=far, order=False, kq_leave=None,
                            v_plateau=None).startswith("not reproduced: misses W^V level")
    # a W^V that starts at the authors' level is no evidence; K/Q grown from 2.1 still count
    c6_start = {"W_V": 2.1, "W_K": 2.1, "W_Q": 2.1}
    assert rp.stage_verdict(starts=c6_start, ends=at_level, order=True, kq_leave=476, v_plateau=50) == (
        "partly: holds K/Q levels, order, K/Q timing; misses W^V level (no evidence: starts in the band), "
        "W^V timing")
    # a timing that holds within `edge` steps of its window's bound says so, with its step
    assert rp.stage_verdict(**kw, kq_leave=770, v_plateau=600, edge=10) == (
        "partly: holds W^V level, K/Q levels, order, W^V timing (at the edge: 600); misses K/Q timing")
    assert rp.stage_verdict(**kw, kq_leave=405, v_plateau=400, edge=10) == (
        "reproduced: holds all five parts, K/Q timing (at the edge: 405)")
    assert "edge" not in rp.stage_verdict(**kw, kq_leave=770, v_plateau=580, edge=10)
    assert "edge" not in rp.stage_verdict(**kw, kq_leave=770, v_plateau=590)
    # with no margin, only a step exactly on a bound is at the edge
    assert "(at the edge: 600)" in rp.stage_verdict(**kw, kq_leave=770, v_plateau=600)
    # a timing that misses by at most `edge` steps, or a level within `near_level` of its band,
    # says so too
    assert "W^V timing (near: 611)" in rp.stage_verdict(**kw, kq_leave=500, v_plateau=611, edge=11)
    assert "near" not in rp.stage_verdict(**kw, kq_leave=500, v_plateau=611, edge=10)
    assert "W^V timing (near: 611)" in rp.stage_verdict(**kw, kq_leave=500, v_plateau=611,
                                                         near_level=0.1)
    assert "near" not in rp.stage_verdict(**kw, kq_leave=500, v_plateau=700, near_level=0.1)
    low_v = {**at_level, "W_V": 0.80}
    assert "misses W^V level (near: 0.80)" in rp.stage_verdict(
        starts=near0, ends=low_v, order=True, kq_leave=500, v_plateau=400, near_level=0.1)
    assert "near" not in rp.stage_verdict(starts=near0, ends=low_v, order=True, kq_leave=500,
                                          v_plateau=400, near_level=0.05)
    with pytest.raises(ValueError, match="edge"):
        rp.stage_verdict(**kw, kq_leave=500, v_plateau=400, edge=-1)
    with pytest.raises(ValueError, match="near_level"):
        rp.stage_verdict(**kw, kq_leave=500, v_plateau=400, near_level=-0.1)
    with pytest.raises(ValueError, match="factor"):
        rp.stage_verdict(**kw, kq_leave=500, v_plateau=400, factor=0.9)
    with pytest.raises(ValueError, match="ends"):
        rp.stage_verdict(starts=near0, ends={"W_V": 1.0}, order=True, kq_leave=500, v_plateau=400)


def test_rerun_comparison_rows(monkeypatch) -> None:
    monkeypatch.delenv("TOPICMECH_SEED_OFFSET", raising=False)
    stored = [{"seed": 0, "a": 1.0, "c": [0.0, 1.0, 2.0]}, {"seed": 1, "a": 3.0, "c": [0.0, 2.0, 4.0]}]
    rows = rp.rerun_comparison(stored, [{"seed": 0, "a": 1.0, "c": [0.0, 1.0]}], ["a", "c"])
    assert [r["quantity"] for r in rows] == ["a", "c[1]"]
    assert all(r["agrees"] for r in rows) and rows[1]["stored"] == "1"
    assert not rp.rerun_comparison(stored, [{"seed": 0, "a": 1.1}], ["a"])[0]["agrees"]
    with pytest.raises(ValueError, match="seed 5"):
        rp.rerun_comparison(stored, [{"seed": 5, "a": 1.0}], ["a"])
    monkeypatch.setenv("TOPICMECH_SEED_OFFSET", "1000")
    fresh = rp.rerun_comparison(stored, [{"seed": 1000, "a": 6.9}], ["a"])[0]
    assert fresh["agrees"] and fresh["stored"] == "1 to 3"
    assert not rp.rerun_comparison(stored, [{"seed": 1000, "a": 7.1}], ["a"])[0]["agrees"]


def test_flattened() -> None:
    steps = np.arange(0, 1001, 10)
    assert rp.flattened(steps, 1 - np.exp(-steps / 50))
    assert not rp.flattened(steps, steps / 1000.0)
    # a falling curve counts as flat
    assert rp.flattened(steps, 2 - steps / 1000.0)
    with pytest.raises(ValueError, match="window"):
        rp.flattened(steps[:5], steps[:5] + 1.0)
    with pytest.raises(ValueError, match="tol"):
        rp.flattened(steps, steps + 1.0, tol=-1)


def test_timings_at_horizon_cut_the_curves_and_move_with_the_horizon() -> None:
    steps = np.arange(0, 1001, 10)
    v = 1 - np.exp(-steps / 50)                                # flat long before step 800
    kq = np.where(steps < 600, 0.0, (steps - 600.0) ** 2)      # leaves zero at 600, keeps rising
    norms = {"W_V": v, "W_K": kq, "W_Q": 2 * kq}
    full, early = rp.timings_at_horizon(steps, norms, 1000), rp.timings_at_horizon(steps, norms, 800)
    assert full["V_flat"] and early["V_flat"]
    assert full["V_plateau"] == rp.leave_zero_step(steps, v, 0.9)
    # 10% of the rise to the end: sqrt(0.1) of the way from 600 to the horizon
    assert full["KQ_leave"] == 730 and early["KQ_leave"] == 670
    assert not rp.timings_at_horizon(steps, {**norms, "W_V": steps / 1000.0}, 1000)["V_flat"]
    flat_kq = rp.timings_at_horizon(steps, {**norms, "W_K": np.ones(101), "W_Q": np.ones(101)}, 900)
    assert flat_kq["KQ_leave"] == 900                          # neither rises: the horizon
    assert np.isnan(rp.timings_at_horizon(steps, {**norms, "W_V": np.ones(101)}, 900)["V_plateau"])
    with pytest.raises(ValueError, match="W_Q"):
        rp.timings_at_horizon(steps, {"W_V": v, "W_K": kq}, 1000)
    with pytest.raises(ValueError, match="1200"):
        rp.timings_at_horizon(steps, norms, 1200)


def test_released_code_corpus_and_masks() -> None:
    tokens = rp.released_code_corpus(50, 0)
    ids = rp.RELEASED_IDS
    assert tokens.shape == (50, 152) and bool((tokens[:, 0] == ids["START"]).all())
    lengths = (tokens < ids["PAD"]).sum(1)
    assert int(lengths.min()) >= 100 and int(lengths.max()) <= 150
    assert bool((tokens[torch.arange(50), lengths + 1] == ids["END"]).all())
    inputs, selected = rp.released_code_masks(tokens, 1)
    assert bool(selected.any(1).all())                                  # at least one selected position
    assert not bool((selected & (tokens >= ids["PAD"])).any())          # only words are selected
    assert bool((inputs[~selected] == tokens[~selected]).all())
    assert 0.7 < float((inputs[selected] == ids["MASK"]).float().mean()) < 0.9


def test_released_code_run_short() -> None:
    run = rp.released_code_run(attention="learned", steps=20, num_train=200, num_dev=80, zero_init_noise=1e-3)
    assert run.value_matrix.shape == run.effective_value_matrix.shape == (100, 100)
    assert len(run.norms["W_K"]) == 21 and np.isfinite(run.dev_loss)
    uni = rp.released_code_run(attention="uniform", steps=5, num_train=80, num_dev=40)
    assert abs(uni.attention["same_topic"] - 0.01) < 1e-6
    with pytest.raises(ValueError, match="attention"):
        rp.released_code_run(attention="both", steps=5)


@pytest.mark.slow
def test_replay_matches_the_released_code_demo() -> None:
    """The released code's own demonstration run on this machine (uniform attention, 5,000
    steps): final dev loss 3.389, effective-map gaps 5.56 (same topic) and 5.63 (diagonal)."""
    run = rp.released_code_run(attention="uniform", steps=5000)
    gaps = rp.topic_gaps(run.effective_value_matrix)
    assert abs(run.dev_loss - 3.389) < 0.03, run.dev_loss
    assert abs(gaps["same_topic_gap"] / 5.56 - 1) < 0.1, gaps
    assert abs(gaps["diagonal_gap"] / 5.63 - 1) < 0.1, gaps


def test_deep_norm_metrics_needs_a_horizon() -> None:
    with pytest.raises(ValueError, match="horizon"):
        rp.deep_norm_metrics(0, steps=50)


def test_all_trained_metrics_keys_and_subset() -> None:
    one = [("squared", "sgd", 3.0)]
    out = rp.all_trained_metrics(0, steps=3, settings=one, num_docs=50)
    assert {"squared_sgd.gap", "squared_sgd.mean_same_topic"} <= set(out)
    assert len(out["squared_sgd.block_cosines"]) == 100
    both = rp.all_trained_metrics(0, steps=3, settings=[("cross_entropy", "adam", 0.01), *one], num_docs=50)
    assert both["squared_sgd.gap"] == pytest.approx(out["squared_sgd.gap"])   # a subset reruns the same


def test_replay_loss_switch_checks_its_value() -> None:
    with pytest.raises(ValueError, match="loss"):
        rp.released_code_run(attention="learned", steps=1, loss="hinge")
    with pytest.raises(ValueError, match="clean setting"):
        rp.attention_table_metrics(0, setting="clean", steps=1, loss="squared")


def test_replay_squared_loss_trains() -> None:
    run = rp.released_code_run(attention="learned", steps=3, loss="squared", zero_init_noise=1e-3,
                               num_train=80, num_dev=40)
    assert np.isfinite(run.dev_loss) and run.norms["W_V"].shape == (4,)


@pytest.mark.slow
def test_deep_norm_metrics_short_rerun_matches_the_long_run() -> None:
    """The 200-step metrics of a 400-step run are what a 200-step run computes (the page's quick check)."""
    long = rp.deep_norm_metrics(0, steps=400, num_docs=200)
    short = rp.deep_norm_metrics(0, steps=200, curves=False, num_docs=200)
    assert set(short) == {k for k in long if k.startswith("h200.")}
    for key, value in short.items():
        assert value == pytest.approx(long[key]), key
    assert len(long["W_V_curve"]) == len(long["curve_steps"])


def test_stage_steps_ignore_levels_and_transients() -> None:
    steps = np.arange(0, 110, 10)
    norms = np.array([0.0, 0.5, 0.05, 0.2, 0.4, 0.6, 0.8, 0.9, 1.0, 1.0, 1.0])
    marks = rp.stage_steps(steps, norms)
    # the rise of 0.5 at step 10 falls back: the 10% mark is where it stays above 0.1
    assert marks == {0.1: 30.0, 0.5: 50.0, 0.9: 70.0}
    assert rp.leave_zero_step(steps, norms, 0.1) == 10
    # scaled and shifted, the same marks
    assert rp.stage_steps(steps, 4 * norms + 2) == marks
    # a norm that never rises has no marks
    assert all(np.isnan(v) for v in rp.stage_steps(steps, 1 - norms).values())
    with pytest.raises(ValueError, match="fractions"):
        rp.stage_steps(steps, norms, fractions=(1.5,))
    with pytest.raises(ValueError, match="steps and norms"):
        rp.stage_steps(steps, norms[:-1])


def test_deep_bump_metrics_short() -> None:
    with pytest.raises(ValueError, match="window"):
        rp.deep_bump_metrics(0, steps=40, window=40, num_docs=50)
    out = rp.deep_bump_metrics(0, steps=40, window=20, num_docs=50)
    for name in ("W_K", "W_Q"):
        assert out[f"{name}.peak_step"] <= out[f"{name}.dip_step"] <= 20
        assert -1 <= out[f"{name}.score_cos_final"] <= 1
        assert out[f"{name}.first10"] <= out[f"{name}.stays10"]


def test_replay_reads_attention_at_an_earlier_step_without_changing_the_run() -> None:
    kw = {"attention": "learned", "num_train": 200, "num_dev": 80, "optimizer": "sgd", "lr": 0.03}
    long = rp.released_code_run(steps=12, attention_at=[6], **kw)
    plain = rp.released_code_run(steps=12, **kw)
    short = rp.released_code_run(steps=6, **kw)
    assert long.attention == plain.attention and np.allclose(long.norms["W_K"], plain.norms["W_K"])
    assert long.attention_at[6] == pytest.approx(short.attention)
    with pytest.raises(ValueError, match="attention_at"):
        rp.released_code_run(steps=6, attention_at=[6], **kw)
    with pytest.raises(ValueError, match="clean setting"):
        rp.attention_table_metrics(0, setting="clean", steps=1, attention_at=[1])


def test_released_learned_run_matches_the_authors_statements_page() -> None:
    # the constant the chapters read and the table of the book's page agree
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "book" / "authors_statements.md").read_text()
    run = rp.RELEASED_LEARNED_RUN
    attention = ", ".join(f"{run[k]:.5f}" for k in rp.RELATIONS)
    assert f"same word, same topic, different topic | {attention} |" in page
    norms = ", ".join(f"{run[f'W_{m}_at_1000']:.1f}" for m in "KQV")
    assert f"| {norms} |" in page
    assert f"| dev loss after 1,001 updates | {run['dev_loss']:.3f} |" in page


def test_reported_bounds_use_the_spread_or_the_last_digit() -> None:
    assert stats.reported_bounds("0.010", 0.000392) == pytest.approx((0.0095, 0.0105))
    assert stats.reported_bounds("0.0108", 0.000657) == pytest.approx((0.010143, 0.011457))
    assert stats.reported_bounds("0.0105", float("nan")) == pytest.approx((0.01045, 0.01055))
    with pytest.raises(ValueError, match="text"):
        stats.reported_bounds("ten")


def test_prediction_interval_is_wider_than_the_mean_interval() -> None:
    from topicmech import results
    x = [1.0, 2.0, 3.0, 4.0]
    lo, hi = results.prediction_interval(x)
    iv = results.interval(x)
    assert lo < iv.lo and hi > iv.hi and (lo + hi) / 2 == pytest.approx(2.5)
    with pytest.raises(ValueError, match="two or more"):
        results.prediction_interval([1.0])


def test_the_statements_page_gives_the_released_learned_run_environment() -> None:
    # one record (the package) and one page that types it for readers: they must agree
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "book" / "authors_statements.md").read_text()
    env = rp.RELEASED_LEARNED_RUN_ENVIRONMENT
    assert f"needed Transformers {env['transformers']}" in page
    assert env["date"] in page
