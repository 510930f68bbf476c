"""Exact population quantities for the one-layer model under uniform attention (book ch. 3-5, 7).

Every closed form takes a :class:`topicmech.setting.Setting` (the data, the masking and the key
convention): ``theory.moments(setting)``, ``theory.optimal_value_matrix(setting)`` (W*) and so on.
Two closed forms hold for one convention only and ignore ``setting.attend_to_masked``:
:func:`~topicmech.theory.value.diag_excess` (the theory's convention) and
:func:`~topicmech.theory.value.topic_eigenvalue_hidden` (the released code's convention).
Call the functions from here; the modules group them by subject:

- :mod:`~topicmech.theory.value`: moments, W*, its orbit values (:class:`ValueBlocks`:
  ``diag``, ``same_topic``, ``diff_topic`` are ``w_diag, w_same, w_diff``) and closed forms;
- :mod:`~topicmech.theory.lda`: the same for LDA documents (``dirichlet_alpha``);
- :mod:`~topicmech.theory.estimates`: the least-squares value matrix of a sample;
- :mod:`~topicmech.theory.embeddings`: the tied-embedding optimum (chapter 3);
- :mod:`~topicmech.theory.attention`: the stage-2 gradient, its drive and learning rate, and the
  authors' optimal tied attention at finite N and as N -> inf (chapter 5).
"""

from . import attention, embeddings, estimates, lda, value
from .attention import (
    TARGET_GROWTH_RATE,
    TiedAttentionLimit,
    TiedAttentionLimitObjective,
    TiedAttentionObjective,
    TiedAttentionOptimum,
    default_stage2_lr,
    empirical_key_query_gradient,
    hidden_key_gradient,
    key_query_gradient,
    key_query_gradient_limit,
    stage1_limit_blocks,
    stage2_drive,
    tied_attention_objective,
    tied_attention_optimum,
    tied_score_matrix,
    weighted_ratio,
)
from .embeddings import (
    AllocationGains,
    TiedBiasOptimum,
    TiedBlocks,
    allocation_gains,
    embedding_loss,
    symmetric_optimum,
    tied_bias_from_moments,
    tied_bias_optimum,
    tied_embedding_blocks,
    tied_embedding_optimum,
    weighted_topic_gap,
)
from .estimates import chunks, doc_counts, least_squares_value_matrix
from .lda import (
    lda_alpha_matching,
    lda_effective_topics,
    lda_moments,
    lda_optimal_value_matrix,
    lda_sigma_eigenvalues,
    lda_value_blocks,
    sigma_range,
)
from .value import (
    SAFE_FRACTION,
    ValueBlocks,
    bayes_risk,
    block_matrix,
    diag_excess,
    kappa,
    moments,
    optimal_value_matrix,
    optimum_from_moments,
    orbit_deviation,
    orbit_means,
    population_loss,
    sigma_eigenvalues,
    sigma_extremes,
    stage1_sgd_lr,
    topic_eigenvalue_hidden,
    value_block_coefficients,
    weighted_block_gap,
)

__all__ = [
    "value", "lda", "estimates", "embeddings", "attention",
    # value
    "ValueBlocks", "kappa", "moments", "population_loss", "optimal_value_matrix", "value_block_coefficients",
    "block_matrix", "orbit_means", "orbit_deviation", "diag_excess", "topic_eigenvalue_hidden",
    "weighted_block_gap", "bayes_risk", "sigma_eigenvalues", "SAFE_FRACTION", "stage1_sgd_lr",
    "optimum_from_moments", "sigma_extremes",
    # lda
    "lda_effective_topics", "lda_alpha_matching", "lda_moments", "lda_optimal_value_matrix",
    "lda_sigma_eigenvalues", "lda_value_blocks", "sigma_range",
    # estimates
    "least_squares_value_matrix", "chunks", "doc_counts",
    # embeddings
    "embedding_loss", "symmetric_optimum", "tied_embedding_optimum", "TiedBlocks", "tied_embedding_blocks",
    "weighted_topic_gap", "TiedBiasOptimum", "tied_bias_optimum", "tied_bias_from_moments", "allocation_gains", "AllocationGains",
    # attention
    "empirical_key_query_gradient", "key_query_gradient", "key_query_gradient_limit", "TARGET_GROWTH_RATE",
    "hidden_key_gradient", "stage2_drive", "default_stage2_lr", "TiedAttentionObjective", "TiedAttentionOptimum",
    "tied_attention_objective", "tied_attention_optimum", "tied_score_matrix", "weighted_ratio",
    "TiedAttentionLimitObjective", "TiedAttentionLimit", "stage1_limit_blocks",
]
