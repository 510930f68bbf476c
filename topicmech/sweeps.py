"""Ablations and parameter sweeps: how far the topic picture holds beyond the theorems.

Book: chapter 7 (*Beyond the assumptions*) calls everything here, and
``tests/test_sweeps.py`` re-checks the chapter's claims over several seeds with the
same functions, so the book and the tests cannot drift apart.

**Map of the module.**

* **LDA data, exactly** (section 1 of the chapter): the squared-loss optimum under
  uniform attention depends on the data only through the first two moments of a
  document's word distribution, and LDA with concentration ``alpha`` has the second
  moment of the simplified model with a non-integer number of topics per document,
  :func:`lda_effective_topics` ``= (T alpha + 1) / (alpha + 1)``.
  :func:`lda_alpha_matching` inverts it (``alpha* = (tau - 1) / (T - tau)``);
  :func:`lda_moments`, :func:`lda_optimal_value_matrix` and :func:`lda_value_blocks`
  give the exact stage-1 optimum for LDA data.
* **Runs that return probe summaries** (plain dicts of floats, ready for
  :func:`topicmech.dynamics.run_seeds` / :func:`topicmech.dynamics.run_grid`):
  :func:`stage1_run` (uniform attention, train ``W^V``; any loss, optimiser, L2),
  :func:`stage1_point` (the same, building the data and the exact reference from
  parameters), :func:`compensation_run` (learned embeddings and learned attention, with
  one of them handicapped or neither), :func:`deep_run` (the multi-head, multi-layer
  :class:`~topicmech.model.TwoLayerTransformer`). Default learning rates come from the
  setting: plain SGD on ``W^V`` runs at half the stability limit ``1 / lambda_max`` of the
  exact ``Sigma`` (:func:`topicmech.stage1.sigma_range`; four times that rate for
  cross-entropy, whose Hessian is at most a quarter of the squared-loss one), Adam at
  :data:`ADAM_LR` (its step does not scale with the curvature); where no such rule
  exists (SGD on learned embeddings or on the two-layer model) the runner raises
  ValueError and asks for ``lr``.
* **Probes**: :func:`embedding_cosine_contrast` (block means of the cosine similarity of
  word embeddings) and :func:`head_attention` (attention by relation for every layer and
  head).
* **Closed forms along a sweep**: :func:`value_blocks_along` evaluates
  :func:`topicmech.theory.value_block_coefficients` along one parameter (O(1) per point);
  :func:`stage2_drive` is the exact initial stage-2 growth eigenvalue (hidden keys) and
  :func:`stage2_drive_point` compares it with a Monte-Carlo estimate.
* **Tidy tables**: :func:`tidy` flattens a :class:`topicmech.dynamics.Sweep` into a list
  of flat dicts (one row per run), :func:`sweep_axes` varies one parameter at a time
  around a base point (one panel per parameter) and returns such rows directly,
  :func:`aggregate` groups rows and summarises columns
  (mean, std, min, max, count). No pandas needed; ``pandas.DataFrame(rows)`` displays them.

Conventions are the package's (notation page): ``W_V[out, in]``, attention patterns
``(batch, query, key)``, ``[MASK]`` is the last token id. Every run says which
``attend_to_masked`` it uses; the default here is ``False`` (hidden keys, the authors'
released code).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

import numpy as np
import torch

from . import stage1, theory
from .data import LDATopicModel, SimplifiedTopicModel, TopicModel
from .dynamics import Sweep, heldout_batch
from .fast import train_uniform
from .model import OneLayerTransformer, TwoLayerTransformer
from .probes import attention_by_relation, block_means
from .train import train
from .utils import check_positive_int, check_seeds, seed_everything

__all__ = [
    "lda_effective_topics",
    "lda_alpha_matching",
    "lda_moments",
    "lda_optimal_value_matrix",
    "lda_value_blocks",
    "stage1_run",
    "stage1_point",
    "embedding_cosine_contrast",
    "head_attention",
    "compensation_run",
    "deep_run",
    "value_blocks_along",
    "stage2_drive",
    "stage2_drive_point",
    "tidy",
    "sweep_axes",
    "aggregate",
    "HANDICAPS",
    "ADAM_LR",
    "SWEEP_PARAMETERS",
]

LossKind = Literal["squared", "cross_entropy"]
OptimizerKind = Literal["sgd", "adam"]

#: Default Adam learning rate of the runners. Adam's step is about ``lr`` per entry whatever
#: the curvature (it divides the gradient by its running scale), so it needs no setting-derived value.
ADAM_LR: float = 1e-2

#: Settings of :func:`compensation_run`: nothing handicapped, embeddings frozen to one-hot,
#: attention frozen to uniform.
HANDICAPS: tuple[str, ...] = ("none", "embedding", "attention")

#: Parameters :func:`value_blocks_along` and :func:`stage1_point` can sweep.
SWEEP_PARAMETERS: tuple[str, ...] = ("num_topics", "words_per_topic", "topics_per_doc", "doc_len", "mask_prob",
                                     "keep_prob", "random_prob")


# ----------------------------------------------------------------------------------------
# Validation helpers
# ----------------------------------------------------------------------------------------


def _check_alpha(alpha: object) -> float:
    if isinstance(alpha, (bool, str, bytes)):
        raise ValueError(f"alpha must be a positive finite float, got {alpha!r}")
    try:
        a = float(alpha)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"alpha must be a positive finite float, got {alpha!r}") from None
    if not (math.isfinite(a) and a > 0):
        raise ValueError(f"alpha must be a positive finite float, got {alpha!r}")
    return a


def _check_bool(name: str, value: object) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def _check_nonneg_float(name: str, value: object) -> float:
    if isinstance(value, (bool, str, bytes)):
        raise ValueError(f"{name} must be a finite float >= 0, got {value!r}")
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a finite float >= 0, got {value!r}") from None
    if not (math.isfinite(x) and x >= 0):
        raise ValueError(f"{name} must be a finite float >= 0, got {value!r}")
    return x


def _check_topic_model(topic_model: object) -> TopicModel:
    if not isinstance(topic_model, TopicModel):
        raise ValueError(f"topic_model must be a TopicModel, got {type(topic_model).__name__}")
    return topic_model


def _check_choice(name: str, value: object, options: Sequence[str]) -> str:
    if value not in options:
        raise ValueError(f"{name} must be one of {tuple(options)}, got {value!r}")
    return str(value)


# ----------------------------------------------------------------------------------------
# LDA data: the exact stage-1 optimum
# ----------------------------------------------------------------------------------------


def lda_effective_topics(num_topics: int, alpha: float) -> float:
    """Number of topics per document of the simplified model with LDA's co-occurrences.

    Two distinct positions of an LDA document draw the same topic with probability
    ``E[sum_t theta_t^2] = (alpha + 1) / (T alpha + 1)``; in the simplified model with
    ``tau`` topics per document that probability is ``1 / tau``. Equating the two gives

    ``tau_eff = (T alpha + 1) / (alpha + 1)``,

    which runs from 1 (``alpha -> 0``, one topic per document) to ``T``
    (``alpha -> inf``, every topic equally). Because each topic's words are uniform, equal
    topic co-occurrence means equal word co-occurrence (``E[q q^T]``), and the
    squared-loss optimum under uniform attention depends on nothing else
    (:func:`lda_moments`).

    Parameters
    ----------
    num_topics : int
        ``T >= 1``.
    alpha : float
        Symmetric Dirichlet concentration (> 0).

    Returns
    -------
    tau_eff : float
        In ``[1, T]``.

    Examples
    --------
    >>> lda_effective_topics(10, 0.1)
    1.8181818181818181
    """
    T = check_positive_int("num_topics", num_topics)
    a = _check_alpha(alpha)
    return (T * a + 1.0) / (a + 1.0)


def lda_alpha_matching(num_topics: int, topics_per_doc: int) -> float:
    """The Dirichlet ``alpha*`` whose LDA has the co-occurrences of ``tau`` topics per document.

    Inverts :func:`lda_effective_topics`: ``alpha* = (tau - 1) / (T - tau)``.

    Parameters
    ----------
    num_topics : int
        ``T >= 2``.
    topics_per_doc : int
        ``tau`` with ``2 <= tau < T`` (``tau = 1`` needs ``alpha -> 0`` and ``tau = T``
        needs ``alpha -> inf``).

    Returns
    -------
    alpha : float
    """
    T = check_positive_int("num_topics", num_topics)
    tau = check_positive_int("topics_per_doc", topics_per_doc)
    if not 2 <= tau < T:
        raise ValueError(f"topics_per_doc must satisfy 2 <= topics_per_doc < num_topics={T}, got {topics_per_doc!r}")
    return (tau - 1) / (T - tau)


def lda_moments(
    num_topics: int,
    words_per_topic: int,
    alpha: float,
    doc_len: int | float,
    mask_prob: float = 0.15,
    keep_prob: float = 0.1,
    random_prob: float = 0.1,
    attend_to_masked: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact ``Sigma = E[xbar xbar^T]`` and ``C = E[y xbar^T]`` for LDA documents.

    Given a document's word distribution ``q`` (for LDA ``q = Phi^T theta``), the words
    are i.i.d. from ``q``, so the moments of :func:`topicmech.theory.moments` are affine
    functions of ``E[q] = u`` (uniform, by symmetry) and ``E[q q^T]``. On the word block
    ``E[q q^T] = s B / v^2 + (1/T - s) (J - B) / ((T - 1) v^2)`` with ``s`` the
    probability that two positions share a topic, ``s = 1 / (T tau_eff)``
    (:func:`lda_effective_topics`). The moments are therefore affine in ``1 / tau_eff``,
    and this function interpolates (or extrapolates) exactly between the simplified
    model's moments at ``tau = 1`` and ``tau = 2``.

    Parameters
    ----------
    num_topics : int
        ``T >= 2``.
    words_per_topic : int
    alpha : float
        Dirichlet concentration (> 0).
    doc_len : int or math.inf
    mask_prob, keep_prob, random_prob : float
    attend_to_masked : bool
        As in :func:`topicmech.theory.moments`.

    Returns
    -------
    Sigma, C : ndarray, shape (D, D)
        Same conventions as :func:`topicmech.theory.moments`.
    """
    T = check_positive_int("num_topics", num_topics)
    if T < 2:
        raise ValueError(f"num_topics must be >= 2 for LDA moments, got {num_topics!r}")
    tau_eff = lda_effective_topics(T, alpha)
    args = (mask_prob, keep_prob, random_prob, attend_to_masked)
    S1, C1 = theory.moments(T, words_per_topic, 1, doc_len, *args)
    S2, C2 = theory.moments(T, words_per_topic, 2, doc_len, *args)
    w = 2.0 * (1.0 - 1.0 / tau_eff)      # 1/tau_eff = 1 -> w = 0; 1/tau_eff = 1/2 -> w = 1
    return S1 + w * (S2 - S1), C1 + w * (C2 - C1)


def lda_optimal_value_matrix(
    num_topics: int,
    words_per_topic: int,
    alpha: float,
    doc_len: int | float,
    mask_prob: float = 0.15,
    keep_prob: float = 0.1,
    random_prob: float = 0.1,
    attend_to_masked: bool = True,
    l2: float = 0.0,
) -> np.ndarray:
    """Stage-1 optimum of ``W^V`` (uniform attention, squared loss) for LDA documents.

    ``W* = C (Sigma + l2 I)^{-1}`` with :func:`lda_moments`; with hidden keys the solve
    runs on the word block and the ``[MASK]`` row and column are 0, as in
    :func:`topicmech.theory.optimal_value_matrix`, which it equals when
    ``alpha = lda_alpha_matching(T, tau)``.

    Parameters
    ----------
    num_topics, words_per_topic, alpha, doc_len, mask_prob, keep_prob, random_prob, attend_to_masked
        As in :func:`lda_moments`.
    l2 : float
        Ridge coefficient >= 0.

    Returns
    -------
    W : ndarray, shape (D, D)
        Rows = output token, columns = input token.
    """
    lam = _check_nonneg_float("l2", l2)
    Sigma, C = lda_moments(num_topics, words_per_topic, alpha, doc_len, mask_prob, keep_prob, random_prob,
                           attend_to_masked)
    D = Sigma.shape[0]
    V = D - 1
    if attend_to_masked:
        return theory._solve_right(C, Sigma, lam)
    W = np.zeros((D, D))
    W[:V, :V] = theory._solve_right(C[:V, :V], Sigma[:V, :V], lam)
    return W


def lda_value_blocks(
    num_topics: int,
    words_per_topic: int,
    alpha: float,
    doc_len: int | float,
    mask_prob: float = 0.15,
    keep_prob: float = 0.1,
    random_prob: float = 0.1,
    attend_to_masked: bool = True,
    l2: float = 0.0,
) -> theory.ValueBlocks:
    """Orbit values (diagonal, same topic, different topic, ``[MASK]`` column) of
    :func:`lda_optimal_value_matrix`; see :class:`topicmech.theory.ValueBlocks`."""
    W = lda_optimal_value_matrix(num_topics, words_per_topic, alpha, doc_len, mask_prob, keep_prob, random_prob,
                                 attend_to_masked, l2)
    return theory.orbit_means(W, num_topics, words_per_topic)


# ----------------------------------------------------------------------------------------
# Stage 1 runs: uniform attention, trained W^V
# ----------------------------------------------------------------------------------------


def _summarise_value(W: np.ndarray, topic_of_word: torch.Tensor) -> dict[str, float]:
    bm = block_means(W, topic_of_word)
    return {"diag": bm.diag, "same_topic": bm.same_topic, "diff_topic": bm.diff_topic,
            "topic_gap": bm.topic_gap, "diag_excess": bm.diag - bm.same_topic,
            "mask_col": float(bm.mask_col) if bm.mask_col is not None else math.nan}


def stage1_run(
    seed: int,
    *,
    topic_model: TopicModel,
    doc_len: int,
    steps: int | None = None,
    batch_size: int = 128,
    loss: LossKind = "squared",
    optimizer: OptimizerKind = "sgd",
    lr: float | None = None,
    anneal_steps: int | None = None,
    l2: float = 0.0,
    attend_to_masked: bool = False,
    mask_prob: float = 0.15,
    keep_prob: float = 0.1,
    random_prob: float = 0.1,
    init_scale: float = 0.0,
    reference: np.ndarray | None = None,
    return_matrix: bool = False,
) -> dict[str, Any]:
    """Train ``W^V`` under frozen uniform attention (one-hot embeddings, identity head) and summarise it.

    Uses the fast uniform-attention path (:func:`topicmech.fast.train_uniform`).

    Parameters
    ----------
    seed : int
        Seeds the initialisation (``seed``) and the documents and masks (``1000 + seed``).
    topic_model : TopicModel
        Simplified or LDA data.
    doc_len : int
        ``N``.
    steps : int, optional
        Steps at learning rate ``lr``. Default for SGD: enough for the population gradient
        flow to shrink the initial error along the slowest eigenvector of ``Sigma`` by a
        factor 100, ``ceil(log(100) / (2 lr (lambda_min + l2)))`` for squared loss; with the
        default ``lr`` that is ``log(100) ~ 4.6`` times the condition number
        ``(lambda_max + l2) / (lambda_min + l2)``, and at least 200 (a well-conditioned
        setting would otherwise stop before the SGD noise averages out). Cross-entropy takes
        the same number of steps at its default rate. For Adam 400.
    batch_size : int
        Fresh documents per step.
    loss : {"squared", "cross_entropy"}
    optimizer : {"sgd", "adam"}
    lr : float, optional
        Default for SGD, from the exact ``Sigma`` of the setting
        (:func:`topicmech.stage1.sigma_range`: simplified or LDA data): half the
        stability limit, ``0.5 / (lambda_max + l2)`` for squared loss (the gradient is
        ``2 (W Sigma - C)``) and ``2 / (lambda_max + 4 l2)`` for cross-entropy (its
        Hessian is at most a quarter of the squared-loss one); another topic model raises
        ValueError (pass ``lr``). For Adam 1e-2: Adam divides the gradient by its running
        scale, so its step is about ``lr`` per entry whatever the curvature, and 1e-2 is
        small next to the entries of ``W*`` (of order ``1 / v``).
    anneal_steps : int, optional
        Extra steps at ``lr / 10`` after the first ``steps`` (fresh optimiser state),
        which shrinks the SGD noise around the optimum by about ``sqrt(10)``. Default: 0
        when ``steps`` is given; with the derived default ``steps``, half as many again.
    l2 : float
        Penalty ``l2 * ||W^V||_F^2`` added to the mean loss (the ridge of
        :func:`topicmech.theory.optimal_value_matrix`).
    attend_to_masked : bool
        Key visibility of selected positions (default ``False``: hidden, the authors' code).
    mask_prob, keep_prob, random_prob : float
        BERT corruption.
    init_scale : float
        Standard deviation of the initial ``W^V`` (default 0: start from zero, the
        minimum-norm path).
    reference : ndarray, shape (D, D), optional
        An exact optimum; adds ``"rel_error"``, the relative Frobenius distance of the
        word rows of ``W^V`` to it (the ``[MASK]`` row never gets a gradient target and
        the ``[MASK]`` column none at all with hidden keys, so only word rows and word
        columns count).
    return_matrix : bool
        Also return the trained matrix under ``"W_V"``.

    Returns
    -------
    summary : dict
        ``"diag"``, ``"same_topic"``, ``"diff_topic"``, ``"topic_gap"`` (same minus
        different topic), ``"diag_excess"`` (diagonal minus same topic), ``"mask_col"``,
        ``"final_loss"`` (mean minibatch loss over the last 10% of steps, without the L2
        term), optionally ``"rel_error"`` and ``"W_V"`` (ndarray, shape (D, D)).
    """
    _check_topic_model(topic_model)
    if anneal_steps is None:
        anneal_steps = -1 if steps is None else 0                  # -1: half the derived steps, set below
    elif isinstance(anneal_steps, bool) or not isinstance(anneal_steps, (int, np.integer)) or anneal_steps < 0:
        raise ValueError(f"anneal_steps must be an int >= 0, got {anneal_steps!r}")
    _check_bool("attend_to_masked", attend_to_masked)
    _check_choice("loss", loss, ("squared", "cross_entropy"))
    _check_choice("optimizer", optimizer, ("sgd", "adam"))
    l2 = _check_nonneg_float("l2", l2)
    if optimizer == "adam":
        lr = ADAM_LR if lr is None else lr
        steps = 400 if steps is None else steps
    elif lr is None or steps is None:
        lam_min, lam_max = stage1.sigma_range(topic_model, doc_len, attend_to_masked=bool(attend_to_masked),
                                              mask_prob=mask_prob, keep_prob=keep_prob, random_prob=random_prob,
                                              needs="lr and steps")
        curv = 4.0 if loss == "cross_entropy" else 1.0         # Hessian <= 2 (lambda + l2) / curv
        if lr is None:
            lr = stage1.SAFE_FRACTION * curv / (lam_max + curv * l2)
        if steps is None:
            steps = max(200, math.ceil(math.log(100.0) * curv / (2.0 * float(lr) * (lam_min + curv * l2))))
    steps = check_positive_int("steps", steps)
    if anneal_steps < 0:
        anneal_steps = steps // 2
    model = OneLayerTransformer(topic_model.num_tokens, embedding="one_hot", attention="uniform", value="learned",
                                head="identity", attend_to_masked=bool(attend_to_masked), init_scale=init_scale,
                                seed=seed)
    common = dict(batch_size=batch_size, doc_len=doc_len, loss=loss, optimizer=optimizer, l2=l2,
                  mask_prob=mask_prob, keep_prob=keep_prob, random_prob=random_prob)
    history = train_uniform(model, topic_model, steps=steps, lr=lr, seed=1000 + seed, **common)
    losses = list(history.loss)
    if anneal_steps:
        losses += train_uniform(model, topic_model, steps=int(anneal_steps), lr=float(lr) / 10.0,
                                seed=500_000 + seed, **common).loss
    W = model.W_V.detach().double().cpu().numpy()                                  # (D, D)
    out: dict[str, Any] = _summarise_value(W, topic_model.topic_of_word)
    tail = max(1, len(losses) // 10)
    out["final_loss"] = float(np.mean(losses[-tail:]))
    if reference is not None:
        ref = np.asarray(reference, dtype=np.float64)
        if ref.shape != W.shape:
            raise ValueError(f"reference must have shape {W.shape}, got {ref.shape}")
        V = topic_model.vocab_size
        out["rel_error"] = float(np.linalg.norm(W[:V, :V] - ref[:V, :V]) / np.linalg.norm(ref[:V, :V]))
    if return_matrix:
        out["W_V"] = W
    return out


def _reference_blocks(
    num_topics: int,
    words_per_topic: int,
    topics_per_doc: int | None,
    alpha: float | None,
    doc_len: int,
    mask_prob: float,
    keep_prob: float,
    random_prob: float,
    attend_to_masked: bool,
    l2: float,
) -> np.ndarray:
    args = (doc_len, mask_prob, keep_prob, random_prob, attend_to_masked, l2)
    if alpha is not None:
        return lda_optimal_value_matrix(num_topics, words_per_topic, alpha, *args)
    return theory.optimal_value_matrix(num_topics, words_per_topic, topics_per_doc, *args)


def stage1_point(
    seed: int,
    *,
    num_topics: int = 8,
    words_per_topic: int = 4,
    topics_per_doc: int | None = 2,
    alpha: float | None = None,
    doc_len: int = 32,
    mask_prob: float = 0.15,
    keep_prob: float = 0.1,
    random_prob: float = 0.1,
    attend_to_masked: bool = False,
    l2: float = 0.0,
    **train_kwargs: Any,
) -> dict[str, Any]:
    """One point of a stage-1 sweep: build the data, train ``W^V``, compare with the exact optimum.

    Written for :func:`topicmech.dynamics.run_grid`: every keyword can be a grid axis.

    Parameters
    ----------
    seed : int
    num_topics, words_per_topic, topics_per_doc, doc_len : int
        ``T, v, tau, N``. ``topics_per_doc`` is ignored when ``alpha`` is given.
    alpha : float, optional
        Use LDA data (:class:`~topicmech.data.LDATopicModel`) with this concentration
        instead of the simplified model.
    mask_prob, keep_prob, random_prob : float
    attend_to_masked : bool
    l2 : float
        Passed to training and to the exact (ridge) reference.
    **train_kwargs
        Passed to :func:`stage1_run` (``steps``, ``lr``, ``loss``, ``optimizer``, ...).

    Returns
    -------
    summary : dict
        The trained summary of :func:`stage1_run` (with ``"rel_error"``) and the exact
        values under ``"exact_diag"``, ``"exact_same_topic"``, ``"exact_diff_topic"``,
        ``"exact_topic_gap"``, ``"exact_diag_excess"``. The exact reference is the
        squared-loss optimum; with ``loss="cross_entropy"`` it is reported for
        comparison only.
    """
    if alpha is not None:
        data: TopicModel = LDATopicModel(num_topics, words_per_topic, alpha)
        tau = None
    else:
        if topics_per_doc is None:
            raise ValueError("give topics_per_doc (simplified model) or alpha (LDA)")
        data = SimplifiedTopicModel(num_topics, words_per_topic, topics_per_doc)
        tau = topics_per_doc
    ref = _reference_blocks(num_topics, words_per_topic, tau, alpha, doc_len, mask_prob, keep_prob, random_prob,
                            attend_to_masked, l2)
    out = stage1_run(seed, topic_model=data, doc_len=doc_len, mask_prob=mask_prob, keep_prob=keep_prob,
                     random_prob=random_prob, attend_to_masked=attend_to_masked, l2=l2, reference=ref,
                     **train_kwargs)
    exact = _summarise_value(ref, data.topic_of_word)
    out.update({f"exact_{k}": exact[k] for k in ("diag", "same_topic", "diff_topic", "topic_gap", "diag_excess")})
    return out


# ----------------------------------------------------------------------------------------
# Probes for learned embeddings and for several heads
# ----------------------------------------------------------------------------------------


def embedding_cosine_contrast(W_E: torch.Tensor | np.ndarray, topic_of_word: torch.Tensor) -> dict[str, float]:
    """Block means of the cosine similarity between word embeddings.

    Cosines make models with different embedding scales comparable; the ``[MASK]``
    column is left out.

    Parameters
    ----------
    W_E : Tensor or ndarray, shape (d, D) or (d, V)
        Embeddings as columns (the package's ``W_E``).
    topic_of_word : LongTensor, shape (V,)

    Returns
    -------
    dict
        ``"same_topic"``, ``"diff_topic"`` (mean cosine over pairs of distinct words in
        the same / in different topics) and ``"contrast"`` (their difference). One-hot
        embeddings give 0, 0, 0.
    """
    E = W_E.detach().double().cpu().numpy() if isinstance(W_E, torch.Tensor) else np.asarray(W_E, dtype=np.float64)
    V = len(topic_of_word)
    if E.ndim != 2 or E.shape[1] not in (V, V + 1):
        raise ValueError(f"W_E must have shape (d, {V}) or (d, {V + 1}), got {E.shape}")
    E = E[:, :V]                                                                   # (d, V) words only
    norms = np.linalg.norm(E, axis=0)
    if np.any(norms == 0):
        raise ValueError("W_E has a zero word embedding; cosines are undefined")
    cos = (E.T @ E) / np.outer(norms, norms)                                       # (V, V)
    bm = block_means(cos, topic_of_word)
    return {"same_topic": bm.same_topic, "diff_topic": bm.diff_topic, "contrast": bm.topic_gap}


def head_attention(
    model: TwoLayerTransformer | OneLayerTransformer,
    inputs: torch.Tensor,
    topic_of_word: torch.Tensor,
    selected: torch.Tensor | None = None,
) -> np.ndarray:
    """Attention by relation for every layer and head.

    Parameters
    ----------
    model : TwoLayerTransformer or OneLayerTransformer
        A one-layer model counts as one layer with one head.
    inputs : LongTensor, shape (batch, N)
    topic_of_word : LongTensor, shape (V,)
    selected : BoolTensor, shape (batch, N), optional

    Returns
    -------
    stats : ndarray, shape (num_layers, num_heads, 4)
        The fields of :class:`topicmech.probes.AttentionByRelation` (self, same word,
        same topic, different topic), each a multiple of uniform attention; the topic
        ratio of head ``(l, h)`` is ``stats[l, h, 2] / stats[l, h, 3]``.
    """
    if not callable(getattr(model, "run_with_cache", None)):
        raise ValueError(f"model must be a OneLayerTransformer or TwoLayerTransformer, got {type(model).__name__}")
    with torch.no_grad():
        cache = model.run_with_cache(inputs, selected)
    if "attn.pattern" in cache:                                                    # one-layer model
        patterns = [cache["attn.pattern"][:, None]]                                # (B, 1, query, key)
    else:
        L = getattr(model, "num_layers", None)
        if not isinstance(L, int):
            raise ValueError(f"model must be a OneLayerTransformer or TwoLayerTransformer, got {type(model).__name__}")
        patterns = [cache[f"blocks.{layer}.attn.pattern"] for layer in range(L)]   # each (B, H, query, key)
    out = np.empty((len(patterns), patterns[0].shape[1], 4))
    for layer, pat in enumerate(patterns):
        for head in range(pat.shape[1]):
            out[layer, head] = tuple(attention_by_relation(pat[:, head], inputs, topic_of_word))
    return out


# ----------------------------------------------------------------------------------------
# Compensation: learned embeddings and learned attention
# ----------------------------------------------------------------------------------------


def compensation_run(
    seed: int,
    *,
    topic_model: TopicModel,
    doc_len: int,
    handicap: Literal["none", "embedding", "attention"] = "none",
    d_model: int | None = None,
    steps: int = 400,
    batch_size: int = 64,
    loss: LossKind = "squared",
    optimizer: OptimizerKind = "adam",
    lr: float | None = None,
    attend_to_masked: bool = False,
    init_scale: float = 0.1,
    heldout: tuple[torch.Tensor, torch.Tensor | None] | None = None,
    mask_prob: float = 0.15,
    keep_prob: float = 0.1,
    random_prob: float = 0.1,
) -> dict[str, float]:
    """Train embeddings, attention and ``W^V`` together, with one of the first two handicapped.

    Every setting has a learned ``W^V`` and a tied head (``W^U = W_E^T``, which is the
    identity for one-hot embeddings):

    * ``"none"``: learned embeddings (dimension ``d_model``) and learned attention;
    * ``"embedding"``: embeddings frozen to one-hot (``d = D``), learned attention;
    * ``"attention"``: learned embeddings, attention frozen to uniform (trained on the fast
      path, :func:`topicmech.fast.train_uniform`).

    Parameters
    ----------
    seed : int
        Seeds the initialisation (``seed``) and the documents and masks (``2000 + seed``).
    topic_model : TopicModel
    doc_len : int
    handicap : {"none", "embedding", "attention"}
    d_model : int, optional
        Embedding dimension for learned embeddings (default ``D``).
    steps, batch_size : int
    loss : {"squared", "cross_entropy"}
    optimizer : {"sgd", "adam"}
    lr : float, optional
        Adam: :data:`ADAM_LR` (Adam's step does not scale with the curvature). SGD with
        ``handicap="embedding"`` (one-hot embeddings, so at the start only ``W^V`` feels
        curvature, that of the stage-1 ``Sigma`` at uniform attention):
        ``0.5 / lambda_max`` (squared loss) or ``2 / lambda_max`` (cross-entropy), as in
        :func:`stage1_run`. SGD with learned embeddings has no such bound (the tied loss
        is quartic in ``W_E``, its curvature grows with the embeddings) and raises
        ValueError: pass ``lr``.
    attend_to_masked : bool
        Key visibility of selected positions during training (default ``False``).
    init_scale : float
        Standard deviation of the initial learned matrices.
    heldout : (inputs, selected), optional
        Batch on which attention is read; default: 128 clean documents
        (:func:`topicmech.dynamics.heldout_batch`).
    mask_prob, keep_prob, random_prob : float

    Returns
    -------
    summary : dict of float
        ``"emb_same_topic"``, ``"emb_diff_topic"``, ``"emb_contrast"``
        (:func:`embedding_cosine_contrast`; 0 for one-hot); ``"attn_self"``,
        ``"attn_same_word"``, ``"attn_same_topic"``, ``"attn_diff_topic"``,
        ``"attn_ratio"`` (same / different topic; 1 for uniform attention) on the
        held-out batch; ``"value_topic_gap"`` (same minus different topic entry of the
        end-to-end map ``W_E^T W^V W_E``); ``"final_loss"``.
    """
    _check_topic_model(topic_model)
    _check_choice("handicap", handicap, HANDICAPS)
    _check_bool("attend_to_masked", attend_to_masked)
    doc_len = check_positive_int("doc_len", doc_len)
    D = topic_model.num_tokens
    _check_choice("optimizer", optimizer, ("sgd", "adam"))
    _check_choice("loss", loss, ("squared", "cross_entropy"))
    if lr is None:
        if optimizer == "adam":
            lr = ADAM_LR
        elif handicap == "embedding":
            lam_max = stage1.sigma_range(topic_model, doc_len, attend_to_masked=bool(attend_to_masked),
                                         mask_prob=mask_prob, keep_prob=keep_prob, random_prob=random_prob,
                                         needs="lr")[1]
            lr = stage1.SAFE_FRACTION * (4.0 if loss == "cross_entropy" else 1.0) / lam_max
        else:
            raise ValueError(
                f"no default SGD learning rate with learned embeddings (handicap={handicap!r}): the tied loss "
                "is quartic in W_E and its curvature grows during training; pass lr, or use optimizer='adam'"
            )
    if handicap == "embedding":
        kw = dict(embedding="one_hot", attention="learned")
        d = D
    else:
        d = D if d_model is None else check_positive_int("d_model", d_model)
        kw = dict(embedding="learned", attention="uniform" if handicap == "attention" else "learned")
    model = OneLayerTransformer(D, d, value="learned", head="tied", attend_to_masked=bool(attend_to_masked),
                                init_scale=init_scale, seed=seed, **kw)
    run = train_uniform if handicap == "attention" else train
    history = run(model, topic_model, steps=steps, batch_size=batch_size, doc_len=doc_len, loss=loss,
                  optimizer=optimizer, lr=lr, mask_prob=mask_prob, keep_prob=keep_prob, random_prob=random_prob,
                  seed=2000 + seed)
    if heldout is None:
        heldout = heldout_batch(topic_model, 128, doc_len)
    topic = topic_model.topic_of_word
    emb = embedding_cosine_contrast(model.W_E, topic)
    att = head_attention(model, heldout[0], topic, heldout[1])[0, 0]               # (4,)
    tail = max(1, len(history.loss) // 10)
    with torch.no_grad():
        value_gap = block_means(model.value_matrix(), topic).topic_gap
    return {
        "emb_same_topic": emb["same_topic"], "emb_diff_topic": emb["diff_topic"], "emb_contrast": emb["contrast"],
        "attn_self": float(att[0]), "attn_same_word": float(att[1]), "attn_same_topic": float(att[2]),
        "attn_diff_topic": float(att[3]), "attn_ratio": float(att[2] / att[3]),
        "value_topic_gap": float(value_gap), "final_loss": float(np.mean(history.loss[-tail:])),
    }


def deep_run(
    seed: int,
    *,
    topic_model: TopicModel,
    doc_len: int,
    num_layers: int = 2,
    num_heads: int = 2,
    d_model: int = 16,
    steps: int = 400,
    batch_size: int = 64,
    loss: LossKind = "squared",
    optimizer: OptimizerKind = "adam",
    lr: float | None = None,
    attend_to_masked: bool = False,
    init_scale: float = 0.1,
    heldout: tuple[torch.Tensor, torch.Tensor | None] | None = None,
) -> dict[str, Any]:
    """Train a :class:`~topicmech.model.TwoLayerTransformer` (residual, LayerNorm, tied head) and probe it.

    Parameters
    ----------
    seed : int
        Seeds the initialisation (``seed``) and the documents and masks (``3000 + seed``).
    topic_model : TopicModel
    doc_len : int
    num_layers, num_heads, d_model : int
        Architecture (``d_model`` divisible by ``num_heads``).
    steps, batch_size : int
    loss : {"squared", "cross_entropy"}
    optimizer : {"sgd", "adam"}
    lr : float, optional
        Adam: :data:`ADAM_LR` by default (Adam's step does not scale with the curvature).
        SGD has no setting-derived rate here (LayerNorm, residual stream and tied head
        make the curvature depend on the weights) and raises ValueError without ``lr``.
    attend_to_masked : bool
        Key visibility of selected positions during training (default ``False``).
    init_scale : float
    heldout : (inputs, selected), optional
        Default: 128 clean documents (:func:`topicmech.dynamics.heldout_batch`).

    Returns
    -------
    summary : dict
        ``"emb_same_topic"``, ``"emb_diff_topic"``, ``"emb_contrast"`` (floats, cosine
        block means of the embeddings); ``"attention"`` (ndarray, shape
        (num_layers, num_heads, 4), :func:`head_attention`); ``"attn_ratio"`` (ndarray,
        shape (num_layers, num_heads), same / different topic); ``"min_ratio"`` and
        ``"max_ratio"`` (floats, over all heads); ``"final_loss"`` (float); ``"W_E"``
        (ndarray, shape (d, D), the trained embeddings).
    """
    _check_topic_model(topic_model)
    _check_bool("attend_to_masked", attend_to_masked)
    doc_len = check_positive_int("doc_len", doc_len)
    _check_choice("optimizer", optimizer, ("sgd", "adam"))
    if lr is None:
        if optimizer == "sgd":
            raise ValueError("no default SGD learning rate for the two-layer model (its curvature depends on the "
                             "weights); pass lr, or use optimizer='adam'")
        lr = ADAM_LR
    model = TwoLayerTransformer(topic_model.num_tokens, d_model, num_heads=num_heads, num_layers=num_layers,
                                attend_to_masked=bool(attend_to_masked), init_scale=init_scale, seed=seed)
    history = train(model, topic_model, steps=steps, batch_size=batch_size, doc_len=doc_len, loss=loss,
                    optimizer=optimizer, lr=lr, seed=3000 + seed)
    if heldout is None:
        heldout = heldout_batch(topic_model, 128, doc_len)
    topic = topic_model.topic_of_word
    emb = embedding_cosine_contrast(model.W_E, topic)
    att = head_attention(model, heldout[0], topic, heldout[1])                     # (L, H, 4)
    ratio = att[..., 2] / att[..., 3]                                              # (L, H)
    tail = max(1, len(history.loss) // 10)
    return {
        "emb_same_topic": emb["same_topic"], "emb_diff_topic": emb["diff_topic"], "emb_contrast": emb["contrast"],
        "attention": att, "attn_ratio": ratio, "min_ratio": float(ratio.min()), "max_ratio": float(ratio.max()),
        "final_loss": float(np.mean(history.loss[-tail:])),
        "W_E": model.W_E.detach().double().cpu().numpy(),
    }


# ----------------------------------------------------------------------------------------
# Closed forms along a sweep
# ----------------------------------------------------------------------------------------


def value_blocks_along(
    param: str,
    values: Iterable[float],
    *,
    num_topics: int = 8,
    words_per_topic: int = 4,
    topics_per_doc: int = 2,
    doc_len: int | float = 32,
    mask_prob: float = 0.15,
    keep_prob: float = 0.1,
    random_prob: float = 0.1,
    attend_to_masked: bool = False,
    l2: float = 0.0,
) -> dict[str, np.ndarray]:
    """Exact stage-1 block values while one parameter varies and the others stay fixed.

    Calls :func:`topicmech.theory.value_block_coefficients` once per value, at a cost
    independent of the vocabulary size, so curves can be drawn densely.

    Parameters
    ----------
    param : str
        One of :data:`SWEEP_PARAMETERS`; integer parameters are rounded to int.
    values : iterable of float
    num_topics, words_per_topic, topics_per_doc, doc_len, mask_prob, keep_prob, random_prob, attend_to_masked, l2
        The fixed values of the other parameters.

    Returns
    -------
    curves : dict of str to ndarray, shape (len(values),)
        ``"x"`` (the values), ``"diag"``, ``"same_topic"``, ``"diff_topic"``,
        ``"topic_gap"`` (``same - diff``), ``"diag_excess"`` (``diag - same``),
        ``"topic_eigenvalue"``.
    """
    _check_choice("param", param, SWEEP_PARAMETERS)
    xs = np.asarray(list(values), dtype=float)
    if xs.ndim != 1 or xs.size == 0:
        raise ValueError(f"values must be a non-empty 1-D sequence, got {values!r}")
    base: dict[str, Any] = dict(num_topics=num_topics, words_per_topic=words_per_topic,
                                topics_per_doc=topics_per_doc, doc_len=doc_len, mask_prob=mask_prob,
                                keep_prob=keep_prob, random_prob=random_prob)
    keys = ("diag", "same_topic", "diff_topic", "topic_gap", "diag_excess", "topic_eigenvalue")
    out = {k: np.empty(xs.size) for k in keys}
    for i, x in enumerate(xs):
        point = dict(base)
        if param in ("num_topics", "words_per_topic", "topics_per_doc", "doc_len"):
            if not (math.isinf(x) and param == "doc_len"):
                if x != round(x):
                    raise ValueError(f"values of {param} must be integers, got {x!r}")
                x = int(round(x))
        point[param] = x
        b = theory.value_block_coefficients(point["num_topics"], point["words_per_topic"], point["topics_per_doc"],
                                            point["doc_len"], point["mask_prob"], point["keep_prob"],
                                            point["random_prob"], attend_to_masked=attend_to_masked, l2=l2)
        for k, val in (("diag", b.diag), ("same_topic", b.same_topic), ("diff_topic", b.diff_topic),
                       ("topic_gap", b.same_topic - b.diff_topic), ("diag_excess", b.diag - b.same_topic),
                       ("topic_eigenvalue", b.topic_eigenvalue)):
            out[k][i] = val
    out["x"] = xs
    return out


def stage2_drive(
    num_topics: int,
    words_per_topic: int,
    topics_per_doc: int,
    doc_len: int | float,
    mask_prob: float = 0.15,
    keep_prob: float = 0.1,
) -> float:
    """Exact initial stage-2 drive on the topic contrasts, hidden keys (``attend_to_masked=False``).

    At uniform attention with ``W^V`` at its stage-1 optimum, the gradient ``G = dL/dA``
    acts on topic-contrast vectors as ``-lambda_G`` with
    ``lambda_G = -[(g_d - g_s) + v (g_s - g_t)]`` (:func:`topicmech.dynamics.topic_growth_eigenvalue`),
    where ``g_d, g_s, g_t`` are its same-word, same-topic and different-topic entries
    (:func:`topicmech.stage2.hidden_key_gradient`, exact at finite ``N``). Under SGD the
    topic contrast of ``A`` first grows like ``exp(2 lr lambda_G t / sqrt(d))``
    (:func:`topicmech.stage2.predicted_growth_rate`), so ``lambda_G`` measures how strongly
    stage 2 starts.

    Parameters
    ----------
    num_topics, words_per_topic, topics_per_doc : int
    doc_len : int or math.inf
    mask_prob, keep_prob : float

    Returns
    -------
    lambda_G : float
        0 when ``topics_per_doc == 1`` (no different-topic key in any document).
    """
    from .stage2 import hidden_key_gradient

    g = hidden_key_gradient(num_topics, words_per_topic, topics_per_doc, doc_len, mask_prob, keep_prob)
    v = check_positive_int("words_per_topic", words_per_topic)
    return float(-((g["same_word"] - g["same_topic"]) + v * (g["same_topic"] - g["diff_topic"]))) + 0.0


def stage2_drive_point(
    seed: int,
    *,
    num_topics: int = 8,
    words_per_topic: int = 4,
    topics_per_doc: int = 2,
    doc_len: int = 32,
    mask_prob: float = 0.15,
    keep_prob: float = 0.1,
    random_prob: float = 0.1,
    num_docs: int = 2000,
) -> dict[str, float]:
    """Monte-Carlo and exact stage-2 drive at one parameter point (hidden keys).

    Written for :func:`sweep_axes`: estimates ``G = dL/dA`` at uniform attention with
    ``W^V`` at the stage-1 optimum from ``num_docs`` sampled documents
    (:func:`topicmech.theory.key_query_gradient`) and reduces it to ``lambda_G`` with
    :func:`topicmech.dynamics.topic_growth_eigenvalue`.

    Returns
    -------
    dict
        ``"mc_drive"`` (Monte Carlo, this seed) and ``"exact_drive"``
        (:func:`stage2_drive`).
    """
    from .dynamics import topic_growth_eigenvalue

    W = theory.optimal_value_matrix(num_topics, words_per_topic, topics_per_doc, doc_len, mask_prob, keep_prob,
                                    random_prob, attend_to_masked=False)
    G = theory.key_query_gradient(W, num_topics, words_per_topic, topics_per_doc, doc_len, num_docs, mask_prob,
                                  keep_prob, random_prob, attend_to_masked=False, seed=seed)   # (D, D)
    topic = np.arange(num_topics * words_per_topic) // words_per_topic
    return {"mc_drive": float(topic_growth_eigenvalue(G, topic)),
            "exact_drive": stage2_drive(num_topics, words_per_topic, topics_per_doc, doc_len, mask_prob, keep_prob)}


# ----------------------------------------------------------------------------------------
# Tidy tables
# ----------------------------------------------------------------------------------------


def _is_scalar(x: object) -> bool:
    return isinstance(x, (bool, int, float, str, np.integer, np.floating, np.bool_)) or x is None


def _plain(x: object) -> object:
    if isinstance(x, np.bool_):
        return bool(x)
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.floating):
        return float(x)
    return x


def tidy(sweep: Sweep, keys: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Flatten a sweep into rows: one flat dict per run, parameters then results.

    Parameters
    ----------
    sweep : topicmech.dynamics.Sweep
        From :func:`topicmech.dynamics.run_seeds` or :func:`topicmech.dynamics.run_grid`,
        whose function returned a mapping.
    keys : sequence of str, optional
        Result entries to keep; default every scalar entry (arrays are dropped).

    Returns
    -------
    rows : list of dict
        ``{"seed": ..., <grid parameters>, <result entries>}`` with Python scalars
        (NumPy scalars converted, so the values can be glued directly).

    Examples
    --------
    >>> from topicmech.dynamics import run_grid
    >>> sweep = run_grid(lambda seed, n: {"y": n + seed, "arr": [1, 2]}, {"n": [10, 20]}, seeds=2)
    >>> tidy(sweep)[1]
    {'seed': 1, 'n': 10, 'y': 11}
    """
    if not isinstance(sweep, Sweep):
        raise ValueError(f"sweep must be a topicmech.dynamics.Sweep, got {type(sweep).__name__}")
    rows = []
    for rec in sweep.records:
        res = rec["result"]
        if not isinstance(res, Mapping):
            raise ValueError(f"tidy needs results that are mappings, got {type(res).__name__}")
        row = {k: _plain(v) for k, v in rec.items() if k != "result"}
        wanted = list(res) if keys is None else list(keys)
        for k in wanted:
            if k not in res:
                raise ValueError(f"no entry {k!r} in the results; entries: {sorted(res)}")
            if k in row:
                raise ValueError(f"result entry {k!r} clashes with a parameter of the same name")
            if _is_scalar(res[k]):
                row[k] = _plain(res[k])
            elif keys is not None:
                raise ValueError(f"result entry {k!r} is not a scalar (type {type(res[k]).__name__})")
        rows.append(row)
    return rows


def sweep_axes(
    fn: Callable[..., Mapping[str, Any]],
    axes: Mapping[str, Sequence[Any]],
    seeds: Iterable[int] | int,
    *,
    base: Mapping[str, Any] | None = None,
    reseed: bool = True,
) -> list[dict[str, Any]]:
    """Vary one parameter at a time around a base point, over several seeds; return tidy rows.

    Unlike :func:`topicmech.dynamics.run_grid` (the full product of the axes), this
    sweeps each axis separately with every other parameter at its ``base`` value, which
    is what a figure with one panel per parameter needs. Points shared by several axes
    (the base point itself) are run once and reused.

    Parameters
    ----------
    fn : callable
        ``fn(seed=seed, **params)`` returning a mapping (e.g. :func:`stage1_point`).
    axes : mapping of str to sequence
        Parameter name to the values it takes, e.g. ``{"doc_len": [8, 16, 32]}``.
    seeds : iterable of int, or int
        As in :func:`topicmech.dynamics.run_seeds`.
    base : mapping, optional
        Values of the parameters while another one varies; passed on every call.
    reseed : bool
        Call :func:`topicmech.utils.seed_everything` before each call.

    Returns
    -------
    rows : list of dict
        ``{"param": axis, "value": value, "seed": seed, <scalar results>}``, axes in the
        order given, then values, then seeds.

    Examples
    --------
    >>> rows = sweep_axes(lambda seed, a=0, b=0: {"y": 10 * a + b}, {"a": [1, 2], "b": [5]}, seeds=1)
    >>> [(r["param"], r["value"], r["y"]) for r in rows]
    [('a', 1, 10), ('a', 2, 20), ('b', 5, 5)]
    """
    if not callable(fn):
        raise ValueError(f"fn must be callable, got {fn!r}")
    if not isinstance(axes, Mapping) or not axes:
        raise ValueError(f"axes must be a non-empty mapping of parameter names to values, got {axes!r}")
    base = dict(base or {})
    for k, vals in axes.items():
        if k in ("seed", "param", "value"):
            raise ValueError(f"axis names must not be 'seed', 'param' or 'value', got {k!r}")
        if isinstance(vals, (str, bytes)) or not isinstance(vals, Iterable) or len(list(vals)) == 0:
            raise ValueError(f"axes[{k!r}] must be a non-empty sequence, got {vals!r}")
    seed_list = check_seeds(seeds)
    cache: dict[tuple, Mapping[str, Any]] = {}
    rows = []
    for axis, vals in axes.items():
        for value in vals:
            params = {**base, axis: value}
            for seed in seed_list:
                key = (seed, tuple(sorted((k, repr(v)) for k, v in params.items())))
                if key not in cache:
                    if reseed:
                        seed_everything(seed)
                    res = fn(seed=seed, **params)
                    if not isinstance(res, Mapping):
                        raise ValueError(f"fn must return a mapping, got {type(res).__name__}")
                    cache[key] = res
                res = cache[key]
                row: dict[str, Any] = {"param": axis, "value": _plain(value), "seed": seed}
                row.update({k: _plain(v) for k, v in res.items() if _is_scalar(v) and k not in row})
                rows.append(row)
    return rows


def aggregate(
    rows: Sequence[Mapping[str, Any]],
    by: Sequence[str],
    values: Sequence[str],
) -> list[dict[str, Any]]:
    """Group tidy rows and summarise columns over each group (typically over seeds).

    Parameters
    ----------
    rows : sequence of dict
        From :func:`tidy`.
    by : sequence of str
        Grouping columns (e.g. ``["doc_len"]``); groups keep their first-seen order.
        An empty sequence makes one group.
    values : sequence of str
        Columns to summarise.

    Returns
    -------
    summary : list of dict
        One row per group: the ``by`` columns, then ``"{col}_mean"``, ``"{col}_std"``
        (sample standard deviation, 0 for one row), ``"{col}_min"``, ``"{col}_max"`` for
        each column, and ``"count"`` (rows in the group). Python floats throughout.

    Examples
    --------
    >>> rows = [{"n": 1, "y": 1.0}, {"n": 1, "y": 3.0}, {"n": 2, "y": 5.0}]
    >>> aggregate(rows, ["n"], ["y"])[0]["y_mean"]
    2.0
    """
    if isinstance(by, str) or isinstance(values, str):
        raise ValueError("by and values must be sequences of column names, not strings")
    if not rows:
        raise ValueError("rows must not be empty")
    for col in (*by, *values):
        if any(col not in r for r in rows):
            raise ValueError(f"column {col!r} is missing from some rows; columns: {sorted(rows[0])}")
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for r in rows:
        groups.setdefault(tuple(r[c] for c in by), []).append(r)
    out = []
    for key, members in groups.items():
        row: dict[str, Any] = dict(zip(by, key))
        for col in values:
            x = np.asarray([m[col] for m in members], dtype=float)
            row[f"{col}_mean"] = float(x.mean())
            row[f"{col}_std"] = float(x.std(ddof=1)) if x.size > 1 else 0.0
            row[f"{col}_min"] = float(x.min())
            row[f"{col}_max"] = float(x.max())
        row["count"] = len(members)
        out.append(row)
    return out
