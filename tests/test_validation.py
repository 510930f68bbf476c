"""Every public function and constructor refuses bad input with a ValueError naming the argument.

Each case is (label, call, argument, shown): calling ``call()`` must raise ``ValueError``
whose message contains ``argument`` (and ``shown``, the offending value, when given). One or
two bad values per argument: a wrong type, a value out of range, a non-finite float.
Run ``python tests/test_validation.py`` to print the list of bad inputs tried.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pytest
import torch

from topicmech import fast, notebook, utils
from topicmech.data import LDATopicModel, SimplifiedTopicModel, bert_mask, check_docs
from topicmech.losses import mlm_loss
from topicmech.model import OneLayerTransformer, TwoLayerTransformer, key_visibility
from topicmech.probes import attention_by_relation, block_means, relation_masks, topic_contrasts
from topicmech.setting import Masking, Setting
from topicmech.train import History, train

TM = SimplifiedTopicModel(2, 2, 2)           # V = 4, D = 5
V, D = TM.vocab_size, TM.num_tokens
DOCS = torch.tensor([[0, 1, 2, 3], [3, 2, 1, 0]])
SEL = torch.tensor([[True, False, False, True], [False, True, False, False]])
TOPIC = TM.topic_of_word
MODEL = OneLayerTransformer(D, attend_to_masked=False)
LEARNED = OneLayerTransformer(D, attention="learned", attend_to_masked=False)
TIED = OneLayerTransformer(D, 3, embedding="learned", head="tied", attend_to_masked=True)
TWO = TwoLayerTransformer(D, 4, attend_to_masked=True)
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
    model = args.pop("model", OneLayerTransformer(D, attend_to_masked=True))
    return lambda: train(model, data, **args)


CASES: list[Case] = []


def add(label, call, argument, shown=None):
    CASES.append(Case(label, call, argument, shown))


def each(label, make, argument, bads, show=False):
    """One case per bad value: ``make(bad)`` returns the call."""
    for bad in bads:
        add(f"{label}{'' if label.endswith('(') else '='}{bad!r})", make(bad), argument, repr(bad) if show else None)


# ---- data --------------------------------------------------------------------------------------
each("SimplifiedTopicModel(num_topics", lambda b: lambda: SimplifiedTopicModel(b, 2, 1), "num_topics", (0,), True)
each("LDATopicModel(num_topics", lambda b: lambda: LDATopicModel(b, 2, 0.1), "num_topics", (1.5,), True)
each("SimplifiedTopicModel(words_per_topic", lambda b: lambda: SimplifiedTopicModel(2, b, 1), "words_per_topic",
     (0,), True)
each("LDATopicModel(words_per_topic", lambda b: lambda: LDATopicModel(2, b, 0.1), "words_per_topic", (2.5,), True)
each("SimplifiedTopicModel(T=2, topics_per_doc", lambda b: lambda: SimplifiedTopicModel(2, 2, b), "topics_per_doc",
     (3,), True)
each("LDATopicModel(alpha", lambda b: lambda: LDATopicModel(2, 2, b), "alpha", (0.0, math.nan, "0.1"))
each("sample(num_docs", lambda b: lambda: TM.sample(b, 3), "num_docs", (0,), True)
each("sample(doc_len", lambda b: lambda: TM.sample(2, b), "doc_len", (2.5,), True)
each("sample(seed", lambda b: lambda: TM.sample(2, 3, seed=b), "seed", ("a",))
each("LDATopicModel.sample(seed", lambda b: lambda: LDATopicModel(2, 2, 0.5).sample(2, 3, seed=b), "seed", (2**64,))
each("bert_mask(seed", lambda b: lambda: bert_mask(DOCS, V, seed=b), "seed", (1.5,))
add("bert_mask(float docs)", lambda: bert_mask(DOCS.float(), V), "docs")
add("bert_mask(docs with id = V ([MASK]))", lambda: bert_mask(torch.tensor([[0, V]]), V), "docs")
add("check_docs(docs with negative id)", lambda: check_docs(torch.tensor([[0, -1]]), V), "docs")
add("check_docs(string docs)", lambda: check_docs("0 1 2", V), "docs")
add("train(data=ragged list docs)", train_with(data=[[0, 1], [2]]), "data")
add("train(data=empty (0, 4))", train_with(data=torch.zeros(0, 4, dtype=torch.long)), "data")
each("bert_mask(vocab_size", lambda b: lambda: bert_mask(DOCS, b), "vocab_size", (None,))
for name, bads in {"mask_prob": (-0.1, math.inf), "keep_prob": (math.nan, "0.1"), "random_prob": (1.5, True)}.items():
    each(f"Masking({name}", lambda b, n=name: lambda: Masking(**{n: b}), name, bads)
add("Masking(keep_prob=0.6, random_prob=0.5)", lambda: Masking(keep_prob=0.6, random_prob=0.5), "keep_prob")
add("Masking(keep_prob=0.6, random_prob=0.5) names random_prob", lambda: Masking(keep_prob=0.6, random_prob=0.5),
    "random_prob")
for label, bad in {"None": None, "dict": dict(mask_prob=0.15), "tuple": (0.15, 0.1, 0.1), "float": 0.15}.items():
    add(f"bert_mask(masking={label})", lambda b=bad: bert_mask(DOCS, V, b), "masking")
    add(f"train(masking={label})", train_with(masking=bad), "masking")

# ---- model ----------------------------------------------------------------------------------------
each("OneLayerTransformer(num_tokens", lambda b: lambda: OneLayerTransformer(b, attend_to_masked=True), "num_tokens", (0,))
each("TwoLayerTransformer(num_tokens", lambda b: lambda: TwoLayerTransformer(b, attend_to_masked=True), "num_tokens", (True,))
each("OneLayerTransformer(d_model", lambda b: lambda: OneLayerTransformer(D, b, embedding="learned", head="tied",
                                                                            attend_to_masked=True),
     "d_model", (2.5,))
each("TwoLayerTransformer(d_model", lambda b: lambda: TwoLayerTransformer(D, b, attend_to_masked=True), "d_model", (0,))
add("OneLayerTransformer(one_hot, d_model != D)", lambda: OneLayerTransformer(D, 3, head="learned", attend_to_masked=True), "d_model")
add("OneLayerTransformer(identity head, d_model != D)",
    lambda: OneLayerTransformer(D, 3, embedding="learned", head="identity", attend_to_masked=True), "d_model")
for arg, bad in [("embedding", "onehot"), ("attention", None), ("value", 1), ("head", "Tied")]:
    add(f"OneLayerTransformer({arg}={bad!r})", lambda a=arg, b=bad: OneLayerTransformer(D, **{a: b}, attend_to_masked=True), arg, repr(bad))
each("OneLayerTransformer(attend_to_masked", lambda b: lambda: OneLayerTransformer(D, attend_to_masked=b),
     "attend_to_masked", (1,))
each("TwoLayerTransformer(attend_to_masked", lambda b: lambda: TwoLayerTransformer(D, 4, attend_to_masked=b),
     "attend_to_masked", ("yes",))
each("OneLayerTransformer(init_scale", lambda b: lambda: OneLayerTransformer(D, init_scale=b, attend_to_masked=True), "init_scale",
     (-1.0, math.nan))
each("TwoLayerTransformer(init_scale", lambda b: lambda: TwoLayerTransformer(D, 4, init_scale=b, attend_to_masked=True), "init_scale",
     ("0.1",))
each("OneLayerTransformer(seed", lambda b: lambda: OneLayerTransformer(D, seed=b, attend_to_masked=True), "seed", (2**64,))
each("TwoLayerTransformer(seed", lambda b: lambda: TwoLayerTransformer(D, 4, seed=b, attend_to_masked=True), "seed", ("a",))
each("TwoLayerTransformer(num_heads", lambda b: lambda: TwoLayerTransformer(D, 4, num_heads=b, attend_to_masked=True), "num_heads", (0,))
each("TwoLayerTransformer(num_layers", lambda b: lambda: TwoLayerTransformer(D, 4, num_layers=b, attend_to_masked=True), "num_layers", (-1,))
add("TwoLayerTransformer(d_model=4, num_heads=3)", lambda: TwoLayerTransformer(D, 4, num_heads=3, attend_to_masked=True), "num_heads")
for label, call in {"OneLayerTransformer[uniform].forward(float inputs)": lambda: MODEL(DOCS.float() + 0.5),
                    "OneLayerTransformer[learned].forward(inputs with id = D)": lambda: LEARNED(torch.tensor([[0, D]])),
                    "run_with_cache(1-D inputs)": lambda: MODEL.run_with_cache(torch.tensor([0, 1])),
                    "attention_pattern(inputs with negative id)": lambda: MODEL.attention_pattern(torch.tensor([[-1, 0]])),
                    "TwoLayerTransformer.forward(list inputs)": lambda: TWO([[0, 1]])}.items():
    add(label, call, "inputs")
for label, call in {"OneLayerTransformer[uniform].forward(int selected)": lambda: MODEL(DOCS, SEL.long()),
                    "OneLayerTransformer[learned].forward(selected of shape (2, 5))":
                        lambda: LEARNED(DOCS, torch.zeros(2, 5, dtype=torch.bool)),
                    "run_with_cache(uint8 selected)": lambda: MODEL.run_with_cache(DOCS, SEL.to(torch.uint8)),
                    "TwoLayerTransformer.forward(list selected)": lambda: TWO(DOCS, SEL.tolist()),
                    "key_visibility(float selected)": lambda: key_visibility(SEL.float(), DOCS.shape, attend_to_masked=False),
                    "mlm_loss(selected of shape (4,))": lambda: mlm_loss(LOGITS, DOCS, torch.zeros(4, dtype=torch.bool)),
                    }.items():
    add(label, call, "selected")
add("key_visibility(attend_to_masked='no')", lambda: key_visibility(SEL, SEL.shape, attend_to_masked="no"), "attend_to_masked")
for bad in ("W_X", "W_U_fixed"):
    add(f"freeze({bad!r})", lambda b=bad: OneLayerTransformer(D, attend_to_masked=True).freeze(b), repr(bad))
add("freeze('W_U') with a tied head", lambda: TIED.freeze("W_U"), "W_U")

# ---- train ------------------------------------------------------------------------------------------
each("mlm_loss(kind", lambda b: lambda: mlm_loss(LOGITS, DOCS, SEL, b), "kind", ("mse",))
each("train(loss", lambda b: train_with(loss=b), "loss", ("Squared",))
add("mlm_loss(logits 2-D)", lambda: mlm_loss(torch.zeros(2, 4), DOCS, SEL), "logits")
add("mlm_loss(targets float)", lambda: mlm_loss(LOGITS, DOCS.float(), SEL), "targets")
add("mlm_loss(targets wrong shape)", lambda: mlm_loss(LOGITS, DOCS[:, :3], SEL), "targets")
add("mlm_loss(targets id = D)", lambda: mlm_loss(LOGITS, torch.full((2, 4), D), SEL), "targets")
each("train(steps", lambda b: train_with(steps=b), "steps", (0,))
each("train(data", lambda b: train_with(data=b, doc_len=None), "data", (torch.zeros(2, 0, dtype=torch.long),))
each("train(batch_size", lambda b: train_with(batch_size=b), "batch_size", (1.5,))
each("train(doc_len", lambda b: train_with(doc_len=b), "doc_len", (-4, None))
each("train(probe_every", lambda b: train_with(probe_every=b), "probe_every", (0,))
each("train(optimizer", lambda b: train_with(optimizer=b), "optimizer", ("adamw",))
each("TorchOptimKernels(optimizer", lambda b: lambda: fast.TorchOptimKernels([torch.nn.Parameter(torch.zeros(1))], b, 0.1),
     "optimizer", ("SGD",))
each("train(lr", lambda b: train_with(lr=b), "lr", (0.0, math.nan))
each("train(l2", lambda b: train_with(l2=b), "l2", (-1e-3,))
each("train(seed", lambda b: train_with(seed=b), "seed", (-1,))
for label, bad in {"[fn]": [lambda m: 0.0]}.items():
    add(f"train(probes={label})", train_with(probes=bad), "probes")   # labels without addresses (xdist)
add("train(model vocabulary != topic model)", train_with(model=OneLayerTransformer(D + 1, attend_to_masked=True)), "num_tokens")
add("train(model='abc')", train_with(model="abc"), "model")
add("train(model=torch.nn.Linear)", train_with(model=torch.nn.Linear(2, 2)), "model")
add("train(everything frozen)", train_with(model=OneLayerTransformer(D, attend_to_masked=True).freeze("W_V")), "trainable")
add("History.probe('nope')", lambda: History().probe("nope"), "nope")
each("History.smoothed_loss(window", lambda b: lambda: History(loss=[1.0, 2.0]).smoothed_loss(b), "window", (0,))

# ---- probes -----------------------------------------------------------------------------------------
add("block_means((3, 3) for V=4)", lambda: block_means(np.zeros((3, 3)), TOPIC), "matrix")
add("topic_contrasts((4, 5))", lambda: topic_contrasts(np.zeros((4, 5)), TOPIC), "matrix")
add("relation_masks(2-D topic_of_word)", lambda: relation_masks(np.zeros((2, 2), dtype=int)), "topic_of_word")
add("attention_by_relation(empty topic_of_word)",
    lambda: attention_by_relation(UNIFORM, DOCS, torch.zeros(0, dtype=torch.long)), "topic_of_word")
add("block_means(matrix (1, 1), empty topic_of_word)", lambda: block_means(np.zeros((1, 1)), np.zeros(0, dtype=int)),
    "topic_of_word")
for label, bad in {"2-D pattern": UNIFORM[0], "list pattern": UNIFORM.tolist()}.items():
    add(f"attention_by_relation({label})", lambda b=bad: attention_by_relation(b, DOCS, TOPIC), "pattern")
for label, bad in {"float inputs": DOCS.float(), "inputs id > V": torch.tensor([[0, 1, 2, V + 1]] * 2)}.items():
    add(f"attention_by_relation({label})", lambda b=bad: attention_by_relation(UNIFORM, b, TOPIC), "inputs")

# ---- utils ------------------------------------------------------------------------------------------
each("seed_everything(", lambda b: lambda: utils.seed_everything(b, deterministic=False), "seed", (None,))
each("make_generator(", lambda b: lambda: utils.make_generator(b), "seed", (2**64, 1.5))
each("setup_notebook(threads", lambda b: lambda: notebook.setup_notebook(0, threads=b), "threads", (0,))
each("check_positive_int(x", lambda b: lambda: utils.check_positive_int("x_arg", b), "x_arg", (0, True))
each("check_probability(p", lambda b: lambda: utils.check_probability("p_arg", b), "p_arg", (math.nan, "0.5"))
add("check_masking(keep 0.9 + random 0.2)", lambda: utils.check_masking(0.1, 0.9, 0.2), "keep_prob")

# ---- a Setting carried into the model and the training loop --------------------------------------
SET = Setting(2, 2, 2, 4, attend_to_masked=True)     # the size of TM, N = 4
each("train(setting", lambda b: train_with(setting=b, doc_len=None), "setting", ("T=2", 5))
add("train(setting with doc_len=inf)", train_with(setting=SET.replace(doc_len=math.inf), doc_len=None), "doc_len",
    "inf")
add("train(doc_len=5, setting N=4)", train_with(setting=SET, doc_len=5), "doc_len", "5")
add("train(masking p_m=0.3, setting BERT)", train_with(setting=SET, doc_len=None, masking=Masking(0.3)), "masking",
    "0.3")
add("train(model hidden keys, setting visible)",
    train_with(setting=SET, doc_len=None, model=OneLayerTransformer(D, attend_to_masked=False)), "attend_to_masked")
add("train(model D=7, setting D=5)",
    train_with(setting=SET, doc_len=None, model=OneLayerTransformer(7, attend_to_masked=True)), "num_tokens", "7")
add("train(data of length 3, setting N=4)", train_with(setting=SET, doc_len=None, data=DOCS[:, :3]), "doc_len", "3")
add("OneLayerTransformer.from_setting(setting='T=2')", lambda: OneLayerTransformer.from_setting("T=2"), "setting")
add("OneLayerTransformer.from_setting(attend_to_masked=False, setting True)",
    lambda: OneLayerTransformer.from_setting(SET, attend_to_masked=False), "attend_to_masked", "False")
add("OneLayerTransformer.from_setting(num_tokens=7, setting D=5)",
    lambda: OneLayerTransformer.from_setting(SET, num_tokens=7), "num_tokens", "7")

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
                "train", "TorchOptimKernels", "History", "block_means", "relation_masks", "attention_by_relation",
                "topic_contrasts", "seed_everything", "make_generator", "setup_notebook", "check_positive_int",
                "check_probability", "check_masking", "Masking")
    for prefix in prefixes:
        assert any(c.label.startswith(prefix) for c in CASES), prefix


if __name__ == "__main__":  # print the list of bad inputs for the report
    for c in CASES:
        print(f"- {c.label}  ->  ValueError naming {c.argument!r}")
    print(f"{len(CASES)} cases")
