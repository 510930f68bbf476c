"""Tests for topicmech.data: the two topic-model samplers and BERT masking.

Statistical checks compare empirical frequencies with the exact ones
(:meth:`expected_cooccurrence`, :meth:`word_marginal`) through z-scores. Documents are
i.i.d., so each statistic is a mean of i.i.d. per-document values and its standard
error is the per-document standard deviation over sqrt(num_docs). Seeds are fixed, so
the tests are deterministic; the margins (|z| < 5 for a handful of aggregate
statistics, |z| < 6 for the maximum over all V^2 cells) would make a false alarm rare
even if the seeds changed. ``test_cooccurrence_check_has_power`` shows that the same
check rejects a wrong model.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from topicmech.data import LDATopicModel, SimplifiedTopicModel, TopicModel, bert_mask, check_docs, check_topic_model
from topicmech.setting import Masking
from topicmech.stats import doc_counts

NUM_DOCS = 20_000
DOC_LEN = 12

# (label, factory): settings unlike the book's as well as the book's own
SETTINGS = [
    ("simplified T=3 v=7 tau=3", lambda: SimplifiedTopicModel(3, 7, 3)),
    ("simplified T=20 v=2 tau=1", lambda: SimplifiedTopicModel(20, 2, 1)),
    ("simplified T=10 v=10 tau=2", lambda: SimplifiedTopicModel(10, 10, 2)),
    ("simplified T=1 v=5 tau=1", lambda: SimplifiedTopicModel(1, 5, 1)),
    ("lda T=10 v=5 alpha=0.05", lambda: LDATopicModel(10, 5, 0.05)),
    ("lda T=4 v=3 alpha=2.0", lambda: LDATopicModel(4, 3, 2.0)),
    ("lda T=10 v=10 alpha=0.1", lambda: LDATopicModel(10, 10, 0.1)),
    ("lda T=5 v=2 alpha=0.01", lambda: LDATopicModel(5, 2, 0.01)),   # log-space Gamma route
    ("lda T=5 v=2 alpha=1e-3", lambda: LDATopicModel(5, 2, 1e-3)),
]
IDS = [label for label, _ in SETTINGS]


def z_scores(per_doc_mean: np.ndarray, per_doc_sq: np.ndarray, expected: np.ndarray, n: int) -> np.ndarray:
    """z = (empirical mean - expected) / standard error, from per-document first and second moments.

    Cells whose per-document value never varies (standard error 0) must match exactly;
    they get z = 0 when they do and inf when they do not.
    """
    var = np.maximum(per_doc_sq - per_doc_mean**2, 0.0)
    se = np.sqrt(var / n)
    diff = per_doc_mean - expected
    z = np.where(se > 0, diff / np.where(se > 0, se, 1.0), np.where(np.abs(diff) < 1e-12, 0.0, np.inf))
    return z


def cooccurrence_z(docs: torch.Tensor, P: np.ndarray) -> np.ndarray:
    """Per-cell z-scores of the within-document pair frequencies against ``P``, shape (V, V).

    For one document with counts c, X[a, b] = (c_a c_b - [a = b] c_a) / (N (N - 1)) is an
    unbiased estimate of P[a, b] (ordered pairs of distinct positions).
    """
    n, N = docs.shape
    V = P.shape[0]
    C = doc_counts(docs, V)                                                   # (n, V)
    pairs = N * (N - 1)
    mean = (C.T @ C - np.diag(C.sum(0))) / (pairs * n)                       # (V, V)
    sq = ((C**2).T @ (C**2)) / (pairs**2 * n)                                # off-diagonal E[X^2]
    np.fill_diagonal(sq, ((C**2 - C) ** 2).mean(0) / pairs**2)               # diagonal E[X^2]
    return z_scores(mean, sq, P, n)


def orbit_z(docs: torch.Tensor, tm: TopicModel) -> dict[str, float]:
    """z-scores of the total pair probability in each orbit (same word / same topic / different topic)."""
    n, N = docs.shape
    V, v = tm.vocab_size, tm.words_per_topic
    C = doc_counts(docs, V)                                                   # (n, V)
    topic_counts = C.reshape(n, tm.num_topics, v).sum(2)                      # (n, T)
    pairs = N * (N - 1)
    per_doc = {
        "same_word": (C**2 - C).sum(1) / pairs,
        "same_topic": ((topic_counts**2).sum(1) - (C**2).sum(1)) / pairs,
        "diff_topic": (N**2 - (topic_counts**2).sum(1)) / pairs,
    }
    P = tm.expected_cooccurrence()
    same_word, same_topic, diff_topic = (P[m].sum() for m in _relation_masks(tm))
    expected = {"same_word": same_word, "same_topic": same_topic, "diff_topic": diff_topic}
    out = {}
    for key, x in per_doc.items():
        out[key] = float(z_scores(np.array(x.mean()), np.array((x**2).mean()), np.array(expected[key]), n))
    return out


def _relation_masks(tm: TopicModel) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    topic = tm.topic_of_word.numpy()
    same = topic[:, None] == topic[None, :]
    eye = np.eye(tm.vocab_size, dtype=bool)
    return eye, same & ~eye, ~same


@pytest.fixture(scope="module", params=SETTINGS, ids=IDS)
def sampled(request):
    """(topic model, documents, topics) for one setting, sampled once per module."""
    tm = request.param[1]()
    docs, topics = tm.sample(NUM_DOCS, DOC_LEN, seed=1234, return_topics=True)
    return tm, docs, topics


# ---- vocabulary and basic shape ---------------------------------------------------------


@pytest.mark.parametrize("T,v,tau", [(1, 1, 1), (3, 7, 3), (20, 2, 1), (10, 10, 2)])
def test_vocabulary_attributes(T, v, tau):
    tm = SimplifiedTopicModel(T, v, tau)
    assert tm.vocab_size == T * v
    assert tm.mask_id == T * v
    assert tm.num_tokens == T * v + 1
    assert tm.topic_of_word.dtype == torch.long
    assert tm.topic_of_word.tolist() == [w // v for w in range(T * v)]
    phi = tm.topic_word_matrix
    assert phi.shape == (T, T * v)
    np.testing.assert_allclose(phi.sum(1), 1.0)
    # topic t puts mass only on its own words
    assert np.all((phi > 0) == (tm.topic_of_word.numpy()[None, :] == np.arange(T)[:, None]))


def test_lda_attributes_and_repr():
    tm = LDATopicModel(4, 3, 0.5)
    assert (tm.vocab_size, tm.mask_id, tm.num_tokens) == (12, 12, 13)
    assert tm.alpha == 0.5
    assert repr(tm) == "LDATopicModel(num_topics=4, words_per_topic=3, alpha=0.5)"
    assert repr(SimplifiedTopicModel(4, 3, 2)) == "SimplifiedTopicModel(num_topics=4, words_per_topic=3, topics_per_doc=2)"


@pytest.mark.parametrize("label,factory", SETTINGS, ids=IDS)
def test_sample_shape_dtype_range(label, factory):
    tm = factory()
    docs = tm.sample(7, 33, seed=5)
    assert docs.shape == (7, 33)
    assert docs.dtype == torch.long
    assert int(docs.min()) >= 0 and int(docs.max()) < tm.vocab_size
    docs, topics = tm.sample(7, 33, seed=5, return_topics=True)
    assert topics.shape == (7, 33) and topics.dtype == torch.long
    assert int(topics.min()) >= 0 and int(topics.max()) < tm.num_topics


@pytest.mark.parametrize("label,factory", SETTINGS, ids=IDS)
def test_each_token_word_lies_in_its_topic(label, factory):
    tm = factory()
    docs, topics = tm.sample(200, 50, seed=3, return_topics=True)
    assert torch.equal(tm.topic_of_word[docs], topics)
    assert torch.equal(docs // tm.words_per_topic, topics)


@pytest.mark.parametrize("T,v,tau", [(3, 7, 3), (20, 2, 1), (10, 10, 2), (6, 4, 5)])
def test_simplified_documents_use_at_most_tau_topics(T, v, tau):
    tm = SimplifiedTopicModel(T, v, tau)
    docs = tm.sample(500, 40, seed=11)
    topics_per_doc = [len(set(row)) for row in (docs // v).tolist()]
    assert max(topics_per_doc) <= tau
    # long documents show every one of their tau topics: P(a topic is missed) <= tau (1 - 1/tau)^400
    long_docs = tm.sample(200, 400, seed=12)
    assert all(len(set(row)) == tau for row in (long_docs // v).tolist())


def test_simplified_topic_sets_are_uniform_over_subsets():
    """Each of the C(T, tau) topic sets is equally likely (chi-square with margin)."""
    T, v, tau = 5, 3, 2
    tm = SimplifiedTopicModel(T, v, tau)
    docs = tm.sample(10_000, 200, seed=21)
    sets = [tuple(sorted(set(row))) for row in (docs // v).tolist()]
    subsets = list(itertools.combinations(range(T), tau))
    assert set(sets) == set(subsets)
    counts = np.array([sets.count(s) for s in subsets], dtype=float)
    expected = len(sets) / len(subsets)
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    df = len(subsets) - 1
    assert chi2 < df + 6 * math.sqrt(2 * df), chi2


def test_simplified_words_uniform_within_topic_set():
    """Given its topic set S, a document's words are uniform over the tau*v words of S."""
    T, v, tau = 4, 3, 2
    tm = SimplifiedTopicModel(T, v, tau)
    docs = tm.sample(4000, 300, seed=8)
    C = doc_counts(docs, tm.vocab_size)
    present = C.reshape(len(C), T, v).sum(2) > 0                             # (n, T)
    word_present = np.repeat(present, v, axis=1)                              # (n, V)
    share = C[word_present].reshape(len(C), tau * v) / 300.0                  # (n, tau*v)
    z = (share.mean(0) - 1 / (tau * v)) / (share.std(0) / math.sqrt(len(C)))
    assert np.abs(z).max() < 5, z


def test_lda_tiny_alpha_gives_single_topic_documents():
    """Regression: with alpha = 1e-4 every Gamma(alpha) draw underflowed to 0 and the clamp made
    theta uniform, i.e. many topics per document instead of one."""
    tm = LDATopicModel(5, 2, 1e-4)
    docs = tm.sample(300, 20, seed=0)
    assert int(docs.min()) >= 0 and int(docs.max()) < tm.vocab_size
    # P(a document shows two topics) <= 1 - E[sum theta_t^20] ~ alpha * T * H_19 ~ 2e-3
    single = sum(len(set(row)) == 1 for row in (docs // 2).tolist())
    assert single >= 295, single
    # and the topics themselves stay uniform over documents
    first = torch.bincount(docs[:, 0] // 2, minlength=5)
    assert int(first.min()) > 30


# ---- reproducibility ------------------------------------------------------------------------


@pytest.mark.parametrize("label,factory", SETTINGS, ids=IDS)
def test_sample_reproducible_from_seed(label, factory):
    tm = factory()
    a = tm.sample(50, 30, seed=7)
    b = tm.sample(50, 30, seed=7)
    assert torch.equal(a, b)
    # a fresh model object with the same parameters gives the same documents
    assert torch.equal(factory().sample(50, 30, seed=7), a)
    # global random state plays no part
    torch.manual_seed(999)
    np.random.seed(999)
    assert torch.equal(tm.sample(50, 30, seed=7), a)
    # a generator seeded alike gives the same documents
    gen = torch.Generator().manual_seed(7)
    assert torch.equal(tm.sample(50, 30, seed=gen), a)
    # another seed gives other documents (unless the vocabulary has one word)
    assert not torch.equal(tm.sample(50, 30, seed=8), a)


def test_topics_reproducible_with_return_topics():
    tm = LDATopicModel(6, 4, 0.3)
    d1, t1 = tm.sample(40, 25, seed=2, return_topics=True)
    d2, t2 = tm.sample(40, 25, seed=2, return_topics=True)
    assert torch.equal(d1, d2) and torch.equal(t1, t2)
    assert torch.equal(tm.sample(40, 25, seed=2), d1)


def test_sample_is_vectorised_on_a_million_tokens():
    """A 10^6-token sample and its masking run (timing is benchmarked elsewhere)."""
    tm = LDATopicModel(10, 10, 0.1)
    docs = tm.sample(5_000, 200, seed=0)
    assert docs.numel() == 1_000_000
    inputs, selected = bert_mask(docs, tm.vocab_size, seed=0)
    assert inputs.shape == docs.shape and selected.shape == docs.shape


# ---- exact statistics -------------------------------------------------------------------------


@pytest.mark.parametrize("label,factory", SETTINGS, ids=IDS)
def test_expected_cooccurrence_is_a_symmetric_block_distribution(label, factory):
    tm = factory()
    P = tm.expected_cooccurrence()
    V = tm.vocab_size
    assert P.shape == (V, V)
    assert np.all(P >= 0)
    assert P.sum() == pytest.approx(1.0, abs=1e-12)
    np.testing.assert_allclose(P, P.T)
    # constant on each orbit
    for mask in _relation_masks(tm):
        if mask.any():
            assert np.ptp(P[mask]) < 1e-15
    # row sums are the word marginal
    np.testing.assert_allclose(P.sum(1), tm.word_marginal(), rtol=1e-12)
    assert tm.word_marginal().shape == (V,)
    assert tm.word_marginal().sum() == pytest.approx(1.0)


@pytest.mark.parametrize("T,tau", [(1, 1), (3, 3), (5, 2), (6, 4), (20, 1)])
def test_simplified_topic_cooccurrence_matches_enumeration(T, tau):
    """E[theta theta^T] by enumerating every topic set, against the closed form."""
    tm = SimplifiedTopicModel(T, 2, tau)
    M = np.zeros((T, T))
    subsets = list(itertools.combinations(range(T), tau))
    for S in subsets:
        theta = np.zeros(T)
        theta[list(S)] = 1 / tau
        M += np.outer(theta, theta) / len(subsets)
    np.testing.assert_allclose(tm.expected_topic_cooccurrence(), M, atol=1e-15)


def test_lda_topic_cooccurrence_matches_dirichlet_moments():
    """Against E[theta theta^T] estimated from 100k NumPy Dirichlet draws (independent of the package)."""
    for T, alpha in [(4, 2.0), (10, 0.05)]:
        tm = LDATopicModel(T, 3, alpha)
        theta = np.random.default_rng(0).dirichlet(np.full(T, alpha), size=100_000)
        outer = theta[:, :, None] * theta[:, None, :]
        z = (outer.mean(0) - tm.expected_topic_cooccurrence()) / (outer.std(0) / math.sqrt(len(theta)))
        assert np.abs(z).max() < 6, (T, alpha, np.abs(z).max())


# ---- empirical statistics against the exact ones -------------------------------------------------


def test_word_frequencies_match_marginal(sampled):
    tm, docs, _ = sampled
    freq = doc_counts(docs, tm.vocab_size) / DOC_LEN                          # (n, V)
    z = z_scores(freq.mean(0), (freq**2).mean(0), tm.word_marginal(), len(freq))
    assert np.abs(z).max() < 6, np.abs(z).max()


def test_topic_frequencies_match_uniform(sampled):
    tm, docs, topics = sampled
    T = tm.num_topics
    freq = torch.nn.functional.one_hot(topics, T).double().mean(1).numpy()   # (n, T)
    z = z_scores(freq.mean(0), (freq**2).mean(0), np.full(T, 1 / T), len(freq))
    assert np.abs(z).max() < 5, np.abs(z).max()


def test_cooccurrence_matches_expected_per_cell(sampled):
    tm, docs, _ = sampled
    z = cooccurrence_z(docs, tm.expected_cooccurrence())
    assert np.isfinite(z).all(), "a cell that cannot vary differs from its exact value"
    assert np.abs(z).max() < 6, np.abs(z).max()


def test_cooccurrence_matches_expected_per_orbit(sampled):
    tm, docs, _ = sampled
    z = orbit_z(docs, tm)
    assert all(abs(x) < 5 for x in z.values()), z


def test_cooccurrence_check_has_power():
    """The same z-test rejects a wrong model: alpha 0.05 data against the alpha 0.1 closed form,
    and tau=2 data against tau=3."""
    docs = LDATopicModel(10, 5, 0.05).sample(NUM_DOCS, DOC_LEN, seed=1)
    assert max(abs(x) for x in orbit_z(docs, LDATopicModel(10, 5, 0.1)).values()) > 10
    docs = SimplifiedTopicModel(10, 10, 2).sample(NUM_DOCS, DOC_LEN, seed=1)
    assert np.abs(cooccurrence_z(docs, SimplifiedTopicModel(10, 10, 3).expected_cooccurrence())).max() > 10


# ---- BERT masking ---------------------------------------------------------------------------


def _z_binomial(k: int, n: int, p: float) -> float:
    if p in (0.0, 1.0):
        return 0.0 if k == n * p else math.inf
    return (k - n * p) / math.sqrt(n * p * (1 - p))


@pytest.mark.parametrize(
    "p_m,p_c,p_r",
    [(0.15, 0.1, 0.1), (0.5, 0.3, 0.6), (1.0, 0.0, 0.0), (0.3, 0.0, 1.0), (0.3, 1.0, 0.0), (0.02, 0.25, 0.25)],
)
def test_bert_mask_rates(p_m, p_c, p_r):
    V = 13
    docs = SimplifiedTopicModel(13, 1, 3).sample(1000, 500, seed=4)            # 5e5 positions
    inputs, selected = bert_mask(docs, V, Masking(p_m, p_c, p_r), seed=9)
    n = docs.numel()
    n_sel = int(selected.sum())
    assert abs(_z_binomial(n_sel, n, p_m)) < 5
    sel_in, sel_doc = inputs[selected], docs[selected]
    n_mask = int((sel_in == V).sum())
    n_same = int((sel_in == sel_doc).sum())
    n_other = n_sel - n_mask - n_same
    # a random replacement equals the original word with probability 1/V
    assert abs(_z_binomial(n_mask, n_sel, 1 - p_c - p_r)) < 5
    assert abs(_z_binomial(n_same, n_sel, p_c + p_r / V)) < 5
    assert abs(_z_binomial(n_other, n_sel, p_r * (1 - 1 / V))) < 5
    # unselected positions are untouched
    assert torch.equal(inputs[~selected], docs[~selected])
    assert int(inputs.min()) >= 0 and int(inputs.max()) <= V


def test_bert_mask_no_selection():
    docs = SimplifiedTopicModel(4, 3, 2).sample(50, 40, seed=0)
    inputs, selected = bert_mask(docs, 12, Masking(mask_prob=0.0), seed=1)
    assert not selected.any()
    assert torch.equal(inputs, docs)


def test_bert_mask_output_types_and_docs_untouched():
    docs = SimplifiedTopicModel(4, 3, 2).sample(20, 30, seed=0)
    before = docs.clone()
    inputs, selected = bert_mask(docs, 12, seed=1)
    assert torch.equal(docs, before)
    assert inputs.dtype == torch.long and selected.dtype == torch.bool
    assert inputs.shape == selected.shape == docs.shape


def test_random_replacements_uniform_over_real_words():
    """With every position selected and replaced at random, inputs are uniform over the V words,
    whatever the document says, and never [MASK]."""
    V = 13
    docs = torch.zeros(200, 650, dtype=torch.long)                            # every word is 0
    inputs, selected = bert_mask(docs, V, Masking(mask_prob=1.0, keep_prob=0.0, random_prob=1.0), seed=3)
    assert selected.all()
    assert int(inputs.max()) < V
    counts = torch.bincount(inputs.flatten(), minlength=V).double().numpy()
    expected = inputs.numel() / V
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    df = V - 1
    assert chi2 < df + 6 * math.sqrt(2 * df), chi2
    # and the replaced words of a mixed corruption are uniform too (excluding the original word 0)
    inputs, selected = bert_mask(docs, V, Masking(mask_prob=0.5, keep_prob=0.2, random_prob=0.5), seed=4)
    replaced = inputs[selected & (inputs != 0) & (inputs != V)]
    counts = torch.bincount(replaced, minlength=V).double().numpy()[1:]
    expected = replaced.numel() / (V - 1)
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    df = V - 2
    assert chi2 < df + 6 * math.sqrt(2 * df), chi2


def test_bert_mask_selection_independent_of_word():
    """Selection rate is the same for every word (no word is favoured)."""
    V = 6
    docs = SimplifiedTopicModel(6, 1, 6).sample(1000, 300, seed=2)
    _, selected = bert_mask(docs, V, Masking(mask_prob=0.2), seed=5)
    for w in range(V):
        at_w = selected[docs == w]
        assert abs(_z_binomial(int(at_w.sum()), at_w.numel(), 0.2)) < 5


def test_bert_mask_reproducible_and_seed_dependent():
    docs = LDATopicModel(5, 4, 0.5).sample(100, 30, seed=0)
    a = bert_mask(docs, 20, seed=3)
    b = bert_mask(docs, 20, seed=3)
    c = bert_mask(docs, 20, seed=torch.Generator().manual_seed(3))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert torch.equal(a[0], c[0]) and torch.equal(a[1], c[1])
    d = bert_mask(docs, 20, seed=4)
    assert not torch.equal(a[1], d[1])


def test_bert_mask_accepts_docs_with_vocab_size_larger_than_used():
    docs = torch.tensor([[0, 1, 2]])
    inputs, selected = bert_mask(docs, 100, Masking(mask_prob=1.0, keep_prob=0.0, random_prob=0.0))
    assert torch.equal(inputs, torch.full((1, 3), 100))
    assert selected.all()


def test_check_docs_accepts_lists_and_int32():
    out = check_docs([[0, 1], [2, 3]], 4)
    assert out.dtype == torch.long and out.tolist() == [[0, 1], [2, 3]]
    out = check_docs(torch.tensor([[0, 3]], dtype=torch.int32), 4)
    assert out.dtype == torch.long


def test_check_topic_model_names_the_argument():
    model = SimplifiedTopicModel(3, 2, 2)
    assert check_topic_model(model) is model
    with pytest.raises(ValueError, match="data must be a TopicModel, got str"):
        check_topic_model("lda", "data")
