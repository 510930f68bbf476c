"""Tests for topicmech.fast: the uniform-attention path of train(), its optimisers, and padding.

The learned-attention path is tested in tests/test_fast_attention.py.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest
import torch

import topicmech as tm
from topicmech import fast
from topicmech.losses import mlm_loss

D = 21  # T = 4 topics of 5 words, plus [MASK]


def _model(**kw):
    kw = {"attention": "uniform", "value": "learned", "head": "identity", "attend_to_masked": True, "seed": 1, **kw}
    return tm.OneLayerTransformer(D, **kw)


@pytest.fixture(scope="module")
def lda():
    return tm.LDATopicModel(num_topics=4, words_per_topic=5, alpha=0.3)


@pytest.fixture(scope="module")
def docs(lda):
    return lda.sample(64, 30, seed=5)


# ---- same results as the general loop --------------------------------------------------


@pytest.mark.parametrize("loss", ["cross_entropy", "squared"])
@pytest.mark.parametrize("attend_to_masked", [True, False])
@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_matches_train_closed_form_gradient(docs, loss, attend_to_masked, optimizer):
    lr = 0.01 if optimizer == "adam" else 0.5
    m1, m2 = _model(attend_to_masked=attend_to_masked), _model(attend_to_masked=attend_to_masked)
    kw = dict(steps=120, batch_size=8, loss=loss, optimizer=optimizer, lr=lr, seed=3)
    h1 = tm.train.train(m1, docs, path="reference", **kw)
    h2 = tm.train.train(m2, docs, **kw)                              # the uniform path
    assert h1.step == h2.step
    assert max(abs(a - b) for a, b in zip(h1.loss, h2.loss)) < 1e-4
    torch.testing.assert_close(m1.W_V, m2.W_V, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("kw", [
    {"head": "learned"},
    {"embedding": "learned", "head": "tied", "d_model": 8},
    {"value": "learned", "head": "identity", "l2": 1e-3},
    {"embedding": "learned", "head": "tied", "d_model": 8, "bias": True},
    {"value": "learned", "head": "identity", "bias": True},        # no closed-form step with a bias
])
def test_matches_train_autograd(docs, kw):
    kw = dict(kw)
    l2 = kw.pop("l2", 0.0)
    m1, m2 = _model(**kw), _model(**kw)
    args = dict(steps=60, batch_size=8, loss="cross_entropy", optimizer="adam", lr=0.01, l2=l2, seed=4)
    h1 = tm.train.train(m1, docs, path="reference", **args)
    h2 = tm.train.train_uniform(m2, docs, **args)
    assert max(abs(a - b) for a, b in zip(h1.loss, h2.loss)) < 1e-4
    for (n1, p1), (n2, p2) in zip(m1.named_parameters(), m2.named_parameters()):
        assert n1 == n2
        torch.testing.assert_close(p1, p2, atol=1e-4, rtol=1e-4)


def test_matches_train_topic_model_and_probes(lda):
    m1, m2 = _model(), _model()
    probes = {"diag": lambda m: m.W_V.diagonal().mean()}
    kw = dict(steps=40, batch_size=6, doc_len=25, loss="squared", optimizer="sgd", lr=0.5, seed=9,
              probes=probes, probe_every=10)
    h1 = tm.train.train(m1, lda, path="reference", **kw)
    h2 = tm.train.train(m2, lda, **kw)
    assert h1.probe_step == h2.probe_step == [0, 10, 20, 30, 40]
    torch.testing.assert_close(torch.tensor(h1.probe("diag")), torch.tensor(h2.probe("diag")), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(m1.W_V, m2.W_V, atol=1e-5, rtol=1e-5)


def test_bit_identical_for_same_seed(docs):
    m1, m2 = _model(), _model()
    h1 = tm.train.train_uniform(m1, docs, steps=50, batch_size=8, loss="cross_entropy", optimizer="adam", seed=2)
    h2 = tm.train.train_uniform(m2, docs, steps=50, batch_size=8, loss="cross_entropy", optimizer="adam", seed=2)
    assert h1.loss == h2.loss
    assert torch.equal(m1.W_V, m2.W_V)


def test_learns_topic_blocks(lda):
    m = _model(attend_to_masked=False)
    tm.train.train_uniform(m, lda, steps=400, batch_size=32, doc_len=40, loss="cross_entropy", optimizer="adam", seed=0)
    bm = tm.block_means(m.W_V.detach(), lda.topic_of_word)
    assert bm.same_topic - bm.diff_topic > 0.5, bm


# ---- the optimisers are torch.optim's kernels ----------------------------------------------


@pytest.mark.parametrize("name", ["adam", "sgd"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_optimiser_kernels_bit_identical_to_torch_optim(name, dtype):
    """TorchOptimKernels updates exactly like torch.optim's SGD and fused Adam (the default Adam
    where torch has no fused CPU kernel, before 2.4), and with fused=False (the general training
    path) exactly like the default Adam."""
    gen = torch.Generator().manual_seed(0)
    p1 = torch.nn.Parameter(torch.randn(7, 5, generator=gen, dtype=dtype))
    p2, p3, p4 = (torch.nn.Parameter(p1.detach().clone()) for _ in range(3))
    q1 = torch.nn.Parameter(torch.randn(3, generator=gen, dtype=dtype))     # a second tensor, sometimes no grad
    q2 = torch.nn.Parameter(q1.detach().clone())
    lr = 0.03 if name == "adam" else 0.3
    cpu_fused = "cpu" in fast.FUSED_DEVICES
    ref = (torch.optim.Adam([p1, q1], lr=lr, fused=cpu_fused or None) if name == "adam"
           else torch.optim.SGD([p1, q1], lr=lr))
    ours = fast.TorchOptimKernels([p2, q2], name, lr)
    default = torch.optim.Adam([p3], lr=lr) if name == "adam" else torch.optim.SGD([p3], lr=lr)
    ours_unfused = fast.TorchOptimKernels([p4], name, lr, fused=False)
    for step in range(25):
        g = torch.randn(7, 5, generator=gen, dtype=dtype)
        h = torch.randn(3, generator=gen, dtype=dtype)
        ref.zero_grad(set_to_none=True)
        ours.zero_grad()
        p1.grad, p2.grad, p3.grad, p4.grad = g.clone(), g.clone(), g.clone(), g.clone()
        if step % 3:
            q1.grad, q2.grad = h.clone(), h.clone()
        for opt in (ref, ours, default, ours_unfused):
            opt.step()
        assert torch.equal(p1.detach(), p2.detach()) and torch.equal(q1.detach(), q2.detach())
        assert torch.equal(p3.detach(), p4.detach())
        # fused and default Adam round in a different order: equal to float32's rounding, not bit for bit
        torch.testing.assert_close(p3.detach(), p2.detach(), rtol=1e-5 if dtype == torch.float32 else 1e-12,
                                   atol=1e-7 if dtype == torch.float32 else 0.0)
    assert (ours.exp_avg == []) == (name == "sgd")                         # SGD keeps no state
    assert fast.TorchOptimKernels([torch.zeros(2, dtype=torch.int64)], name, lr).fused is False   # never fused
    assert fast.TorchOptimKernels([p2], name, lr).fused is cpu_fused


def test_train_uniform_is_train(docs):
    """train_uniform is a thin alias: the same numbers as train(), which takes the same path."""
    m1, m2 = _model(), _model()
    kw = dict(steps=30, batch_size=8, loss="cross_entropy", optimizer="adam", seed=2)
    h1 = tm.train.train(m1, docs, **kw)
    h2 = tm.train.train_uniform(m2, docs, **kw)
    assert h1.loss == h2.loss and torch.equal(m1.W_V, m2.W_V)


def test_uniform_path_imports_no_optimiser_class():
    """The uniform path never builds a torch.optim class: the first one imports torch._dynamo
    (about 1.5 s of CPU and 80 MiB), more than a whole demonstration run."""
    code = ("import sys, topicmech as tm\n"
            "lda = tm.LDATopicModel(3, 4, 0.3)\n"
            "m = tm.OneLayerTransformer(lda.num_tokens, seed=0, attend_to_masked=True)\n"
            "tm.train.train(m, lda, steps=5, batch_size=4, doc_len=10, loss='cross_entropy', optimizer='adam')\n"
            "print('torch._dynamo' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "False"


# ---- the (batch, D) loss equals the general one -----------------------------------------


@pytest.mark.parametrize("loss", ["cross_entropy", "squared"])
@pytest.mark.parametrize("attend_to_masked", [True, False])
def test_uniform_loss_equals_mlm_loss(docs, loss, attend_to_masked):
    m = _model(attend_to_masked=attend_to_masked, init_scale=0.3)
    gen = torch.Generator().manual_seed(0)
    B, N = docs.shape
    sel_u, branch = torch.rand(B, N, generator=gen), torch.rand(B, N, generator=gen)
    words = torch.randint(D - 1, (B, N), generator=gen)
    gen2 = torch.Generator().manual_seed(0)
    inputs, selected = tm.bert_mask(docs, D - 1, seed=gen2)  # the same draws, through bert_mask
    xbar, Y, n = fast.chunk_statistics(docs, sel_u, branch, words, num_tokens=D, masking=tm.BERT_MASKING,
                                       attend_to_masked=attend_to_masked)
    assert torch.equal(n, selected.sum(1).float())
    got = fast.uniform_loss(fast.logits_from_xbar(m, xbar), Y, n, loss, float(n.sum()))
    want = mlm_loss(m(inputs, selected), docs, selected, loss)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


# ---- padding --------------------------------------------------------------------------


@pytest.mark.parametrize("attend_to_masked", [True, False])
def test_padding_is_invisible(lda, attend_to_masked):
    """A padded batch gives the loss and gradient of its documents taken one by one."""
    rows = [lda.sample(1, n, seed=i)[0] for i, n in enumerate([7, 30, 12, 1, 19])]
    padded, lengths = fast.pad_documents(rows, pad_id=3)
    B, N = padded.shape
    gen = torch.Generator().manual_seed(1)
    sel_u, branch = torch.rand(B, N, generator=gen), torch.rand(B, N, generator=gen)
    sel_u[:, 0] = 0.0  # every document has a selected position
    words = torch.randint(D - 1, (B, N), generator=gen)
    m = _model(attend_to_masked=attend_to_masked, init_scale=0.3)
    xbar, Y, n = fast.chunk_statistics(padded, sel_u, branch, words, num_tokens=D, masking=tm.BERT_MASKING,
                                       attend_to_masked=attend_to_masked, lengths=lengths)
    got = fast.uniform_loss(fast.logits_from_xbar(m, xbar), Y, n, "cross_entropy", float(n.sum()))
    (g_got,) = torch.autograd.grad(got, [m.W_V])
    # reference: each document on its own, the general model and loss, no padding anywhere
    total, count = 0.0, 0
    for b, row in enumerate(rows):
        L = len(row)
        sel = sel_u[b, :L] < 0.15
        inp = row.clone()
        inp[sel & (branch[b, :L] >= 0.2)] = D - 1
        rnd = sel & (branch[b, :L] >= 0.1) & (branch[b, :L] < 0.2)
        inp[rnd] = words[b, :L][rnd]
        k = int(sel.sum())
        total = total + k * mlm_loss(m(inp[None], sel[None]), row[None], sel[None], "cross_entropy")
        count += k
    want = total / count
    (g_want,) = torch.autograd.grad(want, [m.W_V])
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(g_got, g_want, atol=1e-6, rtol=1e-4)


def test_padded_training_ignores_pad_content(lda):
    docs, lengths = fast.sample_variable_length(lda, 50, 5, 20, seed=0)
    other = docs.clone()
    other[torch.arange(20)[None, :] >= lengths[:, None]] = 7  # different padding content
    m1, m2 = _model(), _model()
    kw = dict(steps=30, batch_size=8, lengths=lengths, loss="cross_entropy", optimizer="adam", seed=1)
    tm.train.train_uniform(m1, docs, **kw)
    tm.train.train_uniform(m2, other, **kw)
    assert torch.equal(m1.W_V, m2.W_V)


def test_sample_variable_length(lda):
    docs, lengths = fast.sample_variable_length(lda, 300, 100, 150, seed=4, pad_id=0)
    assert docs.shape == (300, 150) and lengths.shape == (300,)
    assert int(lengths.min()) >= 100 and int(lengths.max()) <= 150
    assert int(lengths.min()) < 110 and int(lengths.max()) > 140  # uniform over the range
    pad = torch.arange(150)[None, :] >= lengths[:, None]
    assert torch.all(docs[pad] == 0)
    assert int(docs.min()) >= 0 and int(docs.max()) < lda.vocab_size
    again, lengths2 = fast.sample_variable_length(lda, 300, 100, 150, seed=4)
    assert torch.equal(docs, again) and torch.equal(lengths, lengths2)


def test_pad_documents_roundtrip():
    rows = [torch.tensor([1, 2, 3]), torch.tensor([4]), torch.tensor([5, 6])]
    padded, lengths = fast.pad_documents(rows, pad_id=9)
    assert padded.tolist() == [[1, 2, 3], [4, 9, 9], [5, 6, 9]]
    assert lengths.tolist() == [3, 1, 2]


# ---- validation and failure modes -----------------------------------------------------


def test_rejects_bad_input(lda, docs):
    with pytest.raises(ValueError, match="attention='uniform'"):
        tm.train.train_uniform(tm.OneLayerTransformer(D, attention="learned", attend_to_masked=True), docs, steps=2)
    with pytest.raises(ValueError, match="lengths"):
        tm.train.train_uniform(_model(), lda, steps=2, doc_len=5, lengths=torch.ones(3, dtype=torch.long))
    with pytest.raises(ValueError, match="lengths"):
        tm.train.train_uniform(_model(), docs, steps=2, lengths=torch.zeros(len(docs), dtype=torch.long))
    with pytest.raises(ValueError, match="lengths"):
        tm.train.train_uniform(_model(), docs, steps=2, lengths=torch.full((len(docs),), 31))
    with pytest.raises(ValueError, match="doc_len"):
        tm.train.train_uniform(_model(), lda, steps=2)
    with pytest.raises(ValueError, match="steps"):
        tm.train.train_uniform(_model(), docs, steps=0)
    with pytest.raises(ValueError, match="optimizer"):
        tm.train.train_uniform(_model(), docs, steps=2, optimizer="rmsprop")
    with pytest.raises(ValueError, match="lr"):
        tm.train.train_uniform(_model(), docs, steps=2, lr=-1.0)
    with pytest.raises(ValueError, match="check_every"):
        tm.train.train_uniform(_model(), docs, steps=2, check_every=0)
    with pytest.raises(ValueError, match="trainable"):
        tm.train.train_uniform(_model().freeze("W_V"), docs, steps=2)
    with pytest.raises(ValueError, match="min_len"):
        fast.sample_variable_length(lda, 3, 10, 5)
    with pytest.raises(ValueError, match="pad_id"):
        fast.sample_variable_length(lda, 3, 1, 5, pad_id=D)
    with pytest.raises(ValueError, match="docs"):
        fast.pad_documents([])


def test_non_finite_loss_stops_with_step(docs):
    m = _model(init_scale=1.0)
    with pytest.raises(FloatingPointError, match=r"at step \d+"):
        tm.train.train_uniform(m, docs, steps=400, batch_size=8, loss="squared", optimizer="sgd", lr=1e6, check_every=10)


def test_a_few_steps_give_finite_losses(docs):
    h = tm.train.train_uniform(_model(), docs, steps=3, batch_size=4, loss="cross_entropy", optimizer="adam")
    assert len(h.loss) == 3 and all(math.isfinite(x) for x in h.loss)


@pytest.mark.parametrize("kw", [{"head": "identity"}, {"embedding": "learned", "head": "tied", "d_model": 8}])
def test_float64_model_trains_in_float64(docs, kw):
    """The per-document statistics follow the model's dtype: float64 paths agree to 1e-12."""
    m1, m2 = _model(init_scale=0.3, **kw).double(), _model(init_scale=0.3, **kw).double()
    args = dict(steps=30, batch_size=8, loss="cross_entropy", optimizer="adam", lr=0.01, seed=4)
    h1 = tm.train.train(m1, docs, path="reference", **args)
    h2 = tm.train.train(m2, docs, **args)
    assert max(abs(a - b) for a, b in zip(h1.loss, h2.loss)) < 1e-12
    for p1, p2 in zip(m1.parameters(), m2.parameters()):
        assert p2.dtype == torch.float64
        torch.testing.assert_close(p2, p1, rtol=1e-10, atol=1e-12)
