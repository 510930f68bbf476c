"""WordPieces and whole words (chapter 8): encode a passage and map each piece to its word, cut
documents into passages, find single-piece words, pool piece-level attention to words.

Tokenizing a long article is slow and the statistics of a page reuse the same documents, so the
encodings of the last documents are kept (keyed on the tokenizer object and the text).
"""

from __future__ import annotations

import collections
import functools
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
import torch

from .corpus import Corpus, forked_map, strip_accents
from .utils import check_choice, check_positive_int, numpy_rng

if TYPE_CHECKING:  # pragma: no cover
    from transformers import PreTrainedTokenizerBase

__all__ = ["PieceMode", "WordAlignment", "align_words", "chunk_text", "draw_passages", "single_piece_words",
           "pooling_matrices", "pool_attention"]

PieceMode = Literal["sum", "first"]


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
                         tuple(_normal(text[a:b].lower()) for a, b in spans[local].tolist()))


def _normal(word: str) -> str:
    """A lower-cased word without accents (:func:`~topicmech.corpus.strip_accents`; ASCII has none)."""
    return word if word.isascii() else strip_accents(word)


def align_words(tokenizer: PreTrainedTokenizerBase, text: str, *, add_special_tokens: bool = True) -> WordAlignment:
    """Encode one passage and map every WordPiece to its whole word (the fast tokenizer's ``word_ids()``),
    a word's string being its text span, lower-case and accent-free as :func:`~topicmech.corpus.lda_tokenize` tokens."""
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
    new = forked_map(encode, todo) if sum(map(len, todo)) > _PARALLEL_CHARS else [encode(t) for t in todo]
    _ENCODINGS.update(((tokenizer, t), enc) for t, enc in zip(todo, new))
    out = []
    for t in texts:
        _ENCODINGS.move_to_end((tokenizer, t))
        out.append(_ENCODINGS[tokenizer, t])
    while len(_ENCODINGS) > max(_ENCODINGS_KEPT, len(texts)):
        _ENCODINGS.popitem(last=False)
    return out


@functools.lru_cache(maxsize=256)
def _chunks(tokenizer: PreTrainedTokenizerBase, text: str, max_pieces: int) -> tuple[list[list[int]], Callable[[list[int]], WordAlignment]]:
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


def pooling_matrices(word_index: np.ndarray, pieces: PieceMode, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
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
    query, key = pooling_matrices(wi, check_choice("pieces", pieces, ("sum", "first")), pattern.dtype)
    return query @ pattern @ key                                               # (..., W, W)


def draw_passages(tokenizer: PreTrainedTokenizerBase, corpus: Corpus, max_pieces: int, chunks_per_doc: int | None,
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
