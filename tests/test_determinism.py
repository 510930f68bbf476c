"""Same seed, same bits: training on CPU is reproducible, in one process and across processes."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from topicmech.data import LDATopicModel, SimplifiedTopicModel
from topicmech.model import OneLayerTransformer
from topicmech.train import train

ROOT = Path(__file__).resolve().parents[1]

MODELS = {
    "stage1": dict(value="learned"),
    "learned-attention": dict(attention="learned", value="learned"),
    "all-learned": dict(embedding="learned", attention="learned", value="learned", head="learned", d_model=6),
    "tied": dict(embedding="learned", attention="learned", value="learned", head="tied", d_model=6),
}


def run(model_kwargs: dict, optimizer: str, seed: int, data=None, **train_kwargs):
    data = SimplifiedTopicModel(4, 3, 2) if data is None else data
    model = OneLayerTransformer(13, init_scale=0.1, seed=seed, attend_to_masked=False, **model_kwargs)
    probes = {"W_V": lambda m: m.W_V, "A": lambda m: m.key_query_matrix(), "norm": lambda m: float(m.W_V.norm())}
    history = train(model, data, steps=25, batch_size=8, doc_len=12, optimizer=optimizer,
                    lr=0.5 if optimizer == "sgd" else 0.02, l2=1e-3, seed=seed, probes=probes, probe_every=5,
                    **train_kwargs)
    return model, history


def assert_identical(run_a, run_b):
    (ma, ha), (mb, hb) = run_a, run_b
    sa, sb = ma.state_dict(), mb.state_dict()
    assert sa.keys() == sb.keys()
    for key in sa:
        assert torch.equal(sa[key], sb[key]), key
    assert ha.loss == hb.loss
    assert ha.step == hb.step and ha.probe_step == hb.probe_step
    for name in ha.probes:
        for x, y in zip(ha.probes[name], hb.probes[name]):
            assert np.array_equal(x, y), name


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("name", list(MODELS))
def test_same_seed_bit_identical(name, optimizer):
    first = run(MODELS[name], optimizer, seed=3)
    torch.manual_seed(12345)                # global state must not matter
    np.random.seed(12345)
    torch.rand(100)
    second = run(MODELS[name], optimizer, seed=3)
    assert_identical(first, second)
    assert all(np.isfinite(first[1].loss))


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_different_seed_differs(optimizer):
    (ma, ha), (mb, hb) = run(MODELS["learned-attention"], optimizer, 3), run(MODELS["learned-attention"], optimizer, 4)
    assert ha.loss != hb.loss
    assert not torch.equal(ma.W_V, mb.W_V)


def test_lda_data_and_docs_tensor_are_deterministic():
    lda = LDATopicModel(4, 3, 0.1)
    assert_identical(run(MODELS["learned-attention"], "adam", 1, data=lda),
                     run(MODELS["learned-attention"], "adam", 1, data=lda))
    docs = lda.sample(30, 12, seed=0)
    assert_identical(run(MODELS["all-learned"], "sgd", 1, data=docs, loss="cross_entropy"),
                     run(MODELS["all-learned"], "sgd", 1, data=docs, loss="cross_entropy"))


SCRIPT = textwrap.dedent(
    """
    import hashlib, torch
    torch.set_num_threads(1)
    from topicmech.data import SimplifiedTopicModel
    from topicmech.model import OneLayerTransformer
    from topicmech.train import train
    model = OneLayerTransformer(13, init_scale=0.1, seed=3, attend_to_masked=False, attention="learned",
                                value="learned")
    h = train(model, SimplifiedTopicModel(4, 3, 2), steps=25, batch_size=8, doc_len=12, optimizer="adam",
              lr=0.02, l2=1e-3, seed=3)
    digest = hashlib.sha256()
    for key, value in sorted(model.state_dict().items()):
        digest.update(key.encode()); digest.update(value.contiguous().numpy().tobytes())
    digest.update(repr(h.loss).encode())
    print(digest.hexdigest())
    """
)


@pytest.mark.slow   # starts a second interpreter (~5 s CPU, 15 s wall on a busy 2-core machine); CI runs it
def test_bit_identical_across_processes():
    """A fresh interpreter (fresh global state, fresh caches) reproduces the same bits."""
    model, history = run(MODELS["learned-attention"], "adam", seed=3)
    digest = hashlib.sha256()
    for key, value in sorted(model.state_dict().items()):
        digest.update(key.encode())
        digest.update(value.contiguous().numpy().tobytes())
    digest.update(repr(history.loss).encode())
    env = {k: v for k, v in os.environ.items() if k != "TOPICMECH_MODE"}
    env["OMP_NUM_THREADS"] = "1"
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.strip() == digest.hexdigest()
