"""Real text, learned here (chapter 9): a masked language model trained from scratch on word-level
tokens of an LDA vocabulary, and its topic structure measured as it learns.

The tokens are the words LDA sees (:meth:`topicmech.corpus.Corpus.lda_tokens` within the fitted
dictionary, optionally cut to the most frequent words), so every LDA topic maps onto tokens exactly.
The model is the paper's: :class:`topicmech.OneLayerTransformer` with learned embeddings, learned
attention and value, a tied head with a logit bias, trained by :func:`topicmech.train.train`
(BERT corruption, cross-entropy, Adam). The measurements are the authors' (same-topic over
different-topic ratios of the embedding cosine, the embedding dot product and the attention weight,
over the most probable words of each topic), with two controls: the untrained model and a shuffle of
the topic labels matched on word frequency. The stage-1 theory is checked on the corpus's own
moments: the least-squares value matrix ``W* = C Sigma^-1`` under uniform attention.

Shapes: ``V`` words (token ids ``0 .. V-1``), ``[MASK]`` = ``V``, ``D = V + 1``; sequences of
``N = seq_len`` tokens; ``T`` LDA topics.
"""

from __future__ import annotations

import contextlib
import functools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from .corpus import (
    Corpus,
    FittedLDA,
    WordTopics,
    fit_lda,
    load_lee_corpus,
    load_newsgroups,
    load_wikipedia_sample,
    top_fraction_count,
)
from .data import bert_mask
from .model import OneLayerTransformer
from .pretrained import authors_metric, load_encoder, random_encoder
from .setting import BERT_MASKING, Masking, Setting, check_attend_to_masked
from .theory import (
    chunks,
    doc_counts,
    optimum_from_moments,
    population_loss,
    sigma_extremes,
    stage1_sgd_lr,
    value_block_coefficients,
)
from .theory.embeddings import tied_bias_from_moments
from .train import History, train
from .utils import check_float, check_positive_int, check_seed, numpy_rng, shift_seed, spawn_seeds
from .word_pairs import embedding_ratios, shares_topic

__all__ = [
    "WordDocuments", "word_documents", "topic_words", "frequency_matched_shuffle", "TopicRatioReader", "topic_ratios",
    "weight_norms", "TRACKED_KEYS", "WordMLM", "train_word_mlm", "StageTimes", "stage_times", "corpus_moments", "ValueOnText",
    "value_on_text", "topic_block_gap", "topic_block_correlation", "synthetic_gap",
    "embedding_optimum_on_text", "gram_cosines", "embedding_run", "load_text", "learning_run", "value_run", "RATIO_KEYS",
    "default_run", "minilm_run", "THRESHOLDS", "STAGE_GAP", "STAGE_RATIO", "STAGE_FACTOR", "WordEncoder",
    "train_word_encoder", "encoder_run",
]

#: The authors' two larger "ambiguity thresholds" (fractions of the LDA vocabulary kept per topic) that
#: :func:`learning_run` also measures, without and with overlap (their smallest keeps fewer than three words).
THRESHOLDS: tuple[float, ...] = (0.001, 0.002)
#: The three ratios of the authors' metric that :func:`topic_ratios` returns first.
RATIO_KEYS: tuple[str, ...] = ("embedding_cosine", "embedding_dot", "attention")
#: What :func:`train_word_mlm` tracks in its ``"ratios"`` probe, in order the ratios and the cosine gap
#: (same-topic minus different-topic mean cosine, which, unlike the ratio of two means near 0, is near 0 at
#: initialisation).
TRACKED_KEYS: tuple[str, ...] = (*RATIO_KEYS, "cosine_gap")


# ---- the documents ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class WordDocuments:
    """Sequences of word ids over ``words``: ``tokens`` (LongTensor ``(num_sequences, seq_len)``, ids in
    ``0 .. V-1``), ``counts`` (each word's occurrences in ``tokens``, shape ``(V,)``), ``lda_ids`` (each word's
    id in the LDA dictionary) and the corpus name."""

    tokens: torch.Tensor
    words: tuple[str, ...]
    counts: np.ndarray
    lda_ids: np.ndarray
    corpus_name: str = ""

    @property
    def vocab_size(self) -> int:
        """``V``."""
        return len(self.words)

    @property
    def num_tokens(self) -> int:
        """``D = V + 1`` (the words, then ``[MASK]``)."""
        return len(self.words) + 1

    @property
    def seq_len(self) -> int:
        """``N``."""
        return int(self.tokens.shape[1])

    def __len__(self) -> int:
        return int(self.tokens.shape[0])


def word_documents(corpus: Corpus, lda: FittedLDA, *, seq_len: int = 64, max_words: int | None = None) -> WordDocuments:
    """The ``corpus``'s LDA tokens within ``lda``'s dictionary as word ids, cut into sequences of ``seq_len``.

    The default of 64 tokens keeps most of a corpus of short documents (news articles of a few hundred
    words keep about 100 LDA tokens each); the chapter's Wikipedia articles are long enough for 128.

    Each document's tokens outside the dictionary (or outside its ``max_words`` most frequent words, ties
    by dictionary order) are dropped; the rest is cut into consecutive sequences of ``seq_len`` tokens that
    never cross a document, the remainder of each document dropped. Word ids follow the dictionary order
    of the kept words. ``ValueError`` if no sequence is left.
    """
    if not isinstance(corpus, Corpus):
        raise ValueError(f"corpus must be a Corpus (see topicmech.corpus.corpus_from_texts), got {type(corpus).__name__}")
    if not isinstance(lda, FittedLDA):
        raise ValueError(f"lda must be a FittedLDA (see topicmech.corpus.fit_lda), got {type(lda).__name__}")
    N = check_positive_int("seq_len", seq_len)
    vocab = lda.vocabulary
    index = {w: i for i, w in enumerate(vocab)}
    docs = [np.asarray([index[w] for w in doc if w in index], dtype=np.int64) for doc in corpus.lda_tokens()]
    freq = np.bincount(np.concatenate(docs + [np.zeros(0, np.int64)]), minlength=len(vocab))
    if max_words is None:
        keep = np.flatnonzero(freq > 0)
    else:
        k = check_positive_int("max_words", max_words)
        keep = np.sort(np.argsort(-freq, kind="stable")[:k])
        keep = keep[freq[keep] > 0]
    if keep.size < 2:
        raise ValueError(f"corpus {corpus.name!r} has fewer than two words of the LDA vocabulary")
    remap = np.full(len(vocab), -1, dtype=np.int64)
    remap[keep] = np.arange(keep.size)
    rows = []
    for d in docs:
        ids = remap[d]
        ids = ids[ids >= 0]
        n = ids.size // N
        if n:
            rows.append(ids[: n * N].reshape(n, N))
    if not rows:
        raise ValueError(f"no document of corpus {corpus.name!r} has seq_len={N} tokens in the LDA vocabulary; "
                         "lower seq_len")
    tokens = torch.from_numpy(np.concatenate(rows))
    counts = np.bincount(tokens.reshape(-1).numpy(), minlength=keep.size).astype(np.int64)
    return WordDocuments(tokens, tuple(vocab[int(j)] for j in keep), counts, keep, corpus.name)


def topic_words(documents: WordDocuments, lda: FittedLDA, *, per_topic: int | None = None, fraction: float = 0.002,
                overlap: bool = False) -> WordTopics:
    """The authors' word selection within the documents' words: each topic's ``per_topic`` most probable
    words by ``p(word | topic)`` (default :func:`~topicmech.corpus.top_fraction_count` of ``fraction`` of the
    LDA vocabulary: 0.2 %, their largest threshold, and at
    least three); a word chosen by several topics keeps them all with
    ``overlap``, else is dropped."""
    if per_topic is None:                       # at least three words a topic, so that same-topic pairs exist
        per_topic = max(3, top_fraction_count(fraction, len(lda.vocabulary)))
    k = min(check_positive_int("per_topic", per_topic), documents.vocab_size)
    tw = lda.topic_word()[:, documents.lda_ids]                                   # (T, V)
    sets: dict[str, set[int]] = {}
    for t, row in enumerate(np.argsort(-tw, axis=1, kind="stable")[:, :k]):
        for j in row:
            sets.setdefault(documents.words[int(j)], set()).add(t)
    sets = {w: s for w, s in sets.items() if overlap or len(s) == 1}
    if not sets:
        raise ValueError(f"no word left: with per_topic={k} every selected word belongs to several topics")
    return WordTopics(lda.num_topics, {w: frozenset(s) for w, s in sets.items()})


def frequency_matched_shuffle(word_topics: WordTopics, documents: WordDocuments, *, bins: int = 5,
                              seed: int = 0) -> WordTopics:
    """A null control: the topic sets dealt again at random *within* ``bins`` bins of equal size by word
    frequency in ``documents`` (embedding similarity and LDA topics both correlate with frequency, so a plain
    shuffle would not be a fair null)."""
    bins = check_positive_int("bins", bins)
    counts = dict(zip(documents.words, documents.counts.tolist()))
    words = [w for w in word_topics.words if w in counts]
    if len(words) < 2:
        raise ValueError("word_topics shares fewer than two words with the documents")
    order = sorted(words, key=lambda w: (counts[w], w))
    rng = numpy_rng(seed)
    out: dict[str, frozenset[int]] = {}
    for group in np.array_split(np.asarray(order, dtype=object), min(bins, len(order))):
        perm = rng.permutation(len(group))
        out.update({str(w): word_topics.get(str(group[j])) for w, j in zip(group, perm)})
    return WordTopics(word_topics.num_topics, out)


# ---- the measurements -------------------------------------------------------------------------------------------
class TopicRatioReader:
    """The authors' metric on a fixed probe batch, as a function of the model (built once, read often).

    ``embedding_cosine`` and ``embedding_dot`` are same-topic over different-topic means over ordered
    pairs of distinct selected words (:func:`topicmech.word_pairs.embedding_ratios`); ``attention`` is the
    mean attention weight from a selected word to a different selected word of the same topic over that to
    one of another topic, on ``num_sequences`` sequences drawn by ``seed``, uncorrupted (no position is
    selected, so both key conventions agree), pairs under ``min_distance`` positions apart left out. Two
    copies of one word (and a position with itself) count in neither mean, whatever the topic labels.
    """

    def __init__(self, documents: WordDocuments, word_topics: WordTopics, *, num_sequences: int = 64,
                 min_distance: int = 0, seed: int = 0) -> None:
        if not isinstance(documents, WordDocuments):
            raise ValueError(f"documents must be WordDocuments (see word_documents), got {type(documents).__name__}")
        if not isinstance(word_topics, WordTopics):
            raise ValueError(f"word_topics must be a WordTopics, got {type(word_topics).__name__}")
        if isinstance(min_distance, bool) or not isinstance(min_distance, (int, np.integer)) or min_distance < 0:
            raise ValueError(f"min_distance must be a non-negative int, got {min_distance!r}")
        index = {w: i for i, w in enumerate(documents.words)}
        words = [w for w in word_topics.words if w in index]
        if len(words) < 3:
            raise ValueError(f"need at least three selected words among the documents' words, got {len(words)}")
        self.words = tuple(words)
        self.ids = torch.as_tensor([index[w] for w in words])
        self.membership = word_topics.membership(words)                                 # (n, T)
        n = check_positive_int("num_sequences", num_sequences)
        pick = np.sort(numpy_rng(seed).choice(len(documents), size=min(n, len(documents)), replace=False))
        self.inputs = documents.tokens[torch.as_tensor(pick)]                           # (B, N)
        M = np.zeros((documents.vocab_size, word_topics.num_topics), dtype=np.float32)
        M[self.ids.numpy()] = self.membership
        Mt = torch.from_numpy(M)[self.inputs]                                            # (B, N, T)
        has = Mt.sum(-1) > 0                                                             # (B, N)
        share = (Mt @ Mt.transpose(1, 2)) > 0                                            # (B, query, key)
        both = has[:, :, None] & has[:, None, :]
        distinct = self.inputs[:, :, None] != self.inputs[:, None, :]
        pos = torch.arange(self.inputs.shape[1])
        far = (pos[:, None] - pos[None, :]).abs() >= min_distance
        same, diff = both & share & distinct & far, both & ~share & far
        self.num_pairs = (int(same.sum()), int(diff.sum()))
        masks = torch.stack([same, diff]).flatten(1).to(torch.float64)                  # (2, B N N)
        self._weights = masks / masks.sum(1, keepdim=True).clamp_min(1.0)

    def attention(self, model: OneLayerTransformer | WordEncoder) -> tuple[float, float]:
        """Mean attention over same-topic and over different-topic pairs (nan without pairs); for a
        :class:`WordEncoder`, of its pattern averaged over layers and heads."""
        with torch.no_grad():
            return self._pair_means(model.attention_pattern(self.inputs))               # (B, query, key)

    def _pair_means(self, pattern: torch.Tensor) -> tuple[float, float]:
        same, diff = (self._weights @ pattern.reshape(-1).to(torch.float64)).tolist()
        return (same if self.num_pairs[0] else math.nan, diff if self.num_pairs[1] else math.nan)

    def __call__(self, model: OneLayerTransformer | WordEncoder) -> dict[str, float]:
        X = _word_vectors(model)[self.ids].to(torch.float64).numpy()                     # (n, d)
        er = {k: math.nan for k in ("cosine_ratio", "dot_ratio", "cosine_same", "cosine_diff", "dot_same", "dot_diff")}
        with contextlib.suppress(ValueError):                                            # a relation without pairs
            er = embedding_ratios(X, self.membership)
        layers: dict[str, float] = {}
        if isinstance(model, WordEncoder):                     # one forward pass for every layer and the mean
            with torch.no_grad():
                patterns = model.layer_patterns(self.inputs)                             # (L, B, query, key)
            a_same, a_diff = self._pair_means(patterns.mean(0))
            layers = {f"attention_layer_{i}": _ratio(*self._pair_means(p)) for i, p in enumerate(patterns)}
        else:
            a_same, a_diff = self.attention(model)
        return {"embedding_cosine": float(er["cosine_ratio"]), "embedding_dot": float(er["dot_ratio"]),
                "attention": _ratio(a_same, a_diff), "cosine_gap": float(er["cosine_same"] - er["cosine_diff"]),
                "cosine_same": float(er["cosine_same"]), "cosine_diff": float(er["cosine_diff"]),
                "dot_same": float(er["dot_same"]), "dot_diff": float(er["dot_diff"]), "attention_same": a_same,
                "attention_diff": a_diff, "num_words": len(self.words), "attention_pairs_same": self.num_pairs[0],
                "attention_pairs_diff": self.num_pairs[1], **layers}


def _ratio(same: float, diff: float) -> float:
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.float64(same) / np.float64(diff))


def _word_vectors(model: nn.Module) -> torch.Tensor:
    """The input token vectors, one row per token id, shape ``(D, d)``, detached: ``W_E^T`` of a
    one-layer model with learned embeddings, the word-embedding table of a :class:`WordEncoder`."""
    if isinstance(model, WordEncoder):
        return model.word_vectors()
    if not isinstance(model, OneLayerTransformer) or model.embedding != "learned":
        raise ValueError(f"model must be a OneLayerTransformer with learned embeddings or a WordEncoder, "
                         f"got {model!r}")
    with torch.no_grad():
        return model.W_E.T.detach().cpu()


def topic_ratios(model: OneLayerTransformer | WordEncoder | WordMLM, documents: WordDocuments, lda: FittedLDA | None = None, *,
                 word_topics: WordTopics | None = None, per_topic: int | None = None, fraction: float = 0.002,
                 overlap: bool = False, num_sequences: int = 64, min_distance: int = 0,
                 seed: int = 0) -> dict[str, float]:
    """The authors' same/different-topic ratios of a word-level model (keys :data:`RATIO_KEYS`, then the means
    and counts behind them; see :class:`TopicRatioReader`), over :func:`topic_words` of ``lda`` or the given
    ``word_topics`` (a control such as :func:`frequency_matched_shuffle`)."""
    if word_topics is None:
        if lda is None:
            raise ValueError("topic_ratios needs lda (to select topic words) or word_topics")
        word_topics = topic_words(documents, lda, per_topic=per_topic, fraction=fraction, overlap=overlap)
    net = model.model if isinstance(model, WordMLM) else model
    return TopicRatioReader(documents, word_topics, num_sequences=num_sequences, min_distance=min_distance,
                            seed=seed)(net)


def weight_norms(model: OneLayerTransformer) -> dict[str, float]:
    """Frobenius norms ``{"W_K", "W_Q", "W_V", "W_E"}`` of the model's matrices."""
    with torch.no_grad():
        return {name: float(torch.linalg.matrix_norm(getattr(model, name))) for name in ("W_K", "W_Q", "W_V", "W_E")}


# ---- training ---------------------------------------------------------------------------------------------------
@dataclass
class WordMLM:
    """A trained word-level masked language model: the ``model``, the ``words`` of its token ids, the training
    ``history`` (probes ``"norm_W_K"``, ``"norm_W_Q"``, ``"norm_W_V"``, ``"norm_W_E"`` of the one-layer model, and,
    with word topics, ``"ratios"``, the :data:`TRACKED_KEYS` in order, recorded at ``history.probe_step``) and the arguments it was trained with."""

    model: OneLayerTransformer | WordEncoder
    words: tuple[str, ...]
    history: History
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def embeddings(self) -> np.ndarray:
        """The input word embeddings without ``[MASK]`` (``W_E^T`` of the one-layer model), shape ``(V, d)``,
        row ``i`` for ``words[i]``."""
        return _word_vectors(self.model)[: len(self.words)].numpy().copy()

    @property
    def steps(self) -> np.ndarray:
        """The steps at which the probes were recorded (0 = before training)."""
        return np.asarray(self.history.probe_step)

    def probe(self, name: str) -> np.ndarray:
        """One tracked probe against :attr:`steps` (a name of :data:`TRACKED_KEYS` reads its column of ``"ratios"``)."""
        if name in TRACKED_KEYS:
            return self.history.probe("ratios")[:, TRACKED_KEYS.index(name)]
        return self.history.probe(name)


def train_word_mlm(documents: WordDocuments, *, attend_to_masked: bool, steps: int = 1500, seed: int = 0,
                   d_model: int = 64, lr: float = 3e-3, batch_size: int = 32, init_scale: float = 0.02,
                   masking: Masking = BERT_MASKING, word_topics: WordTopics | None = None,
                   probe_every: int | None = None, num_probe_sequences: int = 64,
                   progress: bool = False) -> WordMLM:
    """Train the paper's one-layer, one-head model from scratch on ``documents`` by masked language modelling.

    Learned embeddings ``W_E`` (``d_model`` by ``D``), key, query and value, a tied head ``W_E^T`` with a
    logit bias, all initialised with standard deviation ``init_scale``; BERT corruption (``masking``),
    cross-entropy at the selected positions, Adam at ``lr``, ``batch_size`` sequences a step drawn with
    replacement, through :func:`topicmech.train.train` (whose fast path computes logits at the selected
    positions only). ``steps=0`` returns the untrained model. The weight norms, and with ``word_topics`` the
    ratios of :class:`TopicRatioReader`, are recorded every ``probe_every`` steps (default ``steps // 50``).
    ``seed`` seeds the initialisation and the data stream (two spawned seeds).
    """
    if not isinstance(documents, WordDocuments):
        raise ValueError(f"documents must be WordDocuments (see word_documents), got {type(documents).__name__}")
    attend_to_masked = check_attend_to_masked(attend_to_masked)
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 0:
        raise ValueError(f"steps must be a non-negative int, got {steps!r}")
    init_seed, data_seed = spawn_seeds(check_seed(seed), 2)
    model = OneLayerTransformer(documents.num_tokens, check_positive_int("d_model", d_model), embedding="learned",
                                attention="learned", value="learned", head="tied", bias=True,
                                attend_to_masked=attend_to_masked,
                                init_scale=check_float("init_scale", init_scale), seed=init_seed)
    probes: dict[str, Any] = {f"norm_{k}": functools.partial(_norm, name=k) for k in ("W_K", "W_Q", "W_V", "W_E")}
    return _train_run(model, documents, attend_to_masked=attend_to_masked, steps=steps, seed=seed,
                      data_seed=data_seed, architecture=dict(d_model=int(d_model)), lr=lr, batch_size=batch_size,
                      init_scale=init_scale, masking=masking, word_topics=word_topics, probes=probes,
                      probe_every=probe_every, num_probe_sequences=num_probe_sequences, progress=progress)


def _train_run(model: OneLayerTransformer | WordEncoder, documents: WordDocuments, *, attend_to_masked: bool,
               steps: int, seed: int, data_seed: int, architecture: dict[str, int], lr: float, batch_size: int,
               init_scale: float, masking: Masking, word_topics: WordTopics | None, probes: dict[str, Any],
               probe_every: int | None, num_probe_sequences: int, progress: bool) -> WordMLM:
    """The tail both trainers share: the ratio probe (with ``word_topics``), the config, then
    :func:`topicmech.train.train` from ``data_seed`` (or, at ``steps=0``, the probes of the untrained model)."""
    probes = dict(probes)
    if word_topics is not None:
        reader = TopicRatioReader(documents, word_topics, num_sequences=num_probe_sequences, seed=seed)

        def ratios(m: OneLayerTransformer | WordEncoder) -> np.ndarray:
            r = reader(m)
            return np.asarray([r[k] for k in TRACKED_KEYS])

        probes["ratios"] = ratios
    config = dict(attend_to_masked=attend_to_masked, steps=int(steps), seed=int(seed), **architecture, lr=float(lr),
                  batch_size=int(batch_size), init_scale=float(init_scale), corpus=documents.corpus_name,
                  vocab_size=documents.vocab_size, seq_len=documents.seq_len)
    if steps == 0:
        history = History(probe_step=[0], probes={k: [fn(model)] for k, fn in probes.items()})
    else:
        history = train(model, documents.tokens, steps=int(steps), lr=check_float("lr", lr), optimizer="adam",
                        loss="cross_entropy", batch_size=check_positive_int("batch_size", batch_size), masking=masking,
                        seed=data_seed, probes=probes, probe_every=probe_every, progress=progress)
    return WordMLM(model, documents.words, history, config)


def _norm(model: OneLayerTransformer, name: str) -> float:
    return float(torch.linalg.matrix_norm(getattr(model, name).detach()))


# ---- when does each part learn ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class StageTimes:
    """When each part learned: ``embedding``, the first probe step from which the embedding cosine gap stays at
    or above ``embedding_gap``; ``attention``, the first from which the attention ratio stays at or above
    ``attention_ratio`` (nan if never). The rule's verdict :attr:`two_stages`."""

    embedding: float
    attention: float
    factor: float
    embedding_gap: float
    attention_ratio: float

    @property
    def two_stages(self) -> bool:
        """Whether two stages appear, that is both thresholds are reached, the attention one at least ``factor``
        times later (counting the embedding crossing as at least one step)."""
        return bool(np.isfinite(self.embedding) and np.isfinite(self.attention)
                    and self.attention >= self.factor * max(self.embedding, 1.0))


#: Default of the stage rule (ours) for the embedding crossing, a same-minus-different topic cosine gap.
STAGE_GAP: float = 0.1
#: Default of the stage rule (ours) for the attention crossing, a same-over-different topic attention ratio.
STAGE_RATIO: float = 1.2
#: Default of the stage rule (ours) for the factor by which the attention crossing comes later.
STAGE_FACTOR: float = 2.0


def stage_times(run: WordMLM, *, embedding_gap: float = STAGE_GAP, attention_ratio: float = STAGE_RATIO,
                factor: float = STAGE_FACTOR) -> StageTimes:
    """The stage rule on a run's tracked probes (see :class:`StageTimes`). The embedding side reads the cosine
    gap, not the ratio: at initialisation both means are near 0 and their ratio is noise."""
    steps = run.steps

    def first_lasting(values: np.ndarray, thr: float) -> float:
        below = ~(np.asarray(values, dtype=float) >= thr)
        if below[-1]:
            return math.nan
        last_below = np.flatnonzero(below)
        return float(steps[last_below[-1] + 1] if last_below.size else steps[0])

    gap, ratio = check_float("embedding_gap", embedding_gap), check_float("attention_ratio", attention_ratio)
    return StageTimes(first_lasting(run.probe("cosine_gap"), gap), first_lasting(run.probe("attention"), ratio),
                      check_float("factor", factor), gap, ratio)


# ---- the stage-1 theory on the corpus's moments -----------------------------------------------------------------
def corpus_moments(documents: WordDocuments, *, attend_to_masked: bool, passes: int = 20, seed: int = 0,
                   masking: Masking = BERT_MASKING) -> tuple[np.ndarray, np.ndarray]:
    """The corpus's own stage-1 moments under uniform attention, one-hot inputs: ``Sigma = E[n xbar xbar^T] / E[n]``
    and ``C = E[y xbar^T]`` per selected position, shape ``(D, D)`` each, over ``passes`` independent BERT
    corruptions of every sequence (the distribution :func:`topicmech.train.train` samples from)."""
    attend_to_masked = check_attend_to_masked(attend_to_masked)
    D = documents.num_tokens
    Sxx, Cyx, total = np.zeros((D, D)), np.zeros((D, D)), 0.0
    y_all = documents.tokens.numpy()
    for pass_seed in spawn_seeds(check_seed(seed), check_positive_int("passes", passes)):
        inputs, selected = bert_mask(documents.tokens, D - 1, masking, seed=pass_seed)
        for xs, ss, ys, att, n_att in chunks(inputs.numpy(), selected.numpy(), y_all, D, attend_to_masked):
            n_sel = (ss & (n_att > 0)[:, None]).sum(axis=1).astype(np.float64)
            xbar = doc_counts(xs, att, D) / np.maximum(n_att, 1)[:, None]                # (n, D)
            Sxx += (xbar * n_sel[:, None]).T @ xbar
            Cyx += doc_counts(ys, ss & (n_att > 0)[:, None], D).T @ xbar
            total += float(n_sel.sum())
    if total == 0:
        raise ValueError("no selected position with a visible key: use longer sequences")
    return Sxx / total, Cyx / total


def topic_block_gap(matrix: np.ndarray, documents: WordDocuments, word_topics: WordTopics) -> dict[str, float]:
    """Mean entries of a word-by-word matrix over the selected words ``word_topics`` (one topic each):
    ``diag``, ``same_topic`` (distinct words of one topic), ``diff_topic`` and ``gap = same - diff``."""
    index = {w: i for i, w in enumerate(documents.words)}
    words = [w for w in word_topics.words if w in index]
    ids = np.asarray([index[w] for w in words])
    W = np.asarray(matrix, dtype=np.float64)[np.ix_(ids, ids)]
    share = shares_topic(word_topics.membership(words))
    eye = np.eye(len(ids), dtype=bool)
    same, diff = float(W[share & ~eye].mean()), float(W[~share].mean())
    return {"diag": float(W[eye].mean()), "same_topic": same, "diff_topic": diff, "gap": same - diff}


def topic_block_correlation(trained: np.ndarray, reference: np.ndarray, documents: WordDocuments,
                            word_topics: WordTopics) -> float:
    """Pearson correlation of two word-by-word matrices over the off-diagonal entries among the selected words
    ``word_topics`` (the rows and columns of the block figure)."""
    index = {w: i for i, w in enumerate(documents.words)}
    ids = np.asarray([index[w] for w in word_topics.words if w in index])
    if ids.size < 2:
        raise ValueError(f"need at least two selected words among the documents' words, got {ids.size}")
    off = ~np.eye(ids.size, dtype=bool)
    a, b = (np.asarray(M, dtype=np.float64)[np.ix_(ids, ids)][off] for M in (trained, reference))
    return float(np.corrcoef(a, b)[0, 1])


@dataclass
class ValueOnText:
    """:func:`value_on_text`: the moments, the optimum ``W_star``, the trained ``W_trained``, the population
    losses (``loss_zero`` at 0, ``loss_star``, ``loss_trained``), ``excess`` = (trained - star) / (zero - star)
    and the learning rate."""

    Sigma: np.ndarray
    C: np.ndarray
    W_star: np.ndarray
    W_trained: np.ndarray
    loss_zero: float
    loss_star: float
    loss_trained: float
    lr: float
    attend_to_masked: bool

    @property
    def excess(self) -> float:
        return (self.loss_trained - self.loss_star) / (self.loss_zero - self.loss_star)

    @property
    def relative_error(self) -> float:
        """``||W_trained - W*||_F / ||W*||_F`` over the word block (the [MASK] row and column aside)."""
        a, b = self.W_trained[:-1, :-1], self.W_star[:-1, :-1]
        return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def value_on_text(documents: WordDocuments, *, attend_to_masked: bool, steps: int = 3000, seed: int = 0,
                  passes: int = 20, batch_size: int = 64, l2: float = 0.0,
                  masking: Masking = BERT_MASKING) -> ValueOnText:
    """Stage 1 on real text: ``W* = C Sigma^-1`` from :func:`corpus_moments`, and ``W^V`` trained to it under
    frozen uniform attention (one-hot inputs, identity head, squared loss, SGD from 0 at
    :func:`~topicmech.theory.stage1_sgd_lr` of the moments' top eigenvalue for half the steps, then a quarter at
    a fourth of it and a quarter at a sixteenth) by
    :func:`topicmech.train.train`; with ``l2 > 0`` both carry the penalty ``l2 ||W||_F^2`` (then
    ``W* = C (Sigma + l2 I)^-1``, unique and better conditioned) and the losses include it."""
    attend_to_masked = check_attend_to_masked(attend_to_masked)
    moment_seed, data_seed = spawn_seeds(check_seed(seed), 2)
    Sigma, C = corpus_moments(documents, attend_to_masked=attend_to_masked, passes=passes, seed=moment_seed,
                              masking=masking)
    l2 = check_float("l2", l2, positive=False)
    W_star = optimum_from_moments(Sigma, C, attend_to_masked=attend_to_masked, l2=l2)
    lr = stage1_sgd_lr(sigma_extremes(Sigma, attend_to_masked)[1], loss="squared", l2=l2)
    model = OneLayerTransformer(documents.num_tokens, attention="uniform", value="learned",
                                attend_to_masked=attend_to_masked, init_scale=0.0)
    steps = check_positive_int("steps", steps)
    first = max(1, steps // 2)                                  # then a quarter at lr / 4, a quarter at lr / 16
    phases = [(n, r) for n, r in ((first, lr), ((steps - first) // 2, lr / 4),
                                  (steps - first - (steps - first) // 2, lr / 16)) if n > 0]
    train(model, documents.tokens, phases=phases, loss="squared",
          batch_size=check_positive_int("batch_size", batch_size), masking=masking, seed=data_seed, l2=l2)
    W = model.W_V.detach().to(torch.float64).numpy().copy()
    losses = [population_loss(M, Sigma, C) + l2 * float(np.sum(M * M)) for M in (np.zeros_like(W), W_star, W)]
    return ValueOnText(Sigma, C, W_star, W, *losses, lr=lr, attend_to_masked=attend_to_masked)


def synthetic_gap(documents: WordDocuments, word_topics: WordTopics, *, attend_to_masked: bool) -> float:
    """The same-topic minus different-topic entry of the synthetic stage-1 optimum with as many topics and words
    per topic as ``word_topics`` selects, ``tau = 2`` topics per document and the documents' length."""
    T = len({t for w in word_topics.words for t in word_topics.get(w)})
    v = max(2, round(len(word_topics) / max(T, 1)))
    b = value_block_coefficients(Setting(max(T, 2), v, 2, documents.seq_len, attend_to_masked=attend_to_masked))
    return float(b.same_topic - b.diff_topic)


def embedding_optimum_on_text(documents: WordDocuments, *, attend_to_masked: bool, d: int | None = None,
                              passes: int = 10, seed: int = 0, l2: float = 1e-5, steps: int = 200,
                              masking: Masking = BERT_MASKING) -> np.ndarray:
    """The optimum of the authors' embedding set-up on the corpus's own moments: attention frozen uniform,
    ``W^V = I``, a tied head ``W_E^T`` with a bias, only the embeddings trained; with the squared loss and rank
    ``<= d`` (default ``D``, full rank), both our choices (the authors state neither the loss nor a width), the
    optimal Gram matrix ``M = W_E^T W_E``, shape ``(D, D)``, rows and columns the word ids, then
    ``[MASK]``. :func:`corpus_moments` (``passes`` BERT corruptions drawn by ``seed``) into
    :func:`topicmech.theory.tied_bias_from_moments` (ridge ``l2 ||M||_F^2``, at most ``steps``
    L-BFGS iterations). ``M`` is determined up to ``c 1 1^T``, which the bias absorbs: read differences of its
    entries, or the cosines of a representative (:func:`gram_cosines`)."""
    Sigma, C = corpus_moments(documents, attend_to_masked=attend_to_masked, passes=passes, seed=seed,
                              masking=masking)
    M, _ = tied_bias_from_moments(Sigma, C, d=d, l2=check_float("l2", l2, positive=False),
                                  steps=check_positive_int("steps", steps), seed=seed)
    return M


def gram_cosines(gram: np.ndarray) -> np.ndarray:
    """The cosine matrix ``G_ij / sqrt(G_ii G_jj)`` of a Gram matrix (of embeddings ``X``: ``X X^T``); 0 in the
    rows and columns of zero vectors."""
    G = np.asarray(gram, dtype=np.float64)
    if G.ndim != 2 or G.shape[0] != G.shape[1]:
        raise ValueError(f"gram must be a square matrix, got shape {G.shape}")
    norm = np.sqrt(np.clip(np.diag(G), 0.0, None))
    inv = np.divide(1.0, norm, out=np.zeros_like(norm), where=norm > 0)
    return G * inv[:, None] * inv[None, :]


# ---- the runs the chapter and the stored results share ----------------------------------------------------------
@functools.lru_cache(maxsize=4)
def load_text(corpus: str = "wikipedia", *, num_topics: int = 20, passes: int = 2, lda_seed: int = 0,
              seq_len: int = 128, max_words: int | None = None) -> tuple[WordDocuments, FittedLDA]:
    """The chapter's documents and topics, cached per process: ``"wikipedia"``
    (:func:`~topicmech.corpus.load_wikipedia_sample`) or ``"lee"`` (:func:`~topicmech.corpus.load_lee_corpus`), LDA
    of ``num_topics`` topics for ``passes`` passes (seed ``lda_seed``), :func:`word_documents`."""
    text, lda = _text_and_lda(corpus, num_topics, passes, lda_seed)
    return word_documents(text, lda, seq_len=seq_len, max_words=max_words), lda


@functools.lru_cache(maxsize=2)
def _text_and_lda(corpus: str, num_topics: int, passes: int, lda_seed: int) -> tuple[Corpus, FittedLDA]:
    """The corpus and its LDA fit, cached apart from the vocabulary cut (one fit serves every cut)."""
    loaders = {"wikipedia": load_wikipedia_sample, "lee": load_lee_corpus}
    if corpus not in loaders:
        raise ValueError(f"corpus must be one of {tuple(loaders)}, got {corpus!r}")
    text = loaders[corpus]()
    return text, fit_lda(text, num_topics=num_topics, passes=passes, seed=lda_seed)


def learning_run(seed: int, *, attend_to_masked: bool, corpus: str = "wikipedia", steps: int = 1500,
                 max_words: int | None = 1000, seq_len: int = 128, per_topic: int | None = None,
                 shuffle_bins: int = 5, lr: float = 3e-3, init_scale: float = 0.02,
                 probe_every: int | None = None, progress: bool = False) -> dict[str, Any]:
    """One seed of the chapter's learning run, as ``{metric: number}`` for :func:`topicmech.results.store`: the
    final and untrained ratios, the frequency-matched control, the stage times, the final ratios at each of
    :data:`THRESHOLDS` without and with overlap (keys ``"disjoint_0.001_attention"`` and so on) and the curves
    (``progress``: a progress bar)."""
    docs, lda = load_text(corpus, seq_len=seq_len, max_words=max_words)
    wt = topic_words(docs, lda, per_topic=per_topic)
    run = train_word_mlm(docs, attend_to_masked=attend_to_masked, steps=steps, seed=seed, word_topics=wt, lr=lr,
                         init_scale=init_scale, probe_every=probe_every, progress=progress)
    untrained = train_word_mlm(docs, attend_to_masked=attend_to_masked, steps=0, seed=seed)
    final = topic_ratios(run, docs, word_topics=wt, seed=seed + 1)
    null = topic_ratios(run, docs, word_topics=frequency_matched_shuffle(wt, docs, bins=shuffle_bins, seed=seed),
                        seed=seed + 1)
    far = topic_ratios(run, docs, word_topics=wt, seed=seed + 1, min_distance=16)
    st = stage_times(run)
    out: dict[str, Any] = {f"final_{k}": final[k] for k in TRACKED_KEYS}
    untrained_ratios = topic_ratios(untrained, docs, word_topics=wt, seed=seed + 1)
    out.update({f"untrained_{k}": untrained_ratios[k] for k in TRACKED_KEYS})
    out.update({f"shuffled_{k}": null[k] for k in TRACKED_KEYS})
    out.update(far_attention=far["attention"], **_crossings(st, steps),
               two_stages=bool(st.two_stages), num_words=final["num_words"], vocab_size=docs.vocab_size,
               num_sequences=len(docs), lda_vocab_size=len(lda.vocabulary))
    for fraction in THRESHOLDS:                                  # the authors' other selections
        for ov in (False, True):
            sel = topic_words(docs, lda, fraction=fraction, overlap=ov)
            r = topic_ratios(run, docs, word_topics=sel, seed=seed + 1)
            tag = f"{'overlap' if ov else 'disjoint'}_{fraction:g}"
            out.update({f"{tag}_{k}": r[k] for k in RATIO_KEYS})
    out["curve_step"] = run.steps.tolist()
    for k in (*TRACKED_KEYS, "norm_W_K", "norm_W_Q", "norm_W_V"):
        out[f"curve_{k}"] = [float(x) for x in run.probe(k)]
    return out


def _crossings(st: StageTimes, steps: int) -> dict[str, Any]:
    """The stage times for a stored row: a threshold never reached counts as ``steps + 1`` (after the end), with
    ``embedding_crossed`` / ``attention_crossed`` saying which (stored intervals need finite numbers)."""
    out: dict[str, Any] = {}
    for name, t in (("embedding", st.embedding), ("attention", st.attention)):
        out[f"t_{name}"] = float(t) if np.isfinite(t) else float(steps + 1)
        out[f"{name}_crossed"] = bool(np.isfinite(t))
    return out


def value_run(seed: int, *, attend_to_masked: bool, corpus: str = "wikipedia", max_words: int = 300,
              steps: int = 3000, passes: int = 20, seq_len: int = 128, l2: float = 1e-5) -> dict[str, float]:
    """One seed of the chapter's stage-1 check on the corpus's moments, as ``{metric: number}``."""
    docs, lda = load_text(corpus, seq_len=seq_len, max_words=max_words)
    wt = topic_words(docs, lda)
    res = value_on_text(docs, attend_to_masked=attend_to_masked, steps=steps, seed=seed, passes=passes, l2=l2)
    gs, gt = topic_block_gap(res.W_star, docs, wt), topic_block_gap(res.W_trained, docs, wt)
    return {"excess": res.excess, "relative_error": res.relative_error, "gap_star": gs["gap"], "gap_trained": gt["gap"],
            "corr": topic_block_correlation(res.W_trained, res.W_star, docs, wt),
            "synthetic_gap": synthetic_gap(docs, wt, attend_to_masked=attend_to_masked), "lr": res.lr}


def embedding_run(seed: int, *, attend_to_masked: bool, corpus: str = "wikipedia", max_words: int = 300,
                  seq_len: int = 128, passes: int = 10, l2: float = 1e-5, steps: int = 200, d: int = 64,
                  train_steps: int = 400, shuffles: int = 5) -> dict[str, float]:
    """One seed of the chapter's embedding-optimum check, as ``{metric: number}``: on :func:`load_text`'s
    documents and :func:`topic_words`, the optimum of :func:`embedding_optimum_on_text` at full rank
    (``opt_``) and at rank ``d`` (``opt_d_``), and the Gram matrix of :func:`train_word_mlm`'s embeddings after
    ``train_steps`` steps (``trained_``): the mean cosine over same-topic and different-topic pairs and their gap,
    the largest gap over ``shuffles`` frequency-matched shuffles, the Gram gap (and its shuffled maximum) and the
    correlation of the Gram entries with the full-rank optimum's (:func:`topic_block_correlation`). ``seed``
    draws the corruptions behind the moments, the trained model and the shuffles."""
    docs, lda = load_text(corpus, seq_len=seq_len, max_words=max_words)
    wt = topic_words(docs, lda)
    kw = dict(attend_to_masked=attend_to_masked, passes=passes, seed=seed, l2=l2, steps=steps)
    X = train_word_mlm(docs, attend_to_masked=attend_to_masked, steps=train_steps, seed=seed).embeddings
    grams = {"opt": embedding_optimum_on_text(docs, **kw), "opt_d": embedding_optimum_on_text(docs, d=d, **kw),
             "trained": X.astype(np.float64) @ X.astype(np.float64).T}
    nulls = [frequency_matched_shuffle(wt, docs, seed=seed * shuffles + i) for i in range(shuffles)]
    out: dict[str, float] = {}
    for name, G in grams.items():
        cos = gram_cosines(G)
        c = topic_block_gap(cos, docs, wt)
        out.update({f"{name}_cosine_same": c["same_topic"], f"{name}_cosine_diff": c["diff_topic"],
                    f"{name}_cosine_gap": c["gap"],
                    f"{name}_cosine_gap_shuffled": max(topic_block_gap(cos, docs, n)["gap"] for n in nulls),
                    f"{name}_gram_gap": topic_block_gap(G, docs, wt)["gap"],
                    f"{name}_gram_gap_shuffled": max(topic_block_gap(G, docs, n)["gap"] for n in nulls),
                    f"{name}_corr": topic_block_correlation(G, grams["opt"], docs, wt)})
    out["num_words"] = len(wt)
    return out


@functools.lru_cache(maxsize=2)
def _default_text(corpus: str) -> tuple[WordDocuments, FittedLDA]:
    loaders = {"wikipedia": load_wikipedia_sample, "lee": load_lee_corpus, "newsgroups": load_newsgroups}
    if corpus not in loaders:
        raise ValueError(f"corpus must be one of {tuple(loaders)}, got {corpus!r}")
    text = loaders[corpus]()
    lda = fit_lda(text)
    return word_documents(text, lda), lda


def default_run(seed: int, *, attend_to_masked: bool, corpus: str = "lee", progress: bool = False) -> dict[str, Any]:
    """Every default at once, as ``{metric: number}`` for :func:`topicmech.results.store`: :func:`fit_lda`,
    :func:`word_documents`, :func:`topic_words` and :func:`train_word_mlm` with their defaults on ``corpus``
    (``"lee"``, ``"wikipedia"`` or ``"newsgroups"``, :func:`~topicmech.corpus.load_newsgroups`, which the book
    never uses; the LDA fit is seed 0; ``seed`` seeds the model and its data stream), the final ratios, the untrained
    model's, the frequency-matched control's and the stage times (``progress``: a progress bar)."""
    docs, lda = _default_text(corpus)
    wt = topic_words(docs, lda)
    run = train_word_mlm(docs, attend_to_masked=attend_to_masked, seed=seed, word_topics=wt, progress=progress)
    untrained = topic_ratios(train_word_mlm(docs, attend_to_masked=attend_to_masked, steps=0, seed=seed), docs, lda,
                             seed=seed + 1)
    final = topic_ratios(run, docs, lda, seed=seed + 1)
    null = topic_ratios(run, docs, word_topics=frequency_matched_shuffle(wt, docs, seed=seed), seed=seed + 1)
    st = stage_times(run)
    out: dict[str, Any] = {f"final_{k}": final[k] for k in TRACKED_KEYS}
    out.update({f"untrained_{k}": untrained[k] for k in TRACKED_KEYS})
    out.update({f"shuffled_{k}": null[k] for k in TRACKED_KEYS})
    out.update(**_crossings(st, run.config["steps"]), two_stages=bool(st.two_stages),
               num_words=final["num_words"], vocab_size=docs.vocab_size, num_sequences=len(docs))
    return out


def minilm_run(seed: int, *, fraction: float = 0.002, max_docs: int = 60, max_pieces: int = 128) -> dict[str, float]:
    """The pretrained encoder beside the model trained here, as ``{metric: number}`` for
    :func:`topicmech.results.store`: :func:`topicmech.pretrained.authors_metric` (embedding-layer vectors, passages
    of ``max_pieces`` WordPieces from ``max_docs`` articles drawn by ``seed``) of the bundled all-MiniLM-L6-v2 (a
    distilled sentence-embedding model, not a masked language model) and of its randomly initialised twin (seed
    ``seed``), on the Wikipedia sample with the chapter's LDA fit (:func:`load_text`), the topics' most probable
    ``fraction`` of the LDA vocabulary without overlap."""
    text, lda = _text_and_lda("wikipedia", 20, 2, 0)
    tok, model = load_encoder()
    kw = dict(fractions=(float(fraction),), overlaps=(False,), max_pieces=max_pieces, chunks_per_doc=1,
              max_docs=max_docs, seed=seed, vectors="layer")
    out: dict[str, float] = {}
    for name, enc in (("minilm", model), ("random", random_encoder(seed=seed))):
        row = authors_metric(enc, tok, text, lda, **kw).iloc[0]
        out.update({f"{name}_{k}": float(row[f"{k}_ratio"]) for k in ("cosine", "dot", "attention")})
        out[f"{name}_words"] = int(row["single_piece_words"])
    return out


# ---- a small standard encoder for comparison ----------------------------------------------------------------------
class WordEncoder(nn.Module):
    """A small standard encoder over the ``num_tokens`` word ids (words, then ``[MASK]``):
    ``transformers``' ``BertForMaskedLM`` built offline from a small ``BertConfig`` (no weights loaded;
    ``layers`` layers of ``heads`` heads, width ``hidden``, feed-forward ``intermediate``, learned positions
    up to ``max_len``, one segment, no dropout, weights drawn with standard deviation ``init_scale`` by
    ``seed``), its own ``[PAD]`` token after ``[MASK]`` never used. Residuals, LayerNorm, MLPs and a tied head
    with bias behind a dense transform, as BERT has them. ``forward(inputs, selected)`` gives the logits over
    the ``num_tokens`` tokens, shape ``(batch, N, num_tokens)``, as :func:`topicmech.train.train` needs; in the
    released code's convention (``attend_to_masked=False``) the selected positions are hidden as keys."""

    def __init__(self, num_tokens: int, *, max_len: int, attend_to_masked: bool, layers: int = 2, heads: int = 2,
                 hidden: int = 64, intermediate: int = 128, init_scale: float = 0.02, seed: int = 0) -> None:
        from transformers import BertConfig, BertForMaskedLM
        super().__init__()
        self.num_tokens = check_positive_int("num_tokens", num_tokens)
        self.attend_to_masked = check_attend_to_masked(attend_to_masked)
        hidden, heads = check_positive_int("hidden", hidden), check_positive_int("heads", heads)
        if hidden % heads:
            raise ValueError(f"hidden={hidden} must be a multiple of heads={heads}")
        self.config = BertConfig(vocab_size=self.num_tokens + 1, pad_token_id=self.num_tokens, hidden_size=hidden,
                                 num_hidden_layers=check_positive_int("layers", layers), num_attention_heads=heads,
                                 intermediate_size=check_positive_int("intermediate", intermediate),
                                 max_position_embeddings=check_positive_int("max_len", max_len), type_vocab_size=1,
                                 hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                 initializer_range=check_float("init_scale", init_scale),
                                 attn_implementation="eager")
        with torch.random.fork_rng(devices=[]):                # transformers initialises from the global stream
            torch.manual_seed(shift_seed(check_seed(seed)))
            self.bert = BertForMaskedLM(self.config)

    def _mask(self, inputs: torch.Tensor, selected: torch.Tensor | None) -> torch.Tensor | None:
        if self.attend_to_masked or selected is None:
            return None
        return (~selected).long()

    def forward(self, inputs: torch.Tensor, selected: torch.Tensor | None = None) -> torch.Tensor:
        logits = self.bert(input_ids=inputs, attention_mask=self._mask(inputs, selected)).logits
        return logits[..., : self.num_tokens]                  # (B, N, D): the [PAD] column dropped

    def layer_patterns(self, inputs: torch.Tensor, selected: torch.Tensor | None = None) -> torch.Tensor:
        """Each layer's attention averaged over its heads, shape ``(layers, batch, query, key)``."""
        out = self.bert(input_ids=inputs, attention_mask=self._mask(inputs, selected), output_attentions=True)
        return torch.stack([a.mean(1) for a in out.attentions])

    def attention_pattern(self, inputs: torch.Tensor, selected: torch.Tensor | None = None) -> torch.Tensor:
        """The attention averaged over layers and heads (our choice: the authors do not say how they aggregate
        BERT's), ``(batch, query, key)``."""
        return self.layer_patterns(inputs, selected).mean(0)

    def word_vectors(self) -> torch.Tensor:
        """The input word-embedding table without ``[PAD]``, shape ``(num_tokens, hidden)``, detached."""
        with torch.no_grad():
            return self.bert.get_input_embeddings().weight[: self.num_tokens].detach().cpu().clone()


def train_word_encoder(documents: WordDocuments, *, attend_to_masked: bool, steps: int = 1500, seed: int = 0,
                       layers: int = 2, heads: int = 2, hidden: int = 64, intermediate: int = 128,
                       lr: float = 1e-3, batch_size: int = 32, init_scale: float = 0.02,
                       masking: Masking = BERT_MASKING, word_topics: WordTopics | None = None,
                       probe_every: int | None = None, num_probe_sequences: int = 64,
                       progress: bool = False) -> WordMLM:
    """Train a :class:`WordEncoder` from scratch on ``documents`` as :func:`train_word_mlm` trains the paper's
    model: the same BERT corruption, cross-entropy at the selected positions, Adam (at ``lr``), batches and
    probes, through the same loop :func:`topicmech.train.train` (on its reference path: the model's logits and
    :func:`topicmech.losses.mlm_loss`). ``steps=0`` returns the untrained encoder. The result reads as a
    :class:`WordMLM` (``embeddings``: the input word embeddings; :func:`topic_ratios` adds the attention
    ratio of each layer, ``attention_layer_<l>``)."""
    if not isinstance(documents, WordDocuments):
        raise ValueError(f"documents must be WordDocuments (see word_documents), got {type(documents).__name__}")
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 0:
        raise ValueError(f"steps must be a non-negative int, got {steps!r}")
    init_seed, data_seed = spawn_seeds(check_seed(seed), 2)
    model = WordEncoder(documents.num_tokens, max_len=documents.seq_len, attend_to_masked=attend_to_masked,
                        layers=layers, heads=heads, hidden=hidden, intermediate=intermediate, init_scale=init_scale,
                        seed=init_seed)
    arch = dict(layers=int(layers), heads=int(heads), hidden=int(hidden), intermediate=int(intermediate))
    return _train_run(model, documents, attend_to_masked=model.attend_to_masked, steps=steps, seed=seed,
                      data_seed=data_seed, architecture=arch, lr=lr, batch_size=batch_size, init_scale=init_scale,
                      masking=masking, word_topics=word_topics, probes={}, probe_every=probe_every,
                      num_probe_sequences=num_probe_sequences, progress=progress)


def encoder_run(seed: int, *, attend_to_masked: bool, corpus: str = "wikipedia", steps: int = 400,
                max_words: int | None = 500, seq_len: int = 128, layers: int = 2, heads: int = 2, hidden: int = 64,
                intermediate: int = 128, lr: float = 1e-3, shuffle_bins: int = 5, probe_every: int = 10,
                progress: bool = False) -> dict[str, Any]:
    """One seed of the small encoder beside the paper's model, as ``{metric: number}`` for
    :func:`topicmech.results.store`: :func:`train_word_encoder` on the documents and topic words of
    :func:`learning_run` (:func:`load_text`), the final, untrained and frequency-matched-shuffle ratios
    (:data:`TRACKED_KEYS`), the trained encoder's attention ratio per layer, its mean loss over the last 50 steps
    and the curves of the tracked ratios (every ``probe_every`` steps; a run of fewer steps from the same seed
    retraces their start exactly, which is how the chapter reruns a seed quickly)."""
    docs, lda = load_text(corpus, seq_len=seq_len, max_words=max_words)
    wt = topic_words(docs, lda)
    kw = dict(attend_to_masked=attend_to_masked, seed=seed, layers=layers, heads=heads, hidden=hidden,
              intermediate=intermediate)
    run = train_word_encoder(docs, steps=steps, lr=lr, word_topics=wt, probe_every=probe_every, progress=progress,
                             **kw)
    final = topic_ratios(run, docs, word_topics=wt, seed=seed + 1)
    untrained = topic_ratios(train_word_encoder(docs, steps=0, **kw), docs, word_topics=wt, seed=seed + 1)
    null = topic_ratios(run, docs, word_topics=frequency_matched_shuffle(wt, docs, bins=shuffle_bins, seed=seed),
                        seed=seed + 1)
    out: dict[str, Any] = {f"final_{k}": final[k] for k in TRACKED_KEYS}
    out.update({f"untrained_{k}": untrained[k] for k in TRACKED_KEYS})
    out.update({f"shuffled_{k}": null[k] for k in TRACKED_KEYS})
    out.update({f"final_{k}": v for k, v in final.items() if k.startswith("attention_layer_")})
    out.update(final_loss=float(np.mean(run.history.loss[-50:])), num_words=final["num_words"],
               vocab_size=docs.vocab_size)
    out["curve_step"] = run.steps.tolist()
    out.update({f"curve_{k}": [float(x) for x in run.probe(k)] for k in TRACKED_KEYS})
    return out
