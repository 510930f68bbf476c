"""Tests for topicmech.probes on handmade matrices and attention patterns with known answers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from topicmech import probes
from topicmech.data import SimplifiedTopicModel, bert_mask
from topicmech.model import OneLayerTransformer
from topicmech.probes import (
    AttentionByRelation,
    BlockMeans,
    attention_by_relation,
    block_means,
    relation_masks,
    topic_contrasts,
)

TOPIC = torch.tensor([0, 0, 1, 1])          # T = 2 topics of v = 2 words


def block_matrix(diag: float, same: float, diff: float) -> np.ndarray:
    same_topic = TOPIC.numpy()[:, None] == TOPIC.numpy()[None, :]
    M = np.where(same_topic, same, diff).astype(float)
    np.fill_diagonal(M, diag)
    return M


# ---- block_means ---------------------------------------------------------------------------


def test_block_means_constant_blocks():
    m = block_means(block_matrix(1.0, 2.0, 3.0), TOPIC)
    assert isinstance(m, BlockMeans)
    assert (m.diag, m.same_topic, m.diff_topic, m.mask_col) == (1.0, 2.0, 3.0, None)
    assert m.topic_gap == -1.0


def test_block_means_by_hand_on_a_non_constant_matrix():
    M = np.array([[1.0, 2.0, 10.0, 20.0],
                  [4.0, 3.0, 30.0, 40.0],
                  [50.0, 60.0, 5.0, 6.0],
                  [70.0, 80.0, 8.0, 7.0]])
    m = block_means(M, TOPIC)
    assert m.diag == pytest.approx((1 + 3 + 5 + 7) / 4)
    assert m.same_topic == pytest.approx((2 + 4 + 6 + 8) / 4)
    assert m.diff_topic == pytest.approx((10 + 20 + 30 + 40 + 50 + 60 + 70 + 80) / 8)
    # tensors give the same answer as arrays
    assert block_means(torch.tensor(M), TOPIC) == m
    assert block_means(torch.tensor(M, dtype=torch.float32), TOPIC.numpy()) == m


def test_block_means_with_mask_column():
    M = np.zeros((5, 5))
    M[:4, :4] = block_matrix(1.0, 2.0, 3.0)
    M[:4, 4] = [4.0, 5.0, 6.0, 7.0]          # the [MASK] column over word rows
    M[4, 4] = 100.0                           # [MASK] row: ignored
    M[4, :4] = -50.0
    m = block_means(M, TOPIC)
    assert (m.diag, m.same_topic, m.diff_topic) == (1.0, 2.0, 3.0)
    assert m.mask_col == pytest.approx(5.5)


def test_block_means_against_loops_on_a_random_matrix():
    rng = np.random.default_rng(0)
    topic = np.array([2, 0, 1, 0, 2, 2, 1])       # unsorted labels work too
    M = rng.normal(size=(8, 8))
    groups = {"diag": [], "same": [], "diff": []}
    for a in range(7):
        for b in range(7):
            key = "diag" if a == b else ("same" if topic[a] == topic[b] else "diff")
            groups[key].append(M[a, b])
    m = block_means(M, topic)
    assert m.diag == pytest.approx(np.mean(groups["diag"]))
    assert m.same_topic == pytest.approx(np.mean(groups["same"]))
    assert m.diff_topic == pytest.approx(np.mean(groups["diff"]))
    assert m.mask_col == pytest.approx(M[:7, 7].mean())


def test_block_means_empty_relations_give_nan():
    one_word_topics = torch.arange(3)                     # v = 1: no same-topic pairs
    m = block_means(np.arange(9.0).reshape(3, 3), one_word_topics)
    assert math.isnan(m.same_topic)
    assert m.diag == pytest.approx(4.0) and m.diff_topic == pytest.approx(4.0)
    one_topic = torch.zeros(3, dtype=torch.long)          # T = 1: no different-topic pairs
    m = block_means(np.arange(9.0).reshape(3, 3), one_topic)
    assert math.isnan(m.diff_topic) and not math.isnan(m.same_topic)


def test_relation_masks_partition_the_pairs():
    same, topic, diff = relation_masks(torch.tensor([0, 1, 0, 2, 1]))
    total = same.astype(int) + topic.astype(int) + diff.astype(int)
    assert np.all(total == 1)
    assert np.array_equal(same, np.eye(5, dtype=bool))
    assert topic[0, 2] and topic[1, 4] and not topic[0, 1] and diff[0, 1]


def test_topic_contrasts():
    c = topic_contrasts(block_matrix(5.0, 2.0, 0.5), TOPIC)
    assert c == {"same_word": pytest.approx(4.5), "same_topic": pytest.approx(1.5)}


# ---- attention_by_relation -------------------------------------------------------------------


def test_attention_by_relation_on_a_handmade_pattern():
    # tokens: w0 (topic 0), w0, w1 (topic 0), w2 (topic 1), [MASK] (id 4)
    inputs = torch.tensor([[0, 0, 1, 2, 4]])
    N = 5
    pattern = torch.softmax(torch.arange(25.0).reshape(1, N, N).sin() * 3, dim=-1)
    P = pattern[0]
    self_pairs = [(0, 0), (1, 1), (2, 2), (3, 3)]
    same_word = [(0, 1), (1, 0)]
    same_topic = [(0, 2), (2, 0), (1, 2), (2, 1)]
    diff_topic = [(0, 3), (3, 0), (1, 3), (3, 1), (2, 3), (3, 2)]
    r = attention_by_relation(pattern, inputs, TOPIC)
    assert isinstance(r, AttentionByRelation)
    for got, pairs in zip(r, (self_pairs, same_word, same_topic, diff_topic)):
        expected = N * float(np.mean([float(P[q, k]) for q, k in pairs]))
        assert got == pytest.approx(expected, rel=1e-6)
    assert r.topic_ratio == pytest.approx(r.same_topic / r.diff_topic)


def test_relation_reader_reads_many_patterns_on_one_batch():
    tm = SimplifiedTopicModel(3, 3, 2)
    inputs, _ = bert_mask(tm.sample(6, 10, seed=0), tm.vocab_size, seed=1)
    read = probes.relation_reader(inputs, tm.topic_of_word)
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):
        pattern = torch.softmax(torch.randn(6, 10, 10, generator=gen), dim=-1)
        pairs, same_word, same_topic = probes.pair_relations(pattern, inputs, tm.topic_of_word)
        eye = torch.eye(10, dtype=torch.bool)
        direct = [10 * float(pattern[m].double().mean()) for m in (pairs & eye, pairs & same_word & ~eye,
                                                                   pairs & same_topic & ~same_word, pairs & ~same_topic)]
        assert list(read(pattern)) == pytest.approx(direct, rel=1e-12)
    pattern[inputs == tm.mask_id] = math.nan                      # rows of [MASK] queries enter no relation
    assert not any(math.isnan(x) for x in read(pattern))
    pattern[0, 0, 0] = math.nan
    r = read(pattern)
    assert math.isnan(r.self_) == bool(inputs[0, 0] < tm.vocab_size) and not math.isnan(r.diff_topic)
    with pytest.raises(ValueError, match="pattern must have shape"):
        read(pattern[:, :5])


def test_attention_by_relation_missing_relation_is_nan():
    inputs = torch.tensor([[0, 2, 3]])                    # no repeated word
    r = attention_by_relation(torch.full((1, 3, 3), 1 / 3), inputs, TOPIC)
    assert math.isnan(r.same_word)
    assert r.same_topic == pytest.approx(1.0) and r.diff_topic == pytest.approx(1.0)


def test_uniform_pattern_gives_one_in_every_relation():
    tm = SimplifiedTopicModel(3, 3, 2)
    docs = tm.sample(20, 12, seed=0)
    inputs, selected = bert_mask(docs, tm.vocab_size, seed=1)
    model = OneLayerTransformer(tm.num_tokens, attend_to_masked=True)
    pattern = model.attention_pattern(inputs, selected)
    r = attention_by_relation(pattern, inputs, tm.topic_of_word)
    for value in r:
        assert value == pytest.approx(1.0, rel=1e-6)
    assert r.topic_ratio == pytest.approx(1.0, rel=1e-6)


def test_masked_means_and_pair_relations():
    pattern = torch.arange(8.0).reshape(2, 2, 2)
    masks = [pattern > 3, pattern > 100, torch.ones(2, 2, 2, dtype=torch.bool)]
    means = probes.masked_means(pattern, masks)
    assert means[0] == 5.5 and math.isnan(means[1]) and means[2] == 3.5
    pattern[0, 0, 0] = math.nan                                  # in the third mask only
    means = probes.masked_means(pattern, masks)
    assert means[0] == 5.5 and math.isnan(means[1]) and math.isnan(means[2])
    inputs = torch.tensor([[0, 1, 4]])                   # V = 4 words, id 4 is [MASK]
    pairs, same_word, same_topic = probes.pair_relations(torch.zeros(1, 3, 3), inputs, torch.tensor([0, 0, 1, 1]))
    assert pairs[0].tolist() == [[True, True, False], [True, True, False], [False, False, False]]
    assert same_topic[0, 0, 1] and not same_word[0, 0, 1]
