"""Save and load trained models safely, named by a stable hash of their config.

Book: chapters that train for longer than a minute load a saved model when one is
present and train otherwise (*load if present, else train*); the *How to use this
book* page explains quick and full mode.

An artifact is two files in one directory, both named ``{name}-{hash}``:

- ``{name}-{hash}.pt``: the model's ``state_dict`` (tensors only), written with
  ``torch.save``;
- ``{name}-{hash}.json``: the config it was trained with, how to rebuild the model
  (class and constructor arguments, which matrices were frozen) and the SHA-256 of the
  ``.pt`` file.

``hash`` is :func:`config_hash` of the config alone, so the file name is known before
training: :func:`artifact_path` gives it. Safety:

- loading never unpickles arbitrary objects: :func:`load_model` reads the weights with
  ``torch.load(..., weights_only=True)``, rebuilds only the package's own model classes
  (an allow-list), and checks the checksum first, so a swapped or truncated file is
  refused;
- saving writes only inside the directory it is given: each file is first written to a
  temporary file in that directory and then renamed over the target (a rename replaces a
  symbolic link instead of following it), and ``name`` may not contain a path separator.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch
from torch import nn

from .model import OneLayerTransformer, TwoLayerTransformer

__all__ = ["config_hash", "artifact_path", "save_model", "load_model", "load_config"]

FORMAT = "topicmech-model/1"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_MODELS: dict[str, type[nn.Module]] = {
    "OneLayerTransformer": OneLayerTransformer,
    "TwoLayerTransformer": TwoLayerTransformer,
}
_KWARGS = {
    "OneLayerTransformer": ("num_tokens", "d_model", "embedding", "attention", "value", "head",
                            "attend_to_masked", "init_scale"),
    "TwoLayerTransformer": ("num_tokens", "d_model", "num_heads", "num_layers", "attend_to_masked"),
}


def _plain(value: Any) -> Any:
    """``json.dumps`` hook: NumPy scalars become Python numbers; anything else is refused."""
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable")


def _check_keys(value: Any, where: str) -> None:
    """Refuse non-str keys at any depth (``json.dumps`` would silently turn ``1`` into ``"1"``)."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            if not isinstance(k, str):
                raise ValueError(f"config keys must be str, got {k!r} in {where}")
            _check_keys(v, f"{where}[{k!r}]")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_keys(v, f"{where}[{i}]")


def _canonical_json(config: object) -> str:
    if not isinstance(config, Mapping):
        raise ValueError(f"config must be a dict, got {type(config).__name__}")
    _check_keys(config, "config")
    try:
        return json.dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False,
                          default=_plain)
    except (TypeError, ValueError) as err:
        raise ValueError(f"config must hold only str keys and JSON values (finite numbers, str, bool, None, "
                         f"lists, dicts): {err}") from None


def config_hash(config: Mapping[str, Any]) -> str:
    """Stable 16-hex-digit hash of a config.

    The hash is the SHA-256 of the config's canonical JSON (sorted keys, no spaces), so it
    does not depend on key order, the Python session or the platform; tuples hash as lists
    and NumPy scalars as Python numbers.

    Parameters
    ----------
    config : dict
        Everything that determines the trained weights (data, model, training settings).
        Keys are strings; values are JSON values (finite numbers, str, bool, None, lists, dicts).

    Returns
    -------
    digest : str
        16 lowercase hexadecimal digits.

    Raises
    ------
    ValueError
        If ``config`` is not a dict of JSON values (NaN and infinity are refused).
    """
    text = _canonical_json(config)
    return hashlib.sha256(text.encode("ascii")).hexdigest()[:16]


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name) or ".." in name:
        raise ValueError(f"name must be 1-64 letters, digits, '_', '-' or '.' (no path separators, "
                         f"no '..'), got {name!r}")
    return name


def _check_dir(path: object) -> Path:
    if isinstance(path, bytes) or not isinstance(path, (str, os.PathLike)) or str(path) == "":
        raise ValueError(f"path must be a directory path (str or os.PathLike), got {path!r}")
    return Path(path)


def artifact_path(path: str | os.PathLike, config: Mapping[str, Any], *, name: str = "model") -> Path:
    """Where :func:`save_model` puts the weights for ``config``: ``path / f"{name}-{hash}.pt"``.

    Use it to load a model when it is present and train it otherwise::

        p = artifact_path("book/_artifacts", cfg)
        model = load_model(p) if p.exists() else train_and_save(cfg)

    Parameters
    ----------
    path : str or os.PathLike
        Directory of artifacts.
    config : dict
        See :func:`config_hash`.
    name : str
        File-name prefix (letters, digits, ``_``, ``-``, ``.``).
    """
    return _check_dir(path) / f"{_check_name(name)}-{config_hash(config)}.pt"


def _model_spec(model: nn.Module) -> dict[str, Any]:
    cls = type(model).__name__
    if type(model) not in _MODELS.values():
        raise ValueError(f"model must be a OneLayerTransformer or TwoLayerTransformer, got {cls}")
    return {
        "class": cls,
        "kwargs": {k: getattr(model, k) for k in _KWARGS[cls]},
        "frozen": sorted(n for n, p in model.named_parameters() if not p.requires_grad),
    }


def _write_atomic(directory: Path, filename: str, data: bytes) -> None:
    """Write ``directory / filename`` via a temporary file in ``directory`` and a rename."""
    fd, tmp = tempfile.mkstemp(prefix=f".{filename}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, directory / filename)  # replaces a symlink, never writes through it
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise


def save_model(model: nn.Module, path: str | os.PathLike, config: Mapping[str, Any], *,
               name: str = "model") -> Path:
    """Save a model's weights and its config in the directory ``path``.

    Writes ``{name}-{hash}.pt`` (the ``state_dict``, tensors moved to the CPU) and
    ``{name}-{hash}.json`` (the config, how to rebuild the model, the weights' SHA-256),
    where ``hash = config_hash(config)``. Saving again with the same config overwrites
    both. Nothing is written outside ``path``; ``path`` itself is created if missing.

    Parameters
    ----------
    model : OneLayerTransformer or TwoLayerTransformer
    path : str or os.PathLike
        Directory to write into.
    config : dict
        What determines the weights (see :func:`config_hash`); stored verbatim in the JSON.
    name : str
        File-name prefix (letters, digits, ``_``, ``-``, ``.``; no path separators).

    Returns
    -------
    weights : pathlib.Path
        The ``.pt`` file; pass it to :func:`load_model`.

    Raises
    ------
    ValueError
        For a model of another class, a config that is not a dict of JSON values, a bad
        ``name``, or a ``path`` that exists and is not a directory.
    """
    spec = _model_spec(model)
    digest = config_hash(config)
    name = _check_name(name)
    directory = _check_dir(path)
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"path must be a directory, got the file {str(directory)!r}")
    directory.mkdir(parents=True, exist_ok=True)
    stem = f"{name}-{digest}"

    state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    buffer = io.BytesIO()
    torch.save(state, buffer)
    weights = buffer.getvalue()
    meta = {
        "format": FORMAT,
        "hash": digest,
        "config": json.loads(_canonical_json(config)),
        "model": spec,
        "weights": f"{stem}.pt",
        "sha256": hashlib.sha256(weights).hexdigest(),
        "torch": torch.__version__,
    }
    _write_atomic(directory, f"{stem}.pt", weights)
    _write_atomic(directory, f"{stem}.json", (json.dumps(meta, indent=2, sort_keys=True) + "\n").encode("ascii"))
    return directory / f"{stem}.pt"


def _meta_path(path: object) -> tuple[Path, Path]:
    if isinstance(path, bytes) or not isinstance(path, (str, os.PathLike)) or str(path) == "":
        raise ValueError(f"path must be the .pt (or .json) file written by save_model, got {path!r}")
    p = Path(path)
    if p.suffix not in (".pt", ".json"):
        raise ValueError(f"path must end in .pt or .json (a file written by save_model), got {str(p)!r}")
    return p.with_suffix(".pt"), p.with_suffix(".json")


def load_config(path: str | os.PathLike) -> dict[str, Any]:
    """The config stored beside a saved model (``path``: its ``.pt`` or ``.json`` file).

    Raises
    ------
    FileNotFoundError
        If the JSON file is missing.
    ValueError
        If it is not a topicmech artifact description.
    """
    return _read_meta(_meta_path(path)[1])["config"]


def _read_meta(json_path: Path) -> dict[str, Any]:
    try:
        meta = json.loads(json_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"path {str(json_path)!r} is not valid JSON: {err}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ValueError(f"path {str(json_path)!r} is not a {FORMAT} description")
    spec = meta.get("model")
    if (not isinstance(spec, dict) or spec.get("class") not in _MODELS or not isinstance(spec.get("kwargs"), dict)
            or set(spec["kwargs"]) != set(_KWARGS[spec["class"]]) or not isinstance(spec.get("frozen", []), list)):
        raise ValueError(f"path {str(json_path)!r} names no model this package can rebuild: {spec!r}")
    if not isinstance(meta.get("sha256"), str) or not isinstance(meta.get("config"), dict):
        raise ValueError(f"path {str(json_path)!r} lacks the weights' checksum or the config")
    return meta


def load_model(path: str | os.PathLike) -> nn.Module:
    """Load a model written by :func:`save_model`, without unpickling anything but tensors.

    Parameters
    ----------
    path : str or os.PathLike
        The ``.pt`` file (or the ``.json`` beside it).

    Returns
    -------
    model : OneLayerTransformer or TwoLayerTransformer
        Rebuilt from the stored constructor arguments, with the saved weights and the same
        frozen matrices, on the CPU. The config is available from :func:`load_config`.

    Raises
    ------
    FileNotFoundError
        If the ``.pt`` or ``.json`` file is missing.
    ValueError
        If the checksum does not match (a changed or swapped file), the file holds anything
        but tensors, or the weights do not fit the model described in the JSON.
    """
    pt_path, json_path = _meta_path(path)
    meta = _read_meta(json_path)
    data = pt_path.read_bytes()
    if hashlib.sha256(data).hexdigest() != meta["sha256"]:
        raise ValueError(f"path {str(pt_path)!r} does not match the checksum in {json_path.name}; "
                         "the file was changed or replaced")
    try:
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as err:  # weights_only refuses every non-tensor global
        raise ValueError(f"path {str(pt_path)!r} is not a weights-only state dict: {err}") from None
    if not isinstance(state, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                              for k, v in state.items()):
        raise ValueError(f"path {str(pt_path)!r} must hold a dict of tensors")
    spec = meta["model"]
    try:
        model = _MODELS[spec["class"]](**spec["kwargs"])
    except (TypeError, ValueError) as err:
        raise ValueError(f"path {str(json_path)!r} describes a {spec['class']} that cannot be built: {err}") from None
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as err:
        raise ValueError(f"path {str(pt_path)!r} does not fit {spec['class']}({spec['kwargs']}): {err}") from None
    params = dict(model.named_parameters())
    for n in spec.get("frozen", []):
        if n not in params:
            raise ValueError(f"path {str(json_path)!r} freezes an unknown parameter {n!r}")
        params[n].requires_grad_(False)
    return model
