"""Tests for topicmech.model: switches, the uniform fast path, key visibility, named matrices."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from topicmech.data import SimplifiedTopicModel, bert_mask
from topicmech.model import OneLayerTransformer, TwoLayerTransformer, key_visibility
from topicmech.setting import Masking

V = 8           # real words: 4 topics of 2 words
D = V + 1       # plus [MASK]
TM = SimplifiedTopicModel(4, 2, 2)


def batch(num_docs: int = 3, doc_len: int = 7, seed: int = 0, mask_prob: float = 0.4):
    """(docs, inputs, selected) with some selected positions in every document."""
    docs = TM.sample(num_docs, doc_len, seed=seed)
    inputs, selected = bert_mask(docs, V, Masking(mask_prob=mask_prob, keep_prob=0.2, random_prob=0.2), seed=seed + 1)
    selected[:, 0] = True            # at least one selected and one unselected position per document
    selected[:, 1] = False
    return docs, inputs, selected


def all_configs():
    """Every switch combination, with a valid d_model (D when forced, 5 otherwise)."""
    for emb, att, val, head, atm in itertools.product(
        ("one_hot", "learned"), ("uniform", "learned"), ("identity", "learned"), ("identity", "tied", "learned"),
        (True, False),
    ):
        d = D if (emb == "one_hot" or head == "identity") else 5
        yield dict(embedding=emb, attention=att, value=val, head=head, attend_to_masked=atm, d_model=d)


CONFIGS = list(all_configs())
CONFIG_IDS = ["-".join(str(c[k]) for k in ("embedding", "attention", "value", "head", "attend_to_masked"))
              for c in CONFIGS]


# ---- construction and forward for every switch combination -----------------------------


@pytest.mark.parametrize("cfg", CONFIGS, ids=CONFIG_IDS)
def test_every_switch_combination_constructs_and_runs(cfg):
    model = OneLayerTransformer(D, init_scale=0.5, seed=1, **cfg)
    d = cfg["d_model"]
    _, inputs, selected = batch()
    logits = model(inputs, selected)
    assert logits.shape == (3, 7, D)
    assert torch.isfinite(logits).all()
    cache = model.run_with_cache(inputs, selected)
    assert set(cache) == {"embed", "attn.scores", "attn.pattern", "attn.out", "logits"}
    assert cache["embed"].shape == (3, 7, d)
    assert cache["attn.scores"].shape == cache["attn.pattern"].shape == (3, 7, 7)
    assert cache["attn.out"].shape == (3, 7, d)
    torch.testing.assert_close(cache["attn.pattern"].sum(-1), torch.ones(3, 7))
    torch.testing.assert_close(cache["logits"], logits)
    # matrices have their documented shapes
    assert model.W_E.shape == (d, D)
    assert model.W_K.shape == model.W_Q.shape == model.W_V.shape == (d, d)
    assert model.unembedding.shape == (D, d)
    assert model.key_query_matrix().shape == model.value_matrix().shape == model.embedding_gram().shape == (D, D)
    # exactly the learned matrices are parameters, and every one of them gets a finite gradient
    expected = set()
    if cfg["embedding"] == "learned":
        expected.add("W_E")
    if cfg["attention"] == "learned":
        expected |= {"W_K", "W_Q"}
    if cfg["value"] == "learned":
        expected.add("W_V")
    if cfg["head"] == "learned":
        expected.add("W_U")
    params = dict(model.named_parameters())
    assert set(params) == expected
    if params:
        (logits**2).sum().backward()
        for name, p in params.items():
            assert p.grad is not None and torch.isfinite(p.grad).all(), name
            if name not in ("W_K", "W_Q"):      # attention gradients are 0 at W_K = W_Q = 0 only
                assert p.grad.abs().sum() > 0, name


def test_fixed_matrices_have_their_values():
    model = OneLayerTransformer(D, embedding="one_hot", attention="uniform", value="identity", head="identity", attend_to_masked=True)
    assert torch.equal(model.W_E, torch.eye(D))
    assert torch.equal(model.W_K, torch.zeros(D, D)) and torch.equal(model.W_Q, torch.zeros(D, D))
    assert torch.equal(model.W_V, torch.eye(D))
    assert torch.equal(model.unembedding, torch.eye(D))
    assert list(model.parameters()) == []


def test_d_model_defaults_and_constraints():
    assert OneLayerTransformer(D, attend_to_masked=True).d_model == D
    assert OneLayerTransformer(D, 3, embedding="learned", head="tied", attend_to_masked=True).d_model == 3
    with pytest.raises(ValueError, match="d_model"):
        OneLayerTransformer(D, 3, embedding="one_hot", head="learned", attend_to_masked=True)
    with pytest.raises(ValueError, match="d_model"):
        OneLayerTransformer(D, 3, embedding="learned", head="identity", attend_to_masked=True)


def test_initialisation_is_seeded_and_scaled():
    a = OneLayerTransformer(D, embedding="learned", attention="learned", head="learned", d_model=6, seed=3, attend_to_masked=True)
    b = OneLayerTransformer(D, embedding="learned", attention="learned", head="learned", d_model=6, seed=3, attend_to_masked=True)
    c = OneLayerTransformer(D, embedding="learned", attention="learned", head="learned", d_model=6, seed=4, attend_to_masked=True)
    for name, p in a.named_parameters():
        assert torch.equal(p, dict(b.named_parameters())[name])
        assert not torch.equal(p, dict(c.named_parameters())[name])
    big = OneLayerTransformer(D, value="learned", init_scale=1.0, seed=0, attend_to_masked=True)
    small = OneLayerTransformer(D, value="learned", init_scale=1e-3, seed=0, attend_to_masked=True)
    torch.testing.assert_close(small.W_V, 1e-3 * big.W_V)
    zero = OneLayerTransformer(D, value="learned", init_scale=0.0, attend_to_masked=True)
    assert torch.equal(zero.W_V, torch.zeros(D, D))


# ---- uniform fast path ----------------------------------------------------------------------


@pytest.mark.parametrize("attend_to_masked", [True, False])
@pytest.mark.parametrize("with_selected", [True, False])
@pytest.mark.parametrize("embedding,head", [("one_hot", "identity"), ("one_hot", "learned"), ("learned", "tied"),
                                            ("learned", "learned")])
def test_uniform_fast_path_equals_run_with_cache(attend_to_masked, with_selected, embedding, head):
    d = D if embedding == "one_hot" else 4
    model = OneLayerTransformer(D, d, embedding=embedding, head=head, attend_to_masked=attend_to_masked,
                                init_scale=0.7, seed=2).double()
    _, inputs, selected = batch(num_docs=5, doc_len=9)
    selected[4] = True                                   # one document with every position selected
    sel = selected if with_selected else None
    fast = model(inputs, sel)
    slow = model.run_with_cache(inputs, sel)["logits"]
    assert fast.dtype == slow.dtype == torch.float64
    torch.testing.assert_close(fast, slow, rtol=0, atol=1e-12)
    # and in float32, to float32 precision
    model32 = model.float()
    torch.testing.assert_close(model32(inputs, sel), model32.run_with_cache(inputs, sel)["logits"])


def test_uniform_fast_path_matches_a_hand_computed_average():
    model = OneLayerTransformer(D, init_scale=1.0, seed=0, attend_to_masked=False)
    inputs = torch.tensor([[0, 0, 3, V]])
    selected = torch.tensor([[False, False, True, True]])
    # visible keys: positions 0 and 1 (both word 0), so xbar = e_0
    expected = model.W_V[:, 0]
    torch.testing.assert_close(model(inputs, selected)[0], expected.expand(4, D))
    model.attend_to_masked = True
    # all four visible: xbar = (2 e_0 + e_3 + e_V) / 4
    expected = (2 * model.W_V[:, 0] + model.W_V[:, 3] + model.W_V[:, V]) / 4
    torch.testing.assert_close(model(inputs, selected)[0], expected.expand(4, D))


# ---- key visibility -----------------------------------------------------------------------------


def test_hidden_selected_positions_receive_no_attention():
    model = OneLayerTransformer(D, attention="learned", attend_to_masked=False, init_scale=1.0, seed=5)
    _, inputs, selected = batch(num_docs=6, doc_len=10)
    pattern = model.attention_pattern(inputs, selected)                    # (B, query, key)
    hidden = selected[:, None, :].expand_as(pattern)
    assert torch.all(pattern[hidden] == 0)
    assert torch.all(pattern[~hidden] > 0)
    torch.testing.assert_close(pattern.sum(-1), torch.ones(6, 10))
    scores = model.run_with_cache(inputs, selected)["attn.scores"]
    assert torch.all(scores[hidden] == float("-inf"))
    assert torch.isfinite(scores[~hidden]).all()


def test_hidden_tokens_only_influence_their_own_query():
    """With attend_to_masked=False a selected token is no key or value: changing it changes the
    logits only at its own position (through its query), and with uniform attention nowhere."""
    learned = OneLayerTransformer(D, attention="learned", attend_to_masked=False, init_scale=1.0, seed=5)
    uniform = OneLayerTransformer(D, attend_to_masked=False, init_scale=1.0, seed=5)
    _, inputs, selected = batch(num_docs=1, doc_len=8)
    i = int(selected[0].nonzero()[0])
    changed = inputs.clone()
    changed[0, i] = (inputs[0, i] + 1) % D
    diff = (learned(changed, selected) - learned(inputs, selected)).abs().sum(-1)[0]   # (N,)
    assert diff[i] > 0
    assert torch.all(diff[torch.arange(8) != i] == 0)
    assert torch.equal(uniform(changed, selected), uniform(inputs, selected))
    # an unselected token is a key: changing it changes every position's logits
    j = int((~selected[0]).nonzero()[0])
    changed = inputs.clone()
    changed[0, j] = (inputs[0, j] + 1) % V
    assert torch.all((uniform(changed, selected) - uniform(inputs, selected)).abs().sum(-1) > 0)


def test_visible_masked_positions_uniform_weight_and_self_information():
    uniform = OneLayerTransformer(D, attend_to_masked=True, init_scale=1.0, seed=5)
    _, inputs, selected = batch(num_docs=4, doc_len=10)
    pattern = uniform.attention_pattern(inputs, selected)
    torch.testing.assert_close(pattern, torch.full((4, 10, 10), 1 / 10), rtol=0, atol=1e-7)
    # a kept masked token can see itself: its own token changes its own logits
    learned = OneLayerTransformer(D, attention="learned", attend_to_masked=True, init_scale=1.0, seed=5)
    docs = torch.tensor([[0, 1, 2, 3, 4, 5]])
    selected = torch.tensor([[True, False, False, False, False, False]])  # position 0 selected, word kept
    pattern = learned.attention_pattern(docs, selected)
    assert pattern[0, 0, 0] > 0
    other = docs.clone()
    other[0, 0] = 6
    for model in (uniform, learned):
        assert not torch.allclose(model(other, selected)[0, 0], model(docs, selected)[0, 0])


@pytest.mark.parametrize("attention", ["uniform", "learned"])
@pytest.mark.parametrize("embedding,head,d", [("one_hot", "identity", D), ("learned", "tied", 4)])
def test_fully_selected_document_gives_zero_output(attention, embedding, head, d):
    model = OneLayerTransformer(D, d, embedding=embedding, attention=attention, head=head, value="learned",
                                attend_to_masked=False, init_scale=1.0, seed=0)
    _, inputs, selected = batch(num_docs=3, doc_len=6)
    selected[1] = True                                                    # document 1: nothing visible
    logits = model(inputs, selected)
    assert torch.isfinite(logits).all()
    assert torch.equal(logits[1], torch.zeros(6, D))
    assert logits[0].abs().sum() > 0
    cache = model.run_with_cache(inputs, selected)
    assert torch.equal(cache["attn.pattern"][1], torch.zeros(6, 6))
    assert torch.equal(cache["logits"][1], torch.zeros(6, D))
    (logits**2).sum().backward()
    for name, p in model.named_parameters():
        assert torch.isfinite(p.grad).all(), name


def test_key_visibility_function():
    selected = torch.tensor([[True, False], [False, False]])
    assert torch.equal(key_visibility(selected, selected.shape, attend_to_masked=False), ~selected)
    assert key_visibility(selected, selected.shape, attend_to_masked=True).all()
    vis = key_visibility(None, torch.Size([2, 3]), attend_to_masked=False)
    assert vis.shape == (2, 3) and vis.dtype == torch.bool and vis.all()


def test_integer_selected_is_refused():
    """Regression: an int 0/1 mask was read as ~1 = -2 by the fast path and gave wrong logits silently."""
    model = OneLayerTransformer(D, attend_to_masked=False, init_scale=1.0)
    inputs = torch.tensor([[0, 1, 2, 3]])
    with pytest.raises(ValueError, match="selected"):
        model(inputs, torch.tensor([[1, 0, 0, 0]]))
    with pytest.raises(ValueError, match="selected"):
        model(inputs, torch.tensor([[True, False, False, False, True]]))


# ---- named matrices -------------------------------------------------------------------------------


@pytest.mark.parametrize("embedding,d", [("one_hot", D), ("learned", 5)])
@pytest.mark.parametrize("attend_to_masked", [True, False])
def test_key_query_matrix_reproduces_scores(embedding, d, attend_to_masked):
    model = OneLayerTransformer(D, d, embedding=embedding, attention="learned", head="learned",
                                attend_to_masked=attend_to_masked, init_scale=0.8, seed=7).double()
    _, inputs, selected = batch(num_docs=4, doc_len=9)
    scores = model.run_with_cache(inputs, selected)["attn.scores"]       # (B, query, key)
    A = model.key_query_matrix()                                          # A[key token, query token]
    expected = A[inputs[:, None, :], inputs[:, :, None]]                  # s[b, i, k] = A[x_k, x_i]
    if not attend_to_masked:
        expected = expected.masked_fill(selected[:, None, :], float("-inf"))
    torch.testing.assert_close(scores, expected, rtol=1e-12, atol=1e-12)
    # and the closed form itself
    torch.testing.assert_close(A, model.W_E.T @ model.W_K.T @ model.W_Q @ model.W_E / math.sqrt(d))


def test_value_matrix_one_hot_identity_head_is_W_V():
    model = OneLayerTransformer(D, value="learned", head="identity", init_scale=1.0, seed=0, attend_to_masked=True)
    assert torch.equal(model.value_matrix(), model.W_V)
    model = OneLayerTransformer(D, value="identity", head="identity", attend_to_masked=True)
    assert torch.equal(model.value_matrix(), torch.eye(D))


def test_tied_head_uses_embedding_transpose():
    model = OneLayerTransformer(D, 4, embedding="learned", attention="learned", head="tied", init_scale=0.9,
                                seed=1, attend_to_masked=True).double()
    assert torch.equal(model.unembedding, model.W_E.T)
    assert not hasattr(model, "W_U")
    torch.testing.assert_close(model.value_matrix(), model.W_E.T @ model.W_V @ model.W_E)
    torch.testing.assert_close(model.embedding_gram(), model.W_E.T @ model.W_E)
    # logits by hand: f_i = W_E^T W_V E xbar_i with xbar_i = sum_k a_ik e_{x_k}
    _, inputs, selected = batch(num_docs=2, doc_len=5)
    pattern = model.attention_pattern(inputs, selected)
    onehot = torch.nn.functional.one_hot(inputs, D).double()              # (B, N, D)
    xbar = pattern @ onehot                                               # (B, N, D)
    torch.testing.assert_close(model(inputs, selected), xbar @ model.value_matrix().T)
    # a change of W_E moves the head too
    with torch.no_grad():
        model.W_E.mul_(2.0)
    assert torch.equal(model.unembedding, model.W_E.T)


def test_learned_head_logits_by_hand():
    model = OneLayerTransformer(D, 5, embedding="learned", attention="learned", head="learned", init_scale=0.9,
                                seed=4, attend_to_masked=True).double()
    _, inputs, selected = batch(num_docs=2, doc_len=6)
    pattern = model.attention_pattern(inputs, selected)
    xbar = pattern @ torch.nn.functional.one_hot(inputs, D).double()
    torch.testing.assert_close(model(inputs, selected), xbar @ (model.W_U @ model.W_V @ model.W_E).T)


# ---- freezing ---------------------------------------------------------------------------------------


def test_freeze_stops_gradients_and_updates():
    model = OneLayerTransformer(D, 4, embedding="learned", attention="learned", head="learned", init_scale=0.5, attend_to_masked=True)
    assert model.freeze("W_V", "W_E") is model
    assert not model.W_V.requires_grad and not model.W_E.requires_grad
    assert model.W_K.requires_grad and model.W_Q.requires_grad and model.W_U.requires_grad
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    _, inputs, selected = batch()
    (model(inputs, selected) ** 2).sum().backward()
    opt.step()
    after = dict(model.named_parameters())
    assert torch.equal(after["W_V"], before["W_V"]) and torch.equal(after["W_E"], before["W_E"])
    assert not torch.equal(after["W_U"], before["W_U"])
    assert model.W_V.grad is None


def test_freeze_fixed_matrices_is_a_no_op():
    model = OneLayerTransformer(D, attend_to_masked=True)          # one-hot, uniform, learned W_V, identity head
    model.freeze("W_E", "W_K", "W_Q", "W_U")
    assert model.W_V.requires_grad
    assert [n for n, p in model.named_parameters() if p.requires_grad] == ["W_V"]


@pytest.mark.parametrize("name", ["W_X", "w_v", "", "training", "W_U_fixed", "num_tokens", "A"])
def test_freeze_unknown_name_raises(name):
    model = OneLayerTransformer(D, attend_to_masked=True)
    with pytest.raises(ValueError, match=repr(name).replace("(", r"\(")):
        model.freeze(name)
    assert model.W_V.requires_grad              # nothing half-frozen


def test_freeze_tied_head_raises():
    model = OneLayerTransformer(D, 4, embedding="learned", head="tied", attend_to_masked=True)
    with pytest.raises(ValueError, match="W_U"):
        model.freeze("W_V", "W_U")
    assert model.W_V.requires_grad              # validated before anything is frozen


# ---- the two-layer model of chapter 7 --------------------------------------------------------------


@pytest.mark.parametrize("attend_to_masked", [True, False])
def test_two_layer_transformer_runs_and_hides_keys(attend_to_masked):
    model = TwoLayerTransformer(D, 8, num_heads=2, num_layers=2, attend_to_masked=attend_to_masked, seed=0)
    _, inputs, selected = batch(num_docs=3, doc_len=7)
    cache = model.run_with_cache(inputs, selected)
    assert cache["logits"].shape == (3, 7, D)
    assert torch.isfinite(cache["logits"]).all()
    for layer in range(2):
        pattern = cache[f"blocks.{layer}.attn.pattern"]
        assert pattern.shape == (3, 2, 7, 7)
        torch.testing.assert_close(pattern.sum(-1), torch.ones(3, 2, 7))
        hidden = selected[:, None, None, :].expand_as(pattern)
        if attend_to_masked:
            assert torch.all(pattern > 0)
        else:
            assert torch.all(pattern[hidden] == 0)
    torch.testing.assert_close(model(inputs, selected), cache["logits"])
    torch.testing.assert_close(model.embedding_gram(), model.W_E.T @ model.W_E)


def test_two_layer_document_without_visible_keys_attends_to_nothing():
    model = TwoLayerTransformer(D, 8, num_heads=2, num_layers=2, attend_to_masked=False, seed=0)
    _, inputs, selected = batch(num_docs=3, doc_len=7)
    selected = selected.clone()
    selected[1] = True                                    # document 1: every key hidden
    cache = model.run_with_cache(inputs, selected)
    for layer in range(2):
        pattern = cache[f"blocks.{layer}.attn.pattern"]
        assert torch.equal(pattern[1], torch.zeros(2, 7, 7))
        torch.testing.assert_close(pattern[[0, 2]].sum(-1), torch.ones(2, 2, 7))
    # the other documents do not depend on document 1 (each row of the batch is its own passage)
    alone = model.run_with_cache(inputs[[0, 2]], selected[[0, 2]])
    torch.testing.assert_close(cache["logits"][[0, 2]], alone["logits"])


# ---- TwoLayerTransformer against torch.nn.MultiheadAttention --------------------------------------


def _oracle(model: TwoLayerTransformer, inputs: torch.Tensor, selected: torch.Tensor | None):
    """The same encoder built from torch.nn.MultiheadAttention (bias=False) and the model's LayerNorms."""
    d, H = model.d_model, model.num_heads
    hidden = None if selected is None or model.attend_to_masked else selected    # True: not a key
    x = model.W_E.T[inputs]                                                      # (B, N, d)
    patterns = []
    for layer in range(model.num_layers):
        mha = torch.nn.MultiheadAttention(d, H, bias=False, batch_first=True, dtype=torch.float64)
        with torch.no_grad():
            mha.in_proj_weight.copy_(model.W_QKV[layer].reshape(3 * d, d))     # rows: W_Q, W_K, W_V
            mha.out_proj.weight.copy_(model.W_O[layer])
        out, pattern = mha(x, x, x, key_padding_mask=hidden, need_weights=True, average_attn_weights=False)
        x = model.norms[layer](x + out)
        patterns.append(pattern)                                                 # (B, H, query, key)
    return x @ model.W_E, patterns


@pytest.mark.parametrize("num_layers, num_heads", [(1, 1), (2, 2), (4, 4)])
@pytest.mark.parametrize("attend_to_masked", [True, False])
def test_two_layer_transformer_matches_multihead_attention(num_layers, num_heads, attend_to_masked):
    model = TwoLayerTransformer(D, 8, num_heads=num_heads, num_layers=num_layers, attend_to_masked=attend_to_masked,
                                init_scale=0.7, seed=3).double()
    gen = torch.Generator().manual_seed(4)
    with torch.no_grad():                                   # LayerNorm affine parameters away from (1, 0)
        for norm in model.norms:
            norm.weight.copy_(1.0 + 0.3 * torch.randn(8, generator=gen, dtype=torch.float64))
            norm.bias.copy_(0.3 * torch.randn(8, generator=gen, dtype=torch.float64))
    for seed in range(3):
        _, inputs, selected = batch(num_docs=4, doc_len=9, seed=seed)          # every document keeps a key
        for sel in (None, selected):
            cache = model.run_with_cache(inputs, sel)
            want_logits, want_patterns = _oracle(model, inputs, sel)
            torch.testing.assert_close(cache["logits"], want_logits, rtol=0.0, atol=1e-6)
            for layer, want in enumerate(want_patterns):
                torch.testing.assert_close(cache[f"blocks.{layer}.attn.pattern"], want, rtol=0.0, atol=1e-6)
            if sel is not None and not attend_to_masked:
                pattern = cache["blocks.0.attn.pattern"].detach()                  # hidden keys get no weight
                assert float((pattern * sel[:, None, None, :]).abs().max()) == 0.0


def test_released_code_switches_off_by_default_and_consistent() -> None:
    plain = OneLayerTransformer(11, attention="learned", attend_to_masked=False, seed=2)
    assert not plain.released_code_switches and plain.t is None and plain.b_V is None
    assert torch.equal(plain.effective_value_matrix(), plain.value_matrix())
    m = OneLayerTransformer(11, attention="learned", attend_to_masked=False, input_norm=True,
                            attention_bias=True, init="torch", pad_id=10, seed=2)
    assert m.released_code_switches and float(m.W_V.detach().abs().max()) <= 1 / math.sqrt(11)
    x = torch.randint(10, (3, 7))
    x[:, -2:] = 10                                                     # padding
    pattern = m.attention_pattern(x).detach()
    assert float(pattern[..., -2:].abs().max()) == 0.0                 # padding is never a key
    small = OneLayerTransformer(11, attend_to_masked=False, init="uniform", init_scale=1e-3, seed=0)
    assert 0 <= float(small.W_V.detach().min()) and float(small.W_V.detach().max()) < 1e-3
    u = OneLayerTransformer(11, attend_to_masked=False, input_norm=True, attention_bias=True,
                            pad_id=10, seed=1)
    sel = torch.zeros(3, 7, dtype=torch.bool)
    sel[:, 0] = True
    logits = u(x, sel)[:, 0]                                           # uniform: mean of the columns
    keys = ~sel & (x != 10)                                            # pads hidden too
    want = torch.stack([u.effective_value_matrix()[:, x[b][keys[b]]].mean(1) for b in range(3)])
    assert torch.allclose(logits, want, atol=1e-5)
    with pytest.raises(ValueError, match="pad_id"):
        OneLayerTransformer(11, attend_to_masked=False, pad_id=11)
    with pytest.raises(ValueError, match="init"):
        OneLayerTransformer(11, attend_to_masked=False, init="xavier")
