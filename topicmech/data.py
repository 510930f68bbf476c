"""Topic-model data and BERT-style masking.

``T = num_topics`` disjoint topics of ``v = words_per_topic`` words, ``V = vocab_size = T v``
real words (word ``w`` belongs to topic ``w // v``), token id ``V`` is ``[MASK]`` (``mask_id``),
``D = num_tokens = V + 1``. Documents are LongTensors of shape ``(num_docs, N)``.
"""

from __future__ import annotations

import numpy as np
import torch

from .setting import BERT_MASKING, Masking, Setting
from .utils import check_float, check_positive_int, make_generator

__all__ = ["TopicModel", "SimplifiedTopicModel", "LDATopicModel", "bert_mask", "corrupt", "check_docs", "check_topic_model",
           "topic_model_for", "heldout_batch", "HELDOUT_SEED"]


class TopicModel:
    """Common part of both generators: ``T = num_topics`` disjoint topics, each uniform over its
    ``v = words_per_topic`` words."""

    def __init__(self, num_topics: int, words_per_topic: int) -> None:
        self.num_topics = check_positive_int("num_topics", num_topics)
        self.words_per_topic = check_positive_int("words_per_topic", words_per_topic)

    @property
    def vocab_size(self) -> int:
        """Number of real words ``V = T v``."""
        return self.num_topics * self.words_per_topic

    @property
    def mask_id(self) -> int:
        """Token id of ``[MASK]`` (``= V``)."""
        return self.vocab_size

    @property
    def num_tokens(self) -> int:
        """Number of token ids ``D = V + 1``."""
        return self.vocab_size + 1

    @property
    def topic_of_word(self) -> torch.Tensor:
        """The topic of each word, ``w // v``, shape ``(V,)``."""
        return torch.arange(self.vocab_size) // self.words_per_topic

    @property
    def topic_word_matrix(self) -> np.ndarray:
        """Topic ``t``'s word distribution in row ``t``, shape ``(T, V)``."""
        return (self.topic_of_word.numpy() == np.arange(self.num_topics)[:, None]) / self.words_per_topic

    def sample_topic_weights(self, num_docs: int, gen: torch.Generator) -> torch.Tensor:
        """Per-document topic proportions ``theta``, shape ``(num_docs, T)``; defined by subclasses."""
        raise NotImplementedError

    def sample(self, num_docs: int, doc_len: int, seed: int | torch.Generator = 0, *,
               return_topics: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Draw ``num_docs`` documents of ``doc_len`` word ids in ``[0, V)``, shape ``(num_docs, doc_len)``;
        with ``return_topics``, also the topic each token was drawn from (same shape)."""
        num_docs = check_positive_int("num_docs", num_docs)
        doc_len = check_positive_int("doc_len", doc_len)
        gen = make_generator(seed)
        theta = self.sample_topic_weights(num_docs, gen)                       # (num_docs, T)
        topics = torch.multinomial(theta, doc_len, replacement=True, generator=gen)  # (num_docs, N)
        offset = torch.randint(self.words_per_topic, (num_docs, doc_len), generator=gen)
        docs = topics * self.words_per_topic + offset                          # (num_docs, N)
        return (docs, topics) if return_topics else docs

    def expected_topic_cooccurrence(self) -> np.ndarray:
        """``E[theta theta^T]``, shape ``(T, T)``: the topics ``s``, ``t`` of two distinct positions."""
        raise NotImplementedError

    def expected_cooccurrence(self) -> np.ndarray:
        """Probability that two distinct positions of a document hold words ``a`` and ``b``, shape ``(V, V)``:
        ``P[a, b] = E[theta_t(a) theta_t(b)] / v^2``."""
        topic = self.topic_of_word.numpy()
        return self.expected_topic_cooccurrence()[np.ix_(topic, topic)] / self.words_per_topic**2

    def word_marginal(self) -> np.ndarray:
        """Marginal word distribution, uniform ``1 / V`` by symmetry, shape ``(V,)``."""
        return np.full(self.vocab_size, 1.0 / self.vocab_size)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in vars(self).items())})"


class SimplifiedTopicModel(TopicModel):
    """The theory's topic model: each document mixes ``tau`` distinct topics equally.

    Each document picks ``tau`` distinct topics uniformly; each token draws one of them
    uniformly and a word uniformly from it.

    Parameters
    ----------
    num_topics : int
        ``T``, the number of topics.
    words_per_topic : int
        ``v``, the words of each topic.
    topics_per_doc : int
        ``tau``, with ``1 <= tau <= T``.
    """

    def __init__(self, num_topics: int, words_per_topic: int, topics_per_doc: int) -> None:
        super().__init__(num_topics, words_per_topic)
        tau = check_positive_int("topics_per_doc", topics_per_doc)
        if tau > self.num_topics:
            raise ValueError(f"topics_per_doc must be <= num_topics={self.num_topics}, got {topics_per_doc!r}")
        self.topics_per_doc = tau

    def sample_topic_weights(self, num_docs: int, gen: torch.Generator) -> torch.Tensor:
        # a uniform tau-subset per document: the tau smallest of T i.i.d. uniform keys
        keys = torch.rand(num_docs, self.num_topics, generator=gen)            # (num_docs, T)
        chosen = keys.argsort(dim=1)[:, : self.topics_per_doc]                 # (num_docs, tau)
        theta = torch.zeros(num_docs, self.num_topics)
        theta.scatter_(1, chosen, 1.0 / self.topics_per_doc)
        return theta

    def expected_topic_cooccurrence(self) -> np.ndarray:
        T, tau = self.num_topics, self.topics_per_doc
        diff = (tau - 1) / (T * (T - 1) * tau) if T > 1 else 0.0
        return np.where(np.eye(T, dtype=bool), 1.0 / (T * tau), diff)


class LDATopicModel(TopicModel):
    """Latent Dirichlet allocation with disjoint uniform topics.

    Each document draws ``theta ~ Dirichlet(alpha, ..., alpha)``; each token draws a topic
    from ``theta`` and a word uniformly from it.

    Parameters
    ----------
    num_topics : int
        ``T``, the number of topics.
    words_per_topic : int
        ``v``, the words of each topic.
    alpha : float
        Symmetric Dirichlet concentration (> 0); the released code's data use ``alpha = 0.1``
        (the concentration of the authors' reported experiments is not known).
    """

    def __init__(self, num_topics: int, words_per_topic: int, alpha: float) -> None:
        super().__init__(num_topics, words_per_topic)
        self.alpha = check_float("alpha", alpha)

    def sample_topic_weights(self, num_docs: int, gen: torch.Generator) -> torch.Tensor:
        # torch's Gamma sampler takes no generator: NumPy Gammas, seeded from the torch generator
        np_rng = np.random.default_rng(int(torch.randint(2**62, (1,), generator=gen)))
        size = (num_docs, self.num_topics)
        if self.alpha >= 0.05:
            g = np_rng.gamma(self.alpha, size=size)                             # (num_docs, T)
            g = np.maximum(g, np.finfo(np.float64).tiny)  # guard 0/0; underflow here has prob < 1e-15
            theta = g / g.sum(axis=1, keepdims=True)
        else:
            # small alpha: whole rows of Gamma(alpha) underflow to 0; work in log space with
            # Gamma(a) = Gamma(a + 1) * U**(1/a), U ~ Uniform(0, 1]
            log_g = np.log(np_rng.gamma(self.alpha + 1.0, size=size)) + np.log1p(-np_rng.random(size)) / self.alpha
            log_g -= log_g.max(axis=1, keepdims=True)
            theta = np.exp(log_g)
            theta /= theta.sum(axis=1, keepdims=True)
        return torch.from_numpy(theta).float()                                 # (num_docs, T)

    def expected_topic_cooccurrence(self) -> np.ndarray:
        T, a = self.num_topics, self.alpha
        a0 = T * a
        return np.where(np.eye(T, dtype=bool), a * (a + 1) / (a0 * (a0 + 1)), a * a / (a0 * (a0 + 1)))


def check_topic_model(value: object, name: str = "topic_model") -> TopicModel:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is a :class:`TopicModel`; return it."""
    if not isinstance(value, TopicModel):
        raise ValueError(f"{name} must be a TopicModel, got {type(value).__name__}")
    return value


def topic_model_for(setting: Setting, topic_model: TopicModel | None = None) -> TopicModel:
    """The data of a recipe: ``topic_model`` if given (e.g. LDA), else the setting's simplified model.

    A given ``topic_model`` must have the setting's ``num_topics`` and ``words_per_topic`` (and
    ``topics_per_doc`` if simplified); for other data the setting's ``topics_per_doc`` is not used.
    ValueError otherwise.
    """
    if not isinstance(setting, Setting):
        raise ValueError(f"setting must be a topicmech.Setting, got {type(setting).__name__}")
    if topic_model is None:
        return SimplifiedTopicModel(setting.num_topics, setting.words_per_topic, setting.topics_per_doc)
    check_topic_model(topic_model)
    sizes = (topic_model.num_topics, topic_model.words_per_topic) != (setting.num_topics, setting.words_per_topic)
    if sizes or (isinstance(topic_model, SimplifiedTopicModel) and topic_model.topics_per_doc != setting.topics_per_doc):
        raise ValueError(f"topic_model {topic_model!r} does not match the setting {setting!r}")
    return topic_model


#: Default seed of :func:`heldout_batch`, shared by every run that reads attention on it.
HELDOUT_SEED: int = 12345


def heldout_batch(topic_model: TopicModel, num_docs: int, doc_len: int, *, seed: int = HELDOUT_SEED,
                  masking: Masking | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A fixed batch ``(inputs, selected)``, shape ``(num_docs, doc_len)``, on which to read attention.

    ``masking=None`` (default, as the released code's inspection script) gives clean documents and
    ``selected=None``; a :class:`~topicmech.setting.Masking` corrupts them with
    :func:`bert_mask` (seed ``seed + 1``).
    """
    check_topic_model(topic_model)
    docs = topic_model.sample(num_docs, doc_len, seed)                         # (n, N)
    if masking is None:
        return docs, None
    if not isinstance(masking, Masking):
        raise ValueError(f"masking must be a topicmech.Masking or None, got {masking!r}")
    return bert_mask(docs, topic_model.vocab_size, masking, seed=seed + 1)


def check_docs(docs: torch.Tensor, vocab_size: int, name: str = "docs") -> torch.Tensor:
    """Raise ``ValueError`` naming ``name`` unless ``docs`` is a 2-D integer tensor (or array) of ids
    in ``[0, vocab_size)``; return it as a LongTensor."""
    if not isinstance(docs, torch.Tensor):
        try:
            docs = torch.as_tensor(np.asarray(docs))
        except (TypeError, ValueError, RuntimeError):
            raise ValueError(f"{name} must be an integer tensor of shape (num_docs, doc_len), "
                             f"got {type(docs).__name__}") from None
    if docs.dim() != 2 or docs.dtype.is_floating_point or docs.dtype.is_complex or docs.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer token ids in shape (num_docs, doc_len), got shape "
                         f"{tuple(docs.shape)} and dtype {docs.dtype}")
    if docs.numel() and (int(docs.min()) < 0 or int(docs.max()) >= vocab_size):
        raise ValueError(f"{name} holds token ids outside [0, {vocab_size}): min {int(docs.min())}, "
                         f"max {int(docs.max())}")
    return docs.long()


def corrupt(docs: torch.Tensor, sel_u: torch.Tensor, branch: torch.Tensor, words: torch.Tensor, mask_id: int,
            p_m: float, p_c: float, p_r: float) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`bert_mask` from its already-drawn random numbers, without validation.

    ``docs`` (true word ids), the uniforms ``sel_u`` (selection) and ``branch`` (``[MASK]``,
    random or kept) and the random ``words`` share one shape; ``mask_id`` is ``V``. Returns
    ``(inputs, selected)`` as :func:`bert_mask` does; the training loops draw the numbers in
    :func:`bert_mask`'s order and call this.
    """
    selected = sel_u < p_m
    to_mask = selected & (branch >= p_c + p_r)
    to_random = selected & (branch >= p_c) & (branch < p_c + p_r)
    return torch.where(to_random, words, docs).masked_fill_(to_mask, mask_id), selected


def bert_mask(docs: torch.Tensor, vocab_size: int, masking: Masking = BERT_MASKING, *,
              seed: int | torch.Generator = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT corruption: select positions, then show ``[MASK]``, a random word, or the word itself.

    Each position is selected with probability ``p_m = masking.mask_prob``; a selected position
    shows ``[MASK]`` (id ``V``) with probability ``1 - p_c - p_r``, a uniform random word with
    probability ``p_r = masking.random_prob`` and its own word with probability
    ``p_c = masking.keep_prob``.

    Parameters
    ----------
    docs : LongTensor, shape (num_docs, N)
        Word ids in ``[0, V)``, with ``V = vocab_size``.
    vocab_size : int
        ``V``; ``[MASK]`` is id ``V``.
    masking : Masking
        The corruption probabilities (default :data:`~topicmech.setting.BERT_MASKING`, BERT's
        0.15, 0.1, 0.1), validated when the :class:`~topicmech.setting.Masking` was built.
    seed : int or torch.Generator, keyword only
        Seeds the draws: selection uniforms, branch uniforms, random words, in that order.

    Returns
    -------
    inputs : LongTensor, shape (num_docs, N)
        Corrupted tokens, ids in ``[0, V]``.
    selected : BoolTensor, shape (num_docs, N)
        The positions in the loss.
    """
    vocab_size = check_positive_int("vocab_size", vocab_size)
    docs = check_docs(docs, vocab_size)
    if not isinstance(masking, Masking):
        raise ValueError(f"masking must be a topicmech.Masking, got {masking!r}")
    p_m, p_c, p_r = masking.mask_prob, masking.keep_prob, masking.random_prob
    gen = make_generator(seed)
    sel_u = torch.rand(docs.shape, generator=gen)                              # (B, N)
    branch = torch.rand(docs.shape, generator=gen)                             # (B, N)
    words = torch.randint(vocab_size, docs.shape, generator=gen)               # (B, N)
    return corrupt(docs, sel_u, branch, words, vocab_size, p_m, p_c, p_r)
