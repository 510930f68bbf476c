"""The fast training paths behind :func:`topicmech.train.train`, and variable-length documents.

Book: the performance page (*Performance*) benchmarks these paths against the authors'
released code. Chapters never call this module directly: :func:`topicmech.train.train`
picks a path by itself (:func:`fast_path`) and keeps the model's own forward pass
(:meth:`~topicmech.model.OneLayerTransformer.run_with_cache`) as the readable reference.

Uniform attention
-----------------
With ``W_K = W_Q = 0`` every query of a document sees the same average of its visible
keys, ``xbar`` (shape ``(D,)``), so every position of the document gets the same logits
``z = W_U W_V W_E xbar``. The masked-language-modelling loss at the selected positions of
one document therefore depends on the document only through three numbers per token id:

* ``xbar``: the mean of the visible (key) tokens,
* ``Y``: how often each word is a target (a selected position's true word),
* ``n``: how many positions are selected;

cross-entropy is ``sum_b (n_b logsumexp(z_b) - Y_b . z_b) / sum_b n_b`` and the squared
loss is ``sum_b (n_b ||z_b||^2 - 2 Y_b . z_b + n_b) / sum_b n_b``. The reference forward
pass forms ``(batch, N, D)`` logits and back-propagates through them; this path works on
``(batch, D)`` tensors, computes ``xbar``, ``Y`` and ``n`` for many steps at once (they do
not depend on the parameters), and leaves only a few small matrix operations and the
optimiser step inside the per-step loop.

Learned attention
-----------------
The loss reads the logits at the selected positions only (about 15%), and without
positional encodings a query's output depends only on the token it shows and on how often
each token occurs among its document's visible keys. :func:`selected_loss` therefore
gathers the scores of each selected query from the ``(D, D)`` token-space score matrix
(:func:`token_scores`), turns them into attention over token ids weighted by the key
counts, and computes value, head and loss for those rows only: no ``(batch, N, N)``
pattern and no ``(batch, N, D)`` logits.

Same random stream as the reference
-----------------------------------
Both fast paths draw documents and masks from the generator in exactly the order of the
reference loop (documents, then :func:`~topicmech.data.bert_mask`'s three draws, step
after step), so for the same seed they see the same batches and masks and end at the same
parameters up to floating-point rounding (tested in ``tests/test_fast.py`` and
``tests/test_fast_attention.py``).

Variable-length documents
-------------------------
The model has no padding token. Documents of different lengths are stored right-padded in
one ``(num_docs, N_max)`` tensor with a ``lengths`` vector (:func:`sample_variable_length`,
:func:`pad_documents`, the ``lengths`` argument of :func:`topicmech.train.train`); padded
positions are never keys and never selected, so a padded document trains exactly like the
same document on its own.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np
import torch
from torch import nn
from torch.optim.adam import adam as _adam_kernel  # torch.optim's functional kernels
from torch.optim.sgd import sgd as _sgd_kernel

from .data import TopicModel
from .model import OneLayerTransformer, key_visibility
from .train import History, LossKind, Probe, _record
from .utils import check_positive_int, make_generator

__all__ = [
    "TorchOptimKernels",
    "fast_path",
    "selected_loss",
    "token_scores",
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
    dtype: torch.dtype | None = None,
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
    dtype : torch.dtype, optional
        Floating dtype of the results (default: torch's default dtype).

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
    dtype = torch.get_default_dtype() if dtype is None else dtype
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
# Optimisers: torch.optim's own kernels, without the optimiser classes
# ----------------------------------------------------------------------------------------


class TorchOptimKernels:
    """Plain SGD or Adam for the fast paths, computed by ``torch.optim``'s functional kernels.

    The arithmetic is ``torch.optim``'s: ``torch.optim.sgd.sgd`` (no momentum, no
    weight decay; identical to ``torch.optim.SGD``) and ``torch.optim.adam.adam`` (default
    betas and eps) with its fused kernel on CPU and CUDA, which is what
    ``torch.optim.Adam(params, lr, fused=True)`` runs; it agrees with the default
    ``torch.optim.Adam`` of the reference loop to the last bit or two and is about twice as
    fast on small matrices. Only the bookkeeping is here: the optimiser *classes* import
    ``torch._dynamo`` when first constructed, which costs about 1.5 s of CPU and 80 MiB in
    a fresh process, more than a whole demonstration run of the uniform-attention path.

    Parameters
    ----------
    params : list of Tensor
        Leaf tensors with ``requires_grad``; :meth:`step` uses their ``.grad``.
    optimizer : {"sgd", "adam"}
    lr : float
    """

    def __init__(self, params: list[torch.Tensor], optimizer: str, lr: float) -> None:
        if optimizer not in ("sgd", "adam"):
            raise ValueError(f"optimizer must be 'sgd' or 'adam', got {optimizer!r}")
        self.params, self.optimizer, self.lr = list(params), optimizer, float(lr)
        if optimizer == "adam":
            self.fused = all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in self.params)
            self.exp_avg = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
            self.exp_avg_sq = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
            # torch.optim.Adam's step counters: float32 on the parameter's device when fused
            self.steps = [torch.zeros((), dtype=torch.float32, device=p.device) if self.fused
                          else torch.tensor(0.0, dtype=torch.get_default_dtype()) for p in self.params]

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forget the gradients (always set to None)."""
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        """One update of every parameter that has a gradient."""
        live = [i for i, p in enumerate(self.params) if p.grad is not None]
        params = [self.params[i] for i in live]
        grads = [p.grad for p in params]
        if self.optimizer == "sgd":
            _sgd_kernel(params, grads, [None] * len(params), foreach=False, weight_decay=0.0, momentum=0.0,
                        lr=self.lr, dampening=0.0, nesterov=False, maximize=False)
            return
        _adam_kernel(
            params, grads, [self.exp_avg[i] for i in live], [self.exp_avg_sq[i] for i in live], [],
            [self.steps[i] for i in live], foreach=False, fused=self.fused, amsgrad=False, beta1=0.9, beta2=0.999,
            lr=self.lr, weight_decay=0.0, eps=1e-8, maximize=False)
        # the fused kernel writes in place without bumping the tensors' version counters, which
        # caches keyed on ``p._version`` (dynamics.standard_probes) rely on
        torch.autograd.graph.increment_version(params)


# ----------------------------------------------------------------------------------------
# Learned attention: the loss at the selected queries only, in token space
# ----------------------------------------------------------------------------------------


def token_scores(model: OneLayerTransformer) -> torch.Tensor:
    """Attention scores in token space, query token by key token, shape ``(D, D)``.

    ``S[t, u]`` is the score a query showing token ``t`` gives a key showing token ``u``:
    ``S = A^T`` with ``A`` = :meth:`~topicmech.model.OneLayerTransformer.key_query_matrix`.
    Fixed one-hot embeddings (``W_E = I``) are skipped, which is exact.
    """
    scale = math.sqrt(model.d_model)
    if model.embedding == "one_hot":
        return model.W_Q.T @ model.W_K / scale                                    # (D, D)
    return (model.W_Q @ model.W_E).T @ (model.W_K @ model.W_E) / scale             # (D, D)


def selected_loss(
    model: OneLayerTransformer,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    selected: torch.Tensor,
    kind: LossKind = "squared",
    *,
    valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """Masked-language-modelling loss of a one-layer model, computed at the selected queries only.

    Equal, up to floating-point rounding and with the same gradients, to
    ``mlm_loss(model(inputs, selected), targets, selected, kind)``, but it never forms a
    ``(batch, N, N)`` pattern or ``(batch, N, D)`` logits. Without positional encodings a
    query's output depends only on the token it shows and on how often each token occurs
    among its document's visible keys:

    1. ``counts[b, u]``: visible keys of document ``b`` showing token ``u``, shape ``(B, D)``;
    2. the score of key token ``u`` for query token ``t`` is ``S[t, u]``
       (:func:`token_scores`), so the attention a query puts on token ``u`` is
       ``counts[b, u] exp(S[t, u])`` normalised over ``u`` (a softmax of
       ``S[t] + log counts[b]``), shape ``(D,)`` per query instead of ``(N,)``;
    3. selected positions of one document that show the same token (most show
       ``[MASK]``) have identical logits, so each distinct (document, query token) pair is
       computed once, with its number of positions and its target counts, and the loss is
       that of :func:`uniform_loss` on those rows.

    Parameters
    ----------
    model : OneLayerTransformer
        Any switches (embedding, attention, value, head, ``attend_to_masked``).
    inputs : LongTensor, shape (B, N)
        Corrupted token ids.
    targets : LongTensor, shape (B, N)
        True word ids.
    selected : BoolTensor, shape (B, N)
        Positions in the loss (and hidden as keys when ``model.attend_to_masked`` is False).
    kind : {"squared", "cross_entropy"}
    valid : BoolTensor, shape (B, N), optional
        Real (not padding) positions: the others are never keys and never selected.

    Returns
    -------
    loss : scalar Tensor
        Mean over selected positions (0, with a zero gradient, if none is selected).
    """
    if kind not in ("squared", "cross_entropy"):
        raise ValueError(f"kind must be 'squared' or 'cross_entropy', got {kind!r}")
    if not isinstance(model, OneLayerTransformer):
        raise ValueError(f"model must be a OneLayerTransformer, got {type(model).__name__}")
    for name, t in (("inputs", inputs), ("targets", targets)):
        if (not isinstance(t, torch.Tensor) or t.dim() != 2 or t.dtype.is_floating_point or t.dtype.is_complex
                or t.dtype == torch.bool):
            raise ValueError(f"{name} must be a LongTensor of shape (batch, N), got {getattr(t, 'dtype', type(t))}")
    shape = tuple(inputs.shape)
    for name, t in (("targets", targets), ("selected", selected), ("valid", valid)):
        if t is None:
            continue
        if name != "targets" and (not isinstance(t, torch.Tensor) or t.dtype != torch.bool):
            raise ValueError(f"{name} must be a BoolTensor, got {getattr(t, 'dtype', type(t).__name__)}")
        if tuple(t.shape) != shape:
            raise ValueError(f"{name} must have shape {shape}, got {tuple(t.shape)}")
    B, N = shape
    D = model.num_tokens
    inputs = inputs.long()
    if valid is not None:
        selected = selected & valid
    visible = key_visibility(selected, model.attend_to_masked, inputs.shape)       # (B, N)
    if valid is not None:
        visible = visible & valid
    dtype = model.W_E.dtype
    counts = torch.zeros(B, D, dtype=dtype, device=inputs.device)
    counts.scatter_add_(1, inputs, visible.to(dtype))                              # (B, D) visible key tokens
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
    mixed = pattern if model.embedding == "one_hot" else pattern @ model.W_E.T     # (R, d)
    out = mixed if model.value == "identity" else mixed @ model.W_V.T              # (R, d)
    z = out if model.head == "identity" else out @ model.unembedding.T            # (R, D)
    n_total = float(pos.shape[0])
    if kind == "cross_entropy" and n_total > 0:  # rows of Y sum to n: one fused log-softmax
        return -(Y * torch.log_softmax(z, dim=1)).sum() / n_total
    return uniform_loss(z, Y, n, kind, n_total)


# ----------------------------------------------------------------------------------------
# Which path train() takes
# ----------------------------------------------------------------------------------------


def fast_path(model: nn.Module) -> Literal["uniform", "learned"] | None:
    """The fast path :func:`topicmech.train.train` takes for ``model``, or None.

    ``"uniform"`` for a :class:`~topicmech.model.OneLayerTransformer` with frozen uniform
    attention (chunked sufficient statistics, see the module docstring), ``"learned"`` for
    one with learned attention (:func:`selected_loss`), None for anything else (a
    :class:`~topicmech.model.TwoLayerTransformer`, a subclass, or a model with forward hooks
    or a replaced ``forward``), which trains through the model's own forward pass.
    """
    if type(model) is not OneLayerTransformer:
        return None
    if "forward" in vars(model) or model._forward_hooks or model._forward_pre_hooks:
        return None
    return "uniform" if model.attention == "uniform" else "learned"


# ----------------------------------------------------------------------------------------
# Uniform attention: the chunked training loop (called by train())
# ----------------------------------------------------------------------------------------


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


def _train_uniform_chunks(
    model: OneLayerTransformer,
    data: TopicModel | torch.Tensor,
    *,
    params: list[torch.Tensor],
    opt: TorchOptimKernels,
    steps: int,
    batch_size: int,
    doc_len: int,
    lengths: torch.Tensor | None,
    loss: LossKind,
    l2: float,
    mask_prob: float,
    keep_prob: float,
    random_prob: float,
    gen: torch.Generator,
    probes: dict[str, Probe],
    probe_every: int,
    check_every: int,
    lr: float,
    history: History,
    bar: object | None = None,
) -> None:
    """The body of :func:`topicmech.train.train` for uniform attention (arguments already checked).

    Draws the random numbers of up to ``K`` steps at once, in exactly the order ``train``'s
    per-step loop draws them, turns them into ``xbar``, ``Y`` and ``n``
    (:func:`chunk_statistics`), then runs the sequential part: the ``(batch, D)`` loss,
    its gradient (closed form when ``W_V`` is the only trained matrix) and ``opt.step()``.
    Fills ``history`` in place.
    """
    D = model.num_tokens
    V = D - 1
    N = doc_len
    from_model = isinstance(data, TopicModel)
    device = params[0].device
    dtype = params[0].dtype
    closed_form = _value_only(model, params)
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
                mask_prob=mask_prob, keep_prob=keep_prob, random_prob=random_prob,
                attend_to_masked=model.attend_to_masked,
                lengths=None if lengths is None else lengths[idx[:k_now]], dtype=dtype)
            n_total = n.sum(1).tolist()                                             # (k_now,) floats
            xbar, Y, n = (t.to(device=device, non_blocking=True) for t in (xbar, Y, n))
        # 3. the sequential part: forward, loss, gradient, optimiser step
        for k in range(k_now):
            step += 1
            if closed_form:
                with torch.no_grad():
                    value, total, grad = _value_step(params[0], xbar[k], Y[k], n[k], loss, n_total[k], l2)
                params[0].grad = grad
                opt.step()
            else:
                z = _logits_from_xbar(model, xbar[k])                              # (B, D)
                value = uniform_loss(z, Y[k], n[k], loss, n_total[k])
                total = value + l2 * sum(p.pow(2).sum() for p in params) if l2 > 0 else value
                opt.zero_grad(set_to_none=True)
                total.backward()
                opt.step()
                value, total = value.detach(), total.detach()
            losses.append(value)
            totals.append(total)
            if step % check_every == 0:
                check_finite(step)
            if probes and (step % probe_every == 0 or step == steps):
                check_finite(step)
                _record(history, model, probes, step)
            if bar is not None:
                bar.update(1)
    check_finite(steps)
    history.step = list(range(1, steps + 1))
    history.loss = torch.stack(losses).tolist()


# ----------------------------------------------------------------------------------------
# The former entry point
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
    """Train a uniform-attention :class:`~topicmech.model.OneLayerTransformer` (kept for old callers).

    :func:`topicmech.train.train` now takes the fast uniform-attention path by itself;
    this function checks that ``model`` has ``attention="uniform"`` and calls it with
    ``path="fast"``. Same arguments and result as ``train``.

    Parameters
    ----------
    model : OneLayerTransformer
        With ``attention="uniform"``.
    data, steps, batch_size, doc_len, lengths, loss, optimizer, lr, l2, mask_prob, keep_prob, random_prob, seed, probes, probe_every, check_every
        As in :func:`topicmech.train.train`.

    Returns
    -------
    History

    Raises
    ------
    ValueError
        If ``model`` is not a uniform-attention ``OneLayerTransformer``, or for any bad
        argument ``train`` refuses.
    FloatingPointError
        If the loss becomes NaN or infinite.
    """
    if fast_path(model) != "uniform":
        raise ValueError("model must be a OneLayerTransformer with attention='uniform' and no forward hooks "
                         f"(use topicmech.train.train otherwise), got {type(model).__name__}")
    from .train import train

    return train(model, data, steps=steps, batch_size=batch_size, doc_len=doc_len, lengths=lengths, loss=loss,
                 optimizer=optimizer, lr=lr, l2=l2, mask_prob=mask_prob, keep_prob=keep_prob,
                 random_prob=random_prob, seed=seed, probes=probes, probe_every=probe_every,
                 check_every=check_every, path="fast")
