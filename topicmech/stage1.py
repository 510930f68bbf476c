"""Stage 1 in practice: train the value matrix under uniform attention, compare it with the optimum.

Book: chapter 4 (*Stage 1: the value matrix becomes block-structured*) trains ``W^V``
with these helpers and checks the result against the exact optimum of
:func:`topicmech.theory.optimal_value_matrix`; its test file re-runs the claims over
several seeds with the same settings, which is why the settings live here.

* :func:`train_value_matrix`: one-hot embeddings, frozen uniform attention, identity
  head, ``W^V`` trained by plain SGD on fresh documents every step (through
  :func:`topicmech.train.train`), with a step-decay learning-rate schedule.
* :data:`SQUARED_SCHEDULE`, :data:`CROSS_ENTROPY_SCHEDULE`: the schedules the book uses.
* :func:`block_errors`: learned orbit means minus the exact ones.
* :func:`centre_columns`, :func:`contrast_correlation`, :func:`column_topic_margin`:
  compare matrices up to the column shifts that a softmax cannot see (cross-entropy
  training).

Notation as on the book's notation page: ``V = T v`` words, ``[MASK]`` has id ``V``,
``D = V + 1``; matrices act on column vectors (``W[output, input]``).

Why a schedule? Under squared loss the gradient is ``2 (W Sigma - C)``, so SGD contracts
the error along each eigenvector of ``Sigma`` at the rate ``2 lr sigma``. The stable
learning rate is capped by the largest eigenvalue (the all-ones / ``[MASK]`` direction),
while the same-word boost lives on the smallest one (within-topic contrasts, of order
``1 / N``). A large step first removes the bias along that slow direction; smaller steps
then shrink the SGD noise, whose stationary variance is proportional to the step size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Sequence

import numpy as np
import torch

from .data import TopicModel
from .model import OneLayerTransformer
from .theory import ValueBlocks, orbit_means
from .train import train
from .utils import check_masking, check_positive_int

__all__ = [
    "SQUARED_SCHEDULE",
    "CROSS_ENTROPY_SCHEDULE",
    "DEFAULT_BATCH_SIZE",
    "StageOneRun",
    "train_value_matrix",
    "block_errors",
    "centre_columns",
    "contrast_correlation",
    "column_topic_margin",
]

Schedule = Sequence[tuple[float, int]]

#: ``(learning rate, steps)`` phases for squared loss (plain SGD). For T = v = 10, tau = 2, N = 64 the largest stable step is about
#: ``1 / lambda_max(Sigma) ~ 39``; 30 removes the slow within-topic bias, 10 and 4
#: shrink the noise.
SQUARED_SCHEDULE: tuple[tuple[float, int], ...] = ((30.0, 500), (10.0, 400), (4.0, 300))

#: ``(learning rate, steps)`` for cross-entropy (plain SGD). The softmax divides the
#: curvature by roughly ``D``, so the step can be larger; the run is not meant to
#: converge (the cross-entropy optimum has the ``[MASK]`` output row at minus infinity),
#: only to show the block pattern.
CROSS_ENTROPY_SCHEDULE: tuple[tuple[float, int], ...] = ((100.0, 300),)

#: Documents per SGD step, by loss (the squared-loss run needs less noise).
DEFAULT_BATCH_SIZE: dict[str, int] = {"squared": 128, "cross_entropy": 64}


def _check_schedule(schedule: object) -> tuple[tuple[float, int], ...]:
    try:
        phases = tuple((float(lr), steps) for lr, steps in schedule)  # type: ignore[union-attr]
    except (TypeError, ValueError):
        raise ValueError(f"schedule must be a sequence of (lr, steps) pairs, got {schedule!r}") from None
    if not phases:
        raise ValueError(f"schedule must have at least one (lr, steps) phase, got {schedule!r}")
    out = []
    for lr, steps in phases:
        if not (math.isfinite(lr) and lr > 0):
            raise ValueError(f"schedule learning rates must be positive and finite, got {schedule!r}")
        if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
            raise ValueError(f"schedule steps must be positive integers, got {schedule!r}")
        out.append((lr, int(steps)))
    return tuple(out)


def _phase_seeds(seed: int, n: int) -> list[int]:
    """Independent seeds for the data of each phase, derived from ``seed``."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    return [int(s.generate_state(1)[0]) for s in np.random.SeedSequence(int(seed)).spawn(n)]


@dataclass
class StageOneRun:
    """Result of :func:`train_value_matrix`.

    Attributes
    ----------
    W_V : ndarray, shape (D, D)
        The trained value matrix (last iterate, float64), rows = output token,
        columns = input token.
    probe_step : ndarray, shape (P,)
        Global steps at which the orbit means were recorded (0 = initialisation).
    blocks : ndarray, shape (P, 4)
        Orbit means at those steps: diagonal, same topic, different topic, ``[MASK]``
        column (as in :func:`topicmech.theory.orbit_means`).
    loss : ndarray, shape (steps,)
        Minibatch loss at every step (without the L2 term).
    schedule : tuple of (float, int)
        The ``(lr, steps)`` phases that were run.
    num_topics, words_per_topic : int
        ``T`` and ``v``, to expand or summarise ``W_V``.
    """

    W_V: np.ndarray
    probe_step: np.ndarray
    blocks: np.ndarray
    loss: np.ndarray
    schedule: tuple[tuple[float, int], ...]
    num_topics: int
    words_per_topic: int

    @property
    def steps(self) -> int:
        """Total number of SGD steps."""
        return int(sum(s for _, s in self.schedule))

    def final_blocks(self) -> ValueBlocks:
        """Orbit means of the trained ``W_V``."""
        return orbit_means(self.W_V, self.num_topics, self.words_per_topic)


def train_value_matrix(
    topic_model: TopicModel,
    doc_len: int,
    *,
    attend_to_masked: bool = True,
    loss: Literal["squared", "cross_entropy"] = "squared",
    schedule: Schedule | None = None,
    batch_size: int | None = None,
    l2: float = 0.0,
    init_scale: float = 0.0,
    mask_prob: float = 0.15,
    keep_prob: float = 0.1,
    random_prob: float = 0.1,
    seed: int = 0,
    probe_every: int = 20,
) -> StageOneRun:
    """Train ``W^V`` of the stage-1 model by SGD with a step-decay learning rate.

    The model is :class:`topicmech.model.OneLayerTransformer` with one-hot embeddings,
    frozen uniform attention (``W^K = W^Q = 0``), an identity head and a learned
    ``W^V`` initialised at ``init_scale`` times a Gaussian (0 by default, so
    ``W^V = 0``). Each phase of ``schedule`` calls :func:`topicmech.train.train` with
    plain SGD at that learning rate on fresh documents from ``topic_model`` (its own
    data seed, derived from ``seed``), so the run optimises the population loss.

    Parameters
    ----------
    topic_model : TopicModel
        Usually :class:`topicmech.data.SimplifiedTopicModel`.
    doc_len : int
        Document length ``N``.
    attend_to_masked : bool
        ``True``: selected positions are visible keys (standard BERT). ``False``: hidden
        (the authors' code).
    loss : {"squared", "cross_entropy"}
    schedule : sequence of (lr, steps), optional
        Defaults to :data:`SQUARED_SCHEDULE` or :data:`CROSS_ENTROPY_SCHEDULE`.
    batch_size : int, optional
        Documents per step; defaults to :data:`DEFAULT_BATCH_SIZE` for the loss.
    l2 : float
        Ridge weight (``l2 * ||W^V||_F^2`` is added to the loss).
    init_scale : float
        Standard deviation of the initial ``W^V``.
    mask_prob, keep_prob, random_prob : float
        BERT corruption ``p_m, p_c, p_r``.
    seed : int
        Seed for the initialisation and, through derived seeds, for the data.
    probe_every : int
        Record the orbit means every this many steps (and at the end of each phase).

    Returns
    -------
    StageOneRun

    Examples
    --------
    >>> from topicmech.data import SimplifiedTopicModel
    >>> run = train_value_matrix(SimplifiedTopicModel(3, 2, 2), doc_len=8, schedule=[(5.0, 3)])
    >>> run.W_V.shape
    (7, 7)
    """
    if not isinstance(topic_model, TopicModel):
        raise ValueError(f"topic_model must be a topicmech.data.TopicModel, got {type(topic_model).__name__}")
    if loss not in ("squared", "cross_entropy"):
        raise ValueError(f"loss must be 'squared' or 'cross_entropy', got {loss!r}")
    if schedule is None:
        schedule = SQUARED_SCHEDULE if loss == "squared" else CROSS_ENTROPY_SCHEDULE
    phases = _check_schedule(schedule)
    batch_size = DEFAULT_BATCH_SIZE[loss] if batch_size is None else check_positive_int("batch_size", batch_size)
    probe_every = check_positive_int("probe_every", probe_every)
    check_masking(mask_prob, keep_prob, random_prob)
    T, v = topic_model.num_topics, topic_model.words_per_topic
    model = OneLayerTransformer(
        topic_model.num_tokens, embedding="one_hot", attention="uniform", value="learned", head="identity",
        attend_to_masked=attend_to_masked, init_scale=init_scale, seed=seed,
    )

    def probe(m: OneLayerTransformer) -> np.ndarray:
        b = orbit_means(m.value_matrix().detach().double().cpu().numpy(), T, v)
        return np.array([b.diag, b.same_topic, b.diff_topic, b.mask_col])  # (4,)

    steps_done = 0
    probe_step: list[np.ndarray] = []
    blocks: list[np.ndarray] = []
    losses: list[float] = []
    for k, ((lr, steps), data_seed) in enumerate(zip(phases, _phase_seeds(seed, len(phases)))):
        hist = train(
            model, topic_model, steps=steps, batch_size=batch_size, doc_len=doc_len, loss=loss,
            optimizer="sgd", lr=lr, l2=l2, mask_prob=mask_prob, keep_prob=keep_prob,
            random_prob=random_prob, seed=data_seed, probes={"blocks": probe}, probe_every=probe_every,
        )
        first = 0 if k == 0 else 1  # every phase re-records its starting point
        probe_step.append(steps_done + np.asarray(hist.probe_step[first:]))
        blocks.append(hist.probe("blocks")[first:])
        losses.extend(hist.loss)
        steps_done += steps
    return StageOneRun(
        W_V=model.value_matrix().detach().double().cpu().numpy(),
        probe_step=np.concatenate(probe_step),
        blocks=np.concatenate(blocks, axis=0),
        loss=np.asarray(losses),
        schedule=phases,
        num_topics=T,
        words_per_topic=v,
    )


def block_errors(matrix: np.ndarray | torch.Tensor, exact: ValueBlocks, num_topics: int, words_per_topic: int) -> np.ndarray:
    """Orbit means of ``matrix`` minus the exact values.

    Parameters
    ----------
    matrix : ndarray or Tensor, shape (D, D)
        A learned or sampled value matrix.
    exact : ValueBlocks
        E.g. :func:`topicmech.theory.value_block_coefficients`.
    num_topics, words_per_topic : int

    Returns
    -------
    errors : ndarray, shape (4,)
        Differences for the diagonal, same topic, different topic and ``[MASK]`` column.
    """
    if isinstance(matrix, torch.Tensor):
        matrix = matrix.detach().double().cpu().numpy()
    m = orbit_means(np.asarray(matrix, dtype=np.float64), num_topics, words_per_topic)
    return np.array([m.diag - exact.diag, m.same_topic - exact.same_topic,
                     m.diff_topic - exact.diff_topic, m.mask_col - exact.mask_col])


def centre_columns(matrix: np.ndarray | torch.Tensor, vocab_size: int) -> np.ndarray:
    """Subtract from every column its mean over the word rows.

    Adding a constant ``c_b`` to every entry of column ``b`` of a value matrix adds
    ``c_b xbar_b`` to every logit, which a softmax cannot see. The result of this function
    is unchanged by such shifts, so it compares cross-entropy solutions with squared-loss
    ones. The ``[MASK]`` output row (index ``vocab_size``, never a target) is left as is.

    Parameters
    ----------
    matrix : ndarray or Tensor, shape (D, D)
        Rows = output token, columns = input token; ``D = vocab_size + 1``.
    vocab_size : int
        ``V``.

    Returns
    -------
    centred : ndarray, shape (D, D)
        Every column of the first ``V`` rows has mean 0.
    """
    V = check_positive_int("vocab_size", vocab_size)
    if isinstance(matrix, torch.Tensor):
        matrix = matrix.detach().double().cpu().numpy()
    M = np.array(matrix, dtype=np.float64)
    if M.ndim != 2 or M.shape[0] != M.shape[1] or M.shape[0] != V + 1:
        raise ValueError(f"matrix must have shape ({V + 1}, {V + 1}), got {M.shape}")
    M[:V] -= M[:V].mean(axis=0, keepdims=True)  # (V, D) minus (1, D)
    return M


def contrast_correlation(a: np.ndarray | torch.Tensor, b: np.ndarray | torch.Tensor, vocab_size: int,
                         *, include_mask_column: bool = True) -> float:
    """Pearson correlation of two value matrices after :func:`centre_columns`.

    Only the word rows enter; the columns are the ``V`` words, plus ``[MASK]`` when
    ``include_mask_column``. The value does not change when either matrix gets column
    shifts, or is multiplied by a positive number.

    Parameters
    ----------
    a, b : ndarray or Tensor, shape (D, D)
    vocab_size : int
    include_mask_column : bool

    Returns
    -------
    r : float
        In [-1, 1]; nan if one of the centred matrices is constant.
    """
    A = centre_columns(a, vocab_size)
    B = centre_columns(b, vocab_size)
    V = int(vocab_size)
    cols = slice(0, V + 1) if include_mask_column else slice(0, V)
    x, y = A[:V, cols].ravel(), B[:V, cols].ravel()
    if x.std() == 0 or y.std() == 0:
        return math.nan
    return float(np.corrcoef(x, y)[0, 1])


def column_topic_margin(matrix: np.ndarray | torch.Tensor, num_topics: int, words_per_topic: int) -> float:
    """Smallest within-column gap between same-topic and different-topic entries.

    For every word column ``b`` (input word), take the smallest entry over the output
    words of ``b``'s topic (``b`` itself included) minus the largest entry over the
    output words of other topics; return the minimum over columns. A positive value
    means every column ranks all same-topic outputs above all different-topic ones. The
    value is unchanged by column shifts (see :func:`centre_columns`).

    Parameters
    ----------
    matrix : ndarray or Tensor, shape (D, D)
        ``D = T v + 1``; only the word block is used.
    num_topics, words_per_topic : int
        ``T >= 2`` and ``v``.

    Returns
    -------
    margin : float
    """
    T = check_positive_int("num_topics", num_topics)
    v = check_positive_int("words_per_topic", words_per_topic)
    if T < 2:
        raise ValueError(f"num_topics must be >= 2 for a different-topic entry, got {num_topics!r}")
    V = T * v
    if isinstance(matrix, torch.Tensor):
        matrix = matrix.detach().double().cpu().numpy()
    M = np.asarray(matrix, dtype=np.float64)
    if M.shape != (V + 1, V + 1):
        raise ValueError(f"matrix must have shape ({V + 1}, {V + 1}), got {M.shape}")
    W = M[:V, :V].reshape(T, v, T, v)                                 # (out topic, out word, in topic, in word)
    same = np.stack([W[t, :, t, :] for t in range(T)])                 # (T, v_out, v_in)
    lowest_same = same.min(axis=1)                                     # (T, v_in)
    other = np.where(np.eye(T, dtype=bool)[:, None, :, None], -np.inf, W)  # mask the same-topic blocks
    highest_other = other.max(axis=(0, 1))                             # (T, v_in)
    return float((lowest_same - highest_other).min())
