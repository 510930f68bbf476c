"""LDA documents: the simplified model's closed forms at an effective number of topics (book ch. 7).

The Dirichlet concentration of LDA is ``dirichlet_alpha``; the moments of LDA documents are affine
in ``1 / tau_eff``, so the exact stage-1 quantities follow from :func:`topicmech.theory.moments`.
"""

from __future__ import annotations

import numpy as np

from ..data import LDATopicModel, SimplifiedTopicModel, TopicModel, topic_model_for
from ..setting import Setting
from ..utils import check_float, check_positive_int
from .value import (
    ValueBlocks,
    check_setting,
    moments,
    optimum_from_moments,
    orbit_means,
    sigma_eigenvalues,
    sigma_extremes,
)

__all__ = ["sigma_range", "lda_effective_topics", "lda_alpha_matching", "lda_moments", "lda_optimal_value_matrix",
           "lda_sigma_eigenvalues", "lda_value_blocks"]


def lda_effective_topics(num_topics: int, dirichlet_alpha: float) -> float:
    """Topics per document ``tau_eff = (T a + 1) / (a + 1)`` of the simplified model with LDA's co-occurrences.

    ``a`` is LDA's Dirichlet concentration ``dirichlet_alpha``. Two positions share a topic with
    probability ``(a + 1) / (T a + 1)``, ``1 / tau`` in the simplified model; ``tau_eff`` runs
    from 1 (``a -> 0``) to ``T`` (``a -> inf``).

    Examples
    --------
    >>> lda_effective_topics(10, 0.1)
    1.8181818181818181
    """
    T = check_positive_int("num_topics", num_topics)
    a = check_float("dirichlet_alpha", dirichlet_alpha)
    return (T * a + 1.0) / (a + 1.0)


def lda_alpha_matching(setting: Setting) -> float:
    """The ``dirichlet_alpha = (tau - 1) / (T - tau)`` whose LDA has the co-occurrences of ``setting``.

    Inverts :func:`lda_effective_topics`; reads ``num_topics`` and ``topics_per_doc`` only,
    with ``2 <= topics_per_doc < num_topics``.
    """
    s = check_setting(setting)
    T, tau = s.T, s.tau
    if not 2 <= tau < T:
        raise ValueError(f"topics_per_doc must satisfy 2 <= topics_per_doc < num_topics={T}, got {tau!r}")
    return (tau - 1) / (T - tau)


def lda_moments(setting: Setting, dirichlet_alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Exact ``Sigma = E[xbar xbar^T]`` and ``C = E[y xbar^T]`` (shape (D, D)) for LDA documents.

    The moments are affine in ``1 / tau_eff`` (:func:`lda_effective_topics`), so they are the
    affine combination (exact; an extrapolation when ``tau_eff > 2``) of :func:`moments` at
    ``tau = 1`` and ``tau = 2``.

    Parameters
    ----------
    setting : Setting
        As in :func:`moments`, with ``num_topics >= 2``; ``topics_per_doc`` is not read (LDA
        mixes topics with a Dirichlet prior).
    dirichlet_alpha : float
        LDA's Dirichlet concentration, > 0.
    """
    s = check_setting(setting)
    if s.T < 2:
        raise ValueError(f"num_topics must be >= 2 for LDA moments, got {s.T!r}")
    tau_eff = lda_effective_topics(s.T, dirichlet_alpha)
    S1, C1 = moments(s.replace(topics_per_doc=1))
    S2, C2 = moments(s.replace(topics_per_doc=2))
    w = 2.0 * (1.0 - 1.0 / tau_eff)      # 1/tau_eff = 1 -> w = 0; 1/tau_eff = 1/2 -> w = 1
    return S1 + w * (S2 - S1), C1 + w * (C2 - C1)


def lda_optimal_value_matrix(setting: Setting, dirichlet_alpha: float, l2: float = 0.0) -> np.ndarray:
    """Stage-1 optimum ``W* = C (Sigma + l2 I)^{-1}`` (shape (D, D)) of ``W^V`` for LDA documents.

    Moments from :func:`lda_moments` (same arguments, ``topics_per_doc`` not read), ridge
    ``l2 >= 0``; as in :func:`optimal_value_matrix` (hidden keys: word block only, ``[MASK]``
    row and column 0), which it equals at ``dirichlet_alpha = lda_alpha_matching(setting)``.
    """
    lam = check_float("l2", l2, positive=False)
    Sigma, C = lda_moments(setting, dirichlet_alpha)
    return optimum_from_moments(Sigma, C, attend_to_masked=setting.attend_to_masked, l2=lam)


def lda_sigma_eigenvalues(setting: Setting, dirichlet_alpha: float) -> tuple[float, float]:
    """:func:`sigma_eigenvalues` for LDA documents: smallest positive and largest eigenvalue of the
    :func:`lda_moments` ``Sigma`` (word block with hidden keys), same arguments."""
    Sigma, _ = lda_moments(setting, dirichlet_alpha)
    return sigma_extremes(Sigma, setting.attend_to_masked)


def lda_value_blocks(setting: Setting, dirichlet_alpha: float, l2: float = 0.0) -> ValueBlocks:
    """Orbit values (:class:`ValueBlocks`) of :func:`lda_optimal_value_matrix`, same arguments."""
    W_star = lda_optimal_value_matrix(setting, dirichlet_alpha, l2=l2)
    return orbit_means(W_star, setting.T, setting.v)


def sigma_range(setting: Setting, *, topic_model: TopicModel | None = None,
                needs: str = "phases") -> tuple[float, float]:
    """Smallest positive and largest eigenvalue of the exact stage-1 ``Sigma`` for the setting's data.

    Parameters
    ----------
    setting : Setting
        Sizes, document length, masking and key convention (word block with hidden keys).
    topic_model : TopicModel, optional
        The data (:func:`topicmech.data.topic_model_for`): default the setting's simplified
        model (:func:`sigma_eigenvalues`); an :class:`~topicmech.data.LDATopicModel` uses
        :func:`lda_sigma_eigenvalues`; any other raises ValueError.
    needs : str
        Argument the caller should set instead, named in that error (no exact ``Sigma``, so no
        learning rate can be derived).

    Returns
    -------
    lambda_min, lambda_max : float
    """
    data = topic_model_for(setting, topic_model)
    if isinstance(data, SimplifiedTopicModel):
        return sigma_eigenvalues(setting)
    if isinstance(data, LDATopicModel):
        return lda_sigma_eigenvalues(setting, data.alpha)
    raise ValueError(f"no exact Sigma for a {type(data).__name__}, so no learning rate can be derived "
                     f"from the setting; pass {needs} explicitly")
