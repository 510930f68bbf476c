"""Tests for topicmech.artifacts: round trips, stable names, no unpickling, no writes outside the path."""

from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from topicmech.artifacts import artifact_path, config_hash, load_config, load_model, save_model
from topicmech.data import SimplifiedTopicModel, bert_mask
from topicmech.model import OneLayerTransformer, TwoLayerTransformer
from topicmech.train import train

TM = SimplifiedTopicModel(3, 2, 2)
D = TM.num_tokens
CONFIG = {"data": {"T": 3, "v": 2, "tau": 2}, "steps": 5, "lr": 0.5, "seed": 0, "model": "stage1"}

MODELS = {
    "stage1": lambda: OneLayerTransformer(D, init_scale=0.3, seed=1),
    "all-learned": lambda: OneLayerTransformer(D, 4, embedding="learned", attention="learned", head="learned",
                                               attend_to_masked=False, init_scale=0.3, seed=2),
    "tied-identity-value": lambda: OneLayerTransformer(D, 3, embedding="learned", attention="learned",
                                                       value="identity", head="tied", init_scale=0.3, seed=3),
    "two-layer": lambda: TwoLayerTransformer(D, 4, num_heads=2, num_layers=2, attend_to_masked=False, seed=4),
}


def tree(root: Path) -> dict[str, bytes]:
    """Every file under root (following nothing), with its content."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames:
            p = Path(dirpath) / name
            out[str(p.relative_to(root))] = b"<link>" if p.is_symlink() else p.read_bytes()
    return out


def batch():
    docs = TM.sample(3, 7, seed=0)
    return bert_mask(docs, TM.vocab_size, mask_prob=0.4, seed=1)


# ---- round trips ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(MODELS))
def test_round_trip(tmp_path, name):
    model = MODELS[name]()
    path = save_model(model, tmp_path / "art", CONFIG)
    loaded = load_model(path)
    assert type(loaded) is type(model)
    sa, sb = model.state_dict(), loaded.state_dict()
    assert sa.keys() == sb.keys()
    for key in sa:
        assert torch.equal(sa[key], sb[key]), key
    inputs, selected = batch()
    assert torch.equal(loaded(inputs, selected), model(inputs, selected))
    assert loaded.attend_to_masked == model.attend_to_masked
    if isinstance(model, OneLayerTransformer):
        for attr in ("embedding", "attention", "value", "head", "d_model", "num_tokens"):
            assert getattr(loaded, attr) == getattr(model, attr)
    # the .json path works as well
    assert torch.equal(load_model(path.with_suffix(".json"))(inputs, selected), model(inputs, selected))


def test_round_trip_after_training_keeps_frozen_matrices(tmp_path):
    model = OneLayerTransformer(D, 4, embedding="learned", attention="learned", head="learned", seed=0).freeze("W_E")
    train(model, TM, steps=3, batch_size=4, doc_len=6, seed=0)
    loaded = load_model(save_model(model, tmp_path, CONFIG))
    assert not loaded.W_E.requires_grad
    assert loaded.W_V.requires_grad and loaded.W_K.requires_grad
    assert torch.equal(loaded.W_V, model.W_V)


def test_files_named_by_config_hash_with_config_beside(tmp_path):
    path = save_model(MODELS["stage1"](), tmp_path, CONFIG)
    digest = config_hash(CONFIG)
    assert path == tmp_path / f"model-{digest}.pt"
    assert path == artifact_path(tmp_path, CONFIG)
    assert sorted(os.listdir(tmp_path)) == [f"model-{digest}.json", f"model-{digest}.pt"]
    meta = json.loads(path.with_suffix(".json").read_text())
    assert meta["config"] == CONFIG
    assert meta["hash"] == digest
    assert meta["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert meta["model"]["class"] == "OneLayerTransformer"
    assert load_config(path) == CONFIG
    # a custom prefix
    other = save_model(MODELS["stage1"](), tmp_path, CONFIG, name="stage1_v2")
    assert other.name == f"stage1_v2-{digest}.pt"
    assert other == artifact_path(tmp_path, CONFIG, name="stage1_v2")


def test_saving_again_overwrites_and_leaves_no_temporary_files(tmp_path):
    first = save_model(OneLayerTransformer(D, seed=1), tmp_path, CONFIG)
    second = save_model(OneLayerTransformer(D, seed=2), tmp_path, CONFIG)
    assert first == second
    assert len(os.listdir(tmp_path)) == 2
    assert torch.equal(load_model(second).W_V, OneLayerTransformer(D, seed=2).W_V)


def test_state_dict_is_a_plain_tensor_dict(tmp_path):
    path = save_model(MODELS["all-learned"](), tmp_path, CONFIG)
    state = torch.load(path, weights_only=True)
    assert isinstance(state, dict) and all(isinstance(v, torch.Tensor) for v in state.values())


# ---- stable hash ------------------------------------------------------------------------------------


def test_config_hash_is_stable_and_canonical():
    # a fixed value: changing the hashing scheme renames every artifact, so it must be deliberate
    assert config_hash({"a": 1, "b": [1.5, "x", None, True]}) == \
        hashlib.sha256(b'{"a":1,"b":[1.5,"x",null,true]}').hexdigest()[:16]
    assert config_hash({"a": 1, "b": 2}) == config_hash({"b": 2, "a": 1})
    assert config_hash({"x": (1, 2)}) == config_hash({"x": [1, 2]})
    assert config_hash({"x": np.int64(3), "y": np.float64(0.5), "z": np.bool_(True)}) == \
        config_hash({"x": 3, "y": 0.5, "z": True})
    assert config_hash({"nested": {"b": 1, "a": 2}}) == config_hash({"nested": {"a": 2, "b": 1}})
    assert len(config_hash(CONFIG)) == 16 and all(c in "0123456789abcdef" for c in config_hash(CONFIG))


def test_config_hash_distinguishes_configs():
    variants = [CONFIG, {**CONFIG, "lr": 0.25}, {**CONFIG, "seed": 1}, {**CONFIG, "extra": None}, {},
                {"lr": "0.5"}, {"lr": 0.5}, {"a": [1, 2]}, {"a": [2, 1]}]
    assert len({config_hash(c) for c in variants}) == len(variants)


# ---- writes stay inside the given path --------------------------------------------------------------


def test_never_writes_outside_the_given_path(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("precious")
    target = tmp_path / "a" / "b" / "artifacts"
    before = tree(tmp_path)
    save_model(MODELS["all-learned"](), target, CONFIG)
    after = tree(tmp_path)
    new = set(after) - set(before)
    assert all(Path(p).parts[:3] == ("a", "b", "artifacts") for p in new), new
    assert {k: after[k] for k in before} == before


def test_symlink_at_the_target_is_replaced_not_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("do not overwrite")
    art = tmp_path / "art"
    art.mkdir()
    digest = config_hash(CONFIG)
    for suffix in (".pt", ".json"):
        (art / f"model-{digest}{suffix}").symlink_to(victim)
    path = save_model(MODELS["stage1"](), art, CONFIG)
    assert victim.read_text() == "do not overwrite"
    assert not path.is_symlink() and not path.with_suffix(".json").is_symlink()
    assert torch.equal(load_model(path).W_V, MODELS["stage1"]().W_V)


@pytest.mark.parametrize("name", ["../escape", "sub/dir", "..", "/abs"])
def test_name_cannot_escape_the_directory(tmp_path, name):
    art = tmp_path / "art"
    with pytest.raises(ValueError, match="name"):
        save_model(MODELS["stage1"](), art, CONFIG, name=name)
    assert tree(tmp_path) == {}


def test_failed_save_leaves_nothing(tmp_path):
    with pytest.raises(ValueError, match="config"):
        save_model(MODELS["stage1"](), tmp_path / "art", {"lr": float("nan")})
    assert not (tmp_path / "art").exists()


# ---- loading is safe ----------------------------------------------------------------------------------


class _Payload:
    """Unpickling this creates a marker file: what an attacker's code would do."""

    marker = ""

    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))


def _replace_weights(path: Path, data: bytes) -> None:
    """Swap the .pt for ``data`` and fix the checksum, as an attacker controlling both files could."""
    path.write_bytes(data)
    meta_path = path.with_suffix(".json")
    meta = json.loads(meta_path.read_text())
    meta["sha256"] = hashlib.sha256(data).hexdigest()
    meta_path.write_text(json.dumps(meta))


def test_load_model_never_unpickles_code(tmp_path):
    marker = tmp_path / "pwned"
    _Payload.marker = str(marker)
    buffer = io.BytesIO()
    torch.save({"W_V": _Payload()}, buffer)
    evil = buffer.getvalue()
    # the payload is real: a plain unpickling load runs it
    torch.load(io.BytesIO(evil), weights_only=False)
    assert marker.exists()
    marker.unlink()
    path = save_model(MODELS["stage1"](), tmp_path / "art", CONFIG)
    _replace_weights(path, evil)
    with pytest.raises(ValueError, match="weights-only"):
        load_model(path)
    assert not marker.exists()


def test_load_model_refuses_changed_weights(tmp_path):
    path = save_model(MODELS["stage1"](), tmp_path, CONFIG)
    data = bytearray(path.read_bytes())
    data[-20] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="checksum"):
        load_model(path)


def test_load_model_refuses_non_tensor_entries(tmp_path):
    path = save_model(MODELS["stage1"](), tmp_path, CONFIG)
    buffer = io.BytesIO()
    torch.save({"W_V": 3}, buffer)
    _replace_weights(path, buffer.getvalue())
    with pytest.raises(ValueError, match="tensors"):
        load_model(path)


def test_load_model_refuses_weights_that_do_not_fit(tmp_path):
    path = save_model(MODELS["stage1"](), tmp_path, CONFIG)
    meta_path = path.with_suffix(".json")
    meta = json.loads(meta_path.read_text())
    meta["model"]["kwargs"]["num_tokens"] = D + 1
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="cannot be built"):     # one-hot needs d_model = num_tokens
        load_model(path)
    meta["model"]["kwargs"]["d_model"] = D + 1
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="does not fit"):
        load_model(path)


@pytest.mark.parametrize("cls", ["os.system", "Module", "builtins.eval", None])
def test_load_model_rebuilds_only_package_models(tmp_path, cls):
    path = save_model(MODELS["stage1"](), tmp_path, CONFIG)
    meta_path = path.with_suffix(".json")
    meta = json.loads(meta_path.read_text())
    meta["model"]["class"] = cls
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="rebuild"):
        load_model(path)


@pytest.mark.parametrize("edit", [
    lambda m: m["model"]["kwargs"].update(extra=1),
    lambda m: m.update(format="other/1"),
    lambda m: m.pop("sha256"),
    lambda m: m["model"]["kwargs"].update(embedding="evil"),
    lambda m: m["model"].update(frozen=["nonexistent"]),
], ids=["extra-kwarg", "format", "no-checksum", "bad-kwarg-value", "unknown-frozen"])
def test_load_model_refuses_edited_descriptions(tmp_path, edit):
    path = save_model(MODELS["stage1"](), tmp_path, CONFIG)
    meta_path = path.with_suffix(".json")
    meta = json.loads(meta_path.read_text())
    edit(meta)
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(ValueError):
        load_model(path)


def test_load_model_refuses_invalid_json(tmp_path):
    path = save_model(MODELS["stage1"](), tmp_path, CONFIG)
    path.with_suffix(".json").write_text("{not json")
    with pytest.raises(ValueError, match="JSON"):
        load_model(path)


def test_missing_files_raise_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_model(tmp_path / "model-0000000000000000.pt")
    path = save_model(MODELS["stage1"](), tmp_path, CONFIG)
    path.unlink()
    with pytest.raises(FileNotFoundError):
        load_model(path)
