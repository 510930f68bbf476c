"""Property-based tests (hypothesis) for the samplers, masking, block means and the uniform fast path.

Examples are derandomised (the same examples on every run, so CI cannot flake), no
example database is written, and ``max_examples`` keeps the file well under 30 s.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from topicmech.data import LDATopicModel, SimplifiedTopicModel, bert_mask
from topicmech.model import OneLayerTransformer
from topicmech.probes import block_means
from topicmech.setting import Masking

FAST = settings(max_examples=40, deadline=None, database=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])
SEEDS = st.integers(0, 2**32 - 1)


@st.composite
def simplified_models(draw):
    T = draw(st.integers(1, 8))
    v = draw(st.integers(1, 6))
    tau = draw(st.integers(1, T))
    return SimplifiedTopicModel(T, v, tau)


@st.composite
def lda_models(draw):
    T = draw(st.integers(1, 8))
    v = draw(st.integers(1, 6))
    alpha = 10 ** draw(st.floats(-4, 1.5))
    return LDATopicModel(T, v, alpha)


@st.composite
def masking_probs(draw):
    p_m = draw(st.sampled_from([0.0, 1.0]) | st.floats(0, 1))
    p_c = draw(st.sampled_from([0.0, 1.0]) | st.floats(0, 1))
    p_r = draw(st.sampled_from([0.0]) | st.floats(0, 1 - p_c))
    return p_m, p_c, p_r


# ---- samplers ------------------------------------------------------------------------------------


def check_documents(tm, docs, topics, num_docs, doc_len):
    assert docs.shape == topics.shape == (num_docs, doc_len)
    assert docs.dtype == topics.dtype == torch.long
    assert int(docs.min()) >= 0 and int(docs.max()) < tm.vocab_size
    assert torch.equal(tm.topic_of_word[docs], topics)          # each token's word lies in its topic


@FAST
@given(simplified_models(), st.integers(1, 20), st.integers(1, 30), SEEDS)
def test_simplified_sampler_properties(tm, num_docs, doc_len, seed):
    docs, topics = tm.sample(num_docs, doc_len, seed=seed, return_topics=True)
    check_documents(tm, docs, topics, num_docs, doc_len)
    for row in topics.tolist():
        assert len(set(row)) <= tm.topics_per_doc              # at most tau topics per document
    assert torch.equal(tm.sample(num_docs, doc_len, seed=seed), docs)
    theta = tm.sample_topic_weights(num_docs, torch.Generator().manual_seed(seed))
    assert theta.shape == (num_docs, tm.num_topics)
    assert torch.all((theta == 0) | (theta == 1 / tm.topics_per_doc))
    assert torch.all((theta > 0).sum(1) == tm.topics_per_doc)


@FAST
@given(lda_models(), st.integers(1, 20), st.integers(1, 30), SEEDS)
def test_lda_sampler_properties(tm, num_docs, doc_len, seed):
    docs, topics = tm.sample(num_docs, doc_len, seed=seed, return_topics=True)
    check_documents(tm, docs, topics, num_docs, doc_len)
    assert torch.equal(tm.sample(num_docs, doc_len, seed=seed), docs)
    theta = tm.sample_topic_weights(num_docs, torch.Generator().manual_seed(seed))
    assert theta.shape == (num_docs, tm.num_topics)
    assert torch.isfinite(theta).all() and torch.all(theta >= 0)
    torch.testing.assert_close(theta.sum(1), torch.ones(num_docs))


@FAST
@given(st.one_of(simplified_models(), lda_models()))
def test_expected_cooccurrence_properties(tm):
    P = tm.expected_cooccurrence()
    V = tm.vocab_size
    assert P.shape == (V, V) and np.all(P >= 0)
    assert P.sum() == np.float64(1.0) or math.isclose(P.sum(), 1.0, rel_tol=1e-12)
    np.testing.assert_allclose(P, P.T, rtol=0, atol=0)
    np.testing.assert_allclose(P.sum(1), np.full(V, 1 / V), rtol=1e-12)
    # the same-word probability is at least the same-topic one (topics are uniform over words)
    if tm.words_per_topic > 1:
        assert P[0, 0] == P[0, 1]
    if tm.num_topics > 1:
        assert P[0, 0] >= P[0, tm.words_per_topic] - 1e-15


# ---- masking ----------------------------------------------------------------------------------------


@FAST
@given(st.integers(1, 30), masking_probs(), SEEDS, st.integers(1, 30), st.integers(1, 40))
def test_bert_mask_properties(V, probs, seed, num_docs, doc_len):
    p_m, p_c, p_r = probs
    docs = torch.randint(V, (num_docs, doc_len), generator=torch.Generator().manual_seed(seed))
    inputs, selected = bert_mask(docs, V, Masking(p_m, p_c, p_r), seed=seed)
    assert inputs.shape == selected.shape == docs.shape
    assert inputs.dtype == torch.long and selected.dtype == torch.bool
    assert int(inputs.min()) >= 0 and int(inputs.max()) <= V
    assert torch.equal(inputs[~selected], docs[~selected])    # unselected positions unchanged
    if p_m == 0:
        assert not selected.any()
    if p_m == 1:
        assert selected.all()
    if p_c + p_r == 0:
        assert torch.all(inputs[selected] == V)               # every selected position shows [MASK]
    if p_c == 1:
        assert torch.equal(inputs, docs)
    if p_r == 0:
        assert torch.all((inputs[selected] == V) | (inputs[selected] == docs[selected]))
    if p_c + p_r == 1 and p_r == 0:
        assert not torch.any(inputs == V)
    reproduced = bert_mask(docs, V, Masking(p_m, p_c, p_r), seed=seed)
    assert torch.equal(reproduced[0], inputs) and torch.equal(reproduced[1], selected)


@FAST
@given(st.integers(2, 30), masking_probs(), SEEDS)
def test_bert_mask_rates_roughly(V, probs, seed):
    """On 40 000 positions the selected share and the [MASK] share are within 5 sigma."""
    p_m, p_c, p_r = probs
    docs = torch.randint(V, (200, 200), generator=torch.Generator().manual_seed(seed))
    inputs, selected = bert_mask(docs, V, Masking(p_m, p_c, p_r), seed=seed)
    n = docs.numel()
    n_sel = int(selected.sum())
    assert abs(n_sel - n * p_m) <= 5 * math.sqrt(n * p_m * (1 - p_m)) + 1e-9
    if n_sel >= 100:
        p_mask = max(0.0, 1 - p_c - p_r)
        n_mask = int((inputs[selected] == V).sum())
        assert abs(n_mask - n_sel * p_mask) <= 5 * math.sqrt(n_sel * p_mask * (1 - p_mask)) + 1e-6 * n_sel + 1


# ---- block means ------------------------------------------------------------------------------------


@st.composite
def matrices_and_symmetries(draw):
    T = draw(st.integers(1, 5))
    v = draw(st.integers(1, 5))
    with_mask = draw(st.booleans())
    seed = draw(SEEDS)
    rng = np.random.default_rng(seed)
    V = T * v
    M = rng.normal(size=(V + with_mask, V + with_mask))
    # a symmetry of the topic model: permute the topics, then the words inside each topic
    topic_perm = rng.permutation(T)
    perm = np.concatenate([t * v + rng.permutation(v) for t in topic_perm])
    if with_mask:
        perm = np.append(perm, V)                             # [MASK] stays last
    return T, v, M, perm


@FAST
@given(matrices_and_symmetries())
def test_block_means_invariant_under_topic_symmetries(case):
    T, v, M, perm = case
    topic = torch.arange(T * v) // v
    before = block_means(M, topic)
    after = block_means(M[np.ix_(perm, perm)], topic)
    for x, y in zip(before, after):
        if x is None:
            assert y is None
        elif math.isnan(x):
            assert math.isnan(y)
        else:
            assert math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12)


@FAST
@given(st.integers(1, 5), st.integers(1, 5), st.floats(-5, 5), st.floats(-5, 5), st.floats(-5, 5))
def test_block_means_recovers_block_constants(T, v, a, b, c):
    topic = np.arange(T * v) // v
    same = topic[:, None] == topic[None, :]
    M = np.where(same, b, c)
    np.fill_diagonal(M, a)
    m = block_means(M, topic)
    assert math.isclose(m.diag, a, rel_tol=1e-12, abs_tol=1e-12)
    assert (math.isnan(m.same_topic) if v == 1 else math.isclose(m.same_topic, b, abs_tol=1e-12))
    assert (math.isnan(m.diff_topic) if T == 1 else math.isclose(m.diff_topic, c, abs_tol=1e-12))


# ---- the uniform fast path -------------------------------------------------------------------------


@FAST
@given(st.integers(2, 12), st.integers(1, 5), st.integers(1, 12), st.booleans(), st.booleans(), SEEDS)
def test_uniform_fast_path_equals_attention(D, B, N, attend_to_masked, learned_embedding, seed):
    g = torch.Generator().manual_seed(seed)
    inputs = torch.randint(D, (B, N), generator=g)
    selected = torch.rand(B, N, generator=g) < 0.5
    kwargs = dict(embedding="learned", head="tied", d_model=3) if learned_embedding else {}
    model = OneLayerTransformer(D, attend_to_masked=attend_to_masked, init_scale=1.0, seed=seed % 1000,
                                **kwargs).double()
    torch.testing.assert_close(model(inputs, selected), model.run_with_cache(inputs, selected)["logits"],
                               rtol=0, atol=1e-12)
