"""Sphinx extension: the reading times of the For instructors page, counted at build time.

The lecture plan of ``book/instructor.md`` lives here, in :data:`LECTURES`: each lecture has
a short stable key, a page and the sections of that page it covers, named by the start of
their headings. Its reading time is the number of words of those sections' prose at
:data:`RATE` words a minute, rounded up. Counting follows :func:`prose_lines`: code cells,
other fenced code blocks (``literalinclude``, shell commands), front matter, HTML comments,
MyST labels and directive options are dropped; maths, admonitions, theorems, proofs and
figure captions (kept in the code cells' options) count as prose. The sections in
:data:`SKIP` (exercises with their solutions, self-check questions) are left for homework.

Roles (all take a lecture key, or a number of minutes):

``{lecture}`ch3-first```
    the lecture's number: its position in :data:`LECTURES`, so that a lecture added or
    split renumbers the whole page.
``{readtime}`ch3-first```
    its reading time, "39 min".
``{lectures-over}`40```
    the numbers of the lectures with more than 40 minutes of reading, "5, 9 and 12", or
    "none".

The build fails (a Sphinx warning under ``-W``) when a lecture names a section that is not on
its page (or a start that fits two headings), when a section of a page is in no lecture or
in two, and on an unknown key. ``benchmarks/reading_times.py`` prints the same numbers from
the command line, and ``tests/test_reading_times.py`` checks the plan without a build.

The counting needs only the standard library; Sphinx is imported by :func:`setup` alone.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

# the repository (this file is book/_ext/reading_times.py): the same for a whole-book build
# and a build with book/ as its source folder
ROOT = Path(__file__).resolve().parents[2]
BOOK = ROOT / "book"
RATE = 100  # words a minute, the pace the For instructors page states
LIMIT = 50  # minutes: a lecture should fit a 50-minute class
CODE_FENCES = ("{code-cell}", "{literalinclude}", "bash", "python", "text")
SKIP = ("Exercises", "Self-check questions")  # homework and the next session's quiz
OPENING = "(opening)"  # the part of a page before its first level-2 heading


@dataclass(frozen=True)
class Lecture:
    """One class session: ``sections`` of ``page`` named by the start of their headings
    (without the ``#``), or ``None`` for the whole page but :data:`SKIP`. A level-3 section
    goes with its level-2 parent unless a lecture names it."""

    key: str
    page: str
    sections: tuple[str, ...] | None = None


LECTURES = [
    Lecture("topic-models", "01_topic_models"),
    Lecture("mlm-model", "02_mlm_model"),
    Lecture("emb-result", "03_embeddings", (
        OPENING, "The authors' result", "The model of", "Our derivation",
        "The prediction in")),
    Lecture("emb-tied", "03_embeddings", (
        "Back to the authors", "Trained embeddings", "How the embedding", "Cross-entropy",
        "Which keys", "Ten seeds", "Summary")),
    Lecture("value-first", "04_value_matrix", (
        OPENING, "The stage-1 model", "The authors' result", "Our version",
        "The exact optimum", "Where the same-word", "Long documents", "The authors' constant is",
        "Training lands", "Summary")),
    Lecture("value-second", "04_value_matrix", (
        "Weight decay", "The authors' logit bias", "The authors' constant proportion",
        "A data-driven check", "Cross-entropy")),
    Lecture("attn-gradient", "05_attention", (
        OPENING, "The stage-2 set-up", "The authors' result", "The gradient at", "Why a",
        "Training stage 2")),
    Lecture("attn-training", "05_attention", (
        "Visible keys", "The authors' stage-2 result", "Summary")),
    Lecture("attn-tied", "05_attention", ("Finite $N$", "Long documents")),
    Lecture("two-stages-claim", "06_two_stages", (
        OPENING, "The claim", "The argument", "Training everything", '"$W^V$ first"')),
    Lecture("two-stages-measured", "06_two_stages", (
        "Ten seeds", "Stage 2 is", "Smaller initial", "SGD versus")),
    Lecture("two-stages-conventions", "06_two_stages", (
        "The theory's convention against", "Verdict on", "Summary")),
    Lecture("beyond", "07_beyond"),
    Lecture("real-embeddings", "08_real_text", (
        OPENING, "The text, the topics", "(a) Token", "(b) Attention")),
    Lecture("real-conventions", "08_real_text", ("Same word, same topic",)),
    Lecture("real-metric", "08_real_text", (
        "The same probe", "The authors' metric", "Ten replicates", "What transfers", "Summary")),
    Lecture("learned-text", "09_learned_text"),
    Lecture("repro-replay", "reproduction", (
        OPENING, "The authors' numbers", "The released code")),
    Lecture("repro-tables", "reproduction", (
        "The attention table", "Embeddings with", "The Wikipedia tables", "Provenance")),
    Lecture("repro-stages", "reproduction", ("The two stages",)),
    Lecture("repro-verdicts", "reproduction", ("Four layers", "Verdicts", "Summary")),
]


# -- counting ----------------------------------------------------------------------------------
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
    """Words of prose: runs of letters, digits, ``$`` and ``\\``."""
    return sum(len(re.findall(r"[A-Za-z0-9$\\]+", line)) for line in lines)


def minutes(n_words: int) -> int:
    """Reading time of ``n_words`` at :data:`RATE` words a minute, rounded up."""
    return math.ceil(n_words / RATE)


@dataclass(frozen=True)
class Section:
    level: int  # 2 or 3; the opening is 1
    title: str  # the heading without its #, or OPENING
    words: int


def page_path(page: str, book: Path | None = None) -> Path:
    """``book/<page>.md``; ``book`` defaults to the book folder of this repository."""
    return Path(BOOK if book is None else book) / f"{page}.md"


def sections(page: str, level: int = 3, book: Path | None = None) -> list[Section]:
    """The sections of ``page`` in order, split at headings of level 2 up to ``level``
    (deeper headings count with their section); the part before the first is the opening."""
    text = page_path(page, book).read_text(encoding="utf-8")
    out, head, buf = [], (1, OPENING), []
    for line in prose_lines(text):
        m = re.match(r"^(#{2,6}) +(.*?)\s*$", line)
        if m and len(m.group(1)) <= level:
            out.append(Section(*head, words(buf)))
            head, buf = (len(m.group(1)), m.group(2)), []
        else:
            buf.append(line)
    out.append(Section(*head, words(buf)))
    return out


def _skipped(secs: list[Section]) -> list[bool]:
    """Whether each section is homework (:data:`SKIP`), a level-3 one with its parent."""
    out, parent = [], False
    for s in secs:
        if s.level <= 2:
            parent = s.title.startswith(SKIP)
        out.append(parent)
    return out


@dataclass
class Plan:
    """The lectures counted on the book as it is now."""

    words: dict[str, int]  # lecture key -> words
    owners: dict[str, dict[str, list[str]]]  # page -> section title -> lecture keys
    problems: list[tuple[str, str]]  # (lecture key, message): each names what to fix

    def minutes(self, key: str) -> int:
        return minutes(self.words[key])


def number(key: str) -> int:
    """The lecture's number on the page (its position in :data:`LECTURES`, from 1)."""
    for i, lec in enumerate(LECTURES, 1):
        if lec.key == key:
            return i
    raise ValueError(f"no lecture with key {key!r}; the keys are "
                     f"{', '.join(lec.key for lec in LECTURES)}")


def plan(book: Path | None = None, lectures: list[Lecture] | None = None) -> Plan:
    """Count every lecture of ``lectures`` (default :data:`LECTURES`) on the pages of
    ``book``, and list the problems: a name that fits no heading or two, a section in no
    lecture or in two, a missing page, a repeated key."""
    lectures = LECTURES if lectures is None else lectures
    book = BOOK if book is None else Path(book)
    counts: dict[str, int] = {}
    owners: dict[str, dict[str, list[str]]] = {}
    problems: list[tuple[str, str]] = []
    keys = [lec.key for lec in lectures]
    for key in sorted({k for k in keys if keys.count(k) > 1}):
        problems.append((key, f"reading times: two lectures have the key {key!r}"))
    by_page: dict[str, list[Lecture]] = {}
    for lec in lectures:
        by_page.setdefault(lec.page, []).append(lec)
    for page, lecs in by_page.items():
        if not page_path(page, book).exists():
            for lec in lecs:
                problems.append((lec.key, f"reading times: lecture {lec.key!r} names the page "
                                          f"{page!r}, which is not in {book}"))
                counts[lec.key] = 0
            continue
        secs = sections(page, book=book)
        skipped = _skipped(secs)
        owner: list[list[str]] = [[] for _ in secs]
        for lec in lecs:
            if lec.sections is None:
                for i, skip in enumerate(skipped):
                    if not skip:
                        owner[i].append(lec.key)
                continue
            for name in lec.sections:
                hits = [i for i, s in enumerate(secs) if s.title.startswith(name)]
                if len(hits) != 1:
                    have = "; ".join(s.title for s in secs)
                    what = "no section" if not hits else f"{len(hits)} sections"
                    problems.append((lec.key, (
                        f"reading times: lecture {lec.key!r} names {name!r}, which starts "
                        f"{what} of {page}.md (its sections: {have}); fix LECTURES in "
                        "book/_ext/reading_times.py")))
                    continue
                owner[hits[0]].append(lec.key)
        # an unnamed level-3 section goes with its level-2 parent
        parent: list[str] = []
        for i, s in enumerate(secs):
            if s.level <= 2:
                parent = owner[i]
            elif not owner[i]:
                owner[i] = list(parent)
        for lec in lecs:
            counts[lec.key] = sum(s.words for s, o in zip(secs, owner) if lec.key in o)
        first = lecs[0].key  # page-wide problems are reported once, by its first lecture
        for s, o, skip in zip(secs, owner, skipped):
            if skip and o:
                problems.append((o[0], (
                    f"reading times: {page}.md section {s.title!r} is homework "
                    f"({', '.join(SKIP)}) but lecture {o[0]!r} names it")))
            elif not skip and not o:
                problems.append((first, (
                    f"reading times: {page}.md section {s.title!r} ({s.words} words) is in "
                    "no lecture; add it to one in LECTURES (book/_ext/reading_times.py)")))
            elif len(o) > 1:
                problems.append((first, (
                    f"reading times: {page}.md section {s.title!r} is in lectures "
                    f"{', '.join(map(repr, o))}; it must be in one")))
        owners[page] = {s.title: o for s, o in zip(secs, owner)}
    return Plan(counts, owners, problems)


def over(minutes_: int, p: Plan) -> list[int]:
    """Numbers of the lectures of ``p`` with more than ``minutes_`` minutes of reading."""
    return [number(lec.key) for lec in LECTURES if p.minutes(lec.key) > minutes_]


def enumeration(items: list[int]) -> str:
    """"5", "5 and 9", "5, 9 and 12"; "none" when empty."""
    text = [str(i) for i in items]
    if not text:
        return "none"
    return text[0] if len(text) == 1 else ", ".join(text[:-1]) + " and " + text[-1]


# -- Sphinx -----------------------------------------------------------------------------------
def _role(kind: str):
    """A docutils role rendering ``kind`` ("lecture", "readtime" or "over") as text."""

    def role(name, rawtext, text, lineno, inliner, options=None, content=None):
        from docutils import nodes
        from sphinx.util import logging

        env = inliner.document.settings.env
        logger = logging.getLogger(__name__)

        def warn(message: str) -> None:
            logger.warning(message, location=(env.docname, lineno))

        arg = text.strip()
        for lec in LECTURES:  # rebuild this page when a counted page changes
            env.note_dependency(str(page_path(lec.page)))
        env.note_dependency(__file__)
        p = plan()
        if kind == "over":
            if not arg.isdigit():
                warn(f"lectures-over: expected a number of minutes, got {arg!r}")
                return [nodes.inline(text=text)], []
            return [nodes.inline(text=enumeration(over(int(arg), p)))], []
        if arg not in p.words:
            warn(f"{name}: no lecture with key {arg!r} in LECTURES "
                 f"(book/_ext/reading_times.py); the keys are {', '.join(p.words)}")
            return [nodes.inline(text=text)], []
        if kind == "lecture":
            return [nodes.inline(text=str(number(arg)))], []
        for key, message in p.problems:  # each problem once: by the reading time of its lecture
            if key == arg:
                warn(message)
        return [nodes.inline(text=f"{p.minutes(arg)} min")], []

    return role


def setup(app):
    app.add_role("lecture", _role("lecture"))
    app.add_role("readtime", _role("readtime"))
    app.add_role("lectures-over", _role("over"))
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}
