"""What each chapter costs: execute every page of the book once and time it, cell by cell.

    python benchmarks/bench_chapters.py                  # every chapter, about 5 min on 2 cores
    python benchmarks/bench_chapters.py --only 06_two_stages 07_beyond
    TOPICMECH_MODE=full python benchmarks/bench_chapters.py --only 05_attention 06_two_stages 07_beyond

Each page runs in a fresh Jupyter kernel (as the book build runs it), from ``book/`` so
relative paths resolve. The time of a page is the wall time from starting its kernel to
its last cell; the slowest cells are kept with their first line, so the performance page
can say where each chapter's time goes. Results go to ``benchmarks/results/chapters.json``
(``chapters_full.json`` in full mode).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import _common as C  # noqa: E402

BOOK = C.ROOT / "book"


def pages() -> list[Path]:
    """The book's executable pages (MyST notebooks with a kernelspec), in file order. The
    performance page reads this benchmark's previous results, so its own time is measured on
    the record it reads, like every other page's."""
    out = []
    for p in sorted(BOOK.glob("*.md")):
        head = p.read_text(encoding="utf-8")[:600]
        if not p.name.startswith("_") and head.startswith("---") and "kernelspec" in head:
            out.append(p)
    return out


def _seconds(cell) -> float | None:
    ex = cell.metadata.get("execution", {})
    a, b = ex.get("iopub.execute_input"), ex.get("shell.execute_reply")
    if not (a and b):
        return None
    return (datetime.fromisoformat(b.replace("Z", "+00:00")) - datetime.fromisoformat(a.replace("Z", "+00:00"))).total_seconds()


def run_page(path: Path, top: int = 3) -> dict:
    """Execute one page; its wall time, the time of its first two cells (imports) and its slowest cells."""
    import jupytext
    from nbclient import NotebookClient

    nb = jupytext.read(path)
    t0 = time.perf_counter()
    NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(BOOK)}}).execute()
    wall = time.perf_counter() - t0
    cells = [(i, _seconds(c), c.source.strip().splitlines()[0] if c.source.strip() else "")
             for i, c in enumerate(x for x in nb.cells if x.cell_type == "code")]
    timed = [(i, s, line) for i, s, line in cells if s is not None]
    slow = sorted(timed, key=lambda c: -c[1])[:top]
    return {"page": path.stem, "wall_s": wall, "setup_s": sum(s for i, s, _ in timed if i < 2),
            "cells": len(cells), "slowest": [{"cell": i, "s": s, "first_line": line} for i, s, line in slow]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", help="page names (file stems) to run")
    args = ap.parse_args()
    todo = [p for p in pages() if not args.only or p.stem in args.only]
    if not todo:
        raise SystemExit(f"no page matches {args.only}")
    info = C.machine(threads=1)
    print(C.describe(info), flush=True)
    results = []
    for p in todo:
        r = run_page(p)
        results.append(r)
        print(f"{r['page']:24s} {r['wall_s']:6.1f} s  (imports {r['setup_s']:.1f} s; slowest cell "
              f"{r['slowest'][0]['s']:.1f} s: {r['slowest'][0]['first_line'][:60]})", flush=True)
    total = sum(r["wall_s"] for r in results)
    print(f"total {total:.1f} s over {len(results)} pages", flush=True)
    name = "chapters_full" if info["mode"] == "full" else "chapters"
    if args.only and (C.RESULTS / f"{name}.json").exists():        # keep the stored pages not rerun
        kept = [r for r in json.loads((C.RESULTS / f"{name}.json").read_text())["pages"] if r["page"] not in args.only]
        results = sorted(kept + results, key=lambda r: r["page"])
    C.write_results(name, {"machine": info, "jobs": os.environ.get("TOPICMECH_JOBS", "default"),
                           "total_s": sum(r["wall_s"] for r in results), "pages": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
