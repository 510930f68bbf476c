"""Benchmark 4: the exact stage-1 optimum as the vocabulary grows, against training.

* ``algebra``: :func:`topicmech.theory.value_block_coefficients`, the optimum through the
  symmetry algebra span{I, B, J} (scalar and 2x2 operations), V = 10^2 ... 10^5;
* ``dense``: :func:`topicmech.theory.optimal_value_matrix`, exact moments and a dense
  (D, D) solve, up to V = 2000 (time and memory grow as V^3 and V^2);
* ``training``: W^V trained by plain SGD (squared loss, batch 256, fresh documents every
  step, the fast path :func:`topicmech.train.train_uniform`) from W^V = 0 until the three
  block means and the [MASK] column mean are all within 0.01 of the exact optimum, at
  V = 100.

Setting: the simplified topic model with T = 10 topics, tau = 2 topics per document,
v = V / T words per topic; masks 15% / 10% / 10%, every position a key.

    python benchmarks/bench_theory.py [--runs 5]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

T, TAU, N = 10, 2, 150
TRAIN = dict(V=100, doc_len=50, batch_size=256, lr=20.0, check_every=50, tolerance=0.01, max_steps=20_000)


def _max_block_error(o, b) -> float:
    return max(abs(o.diag - b.diag), abs(o.same_topic - b.same_topic), abs(o.diff_topic - b.diff_topic),
               abs(o.mask_col - b.mask_col))


def measure(runs: int, dense_max: int, algebra_sizes: list[int], dense_sizes: list[int]) -> dict:
    import numpy as np
    import torch

    import topicmech as tm
    from topicmech import theory

    torch.set_num_threads(1)
    algebra, dense = [], []
    for V in algebra_sizes:
        setting = tm.Setting(T, V // T, TAU, N, attend_to_masked=True)
        t = C.repeat(lambda: theory.value_block_coefficients(setting), runs=max(runs, 20), warmup=2)
        algebra.append({"V": V, **t})
    for V in [s for s in dense_sizes if s <= dense_max]:
        n_runs = runs if V <= 500 else max(1, runs // 3)
        setting = tm.Setting(T, V // T, TAU, N, attend_to_masked=True)
        t = C.repeat(lambda: theory.optimal_value_matrix(setting), runs=n_runs, warmup=0)
        W = theory.optimal_value_matrix(setting)
        Wb = theory.block_matrix(theory.value_block_coefficients(setting), T, V // T)
        dense.append({"V": V, **t, "max_abs_diff_vs_algebra": float(np.max(np.abs(W - Wb))),
                      "matrix_mib": W.nbytes / 2**20})

    # training to the same accuracy, at a small vocabulary
    V, Nt = TRAIN["V"], TRAIN["doc_len"]
    v = V // T
    setting = tm.Setting(T, v, TAU, Nt, attend_to_masked=True)
    target = theory.value_block_coefficients(setting)
    t_alg = C.repeat(lambda: theory.value_block_coefficients(setting), runs=20, warmup=2)
    t_dense = C.repeat(lambda: theory.optimal_value_matrix(setting), runs=runs, warmup=0)
    stm = tm.SimplifiedTopicModel(T, v, TAU)
    train_runs = []
    for seed in range(max(1, min(runs, 3))):
        model = tm.OneLayerTransformer(stm.num_tokens, attention="uniform", value="learned", head="identity",
                                       init_scale=0.0, seed=seed, attend_to_masked=True)
        steps, err = 0, float("inf")
        w0, c0 = time.perf_counter(), time.process_time()
        while err > TRAIN["tolerance"] and steps < TRAIN["max_steps"]:
            tm.train.train_uniform(model, stm, steps=TRAIN["check_every"], batch_size=TRAIN["batch_size"], doc_len=Nt,
                               loss="squared", optimizer="sgd", lr=TRAIN["lr"], seed=1000 * seed + steps)
            steps += TRAIN["check_every"]
            learned = theory.orbit_means(model.W_V.detach().double().numpy(), T, v)
            err = _max_block_error(learned, target)
        train_runs.append({"seed": seed, "steps": steps, "wall_s": time.perf_counter() - w0,
                           "cpu_s": time.process_time() - c0, "final_error": err,
                           "reached": err <= TRAIN["tolerance"]})
    training = {"setting": {**TRAIN, "T": T, "tau": TAU}, "runs": train_runs,
                "wall_s": C.summary([r["wall_s"] for r in train_runs]),
                "steps": C.summary([r["steps"] for r in train_runs]),
                "algebra_same_setting": t_alg, "dense_same_setting": t_dense}
    return {"algebra": algebra, "dense": dense, "training": training}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--dense-max", type=int, default=2000, help="largest V for the dense solve")
    args = ap.parse_args(argv)
    load_before = C.load_average()
    res = measure(args.runs, args.dense_max, [10**2, 10**3, 10**4, 10**5], [100, 200, 500, 1000, 2000])
    info = C.machine(threads=1)
    info["load_average_before"] = load_before
    payload = {"benchmark": "theory", "machine": info, "setting": {"T": T, "tau": TAU, "doc_len": N}, **res}
    path = C.write_results("theory", payload)
    rows = [["algebra", r["V"], r["wall_s"]["median"], r["wall_s"]["min"], r["wall_s"]["max"], ""] for r in res["algebra"]]
    rows += [["dense", r["V"], r["wall_s"]["median"], r["wall_s"]["min"], r["wall_s"]["max"],
              f"{r['max_abs_diff_vs_algebra']:.1e}"] for r in res["dense"]]
    tr = res["training"]
    rows += [["algebra", TRAIN["V"], tr["algebra_same_setting"]["wall_s"]["median"],
              tr["algebra_same_setting"]["wall_s"]["min"], tr["algebra_same_setting"]["wall_s"]["max"], f"N={TRAIN['doc_len']}"],
             ["dense", TRAIN["V"], tr["dense_same_setting"]["wall_s"]["median"],
              tr["dense_same_setting"]["wall_s"]["min"], tr["dense_same_setting"]["wall_s"]["max"], f"N={TRAIN['doc_len']}"],
             ["SGD training", TRAIN["V"], tr["wall_s"]["median"], tr["wall_s"]["min"], tr["wall_s"]["max"],
              f"{tr['steps']['median']:.0f} steps"]]
    print(f"\nExact stage-1 optimum vs training (T = {T}, tau = {TAU}, N = {N} unless noted; seconds: median, min, max)")
    print(C.describe(info))
    print(C.table(rows, ["method", "V", "time med s", "min", "max", "note"]))
    print(f"written to {path.relative_to(C.ROOT)}")
    return payload


if __name__ == "__main__":
    main()
