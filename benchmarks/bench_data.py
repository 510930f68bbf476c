"""Benchmark 3: data generation and masking throughput (tokens per second).

Compares the package's vectorised samplers with a straightforward per-token Python
implementation written below (the way one would write the generative story by hand:
one loop over documents, one over tokens, Python's ``random`` module):

* ``simplified + bert_mask``: :class:`topicmech.data.SimplifiedTopicModel` (T = 10,
  v = 10, tau = 2) then :func:`topicmech.data.bert_mask` (15% / 10% / 10%);
* ``LDA``: :class:`topicmech.data.LDATopicModel` (T = 10, v = 10, alpha = 0.1);
* ``LDA + bert_mask``.

    python benchmarks/bench_data.py [--runs 5]
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

T, v, TAU, ALPHA, N = 10, 10, 2, 0.1, 150
P_M, P_C, P_R = 0.15, 0.1, 0.1


# ---- the per-token reference ----------------------------------------------------------


def ref_mask(doc: list[int], V: int, rng: random.Random) -> tuple[list[int], list[bool]]:
    inputs, selected = [], []
    for w in doc:
        if rng.random() < P_M:
            u = rng.random()
            if u < P_C:
                inputs.append(w)
            elif u < P_C + P_R:
                inputs.append(rng.randrange(V))
            else:
                inputs.append(V)  # [MASK]
            selected.append(True)
        else:
            inputs.append(w)
            selected.append(False)
    return inputs, selected


def ref_simplified(num_docs: int, doc_len: int, rng: random.Random, mask: bool = True) -> list:
    V = T * v
    out = []
    for _ in range(num_docs):
        topics = rng.sample(range(T), TAU)
        doc = []
        for _ in range(doc_len):
            t = rng.choice(topics)
            doc.append(t * v + rng.randrange(v))
        out.append(ref_mask(doc, V, rng) if mask else doc)
    return out


def ref_lda(num_docs: int, doc_len: int, rng: random.Random, mask: bool = False) -> list:
    V = T * v
    out = []
    for _ in range(num_docs):
        g = [rng.gammavariate(ALPHA, 1.0) for _ in range(T)]
        s = sum(g)
        theta = [x / s for x in g] if s > 0 else [1.0 / T] * T
        doc = []
        for _ in range(doc_len):
            t = rng.choices(range(T), weights=theta)[0]
            doc.append(t * v + rng.randrange(v))
        out.append(ref_mask(doc, V, rng) if mask else doc)
    return out


def measure(runs: int, ref_docs: int, vec_docs: int) -> list[dict]:
    import torch

    import topicmech as tm

    torch.set_num_threads(1)
    stm = tm.SimplifiedTopicModel(T, v, TAU)
    lda = tm.LDATopicModel(T, v, ALPHA)
    V = T * v

    def vec_simplified() -> None:
        docs = stm.sample(vec_docs, N, seed=1)
        tm.bert_mask(docs, V, tm.Masking(P_M, P_C, P_R), seed=2)

    def vec_lda() -> None:
        lda.sample(vec_docs, N, seed=1)

    def vec_lda_mask() -> None:
        tm.bert_mask(lda.sample(vec_docs, N, seed=1), V, tm.Masking(P_M, P_C, P_R), seed=2)

    cases = [
        ("simplified + bert_mask", vec_simplified, lambda: ref_simplified(ref_docs, N, random.Random(0))),
        ("LDA", vec_lda, lambda: ref_lda(ref_docs, N, random.Random(0))),
        ("LDA + bert_mask", vec_lda_mask, lambda: ref_lda(ref_docs, N, random.Random(0), mask=True)),
    ]
    out = []
    for name, vec, ref in cases:
        tv = C.repeat(vec, runs)
        tr = C.repeat(ref, max(3, runs // 2), warmup=0)
        row = {"case": name}
        for impl, t, docs in (("package", tv, vec_docs), ("per-token Python", tr, ref_docs)):
            tokens = docs * N
            row[impl] = {"tokens": tokens, "tokens_per_s": C.summary([tokens / w for w in t["wall_s"]["runs"]]), **t}
        row["speedup"] = row["package"]["tokens_per_s"]["median"] / row["per-token Python"]["tokens_per_s"]["median"]
        out.append(row)
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--ref-docs", type=int, default=200, help="documents per run of the per-token reference")
    ap.add_argument("--docs", type=int, default=10_000, help="documents per run of the package samplers")
    args = ap.parse_args(argv)
    load_before = C.load_average()
    results = measure(args.runs, args.ref_docs, args.docs)
    info = C.machine(threads=1)
    info["load_average_before"] = load_before
    payload = {"benchmark": "data", "machine": info, "doc_len": N, "results": results}
    path = C.write_results("data", payload)
    rows = []
    for r in results:
        for impl in ("package", "per-token Python"):
            t = r[impl]["tokens_per_s"]
            rows.append([r["case"], impl, t["median"], t["min"], t["max"],
                         f"{r['speedup']:.0f}x" if impl == "package" else ""])
    print(f"\nData generation and masking, documents of {N} tokens (tokens per second: median, min, max)")
    print(C.describe(info))
    print(C.table(rows, ["case", "implementation", "tokens/s med", "min", "max", "speed-up"]))
    print(f"written to {path.relative_to(C.ROOT)}")
    return payload


if __name__ == "__main__":
    main()
