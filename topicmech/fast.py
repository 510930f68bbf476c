"""The fast training paths that :func:`topicmech.train.train` takes by itself, and padded documents.

*Uniform attention* (``W_K = W_Q = 0``): every position of a document gets the same logits
``z = W_U W_V W_E xbar``, with ``xbar`` the mean of the visible keys, so the loss depends on a
document only through ``xbar``, the target counts ``Y`` and the number ``n`` of selected
positions. These are computed for many steps at once (:func:`chunk_statistics`); the per-step
work is a few ``(batch, D)`` operations (:func:`uniform_loss`).

*Learned attention*: without positional encodings a query's output depends only on its token
and on its document's key counts, so :func:`selected_loss` works in token space at the
selected queries only, never forming a ``(batch, N, N)`` pattern or ``(batch, N, D)`` logits.

Both paths draw documents and masks in the reference loop's order, so they agree with it up
to rounding. Padded documents (a ``lengths`` vector) are never keys and never selected.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Literal

import numpy as np
import torch
from torch import nn
from torch.optim.adam import adam as _adam_kernel  # torch.optim's functional kernels
from torch.optim.sgd import sgd as _sgd_kernel
from torch.torch_version import TorchVersion

from .data import TopicModel, check_topic_model, corrupt
from .losses import LOSS_KINDS, LossKind
from .model import OneLayerTransformer, key_visibility, token_counts
from .setting import Masking
from .utils import check_choice, check_positive_int, make_generator

__all__ = ["FUSED_DEVICES", "TorchOptimKernels", "fast_path", "selected_loss", "token_scores", "uniform_loss", "logits_from_xbar",
           "chunk_statistics", "uniform_batches", "is_value_only", "value_step", "check_lengths",
           "sample_variable_length", "pad_documents"]

#: The devices whose parameters Adam's fused kernel accepts, CUDA and the CPU from torch 2.4 on
#: (torch 2.3, the lowest release the package supports, has no fused CPU kernel).
#:
#: :meta hide-value:
FUSED_DEVICES: tuple[str, ...] = ("cpu", "cuda") if TorchVersion(torch.__version__) >= (2, 4) else ("cuda",)

_CHUNK_BUDGET = 1 << 18  # elements per (steps, batch, N) buffer of a chunk: 2 MB as int64


def pad_documents(docs: Sequence[torch.Tensor], pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad non-empty 1-D documents into one LongTensor ``(num_docs, max N_i)``; also return the lengths.

    ``pad_id`` is never read, but must be a valid id for embedding lookups.
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


def sample_variable_length(topic_model: TopicModel, num_docs: int, min_len: int, max_len: int,
                           seed: int | torch.Generator = 0, *, pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Documents of lengths uniform in ``[min_len, max_len]``, right-padded with ``pad_id``.

    Each document is drawn at ``max_len`` and cut (tokens are i.i.d. given its topics).

    Returns
    -------
    docs : LongTensor, shape (num_docs, max_len)
    lengths : LongTensor, shape (num_docs,)
    """
    check_topic_model(topic_model)
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


def check_lengths(lengths: object, num_docs: int, max_len: int) -> torch.Tensor:
    """Raise ``ValueError`` unless ``lengths`` holds ``num_docs`` integer document lengths in
    ``[1, max_len]``; return it as a LongTensor of shape ``(num_docs,)``."""
    try:
        t = lengths if isinstance(lengths, torch.Tensor) else torch.as_tensor(np.asarray(lengths))
        ok = tuple(t.shape) == (num_docs,) and not (t.dtype.is_floating_point or t.dtype.is_complex
                                                    or t.dtype == torch.bool)
    except (TypeError, ValueError, RuntimeError):
        ok = False
    if not ok or int(t.min()) < 1 or int(t.max()) > max_len:
        raise ValueError(f"lengths must be an integer tensor of shape ({num_docs},) with values in [1, {max_len}], "
                         f"got {lengths!r}")
    return t.long()


def chunk_statistics(docs: torch.Tensor, sel_u: torch.Tensor, branch: torch.Tensor, random_words: torch.Tensor, *,
                     num_tokens: int, masking: Masking, attend_to_masked: bool,
                     lengths: torch.Tensor | None = None,
                     dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``xbar``, ``Y`` and ``n`` for a stack of batches, from :func:`~topicmech.data.bert_mask`'s raw draws.

    Parameters
    ----------
    docs : LongTensor, shape (..., N)
        True word ids.
    random_words : LongTensor, shape (..., N)
        Uniform random words (shown where a selected position becomes a random word).
    sel_u : Tensor, shape (..., N)
        Uniform draws in [0, 1) that decide the selection.
    branch : Tensor, shape (..., N)
        Uniform draws in [0, 1) that decide ``[MASK]``, random word or kept.
    masking : Masking
        The corruption probabilities (not validated again).
    lengths : LongTensor, shape (...), optional
        Real document lengths; later positions are padding.
    dtype : torch.dtype, optional
        Of the results (default: torch's default dtype).

    Returns
    -------
    xbar, Y : Tensor, shape (..., D)
        Mean of the visible keys, one-hot (0 without a key); target counts.
    n : Tensor, shape (...)
        Number of selected positions.
    """
    lead, N = docs.shape[:-1], docs.shape[-1]
    inputs, selected = corrupt(docs, sel_u, branch, random_words, num_tokens - 1, masking.mask_prob, masking.keep_prob,
                               masking.random_prob)
    if lengths is not None:
        valid = torch.arange(N, device=docs.device) < lengths[..., None]           # (..., N)
        selected &= valid
        visible = valid & ~selected if not attend_to_masked else valid
    else:
        visible = ~selected if not attend_to_masked else torch.ones_like(selected)
    dtype = torch.get_default_dtype() if dtype is None else dtype
    vis = visible.to(dtype).reshape(-1, N)                                         # (M, N)
    xbar = token_counts(inputs.reshape(-1, N), vis, num_tokens) / vis.sum(1, keepdim=True).clamp_min(1.0)
    sel = selected.to(dtype).reshape(-1, N)                                        # (M, N)
    Y = token_counts(docs.reshape(-1, N), sel, num_tokens)                        # (M, D)
    return xbar.reshape(*lead, num_tokens), Y.reshape(*lead, num_tokens), sel.sum(1).reshape(lead)


def logits_from_xbar(model: nn.Module, xbar: torch.Tensor) -> torch.Tensor:
    """``z = W_U W_V W_E xbar (+ b_pred)`` on row vectors, skipping fixed identity factors (exact)."""
    if model.t is not None:                                                        # the released code's block
        h = xbar @ model.token_embeddings()                                        # (B, d)
    else:
        h = xbar if model.embedding == "one_hot" else xbar @ model.W_E.T            # (B, d)
    out = h if model.value == "identity" else h @ model.W_V.T                      # (B, d)
    if model.b_V is not None:
        out = out + model.b_V
    z = out if model.head == "identity" else out @ model.unembedding.T             # (B, D)
    return z if model.b_pred is None else z + model.b_pred


def uniform_loss(z: torch.Tensor, Y: torch.Tensor, n: torch.Tensor, kind: LossKind, n_total: float) -> torch.Tensor:
    """Mean loss over selected positions from per-document logits and target counts.

    Parameters
    ----------
    z : Tensor, shape (B, D)
        Logits of each document (the same at every position).
    Y : Tensor, shape (B, D)
        Its target counts.
    n : Tensor, shape (B,)
        Selected positions per document (``= Y.sum(1)``).
    kind : {"squared", "cross_entropy"}
    n_total : float
        ``n.sum()`` (0 gives a zero loss that still has a gradient graph).
    """
    if n_total == 0:
        return z.sum() * 0.0
    if kind == "cross_entropy":
        return (n @ torch.logsumexp(z, dim=1) - (Y * z).sum()) / n_total
    if kind == "squared":
        return (n @ z.pow(2).sum(1) - 2.0 * (Y * z).sum()) / n_total + 1.0
    raise ValueError(f"loss must be 'squared' or 'cross_entropy', got {kind!r}")


class TorchOptimKernels:
    """Plain SGD or Adam (default betas, eps) by ``torch.optim``'s functional kernels.

    The arithmetic is ``torch.optim.SGD``'s and ``torch.optim.Adam(fused=True)``'s, or with
    ``fused=False`` the default ``torch.optim.Adam``'s on the CPU, bit for bit; only the state is
    kept here, because constructing a ``torch.optim`` class imports ``torch._dynamo`` (about
    1.5 s of CPU and 60-80 MiB in a fresh process), which would make the demonstration run
    about 1.5 times slower. ``fused`` asks for Adam's fused kernel, used wherever the parameters
    allow it: floating point, on CUDA, or on the CPU from torch 2.4 on (:data:`FUSED_DEVICES`);
    elsewhere Adam runs its default kernel, which agrees to float rounding.
    """

    def __init__(self, params: list[torch.Tensor], optimizer: str, lr: float, *, fused: bool = True) -> None:
        self.params, self.optimizer, self.lr = list(params), check_choice("optimizer", optimizer, ("sgd", "adam")), float(lr)
        can_fuse = all(p.is_floating_point() and p.device.type in FUSED_DEVICES for p in self.params)
        self.fused = can_fuse and bool(fused)
        adam = optimizer == "adam"                          # SGD keeps no state
        self.exp_avg = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params if adam]
        self.exp_avg_sq = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params if adam]
        # torch.optim.Adam's step counters: float32 on the parameter's device when fused
        self.steps = [torch.zeros((), dtype=torch.float32, device=p.device) if self.fused
                      else torch.tensor(0.0, dtype=torch.get_default_dtype()) for p in self.params if adam]

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Set every gradient to None."""
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        """Update every parameter that has a gradient."""
        live = [i for i, p in enumerate(self.params) if p.grad is not None]
        params = [self.params[i] for i in live]
        grads = [p.grad for p in params]
        if self.optimizer == "sgd":
            _sgd_kernel(params, grads, [None] * len(params), foreach=False, weight_decay=0.0, momentum=0.0,
                        lr=self.lr, dampening=0.0, nesterov=False, maximize=False)
            return
        _adam_kernel(params, grads, [self.exp_avg[i] for i in live], [self.exp_avg_sq[i] for i in live], [],
                     [self.steps[i] for i in live], foreach=False, fused=self.fused, amsgrad=False, beta1=0.9,
                     beta2=0.999, lr=self.lr, weight_decay=0.0, eps=1e-8, maximize=False)


def token_scores(model: OneLayerTransformer) -> torch.Tensor:
    """Attention scores in token space, query token by key token: ``S = A^T``, shape ``(D, D)``,
    with ``A`` = :meth:`~topicmech.model.OneLayerTransformer.key_query_matrix`."""
    scale = math.sqrt(model.d_model)
    if model.t is not None or model.b_K is not None:                              # released-code switches
        H = model.token_embeddings()                                               # (D, d)
        q, k = H @ model.W_Q.T, H @ model.W_K.T                                    # (D, d) each
        if model.b_K is not None:
            q, k = q + model.b_Q, k + model.b_K
        return q @ k.T / scale                                                     # (D, D)
    if model.embedding == "one_hot":
        return model.W_Q.T @ model.W_K / scale                                    # (D, D)
    return (model.W_Q @ model.W_E).T @ (model.W_K @ model.W_E) / scale             # (D, D)


def selected_loss(model: OneLayerTransformer, inputs: torch.Tensor, targets: torch.Tensor, selected: torch.Tensor,
                  kind: LossKind = "squared", *, valid: torch.Tensor | None = None, check: bool = True) -> torch.Tensor:
    """``mlm_loss(model(inputs, selected), targets, selected, kind)``, computed at the selected queries only.

    Equal up to rounding, with the same gradients. A query showing token ``t`` in document
    ``b`` puts weight ``counts[b, u] exp(S[t, u])`` (normalised) on key token ``u``, with
    ``counts`` its document's visible keys and ``S`` = :func:`token_scores`; selected positions
    of a document showing the same token share their logits, so each (document, token) pair
    is one row of :func:`uniform_loss`.

    Parameters
    ----------
    inputs : LongTensor, shape (B, N)
        Corrupted token ids.
    targets : LongTensor, shape (B, N)
        True token ids.
    selected : BoolTensor, shape (B, N)
    valid : BoolTensor, shape (B, N), optional
        Real (not padding) positions.
    check : bool
        Validate the arguments; the training loop, which builds them, passes False.

    Returns
    -------
    loss : scalar Tensor
        Mean over selected positions (0, with zero gradients, if none).
    """
    if check:
        check_choice("kind", kind, LOSS_KINDS)
        if not isinstance(model, OneLayerTransformer):
            raise ValueError(f"model must be a OneLayerTransformer, got {type(model).__name__}")
        shape = tuple(getattr(inputs, "shape", ()))
        for name, t, is_bool in (("inputs", inputs, False), ("targets", targets, False), ("selected", selected, True),
                                 ("valid", valid, True)):
            if t is not None and (not isinstance(t, torch.Tensor) or len(shape) != 2 or tuple(t.shape) != shape
                                  or (t.dtype == torch.bool) != is_bool or t.dtype.is_floating_point
                                  or t.dtype.is_complex):
                raise ValueError(f"{name} must be a {'Bool' if is_bool else 'Long'}Tensor of shape (batch, N) "
                                 f"{shape}, got {getattr(t, 'dtype', type(t).__name__)} {tuple(getattr(t, 'shape', ()))}")
        inputs = inputs.long()
    D = model.num_tokens
    if valid is not None:
        selected = selected & valid
    visible = key_visibility(selected, inputs.shape, attend_to_masked=model.attend_to_masked)       # (B, N)
    if valid is not None:
        visible = visible & valid
    if model.pad_id is not None:                                                   # padding is never a key
        visible = visible & (inputs != model.pad_id)
    dtype = model.W_E.dtype
    counts = token_counts(inputs, visible.to(dtype), D)                           # (B, D) visible key tokens
    # one row per distinct (document, query token) among the selected positions
    pos = selected.nonzero()                                                       # (n, 2)
    q_tok = inputs[pos[:, 0], pos[:, 1]]                                           # (n,)
    rows, inverse = torch.unique(pos[:, 0] * D + q_tok, return_inverse=True)       # (R,), (n,)
    R = rows.shape[0]
    doc, tok = rows // D, rows % D                                                 # (R,)
    y = targets[pos[:, 0], pos[:, 1]].long()                                       # (n,)
    Y = torch.bincount(inverse * D + y, minlength=R * D).view(R, D).to(dtype)      # (R, D) target counts
    n = Y.sum(1)                                                                   # (R,) positions per row
    # attention of each row over token ids, then value, head and loss
    log_c = counts.log().index_select(0, doc)                                      # (R, D), -inf: no such key
    scores = token_scores(model).index_select(0, tok) + log_c                      # (R, D)
    any_key = counts.sum(1) > 0                                                    # (B,)
    if bool(any_key.all()):
        pattern = torch.softmax(scores, dim=1)                                     # (R, D)
    else:  # a document without visible keys: its queries attend to nothing (output 0), as in the model
        has_key = any_key.index_select(0, doc)[:, None]                            # (R, 1)
        pattern = torch.softmax(scores.masked_fill(~has_key, 0.0), dim=1) * has_key
    z = logits_from_xbar(model, pattern)                                          # (R, D)
    n_total = float(pos.shape[0])
    if kind == "cross_entropy" and n_total > 0:  # rows of Y sum to n: one fused log-softmax
        return -(Y * torch.log_softmax(z, dim=1)).sum() / n_total
    return uniform_loss(z, Y, n, kind, n_total)


def fast_path(model: nn.Module) -> Literal["uniform", "learned"] | None:
    """The fast path :func:`topicmech.train.train` takes for ``model``: ``"uniform"`` or ``"learned"``
    for a :class:`~topicmech.model.OneLayerTransformer` by its attention, None for any other model
    (a subclass, one with a replaced ``forward``, or one that has had forward hooks: see
    :attr:`~topicmech.model.OneLayerTransformer.forward_hooked`). With the released code's
    switches (:attr:`~topicmech.model.OneLayerTransformer.released_code_switches`) only the
    learned-attention path applies."""
    if type(model) is not OneLayerTransformer or "forward" in vars(model) or model.forward_hooked:
        return None
    if model.released_code_switches and model.attention == "uniform":
        return None
    return "uniform" if model.attention == "uniform" else "learned"


def is_value_only(model: nn.Module, params: list[torch.Tensor]) -> bool:
    """Whether ``params`` (the trained tensors of a uniform-attention ``model``) are ``W_V`` alone with
    ``z = xbar W_V^T`` (one-hot embeddings, identity head, no bias), so :func:`value_step` applies."""
    return (model.embedding == "one_hot" and model.head == "identity" and model.value == "learned"
            and model.b_pred is None and len(params) == 1 and params[0] is model.W_V)


def value_step(W_V: torch.Tensor, xbar: torch.Tensor, Y: torch.Tensor, n: torch.Tensor, n_total: float,
                kind: str, l2: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Loss, loss + L2 and gradient for ``z = xbar W_V^T`` without autograd: ``dL/dz_b`` is
    ``(n_b softmax(z_b) - Y_b) / n_total`` or ``2 (n_b z_b - Y_b) / n_total``, ``dL/dW_V = (dL/dz)^T xbar``."""
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


def uniform_batches(model: OneLayerTransformer, data: TopicModel | torch.Tensor, steps: int, batch_size: int,
                     doc_len: int, lengths: torch.Tensor | None, masking: Masking,
                     gen: torch.Generator, dtype: torch.dtype,
                     device: torch.device) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]]:
    """``(xbar, Y, n, n_total)`` of each of ``steps`` steps for a uniform-attention ``model``: the reference
    loop's draws from ``gen`` (documents, then ``bert_mask``'s three; with ``masking``),
    taken ``K`` steps at a time and turned into :func:`chunk_statistics` of ``dtype`` on ``device``."""
    D, B, N = model.num_tokens, batch_size, doc_len
    from_model = isinstance(data, TopicModel)
    K = max(1, min(steps, _CHUNK_BUDGET // (B * max(N, D))))                       # steps per chunk
    docs_c, words = torch.empty(K, B, N, dtype=torch.long), torch.empty(K, B, N, dtype=torch.long)
    sel_u, branch = torch.empty(K, B, N), torch.empty(K, B, N)
    idx = torch.empty(K, B, dtype=torch.long)
    for start in range(0, steps, K):
        k_now = min(K, steps - start)
        for k in range(k_now):
            if from_model:
                docs_c[k] = data.sample(B, N, gen)
            else:
                torch.randint(len(data), (B,), generator=gen, out=idx[k])
            torch.rand((B, N), generator=gen, out=sel_u[k])
            torch.rand((B, N), generator=gen, out=branch[k])
            torch.randint(D - 1, (B, N), generator=gen, out=words[k])
        if not from_model:
            torch.index_select(data, 0, idx[:k_now].reshape(-1), out=docs_c[:k_now].view(-1, N))
        xbar, Y, n = chunk_statistics(
            docs_c[:k_now], sel_u[:k_now], branch[:k_now], words[:k_now], num_tokens=D, masking=masking,
            attend_to_masked=model.attend_to_masked,
            lengths=None if lengths is None else lengths[idx[:k_now]], dtype=dtype)
        n_total = n.sum(1).tolist()                                                 # (k_now,) floats
        xbar, Y, n = (t.to(device=device, non_blocking=True) for t in (xbar, Y, n))
        for k in range(k_now):
            yield xbar[k], Y[k], n[k], n_total[k]

