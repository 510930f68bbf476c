"""Benchmark 5: how the cost of one training step grows with N, batch size and V.

One axis varies at a time around the base point N = 150, batch = 40, V = 100 (T = 10
topics, so v = V / 10; LDA alpha = 0.1; cross-entropy; Adam). Three training paths:

* ``uniform, fast``: frozen uniform attention, :func:`topicmech.train.train_uniform`;
* ``uniform, full forward``: the same model through :func:`topicmech.train.train` with
  ``path="reference"`` (the full forward pass, logits at every position);
* ``learned, fast``: one-hot embeddings, learned W^K, W^Q, W^V, through ``train()``'s default
  path (queries at the selected positions only, :func:`topicmech.fast.selected_loss`);
* ``learned, full forward``: the same model with ``path="reference"``.

Times are per optimisation step (median, min and max over runs), including drawing the
batch and its masks. With ``TOPICMECH_MODE=full`` and a GPU, the models run on the GPU
and the grid extends to larger N, batch and V.

    python benchmarks/bench_scaling.py [--runs 3]
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

BASE = {"N": 150, "batch": 40, "V": 100}
GRID = {
    "N": [25, 50, 100, 200, 400, 800],
    "batch": [10, 20, 40, 80, 160, 320],
    "V": [20, 50, 100, 200, 500, 1000],
}
GRID_FULL = {
    "N": [25, 50, 100, 200, 400, 800, 1600],
    "batch": [10, 20, 40, 80, 160, 320, 640],
    "V": [20, 50, 100, 200, 500, 1000, 2000, 5000],
}
# points off the three axes, to test a separable cost model (the performance page)
OFF_AXIS = [{"N": 400, "batch": 80, "V": 200}, {"N": 50, "batch": 160, "V": 500}]
# the full forward pass with learned attention costs O(batch N^2 d + batch N d^2) per step:
# stop its CPU grid earlier
LEARNED_MAX = {"N": 400, "batch": 160, "V": 500}
PATHS = {"uniform, fast": 200, "uniform, full forward": 40, "learned, fast": 40,
         "learned, full forward": 6}  # steps per timed run


def measure(runs: int, full: bool) -> list[dict]:
    import torch

    import topicmech as tm

    torch.set_num_threads(1)
    device = C.device()
    full = full and device.type == "cuda"  # the larger grid only on a GPU; on a CPU it would take hours
    grid = GRID_FULL if full else GRID
    out = []
    points = [(axis, value, {**BASE, axis: value}) for axis, values in grid.items() for value in values]
    points += [("off-axis", i, p) for i, p in enumerate(OFF_AXIS)]
    for axis, value, point in points:
        V, N, B = point["V"], point["N"], point["batch"]
        lda = tm.LDATopicModel(10, V // 10, 0.1)
        docs = lda.sample(max(4 * B, 200), N, seed=0)
        for path, steps in PATHS.items():
            if (path == "learned, full forward" and not full
                    and any(point[k] > LEARNED_MAX[k] for k in LEARNED_MAX)):
                continue
            attention = "learned" if path.startswith("learned") else "uniform"
            model = tm.OneLayerTransformer(lda.num_tokens, attention=attention, value="learned", head="identity",
                                           attend_to_masked=False, seed=0).to(device)
            if path == "uniform, fast":
                trainer = tm.train.train_uniform
            elif path == "learned, fast":
                trainer = tm.train.train                           # its default (fast) path
            else:                                                  # the full forward pass
                trainer = functools.partial(tm.train.train, path="reference")

            def run() -> None:
                trainer(model, docs, steps=steps, batch_size=B, loss="cross_entropy", optimizer="adam", seed=1)
                if device.type == "cuda":
                    torch.cuda.synchronize()

            t = C.repeat(run, runs, warmup=1)
            per_step = C.summary([w / steps for w in t["wall_s"]["runs"]])
            out.append({"axis": axis, "value": value, "path": path, **point, "steps": steps,
                        "step_s": per_step, "device": str(device)})
            print(f"  {axis}={value:5d}  {path:22s} {1e3 * per_step['median']:9.3f} ms/step", flush=True)
    return out


def main(argv: list[str] | None = None) -> dict:
    from topicmech.utils import is_full

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    C.add_device_option(ap)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args(argv)
    C.apply_device(args)
    load_before = C.load_average()
    results = measure(args.runs, is_full())
    info = C.machine(threads=1)
    info["load_average_before"] = load_before
    payload = {"benchmark": "scaling", "machine": info, "base": BASE, "results": results}
    path = C.write_results("scaling", payload)
    rows = [[r["axis"], str(r["value"]), r["path"], 1e3 * r["step_s"]["median"], 1e3 * r["step_s"]["min"],
             1e3 * r["step_s"]["max"]] for r in results]
    print("\nStep time around N = 150, batch = 40, V = 100 (milliseconds per step: median, min, max)")
    print(C.describe(info))
    print(C.table(rows, ["axis", "value", "path", "ms/step med", "min", "max"]))
    print(f"written to {path.relative_to(C.ROOT)}")
    return payload


if __name__ == "__main__":
    main()
