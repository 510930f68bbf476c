"""The lecture plan of the For instructors page (``book/_ext/reading_times.py``).

The page's reading times are counted at build time by the extension; these tests check the
same plan without a build: every lecture's sections exist and the lectures cover each page
once, every lecture has one row in the page's table, and no lecture has more than 50 minutes
of reading (this one is expected to fail when a chapter grows: split the lecture it names).
"""

from __future__ import annotations

import importlib.util
import re
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location(
    "topicmech_reading_times", ROOT / "book" / "_ext" / "reading_times.py")
rt = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = rt
spec.loader.exec_module(rt)

PLAN = rt.plan()


def test_every_lecture_names_existing_sections_and_covers_each_page() -> None:
    assert not PLAN.problems, "\n".join(message for _, message in PLAN.problems)


def test_no_lecture_exceeds_the_limit() -> None:
    long = [
        f"lecture {rt.number(lec.key)} ({lec.key!r}, {lec.page}): "
        f"{PLAN.words[lec.key]} words, {PLAN.minutes(lec.key)} min > {rt.LIMIT} min; "
        "split it or move a section to a neighbour in LECTURES (book/_ext/reading_times.py)"
        for lec in rt.LECTURES if PLAN.minutes(lec.key) > rt.LIMIT]
    assert not long, "\n".join(long)


def test_the_page_has_one_row_per_lecture_in_order() -> None:
    page = (ROOT / "book" / "instructor.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| \{lecture\}`([^`]+)` \|.*\| \{readtime\}`([^`]+)` \|", page, re.M)
    assert [a for a, _ in rows] == [lec.key for lec in rt.LECTURES]
    assert all(a == b for a, b in rows), rows
    # every key a role names on the page is a lecture
    named = set(re.findall(r"\{(?:lecture|readtime)\}`([^`]+)`", page))
    assert named <= {lec.key for lec in rt.LECTURES}, named
    # the rate the page states is the one counted
    assert f"at {rt.RATE} words a minute" in page


def test_the_benchmark_script_uses_the_extension() -> None:
    script = (ROOT / "benchmarks" / "reading_times.py").read_text(encoding="utf-8")
    assert "def prose_lines" not in script and "LECTURES = " not in script
    assert "_ext" in script


def test_the_extension_is_registered() -> None:
    config = (ROOT / "_config.yml").read_text(encoding="utf-8")
    assert re.search(r"^\s+reading_times: book/_ext\s*$", config, re.M)


PAGE = textwrap.dedent("""\
    ---
    jupytext: {}
    ---
    (lbl)=
    # Title

    one two three

    ```{code-cell} ipython3
    # not counted at all
    x = 1
    ```

    ## Alpha part

    four five

    ### Alpha detail

    six seven eight

    ## Also alpha

    nine

    ## Beta

    ```{note}
    ten eleven
    ```

    ## Exercises

    twelve

    ## Summary

    thirteen
    """)


@pytest.fixture
def book(tmp_path: Path) -> Path:
    (tmp_path / "p.md").write_text(PAGE, encoding="utf-8")
    return tmp_path


def test_counting_and_a_good_plan(book: Path) -> None:
    secs = rt.sections("p", book=book)
    assert [(s.level, s.title, s.words) for s in secs] == [
        (1, "(opening)", 4), (2, "Alpha part", 2), (3, "Alpha detail", 3), (2, "Also alpha", 1),
        (2, "Beta", 2), (2, "Exercises", 1), (2, "Summary", 1)]
    lectures = [rt.Lecture("a", "p", (rt.OPENING, "Alpha part", "Also")),
                rt.Lecture("b", "p", ("Beta", "Summary"))]
    p = rt.plan(book, lectures)
    assert p.problems == []
    # the level-3 section goes with its parent; the exercises with no lecture
    assert p.words == {"a": 4 + 2 + 3 + 1, "b": 2 + 1}
    assert rt.plan(book, [rt.Lecture("w", "p")]).words == {"w": 14 - 1}
    assert rt.minutes(1) == 1 and rt.minutes(100) == 1 and rt.minutes(101) == 2
    assert rt.enumeration([]) == "none" and rt.enumeration([5]) == "5"
    assert rt.enumeration([5, 9, 12]) == "5, 9 and 12"


@pytest.mark.parametrize("lectures, expected", [
    # a section renamed away
    ([rt.Lecture("a", "p", (rt.OPENING, "Alpha part", "Also", "Gamma")),
      rt.Lecture("b", "p", ("Beta", "Summary"))], ("a", "'Gamma', which starts no section")),
    # a start that fits two headings
    ([rt.Lecture("a", "p", (rt.OPENING, "Al")), rt.Lecture("b", "p", ("Beta", "Summary"))],
     ("a", "'Al', which starts 3 sections")),
    # a section in no lecture
    ([rt.Lecture("a", "p", (rt.OPENING, "Alpha part", "Also")),
      rt.Lecture("b", "p", ("Beta",))], ("a", "section 'Summary' (1 words) is in no lecture")),
    # a section in two lectures
    ([rt.Lecture("a", "p", (rt.OPENING, "Alpha part", "Also", "Beta")),
      rt.Lecture("b", "p", ("Beta", "Summary"))], ("a", "section 'Beta' is in lectures")),
    # homework named
    ([rt.Lecture("a", "p", (rt.OPENING, "Alpha part", "Also", "Exercises")),
      rt.Lecture("b", "p", ("Beta", "Summary"))], ("a", "'Exercises' is homework")),
    # a page that is gone, a repeated key
    ([rt.Lecture("a", "gone")], ("a", "names the page 'gone'")),
    ([rt.Lecture("a", "p"), rt.Lecture("a", "q")], ("a", "two lectures have the key 'a'")),
])
def test_problems_name_the_lecture_and_the_section(book, lectures, expected) -> None:
    problems = rt.plan(book, lectures).problems
    key, text = expected
    assert any(k == key and text in message for k, message in problems), problems


def test_the_roles_render_and_a_missing_section_fails_the_build(tmp_path: Path,
                                                               monkeypatch) -> None:
    """A two-page Sphinx build with the extension: the roles' text, and a warning (an error
    under ``-W``) once a lecture names a section that is not there."""
    sphinx = pytest.importorskip("sphinx.application")
    pytest.importorskip("myst_parser")
    book = tmp_path / "book"
    book.mkdir()
    (book / "p.md").write_text(PAGE, encoding="utf-8")
    (book / "index.md").write_text(
        "# Index\n\nLecture {lecture}`b` reads {readtime}`b`; over 2: "
        "{lectures-over}`2`.\n\n{lecture}`a` {readtime}`a`\n\n```{toctree}\np\n```\n",
        encoding="utf-8")
    (book / "conf.py").write_text("extensions = ['myst_parser', 'reading_times']\n",
                                  encoding="utf-8")
    monkeypatch.syspath_prepend(str(ROOT / "book" / "_ext"))
    monkeypatch.delitem(sys.modules, "reading_times", raising=False)
    import reading_times

    def build(lectures):
        monkeypatch.setattr(reading_times, "BOOK", book)
        monkeypatch.setattr(reading_times, "LECTURES", lectures)
        import io
        warnings = io.StringIO()
        app = sphinx.Sphinx(str(book), str(book), str(tmp_path / "out"),
                            str(tmp_path / "doctrees"), "text", status=None,
                            warning=warnings, freshenv=True)
        app.build()
        return (tmp_path / "out" / "index.txt").read_text(encoding="utf-8"), warnings.getvalue()

    good = [rt.Lecture("a", "p", (rt.OPENING, "Alpha part", "Also")),
            rt.Lecture("b", "p", ("Beta", "Summary"))]
    text, warnings = build([reading_times.Lecture(*vars(x).values()) for x in good])
    assert "Lecture 2 reads 1 min; over 2: none." in text, text
    assert "1 1 min" in text, text
    assert "reading times" not in warnings, warnings
    bad = [reading_times.Lecture("a", "p", (rt.OPENING, "Alpha part", "Also", "Gone")),
           reading_times.Lecture("b", "p", ("Beta", "Summary"))]
    _, warnings = build(bad)
    assert "names 'Gone', which starts no section of p.md" in warnings, warnings
