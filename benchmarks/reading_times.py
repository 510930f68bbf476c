"""Reading time of each book page and of each lecture of the For instructors page.

The counting and the lecture plan live in one place, the book's extension
``book/_ext/reading_times.py`` (its docstring says what counts as prose); the For instructors
page renders the same numbers at build time through its ``{readtime}`` role, and the build
fails when a lecture names a section that is gone or a section is in no lecture. This script
prints them from the command line:

    python benchmarks/reading_times.py                 # every page, then every lecture
    python benchmarks/reading_times.py --sections 05_attention --level 2
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

EXT = Path(__file__).resolve().parents[1] / "book" / "_ext" / "reading_times.py"


def extension():
    """The book's reading-time extension, loaded from its file (standard library only)."""
    spec = importlib.util.spec_from_file_location("topicmech_reading_times", EXT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def main() -> None:
    rt = extension()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sections", nargs="*", default=[])
    ap.add_argument("--level", type=int, default=3, help="split sections down to this level")
    args = ap.parse_args()
    print(f"{'page':24s} {'words':>6s} {'min':>4s}  exercises (words)")
    for path in sorted(rt.BOOK.glob("*.md")):
        secs = rt.sections(path.stem, level=2)
        ex = sum(s.words for s in secs if s.title.startswith("Exercises"))
        body = sum(s.words for s in secs) - ex
        print(f"{path.stem:24s} {body:6d} {rt.minutes(body):4d}  {ex}")
    plan = rt.plan()
    print(f"\nlectures (at {rt.RATE} words a minute, rounded up; {', '.join(rt.SKIP)} "
          "left out)")
    for lec in rt.LECTURES:
        n = plan.words[lec.key]
        flag = f"  over {rt.LIMIT} min" if rt.minutes(n) > rt.LIMIT else ""
        print(f"  {rt.number(lec.key):3d} {lec.key:24s} {lec.page:16s} {n:6d} words "
              f"{rt.minutes(n):4d} min{flag}")
    for page in args.sections:
        print(f"\n{page}")
        for s in rt.sections(page, args.level):
            owners = ", ".join(plan.owners.get(page, {}).get(s.title, [])) or "-"
            print(f"  {s.words:5d} {s.words / rt.RATE:4.1f} min  {'#' * s.level + ' ' if s.level > 1 else ''}{s.title}"
                  f"  [{owners}]")
    if plan.problems:
        raise SystemExit("\n".join(message for _, message in plan.problems))


if __name__ == "__main__":
    main()
