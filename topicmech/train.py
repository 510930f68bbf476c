"""Training loop for masked language modelling on topic-model data.

Book: chapter 2 runs the first training; chapters 3-7 call :func:`train` with other
switches. The loss is computed only at selected positions; masks are drawn afresh
every step; L2 is a real penalty ``l2 * sum ||W||_F^2`` over the trained matrices.

:func:`train` takes a fast path by itself for the one-layer model (see
:mod:`topicmech.fast`); the model's forward pass and :func:`mlm_loss` remain the
reference, used for every other model and with ``path="reference"``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .data import TopicModel, bert_mask, check_docs
from .utils import check_masking, check_positive_int, make_generator

__all__ = ["History", "mlm_loss", "train", "make_optimizer"]

LossKind = Literal["squared", "cross_entropy"]
Probe = Callable[[nn.Module], "float | torch.Tensor | np.ndarray"]


@dataclass
class History:
    """What :func:`train` records.

    Attributes
    ----------
    step : list of int
        Steps at which the training loss was logged (1-based).
    loss : list of float
        Training loss of the minibatch at those steps (without the L2 term).
    probe_step : list of int
        Steps at which probes ran (0 = before training).
    probes : dict of str to list
        One list per probe, aligned with ``probe_step``; tensors are stored as NumPy arrays.
    """

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
        """Running mean of the logged loss over ``window`` entries, shape ``(len(loss),)``."""
        window = check_positive_int("window", window)
        x = np.asarray(self.loss, dtype=float)
        if len(x) == 0:
            return x
        w = max(1, min(window, len(x)))
        c = np.cumsum(np.insert(x, 0, 0.0))
        out = np.empty_like(x)
        out[w - 1 :] = (c[w:] - c[:-w]) / w
        out[: w - 1] = c[1:w] / np.arange(1, w)
        return out


def mlm_loss(logits: torch.Tensor, targets: torch.Tensor, selected: torch.Tensor, kind: LossKind = "squared") -> torch.Tensor:
    """Masked-language-modelling loss at the selected positions only.

    Parameters
    ----------
    logits : Tensor, shape (batch, N, D)
    targets : LongTensor, shape (batch, N)
        The true (uncorrupted) words.
    selected : BoolTensor, shape (batch, N)
    kind : {"squared", "cross_entropy"}
        ``"squared"``: ``||f - e_y||^2`` summed over the ``D`` coordinates, the theory's
        loss; ``"cross_entropy"``: softmax cross-entropy over the ``D`` tokens.

    Returns
    -------
    loss : scalar Tensor
        Mean over selected positions (0 if none is selected).

    Raises
    ------
    ValueError
        For an unknown ``kind``, mismatched shapes, a ``selected`` that is not boolean
        (an integer 0/1 mask would index batch rows instead of positions), or targets
        outside ``[0, D)``.
    """
    if kind not in ("squared", "cross_entropy"):
        raise ValueError(f"kind must be 'squared' or 'cross_entropy', got {kind!r}")
    if not isinstance(logits, torch.Tensor) or logits.dim() != 3:
        raise ValueError(f"logits must be a tensor of shape (batch, N, D), got shape {tuple(getattr(logits, 'shape', ()))}")
    if not isinstance(selected, torch.Tensor) or selected.dtype != torch.bool:
        raise ValueError(f"selected must be a BoolTensor, got dtype {getattr(selected, 'dtype', type(selected).__name__)}")
    if tuple(selected.shape) != tuple(logits.shape[:2]):
        raise ValueError(f"selected must have shape {tuple(logits.shape[:2])}, got {tuple(selected.shape)}")
    if (not isinstance(targets, torch.Tensor) or targets.dtype.is_floating_point or targets.dtype.is_complex
            or targets.dtype == torch.bool):
        raise ValueError(f"targets must be a LongTensor of token ids, got {getattr(targets, 'dtype', type(targets).__name__)}")
    if tuple(targets.shape) != tuple(logits.shape[:2]):
        raise ValueError(f"targets must have shape {tuple(logits.shape[:2])}, got {tuple(targets.shape)}")
    D = logits.shape[-1]
    if targets.numel() and (int(targets.min()) < 0 or int(targets.max()) >= D):
        raise ValueError(f"targets hold ids outside [0, {D}): min {int(targets.min())}, max {int(targets.max())}")
    targets = targets.long()
    f = logits[selected]                                                        # (n_sel, D)
    y = targets[selected]                                                       # (n_sel,)
    if f.shape[0] == 0:
        return logits.sum() * 0.0
    if kind == "squared":
        # ||f - e_y||^2 = ||f||^2 - 2 f_y + 1
        return (f.pow(2).sum(-1) - 2 * f.gather(1, y[:, None]).squeeze(1) + 1).mean()
    return F.cross_entropy(f, y)


def make_optimizer(params: list[nn.Parameter], optimizer: str, lr: float) -> torch.optim.Optimizer:
    """``"sgd"`` (plain, no momentum) or ``"adam"``, with learning rate ``lr``."""
    if optimizer == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if optimizer == "adam":
        return torch.optim.Adam(params, lr=lr)
    raise ValueError(f"optimizer must be 'sgd' or 'adam', got {optimizer!r}")


def _record(history: History, model: nn.Module, probes: Mapping[str, Probe], step: int) -> None:
    history.probe_step.append(step)
    with torch.no_grad():
        for name, fn in probes.items():
            value = fn(model)
            # copy: a probe that returns a parameter (or a view of one) would otherwise record
            # an array sharing memory with the weights, and every entry would show the final value
            if isinstance(value, torch.Tensor):
                value = value.detach().cpu().clone().numpy()
            elif isinstance(value, np.ndarray):
                value = value.copy()
            history.probes.setdefault(name, []).append(value)


def train(
    model: nn.Module,
    data: TopicModel | torch.Tensor,
    *,
    steps: int,
    batch_size: int = 64,
    doc_len: int | None = None,
    loss: LossKind = "squared",
    optimizer: Literal["sgd", "adam"] = "sgd",
    lr: float | None = None,
    l2: float = 0.0,
    mask_prob: float = 0.15,
    keep_prob: float = 0.1,
    random_prob: float = 0.1,
    seed: int = 0,
    probes: Mapping[str, Probe] | None = None,
    probe_every: int | None = None,
    progress: bool = False,
    lengths: torch.Tensor | None = None,
    check_every: int | None = None,
    path: Literal["auto", "fast", "reference"] = "auto",
) -> History:
    """Train ``model`` by masked language modelling.

    Parameters
    ----------
    model : OneLayerTransformer or TwoLayerTransformer
        Only tensors with ``requires_grad`` are trained.
    data : TopicModel or LongTensor of shape (num_docs, N)
        A topic model draws ``batch_size`` fresh documents of length ``doc_len`` every step
        (the population loss); a tensor of documents is resampled with replacement.
    steps : int
        Optimisation steps.
    batch_size : int
        Documents per step.
    doc_len : int, optional
        ``N``; required when ``data`` is a topic model.
    loss : {"squared", "cross_entropy"}
        See :func:`mlm_loss`.
    optimizer : {"sgd", "adam"}
        Plain SGD or Adam (``torch.optim``).
    lr : float, optional
        Learning rate; defaults to 1.0 for SGD and 1e-2 for Adam.
    l2 : float
        Weight of the penalty ``sum ||W||_F^2`` over trained matrices.
    mask_prob, keep_prob, random_prob : float
        BERT corruption, drawn afresh every step (see :func:`topicmech.data.bert_mask`).
    seed : int
        Seed for documents and masks.
    probes : dict of str to callable, optional
        Functions of the model evaluated (without gradients) before training, every
        ``probe_every`` steps and at the end.
    probe_every : int, optional
        Defaults to ``max(1, steps // 50)``.
    progress : bool
        Show a tqdm progress bar.
    lengths : LongTensor of shape (num_docs,), optional
        Only with a tensor ``data`` and a fast path: document ``i`` has ``lengths[i]`` real
        tokens and the rest of its row is padding, never a key and never selected.
    check_every : int, optional
        Check the loss for NaN/inf every ``check_every`` steps and at the end (one
        synchronisation per check). Defaults to 100 on the uniform-attention path and to
        every step otherwise.
    path : {"auto", "fast", "reference"}
        ``"auto"`` takes a fast path whenever one applies (:func:`topicmech.fast.fast_path`):
        a :class:`~topicmech.model.OneLayerTransformer` with uniform attention trains on
        per-document statistics, one with learned attention computes the loss at the selected
        queries only (:func:`topicmech.fast.selected_loss`). ``"reference"`` always calls the
        model's forward pass and :func:`mlm_loss`; ``"fast"`` raises if no fast path applies.
        All paths draw the same documents and masks for the same seed and agree up to
        floating-point rounding.

    Returns
    -------
    History

    Raises
    ------
    FloatingPointError
        If the loss becomes NaN or infinite (lower the learning rate).
    """
    steps = check_positive_int("steps", steps)
    batch_size = check_positive_int("batch_size", batch_size)
    p_m, p_c, p_r = check_masking(mask_prob, keep_prob, random_prob)
    if loss not in ("squared", "cross_entropy"):
        raise ValueError(f"loss must be 'squared' or 'cross_entropy', got {loss!r}")
    if optimizer not in ("sgd", "adam"):
        raise ValueError(f"optimizer must be 'sgd' or 'adam', got {optimizer!r}")
    if lr is None:
        lr = {"sgd": 1.0, "adam": 1e-2}.get(optimizer, 0.0)
    if isinstance(lr, bool) or not (isinstance(lr, (int, float)) and lr > 0 and math.isfinite(lr)):
        raise ValueError(f"lr must be a positive float, got {lr!r}")
    if isinstance(l2, bool) or not (isinstance(l2, (int, float)) and l2 >= 0 and math.isfinite(l2)):
        raise ValueError(f"l2 must be a float >= 0, got {l2!r}")
    if not isinstance(model, nn.Module) or not isinstance(getattr(model, "num_tokens", None), int):
        raise ValueError(f"model must be a OneLayerTransformer or TwoLayerTransformer, got {type(model).__name__}")
    if probes is not None and (not isinstance(probes, Mapping)
                               or not all(isinstance(k, str) and callable(f) for k, f in probes.items())):
        raise ValueError(f"probes must map names (str) to functions of the model, got {probes!r}")
    if path not in ("auto", "fast", "reference"):
        raise ValueError(f"path must be 'auto', 'fast' or 'reference', got {path!r}")
    from . import fast  # fast imports this module: import it here, not at the top

    route = None if path == "reference" else fast.fast_path(model)
    if path == "fast" and route is None:
        raise ValueError(f"path='fast' needs a OneLayerTransformer without forward hooks, got {type(model).__name__}")
    if check_every is not None:
        check_every = check_positive_int("check_every", check_every)
    else:
        check_every = 100 if route == "uniform" else 1
    vocab_size = model.num_tokens - 1
    if isinstance(data, TopicModel):
        if doc_len is None:
            raise ValueError("doc_len is required when data is a topic model")
        if lengths is not None:
            raise ValueError("lengths is only for a tensor of documents, not a topic model")
        doc_len = check_positive_int("doc_len", doc_len)
        if data.num_tokens != model.num_tokens:
            raise ValueError(f"model has num_tokens={model.num_tokens} but the topic model has {data.num_tokens}")
    else:
        data = check_docs(data, vocab_size, name="data")
        if data.shape[0] == 0 or data.shape[1] == 0:
            raise ValueError(f"data must hold at least one document of at least one token, got shape {tuple(data.shape)}")
        doc_len = data.shape[1]
        if lengths is not None:
            if route is None:
                raise ValueError("lengths (padded documents) needs a fast path: a OneLayerTransformer and "
                                 "path='auto' or 'fast'")
            lengths = fast._check_lengths(lengths, data.shape[0], doc_len)
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("model has no trainable parameters (everything is frozen)")
    # the fast paths run torch.optim's kernels without the optimiser classes (see fast.TorchOptimKernels)
    opt = make_optimizer(params, optimizer, lr) if route is None else fast.TorchOptimKernels(params, optimizer, lr)
    probes = dict(probes or {})
    probe_every = max(1, steps // 50) if probe_every is None else check_positive_int("probe_every", probe_every)
    gen = make_generator(seed)
    device = next(iter(params)).device
    on_device = device.type != "cpu"
    history = History()
    _record(history, model, probes, 0)

    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=steps, desc="train", leave=False)
    try:
        if route == "uniform":
            fast._train_uniform_chunks(
                model, data, params=params, opt=opt, steps=steps, batch_size=batch_size, doc_len=doc_len,
                lengths=lengths, loss=loss, l2=float(l2), mask_prob=p_m, keep_prob=p_c, random_prob=p_r, gen=gen,
                probes=probes, probe_every=probe_every, check_every=check_every, lr=lr, history=history, bar=bar)
            return history
        arange = torch.arange(doc_len)
        losses: list[torch.Tensor] = []
        checked = 0
        for step in range(1, steps + 1):
            if isinstance(data, TopicModel):
                docs = data.sample(batch_size, doc_len, gen)                        # (B, N)
            else:
                idx = torch.randint(len(data), (batch_size,), generator=gen)        # (B,)
                docs = data[idx]                                                    # (B, N)
            inputs, selected = bert_mask(docs, vocab_size, mask_prob, keep_prob, random_prob, gen)
            valid = None if lengths is None else arange[None, :] < lengths[idx][:, None]  # (B, N)
            if on_device:  # data and masks are drawn on the CPU (one random stream on every device)
                docs, inputs, selected = (t.to(device, non_blocking=True) for t in (docs, inputs, selected))
                valid = None if valid is None else valid.to(device, non_blocking=True)
            if route == "learned":
                value = fast.selected_loss(model, inputs, docs, selected, loss, valid=valid)
            else:
                logits = model(inputs, selected)                                    # (B, N, D)
                value = mlm_loss(logits, docs, selected, loss)
            total = value + l2 * sum(p.pow(2).sum() for p in params) if l2 > 0 else value
            if check_every == 1 and not torch.isfinite(total):
                raise FloatingPointError(
                    f"non-finite loss {float(total.detach())} at step {step}; lower the learning rate (lr={lr})"
                )
            opt.zero_grad(set_to_none=True)
            total.backward()
            opt.step()
            history.step.append(step)
            history.loss.append(value.detach())
            if check_every > 1:  # deferred check: no synchronisation with the device every step
                losses.append(total.detach())
            if check_every > 1 and (step % check_every == 0 or step == steps or (probes and step % probe_every == 0)):
                seg = torch.stack(losses[checked:step])
                bad = ~torch.isfinite(seg)
                if bool(bad.any()):
                    first = int(bad.nonzero()[0, 0])
                    raise FloatingPointError(f"non-finite loss {float(seg[first])} at step {checked + first + 1}; "
                                             f"lower the learning rate (lr={lr})")
                checked = step
            if probes and (step % probe_every == 0 or step == steps):
                _record(history, model, probes, step)
            if bar is not None:
                bar.update(1)
        history.loss = torch.stack(history.loss).tolist()
    finally:
        if bar is not None:
            bar.close()
    return history
