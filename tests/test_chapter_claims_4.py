"""Multi-seed checks of the claims of chapter 4, *Stage 1: the value matrix becomes block-structured*.

Every claim the chapter asserts (book/04_value_matrix.md, quick mode) is re-checked here:
the exact claims once (they are deterministic), over several parameter sets; the sampled
and trained claims over ten seeds, in both visibility conventions, with the chapter's
settings and margins. The chapter and these tests both pass the fixed phases
``stage1.SQUARED_PHASES`` and ``stage1.CROSS_ENTROPY_PHASES`` explicitly, so a change
of the package's default phases cannot make them drift apart. Trained and fitted block
means are compared on relative scales (an absolute tolerance of 0.01 could not tell
``gamma* ~ -0.0014`` or ``mu* = 0.01`` from 0). ``TOPICMECH_SEED_OFFSET`` shifts every seed.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import topicmech as tm
from topicmech import stage1, theory
from topicmech.stats import relative_errors

# The chapter's quick-mode setting.
T, V_PER, TAU, N = 10, 10, 2, 64
V, D = T * V_PER, T * V_PER + 1
MASKING = tm.Masking(mask_prob=0.15, keep_prob=0.1, random_prob=0.1)
SETTING = tm.Setting.chapter4(attend_to_masked=True)  # T, V_PER, TAU, N and MASKING above
SEEDS = range(10)  # every sampled or trained claim is re-checked over ten seeds
CONVENTIONS = (True, False)
# Margins on |relative error| (see relative_errors), the same as in the chapter.
TRAIN_MARGIN = {"boost": 0.1, "topic": 0.02, "diff_topic": 0.25, "mask_col": 1e-3}
FIT_MARGIN = {"boost": 0.15, "topic": 0.02, "diff_topic": 0.25, "mask_col": 1e-8}
RIDGE_MARGIN = {"boost": 0.25, "topic": 0.02, "diff_topic": 0.1, "mask_col": 0.1}

# Other parameter sets for the exact claims.
OTHER_SETTINGS = [
    tm.Setting(4, 3, 2, 17, masking=tm.Masking(0.2, 0.2, 0.1), attend_to_masked=True),
    tm.Setting(6, 2, 1, 9, masking=tm.Masking(0.5, 0.0, 0.3), attend_to_masked=True),
    tm.Setting(3, 5, 2, 200, masking=tm.Masking(0.05, 0.5, 0.0), attend_to_masked=True),
]
ALL_SETTINGS = [SETTING] + OTHER_SETTINGS


def assert_within(errors: dict[str, float], margins: dict[str, float], context: object) -> None:
    for key, margin in margins.items():
        assert abs(errors[key]) < margin, (context, key, errors[key], margin)


@pytest.fixture(scope="module")
def topic_model() -> tm.SimplifiedTopicModel:
    return tm.SimplifiedTopicModel(T, V_PER, TAU)


@pytest.fixture(scope="module")
def exact() -> dict[bool, theory.ValueBlocks]:
    return {si: theory.value_block_coefficients(SETTING.replace(attend_to_masked=si)) for si in CONVENTIONS}


@pytest.fixture(scope="module")
def dense() -> dict[bool, np.ndarray]:
    return {si: theory.optimal_value_matrix(SETTING.replace(attend_to_masked=si)) for si in CONVENTIONS}


# ---- exact claims ---------------------------------------------------------------------


@pytest.mark.parametrize("params", ALL_SETTINGS)
@pytest.mark.parametrize("si", CONVENTIONS)
def test_block_form_two_routes_and_same_beats_diff(params, si):
    """Theorem part 1-2: unique block-form optimum; dense and algebra routes agree; beta > gamma."""
    T_, v_, V_ = params.T, params.v, params.V
    setting = params.replace(attend_to_masked=si)
    W = theory.optimal_value_matrix(setting)
    blocks = theory.value_block_coefficients(setting)
    assert np.abs(theory.block_matrix(blocks, T_, v_) - W).max() < 1e-10
    assert theory.orbit_deviation(W, T_, v_) < 1e-10
    assert np.abs(W[V_]).max() == 0.0
    assert blocks.same_topic > blocks.diff_topic
    # every attended column sums to one over the word rows (Proposition, third bullet) ...
    cols = W[:V_, : V_ + 1] if si else W[:V_, :V_]
    assert np.abs(cols.sum(axis=0) - 1).max() < 1e-10
    if not si:  # ... while the free [MASK] column of the hidden-keys optimum is set to 0
        assert np.abs(W[:, V_]).max() == 0.0
    # the weighted gap is the topic eigenvalue over v
    gap = theory.weighted_block_gap(setting)
    assert abs(gap - blocks.topic_eigenvalue / v_) < 1e-12


@pytest.mark.parametrize("params", ALL_SETTINGS)
@pytest.mark.parametrize("si", CONVENTIONS)
def test_sigma_positive_definite_on_attended_tokens(params, si):
    """Theorem part 1: Sigma > 0 on all D tokens (visible keys) or on the words, >= kappa/V (hidden)."""
    V_ = params.V
    setting = params.replace(attend_to_masked=si)
    Sigma, _ = theory.moments(setting)
    if si:
        assert np.linalg.eigvalsh(Sigma).min() > 0
    else:
        bound = theory.kappa(setting) / V_
        assert np.linalg.eigvalsh(Sigma[:V_, :V_]).min() >= bound * (1 - 1e-9)


def test_sigma_singular_without_mask_token():
    """Visible keys with p_[M] = 0: the [MASK] row of Sigma vanishes; the optimum leaves that column at 0."""
    params = SETTING.replace(mask_prob=0.9, keep_prob=0.5, random_prob=0.5)
    Sigma, _ = theory.moments(params)
    assert np.abs(Sigma[V]).max() == 0.0 and np.abs(Sigma[:, V]).max() == 0.0
    assert np.linalg.eigvalsh(Sigma[:V, :V]).min() > 0
    W = theory.optimal_value_matrix(params)
    assert np.abs(W[:, V]).max() == 0.0


@pytest.mark.parametrize("si", CONVENTIONS)
def test_weighted_gap_tends_to_the_authors_constant(si):
    """Theorem part 4 in the chapter's two settings: Richardson-extrapolated gap = closed form to 1e-6."""
    a = 1 - (1 - MASKING.keep_prob) * MASKING.mask_prob
    for T_, v_, tau_ in ((T, V_PER, TAU), (5, 4, 2)):
        closed_form = 1 / (v_ * a) if si else 1 / v_
        def gap(n):
            return theory.weighted_block_gap(tm.Setting(T_, v_, tau_, n, attend_to_masked=si))
        assert abs(gap(math.inf) - closed_form) < 1e-15
        assert abs(2 * gap(2 * 10**6) - gap(10**6) - closed_form) < 1e-6


@pytest.mark.parametrize("si", CONVENTIONS)
def test_ridge_tends_to_minimum_norm(si):
    """Theorem part 5: ||W_lambda - W_min_norm||_F shrinks with lambda, at N and at N = inf."""
    for n in (N, math.inf):
        params = SETTING.replace(doc_len=n, attend_to_masked=si)
        W_mn = theory.optimal_value_matrix(params)
        d = [float(np.linalg.norm(theory.optimal_value_matrix(params, l2=lam) - W_mn))
             for lam in np.logspace(0, -8, 9)]
        assert all(x > y for x, y in zip(d, d[1:])), d
        assert d[-1] < 1e-3 * d[0]


def test_book_setting_margins(exact):
    """The chapter asserts beta - gamma > 20 |gamma| and mu = 1/V with visible keys."""
    for si in CONVENTIONS:
        assert exact[si].same_topic - exact[si].diff_topic > 20 * abs(exact[si].diff_topic)
    assert abs(exact[True].mask_col - 1 / V) < 1e-12
    assert exact[False].mask_col == 0.0


@pytest.mark.parametrize("params", ALL_SETTINGS)
def test_diag_excess_closed_form_and_hidden_keys(params):
    """Same-word boost = closed form with visible keys; alpha = beta to 1e-12 with hidden keys."""
    si = theory.value_block_coefficients(params.visible())
    cs = theory.value_block_coefficients(params.hidden())
    assert abs((si.diag - si.same_topic) - theory.diag_excess(params)) < 1e-12
    assert abs(cs.diag - cs.same_topic) < 1e-12
    lam = theory.topic_eigenvalue_hidden(params.hidden())
    assert abs(cs.topic_eigenvalue - lam) < 1e-12


def test_no_keep_no_boost():
    """Exercise ex-value-keep: with keep_prob = 0 the boost vanishes; the topic block stays."""
    for keep in (0.0, 0.1, 0.5):
        setting = SETTING.replace(keep_prob=keep)
        blk = theory.value_block_coefficients(setting)
        assert abs(blk.diag - blk.same_topic - theory.diag_excess(setting)) < 1e-12
        assert blk.same_topic > blk.diff_topic
    assert theory.diag_excess(SETTING.replace(keep_prob=0.0)) == 0.0


def test_slow_within_topic_direction():
    """Sigma's smallest eigenvalue sits on the T(v-1) within-topic contrasts."""
    Sigma, _ = theory.moments(SETTING)
    ev = np.linalg.eigvalsh(Sigma)
    assert np.sum(np.isclose(ev, ev[0], rtol=1e-8)) >= T * (V_PER - 1)
    assert ev[-1] / ev[0] > 50  # the conditioning that makes the boost slow to learn


@pytest.mark.parametrize("si", CONVENTIONS)
def test_long_document_limit_and_ridge(si):
    """Theorem part 3: rank-T Sigma, min-norm and ridge give alpha = beta > gamma; L2 shrinks the block."""
    params = SETTING.replace(doc_len=math.inf, attend_to_masked=si)
    S_inf, C_inf = theory.moments(params)
    k = slice(None) if si else slice(0, V)
    assert np.linalg.matrix_rank(S_inf[k, k], tol=1e-10) == T
    W_mn = theory.optimal_value_matrix(params)
    assert abs(theory.population_loss(W_mn[k, k], S_inf[k, k], C_inf[k, k]) - theory.bayes_risk(params)) < 1e-10
    limit = theory.value_block_coefficients(params)
    assert abs(limit.diag - limit.same_topic) < 1e-12 and limit.same_topic > limit.diff_topic
    ridge = [theory.value_block_coefficients(params, l2=lam) for lam in np.logspace(-6, 0, 13)]
    assert max(abs(b.diag - b.same_topic) for b in ridge) < 1e-12
    assert min(b.same_topic - b.diff_topic for b in ridge) > 0
    eig = [b.topic_eigenvalue for b in ridge]
    assert all(x > y for x, y in zip(eig, eig[1:]))
    if not si:
        assert abs(limit.same_topic - 1 / V_PER) < 1e-12 and abs(limit.diff_topic) < 1e-12  # W* -> B / v


def test_order_of_limits():
    """Visible keys: the finite-N boost tends to p_c / (1 - p_m p_[M]); any fixed ridge kills it."""
    big = SETTING.replace(doc_len=1_000_000)
    free = theory.value_block_coefficients(big)
    ridge = theory.value_block_coefficients(big, l2=1e-3)
    assert abs(free.diag - free.same_topic - theory.diag_excess(SETTING.replace(doc_len=math.inf))) < 1e-5
    assert ridge.diag - ridge.same_topic < 1e-4


def test_mask_column_changes_in_the_limit():
    """Exercise ex-value-mask-column: mu = 1/V at finite N but not for the N -> inf min-norm rule."""
    limit = theory.value_block_coefficients(SETTING.replace(doc_len=math.inf))
    assert abs(limit.mask_col - 1 / V) > 0.01


def test_cross_entropy_ignores_column_shifts(topic_model):
    """Adding a constant to each column of W^V leaves the cross-entropy unchanged (not the squared loss)."""
    docs = topic_model.sample(256, N, seed=21)
    inputs, selected = tm.bert_mask(docs, V, MASKING, seed=22)
    for si in CONVENTIONS:
        model = tm.OneLayerTransformer(D, attend_to_masked=si, init_scale=0.1, seed=0)
        W = model.W_V.detach().clone()
        for seed in SEEDS:
            shift = torch.randn(D, generator=tm.utils.make_generator(seed))
            losses = []
            for M in (W, W + shift[None, :]):
                with torch.no_grad():
                    model.W_V.copy_(M)
                    logits = model(inputs, selected)
                    losses.append([float(tm.losses.mlm_loss(logits, docs, selected, kind))
                                   for kind in ("cross_entropy", "squared")])
            assert abs(losses[1][0] - losses[0][0]) < 1e-5
            assert abs(losses[1][1] - losses[0][1]) > 0.1


def test_largest_eigenvalue_and_step_cap():
    """Chapter 4: sigma_max of Sigma is about 0.026 (0.0257 at N = 64); 1/sigma_max ~ 39 is the step cap."""
    for n, expected in ((64, 0.025653), (128, 0.023843)):
        ev = np.linalg.eigvalsh(theory.moments(SETTING.replace(doc_len=n))[0])
        assert abs(ev[-1] - expected) < 1e-5, (n, ev[-1])
        assert 33 < 1 / ev[-1] < 50


@pytest.mark.parametrize("si", CONVENTIONS)
def test_constant_proportion_selection(si):
    """sec-vm-selection: fixed-count selection keeps the block form, moves the gap by O(1/N) and, with
    visible keys, has the same-word boost p_c / (1 - p_m p_[M]) at every N."""
    from topicmech.theory import value as tv

    rel = []
    boost_inf = theory.diag_excess(SETTING.replace(doc_len=math.inf))
    for n in (20, 100, 1000, 4000):
        params = SETTING.replace(doc_len=n, attend_to_masked=si)
        W = tv.optimum_from_moments(*tv.fixed_selection_moments(params, round(0.15 * n)),
                                    attend_to_masked=si, l2=0.0)
        assert theory.orbit_deviation(W, T, V_PER) < 1e-10
        b = theory.orbit_means(W, T, V_PER)
        assert b.same_topic - b.diff_topic > 0.05
        gap = (b.diag + (V_PER - 1) * b.same_topic) / V_PER - b.diff_topic
        rel.append(abs(gap / theory.weighted_block_gap(params) - 1))
        assert abs(b.diag - b.same_topic - (boost_inf if si else 0.0)) < 1e-9
    assert all(x > y for x, y in zip(rel, rel[1:])) and rel[0] < 0.05 and rel[-1] < 1e-3, rel


def test_tied_bias_optimum_spectrum():
    """appendix_embeddings Step 9: M_0 1 = 0, M_0 PSD, spectrum on 1-perp = {0, lambda_t, lambda_w}."""
    for T9, v9, tau9, pm, pc, pr in [(5, 4, 2, 0.15, 0.1, 0.1), (4, 5, 3, 0.3, 0.0, 0.2), (3, 3, 1, 0.5, 0.5, 0.2)]:
        for si in CONVENTIONS:
            setting = tm.Setting(T9, v9, tau9, 30, masking=tm.Masking(pm, pc, pr), attend_to_masked=si)
            opt = theory.tied_bias_optimum(setting)
            S, C = theory.moments(setting)
            D9 = S.shape[0]
            one = np.ones(D9)
            assert opt.route == "stationary" and np.abs(opt.M @ one).max() < 1e-12
            assert opt.min_eig > -1e-12
            Q = np.linalg.qr(np.column_stack([one, np.eye(D9)[:, :-1]]))[0][:, 1:]
            blk = theory.tied_embedding_blocks(S, C, T9, v9, T9)
            pred = np.sort([0.0] + [blk.lam_topic] * (T9 - 1) + [blk.lam_within] * (T9 * (v9 - 1)))
            assert np.abs(np.linalg.eigvalsh(Q.T @ opt.M @ Q) - pred).max() < 1e-9
            assert blk.lam_topic > 0.02
            if si and pc > 0:
                assert blk.lam_within > 0.02
            else:
                assert abs(blk.lam_within) < 1e-12


# ---- sampled claims (ten seeds) -------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_least_squares_fit_on_a_sample(seed, topic_model, exact):
    """The data-driven optimum on 20,000 documents matches the exact blocks on relative scales."""
    docs = topic_model.sample(20_000, N, seed=100 + seed)
    inputs, selected = tm.bert_mask(docs, V, MASKING, seed=200 + seed)
    for si in CONVENTIONS:
        W_fit = theory.least_squares_value_matrix(inputs, selected, docs, D, attend_to_masked=si)
        assert_within(relative_errors(theory.orbit_means(W_fit, T, V_PER), exact[si], si), FIT_MARGIN, (seed, si))


# ---- trained claims (ten seeds, both conventions) -----------------------------------


@pytest.mark.parametrize("seed", range(3))
def test_document_level_standard_error(seed):
    """appendix_embeddings Step 1: with documents as the unit the standard error of the sampled loss is
    about 1.35 times the naive one, and the formula lies within four document-level errors."""
    T5, v5, tau5, N5 = 5, 4, 2, 20
    setting = tm.Setting(T5, v5, tau5, N5, attend_to_masked=True)
    Sigma, C = theory.moments(setting)
    D5 = Sigma.shape[0]
    W = 0.3 * tm.utils.numpy_rng(seed).normal(size=(D5, D5))
    docs = tm.SimplifiedTopicModel(T5, v5, tau5).sample(20_000, N5, seed=seed + 1)
    inputs, selected = tm.bert_mask(docs, T5 * v5, seed=seed + 2)
    model = tm.OneLayerTransformer(D5, embedding="one_hot", attention="uniform", value="learned",
                                   head="identity", attend_to_masked=True)
    with torch.no_grad():
        model.W_V.copy_(torch.from_numpy(W).float())
        f = model(inputs, selected)[selected].double()
    y = docs[selected]
    per = (f.pow(2).sum(1) - 2 * f.gather(1, y[:, None]).squeeze(1) + 1).numpy()
    doc_of = selected.nonzero()[:, 0].numpy()
    mc = per.mean()
    resid = np.bincount(doc_of, weights=per, minlength=20_000) - mc * np.bincount(doc_of, minlength=20_000)
    se = math.sqrt(20_000 / 19_999 * (resid ** 2).sum()) / per.size
    ratio = se / (per.std() / math.sqrt(per.size))
    assert abs(mc - theory.population_loss(W, Sigma, C)) < 4 * se
    assert 1.1 < ratio < 1.7, ratio


@pytest.mark.slow
@pytest.mark.parametrize("si", CONVENTIONS)
@pytest.mark.parametrize("seed", SEEDS)
def test_squared_loss_training_reaches_the_optimum(seed, si, topic_model, exact):
    """SGD from W^V = 0 on fresh documents: boost, topic contrast, gamma and mu on their own scales."""
    run = stage1.train_value_matrix(tm.Setting.chapter4(attend_to_masked=si, doc_len=N), phases=stage1.SQUARED_PHASES,
                                    seed=seed)
    assert_within(relative_errors(run.final_blocks(), exact[si], si), TRAIN_MARGIN, (seed, si))


@pytest.mark.slow
@pytest.mark.parametrize("si", CONVENTIONS)
@pytest.mark.parametrize("seed", SEEDS)
def test_cross_entropy_training_gives_the_same_pattern(seed, si, topic_model, dense):
    """Cross-entropy: same within-column pattern as the squared-loss optimum, no column drift."""
    run = stage1.train_value_matrix(tm.Setting.chapter4(attend_to_masked=si, doc_len=N), loss="cross_entropy",
                                    phases=stage1.CROSS_ENTROPY_PHASES, seed=seed)
    W = run.W_V
    assert np.abs(W.sum(axis=0)).max() < 1e-3
    assert stage1.column_topic_margin(W, T, V_PER) > 1.0
    assert stage1.contrast_correlation(W, dense[si], V, include_mask_column=si) > (0.9 if si else 0.98)
    centred = theory.orbit_means(stage1.centre_columns(W, V), T, V_PER)
    ratio = (centred.diag - centred.same_topic) / (centred.same_topic - centred.diff_topic)
    if si:
        assert ratio > 0.03, (seed, ratio)
    else:
        assert abs(ratio) < 0.015, (seed, ratio)


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_ridge_training_reaches_the_ridge_optimum(seed, topic_model):
    """Exercise ex-value-ridge: with l2 = 1e-3 a short run lands on the ridge optimum."""
    predicted = theory.value_block_coefficients(SETTING, l2=1e-3)
    run = stage1.train_value_matrix(tm.Setting.chapter4(attend_to_masked=True, doc_len=N), l2=1e-3,
                                    phases=((250, 30.0), (150, 10.0)), seed=seed)
    assert_within(relative_errors(run.final_blocks(), predicted, True), RIDGE_MARGIN, seed)


def test_heatmap_colorbar_label_and_mask_marker() -> None:
    """Figs. 4.3 and 4.5 label their colour bars and can put the [MASK] marker below."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from topicmech import plotting

    M = np.eye(5)
    ax = plotting.heatmap_by_topic(M, 2, colorbar_label="entry", mask_label_at="bottom")
    bars = [a for a in ax.figure.axes if a is not ax]
    assert bars and bars[0].get_ylabel() == "entry"
    marker = [t for t in ax.texts if t.get_text() == "[M]"]
    assert marker and marker[0].get_position()[1] > M.shape[0]
    plt.close(ax.figure)
    with pytest.raises(ValueError, match="middle"):
        plotting.heatmap_by_topic(M, 2, mask_label_at="middle")
