"""Reading time of each book page from the word count of its prose (For instructors page).

Counts the words of a page's Markdown outside code: code cells, other fenced code blocks
(``literalinclude``, shell commands), front matter, HTML comments, MyST labels and directive
option lines are dropped; maths, admonitions, theorems, proofs and figure captions (kept in
the code cells' options) count as prose. The
"Exercises" section (with its solutions) is counted apart, since the lectures leave it for
homework. Times are at the rate the For instructors page states (100 words a minute).

    python benchmarks/reading_times.py                 # every page, then every lecture
    python benchmarks/reading_times.py --sections 05_attention --level 2
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

BOOK = Path(__file__).resolve().parents[1] / "book"
RATE = 100  # words a minute
CODE_FENCES = ("{code-cell}", "{literalinclude}", "bash", "python", "text")


def prose_lines(text: str) -> list[str]:
    """The page's lines with front matter, comments and code blocks removed."""
    text = re.sub(r"\A---\n.*?\n---\n", "", text, flags=re.S)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    out: list[str] = []
    code: str | None = None  # the fence of the code block being skipped
    open_: list[str] = []  # fences of the directives (admonitions, proofs) now open
    caption = False
    for line in text.splitlines():
        m = re.match(r"^(`{3,}|:{3,})\s*(\S*)", line)
        if code is not None:
            if m and m.group(1) == code and not m.group(2):
                code, caption = None, False
            elif re.match(r"^\s+caption:", line):
                caption = True  # a figure's caption, read with the figure
            elif caption and re.match(r"^\s+name:|^---", line):
                caption = False
            elif caption:
                out.append(line)
            continue
        if m:
            fence, name = m.groups()
            if name in CODE_FENCES or (not name and fence not in open_):
                code = fence  # a code cell or a plain code block: skipped
            elif not name:
                open_.remove(fence)  # the end of a directive
            else:
                open_.append(fence)  # a directive whose content is prose
            continue
        if re.match(r"^\(.*\)=\s*$", line) or re.match(r"^:\w[\w-]*:", line):
            continue  # labels and directive options
        out.append(line)
    return out


def words(lines: list[str]) -> int:
    return sum(len(re.findall(r"[A-Za-z0-9$\\]+", line)) for line in lines)


def sections(page: str, level: int = 2) -> list[tuple[str, int]]:
    """(heading, words) in page order, split at headings of level 2 up to ``level``; the
    part before the first heading is ''."""
    out, title, buf = [], "", []
    for line in prose_lines((BOOK / f"{page}.md").read_text(encoding="utf-8")):
        m = re.match(r"^(#{2,6}) ", line)
        if m and len(m.group(1)) <= level:
            out.append((title, words(buf)))
            title, buf = line.strip(), []
        else:
            buf.append(line)
    out.append((title, words(buf)))
    return out


SKIP = ("Exercises", "Self-check questions")  # homework and the next session's quiz
# The lectures of the For instructors page: (lecture, page, sections), the sections named by
# the start of their heading; None means the whole page but SKIP. A level-3 section counts
# with its level-2 parent unless a lecture names it.
SECOND_4 = (
    "Weight decay",
    "The authors' logit bias",
    "The authors' constant proportion",
    "A data-driven check",
    "Cross-entropy",
)
LECTURES = [
    ("1", "01_topic_models", None),
    ("2", "02_mlm_model", None),
    ("3", "03_embeddings", ("(opening)", "The authors' result", "The model of",
                            "Our derivation", "The prediction in", "Back to the authors",
                            "Which keys", "Summary")),
    ("4", "03_embeddings", ("Trained embeddings", "How the embedding", "Cross-entropy")),
    ("5", "04_value_matrix", ("(opening)", "The stage-1 model", "The authors' result",
                              "Our version", "The exact optimum", "Where the extra",
                              "Long documents", "The authors' constant is",
                              "Training lands", "Summary")),
    ("6", "04_value_matrix", SECOND_4),
    ("7", "05_attention", ("(opening)", "The stage-2 set-up", "The paper's result",
                           "The gradient at")),
    ("8", "05_attention", ("Why a", "Training stage 2", "Visible keys", "Summary")),
    ("9", "05_attention", ("The authors' stage-2 result",)),
    ("10", "06_two_stages", ("(opening)", "The claim", "The argument", "Training everything",
                             '"$W^V$ first"', "Summary")),
    ("11", "06_two_stages", ("Ten seeds", "Stage 2 is", "Smaller initial", "SGD versus",
                             "The theory's convention against")),
    ("12", "07_beyond", None),
    ("13", "08_real_text", ("(opening)", "The text, the topics", "(a) Token",
                            "(b) Attention")),
    ("14", "08_real_text", ("The same probe", "The authors' metric", "Ten replicates",
                            "What transfers", "Summary")),
    ("15", "09_learned_text", None),
    ("16", "reproduction", None),
]


def lecture_words(page: str, names: tuple[str, ...] | None) -> int:
    named = {n for _, p, ns in LECTURES if p == page and ns for n in ns}

    def title(heading: str) -> str:
        return heading.lstrip("#").strip() or "(opening)"

    total, owner = 0, "(opening)"
    for heading, n in sections(page, level=3):
        t = title(heading)
        if heading.startswith("## ") or not heading or any(t.startswith(x) for x in named):
            owner = t
        elif not heading.startswith("### "):
            owner = t
        if names is None:
            total += 0 if owner.startswith(SKIP) else n
        elif any(owner.startswith(x) for x in names):
            total += n
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sections", nargs="*", default=[])
    ap.add_argument("--level", type=int, default=3, help="split sections down to this level")
    args = ap.parse_args()
    print(f"{'page':24s} {'words':>6s} {'min':>4s}  exercises (words)")
    for path in sorted(BOOK.glob("*.md")):
        secs = sections(path.stem)
        ex = sum(n for t, n in secs if t.startswith("## Exercises"))
        body = sum(n for _, n in secs) - ex
        print(f"{path.stem:24s} {body:6d} {body / RATE:4.0f}  {ex}")
    print(f"\nlectures (at {RATE} words a minute; {', '.join(SKIP)} left out)")
    seen: dict[str, int] = {}
    for lecture, page, names in LECTURES:
        n = lecture_words(page, names)
        seen[page] = seen.get(page, 0) + n
        print(f"  {lecture:>3s} {page:18s} {n:6d} words {n / RATE:4.0f} min")
    for page, n in seen.items():  # every section of a page in exactly one lecture
        whole = lecture_words(page, None)
        if n != whole:
            raise SystemExit(f"{page}: the lectures cover {n} words of {whole}")
    for page in args.sections:
        print(f"\n{page}")
        for title, n in sections(page, args.level):
            print(f"  {n:5d} {n / RATE:4.1f} min  {title or '(opening)'}")


if __name__ == "__main__":
    main()
