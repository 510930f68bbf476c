"""Stage 1 in practice: train the value matrix under uniform attention, compare it with the optimum.

Book: chapter 4 (*Stage 1: the value matrix becomes block-structured*) trains ``W^V``
with these helpers and checks the result against the exact optimum of
:func:`topicmech.theory.optimal_value_matrix`; its test file re-runs the claims over
several seeds with the same settings, which is why the settings live here.

* :func:`train_value_matrix`: one-hot embeddings, frozen uniform attention, identity
  head, ``W^V`` trained by plain SGD on fresh documents every step (through
  :func:`topicmech.train.train`), with a step-decay learning-rate schedule.
* :func:`default_schedule`: the schedule :func:`train_value_matrix` runs when none is
  given, derived from the exact spectrum of ``Sigma`` for the setting at hand
  (:func:`topicmech.theory.sigma_eigenvalues`).
* :data:`SQUARED_SCHEDULE`, :data:`CROSS_ENTROPY_SCHEDULE`: fixed schedules for the book's
  setting ``T = v = 10, tau = 2, N = 64`` (kept for reference; other settings should use
  :func:`default_schedule`).
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

**The default schedule** (:func:`default_schedule`) turns this into a rule that holds for
every ``T, v, tau, N`` and masking rates. With ``lambda_max, lambda_min`` the largest and
smallest positive eigenvalues of the exact ``Sigma`` (:func:`topicmech.theory.sigma_eigenvalues`;
word block only when masked keys are hidden):

* squared loss: three phases at learning rates ``lr_1 = 0.5 / lambda_max`` (half the
  stability limit, room for the minibatch curvature to fluctuate), ``lr_1 / 3`` and
  ``lr_1 / 10``, with 40%, 35% and 25% of the steps. The total ``n`` is the smallest that
  shrinks the initial error along the slowest direction by the factor ``tol``:
  ``sum_i 2 lr_i lambda_min n_i >= log(1 / tol)``, i.e.
  ``n = log(1 / tol) kappa_S / 0.5417`` with the condition number
  ``kappa_S = lambda_max / lambda_min`` (``tol = 1e-2`` gives ``n ~ 8.5 kappa_S``);
* cross-entropy: the Hessian of the softmax cross-entropy in the logits is
  ``diag(p) - p p^T``, at most ``1/2`` in every direction, against ``2`` for the squared
  loss ``||f - e_y||^2``; so the cross-entropy Hessian in ``W`` is at most a quarter of
  the squared-loss one and the same phases run at four times the learning rates. The
  cross-entropy optimum is at infinity (the ``[MASK]`` output row), so the run stops
  after the same number of steps, when the block pattern has formed.

For T = v = 10, tau = 2, N = 64 with visible keys this gives ``lr_1 = 19.5`` (the fixed
:data:`SQUARED_SCHEDULE` starts at 30, 0.77 of the limit).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from .data import TopicModel
from .model import OneLayerTransformer
from .theory import ValueBlocks, orbit_means, sigma_eigenvalues
from .train import train
from .utils import check_masking, check_positive_int, spawn_seeds

__all__ = [
    "SQUARED_SCHEDULE",
    "SAFE_FRACTION",
    "PHASE_DECAY",
    "PHASE_SHARE",
    "MAX_DEFAULT_STEPS",
    "MIN_PHASE_STEPS",
    "sigma_range",
    "default_schedule",
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

#: ``(learning rate, steps)`` phases for squared loss (plain SGD), fixed for the book's
#: setting T = v = 10, tau = 2, N = 64, visible keys, where the largest stable step is
#: ``1 / lambda_max(Sigma) ~ 39``; 30 removes the slow within-topic bias, 10 and 4
#: shrink the noise. Not the default: elsewhere 30 can exceed the limit (T = 6, v = 5,
#: N = 40, p_m = 0.2 has ``1 / lambda_max = 18``); see :func:`default_schedule`.
SQUARED_SCHEDULE: tuple[tuple[float, int], ...] = ((30.0, 500), (10.0, 400), (4.0, 300))

#: ``(learning rate, steps)`` for cross-entropy (plain SGD), fixed for the book's setting
#: (no longer the default; see :func:`default_schedule`). At ``W^V = 0`` the softmax
#: divides the curvature by about ``D``, so the step can be larger; the run is not meant
#: to converge (the cross-entropy optimum has the ``[MASK]`` output row at minus
#: infinity), only to show the block pattern.
CROSS_ENTROPY_SCHEDULE: tuple[tuple[float, int], ...] = ((100.0, 300),)

#: Documents per SGD step, by loss (the squared-loss run needs less noise).
DEFAULT_BATCH_SIZE: dict[str, int] = {"squared": 128, "cross_entropy": 64}


#: Fraction of the stability limit ``1 / lambda_max`` at which the first phase of
#: :func:`default_schedule` runs (squared loss; cross-entropy runs at four times the rates).
SAFE_FRACTION: float = 0.5
#: Learning rate of each phase of :func:`default_schedule`, relative to the first.
PHASE_DECAY: tuple[float, ...] = (1.0, 1.0 / 3.0, 1.0 / 10.0)
#: Share of the steps spent in each phase of :func:`default_schedule`.
PHASE_SHARE: tuple[float, ...] = (0.4, 0.35, 0.25)
#: A default schedule longer than this raises (ill-conditioned setting: pass a schedule or use ``l2``).
MAX_DEFAULT_STEPS: int = 50_000
#: Smallest number of steps in a phase of :func:`default_schedule`.
MIN_PHASE_STEPS: int = 20


def _check_unit_interval(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)) \
            or not (0.0 < float(value) < 1.0):
        raise ValueError(f"{name} must be a float in (0, 1), got {value!r}")
    return float(value)


def sigma_range(
    topic_model: TopicModel,
    doc_len: int,
    *,
    attend_to_masked: bool = True,
    mask_prob: float = 0.15,
    keep_prob: float = 0.1,
    random_prob: float = 0.1,
    needs: str = "schedule",
) -> tuple[float, float]:
    """Smallest positive and largest eigenvalue of the exact stage-1 ``Sigma`` for a topic model.

    :class:`~topicmech.data.SimplifiedTopicModel` goes through
    :func:`topicmech.theory.sigma_eigenvalues`; :class:`~topicmech.data.LDATopicModel`
    through :func:`topicmech.sweeps.lda_moments` (the same restriction to the word block
    when masked keys are hidden).

    Parameters
    ----------
    topic_model : TopicModel
    doc_len : int
    attend_to_masked : bool
    mask_prob, keep_prob, random_prob : float
    needs : str
        Name of the argument the caller should set when no ``Sigma`` is available (used in
        the error message).

    Returns
    -------
    lambda_min, lambda_max : float

    Raises
    ------
    ValueError
        For any other topic model: no exact ``Sigma`` is available, so no step size can be
        derived; pass a schedule or a learning rate explicitly.
    """
    from .data import LDATopicModel, SimplifiedTopicModel

    masking = (mask_prob, keep_prob, random_prob)
    if isinstance(topic_model, SimplifiedTopicModel):
        return sigma_eigenvalues(topic_model.num_topics, topic_model.words_per_topic, topic_model.topics_per_doc,
                                 doc_len, *masking, attend_to_masked=attend_to_masked)
    if isinstance(topic_model, LDATopicModel):
        from .sweeps import lda_moments

        S, _ = lda_moments(topic_model.num_topics, topic_model.words_per_topic, topic_model.alpha, doc_len,
                           *masking, attend_to_masked=attend_to_masked)
        if not attend_to_masked:
            S = S[:-1, :-1]
        ev = np.linalg.eigvalsh(0.5 * (S + S.T))
        pos = ev[ev > 1e-12 * ev[-1]]
        return float(pos[0]), float(ev[-1])
    raise ValueError(
        f"no exact Sigma for a {type(topic_model).__name__}, so no learning rate can be derived from the "
        f"setting; pass {needs} explicitly"
    )


def default_schedule(
    topic_model: TopicModel,
    doc_len: int,
    *,
    loss: Literal["squared", "cross_entropy"] = "squared",
    attend_to_masked: bool = True,
    mask_prob: float = 0.15,
    keep_prob: float = 0.1,
    random_prob: float = 0.1,
    l2: float = 0.0,
    tol: float = 1e-2,
) -> tuple[tuple[float, int], ...]:
    """The ``(lr, steps)`` phases that :func:`train_value_matrix` runs by default, derived from ``Sigma``.

    Rule (module docstring): with ``lambda_max, lambda_min`` the extreme eigenvalues of the
    exact ``Sigma`` (plus ``l2``, the ridge adds ``l2 I`` to the Hessian), the phases run at
    ``lr_1 = SAFE_FRACTION / lambda_max`` times :data:`PHASE_DECAY` (times 4 for
    cross-entropy, whose Hessian is at most a quarter of the squared-loss one) for
    :data:`PHASE_SHARE` of ``n`` steps, where ``n`` is the smallest number for which the
    population gradient flow shrinks the error along the slowest eigenvector of ``Sigma``
    by the factor ``tol``: ``sum_i 2 lr_i lambda_min n_i >= log(1 / tol)`` (squared loss;
    the cross-entropy run uses the same steps). Each phase has at least
    :data:`MIN_PHASE_STEPS` steps.

    Parameters
    ----------
    topic_model : TopicModel
        A :class:`~topicmech.data.SimplifiedTopicModel` or
        :class:`~topicmech.data.LDATopicModel` (see :func:`sigma_range`).
    doc_len : int
    loss : {"squared", "cross_entropy"}
    attend_to_masked : bool
    mask_prob, keep_prob, random_prob : float
    l2 : float
        Ridge weight of the run.
    tol : float
        Factor in (0, 1) by which the slowest component of the initial error must shrink.

    Returns
    -------
    schedule : tuple of (float, int)

    Raises
    ------
    ValueError
        For a topic model without exact moments, or when the setting is so ill-conditioned
        that more than :data:`MAX_DEFAULT_STEPS` steps would be needed (pass a schedule,
        or a ridge ``l2`` that lifts ``lambda_min``).

    Examples
    --------
    >>> from topicmech.data import SimplifiedTopicModel
    >>> sched = default_schedule(SimplifiedTopicModel(6, 5, 2), 40, mask_prob=0.2)
    >>> [round(lr, 2) for lr, _ in sched]
    [9.08, 3.03, 0.91]
    """
    if loss not in ("squared", "cross_entropy"):
        raise ValueError(f"loss must be 'squared' or 'cross_entropy', got {loss!r}")
    tol = _check_unit_interval("tol", tol)
    if isinstance(l2, bool) or not isinstance(l2, (int, float)) or not (math.isfinite(l2) and l2 >= 0):
        raise ValueError(f"l2 must be a finite float >= 0, got {l2!r}")
    lam_min, lam_max = sigma_range(topic_model, doc_len, attend_to_masked=attend_to_masked, mask_prob=mask_prob,
                                   keep_prob=keep_prob, random_prob=random_prob)
    lam_min, lam_max = lam_min + l2, lam_max + l2
    lr1 = SAFE_FRACTION / lam_max
    per_step = 2.0 * lr1 * lam_min * sum(d * w for d, w in zip(PHASE_DECAY, PHASE_SHARE))  # decay rate per step
    total = math.ceil(math.log(1.0 / tol) / per_step)
    if total > MAX_DEFAULT_STEPS:
        raise ValueError(
            f"the default schedule would need {total} steps (condition number of Sigma "
            f"{lam_max / lam_min:.0f}); pass schedule explicitly, or raise l2 or tol"
        )
    if loss == "cross_entropy":  # Hessian <= (lambda_max / 2 + 2 l2) = 2 (lambda_max + 4 l2) / 4
        lr1 = 4.0 * SAFE_FRACTION / (lam_max + 3.0 * l2)
    return tuple((lr1 * d, max(MIN_PHASE_STEPS, math.ceil(total * w)))
                 for d, w in zip(PHASE_DECAY, PHASE_SHARE))


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
        Defaults to :func:`default_schedule` for this setting (step sizes from the exact
        largest eigenvalue of ``Sigma``, length from its condition number; raises
        ValueError for a topic model without exact moments).
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
    check_masking(mask_prob, keep_prob, random_prob)
    if schedule is None:
        schedule = default_schedule(topic_model, doc_len, loss=loss, attend_to_masked=attend_to_masked,
                                    mask_prob=mask_prob, keep_prob=keep_prob, random_prob=random_prob, l2=l2)
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
    for k, ((lr, steps), data_seed) in enumerate(zip(phases, spawn_seeds(seed, len(phases)))):
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
