"""Benchmark: the word-level masked language model of chapter 9 (:mod:`topicmech.realtext`), steps per second.

The Wikipedia sample's LDA tokens (20 topics, 2 passes), sequences of 128 tokens, batch 32, BERT
corruption, cross-entropy, Adam, the paper's one-layer one-head model with learned embeddings
(d = 64) and a tied head with a bias, in the theory's key convention, one torch thread. Timed at
vocabulary cuts of 300, 500 (the chapter's quick size) and 1,000 words, each two ways (median, min and
max of ``--runs`` timed runs after one warm-up, every run from a fresh model):

* ``train``: :func:`topicmech.realtext.train_word_mlm` without probes (the training loop alone);
* ``train + probes``: with the chapter's probes (the topic ratios and weight norms every 10 steps).

The step's cost grows with the square of the vocabulary (the loop forms the token-by-token score
matrix), so the table is the guide to the sizes the chapter can afford in quick mode.

    python benchmarks/bench_realtext.py [--runs 3] [--steps 100] [--sizes 300 500 1000]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

SETTING = dict(corpus="wikipedia", num_topics=20, lda_passes=2, seq_len=128, batch_size=32, d_model=64,
               lr=3e-3, init_scale=0.02, loss="cross_entropy", optimizer="adam", attend_to_masked=True)


def measure(threads: int, runs: int, steps: int, sizes: list[int]) -> list[dict]:
    import torch

    from topicmech import realtext as rt

    torch.set_num_threads(threads)
    out = []
    for size in sizes:
        docs, lda = rt.load_text("wikipedia", seq_len=SETTING["seq_len"], max_words=size)
        words = rt.topic_words(docs, lda)
        for how, probes in (("train", None), ("train + probes", words)):
            def loop(probes=probes) -> None:
                rt.train_word_mlm(docs, attend_to_masked=True, steps=steps, seed=0, word_topics=probes,
                                  probe_every=10 if probes is not None else None)

            out.append({"how": how, "max_words": size, "V": docs.vocab_size, "threads": threads, "steps": steps,
                        **C.repeat_steps(loop, runs, steps)})
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="timed runs per measurement (median, min, max)")
    ap.add_argument("--steps", type=int, default=100, help="optimisation steps per timed run")
    ap.add_argument("--sizes", type=int, nargs="+", default=[300, 500, 1000], help="vocabulary cuts (max_words)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    if args.runs < 1 or args.steps < 1 or min(args.sizes) < 2:
        raise SystemExit("--runs and --steps must be positive and every size at least 2")
    script = Path(__file__).resolve()
    load_before = C.load_average()
    results = C.run_worker(script, [str(args.threads), str(args.runs), str(args.steps), *map(str, args.sizes)],
                           env=C.threads_env(args.threads))["results"]
    info = C.machine(args.threads)
    info["load_average_before"] = load_before
    payload = {"benchmark": "realtext", "setting": SETTING, "machine": info, "results": results}
    path = C.write_results("realtext", payload)
    rows = [[r["how"], str(r["V"]), r["ms_per_step"]["median"], r["ms_per_step"]["min"], r["ms_per_step"]["max"],
             r["cpu_ms_per_step"]["median"], r["steps_per_s"]["median"]] for r in results]
    print("\nWord-level MLM on the Wikipedia sample, N = 128, batch 32, d = 64, cross-entropy, Adam")
    print(C.describe(info))
    print(C.table(rows, ["loop", "V", "ms/step med", "min", "max", "cpu ms/step", "steps/s"]))
    print(f"written to {path.relative_to(C.ROOT)}")
    return payload


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        import json

        print(json.dumps({"results": measure(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]),
                                             [int(a) for a in sys.argv[5:]])}))
    else:
        main()
