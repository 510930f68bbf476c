"""Benchmark 2: the general model with learned attention (batch 40, N = 150, V = 100).

Steps per second of one optimisation step (forward + backward + Adam step), for

* ``stage2``: one-hot embeddings, learned W^K, W^Q, W^V, identity head (the setting of
  the paper's attention analysis);
* ``all-learned``: learned embeddings (d = D), learned W^K, W^Q, W^V, tied head;

measured two ways: ``train()``, the package's loop (fresh BERT masks every step, all
checks on), and ``step only``, the model's forward, cross-entropy at the selected
positions, backward and ``torch.optim.Adam`` on one fixed masked batch.

    python benchmarks/bench_learned.py [--runs 3] [--steps 30]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

CONFIGS = {
    "stage2": dict(embedding="one_hot", attention="learned", value="learned", head="identity"),
    "all-learned": dict(embedding="learned", attention="learned", value="learned", head="tied"),
}


def measure(threads: int, runs: int, steps: int, batch: int = 40, N: int = 150, T: int = 10, v: int = 10) -> list[dict]:
    import torch

    import topicmech as tm
    from topicmech.train import mlm_loss
    from topicmech.utils import default_device

    torch.set_num_threads(threads)
    device = default_device()
    lda = tm.LDATopicModel(T, v, 0.1)
    docs = lda.sample(2000, N, seed=0)
    out = []
    for name, cfg in CONFIGS.items():
        model = tm.OneLayerTransformer(lda.num_tokens, attend_to_masked=False, seed=0, **cfg).to(device)

        def loop() -> None:
            tm.train_model(model, docs, steps=steps, batch_size=batch, loss="cross_entropy", optimizer="adam",
                           lr=0.01, seed=1)
            if device.type == "cuda":
                torch.cuda.synchronize()

        inputs, selected = tm.bert_mask(docs[:batch], lda.vocab_size, seed=0)
        inputs, selected, targets = inputs.to(device), selected.to(device), docs[:batch].to(device)
        opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=0.01)

        def step_only() -> None:
            for _ in range(steps):
                loss = mlm_loss(model(inputs, selected), targets, selected, "cross_entropy")
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
            if device.type == "cuda":
                torch.cuda.synchronize()

        for how, fn in (("train()", loop), ("step only", step_only)):
            t = C.repeat(fn, runs)
            sps = C.summary([steps / w for w in t["wall_s"]["runs"]])
            out.append({"config": name, "how": how, "threads": threads, "device": str(device), "steps": steps,
                        "batch": batch, "N": N, "V": lda.vocab_size, "steps_per_s": sps, **t})
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30, help="optimisation steps per timed run")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    args = ap.parse_args(argv)
    script = Path(__file__).resolve()
    load_before = C.load_average()
    results = []
    for t in args.threads:
        results += C.run_worker(script, [str(t), str(args.runs), str(args.steps)], env=C.threads_env(t))["results"]
    info = C.machine()
    info["load_average_before"] = load_before
    payload = {"benchmark": "learned", "machine": info, "results": results}
    path = C.write_results("learned", payload)
    rows = [[r["config"], r["how"], str(r["threads"]), r["steps_per_s"]["median"], r["steps_per_s"]["min"],
             r["steps_per_s"]["max"], 1e3 * r["wall_s"]["median"] / r["steps"]] for r in results]
    print("\nLearned attention, batch 40, N = 150, V = 100 (steps per second: median, min, max)")
    print(C.describe(info))
    print(C.table(rows, ["config", "loop", "threads", "steps/s med", "min", "max", "ms/step"]))
    print(f"written to {path.relative_to(C.ROOT)}")
    return payload


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        import json

        print(json.dumps({"results": measure(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))}))
    else:
        main()
