"""Masked-language-modelling training: the loss at the selected positions only, fresh masks every
step, an L2 penalty ``l2 sum ||W||_F^2`` over the trained matrices. :func:`train` is the one
training loop; it takes a fast path of :mod:`topicmech.fast` when one applies, and the model's
forward pass with :func:`topicmech.losses.mlm_loss` is the reference.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
from torch import nn

from . import fast
from .data import TopicModel, check_docs, corrupt
from .losses import LOSS_KINDS, LossKind, mlm_loss
from .setting import BERT_MASKING, Masking, Setting
from .utils import check_choice, check_float, check_positive_int, check_seed, make_generator, spawn_seeds

__all__ = ["History", "check_phases", "train", "train_uniform"]

Probe = Callable[[nn.Module], "float | torch.Tensor | np.ndarray"]


@dataclass
class History:
    """What :func:`train` records: ``step`` (from 1) and the minibatch ``loss`` there (without L2);
    ``probe_step`` (0 = before training) and ``probes``, one list per probe aligned with it
    (tensors stored as NumPy arrays)."""

    step: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    probe_step: list[int] = field(default_factory=list)
    probes: dict[str, list] = field(default_factory=dict)

    def probe(self, name: str) -> np.ndarray:
        """One probe's values as an array, shape ``(num_probe_steps, ...)``."""
        if name not in self.probes:
            raise ValueError(f"no probe named {name!r}; recorded: {sorted(self.probes)}")
        return np.asarray(self.probes[name])

    def smoothed_loss(self, window: int = 50) -> np.ndarray:
        """Running mean of the loss over ``window`` entries (fewer at the start), shape ``(len(loss),)``."""
        window = check_positive_int("window", window)
        x = np.asarray(self.loss, dtype=float)
        if len(x) == 0:
            return x
        w = min(window, len(x))
        c = np.cumsum(np.insert(x, 0, 0.0))
        out = np.empty_like(x)
        out[w - 1 :] = (c[w:] - c[:-w]) / w
        out[: w - 1] = c[1:w] / np.arange(1, w)
        return out


def _record(history: History, model: nn.Module, probes: Mapping[str, Probe], step: int) -> None:
    history.probe_step.append(step)
    with torch.no_grad():
        for name, fn in probes.items():
            value = fn(model)
            # copy: a probe returning a parameter (or a view) would otherwise record the final weights
            if isinstance(value, torch.Tensor):
                value = value.detach().cpu().clone().numpy()
            elif isinstance(value, np.ndarray):
                value = value.copy()
            history.probes.setdefault(name, []).append(value)


def _batches(data: TopicModel | torch.Tensor, steps: int, batch_size: int, doc_len: int,
             lengths: torch.Tensor | None, masking: Masking, gen: torch.Generator,
             vocab_size: int, device: torch.device) -> Iterator[tuple[torch.Tensor, ...]]:
    """``(docs, inputs, selected, valid)`` of each step, drawn on the CPU (one random stream everywhere)."""
    arange = torch.arange(doc_len)
    for _ in range(steps):
        if isinstance(data, TopicModel):
            docs = data.sample(batch_size, doc_len, gen)                            # (B, N)
        else:
            idx = torch.randint(len(data), (batch_size,), generator=gen)            # (B,)
            docs = data[idx]                                                        # (B, N)
        sel_u, branch = torch.rand(docs.shape, generator=gen), torch.rand(docs.shape, generator=gen)
        words = torch.randint(vocab_size, docs.shape, generator=gen)                # bert_mask's three draws
        inputs, selected = corrupt(docs, sel_u, branch, words, vocab_size,
                                   masking.mask_prob, masking.keep_prob, masking.random_prob)
        valid = None if lengths is None else arange[None, :] < lengths[idx][:, None]  # (B, N)
        batch = (docs, inputs, selected, valid)
        if device.type != "cpu":
            batch = tuple(None if t is None else t.to(device, non_blocking=True) for t in batch)
        yield batch


def _fixed_mask_batches(docs: torch.Tensor, masks: tuple[torch.Tensor, torch.Tensor], steps: int, batch_size: int,
                        sampling: str, gen: torch.Generator,
                        device: torch.device) -> Iterator[tuple[torch.Tensor, ...]]:
    """``(docs, inputs, selected, None)`` of each step from masks drawn once per document: rows
    resampled with replacement, or shuffled epochs (a fresh permutation each epoch, the last
    batch of an epoch smaller when ``batch_size`` does not divide the number of documents)."""
    inputs, selected = masks
    done = 0
    while done < steps:
        if sampling == "replacement":
            order = [torch.randint(len(docs), (batch_size,), generator=gen)]
        else:
            order = torch.randperm(len(docs), generator=gen).split(batch_size)
        for idx in order:
            batch = (docs[idx], inputs[idx], selected[idx], None)
            if device.type != "cpu":
                batch = tuple(None if t is None else t.to(device, non_blocking=True) for t in batch)
            yield batch
            done += 1
            if done == steps:
                return


def _check_masks(masks: object, docs: torch.Tensor, num_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    if not (isinstance(masks, tuple) and len(masks) == 2):
        raise ValueError(f"masks must be a tuple (inputs, selected) of the shape of data, got {type(masks).__name__}")
    inputs = check_docs(masks[0], num_tokens, name="masks[0] (inputs)")
    selected = masks[1]
    if tuple(inputs.shape) != tuple(docs.shape) or not isinstance(selected, torch.Tensor) \
            or selected.dtype != torch.bool or tuple(selected.shape) != tuple(docs.shape):
        raise ValueError(f"masks must be (inputs, selected): a LongTensor and a BoolTensor of shape "
                         f"{tuple(docs.shape)}, got {tuple(inputs.shape)} and {type(selected).__name__} "
                         f"{tuple(getattr(selected, 'shape', ()))}")
    return inputs, selected


def check_phases(phases: object, name: str = "phases") -> tuple[tuple[int, float], ...]:
    """Raise ``ValueError`` naming ``name`` unless ``phases`` is a non-empty sequence of ``(steps, lr)``
    pairs with int ``steps >= 1`` and finite ``lr > 0``; return it as a tuple of ``(int, float)`` pairs."""
    bad = ValueError(f"{name} must be a non-empty sequence of (steps, lr) pairs, steps >= 1 and lr > 0, got {phases!r}")
    try:
        pairs = [tuple(p) for p in phases]  # type: ignore[union-attr]
        out = tuple((int(steps), float(lr)) for steps, lr in pairs)
    except (TypeError, ValueError):
        raise bad from None
    if not out or any(isinstance(s, bool) or not isinstance(s, (int, np.integer)) for s, _ in pairs) \
            or any(isinstance(lr, (bool, str, bytes)) for _, lr in pairs) \
            or any(s < 1 or not (math.isfinite(lr) and lr > 0) for s, lr in out):
        raise bad
    return out


def _phase_seeds(seed: object, num_phases: int) -> list[int]:
    """One data seed per phase: a sequence of ``num_phases`` seeds as given, or
    :func:`~topicmech.utils.spawn_seeds` of an int."""
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        return spawn_seeds(int(seed), num_phases)
    if isinstance(seed, (str, bytes)) or not isinstance(seed, Sequence) or len(seed) != num_phases:
        raise ValueError(f"seed must be an int or a sequence of {num_phases} ints (one per phase), got {seed!r}")
    return [check_seed(s) for s in seed]


def _from_setting(setting: object, model: object, data: object, doc_len: object,
                  masking: object) -> tuple[int, Masking]:
    """``(doc_len, masking)`` from ``setting``, after checking it against the other arguments."""
    if not isinstance(setting, Setting):
        raise ValueError(f"setting must be a topicmech.Setting, got {setting!r}")
    if math.isinf(setting.N):
        raise ValueError(f"training needs a finite setting.doc_len, got {setting.N!r}")
    if doc_len is not None and doc_len != setting.N:
        raise ValueError(f"doc_len={doc_len!r} disagrees with setting.doc_len={setting.N!r}")
    if masking is not BERT_MASKING and masking != setting.masking:
        raise ValueError(f"masking={masking!r} disagrees with setting.masking={setting.masking!r}")
    for name, want in (("num_tokens", setting.D), ("attend_to_masked", setting.attend_to_masked)):
        have = getattr(model, name, None)
        if have is not None and have != want:
            raise ValueError(f"model.{name}={have!r} disagrees with the setting's {want!r}")
    if isinstance(data, torch.Tensor) and data.ndim == 2 and data.shape[1] != setting.N:
        raise ValueError(f"data has documents of length {data.shape[1]}, but setting.doc_len={setting.N!r}")
    return setting.N, setting.masking


def train(model: nn.Module, data: TopicModel | torch.Tensor, *, steps: int | None = None, lr: float | None = None,
          phases: Sequence[tuple[int, float]] | None = None, batch_size: int = 64,
          doc_len: int | None = None, loss: LossKind = "squared", optimizer: Literal["sgd", "adam"] = "sgd",
          l2: float = 0.0, masking: Masking = BERT_MASKING, seed: int | Sequence[int] = 0,
          probes: Mapping[str, Probe] | None = None,
          probe_every: int | None = None, progress: bool = False, lengths: torch.Tensor | None = None,
          check_every: int | None = None, path: Literal["auto", "fast", "reference"] = "auto",
          masks: tuple[torch.Tensor, torch.Tensor] | None = None,
          sampling: Literal["replacement", "epochs"] = "replacement",
          setting: Setting | None = None) -> History:
    """Train the tensors with ``requires_grad`` of ``model`` by masked language modelling.

    Parameters
    ----------
    model : OneLayerTransformer or TwoLayerTransformer
        Trained in place; its frozen matrices (buffers, or ``requires_grad=False``) stay fixed.
    data : TopicModel or LongTensor of shape (num_docs, N)
        A topic model draws ``batch_size`` fresh documents of length ``doc_len`` every step;
        a tensor of documents is resampled with replacement.
    steps : int, optional
        One phase of ``steps`` steps (give ``steps`` or ``phases``).
    lr : float, optional
        The learning rate of that phase (default 1.0 for SGD, 1e-2 for Adam).
    phases : sequence of (steps, lr), optional
        Instead of ``steps`` and ``lr``: a piecewise-constant (step-decayed) schedule, the
        phases run one after the other, each with a fresh optimizer (fresh Adam moments) and
        its own data seed; steps are numbered across phases (see :func:`check_phases`).
    batch_size : int
        Documents per step.
    doc_len : int, optional
        ``N``, the length of the documents a topic model draws (required with a topic model,
        unless ``setting`` gives it; unused with a tensor, whose width is ``N``).
    loss : {"squared", "cross_entropy"}
        The per-position loss at the selected positions (:func:`topicmech.losses.mlm_loss`).
    optimizer : {"sgd", "adam"}
        Plain SGD or Adam (``torch.optim``'s arithmetic).
    l2 : float
        The penalty ``l2 sum ||W||_F^2`` over the trained matrices (>= 0).
    masking : Masking
        BERT corruption (default :data:`~topicmech.setting.BERT_MASKING`), drawn afresh every
        step with the documents from ``seed``.
    seed : int or sequence of int
        Seeds the documents and masks. With ``phases``, one seed per phase, or an int from
        which they are spawned (:func:`topicmech.utils.spawn_seeds`).
    probes : dict of str to callable, optional
        Functions of the model recorded before training, every ``probe_every`` steps of a phase
        and at the end of each phase.
    probe_every : int, optional
        The probe interval (default ``max(1, steps // 50)`` of each phase).
    progress : bool
        Show a progress bar (``tqdm``).
    lengths : LongTensor of shape (num_docs,), optional
        Real lengths of padded tensor ``data`` (fast paths only); the rest is never a key or selected.
    check_every : int, optional
        Check the loss for NaN/inf every ``check_every`` steps of a phase and at its end (default
        100 on the uniform-attention path, else 1); ``FloatingPointError`` if it is not finite.
    path : {"auto", "fast", "reference"}
        ``"auto"`` takes a fast path when one applies (:func:`topicmech.fast.fast_path`),
        ``"fast"`` raises if none does, ``"reference"`` always uses the model's forward pass and
        :func:`topicmech.losses.mlm_loss`. All draw the same documents and masks and agree up to rounding.
    masks : (inputs, selected), optional
        With a tensor ``data``: corrupted inputs (ids in ``[0, num_tokens)``) and selections, one
        row per document, drawn once (as the released code does) instead of fresh every step;
        ``masking`` is then unused. Runs on the reference path, or the learned-attention fast path.
    sampling : {"replacement", "epochs"}
        How a tensor ``data`` is batched: resampled with replacement every step, or (with
        ``masks``) in shuffled epochs, each document once per epoch, like
        ``torch.utils.data.DataLoader(shuffle=True)``.
    setting : Setting, optional
        Supplies ``doc_len = setting.N`` (which must be finite) and
        ``masking = setting.masking``, and is checked against the model (``num_tokens == setting.D``,
        ``attend_to_masked == setting.attend_to_masked``) and a tensor ``data`` (width
        ``setting.N``). ``doc_len`` or ``masking`` given as well must agree with it; any
        disagreement raises ``ValueError`` naming both values.

    Returns
    -------
    History
        The loss of every step and the probes' records.
    """
    if setting is not None:
        doc_len, masking = _from_setting(setting, model, data, doc_len, masking)
    check_choice("optimizer", optimizer, ("sgd", "adam"))
    if phases is None:
        if steps is None:
            raise ValueError("train needs steps (and optionally lr) or phases=[(steps, lr), ...], got neither")
        phases = ((check_positive_int("steps", steps),
                   check_float("lr", {"sgd": 1.0, "adam": 1e-2}[optimizer] if lr is None else lr)),)
        seeds = [seed]
    else:
        if steps is not None or lr is not None:
            raise ValueError(f"phases replaces steps and lr: give one or the other, got phases={phases!r}, "
                             f"steps={steps!r}, lr={lr!r}")
        phases = check_phases(phases)
        seeds = _phase_seeds(seed, len(phases))
    batch_size = check_positive_int("batch_size", batch_size)
    if not isinstance(masking, Masking):
        raise ValueError(f"masking must be a topicmech.Masking, got {masking!r}")
    check_choice("loss", loss, LOSS_KINDS)
    l2 = check_float("l2", l2, positive=False)
    if not isinstance(model, nn.Module) or not isinstance(getattr(model, "num_tokens", None), int):
        raise ValueError(f"model must be a OneLayerTransformer or TwoLayerTransformer, got {type(model).__name__}")
    if probes is not None and (not isinstance(probes, Mapping)
                               or not all(isinstance(k, str) and callable(f) for k, f in probes.items())):
        raise ValueError(f"probes must map names (str) to functions of the model, got {probes!r}")
    check_choice("sampling", sampling, ("replacement", "epochs"))
    if sampling == "epochs" and masks is None:
        raise ValueError("sampling='epochs' needs masks=(inputs, selected) drawn once per document")
    if masks is not None and (isinstance(data, TopicModel) or lengths is not None):
        raise ValueError("masks needs a tensor of documents as data and takes no lengths")
    route = None if check_choice("path", path, ("auto", "fast", "reference")) == "reference" else fast.fast_path(model)
    if masks is not None and route == "uniform":  # the uniform fast path draws its own masks
        route = None
    if path == "fast" and route is None:
        raise ValueError(f"path='fast' needs a OneLayerTransformer without forward hooks, "
                         f"released-code switches with uniform attention, or masks, got {type(model).__name__}")
    if check_every is None:
        check_every = 100 if route == "uniform" else 1
    check_every = check_positive_int("check_every", check_every)
    if isinstance(data, TopicModel):
        if doc_len is None or lengths is not None:
            raise ValueError("a topic model as data needs doc_len and takes no lengths")
        doc_len = check_positive_int("doc_len", doc_len)
        if data.num_tokens != model.num_tokens:
            raise ValueError(f"model has num_tokens={model.num_tokens} but the topic model has {data.num_tokens}")
    else:
        data = check_docs(data, model.num_tokens - 1, name="data")
        if data.shape[0] == 0 or data.shape[1] == 0:
            raise ValueError(f"data must hold at least one document of at least one token, got shape {tuple(data.shape)}")
        doc_len = data.shape[1]
        if masks is not None:
            masks = _check_masks(masks, data, model.num_tokens)
        if lengths is not None:
            if route is None:
                raise ValueError("lengths (padded documents) needs a fast path: a OneLayerTransformer, path 'auto'/'fast'")
            lengths = fast.check_lengths(lengths, data.shape[0], doc_len)
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("model has no trainable parameters (everything is frozen)")
    probes = dict(probes or {})
    if probe_every is not None:
        probe_every = check_positive_int("probe_every", probe_every)
    closed_form = route == "uniform" and fast.is_value_only(model, params)

    def loss_of(*batch: torch.Tensor) -> torch.Tensor:
        if route == "uniform":
            xbar, Y, n, n_total = batch
            return fast.uniform_loss(fast.logits_from_xbar(model, xbar), Y, n, loss, n_total)
        docs, inputs, selected, valid = batch
        if route == "learned":
            return fast.selected_loss(model, inputs, docs, selected, loss, valid=valid, check=False)
        return mlm_loss(model(inputs, selected), docs, selected, loss, check=False)

    history = History()
    _record(history, model, probes, 0)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=sum(n for n, _ in phases), desc="train", leave=False)
    offset = 0
    try:
        for (steps, lr), seed in zip(phases, seeds):
            # a fresh optimizer and data stream per phase: torch.optim's kernels without its classes
            # (see fast.TorchOptimKernels); the general path keeps the default (unfused) Adam's arithmetic
            opt = fast.TorchOptimKernels(params, optimizer, lr, fused=route is not None)
            every = max(1, steps // 50) if probe_every is None else probe_every
            gen, device = make_generator(seed), params[0].device
            if masks is not None:
                batches = _fixed_mask_batches(data, masks, steps, batch_size, sampling, gen, device)
            elif route == "uniform":
                batches = fast.uniform_batches(model, data, steps, batch_size, doc_len, lengths, masking, gen,
                                               params[0].dtype, device)
            else:
                batches = _batches(data, steps, batch_size, doc_len, lengths, masking, gen, model.num_tokens - 1,
                                   device)
            losses: list[torch.Tensor] = []
            totals: list[torch.Tensor] = []  # loss + L2, checked for NaN/inf
            checked = 0
            for step, batch in enumerate(batches, 1):
                if closed_form:
                    with torch.no_grad():
                        value, total, params[0].grad = fast.value_step(params[0], *batch, loss, l2)
                else:
                    value = loss_of(*batch)
                    total = value + l2 * sum(p.pow(2).sum() for p in params) if l2 > 0 else value
                    opt.zero_grad(set_to_none=True)
                    total.backward()
                    value, total = value.detach(), total.detach()
                losses.append(value)
                totals.append(total)
                # checked before the update; check_every > 1 saves a synchronisation with the device per step
                if step % check_every == 0 or step == steps or (probes and step % every == 0):
                    seg = torch.stack(totals[checked:step])
                    bad = ~torch.isfinite(seg)
                    if bool(bad.any()):
                        first = int(bad.nonzero()[0, 0])
                        raise FloatingPointError(f"non-finite loss {float(seg[first])} at step "
                                                 f"{offset + checked + first + 1}; lower the learning rate (lr={lr})")
                    checked = step
                opt.step()
                if probes and (step % every == 0 or step == steps):
                    _record(history, model, probes, offset + step)
                if bar is not None:
                    bar.update(1)
            history.loss.extend(torch.stack(losses).tolist())
            offset += steps
    finally:
        if bar is not None:
            bar.close()
    history.step = list(range(1, offset + 1))
    return history

def train_uniform(model: nn.Module, data: TopicModel | torch.Tensor, **kwargs: object) -> History:
    """:func:`train` with ``path="fast"`` for a uniform-attention
    :class:`~topicmech.model.OneLayerTransformer` (``ValueError`` for any other model); same
    keyword arguments and result."""
    if fast.fast_path(model) != "uniform":
        raise ValueError("model must be a OneLayerTransformer with attention='uniform' and no forward hooks "
                         f"(use topicmech.train.train otherwise), got {type(model).__name__}")
    return train(model, data, path="fast", **kwargs)
