"""Recipes for setting the authors' reported experiments beside ours.

Book: the reproduction page (*Reproducing the authors' experiments*). It trains the
one-layer model jointly (``W^K``, ``W^Q``, ``W^V`` from a near-zero initialisation) on LDA
data shaped like the authors' released synthetic set (10 topics of 10 words, Dirichlet
``alpha = 0.1``, documents of 100 to 150 words), reads attention by relation the way the
authors' inspection script does, and records the Frobenius norms of the three matrices.

- :func:`authors_attention_categories`: mean attention weight per key in the authors' three
  categories (same word, the query's own position included; same topic; different topic);
- :func:`synthetic_run`: one training run and its measurements;
- :func:`leave_zero_step`: the step at which a norm trace first covers a given fraction of
  its rise (the rule used for the two-stage timing);
- :func:`verdict`: reproduced / partly / not, from a list of checked comparisons.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch

from .data import LDATopicModel, TopicModel
from .dynamics import reaching_step
from .model import OneLayerTransformer
from .train import train
from .utils import check_positive_int

__all__ = [
    "RELATIONS",
    "SyntheticRun",
    "authors_lda",
    "authors_attention_categories",
    "synthetic_run",
    "leave_zero_step",
    "verdict",
]

#: The authors' three attention categories, in the order of their table.
RELATIONS: tuple[str, str, str] = ("same_word", "same_topic", "diff_topic")


def authors_lda() -> LDATopicModel:
    """The topic model of the authors' released synthetic data: 10 topics x 10 words, ``alpha = 0.1``."""
    return LDATopicModel(10, 10, 0.1)


def authors_attention_categories(
    pattern: torch.Tensor, inputs: torch.Tensor, topic_of_word: torch.Tensor
) -> dict[str, float]:
    """Mean attention weight per key in the authors' three categories.

    Every ordered (query, key) pair of real words, the query's own position included, falls
    into one category: ``"same_word"`` (same token id, so ``i = j`` counts here),
    ``"same_topic"`` (different word of the same topic) or ``"diff_topic"``. The value is
    the plain mean weight of the pairs in a category, so uniform attention over ``N`` keys
    reads ``1/N`` in every category: the scale of the authors' table.

    Parameters
    ----------
    pattern : Tensor, shape (batch, query, key)
        Attention weights (rows sum to 1).
    inputs : LongTensor, shape (batch, N)
        Token ids; ids ``>= len(topic_of_word)`` (``[MASK]``) are left out.
    topic_of_word : LongTensor, shape (V,)

    Returns
    -------
    dict
        ``{"same_word": ..., "same_topic": ..., "diff_topic": ...}``, NaN for an empty
        category.

    Raises
    ------
    ValueError
        If the shapes do not match.
    """
    if not isinstance(inputs, torch.Tensor) or inputs.dim() != 2 or inputs.dtype.is_floating_point:
        raise ValueError(f"inputs must be a LongTensor of shape (batch, N), got {getattr(inputs, 'shape', inputs)!r}")
    if not isinstance(pattern, torch.Tensor) or tuple(pattern.shape) != (*inputs.shape, inputs.shape[1]):
        raise ValueError(f"pattern must have shape {(*inputs.shape, inputs.shape[1])}, "
                         f"got {tuple(getattr(pattern, 'shape', ()))}")
    topic_of_word = torch.as_tensor(topic_of_word)
    if topic_of_word.dim() != 1 or topic_of_word.numel() == 0:
        raise ValueError(f"topic_of_word must be a non-empty 1-D tensor, got shape {tuple(topic_of_word.shape)}")
    V = topic_of_word.numel()
    is_word = inputs < V                                                        # (B, N)
    tok = inputs.clamp(max=V - 1)
    topic = topic_of_word[tok]                                                  # (B, N)
    pair = is_word[:, :, None] & is_word[:, None, :]                            # (B, query, key)
    same_tok = tok[:, :, None] == tok[:, None, :]
    same_top = topic[:, :, None] == topic[:, None, :]
    masks = (pair & same_tok, pair & same_top & ~same_tok, pair & ~same_top)
    out = {}
    for name, m in zip(RELATIONS, masks):
        out[name] = float(pattern[m].mean()) if bool(m.any()) else float("nan")
    return out


@dataclass
class SyntheticRun:
    """What :func:`synthetic_run` measures.

    Attributes
    ----------
    attention : dict of str to float
        :func:`authors_attention_categories` on the held-out documents after training.
    steps : ndarray of int, shape (k,)
        Steps at which the norms were read (0 = initialisation).
    norms : dict of str to ndarray, shape (k,)
        ``"W_K"``, ``"W_Q"``, ``"W_V"``: Frobenius norms along training.
    """

    attention: dict[str, float]
    steps: np.ndarray
    norms: dict[str, np.ndarray] = field(default_factory=dict)


def synthetic_run(
    seed: int,
    *,
    optimizer: Literal["sgd", "adam"],
    lr: float,
    steps: int,
    train_docs: tuple[torch.Tensor, torch.Tensor],
    heldout: torch.Tensor,
    topic_model: TopicModel | None = None,
    init_scale: float = 1e-3,
    batch_size: int = 40,
    probe_every: int = 10,
) -> SyntheticRun:
    """Train ``W^K``, ``W^Q``, ``W^V`` jointly with cross-entropy and measure attention and norms.

    The model is :class:`~topicmech.model.OneLayerTransformer` with one-hot embeddings, an
    identity head, ``attention="learned"``, ``value="learned"`` and masked keys hidden
    (``attend_to_masked=False``, as in the authors' released code); BERT corruption
    0.15/0.1/0.1; documents resampled with replacement from ``train_docs``.

    Parameters
    ----------
    seed : int
        Seed of the initialisation and of the batches (shifted by the seed offset through
        the package's generators).
    optimizer : {"sgd", "adam"}
    lr : float
    steps : int
    train_docs : (docs, lengths)
        Right-padded training documents and their lengths, e.g. from
        :func:`topicmech.fast.sample_variable_length`.
    heldout : LongTensor, shape (num_docs, N)
        Clean documents on which attention is read (the authors read 500 unmasked
        documents cut to 100 tokens).
    topic_model : TopicModel, optional
        Supplies ``topic_of_word``; defaults to :func:`authors_lda`.
    init_scale : float
        Standard deviation of the Gaussian initialisation.
    batch_size : int
        40, the released code's value.
    probe_every : int
        Steps between norm readings.

    Returns
    -------
    SyntheticRun
    """
    steps = check_positive_int("steps", steps)
    if not (isinstance(train_docs, tuple) and len(train_docs) == 2):
        raise ValueError("train_docs must be a tuple (docs, lengths)")
    if not isinstance(heldout, torch.Tensor) or heldout.dim() != 2:
        raise ValueError(f"heldout must be a LongTensor of shape (num_docs, N), got {getattr(heldout, 'shape', heldout)!r}")
    topic_model = authors_lda() if topic_model is None else topic_model
    if not isinstance(topic_model, TopicModel):
        raise ValueError(f"topic_model must be a TopicModel, got {type(topic_model).__name__}")
    docs, lengths = train_docs
    model = OneLayerTransformer(topic_model.num_tokens, attention="learned", value="learned",
                                attend_to_masked=False, init_scale=init_scale, seed=seed)
    probes = {name: (lambda m, name=name: float(getattr(m, name).norm())) for name in ("W_K", "W_Q", "W_V")}
    hist = train(model, docs, lengths=lengths, steps=steps, batch_size=batch_size, loss="cross_entropy",
                 optimizer=optimizer, lr=lr, seed=seed + 7919, probes=probes, probe_every=probe_every)
    with torch.no_grad():
        pattern = model.attention_pattern(heldout)                              # (n, query, key)
    attention = authors_attention_categories(pattern, heldout, topic_model.topic_of_word)
    return SyntheticRun(attention=attention, steps=np.asarray(hist.probe_step),
                        norms={k: hist.probe(k) for k in probes})


def leave_zero_step(steps: Sequence[int] | np.ndarray, norms: Sequence[float] | np.ndarray,
                    fraction: float = 0.1) -> int | None:
    """First step at which a norm has covered ``fraction`` of its rise from step 0 to the end.

    A thin wrapper of :func:`topicmech.dynamics.reaching_step` with ``reference="final"``;
    None when the norm never rises above its initial value.
    """
    return reaching_step(steps, norms, fraction=fraction, reference="final")


def verdict(checks: Sequence[bool], *, essential: Sequence[bool] | None = None) -> str:
    """``"reproduced"``, ``"partly"`` or ``"not"`` from checked comparisons.

    Parameters
    ----------
    checks : sequence of bool
        Each entry: whether one of the authors' comparisons holds in our measurement.
    essential : sequence of bool, optional
        Marks the comparisons without which the row is ``"not"`` reproduced (default:
        the first one).

    Returns
    -------
    str
        ``"reproduced"`` if every check holds, ``"not"`` if an essential one fails,
        ``"partly"`` otherwise.
    """
    checks = [bool(c) for c in checks]
    if not checks:
        raise ValueError("checks must hold at least one comparison")
    essential = [True] + [False] * (len(checks) - 1) if essential is None else [bool(e) for e in essential]
    if len(essential) != len(checks):
        raise ValueError(f"essential must have {len(checks)} entries, got {len(essential)}")
    if all(checks):
        return "reproduced"
    if any(e and not c for c, e in zip(checks, essential)):
        return "not"
    return "partly"
