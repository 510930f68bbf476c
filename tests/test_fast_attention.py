"""Tests for the learned-attention fast path (topicmech.fast.selected_loss) and path choice in train().

The reference is the model's own forward pass and the general loss,
``mlm_loss(model(inputs, selected), targets, selected, kind)``: the fast path must give the
same loss and the same gradient for every trained matrix, in float64 to 1e-10, for every
switch combination the model allows and both key-visibility conventions.
"""

from __future__ import annotations

import itertools

import pytest
import torch

import topicmech as tm
from topicmech import fast
from topicmech.losses import mlm_loss
from topicmech.model import OneLayerTransformer, TwoLayerTransformer
from topicmech.train import train

LDA = tm.LDATopicModel(num_topics=4, words_per_topic=5, alpha=0.3)   # V = 20
D = LDA.num_tokens                                                      # 21


def configs():
    """Every (embedding, value, head) the model allows with learned attention; d = D when forced, else 8."""
    for emb, val, head in itertools.product(("one_hot", "learned"), ("identity", "learned"),
                                            ("identity", "tied", "learned")):
        yield dict(embedding=emb, value=val, head=head, d_model=D if emb == "one_hot" or head == "identity" else 8)
    yield dict(embedding="learned", value="learned", head="tied", d_model=D)     # learned, full width
    yield dict(embedding="learned", value="learned", head="learned", d_model=30)  # wider than D
    yield dict(embedding="learned", value="learned", head="tied", d_model=8, bias=True)   # trained logit bias


CONFIGS = list(configs())
IDS = ["{embedding}-{value}-{head}-d{d_model}".format(**c) + ("-bias" if c.get("bias") else "") for c in CONFIGS]


def model64(cfg: dict, attend_to_masked: bool, seed: int = 1) -> OneLayerTransformer:
    # init_scale 0.5: scores far from uniform, so the attention pattern matters
    return OneLayerTransformer(D, attention="learned", attend_to_masked=attend_to_masked, init_scale=0.5, seed=seed,
                               **cfg).double()


def batch(seed: int = 0, B: int = 12, N: int = 25, mask_prob: float = 0.3):
    docs = LDA.sample(B, N, seed=seed)
    inputs, selected = tm.bert_mask(docs, LDA.vocab_size, tm.Masking(mask_prob=mask_prob), seed=seed + 1)
    return docs, inputs, selected


def both(model, docs, inputs, selected, kind):
    """(reference loss, reference grads, fast loss, fast grads) over the trained tensors."""
    params = [p for p in model.parameters() if p.requires_grad]
    ref = mlm_loss(model(inputs, selected), docs, selected, kind)
    g_ref = torch.autograd.grad(ref, params)
    got = fast.selected_loss(model, inputs, docs, selected, kind)
    g_got = torch.autograd.grad(got, params)
    return ref, g_ref, got, g_got


# ---- same loss and gradients as the reference forward pass ----------------------------


@pytest.mark.parametrize("kind", ["cross_entropy", "squared"])
@pytest.mark.parametrize("attend_to_masked", [True, False])
@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_same_loss_and_gradients_as_reference(cfg, attend_to_masked, kind):
    model = model64(cfg, attend_to_masked)
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    assert {"W_K", "W_Q"} <= set(names)
    for seed in (0, 7):
        docs, inputs, selected = batch(seed)
        ref, g_ref, got, g_got = both(model, docs, inputs, selected, kind)
        torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-12)
        for name, a, b in zip(names, g_got, g_ref):
            assert float(b.abs().max()) > 0, name                  # every trained matrix gets a gradient
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12, msg=name)


@pytest.mark.parametrize("attend_to_masked", [True, False])
def test_frozen_matrices_and_float32(attend_to_masked):
    """Frozen matrices stay without a gradient; in float32 the paths agree to rounding."""
    model = OneLayerTransformer(D, embedding="learned", attention="learned", head="tied", d_model=8,
                                attend_to_masked=attend_to_masked, init_scale=0.5, seed=2).freeze("W_V")
    docs, inputs, selected = batch(3)
    ref, g_ref, got, g_got = both(model, docs, inputs, selected, "cross_entropy")
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)
    for a, b in zip(g_got, g_ref):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("attend_to_masked", [True, False])
def test_scores_come_from_the_token_space_matrix(attend_to_masked):
    """token_scores is A^T, and the reference's position scores are its entries."""
    model = model64(dict(embedding="learned", value="learned", head="tied", d_model=8), attend_to_masked)
    S = fast.token_scores(model)
    torch.testing.assert_close(S, model.key_query_matrix().T, rtol=1e-12, atol=1e-14)
    docs, inputs, selected = batch(4)
    scores = model.run_with_cache(inputs, selected)["attn.scores"]                # (B, query, key)
    want = S[inputs[:, :, None], inputs[:, None, :]]                              # (B, query, key)
    finite = torch.isfinite(scores)
    assert bool((~finite).any()) != attend_to_masked                                # hidden keys only when False
    torch.testing.assert_close(scores[finite], want[finite], rtol=1e-12, atol=1e-14)


# ---- edge cases -------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["cross_entropy", "squared"])
def test_nothing_selected_gives_zero_loss_and_zero_gradients(kind):
    model = model64(dict(embedding="one_hot", value="learned", head="learned", d_model=D), False)
    docs, inputs, _ = batch(5)
    selected = torch.zeros_like(inputs, dtype=torch.bool)
    ref, g_ref, got, g_got = both(model, docs, inputs, selected, kind)
    assert float(got.detach()) == float(ref.detach()) == 0.0
    for a, b in zip(g_got, g_ref):                                # zero tensors, not None: Adam sees the same
        assert torch.equal(a, b) and not a.any()


@pytest.mark.parametrize("kind", ["cross_entropy", "squared"])
def test_document_without_visible_keys(kind):
    """attend_to_masked=False and every position of a document selected: its queries see no
    key and output zero, as in the model."""
    model = model64(dict(embedding="learned", value="learned", head="learned", d_model=8), False)
    docs, inputs, selected = batch(6)
    selected[2] = True
    ref, g_ref, got, g_got = both(model, docs, inputs, selected, kind)
    torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-12)
    for a, b in zip(g_got, g_ref):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("attend_to_masked", [True, False])
def test_padding_is_invisible(attend_to_masked):
    """A padded batch gives the loss and gradients of its documents taken one at a time."""
    model = model64(dict(embedding="learned", value="learned", head="tied", d_model=8), attend_to_masked)
    params = [p for p in model.parameters() if p.requires_grad]
    rows = [LDA.sample(1, n, seed=i)[0] for i, n in enumerate([7, 30, 12, 2, 19])]
    padded, lengths = fast.pad_documents(rows, pad_id=3)
    inputs, selected = tm.bert_mask(padded, LDA.vocab_size, tm.Masking(mask_prob=0.4), seed=8)
    selected[:, 0] = True                                           # every document has a target
    valid = torch.arange(padded.shape[1])[None, :] < lengths[:, None]
    got = fast.selected_loss(model, inputs, padded, selected, "cross_entropy", valid=valid)
    g_got = torch.autograd.grad(got, params)
    total, count = 0.0, 0
    for b, row in enumerate(rows):
        L = len(row)
        k = int(selected[b, :L].sum())
        total = total + k * mlm_loss(model(inputs[b:b + 1, :L], selected[b:b + 1, :L]), row[None],
                                     selected[b:b + 1, :L], "cross_entropy")
        count += k
    want = total / count
    g_want = torch.autograd.grad(want, params)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    for a, b in zip(g_got, g_want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_selected_loss_rejects_bad_input():
    model = model64(dict(embedding="one_hot", value="learned", head="identity", d_model=D), True)
    docs, inputs, selected = batch(0)
    with pytest.raises(ValueError, match="kind"):
        fast.selected_loss(model, inputs, docs, selected, "hinge")
    with pytest.raises(ValueError, match="selected"):
        fast.selected_loss(model, inputs, docs, selected.long(), "squared")
    with pytest.raises(ValueError, match="targets"):
        fast.selected_loss(model, inputs, docs[:, :-1], selected, "squared")
    with pytest.raises(ValueError, match="inputs"):
        fast.selected_loss(model, inputs.double(), docs, selected, "squared")
    with pytest.raises(ValueError, match="valid"):
        fast.selected_loss(model, inputs, docs, selected, "squared", valid=selected[:, :-1])
    with pytest.raises(ValueError, match="model"):
        fast.selected_loss(TwoLayerTransformer(D, 8, seed=0, attend_to_masked=True), inputs, docs, selected, "squared")


# ---- the same training run on both paths ---------------------------------------------------


@pytest.mark.parametrize("cfg", [dict(embedding="one_hot", value="learned", head="identity", d_model=D),
                                 dict(embedding="learned", value="learned", head="tied", d_model=8)],
                         ids=["one_hot-identity", "learned-tied"])
@pytest.mark.parametrize("attend_to_masked", [True, False])
@pytest.mark.parametrize("loss,optimizer,lr", [("cross_entropy", "adam", 0.02), ("squared", "sgd", 0.5)])
def test_same_training_run_on_both_paths(cfg, attend_to_masked, loss, optimizer, lr):
    """Same documents, masks and optimiser: the loss curves and final weights agree (float64)."""
    docs = LDA.sample(64, 30, seed=5)
    m_ref, m_fast = model64(cfg, attend_to_masked, seed=3), model64(cfg, attend_to_masked, seed=3)
    probes = {"A": lambda m: m.key_query_matrix()}
    kw = dict(steps=40, batch_size=8, loss=loss, optimizer=optimizer, lr=lr, l2=1e-3, seed=4, probes=probes,
              probe_every=10)
    h_ref = train(m_ref, docs, path="reference", **kw)
    h_fast = train(m_fast, docs, **kw)                              # path="auto" takes the fast path
    assert h_ref.step == h_fast.step == list(range(1, 41))
    assert max(abs(a - b) for a, b in zip(h_ref.loss, h_fast.loss)) < 1e-10
    assert h_ref.loss[-1] < h_ref.loss[0]                           # it did train
    assert h_ref.probe_step == h_fast.probe_step == [0, 10, 20, 30, 40]
    torch.testing.assert_close(torch.tensor(h_fast.probe("A")), torch.tensor(h_ref.probe("A")), rtol=1e-8, atol=1e-10)
    for (n1, p1), (n2, p2) in zip(m_ref.named_parameters(), m_fast.named_parameters()):
        assert n1 == n2
        torch.testing.assert_close(p2, p1, rtol=1e-8, atol=1e-10, msg=n1)


def test_same_training_run_float32():
    """The default float32 model: the two paths agree to float rounding over 100 Adam steps."""
    docs = LDA.sample(64, 30, seed=5)
    kw = dict(steps=100, batch_size=8, loss="cross_entropy", optimizer="adam", lr=0.01, seed=3)
    m_ref = OneLayerTransformer(D, attention="learned", attend_to_masked=False, seed=1)
    m_fast = OneLayerTransformer(D, attention="learned", attend_to_masked=False, seed=1)
    h_ref = train(m_ref, docs, path="reference", **kw)
    h_fast = train(m_fast, docs, path="fast", **kw)
    assert max(abs(a - b) for a, b in zip(h_ref.loss, h_fast.loss)) < 1e-4
    for p1, p2 in zip(m_ref.parameters(), m_fast.parameters()):
        torch.testing.assert_close(p2, p1, rtol=1e-3, atol=1e-4)


def test_padded_training_on_the_learned_path():
    """lengths works on the learned path, and padding content never matters."""
    docs, lengths = fast.sample_variable_length(LDA, 50, 5, 20, seed=0)
    other = docs.clone()
    other[torch.arange(20)[None, :] >= lengths[:, None]] = 7
    kw = dict(steps=15, batch_size=8, lengths=lengths, loss="cross_entropy", optimizer="adam", seed=1)
    m1 = OneLayerTransformer(D, attention="learned", attend_to_masked=False, seed=0)
    m2 = OneLayerTransformer(D, attention="learned", attend_to_masked=False, seed=0)
    train(m1, docs, **kw)
    train(m2, other, **kw)
    for p1, p2 in zip(m1.parameters(), m2.parameters()):
        assert torch.equal(p1, p2)


# ---- which path train() takes -------------------------------------------------------------


def test_fast_path_choice():
    assert fast.fast_path(OneLayerTransformer(D, attend_to_masked=True)) == "uniform"
    assert fast.fast_path(OneLayerTransformer(D, attention="learned", attend_to_masked=True)) == "learned"
    assert fast.fast_path(TwoLayerTransformer(D, 8, seed=0, attend_to_masked=True)) is None

    class Custom(OneLayerTransformer):
        pass

    assert fast.fast_path(Custom(D, attention="learned", attend_to_masked=True)) is None     # a subclass may change forward
    hooked = OneLayerTransformer(D, attention="learned", attend_to_masked=True)
    hooked.register_forward_hook(lambda mod, args, out: None)
    assert fast.fast_path(hooked) is None                             # hooks must see the forward pass


def test_train_path_argument(monkeypatch):
    """path='reference' calls the model's forward pass; 'auto' does not for a one-layer model."""
    calls = []
    original = OneLayerTransformer.forward

    def counting(self, *args, **kwargs):
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(OneLayerTransformer, "forward", counting)
    kw = dict(steps=3, batch_size=4, doc_len=10, loss="cross_entropy", optimizer="adam", seed=0)
    train(OneLayerTransformer(D, attention="learned", attend_to_masked=True), LDA, path="reference", **kw)
    assert len(calls) == 3
    monkeypatch.setattr(OneLayerTransformer, "forward", original)
    # with forward unchanged, 'auto' never calls it (the fast path computes the loss itself)
    model = OneLayerTransformer(D, attention="learned", attend_to_masked=True)
    model.register_forward_pre_hook(lambda mod, args: calls.append(1))
    train(model, LDA, path="auto", **kw)                             # hooked: reference, calls forward
    assert len(calls) == 6
    with pytest.raises(ValueError, match="path"):
        train(TwoLayerTransformer(D, 8, seed=0, attend_to_masked=True), LDA, path="fast", **kw)
    with pytest.raises(ValueError, match="path"):
        train(OneLayerTransformer(D, attend_to_masked=True), LDA, path="quick", **kw)
    docs = LDA.sample(10, 8, seed=0)
    with pytest.raises(ValueError, match="lengths"):
        train(OneLayerTransformer(D, attention="learned", attend_to_masked=True), docs, steps=2, lengths=torch.full((10,), 8),
              path="reference")


def test_non_finite_loss_on_the_learned_path():
    model = OneLayerTransformer(D, attention="learned", init_scale=1.0, seed=0, attend_to_masked=True)
    with pytest.raises(FloatingPointError, match=r"at step \d+"):
        train(model, LDA, steps=200, batch_size=8, doc_len=10, lr=1e8, seed=0)
