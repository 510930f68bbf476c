"""A fast training path for frozen uniform attention, and variable-length documents.

Book: the performance page (*Performance*) benchmarks this module against the
authors' released code; chapters may call :func:`train_uniform` wherever they train a
:class:`~topicmech.model.OneLayerTransformer` with ``attention="uniform"``.

Why a separate path
-------------------
With ``W_K = W_Q = 0`` every query of a document sees the same average of its visible
keys, ``xbar`` (shape ``(D,)``), so every position of the document gets the same logits
``z = W_U W_V W_E xbar``. The masked-language-modelling loss at the selected positions of
one document therefore depends on the document only through three numbers per token id:

* ``xbar``: the mean of the visible (key) tokens,
* ``Y``: how often each word is a target (a selected position's true word),
* ``n``: how many positions are selected;

cross-entropy is ``sum_b (n_b logsumexp(z_b) - Y_b . z_b) / sum_b n_b`` and the squared
loss is ``sum_b (n_b ||z_b||^2 - 2 Y_b . z_b + n_b) / sum_b n_b``. The general loop
(:func:`topicmech.train.train`) forms ``(batch, N, D)`` logits and back-propagates through
them; this path works on ``(batch, D)`` tensors, computes ``xbar``, ``Y`` and ``n`` for
many steps at once (they do not depend on the parameters), and leaves only a few small
matrix operations and the optimiser step inside the per-step loop.

Same random stream as the general loop
--------------------------------------
:func:`train_uniform` draws documents and masks from the generator in exactly the order
:func:`topicmech.train.train` does (document indices, then :func:`~topicmech.data.bert_mask`'s
three draws, step after step), so for the same seed it sees the same batches and masks
and ends at the same parameters up to floating-point rounding (tested).

Variable-length documents
-------------------------
The model has no padding token. Documents of different lengths are stored right-padded in
one ``(num_docs, N_max)`` tensor with a ``lengths`` vector (:func:`sample_variable_length`,
:func:`pad_documents`); padded positions are never keys (they do not enter ``xbar``) and
never selected (they are not in the loss), so a padded document trains exactly like the
same document on its own.
"""

from __future__ import annotations

import math
from typing import Literal, Mapping, Sequence

import numpy as np
import torch
from torch import nn

from .data import TopicModel, check_docs
from .train import History, LossKind, Probe, _record
from .utils import check_masking, check_positive_int, make_generator

__all__ = [
    "train_uniform",
    "uniform_loss",
    "chunk_statistics",
    "sample_variable_length",
    "pad_documents",
    "model_device",
]

# Elements per chunk of (steps, batch, N) buffers: 2 MB per int64 buffer.
_CHUNK_BUDGET = 1 << 18


def model_device(model: nn.Module) -> torch.device:
    """The device of a model's first parameter or buffer (CPU for an empty model)."""
    for t in model.parameters():
        return t.device
    for t in model.buffers():
        return t.device
    return torch.device("cpu")


# ----------------------------------------------------------------------------------------
# Variable-length documents
# ----------------------------------------------------------------------------------------


def _check_lengths(lengths: object, num_docs: int, max_len: int) -> torch.Tensor:
    if not isinstance(lengths, torch.Tensor):
        try:
            lengths = torch.as_tensor(np.asarray(lengths))
        except (TypeError, ValueError, RuntimeError):
            raise ValueError(f"lengths must be a 1-D integer tensor, got {type(lengths).__name__}") from None
    if lengths.dim() != 1 or lengths.shape[0] != num_docs:
        raise ValueError(f"lengths must have shape ({num_docs},), got {tuple(lengths.shape)}")
    if lengths.dtype.is_floating_point or lengths.dtype.is_complex or lengths.dtype == torch.bool:
        raise ValueError(f"lengths must hold integers, got dtype {lengths.dtype}")
    if num_docs and (int(lengths.min()) < 1 or int(lengths.max()) > max_len):
        raise ValueError(f"lengths must lie in [1, {max_len}], got min {int(lengths.min())}, max {int(lengths.max())}")
    return lengths.long()


def pad_documents(docs: Sequence[torch.Tensor], pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad a list of 1-D documents into one tensor.

    Parameters
    ----------
    docs : sequence of LongTensor, each of shape (N_i,)
        Non-empty documents.
    pad_id : int
        Id written into the padding. It is never read (padded positions are neither keys
        nor targets), but it must be a valid id so that embedding lookups stay in range.

    Returns
    -------
    padded : LongTensor, shape (num_docs, max N_i)
    lengths : LongTensor, shape (num_docs,)
    """
    if isinstance(docs, torch.Tensor) or len(docs) == 0:
        raise ValueError("docs must be a non-empty sequence of 1-D tensors")
    rows = [torch.as_tensor(d) for d in docs]
    if any(r.dim() != 1 or r.numel() == 0 for r in rows):
        raise ValueError("docs must be a sequence of non-empty 1-D tensors")
    if isinstance(pad_id, bool) or not isinstance(pad_id, (int, np.integer)) or pad_id < 0:
        raise ValueError(f"pad_id must be a non-negative int, got {pad_id!r}")
    lengths = torch.tensor([r.numel() for r in rows])
    padded = torch.full((len(rows), int(lengths.max())), int(pad_id), dtype=torch.long)
    for i, r in enumerate(rows):
        padded[i, : r.numel()] = r
    return padded, lengths


def sample_variable_length(
    topic_model: TopicModel,
    num_docs: int,
    min_len: int,
    max_len: int,
    seed: int | torch.Generator = 0,
    *,
    pad_id: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Documents with lengths uniform in ``[min_len, max_len]``, right-padded.

    Each document is drawn at length ``max_len`` and cut to its length. Tokens are i.i.d.
    given the document's topic proportions, so the first ``L`` tokens of a document of
    length ``max_len`` are exactly a document of length ``L``. Documents are drawn in
    blocks of a few thousand, so temporary memory stays small.

    Parameters
    ----------
    topic_model : TopicModel
    num_docs : int
    min_len, max_len : int
        ``1 <= min_len <= max_len``.
    seed : int or torch.Generator
    pad_id : int
        Id written into the padding (see :func:`pad_documents`).

    Returns
    -------
    docs : LongTensor, shape (num_docs, max_len)
        Word ids; positions ``>= lengths[i]`` hold ``pad_id``.
    lengths : LongTensor, shape (num_docs,)
    """
    if not isinstance(topic_model, TopicModel):
        raise ValueError(f"topic_model must be a TopicModel, got {type(topic_model).__name__}")
    num_docs = check_positive_int("num_docs", num_docs)
    min_len = check_positive_int("min_len", min_len)
    max_len = check_positive_int("max_len", max_len)
    if min_len > max_len:
        raise ValueError(f"min_len must be <= max_len={max_len}, got {min_len}")
    if isinstance(pad_id, bool) or not isinstance(pad_id, (int, np.integer)) or not 0 <= pad_id < topic_model.num_tokens:
        raise ValueError(f"pad_id must be a token id in [0, {topic_model.num_tokens}), got {pad_id!r}")
    gen = make_generator(seed)
    docs = torch.empty(num_docs, max_len, dtype=torch.long)                         # (num_docs, max_len)
    block = max(1, (1 << 16) // max_len)  # draw in blocks: bounded temporary memory
    for start in range(0, num_docs, block):
        stop = min(num_docs, start + block)
        docs[start:stop] = topic_model.sample(stop - start, max_len, gen)
    lengths = torch.randint(min_len, max_len + 1, (num_docs,), generator=gen)       # (num_docs,)
    docs[torch.arange(max_len)[None, :] >= lengths[:, None]] = int(pad_id)
    return docs, lengths


# ----------------------------------------------------------------------------------------
# Sufficient statistics of a batch and the loss in (batch, D) form
# ----------------------------------------------------------------------------------------


def chunk_statistics(
    docs: torch.Tensor,
    sel_u: torch.Tensor,
    branch: torch.Tensor,
    random_words: torch.Tensor,
    *,
    num_tokens: int,
    mask_prob: float,
    keep_prob: float,
    random_prob: float,
    attend_to_masked: bool,
    lengths: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``xbar``, ``Y`` and ``n`` for a stack of batches, from the raw random draws.

    The corruption is :func:`~topicmech.data.bert_mask`'s, written for already-drawn
    uniforms: a position is selected when ``sel_u < mask_prob``; a selected position
    shows ``[MASK]`` when ``branch >= keep_prob + random_prob``, ``random_words`` when
    ``keep_prob <= branch < keep_prob + random_prob``, and its own word otherwise.

    Parameters
    ----------
    docs : LongTensor, shape (..., N)
        True word ids.
    sel_u, branch : Tensor, shape (..., N)
        Uniform draws in [0, 1).
    random_words : LongTensor, shape (..., N)
        Uniform word ids.
    num_tokens : int
        ``D``; ``[MASK]`` is ``D - 1``.
    mask_prob, keep_prob, random_prob : float
    attend_to_masked : bool
        ``False`` hides selected positions as keys.
    lengths : LongTensor, shape (...), optional
        Real length of each document; later positions are padding (never keys, never
        selected).

    Returns
    -------
    xbar : Tensor, shape (..., D)
        Mean of the visible (key) tokens, one-hot; 0 when no key is visible.
    Y : Tensor, shape (..., D)
        Count of each word among the targets (selected positions).
    n : Tensor, shape (...)
        Number of selected positions.
    """
    V = num_tokens - 1
    lead, N = docs.shape[:-1], docs.shape[-1]
    selected = sel_u < mask_prob                                                   # (..., N)
    to_mask = selected & (branch >= keep_prob + random_prob)
    to_random = selected & (branch >= keep_prob) & (branch < keep_prob + random_prob)
    inputs = torch.where(to_random, random_words, docs).masked_fill_(to_mask, V)   # (..., N)
    if lengths is not None:
        valid = torch.arange(N, device=docs.device) < lengths[..., None]           # (..., N)
        selected &= valid
        visible = valid & ~selected if not attend_to_masked else valid
    else:
        visible = ~selected if not attend_to_masked else torch.ones_like(selected)
    dtype = torch.get_default_dtype()
    vis = visible.to(dtype).reshape(-1, N)                                         # (M, N)
    counts = torch.zeros(vis.shape[0], num_tokens, dtype=dtype, device=docs.device)
    counts.scatter_add_(1, inputs.reshape(-1, N), vis)                             # (M, D)
    xbar = counts / vis.sum(1, keepdim=True).clamp_min(1.0)                        # (M, D)
    sel = selected.to(dtype).reshape(-1, N)                                        # (M, N)
    Y = torch.zeros(sel.shape[0], num_tokens, dtype=dtype, device=docs.device)
    Y.scatter_add_(1, docs.reshape(-1, N), sel)                                    # (M, D)
    n = sel.sum(1)                                                                 # (M,)
    return xbar.reshape(*lead, num_tokens), Y.reshape(*lead, num_tokens), n.reshape(lead)


def _logits_from_xbar(model: nn.Module, xbar: torch.Tensor) -> torch.Tensor:
    """``z = W_U W_V W_E xbar`` on row vectors, skipping fixed identity factors (exact)."""
    h = xbar if model.embedding == "one_hot" else xbar @ model.W_E.T                # (B, d)
    out = h if model.value == "identity" else h @ model.W_V.T                      # (B, d)
    return out if model.head == "identity" else out @ model.unembedding.T          # (B, D)


def uniform_loss(z: torch.Tensor, Y: torch.Tensor, n: torch.Tensor, kind: LossKind, n_total: float) -> torch.Tensor:
    """Mean loss over selected positions from per-document logits and target counts.

    Parameters
    ----------
    z : Tensor, shape (B, D)
        Logits of each document (the same at every position under uniform attention).
    Y : Tensor, shape (B, D)
        Target counts per document.
    n : Tensor, shape (B,)
        Selected positions per document (``= Y.sum(1)``).
    kind : {"squared", "cross_entropy"}
    n_total : float
        ``n.sum()`` as a Python float (0 gives a zero loss that still has a gradient graph).

    Returns
    -------
    loss : scalar Tensor
        Equal, up to rounding, to :func:`topicmech.train.mlm_loss` on the expanded logits.
    """
    if n_total == 0:
        return z.sum() * 0.0
    if kind == "cross_entropy":
        return (n @ torch.logsumexp(z, dim=1) - (Y * z).sum()) / n_total
    if kind == "squared":
        return (n @ z.pow(2).sum(1) - 2.0 * (Y * z).sum()) / n_total + 1.0
    raise ValueError(f"loss must be 'squared' or 'cross_entropy', got {kind!r}")


# ----------------------------------------------------------------------------------------
# Optimisers without torch.optim (same arithmetic, no per-step hooks, no extra imports)
# ----------------------------------------------------------------------------------------


class _SGD:
    """Plain SGD, the arithmetic of ``torch.optim.SGD(params, lr)`` (no momentum)."""

    def __init__(self, params: list[torch.Tensor], lr: float) -> None:
        self.params, self.lr = params, lr

    def step(self, grads: Sequence[torch.Tensor]) -> None:
        for p, g in zip(self.params, grads):
            p.add_(g, alpha=-self.lr)


class _Adam:
    """Adam with the arithmetic of ``torch.optim.Adam``'s single-tensor CPU path
    (betas 0.9, 0.999, eps 1e-8, no weight decay); bit-identical on CPU (tested)."""

    def __init__(self, params: list[torch.Tensor], lr: float, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8) -> None:
        self.params, self.lr, self.betas, self.eps = params, lr, betas, eps
        self.exp_avg = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in params]
        self.exp_avg_sq = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in params]
        self.t = 0

    def step(self, grads: Sequence[torch.Tensor]) -> None:
        beta1, beta2 = self.betas
        self.t += 1
        bias_correction1 = 1 - beta1 ** float(self.t)
        bias_correction2_sqrt = (1 - beta2 ** float(self.t)) ** 0.5
        step_size = self.lr / bias_correction1
        for p, g, m, v in zip(self.params, grads, self.exp_avg, self.exp_avg_sq):
            m.lerp_(g, 1 - beta1)
            v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
            denom = (v.sqrt() / bias_correction2_sqrt).add_(self.eps)
            p.addcdiv_(m, denom, value=-step_size)


def _make_optimizer(params: list[torch.Tensor], optimizer: str, lr: float) -> _SGD | _Adam:
    return _SGD(params, lr) if optimizer == "sgd" else _Adam(params, lr)


def _value_only(model: nn.Module, params: list[torch.Tensor]) -> bool:
    """True when ``W_V`` is the only trained matrix and ``z = W_V xbar`` exactly
    (one-hot embeddings, identity head): then the gradient has a closed form."""
    return (model.embedding == "one_hot" and model.head == "identity" and model.value == "learned"
            and len(params) == 1 and params[0] is model.W_V)


def _value_step(W_V: torch.Tensor, xbar: torch.Tensor, Y: torch.Tensor, n: torch.Tensor, kind: str,
                n_total: float, l2: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Loss, loss + L2 and gradient for ``z = xbar W_V^T`` without autograd.

    ``dL/dz_b`` is ``(n_b softmax(z_b) - Y_b) / n_total`` (cross-entropy) or
    ``2 (n_b z_b - Y_b) / n_total`` (squared), and ``dL/dW_V = (dL/dz)^T xbar``.
    """
    z = xbar @ W_V.T                                                               # (B, D)
    if n_total == 0:
        value = z.sum() * 0.0
        G = torch.zeros_like(z)
    elif kind == "cross_entropy":
        log_p = torch.log_softmax(z, dim=1)                                        # (B, D)
        value = -(Y * log_p).sum() / n_total          # = sum_b (n_b lse_b - Y_b . z_b) / n_total
        G = (n[:, None] * log_p.exp() - Y) / n_total                               # (B, D)
    else:
        value = (n @ z.pow(2).sum(1) - 2.0 * (Y * z).sum()) / n_total + 1.0
        G = (2.0 / n_total) * (n[:, None] * z - Y)                                 # (B, D)
    grad = G.T @ xbar                                                              # (D, D)
    if l2 > 0:
        return value, value + l2 * W_V.pow(2).sum(), grad.add_(W_V, alpha=2.0 * l2)
    return value, value, grad


# ----------------------------------------------------------------------------------------
# Training
# ----------------------------------------------------------------------------------------


def train_uniform(
    model: nn.Module,
    data: TopicModel | torch.Tensor,
    *,
    steps: int,
    batch_size: int = 64,
    doc_len: int | None = None,
    lengths: torch.Tensor | None = None,
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
    check_every: int = 100,
) -> History:
    """Train a uniform-attention :class:`~topicmech.model.OneLayerTransformer`, fast.

    Same arguments, same random stream and the same result (up to floating-point
    rounding) as :func:`topicmech.train.train`, for models with ``attention="uniform"``;
    see the module docstring for how it works. When ``W_V`` is the only trained matrix
    (one-hot embeddings, identity head) the gradient is computed in closed form; otherwise
    autograd differentiates the ``(batch, D)`` loss. The optimisers repeat the arithmetic
    of ``torch.optim.SGD`` and ``torch.optim.Adam`` (default betas) without their per-step
    overhead.

    Parameters
    ----------
    model : OneLayerTransformer
        With ``attention="uniform"``; only tensors with ``requires_grad`` are trained.
        Data are drawn on the CPU and moved to the model's device.
    data : TopicModel or LongTensor of shape (num_docs, N)
        As in :func:`topicmech.train.train`.
    steps, batch_size, doc_len, loss, optimizer, lr, l2, mask_prob, keep_prob, random_prob, seed, probes, probe_every
        As in :func:`topicmech.train.train`.
    lengths : LongTensor of shape (num_docs,), optional
        Only with a tensor ``data``: document ``i`` has ``lengths[i]`` real tokens and the
        rest of its row is padding, never a key and never selected.
    check_every : int
        The loss is checked for NaN/inf every ``check_every`` steps and at the end (one
        synchronisation per check instead of one per step).

    Returns
    -------
    History
        ``loss`` holds the minibatch loss of every step (without the L2 term).

    Raises
    ------
    FloatingPointError
        If the loss becomes NaN or infinite; the message names the first such step
        (training stops at most ``check_every - 1`` steps later).
    """
    if getattr(model, "attention", None) != "uniform" or not hasattr(model, "W_V"):
        raise ValueError("model must be a OneLayerTransformer with attention='uniform' "
                         f"(use topicmech.train.train otherwise), got {type(model).__name__}")
    steps = check_positive_int("steps", steps)
    batch_size = check_positive_int("batch_size", batch_size)
    check_every = check_positive_int("check_every", check_every)
    p_m, p_c, p_r = check_masking(mask_prob, keep_prob, random_prob)
    if loss not in ("squared", "cross_entropy"):
        raise ValueError(f"loss must be 'squared' or 'cross_entropy', got {loss!r}")
    if optimizer not in ("sgd", "adam"):
        raise ValueError(f"optimizer must be 'sgd' or 'adam', got {optimizer!r}")
    if lr is None:
        lr = {"sgd": 1.0, "adam": 1e-2}[optimizer]
    if isinstance(lr, bool) or not (isinstance(lr, (int, float)) and lr > 0 and math.isfinite(lr)):
        raise ValueError(f"lr must be a positive float, got {lr!r}")
    if isinstance(l2, bool) or not (isinstance(l2, (int, float)) and l2 >= 0 and math.isfinite(l2)):
        raise ValueError(f"l2 must be a float >= 0, got {l2!r}")
    if probes is not None and (not isinstance(probes, Mapping)
                               or not all(isinstance(k, str) and callable(f) for k, f in probes.items())):
        raise ValueError(f"probes must map names (str) to functions of the model, got {probes!r}")
    D = model.num_tokens
    V = D - 1
    from_model = isinstance(data, TopicModel)
    if from_model:
        if doc_len is None:
            raise ValueError("doc_len is required when data is a topic model")
        if lengths is not None:
            raise ValueError("lengths is only for a tensor of documents, not a topic model")
        N = check_positive_int("doc_len", doc_len)
        if data.num_tokens != D:
            raise ValueError(f"model has num_tokens={D} but the topic model has {data.num_tokens}")
    else:
        data = check_docs(data, V, name="data")
        if data.shape[0] == 0 or data.shape[1] == 0:
            raise ValueError(f"data must hold at least one document of at least one token, got shape {tuple(data.shape)}")
        N = data.shape[1]
        if lengths is not None:
            lengths = _check_lengths(lengths, data.shape[0], N)
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("model has no trainable parameters (everything is frozen)")
    opt = _make_optimizer(params, optimizer, float(lr))
    closed_form = _value_only(model, params)
    probes = dict(probes or {})
    probe_every = max(1, steps // 50) if probe_every is None else check_positive_int("probe_every", probe_every)
    device = model_device(model)
    dtype = params[0].dtype
    gen = make_generator(seed)
    history = History()
    _record(history, model, probes, 0)

    B = batch_size
    K = max(1, min(steps, _CHUNK_BUDGET // (B * max(N, D))))                       # steps per chunk
    docs_c = torch.empty(K, B, N, dtype=torch.long)
    sel_u = torch.empty(K, B, N)
    branch = torch.empty(K, B, N)
    words = torch.empty(K, B, N, dtype=torch.long)
    idx = torch.empty(K, B, dtype=torch.long)
    losses: list[torch.Tensor] = []                                                # loss without L2
    totals: list[torch.Tensor] = []                                                # checked for NaN/inf
    checked = 0

    def check_finite(upto: int) -> None:
        nonlocal checked
        if upto > checked:
            seg = torch.stack(totals[checked:upto])
            bad = ~torch.isfinite(seg)
            if bool(bad.any()):
                first = int(bad.nonzero()[0, 0])
                raise FloatingPointError(f"non-finite loss {float(seg[first])} at step {checked + first + 1}; "
                                         f"lower the learning rate (lr={lr})")
            checked = upto

    step = 0
    while step < steps:
        k_now = min(K, steps - step)
        with torch.no_grad():
            # 1. the random draws, in train()'s order: documents, then bert_mask's three draws
            for k in range(k_now):
                if from_model:
                    docs_c[k] = data.sample(B, N, gen)
                else:
                    torch.randint(len(data), (B,), generator=gen, out=idx[k])
                torch.rand((B, N), generator=gen, out=sel_u[k])
                torch.rand((B, N), generator=gen, out=branch[k])
                torch.randint(V, (B, N), generator=gen, out=words[k])
            if not from_model:
                torch.index_select(data, 0, idx[:k_now].reshape(-1), out=docs_c[:k_now].view(-1, N))
            # 2. per-document statistics for the whole chunk (independent of the parameters)
            xbar, Y, n = chunk_statistics(
                docs_c[:k_now], sel_u[:k_now], branch[:k_now], words[:k_now], num_tokens=D,
                mask_prob=p_m, keep_prob=p_c, random_prob=p_r, attend_to_masked=model.attend_to_masked,
                lengths=None if lengths is None else lengths[idx[:k_now]])
            n_total = n.sum(1).tolist()                                             # (k_now,) floats
            xbar, Y, n = (t.to(device=device, dtype=dtype, non_blocking=True) for t in (xbar, Y, n))
        # 3. the sequential part: forward, loss, gradient, optimiser step
        for k in range(k_now):
            step += 1
            if closed_form:
                with torch.no_grad():
                    value, total, grad = _value_step(params[0], xbar[k], Y[k], n[k], loss, n_total[k], l2)
                    opt.step((grad,))
            else:
                z = _logits_from_xbar(model, xbar[k])                              # (B, D)
                value = uniform_loss(z, Y[k], n[k], loss, n_total[k])
                total = value + l2 * sum(p.pow(2).sum() for p in params) if l2 > 0 else value
                grads = torch.autograd.grad(total, params)
                with torch.no_grad():
                    opt.step(grads)
                value, total = value.detach(), total.detach()
            losses.append(value)
            totals.append(total)
            if step % check_every == 0:
                check_finite(step)
            if probes and (step % probe_every == 0 or step == steps):
                check_finite(step)
                _record(history, model, probes, step)
    check_finite(steps)
    history.step = list(range(1, steps + 1))
    history.loss = torch.stack(losses).tolist()
    return history
