"""Tests for topicmech.stats: each helper against a direct computation or an exact value."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from scipy import stats as sps

from topicmech import stats
from topicmech.data import LDATopicModel, SimplifiedTopicModel


def test_doc_counts_counts_each_id_per_document():
    tokens = torch.tensor([[0, 2, 2, 1], [3, 3, 3, 3]])
    counts = stats.doc_counts(tokens, 4)
    assert counts.dtype == np.float64 and counts.shape == (2, 4)
    np.testing.assert_array_equal(counts, [[1, 1, 2, 0], [0, 0, 0, 4]])
    with pytest.raises(ValueError, match="tokens"):
        stats.doc_counts(np.zeros((2, 3), dtype=int), 4)
    with pytest.raises(ValueError, match="size"):
        stats.doc_counts(tokens, 0)


def test_pair_stats_matches_the_per_document_average():
    rng = np.random.default_rng(0)
    tokens = torch.as_tensor(rng.integers(0, 5, size=(40, 6)))
    counts = stats.doc_counts(tokens, 5)
    mean, se = stats.pair_stats(counts)
    N = 6
    per_doc = np.stack([(np.outer(c, c) - np.diag(c)) / (N * (N - 1)) for c in counts])   # (docs, 5, 5)
    np.testing.assert_allclose(mean, per_doc.mean(0), rtol=1e-12)
    np.testing.assert_allclose(se, per_doc.std(0) / math.sqrt(len(counts)), rtol=1e-10, atol=1e-15)


def test_count_chi2_is_a_quadratic_form_in_the_summed_counts():
    model = SimplifiedTopicModel(3, 2, 2)
    counts = stats.doc_counts(model.sample(500, 8, seed=0), model.vocab_size)
    x2, df = stats.count_chi2(counts, model.word_marginal(), model.expected_cooccurrence())
    assert df == model.vocab_size - 1 and 0 < x2 < sps.chi2.isf(1e-6, df)
    p = model.word_marginal()                                  # the exact mean gives X^2 = 0
    assert stats.count_chi2(np.tile(8 * p, (4, 1)), p, model.expected_cooccurrence())[0] == pytest.approx(0, abs=1e-12)


def test_max_abs_z_and_its_bonferroni_bound():
    exact = np.zeros((3, 3))
    est = np.array([[0.0, 2.0, 0.0], [5.0, 1.0, -3.0], [0.0, 0.0, 0.5]])   # the lower triangle is ignored
    zmax, bound = stats.max_abs_z(est, np.ones((3, 3)), exact, 0.01)
    assert zmax == 3.0 and bound == pytest.approx(sps.norm.isf(0.01 / 12))
    with pytest.raises(ValueError, match="false_alarm"):
        stats.max_abs_z(est, np.ones((3, 3)), exact, 0.0)


@pytest.mark.parametrize("model, N", [(SimplifiedTopicModel(5, 2, 3), 4), (LDATopicModel(4, 2, 0.3), 3)])
def test_distinct_topics_moments_match_a_large_sample(model, N):
    mean, var = stats.distinct_topics_moments(model, N)
    topics = model.sample(40_000, N, seed=1, return_topics=True)[1]
    k = torch.zeros(40_000, model.num_topics).scatter_(1, topics, 1.0).sum(1).double().numpy()
    assert abs(k.mean() - mean) < 5 * math.sqrt(var / len(k))
    assert k.var() == pytest.approx(var, rel=0.05)
    with pytest.raises(ValueError, match="model"):
        stats.distinct_topics_moments("lda", N)


def test_distinct_topics_moments_exact_small_cases():
    assert stats.distinct_topics_moments(SimplifiedTopicModel(4, 2, 2), 1) == (1.0, 0.0)   # one token, one topic
    mean, var = stats.distinct_topics_moments(SimplifiedTopicModel(4, 2, 2), 2)            # two tokens, tau = 2
    assert mean == pytest.approx(1.5) and var == pytest.approx(0.25)


def test_relative_errors_on_each_scale():
    target = SimpleNamespace(diag=1.0, same_topic=0.5, diff_topic=-0.25, mask_col=0.2)
    learned = SimpleNamespace(diag=1.1, same_topic=0.5, diff_topic=-0.25, mask_col=0.3)
    rel = stats.relative_errors(learned, target, True)
    assert rel == pytest.approx({"boost": 0.2, "topic": 0.0, "diff_topic": 0.0, "mask_col": 0.5})
    hidden = stats.relative_errors(learned, target, False)     # boost on the scale beta* - gamma*, mu itself
    assert hidden == pytest.approx({"boost": 0.1 / 0.75, "topic": 0.0, "diff_topic": 0.0, "mask_col": 0.3})


def test_block_share_noise_and_blocks():
    T, v = 5, 4
    rng = np.random.default_rng(0)
    noise = rng.standard_normal((T * v, T * v))
    assert stats.block_share(noise, T, v) < 0.2                # about 1 / v**2 = 0.06
    blocky = np.kron(rng.standard_normal((T, T)), np.ones((v, v)))
    assert stats.block_share(blocky, T, v) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="shape"):
        stats.block_share(noise, T, v + 1)
