"""The masked-language-modelling losses: the loss kinds and :func:`mlm_loss`, the reference loss
at the selected positions, which :func:`topicmech.train.train` and the fast paths of
:mod:`topicmech.fast` agree with up to rounding.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

from .data import check_docs
from .utils import check_choice

__all__ = ["LossKind", "LOSS_KINDS", "mlm_loss"]

LossKind = Literal["squared", "cross_entropy"]
#: The loss kinds, in the order error messages list them.
LOSS_KINDS: tuple[str, ...] = ("squared", "cross_entropy")


def mlm_loss(logits: torch.Tensor, targets: torch.Tensor, selected: torch.Tensor, kind: LossKind = "squared", *,
             check: bool = True) -> torch.Tensor:
    """Mean loss at the ``selected`` positions (BoolTensor ``(batch, N)``; 0 if none) of ``logits``
    ``(batch, N, D)`` against the true words ``targets`` ``(batch, N)``: ``kind="squared"``,
    ``||f - e_y||^2`` (the squared loss the book's derivations assume; the authors do not state the loss
    of their theorems), or ``"cross_entropy"`` over the ``D`` tokens.

    ``check=False`` skips validating the arguments (the training loop, which builds them, saves
    a pass over ``targets`` per step).
    """
    if check:
        check_choice("kind", kind, LOSS_KINDS)
        if not isinstance(logits, torch.Tensor) or logits.dim() != 3:
            raise ValueError(f"logits must be a tensor of shape (batch, N, D), got {type(logits).__name__}")
        shape = tuple(logits.shape[:2])
        if not isinstance(selected, torch.Tensor) or selected.dtype != torch.bool or tuple(selected.shape) != shape:
            raise ValueError(f"selected must be a BoolTensor of shape {shape}, got {type(selected).__name__} "
                             f"{tuple(getattr(selected, 'shape', ()))} {getattr(selected, 'dtype', '')}")
        if not isinstance(targets, torch.Tensor) or tuple(targets.shape) != shape:
            raise ValueError(f"targets must be a LongTensor of shape {shape}, got {tuple(getattr(targets, 'shape', ()))}")
        targets = check_docs(targets, logits.shape[-1], name="targets")
    f = logits[selected]                                                        # (n_sel, D)
    y = targets[selected]                                                       # (n_sel,)
    if f.shape[0] == 0:
        return logits.sum() * 0.0
    if kind == "squared":  # ||f - e_y||^2 = ||f||^2 - 2 f_y + 1
        return (f.pow(2).sum(-1) - 2 * f.gather(1, y[:, None]).squeeze(1) + 1).mean()
    return F.cross_entropy(f, y)
