"""Tests for the authors' Wikipedia metric in topicmech.pretrained (book chapter 8).

Word selection on a handmade topic model, ratios on handmade vectors with a known answer,
and the random-init control on a tiny BERT built in the test (no weights, no network).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

pytest.importorskip("gensim")
transformers = pytest.importorskip("transformers")

import topicmech.corpus as tc  # noqa: E402
import topicmech.pretrained as tp  # noqa: E402
import topicmech.word_pairs as tw  # noqa: E402


def _lda(tw: np.ndarray, words: list[str]) -> tc.FittedLDA:
    from gensim.corpora import Dictionary

    dictionary = Dictionary([words])
    order = [dictionary.token2id[w] for w in words]
    full = np.zeros_like(tw)
    full[:, order] = tw
    return tc.FittedLDA(SimpleNamespace(num_topics=tw.shape[0], get_topics=lambda: full), dictionary, "fake")


WORDS = ["apple", "pear", "plum", "car", "bus", "tram", "tree"]
# topic 0 = fruit, topic 1 = vehicles; "tree" is second-best for both topics
TW = np.array([[0.40, 0.25, 0.05, 0.0, 0.0, 0.0, 0.30],
               [0.0, 0.0, 0.0, 0.35, 0.28, 0.05, 0.32]])


def test_top_fraction_count():
    assert tc.top_fraction_count(0.0005, 5450) == 3
    assert tc.top_fraction_count(0.002, 5450) == 11
    assert tc.top_fraction_count(0.0005, 100) == 1          # never fewer than one word
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="fraction"):
            tc.top_fraction_count(bad, 100)
    with pytest.raises(ValueError, match="vocab_size"):
        tc.top_fraction_count(0.1, 0)


def test_top_topic_words_overlap_and_disjoint():
    lda = _lda(TW, WORDS)
    # 2 of 7 words per topic: fruit -> apple, tree; vehicles -> car, tree
    ov = tc.top_topic_words(lda, 2 / 7, overlap=True)
    assert ov.topics == {"apple": {0}, "tree": {0, 1}, "car": {1}}
    dis = tc.top_topic_words(lda, 2 / 7, overlap=False)
    assert dis.topics == {"apple": {0}, "car": {1}}            # the shared word is dropped
    assert dis.num_topics == 2
    one = tc.top_topic_words(lda, 1e-6)                        # at least one word per topic
    assert one.topics == {"apple": {0}, "car": {1}}
    three = tc.top_topic_words(lda, 3 / 7, overlap=False)
    assert set(three.words) == {"apple", "pear", "car", "bus"}
    only_shared = _lda(np.array([[0.5, 0.5], [0.5, 0.5]]), ["x", "y"])
    with pytest.raises(ValueError, match="no word left"):
        tc.top_topic_words(only_shared, 0.5, overlap=False)


def test_embedding_ratios_known_answer():
    # topic 0: (1, 1) and (1, 0); topic 1: (0, 2) and (0, 1)
    X = np.array([[1.0, 1.0], [1.0, 0.0], [0.0, 2.0], [0.0, 1.0]])
    M = np.array([[1, 0], [1, 0], [0, 1], [0, 1]], dtype=bool)
    r = tw.embedding_ratios(X, M)
    # dot: same pairs 1, 1, 2, 2 -> 1.5; different pairs (2 each way): 2, 1, 0, 0 -> 0.75
    assert r["dot_same"] == pytest.approx(1.5) and r["dot_diff"] == pytest.approx(0.75)
    assert r["dot_ratio"] == pytest.approx(2.0)
    c = 1 / np.sqrt(2)
    assert r["cosine_same"] == pytest.approx((c + 1) / 2)
    assert r["cosine_diff"] == pytest.approx(c / 2)
    assert r["cosine_ratio"] == pytest.approx((c + 1) / c)
    assert (r["num_same_pairs"], r["num_diff_pairs"]) == (4, 8)
    # overlapping topic sets go through the general path: a word in both topics is same-topic with all
    M2 = M.copy()
    M2[0, 1] = True
    r2 = tw.embedding_ratios(X, M2)
    same = [X[i] @ X[j] for i in range(4) for j in range(4) if i != j and (M2[i] & M2[j]).any()]
    assert r2["dot_same"] == pytest.approx(np.mean(same)) and r2["num_same_pairs"] == len(same)
    with pytest.raises(ValueError, match="zero norm"):
        tw.embedding_ratios(np.zeros((2, 2)), np.eye(2, dtype=bool))
    with pytest.raises(ValueError, match="same-topic and different-topic"):
        tw.embedding_ratios(np.eye(2), np.ones((2, 1), dtype=bool))
    with pytest.raises(ValueError, match="must agree"):
        tw.embedding_ratios(np.eye(3), np.ones((2, 1), dtype=bool))


def test_embedding_ratios_common_component_pulls_ratio_to_one():
    """Random vectors plus a large shared vector: every cosine is near the same value, ratio near 1."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 64)) + 8.0 * np.ones(64)
    M = np.eye(3, dtype=bool)[rng.integers(0, 3, size=60)]
    r = tw.embedding_ratios(X, M)
    assert abs(r["cosine_ratio"] - 1) < 0.01 and abs(r["dot_ratio"] - 1) < 0.01


def _tiny_config():
    from transformers import BertConfig

    return BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=32, max_position_embeddings=64)


def test_random_encoder_same_architecture_seeded(tmp_path):
    cfg = _tiny_config()
    a = tp.random_encoder(cfg, seed=3)
    b = tp.random_encoder(cfg, seed=3)
    c = tp.random_encoder(cfg, seed=4)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert sa.keys() == sb.keys() == sc.keys()
    assert all(sa[k].shape == sc[k].shape for k in sa)
    assert all(torch.equal(sa[k], sb[k]) for k in sa)                       # deterministic for a seed
    w = "embeddings.word_embeddings.weight"
    assert not torch.equal(sa[w], sc[w])                                    # another seed, other weights
    assert a.config.num_hidden_layers == 2 and not a.training
    # from a local folder (config only, no weights), offline
    cfg.save_pretrained(tmp_path)
    d = tp.random_encoder(tmp_path, seed=3)
    assert torch.equal(d.state_dict()[w], sa[w])
    out = d(input_ids=torch.tensor([[1, 2, 3]]), output_attentions=True)
    assert len(out.attentions) == 2 and out.attentions[0].shape == (1, 2, 3, 3)
    # the global torch random state is left alone
    torch.manual_seed(0)
    x = torch.rand(1)
    torch.manual_seed(0)
    tp.random_encoder(cfg, seed=9)
    assert torch.equal(torch.rand(1), x)
    with pytest.raises(ValueError, match="seed"):
        tp.random_encoder(cfg, seed=-1)
    with pytest.raises(FileNotFoundError):
        tp.random_encoder(tmp_path / "missing")


def test_random_encoder_moves_with_seed_offset(monkeypatch):
    cfg = _tiny_config()
    w = "embeddings.word_embeddings.weight"
    a = tp.random_encoder(cfg, seed=0).state_dict()[w]
    monkeypatch.setenv("TOPICMECH_SEED_OFFSET", "1000")
    b = tp.random_encoder(cfg, seed=0).state_dict()[w]
    monkeypatch.setenv("TOPICMECH_SEED_OFFSET", "0")
    c = tp.random_encoder(cfg, seed=1000).state_dict()[w]
    assert not torch.equal(a, b) and torch.equal(b, c)


class _TinyTokenizer:
    """Whitespace 'fast tokenizer' stand-in: one piece per word, [CLS]=1, [SEP]=2, [PAD]=0."""

    is_fast = True
    pad_token_id, unk_token_id = 0, 3

    def __init__(self, words):
        self.vocab = {w: i + 4 for i, w in enumerate(words)}

    def __call__(self, text, add_special_tokens=True, return_offsets_mapping=False, verbose=False):
        if isinstance(text, list):
            return {"input_ids": [[self.vocab.get(w, 3)] for w in text]}
        ids, offs, wids, pos = [], [], [], 0
        for k, w in enumerate(text.split()):
            s = text.index(w, pos)
            pos = s + len(w)
            ids.append(self.vocab.get(w, 3))
            offs.append((s, pos))
            wids.append(k)
        if add_special_tokens:
            ids, offs, wids = [1] + ids + [2], [(0, 0)] + offs + [(0, 0)], [None] + wids + [None]
        enc = {"input_ids": ids, "offset_mapping": offs}
        return _Enc(enc, wids)

    def convert_ids_to_tokens(self, ids):
        inv = {v: k for k, v in self.vocab.items()} | {0: "[PAD]", 1: "[CLS]", 2: "[SEP]", 3: "[UNK]"}
        return [inv[i] for i in ids]


class _Enc(dict):
    def __init__(self, d, wids):
        super().__init__(d)
        self._wids = wids

    def word_ids(self):
        return self._wids


class _UniformAttention(torch.nn.Module):
    def __init__(self, table):
        super().__init__()
        self.emb = torch.nn.Embedding.from_pretrained(torch.as_tensor(table, dtype=torch.float32))

    def get_input_embeddings(self):
        return self.emb

    def forward(self, input_ids, attention_mask, output_attentions=True):
        B, P = input_ids.shape
        m = attention_mask.double()
        pat = (m[:, None, None, :] / m.sum(1)[:, None, None, None]).expand(B, 2, P, P)
        return SimpleNamespace(attentions=tuple(pat.float() for _ in range(3)))


def test_authors_metric_on_stub_encoder():
    lda = _lda(TW, WORDS)
    tok = _TinyTokenizer(WORDS)
    table = np.zeros((4 + len(WORDS), 2))
    for w, v in {"apple": [1, 1], "pear": [1, 0], "car": [0, 2], "bus": [0, 1], "tree": [1, 1]}.items():
        table[tok.vocab[w]] = v
    table[:4] = 1.0
    corpus = tc.corpus_from_texts(["apple pear car bus tree apple", "bus car pear apple"], name="tiny")
    df = tp.authors_metric(_UniformAttention(table), tok, corpus, lda, fractions=(2 / 7, 3 / 7), max_pieces=16,
                           chunks_per_doc=None)
    assert len(df) == 4 and set(df.overlap) == {False, True}
    row = df[(~df.overlap) & (df.fraction == 3 / 7)].iloc[0]
    assert row.words == 4 and row.words_per_topic == 3 and row.single_piece_words == 4
    assert row.dot_ratio == pytest.approx(2.0)                              # the known answer above
    assert row.attention_ratio == pytest.approx(1.0)                        # uniform attention: ratio 1
    assert row.attention_pairs_same > 0 and row.attention_pairs_diff > 0
    with pytest.raises(ValueError, match="vectors"):
        tp.authors_metric(_UniformAttention(table), tok, corpus, lda, vectors="hidden")
    with pytest.raises(ValueError, match="embeddings"):
        tp.authors_metric(_UniformAttention(table), tok, corpus, lda, vectors="layer")


def test_authors_metric_random_tiny_bert_layer_vectors():
    """A tiny random BERT through the whole metric, with the embedding-layer vectors."""
    lda = _lda(TW, WORDS)
    tok = _TinyTokenizer(WORDS)
    cfg = _tiny_config()
    model = tp.random_encoder(cfg, seed=0)
    corpus = tc.corpus_from_texts(["apple pear car bus tree apple plum tram", "bus car pear apple tram plum"])
    df = tp.authors_metric(model, tok, corpus, lda, fractions=(3 / 7,), max_pieces=16, chunks_per_doc=None,
                           vectors="layer")
    assert len(df) == 2 and np.isfinite(df[["cosine_ratio", "dot_ratio", "attention_ratio"]].to_numpy()).all()
