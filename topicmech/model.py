"""The paper's one-layer, one-head transformer, with a switch for every setting, and an
attention-only encoder of ``num_layers`` multi-head layers (:class:`TwoLayerTransformer`).

The one-layer model has no residual connection, LayerNorm, MLP or positional encoding, and no
bias unless ``bias=True`` adds the authors' logit bias ``b_pred``. Three switches, all off by
default, rebuild the released code's model instead (:func:`topicmech.reproduce.released_code_run`):
``input_norm`` (its embedding block), ``attention_bias`` (biases on the key, query and value
maps), ``init="torch"`` (PyTorch's default initialisation), with ``pad_id`` for padded batches. Matrices act on column
vectors (code: ``h @ W_V.T`` on rows); attention patterns are ``(batch, query, key)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.hooks import RemovableHandle

from .data import check_docs
from .setting import Setting, check_attend_to_masked
from .utils import check_choice, check_float, check_positive_int, make_generator

__all__ = ["INPUT_NORM_EPS", "OneLayerTransformer", "TwoLayerTransformer", "key_visibility", "token_counts"]

Embedding = Literal["one_hot", "learned"]
Attention = Literal["uniform", "learned"]
Value = Literal["identity", "learned"]
Head = Literal["identity", "tied", "learned"]
Init = Literal["gaussian", "torch", "uniform"]
#: The epsilon of the released code's embedding LayerNorm (Hugging Face BERT's default).
INPUT_NORM_EPS = 1e-12


def key_visibility(selected: torch.Tensor | None, shape: torch.Size, *, attend_to_masked: bool) -> torch.Tensor:
    """Which positions may serve as keys, a BoolTensor of shape ``shape = (batch, N)``: all, or all
    but the ``selected`` ones (a BoolTensor of that shape, or None for none) unless ``attend_to_masked``
    (see :class:`topicmech.Setting` for the two conventions)."""
    if selected is not None and (not isinstance(selected, torch.Tensor) or selected.dtype != torch.bool
                                 or tuple(selected.shape) != tuple(shape)):  # an int mask: ~1 == -2
        raise ValueError(f"selected must be a BoolTensor of shape {tuple(shape)}, got {type(selected).__name__} "
                         f"{tuple(getattr(selected, 'shape', ()))} {getattr(selected, 'dtype', '')}")
    if check_attend_to_masked(attend_to_masked) or selected is None:
        return torch.ones(shape, dtype=torch.bool, device=selected.device if selected is not None else None)
    return ~selected


def _check_inputs(inputs: torch.Tensor, num_tokens: int) -> torch.Tensor:
    if not isinstance(inputs, torch.Tensor):
        raise ValueError(f"inputs must be a LongTensor of shape (batch, N), got {type(inputs).__name__}")
    return check_docs(inputs, num_tokens, name="inputs")


def token_counts(ids: torch.Tensor, weights: torch.Tensor, num_tokens: int) -> torch.Tensor:
    """Weighted token counts per row: ``counts[m, u] = sum_j weights[m, j] [ids[m, j] = u]``.

    ``ids`` (LongTensor, ids in ``[0, num_tokens)``) and ``weights`` (float) have shape
    ``(M, N)``; the result has shape ``(M, num_tokens)`` and ``weights``' dtype. Not validated.
    """
    counts = torch.zeros(ids.shape[0], num_tokens, dtype=weights.dtype, device=ids.device)
    return counts.scatter_add_(1, ids, weights)


class OneLayerTransformer(nn.Module):
    """One-layer, one-head transformer for masked language modelling on topic data.

    ``W_E`` ``(d, D)``, ``W_K``, ``W_Q``, ``W_V`` ``(d, d)`` and ``W_U`` ``(D, d)`` are parameters
    when learned and buffers when fixed (see :meth:`freeze`); scores are scaled by ``1/sqrt(d)``.

    Parameters
    ----------
    num_tokens : int
        ``D = V + 1`` (real words, then ``[MASK]``).
    d_model : int, optional
        ``d``; must be ``D`` (the default) for one-hot embeddings or an identity head.
    embedding : {"one_hot", "learned"}
        ``"one_hot"``: ``W_E = I`` (a buffer); ``"learned"``: a trained ``W_E``.
    attention : {"uniform", "learned"}
        ``"uniform"``: ``W_K = W_Q = 0`` frozen, so every query attends uniformly to the visible
        keys; ``"learned"``: trained ``W_K`` and ``W_Q``.
    value : {"identity", "learned"}
        ``"identity"``: ``W_V = I`` (a buffer); ``"learned"``: a trained ``W_V``.
    head : {"identity", "tied", "learned"}
        ``W_U = I``, ``W_E^T`` or learned.
    attend_to_masked : bool
        Whether selected positions are keys: True, the theory's convention; False, the released
        code's (no default: see :class:`topicmech.Setting`).
    init_scale : float
        The scale of the initial weights (>= 0); what it means depends on ``init``. Learned
        ``W_E`` and ``W_U`` are always drawn from ``N(0, init_scale^2)``; learned ``W_K``,
        ``W_Q``, ``W_V`` are drawn from ``N(0, init_scale^2)`` under ``init="gaussian"``,
        uniformly from ``[0, init_scale)`` under ``init="uniform"``, and ignore it under
        ``init="torch"``.
    seed : int
        Seeds the initial weights.
    bias : bool
        Add a trained logit bias ``b_pred`` (shape ``(D,)``, initially 0; the authors' ``b^pred``) to
        every position's logits; without it ``b_pred`` is None.
    input_norm : bool
        The released code's embedding block: token ``u`` enters as ``LayerNorm(W_E e_u + t)``, with
        a trained token-type vector ``t`` (shape ``(d,)``, drawn from N(0, 1)) and a LayerNorm with
        trained gain ``ln_weight`` (initially 1) and shift ``ln_bias`` (initially 0), epsilon
        :data:`INPUT_NORM_EPS`. Without it ``t``, ``ln_weight``, ``ln_bias`` are None.
    attention_bias : bool
        Trained biases ``b_V`` on the value map and, with learned attention, ``b_K``, ``b_Q`` on
        the key and query maps (None when absent), as in the released code.
    init : {"gaussian", "torch", "uniform"}
        How the learned ``W_K``, ``W_Q``, ``W_V`` and their biases start. ``"gaussian"``:
        entries from ``N(0, init_scale^2)``, biases 0. ``"torch"``: PyTorch's default for a
        linear layer, uniform in ``(-1/sqrt(d), 1/sqrt(d))`` for the matrices and their biases
        (``init_scale`` unused), the released code's default. ``"uniform"``: entries uniform in
        ``[0, init_scale)``, biases 0, the released code's small initialisation
        (``zero_init_attn``). Learned ``W_E`` and ``W_U`` are Gaussian under every ``init``.
    pad_id : int, optional
        A token id that marks padding: positions holding it are never keys.
    """

    def __init__(self, num_tokens: int, d_model: int | None = None, *, embedding: Embedding = "one_hot",
                 attention: Attention = "uniform", value: Value = "learned", head: Head = "identity",
                 attend_to_masked: bool, init_scale: float = 0.01, bias: bool = False, seed: int = 0,
                 input_norm: bool = False, attention_bias: bool = False, init: Init = "gaussian",
                 pad_id: int | None = None) -> None:
        super().__init__()
        D = check_positive_int("num_tokens", num_tokens)
        d = D if d_model is None else check_positive_int("d_model", d_model)
        self.embedding = check_choice("embedding", embedding, ("one_hot", "learned"))
        self.attention = check_choice("attention", attention, ("uniform", "learned"))
        self.value = check_choice("value", value, ("identity", "learned"))
        self.head = check_choice("head", head, ("identity", "tied", "learned"))
        for what, fixed in (("one-hot embeddings", embedding == "one_hot"), ("an identity head", head == "identity")):
            if fixed and d != D:
                raise ValueError(f"d_model must equal num_tokens={D} for {what}, got {d_model!r}")
        self.init_scale = check_float("init_scale", init_scale, positive=False)
        self.attend_to_masked = check_attend_to_masked(attend_to_masked)
        self.num_tokens, self.d_model = D, d
        self.init = check_choice("init", init, ("gaussian", "torch", "uniform"))
        for name, flag in (("bias", bias), ("input_norm", input_norm), ("attention_bias", attention_bias)):
            if not isinstance(flag, bool):
                raise ValueError(f"{name} must be True or False, got {flag!r}")
        if pad_id is not None and (isinstance(pad_id, bool) or not isinstance(pad_id, int)
                                   or not 0 <= pad_id < D):
            raise ValueError(f"pad_id must be None or a token id in [0, {D}), got {pad_id!r}")
        self.pad_id = pad_id
        gen = make_generator(seed)
        bound = 1.0 / math.sqrt(d)

        def gaussian(*shape: int) -> nn.Parameter:
            return nn.Parameter(init_scale * torch.randn(*shape, generator=gen))

        def linear(*shape: int) -> nn.Parameter:   # torch.nn.Linear's default: U(-1/sqrt(d), 1/sqrt(d))
            return nn.Parameter((2.0 * torch.rand(*shape, generator=gen) - 1.0) * bound)

        def small_uniform(*shape: int) -> nn.Parameter:  # the released code's zero_init_attn
            return nn.Parameter(init_scale * torch.rand(*shape, generator=gen))

        def init(*shape: int) -> nn.Parameter:
            return gaussian(*shape)

        if embedding == "one_hot":
            self.register_buffer("W_E", torch.eye(D))
        else:
            self.W_E = init(d, D)
        attn_init = {"torch": linear, "uniform": small_uniform, "gaussian": gaussian}[self.init]
        if attention == "uniform":
            self.register_buffer("W_K", torch.zeros(d, d))
            self.register_buffer("W_Q", torch.zeros(d, d))
        else:
            self.W_K = attn_init(d, d)
            self.W_Q = attn_init(d, d)
        if value == "identity":
            self.register_buffer("W_V", torch.eye(d))
        else:
            self.W_V = attn_init(d, d)
        if head == "learned":
            self.W_U = init(D, d)
        elif head == "identity":
            self.register_buffer("W_U_fixed", torch.eye(D))
        self.b_pred = nn.Parameter(torch.zeros(D)) if bias else None
        bias_init = linear if self.init == "torch" else (lambda n: nn.Parameter(torch.zeros(n)))
        learned_kq = attention_bias and attention == "learned"
        self.b_K = bias_init(d) if learned_kq else None
        self.b_Q = bias_init(d) if learned_kq else None
        self.b_V = bias_init(d) if attention_bias and value == "learned" else None
        self.t = nn.Parameter(torch.randn(d, generator=gen)) if input_norm else None
        self.ln_weight = nn.Parameter(torch.ones(d)) if input_norm else None
        self.ln_bias = nn.Parameter(torch.zeros(d)) if input_norm else None
        #: Whether a forward hook or pre-hook was ever registered (it stays set after the hook is removed):
        #: :func:`topicmech.train.train` then runs the forward pass, which the hooks see, not a fast path.
        self.forward_hooked = False

    @classmethod
    def from_setting(cls, setting: Setting, d_model: int | None = None, **kwargs: Any) -> OneLayerTransformer:
        """A model for ``setting``: ``num_tokens = setting.D`` and ``attend_to_masked =
        setting.attend_to_masked``; ``d_model`` and the other keyword arguments as in the
        constructor. ``num_tokens`` or ``attend_to_masked`` given as well must agree with the
        setting (``ValueError`` naming both values otherwise).

        Examples
        --------
        >>> s = Setting.stage2_quick(attend_to_masked=False)
        >>> m = OneLayerTransformer.from_setting(s, attention="learned")
        >>> (m.num_tokens, m.attend_to_masked, m.attention)
        (21, False, 'learned')
        """
        if not isinstance(setting, Setting):
            raise ValueError(f"setting must be a topicmech.Setting, got {setting!r}")
        for name, want in (("num_tokens", setting.D), ("attend_to_masked", setting.attend_to_masked)):
            have = kwargs.pop(name, want)
            if have != want or isinstance(have, bool) != isinstance(want, bool):
                raise ValueError(f"{name}={have!r} disagrees with the setting's {want!r}")
        return cls(setting.D, d_model, attend_to_masked=setting.attend_to_masked, **kwargs)

    def register_forward_hook(self, hook: Callable[..., Any], *args: Any, **kwargs: Any) -> RemovableHandle:
        """:meth:`torch.nn.Module.register_forward_hook`, also setting :attr:`forward_hooked`."""
        self.forward_hooked = True
        return super().register_forward_hook(hook, *args, **kwargs)

    def register_forward_pre_hook(self, hook: Callable[..., Any], *args: Any, **kwargs: Any) -> RemovableHandle:
        """:meth:`torch.nn.Module.register_forward_pre_hook`, also setting :attr:`forward_hooked`."""
        self.forward_hooked = True
        return super().register_forward_pre_hook(hook, *args, **kwargs)

    @property
    def released_code_switches(self) -> bool:
        """Whether any of ``input_norm``, ``attention_bias``, ``pad_id`` is on (the fast paths of
        :mod:`topicmech.fast` then do not apply)."""
        return (self.t is not None or self.b_V is not None or self.b_K is not None
                or self.pad_id is not None)

    def token_embeddings(self) -> torch.Tensor:
        """What each token id enters the attention as, shape ``(D, d)``: ``W_E^T``, or with
        ``input_norm`` the rows ``LayerNorm(W_E e_u + t)``."""
        if self.t is None:
            return self.W_E.T
        return F.layer_norm(self.W_E.T + self.t, (self.d_model,), self.ln_weight, self.ln_bias, INPUT_NORM_EPS)

    def effective_value_matrix(self) -> torch.Tensor:
        """The map from a token's one-hot input to the logits it contributes, shape ``(D, D)``
        (column ``u`` = input token ``u``): ``W_U (W_V h_u + b_V)`` with ``h_u`` the token's row of
        :meth:`token_embeddings`; equal to :meth:`value_matrix` without the released code's
        switches. Under uniform attention the logits are the mean of these columns over the keys."""
        out = self.token_embeddings() @ self.W_V.T                                # (D, d)
        if self.b_V is not None:
            out = out + self.b_V
        return self.unembedding @ out.T

    @property
    def unembedding(self) -> torch.Tensor:
        """The prediction head ``W_U``, shape ``(D, d)``."""
        if self.head == "tied":
            return self.W_E.T
        return self.W_U_fixed if self.head == "identity" else self.W_U

    def key_query_matrix(self) -> torch.Tensor:
        """``A = W_E^T W_K^T W_Q W_E / sqrt(d)``, shape ``(D, D)``: ``A[u, q]`` is the score key
        token ``u`` gets from query token ``q``."""
        return self.W_E.T @ self.W_K.T @ self.W_Q @ self.W_E / math.sqrt(self.d_model)

    def value_matrix(self) -> torch.Tensor:
        """``W_U W_V W_E``, shape ``(D, D)``: attended tokens to logits (``W_V`` for one-hot, identity head)."""
        return self.unembedding @ self.W_V @ self.W_E

    def embedding_gram(self) -> torch.Tensor:
        """``W_E^T W_E``, shape ``(D, D)``."""
        return self.W_E.T @ self.W_E

    def freeze(self, *names: str) -> OneLayerTransformer:
        """Stop training the named matrices (``"W_E"``, ``"W_K"``, ``"W_Q"``, ``"W_V"``, ``"W_U"``; a tied
        head is ``W_E^T``, so freeze ``"W_E"``); return the model."""
        allowed = ("W_E", "W_K", "W_Q", "W_V", "W_U")
        for name in names:
            if name not in allowed:
                raise ValueError(f"no matrix named {name!r}; choose from {', '.join(allowed)}")
            if name == "W_U" and self.head == "tied":
                raise ValueError("cannot freeze 'W_U' on its own: the head is tied to W_E (freeze 'W_E')")
        for name in names:
            (self.unembedding if name == "W_U" else getattr(self, name)).requires_grad_(False)
        return self

    def _visible(self, inputs: torch.Tensor, selected: torch.Tensor | None) -> torch.Tensor:
        """Which positions are keys, BoolTensor ``(batch, N)``: :func:`key_visibility`, less padding."""
        visible = key_visibility(selected, inputs.shape, attend_to_masked=self.attend_to_masked).to(inputs.device)
        return visible if self.pad_id is None else visible & (inputs != self.pad_id)

    def run_with_cache(self, inputs: torch.Tensor, selected: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """Forward pass on token ids ``inputs`` ``(batch, N)`` with BoolTensor ``selected`` (optional),
        returning every intermediate: ``"embed"`` (batch, N, d); ``"attn.scores"`` (batch, query, key),
        hidden keys at ``-inf``; ``"attn.pattern"``, rows sum to 1 (0 without a visible key);
        ``"attn.out"`` (batch, N, d); ``"logits"`` (batch, N, D)."""
        inputs = _check_inputs(inputs, self.num_tokens)
        h, scores, pattern = self._attend(inputs, selected)
        mixed = pattern @ h                                                       # (B, N, d)
        out = mixed @ self.W_V.T                                                  # (B, N, d)
        if self.b_V is not None:
            out = out + self.b_V
        logits = out @ self.unembedding.T                                         # (B, N, D)
        if self.b_pred is not None:
            logits = logits + self.b_pred
        return {"embed": h, "attn.scores": scores, "attn.pattern": pattern, "attn.out": out, "logits": logits}

    def forward(self, inputs: torch.Tensor, selected: torch.Tensor | None = None) -> torch.Tensor:
        """Logits, shape ``(batch, N, D)``, as :meth:`run_with_cache`; with uniform attention every
        query sees the same mean ``xbar`` of the visible keys, so no ``(N, N)`` pattern is formed."""
        if self.attention != "uniform":
            return self.run_with_cache(inputs, selected)["logits"]
        inputs = _check_inputs(inputs, self.num_tokens)
        B, N = inputs.shape
        visible = self._visible(inputs, selected).to(self.W_E.dtype)
        counts = token_counts(inputs, visible, self.num_tokens)                         # (B, D)
        xbar = counts / visible.sum(1, keepdim=True).clamp_min(1.0)                      # (B, D)
        out = (xbar @ self.token_embeddings()) @ self.W_V.T                              # (B, d)
        if self.b_V is not None:
            out = out + self.b_V
        logits = out @ self.unembedding.T                                                # (B, D)
        if self.b_pred is not None:
            logits = logits + self.b_pred
        return logits[:, None, :].expand(B, N, self.num_tokens)

    def attention_pattern(self, inputs: torch.Tensor, selected: torch.Tensor | None = None) -> torch.Tensor:
        """Attention weights, shape ``(batch, query, key)``, as in :meth:`run_with_cache` (without the
        value, head and logits)."""
        return self._attend(_check_inputs(inputs, self.num_tokens), selected)[2]

    def _attend(self, inputs: torch.Tensor, selected: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
        """Embeddings, scores and pattern of :meth:`run_with_cache` for checked ``inputs``."""
        h = self.token_embeddings()[inputs]                                       # (B, N, d)
        q = h @ self.W_Q.T                                                        # (B, N, d)
        k = h @ self.W_K.T                                                        # (B, N, d)
        if self.b_K is not None:
            q, k = q + self.b_Q, k + self.b_K
        scores = q @ k.transpose(1, 2) / math.sqrt(self.d_model)                  # (B, query, key)
        visible = self._visible(inputs, selected)                                 # (B, key)
        scores = scores.masked_fill(~visible[:, None, :], float("-inf"))
        any_key = visible.any(dim=1)                                              # (B,)
        if bool(any_key.all()):                                                   # the usual case
            pattern = torch.softmax(scores, dim=-1)
        else:
            pattern = torch.softmax(scores.masked_fill(~any_key[:, None, None], 0.0), dim=-1)
            pattern = pattern * any_key[:, None, None]                            # no key -> zero output
        return h, scores, pattern

    def extra_repr(self) -> str:
        return (f"D={self.num_tokens}, d={self.d_model}, embedding={self.embedding!r}, attention={self.attention!r}, "
                f"value={self.value!r}, head={self.head!r}, attend_to_masked={self.attend_to_masked}"
                + (", bias=True" if self.b_pred is not None else "")
                + (", input_norm=True" if self.t is not None else "")
                + (", attention_bias=True" if self.b_V is not None or self.b_K is not None else "")
                + (f", init={self.init!r}" if self.init != "gaussian" else "")
                + (f", pad_id={self.pad_id}" if self.pad_id is not None else ""))


class TwoLayerTransformer(nn.Module):
    """An attention-only encoder: learned embeddings ``W_E`` ``(d, D)``, ``num_layers`` (``L``, two by
    default) layers of ``num_heads`` (``H``) head attention, and a tied head ``W_E^T``.

    Layer ``l`` computes ``x <- LayerNorm_l(x + MultiHead_l(x) W_O[l]^T)``: queries, keys and values
    ``x W_QKV[l][i]^T`` (``i = 0, 1, 2``, each ``(d, d)``) split into ``H`` heads of ``d / H``
    dimensions, scores scaled by ``1/sqrt(d / H)``, hidden keys (``attend_to_masked``) at ``-inf``.
    No MLP, positional encoding or bias in the projections (the LayerNorms have their affine
    weights and biases). ``d_model`` must be divisible by ``num_heads``; ``init_scale`` is the
    standard deviation of the initial embeddings and projections; ``attend_to_masked`` (no
    default) as in :class:`OneLayerTransformer`.
    """

    def __init__(self, num_tokens: int, d_model: int = 32, *, num_heads: int = 1, num_layers: int = 2,
                 attend_to_masked: bool, init_scale: float = 0.1, seed: int = 0) -> None:
        super().__init__()
        D = check_positive_int("num_tokens", num_tokens)
        d = check_positive_int("d_model", d_model)
        H = check_positive_int("num_heads", num_heads)
        L = check_positive_int("num_layers", num_layers)
        if d % H:
            raise ValueError(f"d_model={d} must be divisible by num_heads, got num_heads={num_heads!r}")
        self.attend_to_masked = check_attend_to_masked(attend_to_masked)
        check_float("init_scale", init_scale, positive=False)
        self.num_tokens, self.d_model, self.num_heads, self.num_layers = D, d, H, L
        gen = make_generator(seed)
        self.W_E = nn.Parameter(init_scale * torch.randn(d, D, generator=gen))
        self.W_QKV = nn.ParameterList([nn.Parameter(init_scale * torch.randn(3, d, d, generator=gen)) for _ in range(L)])
        self.W_O = nn.ParameterList([nn.Parameter(init_scale * torch.randn(d, d, generator=gen)) for _ in range(L)])
        self.norms = nn.ModuleList([nn.LayerNorm(d) for _ in range(L)])

    def embedding_gram(self) -> torch.Tensor:
        """``W_E^T W_E``, shape ``(D, D)``."""
        return self.W_E.T @ self.W_E

    def _visible(self, inputs: torch.Tensor, selected: torch.Tensor | None) -> torch.Tensor:
        """Which positions are keys, BoolTensor ``(batch, N)``: :func:`key_visibility`, less padding."""
        visible = key_visibility(selected, inputs.shape, attend_to_masked=self.attend_to_masked).to(inputs.device)
        return visible if self.pad_id is None else visible & (inputs != self.pad_id)

    def run_with_cache(self, inputs: torch.Tensor, selected: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """Forward pass; keys ``"embed"``, ``"blocks.{l}.attn.pattern"`` (batch, head, query, key)
        and ``"logits"`` (batch, N, D)."""
        inputs = _check_inputs(inputs, self.num_tokens)
        B, N = inputs.shape
        H, dh = self.num_heads, self.d_model // self.num_heads
        x = self.W_E.T[inputs]                                                    # (B, N, d)
        cache: dict[str, torch.Tensor] = {"embed": x}
        visible = key_visibility(selected, inputs.shape, attend_to_masked=self.attend_to_masked).to(inputs.device)  # (B, key)
        hidden_keys = torch.zeros(visible.shape, dtype=x.dtype, device=x.device).masked_fill_(~visible, -math.inf)
        hidden_keys = hidden_keys[:, None, None, :]                                # (B, 1, 1, key): 0 or -inf
        any_key = visible.any(dim=1)[:, None, None, None]                          # (B, 1, 1, 1)
        every_doc_has_a_key = bool(any_key.all())                                  # the usual case
        for layer in range(self.num_layers):
            q, k, v = (x @ W.T for W in self.W_QKV[layer])                        # 3 x (B, N, d)
            q, k, v = (t.view(B, N, H, dh).transpose(1, 2) for t in (q, k, v))   # (B, H, N, dh)
            scores = q @ k.transpose(-1, -2) / math.sqrt(dh) + hidden_keys        # (B, H, query, key)
            if every_doc_has_a_key:
                pattern = torch.softmax(scores, dim=-1)
            else:  # a document without visible keys attends to nothing (output 0), as in the one-layer model
                pattern = torch.softmax(scores.masked_fill(~any_key, 0.0), dim=-1) * any_key
            mixed = (pattern @ v).transpose(1, 2).reshape(B, N, self.d_model)     # (B, N, d)
            x = self.norms[layer](x + mixed @ self.W_O[layer].T)                  # residual + LayerNorm
            cache[f"blocks.{layer}.attn.pattern"] = pattern
        cache["logits"] = x @ self.W_E                                            # (B, N, D), tied head
        return cache

    def forward(self, inputs: torch.Tensor, selected: torch.Tensor | None = None) -> torch.Tensor:
        """Logits, shape ``(batch, N, D)``."""
        return self.run_with_cache(inputs, selected)["logits"]
