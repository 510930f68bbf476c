"""Topic-model data and BERT-style masking.

Book: chapter 1 (*Topic models as a sandbox*) introduces both generators and checks
their statistics; chapter 2 (*Masked language modelling and a one-layer transformer*)
introduces :func:`bert_mask`.

Notation (see the notation page): ``T = num_topics``, ``v = words_per_topic``,
``V = vocab_size = T * v`` real words, word ``w`` belongs to topic ``w // v``,
and token id ``V`` is ``[MASK]`` (``mask_id``), so there are ``D = V + 1`` token ids
(``num_tokens``). Documents are LongTensors of shape ``(num_docs, N)``.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .utils import check_masking, check_positive_int, make_generator

__all__ = ["TopicModel", "SimplifiedTopicModel", "LDATopicModel", "bert_mask", "check_docs"]


class TopicModel:
    """Common part of both generators: ``T`` disjoint topics, each uniform over its ``v`` words.

    Parameters
    ----------
    num_topics : int
        Number of topics ``T`` (>= 1).
    words_per_topic : int
        Words per topic ``v`` (>= 1).
    """

    def __init__(self, num_topics: int, words_per_topic: int) -> None:
        self.num_topics = check_positive_int("num_topics", num_topics)
        self.words_per_topic = check_positive_int("words_per_topic", words_per_topic)

    # ---- vocabulary -------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        """Number of real words ``V = T * v``."""
        return self.num_topics * self.words_per_topic

    @property
    def mask_id(self) -> int:
        """Token id of ``[MASK]`` (``= vocab_size``)."""
        return self.vocab_size

    @property
    def num_tokens(self) -> int:
        """Number of token ids ``D = V + 1`` (real words plus ``[MASK]``)."""
        return self.vocab_size + 1

    @property
    def topic_of_word(self) -> torch.Tensor:
        """LongTensor of shape ``(V,)``: the topic of each word, ``w // v``."""
        return torch.arange(self.vocab_size) // self.words_per_topic

    @property
    def topic_word_matrix(self) -> np.ndarray:
        """Array of shape ``(T, V)``: row ``t`` is topic ``t``'s word distribution."""
        phi = np.zeros((self.num_topics, self.vocab_size))
        for t in range(self.num_topics):
            phi[t, t * self.words_per_topic : (t + 1) * self.words_per_topic] = 1.0 / self.words_per_topic
        return phi

    # ---- sampling ---------------------------------------------------------------
    def sample_topic_weights(self, num_docs: int, gen: torch.Generator) -> torch.Tensor:
        """Per-document topic proportions, shape ``(num_docs, T)``; defined by subclasses."""
        raise NotImplementedError

    def sample(
        self,
        num_docs: int,
        doc_len: int,
        seed: int | torch.Generator = 0,
        *,
        return_topics: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Draw documents.

        Parameters
        ----------
        num_docs : int
            Number of documents.
        doc_len : int
            Tokens per document ``N``.
        seed : int or torch.Generator
            Seed (or generator) for reproducible draws.
        return_topics : bool
            Also return each token's topic.

        Returns
        -------
        docs : LongTensor, shape (num_docs, doc_len)
            Word ids in ``[0, V)``.
        topics : LongTensor, shape (num_docs, doc_len)
            Only if ``return_topics``: the topic each token was drawn from.
        """
        num_docs = check_positive_int("num_docs", num_docs)
        doc_len = check_positive_int("doc_len", doc_len)
        gen = make_generator(seed)
        theta = self.sample_topic_weights(num_docs, gen)                       # (num_docs, T)
        topics = torch.multinomial(theta, doc_len, replacement=True, generator=gen)  # (num_docs, N)
        offset = torch.randint(self.words_per_topic, (num_docs, doc_len), generator=gen)
        docs = topics * self.words_per_topic + offset                          # (num_docs, N)
        return (docs, topics) if return_topics else docs

    # ---- exact statistics (chapter 1 checks the sampler against these) ---------
    def expected_topic_cooccurrence(self) -> np.ndarray:
        """``E[theta theta^T]``, shape ``(T, T)``: probability that two distinct positions
        of one document draw topics ``s`` and ``t``."""
        raise NotImplementedError

    def expected_cooccurrence(self) -> np.ndarray:
        """Probability that two distinct positions of one document hold words ``a`` and ``b``.

        Returns
        -------
        P : ndarray, shape (V, V)
            ``P[a, b] = E[theta_{t(a)} theta_{t(b)}] / v**2``; it sums to 1 and is constant
            on the three orbits (same word, same topic, different topic).
        """
        topic = self.topic_of_word.numpy()
        return self.expected_topic_cooccurrence()[np.ix_(topic, topic)] / self.words_per_topic**2

    def word_marginal(self) -> np.ndarray:
        """Marginal word distribution, shape ``(V,)``: uniform, ``1 / V``, by symmetry."""
        return np.full(self.vocab_size, 1.0 / self.vocab_size)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._params().items())
        return f"{type(self).__name__}({args})"

    def _params(self) -> dict[str, object]:
        return {"num_topics": self.num_topics, "words_per_topic": self.words_per_topic}


class SimplifiedTopicModel(TopicModel):
    """The theory's topic model: each document mixes ``tau`` distinct topics equally.

    Each document picks ``topics_per_doc`` distinct topics uniformly at random; every
    token then draws one of those topics uniformly and a word uniformly from it.
    Given its topic set ``S``, a document's words are i.i.d. uniform over the
    ``tau * v`` words of ``S``.

    Parameters
    ----------
    num_topics, words_per_topic : int
        ``T`` and ``v``.
    topics_per_doc : int
        ``tau``, with ``1 <= tau <= T``.

    Examples
    --------
    >>> tm = SimplifiedTopicModel(num_topics=10, words_per_topic=10, topics_per_doc=2)
    >>> tm.sample(num_docs=3, doc_len=5, seed=0).shape
    torch.Size([3, 5])
    """

    def __init__(self, num_topics: int, words_per_topic: int, topics_per_doc: int) -> None:
        super().__init__(num_topics, words_per_topic)
        tau = check_positive_int("topics_per_doc", topics_per_doc)
        if tau > self.num_topics:
            raise ValueError(
                f"topics_per_doc must be <= num_topics={self.num_topics}, got {topics_per_doc!r}"
            )
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
        same = 1.0 / (T * tau)
        diff = (tau - 1) / (T * (T - 1) * tau) if T > 1 else 0.0
        return np.where(np.eye(T, dtype=bool), same, diff)

    def _params(self) -> dict[str, object]:
        return {**super()._params(), "topics_per_doc": self.topics_per_doc}


class LDATopicModel(TopicModel):
    """Latent Dirichlet allocation with disjoint uniform topics.

    Each document draws topic proportions ``theta ~ Dirichlet(alpha, ..., alpha)``;
    each token draws a topic from ``theta`` and a word uniformly from that topic.

    Parameters
    ----------
    num_topics, words_per_topic : int
        ``T`` and ``v``.
    alpha : float
        Symmetric Dirichlet concentration (> 0). Small ``alpha`` means few topics per
        document; the authors' released data use ``alpha = 0.1`` with ``T = 10``.
    """

    def __init__(self, num_topics: int, words_per_topic: int, alpha: float) -> None:
        super().__init__(num_topics, words_per_topic)
        if isinstance(alpha, (bool, str, bytes)):
            raise ValueError(f"alpha must be a positive float, got {alpha!r}")
        try:
            a = float(alpha)
        except (TypeError, ValueError):
            raise ValueError(f"alpha must be a positive float, got {alpha!r}") from None
        if not (a > 0 and math.isfinite(a)):
            raise ValueError(f"alpha must be a positive float, got {alpha!r}")
        self.alpha = a

    def sample_topic_weights(self, num_docs: int, gen: torch.Generator) -> torch.Tensor:
        # Dirichlet via normalised Gamma draws; torch's Gamma sampler takes no generator,
        # so draw the Gammas with NumPy seeded from the torch generator.
        np_rng = np.random.default_rng(int(torch.randint(2**62, (1,), generator=gen)))
        size = (num_docs, self.num_topics)
        if self.alpha >= 0.05:
            g = np_rng.gamma(self.alpha, size=size)                             # (num_docs, T)
            g = np.maximum(g, np.finfo(np.float64).tiny)  # guard 0/0; underflow here has prob < 1e-15
            theta = g / g.sum(axis=1, keepdims=True)
        else:
            # Below alpha ~ 0.01 whole rows of Gamma(alpha) draws underflow to 0, and clamping
            # them made theta *uniform*. Work in log space instead, with the exact identity
            # Gamma(a) = Gamma(a + 1) * U**(1/a) for U ~ Uniform(0, 1].
            log_g = np.log(np_rng.gamma(self.alpha + 1.0, size=size)) + np.log1p(-np_rng.random(size)) / self.alpha
            log_g -= log_g.max(axis=1, keepdims=True)
            theta = np.exp(log_g)
            theta /= theta.sum(axis=1, keepdims=True)
        return torch.from_numpy(theta).float()                                 # (num_docs, T)

    def expected_topic_cooccurrence(self) -> np.ndarray:
        T, a = self.num_topics, self.alpha
        a0 = T * a
        same = a * (a + 1) / (a0 * (a0 + 1))
        diff = a * a / (a0 * (a0 + 1))
        return np.where(np.eye(T, dtype=bool), same, diff)

    def _params(self) -> dict[str, object]:
        return {**super()._params(), "alpha": self.alpha}


def check_docs(docs: torch.Tensor, vocab_size: int, name: str = "docs") -> torch.Tensor:
    """Validate a batch of documents: a 2-D integer tensor with ids in ``[0, vocab_size)``."""
    if not isinstance(docs, torch.Tensor):
        try:
            docs = torch.as_tensor(np.asarray(docs))
        except (TypeError, ValueError, RuntimeError):
            raise ValueError(f"{name} must be an integer tensor of shape (num_docs, doc_len), "
                             f"got {type(docs).__name__}") from None
    if docs.dim() != 2:
        raise ValueError(f"{name} must have shape (num_docs, doc_len), got shape {tuple(docs.shape)}")
    if docs.dtype.is_floating_point or docs.dtype.is_complex or docs.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer token ids, got dtype {docs.dtype}")
    if docs.numel() and (int(docs.min()) < 0 or int(docs.max()) >= vocab_size):
        raise ValueError(
            f"{name} holds token ids outside [0, {vocab_size}): min {int(docs.min())}, max {int(docs.max())}"
        )
    return docs.long()


def bert_mask(
    docs: torch.Tensor,
    vocab_size: int,
    mask_prob: float = 0.15,
    keep_prob: float = 0.1,
    random_prob: float = 0.1,
    seed: int | torch.Generator = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT corruption: select positions, then replace with ``[MASK]``, a random word, or keep.

    Each position is selected independently with probability ``mask_prob``. A selected
    position shows ``[MASK]`` (id ``vocab_size``) with probability
    ``1 - keep_prob - random_prob``, a uniformly random real word with probability
    ``random_prob``, and its own word with probability ``keep_prob``.

    Parameters
    ----------
    docs : LongTensor, shape (num_docs, N)
        Word ids in ``[0, vocab_size)``.
    vocab_size : int
        ``V``; the ``[MASK]`` id is ``V``.
    mask_prob, keep_prob, random_prob : float
        ``p_m``, ``p_c``, ``p_r``.
    seed : int or torch.Generator
        Seed (or generator) for reproducible masks.

    Returns
    -------
    inputs : LongTensor, shape (num_docs, N)
        Corrupted tokens, ids in ``[0, V]``.
    selected : BoolTensor, shape (num_docs, N)
        Which positions are selected (the loss is computed only there).
    """
    vocab_size = check_positive_int("vocab_size", vocab_size)
    docs = check_docs(docs, vocab_size)
    p_m, p_c, p_r = check_masking(mask_prob, keep_prob, random_prob)
    gen = make_generator(seed)
    selected = torch.rand(docs.shape, generator=gen) < p_m                    # (B, N)
    branch = torch.rand(docs.shape, generator=gen)                            # (B, N)
    random_words = torch.randint(vocab_size, docs.shape, generator=gen)       # (B, N)
    inputs = docs.clone()
    to_mask = selected & (branch >= p_c + p_r)
    to_random = selected & (branch >= p_c) & (branch < p_c + p_r)
    inputs[to_mask] = vocab_size
    inputs[to_random] = random_words[to_random]
    return inputs, selected
