"""Real text and its topics (chapter 8): the gensim Wikipedia sample and Lee corpus (and its mini 20-newsgroups
sample, which the book leaves unseen for the tests of the package's defaults), cleaning and LDA
tokens, any list of strings as a :class:`Corpus`, seeded LDA fits and maps from words to topics.

The modules of chapter 8 import one way: :mod:`topicmech.alignment` (WordPieces to words) and
:mod:`topicmech.word_pairs` (statistics by topic relation) build on ``corpus``, and
:mod:`topicmech.pretrained` (the encoder and its measurements) on all three.
"""

from __future__ import annotations

import bz2
import hashlib
import io
import itertools
import json
import os
import pickle
import re
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .runner import parallel_map, start_method
from .utils import check_positive_int, check_probability, numpy_rng, shift_seed

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from gensim.corpora import Dictionary
    from gensim.models import LdaModel

__all__ = [
    "WIKI_SAMPLE", "LEE_SAMPLE", "Corpus", "clean_wiki_markup", "lda_tokenize", "strip_accents",
    "load_wikipedia_sample", "load_lee_corpus", "NEWSGROUP_SAMPLE", "strip_newsgroup_post", "load_newsgroups",
    "corpus_from_texts", "WordTopics", "FittedLDA", "fit_lda",
    "top_fraction_count", "top_topic_words", "forked_map",
]

#: File name of the English Wikipedia sample in gensim's test data (about 100 articles).
WIKI_SAMPLE = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
#: File name of the Lee background corpus in gensim's test data (300 news articles, one per line).
LEE_SAMPLE = "lee_background.cor"
#: File name of gensim's mini 20-newsgroups sample, 200 posts of alt.atheism and sci.space stored as a
#: zlib-compressed Python-2 pickle of a scikit-learn ``Bunch``.
NEWSGROUP_SAMPLE = "mini_newsgroup"

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
    stop words (:func:`~topicmech.alignment.align_words` normalises whole words the same way)."""
    from gensim.parsing.preprocessing import STOPWORDS
    text = strip_accents(text.lower())     # what tokenize(lowercase=True, deacc=True) does, faster
    # gensim's simple_tokenize (runs of word characters other than digits), in one findall
    return [w for w in _ALPHABETIC.findall(text) if min_len <= len(w) <= max_len and w not in STOPWORDS]


_ALPHABETIC = re.compile(r"(?:(?!\d)\w)+")


_NON_ASCII = re.compile(r"[^\x00-\x7f]+")


def strip_accents(text: str) -> str:
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
            for (title, _), text in zip(block, forked_map(clean_wiki_markup, [m for _, m in block])):
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


_QUOTE_LINE = re.compile(r"^\s*(>|\|>|:)|(writes|wrote|says|said)\s*:\s*$|^\s*in article\b", re.IGNORECASE)


def strip_newsgroup_post(post: str) -> str:
    """A Usenet post without its header block (everything up to the first blank line, the ``Subject:``
    kept as the first line, ``Re:`` prefixes dropped), quoted lines (``>``, ``|>``, ``:`` and the
    "In article ... writes:" attributions) and a signature after a final ``--`` line, as one line of text."""
    head, sep, body = post.partition("\n\n")
    if not sep:                                            # no blank line: no header block to strip
        head, body = "", post
    subject = next((ln.split(":", 1)[1] for ln in head.splitlines() if ln.lower().startswith("subject:")), "")
    subject = re.sub(r"^(\s*re\s*:)+", "", subject.strip(), flags=re.IGNORECASE).strip()
    lines = body.splitlines()
    cut = [i for i, ln in enumerate(lines) if ln.strip() in ("--", "-- ")]
    if cut:
        lines = lines[:cut[-1]]
    kept = [ln for ln in lines if not _QUOTE_LINE.search(ln)]
    return " ".join(" ".join([subject, *kept]).split())


class _BunchUnpickler(pickle.Unpickler):
    """Reads scikit-learn's ``Bunch`` as a plain ``dict`` (scikit-learn need not be installed)."""

    def find_class(self, module: str, name: str) -> Any:
        if module.startswith("sklearn.") and name == "Bunch":
            return dict
        return super().find_class(module, name)


def load_newsgroups(path: str | os.PathLike | None = None, *, min_words: int = 20) -> Corpus:
    """gensim's mini 20-newsgroups sample (:data:`NEWSGROUP_SAMPLE`: 200 posts to alt.atheism and sci.space) or
    another file of that format, each post through :func:`strip_newsgroup_post`, posts of fewer than
    ``min_words`` words dropped; titles ``"<newsgroup>-<i>"``. ``FileNotFoundError`` for a missing file,
    ``ValueError`` for one that is not such a pickle or holds no post of ``min_words`` words."""
    check_positive_int("min_words", min_words)
    p = _data_file(path, NEWSGROUP_SAMPLE, "newsgroups sample")
    try:
        bunch = _BunchUnpickler(io.BytesIO(zlib.decompress(p.read_bytes())), encoding="latin1").load()
        posts, target, names = list(bunch["data"]), np.asarray(bunch["target"]), list(bunch["target_names"])
    except (zlib.error, pickle.UnpicklingError, EOFError, KeyError, TypeError) as err:
        raise ValueError(f"{str(p)!r} is not a zlib-compressed pickle of a newsgroups Bunch: {err}") from None
    texts, titles = [], []
    for i, (post, t) in enumerate(zip(posts, target)):
        text = strip_newsgroup_post(str(post))
        if len(text.split()) >= min_words:
            texts.append(text)
            titles.append(f"{names[int(t)]}-{i:03d}")
    if not texts:
        raise ValueError(f"no post with at least min_words={min_words} words in {str(p)!r}")
    return Corpus("newsgroups", tuple(texts), tuple(titles))


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
        rows, cols = [], []
        for i, w in enumerate(words):
            s = self.topics.get(w, ())
            rows += [i] * len(s)
            cols += s
        M[rows, cols] = True
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


def forked_map(fn: Callable[[Any], Any], items: Iterable[Any]) -> list[Any]:
    """``[fn(x) for x in items]`` by :func:`topicmech.runner.parallel_map` where its workers are forked (they share
    the loaded corpus, tokenizer and model, and a script needs no ``if __name__ == "__main__"`` guard), else a
    plain loop: the process map of the real-text modules (article cleaning, tokenizing, forward passes)."""
    return parallel_map(fn, items, n_jobs=None if start_method() == "fork" else 1)
