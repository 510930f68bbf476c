"""Stage 1: train the value matrix ``W^V`` under frozen uniform attention and compare it with the optimum.

:func:`train_value_matrix` trains ``W^V`` by plain SGD with a step-decayed learning rate, in
``(steps, lr)`` phases (by default :func:`default_phases`, derived from the exact spectrum
of ``Sigma``); :func:`block_errors`, :func:`centre_columns`, :func:`contrast_correlation` and
:func:`column_topic_margin` compare learned and exact matrices. Notation as in the book:
``V = T v`` words, ``[MASK]`` has id ``V``, ``D = V + 1``, ``W[output, input]``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from .data import TopicModel, topic_model_for
from .model import OneLayerTransformer
from .setting import Setting
from .theory import ValueBlocks, orbit_means, sigma_range, stage1_sgd_lr
from .train import check_phases, train
from .utils import check_float, check_matrix, check_positive_int, check_seed

__all__ = [
    "SQUARED_PHASES", "PHASE_DECAY", "PHASE_SHARE", "MAX_DEFAULT_STEPS", "MIN_PHASE_STEPS",
    "default_phases", "CROSS_ENTROPY_PHASES", "ADAM_PHASES", "DEFAULT_BATCH_SIZE", "StageOneRun",
    "train_value_matrix", "block_errors", "centre_columns", "contrast_correlation", "column_topic_margin",
]

Phases = Sequence[tuple[int, float]]

#: ``(steps, lr)`` phases for squared loss, fixed for the book's setting T = v = 10, tau = 2,
#: N = 64, visible keys (stability limit ``1 / lambda_max(Sigma) ~ 39``). Not the default:
#: elsewhere 30 can exceed the limit; see :func:`default_phases`.
SQUARED_PHASES: tuple[tuple[int, float], ...] = ((500, 30.0), (400, 10.0), (300, 4.0))
#: ``(steps, lr)`` for cross-entropy, fixed for the book's setting; the run only shows the
#: block pattern (the optimum has the ``[MASK]`` output row at minus infinity).
CROSS_ENTROPY_PHASES: tuple[tuple[int, float], ...] = ((300, 100.0),)
#: ``(steps, lr)`` phases for Adam (its step is about ``lr`` per entry whatever the curvature).
ADAM_PHASES: tuple[tuple[int, float], ...] = ((400, 1e-2), (200, 1e-3))
#: Documents per SGD step, by loss.
DEFAULT_BATCH_SIZE: dict[str, int] = {"squared": 128, "cross_entropy": 64}
#: Learning rate of each phase of :func:`default_phases`, relative to the first.
PHASE_DECAY: tuple[float, ...] = (1.0, 1.0 / 3.0, 1.0 / 10.0)
#: Share of the steps spent in each phase of :func:`default_phases`.
PHASE_SHARE: tuple[float, ...] = (0.4, 0.35, 0.25)
#: Default phases longer than this in total raise (pass ``phases`` or a ridge ``l2``).
MAX_DEFAULT_STEPS: int = 50_000
#: Smallest number of steps in a phase of :func:`default_phases`.
MIN_PHASE_STEPS: int = 20


def _check_loss(loss: object) -> None:
    if loss not in ("squared", "cross_entropy"):
        raise ValueError(f"loss must be 'squared' or 'cross_entropy', got {loss!r}")


def default_phases(
    setting: Setting, *, topic_model: TopicModel | None = None,
    loss: Literal["squared", "cross_entropy"] = "squared", l2: float = 0.0, tol: float = 1e-2,
) -> tuple[tuple[int, float], ...]:
    """The ``(steps, lr)`` phases that :func:`train_value_matrix` runs by default, derived from ``Sigma``.

    With ``lambda_min, lambda_max`` from :func:`topicmech.theory.sigma_range` (plus ``l2``), the phases run at
    ``lr_1`` of :func:`topicmech.theory.stage1_sgd_lr` times :data:`PHASE_DECAY` for :data:`PHASE_SHARE`
    of ``n`` steps (each at least :data:`MIN_PHASE_STEPS`), ``n`` the smallest with
    ``sum_i 2 lr_i lambda_min n_i >= log(1 / tol)``: SGD contracts the error along an
    eigenvector of ``Sigma`` at rate ``2 lr sigma``, and the slowest direction must shrink
    by ``tol``. Cross-entropy runs the same steps at four times the rates (its Hessian in the
    logits, ``diag(p) - p p^T``, is at most a quarter of the squared-loss one).

    Parameters
    ----------
    setting : Setting
    topic_model : TopicModel, optional
        Simplified (default, the setting's) or LDA (see :func:`topicmech.theory.sigma_range`).
    l2 : float
        Ridge weight of the run.
    tol : float
        Factor in (0, 1) by which the slowest component of the initial error must shrink.

    Returns
    -------
    phases : tuple of (int, float)
        Raises ValueError beyond :data:`MAX_DEFAULT_STEPS` steps (pass ``phases``, or ``l2``).

    Examples
    --------
    >>> from topicmech import Masking, Setting
    >>> setting = Setting(6, 5, 2, 40, masking=Masking(mask_prob=0.2), attend_to_masked=True)
    >>> phases = default_phases(setting)
    >>> [round(lr, 2) for _, lr in phases]
    [9.08, 3.03, 0.91]
    """
    _check_loss(loss)
    if isinstance(tol, bool) or not isinstance(tol, (int, float, np.integer, np.floating)) or not 0.0 < tol < 1.0:
        raise ValueError(f"tol must be a float in (0, 1), got {tol!r}")
    l2 = check_float("l2", l2, positive=False)
    lam_min, lam_max = sigma_range(setting, topic_model=topic_model)
    lr1, lr1_ce = (stage1_sgd_lr(lam_max, loss=kind, l2=l2) for kind in ("squared", "cross_entropy"))
    lam_min, lam_max = lam_min + l2, lam_max + l2
    per_step = 2.0 * lr1 * lam_min * sum(d * w for d, w in zip(PHASE_DECAY, PHASE_SHARE))  # decay rate per step
    total = math.ceil(math.log(1.0 / float(tol)) / per_step)
    if total > MAX_DEFAULT_STEPS:
        raise ValueError(f"the default phases would need {total} steps (condition number of Sigma "
                         f"{lam_max / lam_min:.0f}); pass phases explicitly, or raise l2 or tol")
    if loss == "cross_entropy":
        lr1 = lr1_ce
    return tuple((max(MIN_PHASE_STEPS, math.ceil(total * w)), lr1 * d)
                 for d, w in zip(PHASE_DECAY, PHASE_SHARE))


@dataclass
class StageOneRun:
    """Result of :func:`train_value_matrix`.

    Attributes
    ----------
    W_V : ndarray, shape (D, D)
        Trained value matrix (last iterate, float64).
    probe_step : ndarray, shape (P,)
        Global steps of the recordings (0 = initialisation).
    blocks : ndarray, shape (P, 4)
        Orbit means there: diagonal, same topic, different topic, ``[MASK]`` column.
    loss : ndarray, shape (steps,)
        Minibatch loss at every step (without the L2 term).
    phases : tuple of (int, float)
        The ``(steps, lr)`` phases that were run.
    num_topics : int
        ``T``, the number of topics of the run.
    words_per_topic : int
        ``v``, the words of each topic.
    """

    W_V: np.ndarray
    probe_step: np.ndarray
    blocks: np.ndarray
    loss: np.ndarray
    phases: tuple[tuple[int, float], ...]
    num_topics: int
    words_per_topic: int

    @property
    def steps(self) -> int:
        """Total number of SGD steps."""
        return int(sum(s for s, _ in self.phases))

    def final_blocks(self) -> ValueBlocks:
        """Orbit means of the trained ``W_V``."""
        return orbit_means(self.W_V, self.num_topics, self.words_per_topic)


def train_value_matrix(
    setting: Setting, *, topic_model: TopicModel | None = None,
    loss: Literal["squared", "cross_entropy"] = "squared", optimizer: Literal["sgd", "adam"] = "sgd",
    phases: Phases | None = None, batch_size: int | None = None, l2: float = 0.0, init_scale: float = 0.0,
    seed: int = 0, data_seeds: Sequence[int] | None = None, probe_every: int = 20,
) -> StageOneRun:
    """Train ``W^V`` of the stage-1 model by SGD (or Adam) with a step-decay learning rate.

    One-hot embeddings, frozen uniform attention, identity head, ``W^V`` initialised at
    ``init_scale`` times a Gaussian (seed ``seed``); the ``(steps, lr)`` phases run through
    :func:`topicmech.train.train` on fresh documents, seeded by :func:`topicmech.utils.spawn_seeds`
    of ``seed`` or by ``data_seeds``.

    Parameters
    ----------
    setting : Setting
        Sizes, document length, masking and key convention of the run.
    topic_model : TopicModel, optional
        The data; default the setting's simplified model (:func:`topicmech.data.topic_model_for`).
    optimizer : {"sgd", "adam"}
        Plain SGD or Adam (a fresh optimiser per phase).
    phases : sequence of (steps, lr), optional
        Defaults to :func:`default_phases` for this setting (SGD) or :data:`ADAM_PHASES`.
    batch_size : int, optional
        Documents per step; defaults to :data:`DEFAULT_BATCH_SIZE` for the loss.
    l2 : float
        Ridge weight (``l2 ||W^V||_F^2`` is added to the loss).
    init_scale : float
        Standard deviation of the initial ``W^V``.
    data_seeds : sequence of int, optional
        One seed per phase for the documents and masks (default: spawned from ``seed``).
    probe_every : int
        Record the orbit means every this many steps (and at the end of each phase).

    Returns
    -------
    StageOneRun
    """
    topic_model = topic_model_for(setting, topic_model)
    _check_loss(loss)
    if optimizer not in ("sgd", "adam"):
        raise ValueError(f"optimizer must be 'sgd' or 'adam', got {optimizer!r}")
    if phases is None:
        phases = ADAM_PHASES if optimizer == "adam" else default_phases(setting, topic_model=topic_model, loss=loss,
                                                                        l2=l2)
    phases = check_phases(phases)
    if data_seeds is not None:
        data_seeds = [check_seed(s) for s in data_seeds]
        if len(data_seeds) != len(phases):
            raise ValueError(f"data_seeds must hold one seed per phase ({len(phases)}), got {len(data_seeds)}")
    batch_size = DEFAULT_BATCH_SIZE[loss] if batch_size is None else check_positive_int("batch_size", batch_size)
    probe_every = check_positive_int("probe_every", probe_every)
    T, v = topic_model.num_topics, topic_model.words_per_topic
    model = OneLayerTransformer(
        topic_model.num_tokens, embedding="one_hot", attention="uniform", value="learned", head="identity",
        attend_to_masked=setting.attend_to_masked, init_scale=init_scale, seed=seed,
    )

    def probe(m: OneLayerTransformer) -> np.ndarray:
        b = orbit_means(m.value_matrix().detach().double().cpu().numpy(), T, v)
        return np.array([b.diag, b.same_topic, b.diff_topic, b.mask_col])  # (4,)

    hist = train(
        model, topic_model, phases=phases, doc_len=setting.doc_len, batch_size=batch_size, loss=loss,
        optimizer=optimizer, seed=seed if data_seeds is None else data_seeds, l2=l2, masking=setting.masking,
        probes={"blocks": probe}, probe_every=probe_every,
    )
    return StageOneRun(
        W_V=model.value_matrix().detach().double().cpu().numpy(),
        probe_step=np.asarray(hist.probe_step),
        blocks=hist.probe("blocks"),
        loss=np.asarray(hist.loss),
        phases=phases,
        num_topics=T,
        words_per_topic=v,
    )


def block_errors(matrix: np.ndarray | torch.Tensor, exact: ValueBlocks, num_topics: int, words_per_topic: int) -> np.ndarray:
    """Orbit means of ``matrix`` (shape ``(D, D)``) minus ``exact`` (e.g. :func:`topicmech.theory.value_block_coefficients`).

    Returns
    -------
    errors : ndarray, shape (4,)
        Diagonal, same topic, different topic and ``[MASK]`` column.
    """
    m = orbit_means(check_matrix("matrix", matrix), num_topics, words_per_topic)
    return np.array([m.diag - exact.diag, m.same_topic - exact.same_topic,
                     m.diff_topic - exact.diff_topic, m.mask_col - exact.mask_col])


def centre_columns(matrix: np.ndarray | torch.Tensor, vocab_size: int) -> np.ndarray:
    """Subtract from every column of a ``(D, D)`` matrix its mean over the ``V`` word rows.

    A constant added to column ``b`` shifts every logit equally, which a softmax cannot see;
    the result is invariant to such shifts (cross-entropy versus squared-loss solutions).
    The ``[MASK]`` output row is left as is.
    """
    V = check_positive_int("vocab_size", vocab_size)
    M = check_matrix("matrix", matrix, shape=(V + 1, V + 1))
    M[:V] -= M[:V].mean(axis=0, keepdims=True)  # (V, D) minus (1, D)
    return M


def contrast_correlation(a: np.ndarray | torch.Tensor, b: np.ndarray | torch.Tensor, vocab_size: int,
                         *, include_mask_column: bool = True) -> float:
    """Pearson correlation of the word rows of two value matrices after :func:`centre_columns`.

    Invariant to column shifts and positive scaling; the ``[MASK]`` column enters when
    ``include_mask_column``. Returns nan if a centred matrix is constant.
    """
    V = check_positive_int("vocab_size", vocab_size)
    cols = slice(0, V + 1) if include_mask_column else slice(0, V)
    x, y = (centre_columns(m, vocab_size)[:V, cols].ravel() for m in (a, b))
    if x.std() == 0 or y.std() == 0:
        return math.nan
    return float(np.corrcoef(x, y)[0, 1])


def column_topic_margin(matrix: np.ndarray | torch.Tensor, num_topics: int, words_per_topic: int) -> float:
    """Smallest, over word columns, of (lowest same-topic entry) minus (highest different-topic entry).

    Positive when every input word ranks all outputs of its topic (itself included) above all
    others; invariant to column shifts. ``matrix`` has shape ``(D, D)``; ``num_topics >= 2``.
    """
    T = check_positive_int("num_topics", num_topics)
    v = check_positive_int("words_per_topic", words_per_topic)
    if T < 2:
        raise ValueError(f"num_topics must be >= 2 for a different-topic entry, got {num_topics!r}")
    V = T * v
    W = check_matrix("matrix", matrix, shape=(V + 1, V + 1))[:V, :V].reshape(T, v, T, v)   # (out topic, out word, in topic, in word)
    lowest_same = np.stack([W[t, :, t, :] for t in range(T)]).min(axis=1)  # (T, v_in)
    other = np.where(np.eye(T, dtype=bool)[:, None, :, None], -np.inf, W)  # mask the same-topic blocks
    return float((lowest_same - other.max(axis=(0, 1))).min())
