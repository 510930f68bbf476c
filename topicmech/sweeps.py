"""Ablations and parameter sweeps: how far the topic picture holds beyond the theorems.

Runners that return
probe summaries for :func:`topicmech.runner.run_seeds`, :func:`topicmech.runner.run_grid` and
:func:`topicmech.runner.sweep_axes`; probes for learned embeddings and several heads; closed forms along a sweep.
Every runner takes a :class:`topicmech.Setting`, which says the key convention.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, Literal

import numpy as np
import torch

from . import stage1, theory
from .data import LDATopicModel, TopicModel, heldout_batch, topic_model_for
from .model import OneLayerTransformer, TwoLayerTransformer
from .probes import block_means, relation_reader, topic_growth_eigenvalue
from .setting import Setting
from .train import train
from .utils import as_float64, check_choice, check_positive_int

__all__ = [
    "stage1_point", "STAGE1_SEED_OFFSETS", "embedding_cosine_contrast", "head_attention", "compensation_run", "deep_run",
    "value_blocks_along", "stage2_drive_point", "compensation_metrics", "compensation_seed", "deep_metrics",
    "deep_seed",
    "HANDICAPS", "ADAM_LR", "SWEEP_PARAMETERS",
]

LossKind = Literal["squared", "cross_entropy"]
OptimizerKind = Literal["sgd", "adam"]

#: Default Adam learning rate of the runners (Adam's step does not scale with the curvature).
ADAM_LR: float = 1e-2

#: The settings of :func:`compensation_run`, in order nothing handicapped, one-hot embeddings and
#: uniform attention.
HANDICAPS: tuple[str, ...] = ("none", "embedding", "attention")

#: Parameters :func:`value_blocks_along` and :func:`stage1_point` can sweep.
SWEEP_PARAMETERS: tuple[str, ...] = ("num_topics", "words_per_topic", "topics_per_doc", "doc_len", "mask_prob",
                                     "keep_prob", "random_prob")

_SUMMARY_KEYS = ("diag", "same_topic", "diff_topic", "topic_gap", "diag_excess")


def _check_run(setting: Setting, topic_model: TopicModel | None, loss: object, optimizer: object) -> TopicModel:
    """Shared checks of the runners; returns the data (:func:`topicmech.data.topic_model_for`)."""
    data = topic_model_for(setting, topic_model)
    check_choice("loss", loss, ("squared", "cross_entropy"))
    check_choice("optimizer", optimizer, ("sgd", "adam"))
    return data


def _split_changes(setting: Setting, kwargs: dict[str, Any]) -> tuple[Setting, dict[str, Any]]:
    """``setting`` with the :data:`SWEEP_PARAMETERS` among ``kwargs`` applied, and the other keywords."""
    changes = {k: kwargs.pop(k) for k in SWEEP_PARAMETERS if k in kwargs}
    if not isinstance(setting, Setting):
        raise ValueError(f"setting must be a topicmech.Setting, got {setting!r}")
    return (setting.replace(**changes) if changes else setting), kwargs


def _summarise_value(W: np.ndarray, topic_of_word: torch.Tensor) -> dict[str, float]:
    bm = block_means(W, topic_of_word)
    return {"diag": bm.diag, "same_topic": bm.same_topic, "diff_topic": bm.diff_topic,
            "topic_gap": bm.topic_gap, "diag_excess": bm.diag - bm.same_topic,
            "mask_col": float(bm.mask_col) if bm.mask_col is not None else math.nan}


def _tail_loss(losses: Sequence[float]) -> float:
    """Mean loss over the last 10% of steps."""
    return float(np.mean(losses[-max(1, len(losses) // 10):]))


#: The data seeds of the two phases of :func:`stage1_point` are ``offset + seed``; the phases run at
#: ``lr`` then ``lr / 10``.
STAGE1_SEED_OFFSETS: tuple[int, int] = (1000, 500_000)


def stage1_point(seed: int, *, setting: Setting, dirichlet_alpha: float | None = None,
                 optimizer: OptimizerKind = "sgd", loss: LossKind = "squared", lr: float | None = None,
                 steps: int | None = None, anneal_steps: int | None = None, batch_size: int = 128, l2: float = 0.0,
                 init_scale: float = 0.0, return_matrix: bool = False, **changes: Any) -> dict[str, Any]:
    """One stage-1 sweep point: build the data, train ``W^V`` (:func:`topicmech.stage1.train_value_matrix`),
    compare it with the exact optimum.

    Parameters
    ----------
    seed : int
        Seeds the initialisation; ``1000 + seed`` and ``500_000 + seed`` the documents and masks
        of the two phases (:data:`STAGE1_SEED_OFFSETS`).
    setting : Setting
        Sizes, document length, masking and key convention; ``changes`` among
        :data:`SWEEP_PARAMETERS` (``doc_len=16``, ...) change it, so :func:`sweep_axes` can vary them.
    dirichlet_alpha : float, optional
        Switches to :class:`~topicmech.data.LDATopicModel` data (the setting's ``topics_per_doc``
        is then not used).
    lr : float, optional
        Given with ``steps``, the run is ``steps`` steps at ``lr`` then ``anneal_steps`` at
        ``lr / 10``; without them it runs the defaults of
        :func:`~topicmech.stage1.train_value_matrix`.
    steps : int, optional
        The steps at ``lr``.
    anneal_steps : int, optional
        The steps at ``lr / 10`` after them (default 0).
    l2 : float
        Ridge weight (also of the exact squared-loss optimum).
    init_scale : float
        Initial scale of ``W^V``.
    batch_size : int
        Documents per step.
    return_matrix : bool
        Also return the trained ``"W_V"``.

    Returns
    -------
    summary : dict
        ``"diag"``, ``"same_topic"``, ``"diff_topic"``, ``"topic_gap"``, ``"diag_excess"``, ``"mask_col"``,
        ``"final_loss"`` (last 10% of steps, without L2), ``"rel_error"`` (relative Frobenius distance
        of the word block to ``W*``), ``"exact_diag"``, ``"exact_same_topic"``, ``"exact_diff_topic"``,
        ``"exact_topic_gap"``, ``"exact_diag_excess"``, optionally ``"W_V"``.
    """
    s, rest = _split_changes(setting, dict(changes))
    if rest:
        raise ValueError(f"unknown parameters {sorted(rest)}; parameters: {SWEEP_PARAMETERS}")
    if dirichlet_alpha is not None:
        data: TopicModel | None = LDATopicModel(s.num_topics, s.words_per_topic, dirichlet_alpha)
        W_star = theory.lda_optimal_value_matrix(s, dirichlet_alpha, l2=l2)
    else:
        data = None
        W_star = theory.optimal_value_matrix(s, l2=l2)
    data = _check_run(s, data, loss, optimizer)
    if (lr is None) != (steps is None):
        raise ValueError(f"give both lr and steps, or neither (the defaults), got lr={lr!r}, steps={steps!r}")
    phases = data_seeds = None
    if lr is not None:
        steps = check_positive_int("steps", steps)
        anneal_steps = 0 if anneal_steps is None else anneal_steps
        if isinstance(anneal_steps, bool) or not isinstance(anneal_steps, (int, np.integer)) or anneal_steps < 0:
            raise ValueError(f"anneal_steps must be an int >= 0, got {anneal_steps!r}")
        phases = [(steps, lr), (int(anneal_steps), float(lr) / 10.0)][:2 if anneal_steps else 1]
        data_seeds = [offset + seed for offset in STAGE1_SEED_OFFSETS][:len(phases)]
    elif anneal_steps is not None:
        raise ValueError("anneal_steps needs lr and steps")
    run = stage1.train_value_matrix(s, topic_model=data, loss=loss, optimizer=optimizer, phases=phases,
                                    batch_size=batch_size, l2=l2, init_scale=init_scale, seed=seed,
                                    data_seeds=data_seeds)
    W = run.W_V                                                                    # (D, D)
    out: dict[str, Any] = _summarise_value(W, data.topic_of_word)
    out["final_loss"] = _tail_loss(run.loss)
    V = data.vocab_size
    out["rel_error"] = float(np.linalg.norm(W[:V, :V] - W_star[:V, :V]) / np.linalg.norm(W_star[:V, :V]))
    if return_matrix:
        out["W_V"] = W
    exact = _summarise_value(W_star, data.topic_of_word)
    out.update({f"exact_{k}": exact[k] for k in _SUMMARY_KEYS})
    return out


def embedding_cosine_contrast(W_E: torch.Tensor | np.ndarray, topic_of_word: torch.Tensor) -> dict[str, float]:
    """Block means of the cosine similarity between word embeddings (columns of ``W_E``, ``[MASK]`` left out).

    Returns ``"same_topic"``, ``"diff_topic"`` (mean over distinct word pairs) and ``"contrast"``
    (their difference); 0 for one-hot embeddings.
    """
    E = as_float64(W_E)
    V = len(topic_of_word)
    if E.ndim != 2 or E.shape[1] not in (V, V + 1):
        raise ValueError(f"W_E must have shape (d, {V}) or (d, {V + 1}), got {E.shape}")
    E = E[:, :V]                                                                   # (d, V) words only
    norms = np.linalg.norm(E, axis=0)
    if np.any(norms == 0):
        raise ValueError("W_E has a zero word embedding; cosines are undefined")
    bm = block_means((E.T @ E) / np.outer(norms, norms), topic_of_word)            # cosines (V, V)
    return {"same_topic": bm.same_topic, "diff_topic": bm.diff_topic, "contrast": bm.topic_gap}


def head_attention(model: TwoLayerTransformer | OneLayerTransformer, inputs: torch.Tensor,
                   topic_of_word: torch.Tensor, selected: torch.Tensor | None = None) -> np.ndarray:
    """Attention by relation for every layer and head, shape (num_layers, num_heads, 4).

    The fields of :class:`topicmech.probes.AttentionByRelation` (self, same word, same topic,
    different topic), multiples of uniform attention; a one-layer model is one layer, one head.
    """
    L = getattr(model, "num_layers", 1)
    if not callable(getattr(model, "run_with_cache", None)) or not isinstance(L, int):
        raise ValueError(f"model must be a OneLayerTransformer or TwoLayerTransformer, got {type(model).__name__}")
    with torch.no_grad():
        cache = model.run_with_cache(inputs, selected)
    if "attn.pattern" in cache:                                                    # one-layer model
        patterns = [cache["attn.pattern"][:, None]]                                # (B, 1, query, key)
    else:
        patterns = [cache[f"blocks.{layer}.attn.pattern"] for layer in range(L)]   # each (B, H, query, key)
    read = relation_reader(inputs, topic_of_word)                                  # pairs classified once
    out = np.empty((len(patterns), patterns[0].shape[1], 4))
    for layer, pat in enumerate(patterns):
        for head in range(pat.shape[1]):
            out[layer, head] = tuple(read(pat[:, head]))
    return out


def _probe(model: torch.nn.Module, topic_model: TopicModel, doc_len: int,
           heldout: tuple[torch.Tensor, torch.Tensor | None] | None) -> tuple[dict[str, float], np.ndarray]:
    """Embedding cosines and :func:`head_attention` on ``heldout`` (default: 128 clean documents)."""
    inputs, selected = heldout_batch(topic_model, 128, doc_len) if heldout is None else heldout
    emb = embedding_cosine_contrast(model.W_E, topic_model.topic_of_word)
    return ({"emb_same_topic": emb["same_topic"], "emb_diff_topic": emb["diff_topic"], "emb_contrast": emb["contrast"]},
            head_attention(model, inputs, topic_model.topic_of_word, selected))


def compensation_run(seed: int, *, setting: Setting, topic_model: TopicModel | None = None,
                     handicap: Literal["none", "embedding", "attention"] = "none", d_model: int | None = None,
                     steps: int = 400, batch_size: int = 64, loss: LossKind = "squared",
                     optimizer: OptimizerKind = "adam", lr: float | None = None, init_scale: float = 0.1,
                     heldout: tuple[torch.Tensor, torch.Tensor | None] | None = None) -> dict[str, float]:
    """Train embeddings, attention and ``W^V`` together (tied head), with one of the first two handicapped.

    Parameters
    ----------
    seed : int
        Seeds the initialisation; ``2000 + seed`` seeds the documents and masks.
    setting : Setting
        Sizes, document length, masking and key convention; ``topic_model`` (optional) replaces
        the setting's simplified data (:func:`topicmech.data.topic_model_for`).
    handicap : {"none", "embedding", "attention"}
        Nothing, embeddings frozen to one-hot, or attention frozen to uniform.
    d_model : int, optional
        Dimension of learned embeddings (default ``D``).
    lr : float, optional
        Adam :data:`ADAM_LR`; SGD with one-hot embeddings ``0.5 / lambda_max`` (``2 / lambda_max`` for
        cross-entropy, :func:`topicmech.theory.sigma_range`); SGD with
        learned embeddings has no rule (the tied loss is quartic in ``W_E``): pass ``lr``.
    heldout : (inputs, selected), optional
        Where attention is read; default 128 clean documents (:func:`topicmech.data.heldout_batch`).

    Returns
    -------
    summary : dict of float
        ``"emb_same_topic"``, ``"emb_diff_topic"``, ``"emb_contrast"`` (:func:`embedding_cosine_contrast`);
        ``"attn_self"``, ``"attn_same_word"``, ``"attn_same_topic"``, ``"attn_diff_topic"``, ``"attn_ratio"``
        (same / different topic); ``"value_topic_gap"`` (of ``W_E^T W^V W_E``); ``"final_loss"``.
    """
    topic_model = _check_run(setting, topic_model, loss, optimizer)
    check_choice("handicap", handicap, HANDICAPS)
    doc_len, attend_to_masked = setting.doc_len, setting.attend_to_masked
    D = topic_model.num_tokens
    if lr is None:
        if optimizer == "adam":
            lr = ADAM_LR
        elif handicap == "embedding":
            lam_max = theory.sigma_range(setting, topic_model=topic_model, needs="lr")[1]
            lr = theory.stage1_sgd_lr(lam_max, loss=loss)
        else:
            raise ValueError(
                f"no default SGD learning rate with learned embeddings (handicap={handicap!r}): the tied loss "
                "is quartic in W_E and its curvature grows during training; pass lr, or use optimizer='adam'"
            )
    d = D if handicap == "embedding" or d_model is None else check_positive_int("d_model", d_model)
    model = OneLayerTransformer(D, d, embedding="one_hot" if handicap == "embedding" else "learned",
                                attention="uniform" if handicap == "attention" else "learned", value="learned",
                                head="tied", attend_to_masked=attend_to_masked, init_scale=init_scale, seed=seed)
    history = train(model, topic_model, steps=steps, batch_size=batch_size, doc_len=doc_len, loss=loss,
                    optimizer=optimizer, lr=lr, masking=setting.masking, seed=2000 + seed)
    emb, att = _probe(model, topic_model, doc_len, heldout)
    att = att[0, 0]                                                                # (4,)
    with torch.no_grad():
        value_gap = block_means(model.value_matrix(), topic_model.topic_of_word).topic_gap
    return {
        **emb,
        "attn_self": float(att[0]), "attn_same_word": float(att[1]), "attn_same_topic": float(att[2]),
        "attn_diff_topic": float(att[3]), "attn_ratio": float(att[2] / att[3]),
        "value_topic_gap": float(value_gap), "final_loss": _tail_loss(history.loss),
    }


def deep_run(seed: int, *, setting: Setting, topic_model: TopicModel | None = None, num_layers: int = 2,
             num_heads: int = 2, d_model: int = 16, steps: int = 400, batch_size: int = 64, loss: LossKind = "squared",
             optimizer: OptimizerKind = "adam", lr: float | None = None, init_scale: float = 0.1,
             heldout: tuple[torch.Tensor, torch.Tensor | None] | None = None) -> dict[str, Any]:
    """Train a :class:`~topicmech.model.TwoLayerTransformer` (residual, LayerNorm, tied head) and probe it.

    Arguments as in :func:`compensation_run` (seeds ``seed`` and ``3000 + seed``; SGD needs
    ``lr``), plus the architecture ``num_layers``, ``num_heads``, ``d_model``.

    Returns
    -------
    summary : dict
        ``"emb_same_topic"``, ``"emb_diff_topic"``, ``"emb_contrast"``, ``"attention"`` (:func:`head_attention`),
        ``"attn_ratio"`` (shape (num_layers, num_heads), same / different topic), ``"min_ratio"``,
        ``"max_ratio"``, ``"final_loss"``, ``"W_E"`` (shape (d, D)).
    """
    topic_model = _check_run(setting, topic_model, loss, optimizer)
    doc_len = setting.doc_len
    if lr is None:
        if optimizer == "sgd":
            raise ValueError("no default SGD learning rate for the two-layer model (its curvature depends on the "
                             "weights); pass lr, or use optimizer='adam'")
        lr = ADAM_LR
    model = TwoLayerTransformer(topic_model.num_tokens, d_model, num_heads=num_heads, num_layers=num_layers,
                                attend_to_masked=setting.attend_to_masked, init_scale=init_scale, seed=seed)
    history = train(model, topic_model, steps=steps, batch_size=batch_size, doc_len=doc_len, loss=loss,
                    optimizer=optimizer, lr=lr, masking=setting.masking, seed=3000 + seed)
    emb, att = _probe(model, topic_model, doc_len, heldout)                        # att: (L, H, 4)
    ratio = att[..., 2] / att[..., 3]                                              # (L, H)
    return {
        **emb,
        "attention": att, "attn_ratio": ratio, "min_ratio": float(ratio.min()), "max_ratio": float(ratio.max()),
        "final_loss": _tail_loss(history.loss), "W_E": model.W_E.detach().double().cpu().numpy(),
    }


def value_blocks_along(param: str, values: Iterable[float], setting: Setting, *,
                       l2: float = 0.0) -> dict[str, np.ndarray]:
    """Exact stage-1 block values (:func:`topicmech.theory.value_block_coefficients`) while one parameter varies.

    ``param`` is one of :data:`SWEEP_PARAMETERS` (integer ones take integer values); ``setting``
    fixes the rest, the convention included. Returns arrays of shape (len(values),): ``"x"`` (the
    values), ``"diag"``, ``"same_topic"``, ``"diff_topic"``, ``"topic_gap"``, ``"diag_excess"``, ``"topic_eigenvalue"``.
    """
    check_choice("param", param, SWEEP_PARAMETERS)
    if not isinstance(setting, Setting):
        raise ValueError(f"setting must be a topicmech.Setting, got {setting!r}")
    xs = np.asarray(list(values), dtype=float)
    if xs.ndim != 1 or xs.size == 0:
        raise ValueError(f"values must be a non-empty 1-D sequence, got {values!r}")
    out = {k: np.empty(xs.size) for k in (*_SUMMARY_KEYS, "topic_eigenvalue")}
    for i, x in enumerate(xs):
        if param in SWEEP_PARAMETERS[:4] and not (math.isinf(x) and param == "doc_len"):
            if x != round(x):
                raise ValueError(f"values of {param} must be integers, got {x!r}")
            x = int(round(x))
        b = theory.value_block_coefficients(setting.replace(**{param: x}), l2=l2)
        for k, val in zip(out, (b.diag, b.same_topic, b.diff_topic, b.same_topic - b.diff_topic,
                                b.diag - b.same_topic, b.topic_eigenvalue)):
            out[k][i] = val
    out["x"] = xs
    return out


def stage2_drive_point(seed: int, *, setting: Setting, num_docs: int | None = None,
                       **changes: Any) -> dict[str, float]:
    """Monte-Carlo (``num_docs`` documents, :func:`topicmech.theory.key_query_gradient`) and exact stage-2 drive.

    ``setting`` must hide masked keys (the exact drive's convention); ``changes`` (among
    :data:`SWEEP_PARAMETERS`) change it, so :func:`sweep_axes` can vary them. Default
    ``num_docs``: 128,000 tokens' worth (``128_000 // doc_len``), which keeps the relative
    error of one estimate at about 2.5% along every axis (short documents carry less signal each).
    Returns ``{"mc_drive": ..., "exact_drive": ...}`` (:func:`topicmech.theory.stage2_drive`), for :func:`topicmech.runner.sweep_axes`.
    """
    s, rest = _split_changes(setting, dict(changes))
    if rest:
        raise ValueError(f"unknown parameters {sorted(rest)}; parameters: {SWEEP_PARAMETERS}")
    if s.attend_to_masked:
        raise ValueError("stage2_drive_point needs a setting with attend_to_masked=False (the exact drive hides "
                         "masked keys)")
    doc_len = s.doc_len
    num_docs = max(1, 128_000 // doc_len) if num_docs is None else num_docs

    W = theory.optimal_value_matrix(s)
    G = theory.key_query_gradient(W, s, num_docs, seed=seed)                       # (D, D)
    topic = np.arange(s.num_topics * s.words_per_topic) // s.words_per_topic
    return {"mc_drive": float(topic_growth_eigenvalue(G, topic)), "exact_drive": theory.stage2_drive(s)}


# ---- per-seed summaries for stored multi-seed results (topicmech.results.store) ----

def compensation_metrics(runs: dict[str, dict[str, float]]) -> dict[str, float]:
    """One seed's :func:`compensation_run` outputs, by handicap (all of :data:`HANDICAPS`), as flat
    numbers: ``"<handicap>_<key>"`` for ``emb_contrast``, ``attn_ratio``, ``value_topic_gap`` and
    ``final_loss``, plus ``"attn_boost"`` (attention ratio with one-hot embeddings over that with
    both learned) and ``"emb_drop"`` (embedding contrast with both learned minus that with uniform
    attention)."""
    missing = [h for h in HANDICAPS if h not in runs]
    if missing:
        raise ValueError(f"runs must hold every handicap {HANDICAPS}, missing {missing}")
    out = {f"{h}_{k}": float(runs[h][k]) for h in HANDICAPS
           for k in ("emb_contrast", "attn_ratio", "value_topic_gap", "final_loss")}
    out["attn_boost"] = out["embedding_attn_ratio"] / out["none_attn_ratio"]
    out["emb_drop"] = out["none_emb_contrast"] - out["attention_emb_contrast"]
    return out


def compensation_seed(seed: int, *, num_topics: int, words_per_topic: int, topics_per_doc: int, doc_len: int,
                      attend_to_masked: bool, steps: int, lr: float) -> dict[str, float]:
    """:func:`compensation_run` for every handicap on one seed, summarised by
    :func:`compensation_metrics` (Adam, squared loss; arguments are plain numbers so that
    :func:`topicmech.results.store` can record them)."""
    setting = Setting(num_topics, words_per_topic, topics_per_doc, doc_len, attend_to_masked=attend_to_masked)
    return compensation_metrics({h: compensation_run(seed, setting=setting, handicap=h, steps=steps, lr=lr)
                                 for h in HANDICAPS})


def deep_metrics(run: dict[str, Any]) -> dict[str, float]:
    """One :func:`deep_run` output as flat numbers: ``"emb_contrast"``, ``"final_loss"``, and of
    the attention ratios (same over different topic) of the first layer ``"l1_best"`` (its most
    topical head), ``"l1_gmean"`` (geometric mean over its heads), ``"l1_min"``, ``"l1_all_above"``
    and ``"l1_all_below"`` (1 if every first-layer head is above, or below, uniform, else 0), and of
    the last layer ``"last_min"``, ``"last_max"``."""
    ratio = np.asarray(run["attn_ratio"], dtype=float)                             # (L, H)
    first, last = ratio[0], ratio[-1]
    return {"emb_contrast": float(run["emb_contrast"]), "final_loss": float(run["final_loss"]),
            "l1_best": float(first.max()), "l1_gmean": float(np.exp(np.log(first).mean())),
            "l1_min": float(first.min()), "l1_all_above": int(np.all(first > 1)),
            "l1_all_below": int(np.all(first < 1)), "last_min": float(last.min()), "last_max": float(last.max())}


def deep_seed(seed: int, *, num_topics: int, words_per_topic: int, topics_per_doc: int, doc_len: int,
              attend_to_masked: bool, steps: int, lr: float, loss: LossKind = "squared", num_layers: int = 2,
              num_heads: int = 2, d_model: int = 16) -> dict[str, float]:
    """:func:`deep_run` on one seed (Adam, attention read on the default 128 clean held-out
    documents), summarised by :func:`deep_metrics`; plain-number arguments as in
    :func:`compensation_seed`."""
    setting = Setting(num_topics, words_per_topic, topics_per_doc, doc_len, attend_to_masked=attend_to_masked)
    return deep_metrics(deep_run(seed, setting=setting, steps=steps, lr=lr, loss=loss, num_layers=num_layers,
                                 num_heads=num_heads, d_model=d_model))
