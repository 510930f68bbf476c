"""The one-layer, one-head transformer of the paper, with a switch for every setting.

Book: chapter 2 (*Masked language modelling and a one-layer transformer*) shows
:meth:`OneLayerTransformer.forward`; chapters 3-7 use the switches.

What the model has, and what it leaves out on purpose:

- token embedding ``W_E`` (shape ``(d, D)``): one-hot (``W_E = I``, ``d = D``) or learned;
- one attention head with ``W_K``, ``W_Q`` (``(d, d)``), frozen uniform (``W_K = W_Q = 0``)
  or learned; scores are scaled by ``1/sqrt(d)``;
- value ``W_V`` (``(d, d)``): identity or learned;
- prediction head ``W_U`` (``(D, d)``): identity (needs ``d = D``), tied (``W_U = W_E^T``)
  or learned;
- no residual connection, no LayerNorm, no MLP, no positional encoding, no biases
  (a two-layer variant with residual and LayerNorm, for chapter 7, is :class:`TwoLayerTransformer`).

Orientation: maths acts on column vectors, so ``W_V`` has rows = output coordinate and
columns = input coordinate, and the code computes ``h @ W_V.T`` on row vectors.
Attention ``pattern`` has shape ``(batch, query, key)``. In token space the score of key
token ``u`` for query token ``q`` is ``A[u, q]`` with ``A = W_E^T W_K^T W_Q W_E / sqrt(d)``
(:meth:`OneLayerTransformer.key_query_matrix`).

``attend_to_masked`` decides which positions are keys: ``True`` (standard BERT) makes
every position a key; ``False`` (the authors' released code) hides the selected
positions, so a masked position never sees itself or any other masked position.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn

from .utils import check_positive_int, make_generator

__all__ = ["OneLayerTransformer", "TwoLayerTransformer", "key_visibility"]

Embedding = Literal["one_hot", "learned"]
Attention = Literal["uniform", "learned"]
Value = Literal["identity", "learned"]
Head = Literal["identity", "tied", "learned"]


def _choice(name: str, value: str, options: tuple[str, ...]) -> str:
    if value not in options:
        raise ValueError(f"{name} must be one of {options}, got {value!r}")
    return value


def key_visibility(selected: torch.Tensor | None, attend_to_masked: bool, shape: torch.Size) -> torch.Tensor:
    """Which positions may serve as keys.

    Parameters
    ----------
    selected : BoolTensor, shape (batch, N), or None
        Selected (corrupted) positions; ``None`` means no position is selected.
    attend_to_masked : bool
        ``True``: every position is a key. ``False``: selected positions are hidden.
    shape : torch.Size
        ``(batch, N)``, used when ``selected`` is None.

    Returns
    -------
    visible : BoolTensor, shape (batch, N)

    Raises
    ------
    ValueError
        If ``selected`` is not a BoolTensor of shape ``shape`` (an integer 0/1 mask would
        otherwise be silently misread: ``~1 == -2``).
    """
    if selected is not None:
        if not isinstance(selected, torch.Tensor) or selected.dtype != torch.bool:
            raise ValueError(f"selected must be a BoolTensor, got {type(selected).__name__} "
                             f"with dtype {getattr(selected, 'dtype', None)}")
        if tuple(selected.shape) != tuple(shape):
            raise ValueError(f"selected must have shape {tuple(shape)}, got {tuple(selected.shape)}")
    if not isinstance(attend_to_masked, bool):
        raise ValueError(f"attend_to_masked must be True or False, got {attend_to_masked!r}")
    if selected is None or attend_to_masked:
        return torch.ones(shape, dtype=torch.bool, device=selected.device if selected is not None else None)
    return ~selected


def _check_inputs(inputs: torch.Tensor, num_tokens: int) -> torch.Tensor:
    """Validate a batch of token ids: a 2-D integer tensor with ids in ``[0, num_tokens)``."""
    if not isinstance(inputs, torch.Tensor) or inputs.dim() != 2:
        raise ValueError(f"inputs must be a LongTensor of shape (batch, N), got {type(inputs).__name__} "
                         f"{tuple(getattr(inputs, 'shape', ()))}")
    if inputs.dtype.is_floating_point or inputs.dtype.is_complex or inputs.dtype == torch.bool:
        raise ValueError(f"inputs must hold integer token ids, got dtype {inputs.dtype}")
    if inputs.numel() and (int(inputs.min()) < 0 or int(inputs.max()) >= num_tokens):
        raise ValueError(
            f"inputs hold token ids outside [0, {num_tokens}): min {int(inputs.min())}, max {int(inputs.max())}"
        )
    return inputs.long()


def _check_init_scale(init_scale: object) -> float:
    if (isinstance(init_scale, bool) or not isinstance(init_scale, (int, float))
            or not math.isfinite(init_scale) or init_scale < 0):
        raise ValueError(f"init_scale must be a finite float >= 0, got {init_scale!r}")
    return float(init_scale)


class OneLayerTransformer(nn.Module):
    """One-layer, one-head transformer for masked language modelling on topic data.

    Parameters
    ----------
    num_tokens : int
        ``D = V + 1`` token ids (real words, then ``[MASK]``).
    d_model : int, optional
        Embedding dimension ``d``. Must equal ``num_tokens`` for one-hot embeddings or an
        identity head; defaults to ``num_tokens``.
    embedding : {"one_hot", "learned"}
        Token embedding ``W_E``.
    attention : {"uniform", "learned"}
        ``"uniform"`` freezes ``W_K = W_Q = 0``.
    value : {"identity", "learned"}
        ``W_V``.
    head : {"identity", "tied", "learned"}
        Prediction head ``W_U``: ``I``, ``W_E^T`` or a free matrix.
    attend_to_masked : bool
        Whether selected positions are visible as keys (see the module docstring).
    init_scale : float
        Standard deviation of the Gaussian initialisation of every learned matrix.
        Small values (e.g. ``1e-3``) give the two-stage dynamics of chapter 6.
    seed : int
        Seed for the initialisation.

    Attributes
    ----------
    W_E : Tensor, shape (d, D)
    W_K, W_Q, W_V : Tensor, shape (d, d)
    W_U : Tensor, shape (D, d)
        Parameters when learned, buffers when fixed. Freeze any of them with
        :meth:`freeze`.
    """

    def __init__(
        self,
        num_tokens: int,
        d_model: int | None = None,
        *,
        embedding: Embedding = "one_hot",
        attention: Attention = "uniform",
        value: Value = "learned",
        head: Head = "identity",
        attend_to_masked: bool = True,
        init_scale: float = 0.01,
        seed: int = 0,
    ) -> None:
        super().__init__()
        D = check_positive_int("num_tokens", num_tokens)
        d = D if d_model is None else check_positive_int("d_model", d_model)
        self.embedding = _choice("embedding", embedding, ("one_hot", "learned"))
        self.attention = _choice("attention", attention, ("uniform", "learned"))
        self.value = _choice("value", value, ("identity", "learned"))
        self.head = _choice("head", head, ("identity", "tied", "learned"))
        if embedding == "one_hot" and d != D:
            raise ValueError(f"d_model must equal num_tokens={D} for one-hot embeddings, got {d_model!r}")
        if head == "identity" and d != D:
            raise ValueError(f"d_model must equal num_tokens={D} for an identity head, got {d_model!r}")
        _check_init_scale(init_scale)
        if not isinstance(attend_to_masked, bool):
            raise ValueError(f"attend_to_masked must be True or False, got {attend_to_masked!r}")
        self.num_tokens, self.d_model = D, d
        self.attend_to_masked = attend_to_masked
        self.init_scale = float(init_scale)

        gen = make_generator(seed)  # validates seed

        def init(*shape: int) -> nn.Parameter:
            return nn.Parameter(init_scale * torch.randn(*shape, generator=gen))

        eye = torch.eye(D)
        if embedding == "one_hot":
            self.register_buffer("W_E", eye.clone())
        else:
            self.W_E = init(d, D)
        if attention == "uniform":
            self.register_buffer("W_K", torch.zeros(d, d))
            self.register_buffer("W_Q", torch.zeros(d, d))
        else:
            self.W_K = init(d, d)
            self.W_Q = init(d, d)
        if value == "identity":
            self.register_buffer("W_V", torch.eye(d))
        else:
            self.W_V = init(d, d)
        if head == "learned":
            self.W_U = init(D, d)
        elif head == "identity":
            self.register_buffer("W_U_fixed", eye.clone())

    # ---- named matrices ---------------------------------------------------------
    @property
    def unembedding(self) -> torch.Tensor:
        """The prediction head ``W_U``, shape ``(D, d)``."""
        if self.head == "tied":
            return self.W_E.T
        if self.head == "identity":
            return self.W_U_fixed
        return self.W_U

    def key_query_matrix(self) -> torch.Tensor:
        """Scores in token space, ``A = W_E^T W_K^T W_Q W_E / sqrt(d)``, shape ``(D, D)``.

        ``A[u, q]`` is the score key token ``u`` gets from query token ``q``.
        """
        return self.W_E.T @ self.W_K.T @ self.W_Q @ self.W_E / math.sqrt(self.d_model)

    def value_matrix(self) -> torch.Tensor:
        """End-to-end linear map from attended tokens to logits, ``W_U W_V W_E``, shape ``(D, D)``.

        With one-hot embeddings and an identity head this is ``W_V`` itself.
        """
        return self.unembedding @ self.W_V @ self.W_E

    def embedding_gram(self) -> torch.Tensor:
        """Inner products of token embeddings, ``W_E^T W_E``, shape ``(D, D)``."""
        return self.W_E.T @ self.W_E

    def freeze(self, *names: str) -> OneLayerTransformer:
        """Stop training the named matrices (``"W_E"``, ``"W_K"``, ``"W_Q"``, ``"W_V"``, ``"W_U"``).

        Freezing a matrix that is already fixed (a one-hot ``W_E``, uniform ``W_K``/``W_Q``,
        identity ``W_V`` or identity head) does nothing. A tied head *is* ``W_E^T``, so
        freeze ``"W_E"`` instead of ``"W_U"``.

        Raises
        ------
        ValueError
            For an unknown name, or ``"W_U"`` with a tied head.
        """
        allowed = ("W_E", "W_K", "W_Q", "W_V", "W_U")
        for name in names:
            if name not in allowed:
                raise ValueError(f"no matrix named {name!r}; choose from {', '.join(allowed)}")
            if name == "W_U" and self.head == "tied":
                raise ValueError("cannot freeze 'W_U' on its own: the head is tied to W_E (freeze 'W_E')")
        for name in names:
            matrix = self.unembedding if name == "W_U" else getattr(self, name)
            matrix.requires_grad_(False)
        return self

    # ---- forward ----------------------------------------------------------------
    def run_with_cache(self, inputs: torch.Tensor, selected: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """Forward pass that returns every intermediate under a stable name.

        Parameters
        ----------
        inputs : LongTensor, shape (batch, N)
            Token ids in ``[0, D)``.
        selected : BoolTensor, shape (batch, N), optional
            Selected positions; used to hide keys when ``attend_to_masked=False``.

        Returns
        -------
        cache : dict
            ``"embed"`` (batch, N, d); ``"attn.scores"`` (batch, query, key), hidden keys
            at ``-inf``; ``"attn.pattern"`` (batch, query, key), rows sum to 1 (or are all 0
            when a query has no visible key); ``"attn.out"`` (batch, N, d), the value-mixed
            output; ``"logits"`` (batch, N, D).
        """
        inputs = self._check_inputs(inputs)
        B, N = inputs.shape
        h = self.W_E.T[inputs]                                                    # (B, N, d)
        q = h @ self.W_Q.T                                                        # (B, N, d)
        k = h @ self.W_K.T                                                        # (B, N, d)
        scores = q @ k.transpose(1, 2) / math.sqrt(self.d_model)                  # (B, query, key)
        visible = key_visibility(selected, self.attend_to_masked, inputs.shape).to(inputs.device)  # (B, key)
        scores = scores.masked_fill(~visible[:, None, :], float("-inf"))
        any_key = visible.any(dim=1)                                              # (B,)
        pattern = torch.softmax(scores.masked_fill(~any_key[:, None, None], 0.0), dim=-1)
        pattern = pattern * any_key[:, None, None]                                # no key -> zero output
        mixed = pattern @ h                                                       # (B, N, d)
        out = mixed @ self.W_V.T                                                  # (B, N, d)
        logits = out @ self.unembedding.T                                         # (B, N, D)
        return {"embed": h, "attn.scores": scores, "attn.pattern": pattern, "attn.out": out, "logits": logits}

    def forward(self, inputs: torch.Tensor, selected: torch.Tensor | None = None) -> torch.Tensor:
        """Logits, shape ``(batch, N, D)``; see :meth:`run_with_cache`.

        With frozen uniform attention every query of a document sees the same average
        ``xbar``, so this takes a fast path that never forms the ``(N, N)`` pattern.
        """
        if self.attention != "uniform":
            return self.run_with_cache(inputs, selected)["logits"]
        inputs = self._check_inputs(inputs)
        B, N = inputs.shape
        dtype = self.W_E.dtype
        visible = key_visibility(selected, self.attend_to_masked, inputs.shape).to(inputs.device, dtype)  # (B, N)
        counts = torch.zeros(B, self.num_tokens, dtype=dtype, device=inputs.device)
        counts.scatter_add_(1, inputs, visible)                                          # (B, D)
        xbar = counts / visible.sum(1, keepdim=True).clamp_min(1.0)                      # (B, D)
        out = (xbar @ self.W_E.T) @ self.W_V.T                                           # (B, d)
        logits = out @ self.unembedding.T                                                # (B, D)
        return logits[:, None, :].expand(B, N, self.num_tokens)

    def attention_pattern(self, inputs: torch.Tensor, selected: torch.Tensor | None = None) -> torch.Tensor:
        """Attention weights, shape ``(batch, query, key)``."""
        return self.run_with_cache(inputs, selected)["attn.pattern"]

    def _check_inputs(self, inputs: torch.Tensor) -> torch.Tensor:
        return _check_inputs(inputs, self.num_tokens)

    def extra_repr(self) -> str:
        return (f"D={self.num_tokens}, d={self.d_model}, embedding={self.embedding!r}, attention={self.attention!r}, "
                f"value={self.value!r}, head={self.head!r}, attend_to_masked={self.attend_to_masked}")


class TwoLayerTransformer(nn.Module):
    """A small standard encoder for chapter 7: learned embeddings, ``num_layers`` blocks of
    multi-head attention with residual connections and LayerNorm, and a tied head.

    Parameters
    ----------
    num_tokens : int
        ``D``.
    d_model : int
        Embedding dimension ``d`` (divisible by ``num_heads``).
    num_heads : int
        Heads per layer.
    num_layers : int
        Number of attention blocks (default 2).
    attend_to_masked : bool
        As in :class:`OneLayerTransformer`.
    init_scale : float
        Standard deviation of the initial embeddings and projections.
    seed : int
        Initialisation seed.
    """

    def __init__(self, num_tokens: int, d_model: int = 32, *, num_heads: int = 1, num_layers: int = 2,
                 attend_to_masked: bool = True, init_scale: float = 0.1, seed: int = 0) -> None:
        super().__init__()
        D = check_positive_int("num_tokens", num_tokens)
        d = check_positive_int("d_model", d_model)
        H = check_positive_int("num_heads", num_heads)
        L = check_positive_int("num_layers", num_layers)
        if d % H:
            raise ValueError(f"d_model={d} must be divisible by num_heads, got num_heads={num_heads!r}")
        if not isinstance(attend_to_masked, bool):
            raise ValueError(f"attend_to_masked must be True or False, got {attend_to_masked!r}")
        _check_init_scale(init_scale)
        self.num_tokens, self.d_model, self.num_heads, self.num_layers = D, d, H, L
        self.attend_to_masked = attend_to_masked
        gen = make_generator(seed)  # validates seed
        self.W_E = nn.Parameter(init_scale * torch.randn(d, D, generator=gen))
        self.W_QKV = nn.ParameterList(
            [nn.Parameter(init_scale * torch.randn(3, d, d, generator=gen)) for _ in range(L)]
        )
        self.W_O = nn.ParameterList([nn.Parameter(init_scale * torch.randn(d, d, generator=gen)) for _ in range(L)])
        self.norms = nn.ModuleList([nn.LayerNorm(d) for _ in range(L)])

    def embedding_gram(self) -> torch.Tensor:
        """``W_E^T W_E``, shape ``(D, D)``."""
        return self.W_E.T @ self.W_E

    def run_with_cache(self, inputs: torch.Tensor, selected: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """Forward pass; keys ``"embed"``, ``"blocks.{l}.attn.pattern"`` (batch, head, query, key)
        and ``"logits"`` (batch, N, D)."""
        inputs = _check_inputs(inputs, self.num_tokens)
        B, N = inputs.shape
        H, dh = self.num_heads, self.d_model // self.num_heads
        x = self.W_E.T[inputs]                                                    # (B, N, d)
        cache: dict[str, torch.Tensor] = {"embed": x}
        visible = key_visibility(selected, self.attend_to_masked, inputs.shape).to(inputs.device)  # (B, key)
        for layer in range(self.num_layers):
            q, k, v = (x @ W.T for W in self.W_QKV[layer])                        # 3 x (B, N, d)
            q, k, v = (t.view(B, N, H, dh).transpose(1, 2) for t in (q, k, v))   # (B, H, N, dh)
            scores = q @ k.transpose(-1, -2) / math.sqrt(dh)                      # (B, H, query, key)
            scores = scores.masked_fill(~visible[:, None, None, :], float("-inf"))
            any_key = visible.any(dim=1)[:, None, None, None]
            pattern = torch.softmax(scores.masked_fill(~any_key, 0.0), dim=-1) * any_key
            mixed = (pattern @ v).transpose(1, 2).reshape(B, N, self.d_model)     # (B, N, d)
            x = self.norms[layer](x + mixed @ self.W_O[layer].T)                  # residual + LayerNorm
            cache[f"blocks.{layer}.attn.pattern"] = pattern
        cache["logits"] = x @ self.W_E                                            # (B, N, D), tied head
        return cache

    def forward(self, inputs: torch.Tensor, selected: torch.Tensor | None = None) -> torch.Tensor:
        """Logits, shape ``(batch, N, D)``."""
        return self.run_with_cache(inputs, selected)["logits"]
