"""The optimal tied attention over a grid of tau and T (the authors' stage-2 result).

For each setting and both key-visibility conventions this computes the optimum of the
tied-score family (:func:`topicmech.theory.tied_attention_optimum`) and the
authors' weighted ratio ``((v - 1) / v) alpha + beta / v``:

* over tau in {2, 3, 4} at T = 8, and over T in {4, 6, 8, 10} at tau = 2 (v = 3, N = 32,
  masks 15% / 10% / 10%);
* **stability in the sample size**: nested samples of 50k, 100k and 200k documents
  (seed 0); the location counts as stable when the ratio moves by less than ``TOL``
  (relative) from 100k to 200k documents;
* **independent samples**: seeds 0-3 at 200k documents; the reported value is their mean,
  with the standard error from their spread, next to the sandwich standard error that the
  package reports for one sample;
* the constants ``lambda_1 = min ratio / tau`` and ``lambda_2 = max ratio / T`` that make
  the band ``(lambda_1 tau, lambda_2 T)`` contain every measured ratio, per convention;
* ``--part n``: longer documents (N = 64, 128) at T = 8, tau in {2, 3, 4}, one sample of
  50k documents each (sandwich standard errors), merged into the stored file.

Results go to ``benchmarks/results/tied_attention.json`` (the book's chapter 5 reads them).
About 10-20 minutes on one busy core; ``--quick`` runs a much smaller version.

    python benchmarks/tied_attention_grid.py [--quick]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

V_WORDS, DOC_LEN = 3, 32
TAU_GRID = [(8, 2), (8, 3), (8, 4)]          # (T, tau)
T_GRID = [(4, 2), (6, 2), (8, 2), (10, 2)]
TOL = 0.03                                    # relative stability of the ratio, 100k -> 200k documents
N_SWEEP = dict(num_topics=8, taus=[2, 3, 4], doc_lens=[64, 128], num_docs=50_000, seed=0)


def _opt(T: int, tau: int, si: bool, seed: int, num_docs: int, doc_len: int = DOC_LEN) -> dict:
    from topicmech.setting import Setting
    from topicmech.theory import tied_attention_optimum

    t0 = time.perf_counter()
    o = tied_attention_optimum(Setting(T, V_WORDS, tau, doc_len, attend_to_masked=si), seed=seed, num_docs=num_docs)
    d = o.to_dict()
    d["seconds"] = time.perf_counter() - t0
    return d


def measure_setting(T: int, tau: int, si: bool, sizes: list[int], seeds: list[int]) -> dict:
    import numpy as np

    nested = [_opt(T, tau, si, seeds[0], n) for n in sizes]
    runs = [nested[-1]] + [_opt(T, tau, si, s, sizes[-1]) for s in seeds[1:]]
    r = np.array([x["weighted_ratio"] for x in runs])
    a = np.array([x["alpha"] for x in runs])
    b = np.array([x["beta"] for x in runs])
    k = len(runs)
    change = abs(nested[-1]["weighted_ratio"] - nested[-2]["weighted_ratio"]) / nested[-1]["weighted_ratio"]
    return {
        "num_topics": T, "topics_per_doc": tau, "attend_to_masked": si,
        "weighted_ratio": float(r.mean()),
        "weighted_ratio_se": float(r.std(ddof=1) / math.sqrt(k)),
        "alpha": float(a.mean()), "alpha_sd": float(a.std(ddof=1)),
        "beta": float(b.mean()), "beta_sd": float(b.std(ddof=1)),
        "weighted_ratio_sd": float(r.std(ddof=1)),
        "sandwich_ratio_se_one_sample": float(np.mean([x["weighted_ratio_se"] for x in runs])),
        "gain": float(np.mean([x["gain"] for x in runs])),
        "gain_se_one_sample": float(np.mean([x["gain_se"] for x in runs])),
        "loss": float(np.mean([x["loss"] for x in runs])),
        "uniform_loss_exact": runs[0]["uniform_loss_exact"],
        "any_at_bound": bool(any(x["at_bound"] for x in nested + runs)),
        "nested_ratios": {str(n): x["weighted_ratio"] for n, x in zip(sizes, nested)},
        "relative_change_last_doubling": float(change),
        "stable": bool(change < TOL),
        "runs": runs,
        "nested": nested,
    }


def band(rows: list[dict]) -> dict:
    """Constants lambda_1 = min r/tau, lambda_2 = max r/T and what the band then says."""
    r_tau = [x["weighted_ratio"] / x["topics_per_doc"] for x in rows]
    r_T = [x["weighted_ratio"] / x["num_topics"] for x in rows]
    lam1, lam2 = min(r_tau), max(r_T)
    per = []
    for x in rows:
        lo, hi = lam1 * x["topics_per_doc"], lam2 * x["num_topics"]
        per.append({"num_topics": x["num_topics"], "topics_per_doc": x["topics_per_doc"],
                    "lower": lo, "ratio": x["weighted_ratio"], "upper": hi,
                    "nonempty": bool(lo < hi), "inside": bool(lo <= x["weighted_ratio"] <= hi),
                    "width_factor": hi / lo})
    return {"lambda_1": lam1, "lambda_2": lam2, "lambda_1_over_lambda_2": lam1 / lam2,
            "ratio_over_tau": r_tau, "ratio_over_T": r_T,
            "all_nonempty": all(p["nonempty"] for p in per), "all_inside": all(p["inside"] for p in per),
            "per_setting": per}


def monotone(rows: list[dict], key: str) -> list[dict]:
    """Consecutive differences of the ratio along ``key`` with their z-scores."""
    rows = sorted(rows, key=lambda x: x[key])
    out = []
    for x, y in zip(rows, rows[1:]):
        d = y["weighted_ratio"] - x["weighted_ratio"]
        se = math.hypot(x["weighted_ratio_se"], y["weighted_ratio_se"])
        out.append({"from": x[key], "to": y[key], "difference": d, "se": se, "z": d / se if se > 0 else math.inf})
    return out


def n_sweep() -> dict:
    """The optimum at longer documents (one sample each, sandwich standard errors)."""
    out = {}
    for si in (False, True):
        name = "visible" if si else "hidden"
        rows = []
        for N in N_SWEEP["doc_lens"]:
            for tau in N_SWEEP["taus"]:
                d = _opt(N_SWEEP["num_topics"], tau, si, N_SWEEP["seed"], N_SWEEP["num_docs"], doc_len=N)
                rows.append(d)
                print(f"{name:7s} N={N:3d} T={d['num_topics']} tau={tau}  ratio={d['weighted_ratio']:.3f} "
                      f"+- {d['weighted_ratio_se']:.3f}  alpha={d['alpha']:.3f}  beta={d['beta']:.3f}", flush=True)
        out[name] = rows
    return {"setting": N_SWEEP, "results": out}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small samples (a smoke test, a few minutes)")
    parser.add_argument("--part", choices=["all", "grid", "n"], default="all",
                        help="'n' adds the longer-document sweep to the stored results")
    args = parser.parse_args()
    import json

    import torch

    torch.set_num_threads(1)
    name_out = "tied_attention" + ("_quick" if args.quick else "")
    if args.part == "n":
        path = C.RESULTS / f"{name_out}.json"
        payload = json.loads(path.read_text())
        t0 = time.perf_counter()
        payload["longer_documents"] = n_sweep()
        payload["longer_documents"]["wall_s"] = time.perf_counter() - t0
        print(f"wrote {C.write_results(name_out, payload)}")
        return
    sizes = [10_000, 20_000, 40_000] if args.quick else [50_000, 100_000, 200_000]
    seeds = [0, 1, 2, 3]
    settings = sorted(set(TAU_GRID + T_GRID))
    t_start = time.perf_counter()
    results = {}
    for si in (False, True):
        name = "visible" if si else "hidden"
        rows = []
        for T, tau in settings:
            row = measure_setting(T, tau, si, sizes, seeds)
            rows.append(row)
            print(f"{name:7s} T={T:2d} tau={tau}  ratio={row['weighted_ratio']:.3f} +- {row['weighted_ratio_se']:.3f}"
                  f" (sandwich {row['sandwich_ratio_se_one_sample'] / 2:.3f})  alpha={row['alpha']:.3f}"
                  f"  beta={row['beta']:.3f}  change={row['relative_change_last_doubling']:.4f}", flush=True)
        tau_rows = [x for x in rows if (x["num_topics"], x["topics_per_doc"]) in TAU_GRID]
        T_rows = [x for x in rows if (x["num_topics"], x["topics_per_doc"]) in T_GRID]
        results[name] = {
            "attend_to_masked": si,
            "settings": rows,
            "band": band(rows),
            "steps_in_tau": monotone(tau_rows, "topics_per_doc"),
            "steps_in_T": monotone(T_rows, "num_topics"),
        }
    payload = {
        "benchmark": "tied_attention_grid",
        "machine": C.machine(threads=1),
        "setting": {"words_per_topic": V_WORDS, "doc_len": DOC_LEN, "mask_prob": 0.15, "keep_prob": 0.1,
                    "random_prob": 0.1, "tau_grid": TAU_GRID, "T_grid": T_GRID, "sizes": sizes, "seeds": seeds,
                    "stability_tolerance": TOL, "quick": args.quick},
        "results": results,
        "wall_s": time.perf_counter() - t_start,
    }
    for name, res in results.items():
        bd = res["band"]
        print(f"{name}: lambda_1 = {bd['lambda_1']:.3f}, lambda_2 = {bd['lambda_2']:.3f}, "
              f"band non-empty everywhere: {bd['all_nonempty']}")
    if args.part == "all":
        payload["longer_documents"] = n_sweep()
    path = C.write_results(name_out, payload)
    print(f"wrote {path} in {payload['wall_s']:.0f} s")


if __name__ == "__main__":
    main()
