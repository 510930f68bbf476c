"""Every public function and constructor refuses bad input with a ValueError naming the argument.

Each case is (label, call, argument, shown): calling ``call()`` must raise ``ValueError``
whose message contains ``argument`` (and ``shown``, the offending value, when given).
Run ``python tests/test_validation.py`` to print the list of bad inputs tried.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pytest
import torch

from topicmech import utils
from topicmech.data import LDATopicModel, SimplifiedTopicModel, bert_mask, check_docs
from topicmech.model import OneLayerTransformer, TwoLayerTransformer, key_visibility
from topicmech.probes import attention_by_relation, block_means, relation_masks, topic_contrasts
from topicmech.train import History, make_optimizer, mlm_loss, train

TM = SimplifiedTopicModel(2, 2, 2)           # V = 4, D = 5
V, D = TM.vocab_size, TM.num_tokens
DOCS = torch.tensor([[0, 1, 2, 3], [3, 2, 1, 0]])
SEL = torch.tensor([[True, False, False, True], [False, True, False, False]])
TOPIC = TM.topic_of_word
MODEL = OneLayerTransformer(D, attend_to_masked=False)
LEARNED = OneLayerTransformer(D, attention="learned", attend_to_masked=False)
TIED = OneLayerTransformer(D, 3, embedding="learned", head="tied")
TWO = TwoLayerTransformer(D, 4)
LOGITS = torch.zeros(2, 4, D)
UNIFORM = torch.full((2, 4, 4), 0.25)


class Case(NamedTuple):
    label: str
    call: Callable[[], object]
    argument: str
    shown: str | None = None


def train_with(**kw):
    args = dict(steps=1, batch_size=2, doc_len=4)
    args.update(kw)
    data = args.pop("data", TM)
    model = args.pop("model", OneLayerTransformer(D))
    return lambda: train(model, data, **args)


CASES: list[Case] = []


def add(label, call, argument, shown=None):
    CASES.append(Case(label, call, argument, shown))


# ---- data --------------------------------------------------------------------------------------
for bad in (0, -1, 1.5, "3", True, None):
    add(f"SimplifiedTopicModel(num_topics={bad!r})", lambda b=bad: SimplifiedTopicModel(b, 2, 1), "num_topics", repr(bad))
    add(f"LDATopicModel(num_topics={bad!r})", lambda b=bad: LDATopicModel(b, 2, 0.1), "num_topics", repr(bad))
for bad in (0, -2, 2.5):
    add(f"SimplifiedTopicModel(words_per_topic={bad!r})", lambda b=bad: SimplifiedTopicModel(2, b, 1),
        "words_per_topic", repr(bad))
    add(f"LDATopicModel(words_per_topic={bad!r})", lambda b=bad: LDATopicModel(2, b, 0.1), "words_per_topic", repr(bad))
for bad in (0, -1, 1.5, 3):
    add(f"SimplifiedTopicModel(T=2, topics_per_doc={bad!r})", lambda b=bad: SimplifiedTopicModel(2, 2, b),
        "topics_per_doc", repr(bad))
for bad in (0, 0.0, -0.1, math.nan, math.inf, -math.inf, "0.1", None, True, [0.1, 0.2]):
    add(f"LDATopicModel(alpha={bad!r})", lambda b=bad: LDATopicModel(2, 2, b), "alpha")
for bad in (0, -1, 2.5, "2"):
    add(f"sample(num_docs={bad!r})", lambda b=bad: TM.sample(b, 3), "num_docs", repr(bad))
    add(f"sample(doc_len={bad!r})", lambda b=bad: TM.sample(2, b), "doc_len", repr(bad))
for bad in (-1, 1.5, "a", 2**64, None, True):
    add(f"sample(seed={bad!r})", lambda b=bad: TM.sample(2, 3, seed=b), "seed")
    add(f"bert_mask(seed={bad!r})", lambda b=bad: bert_mask(DOCS, V, seed=b), "seed")
    add(f"LDATopicModel.sample(seed={bad!r})", lambda b=bad: LDATopicModel(2, 2, 0.5).sample(2, 3, seed=b), "seed")

BAD_DOCS = {
    "1-D docs": torch.tensor([0, 1, 2]),
    "3-D docs": torch.zeros(2, 2, 2, dtype=torch.long),
    "0-D docs": torch.tensor(1),
    "float docs": DOCS.float(),
    "bool docs": DOCS > 1,
    "complex docs": DOCS.to(torch.complex64),
    "docs with id = V ([MASK])": torch.tensor([[0, V]]),
    "docs with id > V": torch.tensor([[0, 99]]),
    "docs with negative id": torch.tensor([[0, -1]]),
    "ragged list docs": [[0, 1], [2]],
    "string docs": "0 1 2",
}
for label, bad in BAD_DOCS.items():
    add(f"bert_mask({label})", lambda b=bad: bert_mask(b, V), "docs")
    add(f"check_docs({label})", lambda b=bad: check_docs(b, V), "docs")
    add(f"train(data={label})", train_with(data=bad), "data")
add("train(data=empty (0, 4))", train_with(data=torch.zeros(0, 4, dtype=torch.long)), "data")
add("train(data=empty (2, 0))", train_with(data=torch.zeros(2, 0, dtype=torch.long)), "data")
for bad in (0, -1, 2.5, "4", None):
    add(f"bert_mask(vocab_size={bad!r})", lambda b=bad: bert_mask(DOCS, b), "vocab_size")
for name in ("mask_prob", "keep_prob", "random_prob"):
    for bad in (-0.1, 1.5, math.nan, math.inf, "0.1", None, True):
        add(f"bert_mask({name}={bad!r})", lambda n=name, b=bad: bert_mask(DOCS, V, **{n: b}), name)
        add(f"train({name}={bad!r})", train_with(**{name: bad}), name)
add("bert_mask(keep_prob=0.6, random_prob=0.5)", lambda: bert_mask(DOCS, V, keep_prob=0.6, random_prob=0.5), "keep_prob")
add("train(keep_prob=0.6, random_prob=0.5)", train_with(keep_prob=0.6, random_prob=0.5), "random_prob")

# ---- model ----------------------------------------------------------------------------------------
for bad in (0, -1, 2.5, "9", True, None):
    add(f"OneLayerTransformer(num_tokens={bad!r})", lambda b=bad: OneLayerTransformer(b), "num_tokens")
    add(f"TwoLayerTransformer(num_tokens={bad!r})", lambda b=bad: TwoLayerTransformer(b), "num_tokens")
for bad in (0, -3, 2.5):
    add(f"OneLayerTransformer(d_model={bad!r})", lambda b=bad: OneLayerTransformer(D, b, embedding="learned",
                                                                                   head="tied"), "d_model")
    add(f"TwoLayerTransformer(d_model={bad!r})", lambda b=bad: TwoLayerTransformer(D, b), "d_model")
add("OneLayerTransformer(one_hot, d_model != D)", lambda: OneLayerTransformer(D, 3, head="learned"), "d_model")
add("OneLayerTransformer(identity head, d_model != D)",
    lambda: OneLayerTransformer(D, 3, embedding="learned", head="identity"), "d_model")
for arg, bad in [("embedding", "onehot"), ("embedding", "One_Hot"), ("embedding", None), ("attention", "soft"),
                 ("attention", ""), ("value", "id"), ("value", 1), ("head", "untied"), ("head", "Tied")]:
    add(f"OneLayerTransformer({arg}={bad!r})", lambda a=arg, b=bad: OneLayerTransformer(D, **{a: b}), arg, repr(bad))
for bad in (1, 0, "yes", None, np.bool_(True)):
    add(f"OneLayerTransformer(attend_to_masked={bad!r})",
        lambda b=bad: OneLayerTransformer(D, attend_to_masked=b), "attend_to_masked")
    add(f"TwoLayerTransformer(attend_to_masked={bad!r})",
        lambda b=bad: TwoLayerTransformer(D, 4, attend_to_masked=b), "attend_to_masked")
for bad in (-1.0, math.nan, math.inf, "0.1", True, None):
    add(f"OneLayerTransformer(init_scale={bad!r})", lambda b=bad: OneLayerTransformer(D, init_scale=b), "init_scale")
    add(f"TwoLayerTransformer(init_scale={bad!r})", lambda b=bad: TwoLayerTransformer(D, 4, init_scale=b),
        "init_scale")
for bad in (-1, "a", 1.5, 2**64, None):
    add(f"OneLayerTransformer(seed={bad!r})", lambda b=bad: OneLayerTransformer(D, seed=b), "seed")
    add(f"TwoLayerTransformer(seed={bad!r})", lambda b=bad: TwoLayerTransformer(D, 4, seed=b), "seed")
for bad in (0, -1):
    add(f"TwoLayerTransformer(num_heads={bad!r})", lambda b=bad: TwoLayerTransformer(D, 4, num_heads=b), "num_heads")
    add(f"TwoLayerTransformer(num_layers={bad!r})", lambda b=bad: TwoLayerTransformer(D, 4, num_layers=b),
        "num_layers")
add("TwoLayerTransformer(d_model=4, num_heads=3)", lambda: TwoLayerTransformer(D, 4, num_heads=3), "num_heads")

BAD_INPUTS = {
    "1-D inputs": torch.tensor([0, 1]),
    "3-D inputs": torch.zeros(1, 2, 2, dtype=torch.long),
    "float inputs": DOCS.float() + 0.5,
    "bool inputs": DOCS > 0,
    "inputs with id = D": torch.tensor([[0, D]]),
    "inputs with negative id": torch.tensor([[-1, 0]]),
    "list inputs": [[0, 1]],
    "numpy inputs": np.array([[0, 1]]),
}
for label, bad in BAD_INPUTS.items():
    for mname, m in (("uniform", MODEL), ("learned", LEARNED)):
        add(f"OneLayerTransformer[{mname}].forward({label})", lambda b=bad, m=m: m(b), "inputs")
    add(f"run_with_cache({label})", lambda b=bad: MODEL.run_with_cache(b), "inputs")
    add(f"attention_pattern({label})", lambda b=bad: MODEL.attention_pattern(b), "inputs")
    add(f"TwoLayerTransformer.forward({label})", lambda b=bad: TWO(b), "inputs")
BAD_SELECTED = {
    "int selected": SEL.long(),
    "uint8 selected": SEL.to(torch.uint8),
    "float selected": SEL.float(),
    "selected of wrong shape (2, 5)": torch.zeros(2, 5, dtype=torch.bool),
    "selected of wrong shape (4,)": torch.zeros(4, dtype=torch.bool),
    "list selected": SEL.tolist(),
}
for label, bad in BAD_SELECTED.items():
    for mname, m in (("uniform", MODEL), ("learned", LEARNED)):
        add(f"OneLayerTransformer[{mname}].forward({label})", lambda b=bad, m=m: m(DOCS, b), "selected")
    add(f"run_with_cache({label})", lambda b=bad: MODEL.run_with_cache(DOCS, b), "selected")
    add(f"TwoLayerTransformer.forward({label})", lambda b=bad: TWO(DOCS, b), "selected")
    add(f"key_visibility({label})", lambda b=bad: key_visibility(b, False, DOCS.shape), "selected")
    add(f"mlm_loss({label})", lambda b=bad: mlm_loss(LOGITS, DOCS, b), "selected")
add("key_visibility(attend_to_masked='no')", lambda: key_visibility(SEL, "no", SEL.shape), "attend_to_masked")
for bad in ("W_X", "w_v", "", "training", "W_U_fixed"):
    add(f"freeze({bad!r})", lambda b=bad: OneLayerTransformer(D).freeze(b), repr(bad))
add("freeze('W_U') with a tied head", lambda: TIED.freeze("W_U"), "W_U")

# ---- train ------------------------------------------------------------------------------------------
for bad in ("mse", "", None, "Squared"):
    add(f"mlm_loss(kind={bad!r})", lambda b=bad: mlm_loss(LOGITS, DOCS, SEL, b), "kind")
    add(f"train(loss={bad!r})", train_with(loss=bad), "loss")
add("mlm_loss(logits 2-D)", lambda: mlm_loss(torch.zeros(2, 4), DOCS, SEL), "logits")
add("mlm_loss(logits list)", lambda: mlm_loss(LOGITS.tolist(), DOCS, SEL), "logits")
add("mlm_loss(targets float)", lambda: mlm_loss(LOGITS, DOCS.float(), SEL), "targets")
add("mlm_loss(targets wrong shape)", lambda: mlm_loss(LOGITS, DOCS[:, :3], SEL), "targets")
add("mlm_loss(targets id = D)", lambda: mlm_loss(LOGITS, torch.full((2, 4), D), SEL), "targets")
add("mlm_loss(targets negative)", lambda: mlm_loss(LOGITS, -DOCS - 1, SEL), "targets")
for bad in (0, -1, 1.5, "10", None):
    add(f"train(steps={bad!r})", train_with(steps=bad), "steps")
    add(f"train(batch_size={bad!r})", train_with(batch_size=bad), "batch_size")
for bad in (0, -4, 2.5):
    add(f"train(doc_len={bad!r})", train_with(doc_len=bad), "doc_len")
    add(f"train(probe_every={bad!r})", train_with(probe_every=bad), "probe_every")
add("train(topic model, doc_len=None)", train_with(doc_len=None), "doc_len")
for bad in ("adamw", "SGD", "", None):
    add(f"train(optimizer={bad!r})", train_with(optimizer=bad), "optimizer")
    add(f"make_optimizer(optimizer={bad!r})", lambda b=bad: make_optimizer([torch.nn.Parameter(torch.zeros(1))], b, 0.1),
        "optimizer")
for bad in (0, 0.0, -1.0, math.nan, math.inf, "0.1", True):
    add(f"train(lr={bad!r})", train_with(lr=bad), "lr")
for bad in (-1e-3, math.nan, math.inf, "0", True, None):
    add(f"train(l2={bad!r})", train_with(l2=bad), "l2")
for bad in (-1, 1.5, "a", 2**64):
    add(f"train(seed={bad!r})", train_with(seed=bad), "seed")
for label, bad in {"{'x': 3}": {"x": 3}, "{1: fn}": {1: lambda m: 0.0}, "[fn]": [lambda m: 0.0],
                   "'norm'": "norm"}.items():
    add(f"train(probes={label})", train_with(probes=bad), "probes")   # labels without addresses (xdist)
add("train(model vocabulary != topic model)", train_with(model=OneLayerTransformer(D + 1)), "num_tokens")
add("train(model='abc')", train_with(model="abc"), "model")
add("train(model=torch.nn.Linear)", train_with(model=torch.nn.Linear(2, 2)), "model")
add("train(everything frozen)", train_with(model=OneLayerTransformer(D).freeze("W_V")), "trainable")
add("History.probe('nope')", lambda: History().probe("nope"), "nope")
for bad in (0, -3, 2.5):
    add(f"History.smoothed_loss(window={bad!r})", lambda b=bad: History(loss=[1.0, 2.0]).smoothed_loss(b), "window")

# ---- probes -----------------------------------------------------------------------------------------
for label, bad in {"1-D matrix": np.zeros(4), "3-D matrix": np.zeros((4, 4, 4)), "(3, 3) for V=4": np.zeros((3, 3)),
                   "(4, 5)": np.zeros((4, 5)), "(6, 6) for V=4": np.zeros((6, 6))}.items():
    add(f"block_means({label})", lambda b=bad: block_means(b, TOPIC), "matrix")
    add(f"topic_contrasts({label})", lambda b=bad: topic_contrasts(b, TOPIC), "matrix")
for label, bad in {"2-D topic_of_word": np.zeros((2, 2), dtype=int), "empty topic_of_word": np.zeros(0, dtype=int)}.items():
    add(f"relation_masks({label})", lambda b=bad: relation_masks(b), "topic_of_word")
    add(f"attention_by_relation({label})", lambda b=bad: attention_by_relation(UNIFORM, DOCS, torch.as_tensor(b)),
        "topic_of_word")
add("block_means(matrix (1, 1), empty topic_of_word)", lambda: block_means(np.zeros((1, 1)), np.zeros(0, dtype=int)),
    "topic_of_word")
for label, bad in {"2-D pattern": UNIFORM[0], "pattern batch mismatch": UNIFORM[:1],
                   "pattern (2, 4, 3)": UNIFORM[:, :, :3], "4-D pattern (heads)": UNIFORM[:, None],
                   "list pattern": UNIFORM.tolist()}.items():
    add(f"attention_by_relation({label})", lambda b=bad: attention_by_relation(b, DOCS, TOPIC), "pattern")
for label, bad in {"float inputs": DOCS.float(), "inputs id > V": torch.tensor([[0, 1, 2, V + 1]] * 2),
                   "negative inputs": -DOCS, "list inputs": DOCS.tolist(), "1-D inputs": DOCS[0]}.items():
    add(f"attention_by_relation({label})", lambda b=bad: attention_by_relation(UNIFORM, b, TOPIC), "inputs")

# ---- utils ------------------------------------------------------------------------------------------
for bad in (-1, 2**64, 1.5, "0", None, True):
    add(f"seed_everything({bad!r})", lambda b=bad: utils.seed_everything(b, deterministic=False), "seed")
    add(f"make_generator({bad!r})", lambda b=bad: utils.make_generator(b), "seed")
for bad in (0, -1, 1.5, "2"):
    add(f"setup_notebook(threads={bad!r})", lambda b=bad: utils.setup_notebook(0, threads=b), "threads")
for bad in (0, -1, 0.5, True, "1"):
    add(f"check_positive_int(x={bad!r})", lambda b=bad: utils.check_positive_int("x_arg", b), "x_arg")
for bad in (-0.5, 1.5, math.nan, "0.5", None):
    add(f"check_probability(p={bad!r})", lambda b=bad: utils.check_probability("p_arg", b), "p_arg")
add("check_masking(keep 0.9 + random 0.2)", lambda: utils.check_masking(0.1, 0.9, 0.2), "keep_prob")

# ---- the test -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=[c.label for c in CASES])
def test_bad_input_raises_value_error_naming_the_argument(case):
    with pytest.raises(ValueError) as info:
        case.call()
    message = str(info.value)
    assert case.argument in message, message
    if case.shown is not None:
        assert case.shown in message, message


def test_the_case_list_covers_every_module():
    prefixes = ("SimplifiedTopicModel", "LDATopicModel", "sample", "bert_mask", "check_docs", "OneLayerTransformer",
                "TwoLayerTransformer", "run_with_cache", "attention_pattern", "key_visibility", "freeze", "mlm_loss",
                "train", "make_optimizer", "History", "block_means", "relation_masks", "attention_by_relation",
                "topic_contrasts", "seed_everything", "make_generator", "setup_notebook", "check_positive_int",
                "check_probability", "check_masking")
    for prefix in prefixes:
        assert any(c.label.startswith(prefix) for c in CASES), prefix


if __name__ == "__main__":  # print the list of bad inputs for the report
    for c in CASES:
        print(f"- {c.label}  ->  ValueError naming {c.argument!r}")
    print(f"{len(CASES)} cases")
