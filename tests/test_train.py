"""Tests for topicmech.train: the loss, the L2 penalty, fresh masks, history, failure modes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import topicmech.train as train_mod
from topicmech.data import SimplifiedTopicModel, bert_mask
from topicmech.losses import mlm_loss
from topicmech.model import OneLayerTransformer, TwoLayerTransformer
from topicmech.setting import Masking
from topicmech.train import History, train

TM = SimplifiedTopicModel(5, 4, 2)       # V = 20, D = 21
D = TM.num_tokens


def random_case(seed: int = 0, B: int = 4, N: int = 6):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, N, D, generator=g, dtype=torch.float64)
    targets = torch.randint(TM.vocab_size, (B, N), generator=g)
    selected = torch.rand(B, N, generator=g) < 0.5
    selected[0, 0] = True
    selected[0, 1] = False
    return logits, targets, selected


# ---- the loss -------------------------------------------------------------------------------


def test_squared_loss_equals_naive_formula():
    logits, targets, selected = random_case()
    terms = []
    for b in range(logits.shape[0]):
        for i in range(logits.shape[1]):
            if selected[b, i]:
                e_y = torch.zeros(D, dtype=torch.float64)
                e_y[targets[b, i]] = 1.0
                terms.append(((logits[b, i] - e_y) ** 2).sum())
    naive = torch.stack(terms).mean()
    torch.testing.assert_close(mlm_loss(logits, targets, selected, "squared"), naive, rtol=1e-12, atol=1e-12)


def test_cross_entropy_equals_naive_formula():
    logits, targets, selected = random_case(1)
    terms = [-torch.log_softmax(logits[b, i], 0)[targets[b, i]]
             for b in range(logits.shape[0]) for i in range(logits.shape[1]) if selected[b, i]]
    naive = torch.stack(terms).mean()
    torch.testing.assert_close(mlm_loss(logits, targets, selected, "cross_entropy"), naive, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", ["squared", "cross_entropy"])
def test_loss_counts_only_selected_positions(kind):
    logits, targets, selected = random_case(2)
    base = mlm_loss(logits, targets, selected, kind)
    changed = logits.clone()
    changed[~selected] += 100.0 * torch.randn(int((~selected).sum()), D, dtype=torch.float64)
    other_targets = targets.clone()
    other_targets[~selected] = (targets[~selected] + 1) % TM.vocab_size
    assert torch.equal(mlm_loss(changed, other_targets, selected, kind), base)
    # ... while a change at one selected position does change it
    changed = logits.clone()
    changed[0, 0, 0] += 1.0          # one coordinate (a shift of all D would leave cross-entropy unchanged)
    assert mlm_loss(changed, targets, selected, kind) != base
    # and the gradient is zero at every unselected position
    leaf = logits.clone().requires_grad_(True)
    mlm_loss(leaf, targets, selected, kind).backward()
    assert torch.all(leaf.grad[~selected] == 0)
    assert torch.all(leaf.grad[selected].abs().sum(-1) > 0)


@pytest.mark.parametrize("kind", ["squared", "cross_entropy"])
def test_loss_with_nothing_selected_is_zero(kind):
    logits, targets, _ = random_case(3)
    leaf = logits.clone().requires_grad_(True)
    value = mlm_loss(leaf, targets, torch.zeros(targets.shape, dtype=torch.bool), kind)
    assert float(value.detach()) == 0.0
    value.backward()
    assert torch.all(leaf.grad == 0)


def test_unknown_loss_kind_raises_even_with_nothing_selected():
    """Regression: with no selected position the kind was never checked and 0 came back."""
    logits, targets, _ = random_case(3)
    with pytest.raises(ValueError, match="kind"):
        mlm_loss(logits, targets, torch.zeros(targets.shape, dtype=torch.bool), "mse")


def test_integer_selected_is_refused():
    """Regression: an int 0/1 mask indexed batch rows instead of positions and gave a wrong loss."""
    logits, targets, selected = random_case(4)
    with pytest.raises(ValueError, match="selected"):
        mlm_loss(logits, targets, selected.long())


# ---- L2 penalty -----------------------------------------------------------------------------------


def test_l2_penalty_gradient_matches_manual_computation():
    """One SGD step with and without L2 from the same weights and batch: the difference is the
    penalty's gradient, -lr * 2 * l2 * W0, for every trained matrix."""
    lr, l2 = 0.1, 0.3
    kwargs = dict(embedding="learned", attention="learned", head="learned", d_model=6, init_scale=0.5,
                  attend_to_masked=True, seed=1)
    plain, ridge = OneLayerTransformer(D, **kwargs), OneLayerTransformer(D, **kwargs)
    start = {n: p.detach().clone() for n, p in plain.named_parameters()}
    h0 = train(plain, TM, steps=1, batch_size=8, doc_len=10, lr=lr, l2=0.0, seed=5)
    h1 = train(ridge, TM, steps=1, batch_size=8, doc_len=10, lr=lr, l2=l2, seed=5)
    for name, p in ridge.named_parameters():
        delta = p.detach() - dict(plain.named_parameters())[name].detach()
        torch.testing.assert_close(delta, -lr * 2 * l2 * start[name], rtol=1e-4, atol=1e-6)
    # the logged loss is the data loss, without the penalty
    assert h0.loss == h1.loss


def test_l2_penalty_shrinks_weights():
    kwargs = dict(value="learned", init_scale=1.0, attend_to_masked=True, seed=0)
    plain, ridge = OneLayerTransformer(D, **kwargs), OneLayerTransformer(D, **kwargs)
    start = float(plain.W_V.detach().norm())
    train(plain, TM, steps=20, batch_size=16, doc_len=10, lr=0.05, l2=0.0, seed=0)
    train(ridge, TM, steps=20, batch_size=16, doc_len=10, lr=0.05, l2=1.0, seed=0)
    assert float(ridge.W_V.detach().norm()) < 0.9 * float(plain.W_V.detach().norm())
    assert float(ridge.W_V.detach().norm()) < 0.9 * start


def test_l2_only_penalises_trained_matrices():
    """Frozen and fixed matrices are not decayed."""
    model = OneLayerTransformer(D, 4, embedding="learned", head="learned", init_scale=1.0, seed=0, attend_to_masked=True).freeze("W_E")
    W_E = model.W_E.detach().clone()
    train(model, TM, steps=3, batch_size=4, doc_len=8, lr=0.1, l2=5.0, seed=0)
    assert torch.equal(model.W_E, W_E)


# ---- masks, data and history --------------------------------------------------------------------


@pytest.fixture
def recorded_masks(monkeypatch):
    """Record the (docs, inputs, selected) of every step's masking (bert_mask's corruption) in train().

    The per-step paths (learned attention, used below) mask once per step; the uniform-attention
    path draws the same numbers in chunks, which tests/test_fast.py compares with the reference."""
    calls = []
    corrupt = train_mod.corrupt

    def recording(docs, *args):
        inputs, selected = corrupt(docs, *args)
        calls.append((docs.clone(), inputs.clone(), selected.clone()))
        return inputs, selected

    monkeypatch.setattr(train_mod, "corrupt", recording)
    return calls


def test_fresh_masks_every_step(recorded_masks):
    one_doc = TM.sample(1, 40, seed=0)                   # the same document every step
    train(OneLayerTransformer(D, attention="learned", attend_to_masked=True), one_doc, steps=3, batch_size=4, seed=0)
    assert len(recorded_masks) == 3
    (d0, i0, s0), (d1, i1, s1), (d2, _, s2) = recorded_masks
    assert torch.equal(d0, d1)                           # same documents ...
    assert not torch.equal(s0, s1) and not torch.equal(s1, s2)   # ... new masks
    assert not torch.equal(i0, i1)
    # within a step the rows are masked independently too
    assert not all(torch.equal(s0[0], s0[k]) for k in range(1, 4))


def test_topic_model_data_gives_fresh_documents(recorded_masks):
    train(OneLayerTransformer(D, attention="learned", attend_to_masked=True), TM, steps=2, batch_size=4, doc_len=15, seed=0)
    assert not torch.equal(recorded_masks[0][0], recorded_masks[1][0])
    assert recorded_masks[0][0].shape == (4, 15)


def test_training_on_a_docs_tensor_uses_only_those_documents(recorded_masks):
    docs = TM.sample(5, 12, seed=3)
    history = train(OneLayerTransformer(D, attention="learned", attend_to_masked=True), docs, steps=4, batch_size=8, seed=0)
    rows = {tuple(r) for r in docs.tolist()}
    for batch_docs, _, _ in recorded_masks:
        assert batch_docs.shape == (8, 12)
        assert all(tuple(r) in rows for r in batch_docs.tolist())
    assert len(history.loss) == 4 and np.isfinite(history.loss).all()


def test_masking_probabilities_are_passed_through(recorded_masks):
    train(OneLayerTransformer(D, attention="learned", attend_to_masked=True), TM, steps=2, batch_size=50, doc_len=40, seed=0,
          masking=Masking(mask_prob=1.0, keep_prob=0.0, random_prob=0.0))
    for _, inputs, selected in recorded_masks:
        assert selected.all() and torch.all(inputs == TM.mask_id)


def test_history_records_probes_at_start_and_end():
    """Regression: a probe returning a parameter was stored as a NumPy view of the weights, so
    every recorded entry showed the final weights."""
    model = OneLayerTransformer(D, init_scale=0.1, seed=0, attend_to_masked=True)
    W0 = model.W_V.detach().clone()
    history = train(model, TM, steps=7, batch_size=4, doc_len=10, seed=0,
                    probes={"W_V": lambda m: m.W_V, "W_V_np": lambda m: m.W_V.detach().numpy(),
                            "norm": lambda m: float(m.W_V.norm())}, probe_every=3)
    assert history.step == list(range(1, 8))
    assert len(history.loss) == 7 and all(np.isfinite(history.loss))
    assert history.probe_step == [0, 3, 6, 7]
    W = history.probe("W_V")
    assert isinstance(W, np.ndarray) and W.shape == (4, D, D)
    np.testing.assert_array_equal(W[0], W0.numpy())
    np.testing.assert_array_equal(W[-1], model.W_V.detach().numpy())
    assert not np.array_equal(W[0], W[-1])
    np.testing.assert_array_equal(history.probe("W_V_np"), W)
    assert history.probe("norm").shape == (4,)
    assert history.probe("norm")[0] == pytest.approx(float(W0.norm()))
    with pytest.raises(ValueError, match="nope"):
        history.probe("nope")


def test_default_probe_every_and_progress_bar():
    history = train(OneLayerTransformer(D, attend_to_masked=True), TM, steps=100, batch_size=2, doc_len=5, seed=0,
                    probes={"x": lambda m: 0.0}, progress=True)
    assert history.probe_step == [0] + list(range(2, 101, 2))


def test_smoothed_loss_is_a_running_mean():
    h = History(step=[1, 2, 3, 4, 5], loss=[5.0, 3.0, 1.0, 1.0, 0.0])
    np.testing.assert_allclose(h.smoothed_loss(2), [5.0, 4.0, 2.0, 1.0, 0.5])
    np.testing.assert_allclose(h.smoothed_loss(100), [5.0, 4.0, 3.0, 2.5, 2.0])
    assert History().smoothed_loss(3).shape == (0,)


# ---- failure modes ---------------------------------------------------------------------------------


def test_non_finite_loss_raises():
    model = OneLayerTransformer(D, init_scale=1.0, seed=0, attend_to_masked=True)
    with pytest.raises(FloatingPointError, match="lr"):
        train(model, TM, steps=200, batch_size=8, doc_len=10, lr=1e8, seed=0)


def test_everything_frozen_raises():
    model = OneLayerTransformer(D, attend_to_masked=True).freeze("W_V")
    with pytest.raises(ValueError, match="trainable"):
        train(model, TM, steps=1, doc_len=5)


def test_unknown_optimizer_is_named_even_without_lr():
    """Regression: optimizer='adamw' with lr=None was reported as a bad lr (0.0)."""
    with pytest.raises(ValueError, match="optimizer"):
        train(OneLayerTransformer(D, attend_to_masked=True), TM, steps=1, doc_len=5, optimizer="adamw")


# ---- learning ------------------------------------------------------------------------------------


def heldout_loss(model, kind="squared") -> float:
    docs = TM.sample(2000, 30, seed=99)
    inputs, selected = bert_mask(docs, TM.vocab_size, seed=98)
    with torch.no_grad():
        return float(mlm_loss(model(inputs, selected), docs, selected, kind))


def test_gradient_descent_decreases_loss_in_stage_one_setting():
    """One-hot embeddings, frozen uniform attention, trained W_V, identity head, squared loss, SGD."""
    model = OneLayerTransformer(D, value="learned", init_scale=0.01, seed=0, attend_to_masked=True)
    before = heldout_loss(model)
    assert before == pytest.approx(1.0, abs=0.01)        # f ~ 0 gives ||e_y||^2 = 1
    history = train(model, TM, steps=150, batch_size=32, doc_len=30, optimizer="sgd", seed=0)
    after = heldout_loss(model)
    assert after < before - 0.08, (before, after)
    assert np.mean(history.loss[-20:]) < np.mean(history.loss[:20]) - 0.05


def test_adam_cross_entropy_decreases_loss():
    model = OneLayerTransformer(D, value="learned", init_scale=0.01, seed=0, attend_to_masked=True)
    before = heldout_loss(model, "cross_entropy")
    train(model, TM, steps=100, batch_size=32, doc_len=30, loss="cross_entropy", optimizer="adam", lr=0.05, seed=0)
    after = heldout_loss(model, "cross_entropy")
    assert before == pytest.approx(np.log(D), abs=0.01)   # uniform logits
    assert after < before - 0.3, (before, after)


def test_two_layer_model_trains():
    model = TwoLayerTransformer(D, 8, num_heads=2, seed=0, attend_to_masked=True)
    history = train(model, TM, steps=5, batch_size=4, doc_len=10, loss="cross_entropy", optimizer="adam", seed=0)
    assert len(history.loss) == 5 and np.isfinite(history.loss).all()


def test_fixed_masks_and_epochs_match_reference_and_fast_paths() -> None:
    from topicmech import reproduce as rp
    from topicmech.model import OneLayerTransformer

    tokens = rp.released_code_corpus(20, 0)
    masks = rp.released_code_masks(tokens, 1)

    def model():
        return OneLayerTransformer(104, attention="learned", attend_to_masked=False, input_norm=True,
                                   attention_bias=True, init="uniform", init_scale=1e-2, pad_id=100, seed=3)

    runs = [train(m, tokens, steps=6, batch_size=8, loss="cross_entropy", optimizer="adam", masks=masks,
                  sampling="epochs", path=path) for m, path in ((model(), "reference"), (model(), "auto"))]
    assert np.allclose(runs[0].loss, runs[1].loss, rtol=1e-4)
    with pytest.raises(ValueError, match="sampling='epochs' needs masks"):
        train(model(), tokens, steps=2, sampling="epochs")
    with pytest.raises(ValueError, match="masks must be"):
        train(model(), tokens, steps=2, masks=(masks[0], masks[1][:, :3]))


# ---- a Setting carried into the model and the loop ------------------------------------------------


def test_from_setting_takes_the_size_and_the_convention_from_the_setting():
    from topicmech.setting import Setting

    for si in (True, False):
        s = Setting(5, 4, 2, 12, attend_to_masked=si)
        m = OneLayerTransformer.from_setting(s, attention="learned", seed=3)
        ref = OneLayerTransformer(s.D, attention="learned", seed=3, attend_to_masked=si)
        assert (m.num_tokens, m.attend_to_masked) == (s.D, si)
        assert torch.equal(m.W_K, ref.W_K) and torch.equal(m.W_V, ref.W_V)
        # the same values given again are accepted
        again = OneLayerTransformer.from_setting(s, num_tokens=s.D, attend_to_masked=si)
        assert again.num_tokens == s.D


@pytest.mark.parametrize("data_kind", ["topic model", "tensor"])
def test_train_with_a_setting_equals_train_with_its_fields(data_kind):
    from topicmech.setting import Setting

    masking = Masking(mask_prob=0.3, keep_prob=0.2, random_prob=0.1)
    s = Setting(5, 4, 2, 12, masking=masking, attend_to_masked=False)
    data = TM if data_kind == "topic model" else TM.sample(16, 12, seed=1)
    runs = []
    for kwargs in (dict(setting=s), dict(doc_len=12, masking=masking),
                   dict(setting=s, doc_len=12, masking=masking)):
        model = OneLayerTransformer.from_setting(s)
        runs.append(train(model, data, steps=5, batch_size=8, seed=2, **kwargs).loss)
    assert runs[0] == runs[1] == runs[2]
