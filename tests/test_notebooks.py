"""The chapters as classic notebooks: exported, committed for Colab, students' edition, runnable.

``notebooks/*.ipynb`` are generated from ``book/*.md`` by ``make notebooks`` and committed
so that the "Open in Colab" links work; these tests fail when a committed notebook is
stale, so the two can never drift apart.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import jupytext
import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("make_notebooks", ROOT / "scripts" / "make_notebooks.py")
make_notebooks = importlib.util.module_from_spec(spec)
sys.modules["make_notebooks"] = make_notebooks
spec.loader.exec_module(make_notebooks)

CHAPTERS = make_notebooks.chapter_sources(ROOT / "book")


def test_every_chapter_is_a_notebook() -> None:
    names = {p.stem for p in CHAPTERS}
    for stem in ("01_topic_models", "02_mlm_model", "03_embeddings", "04_value_matrix", "05_attention"):
        assert stem in names, f"book/{stem}.md is not a MyST notebook"


@pytest.mark.parametrize("src", CHAPTERS, ids=lambda p: p.stem)
def test_committed_notebook_is_up_to_date(src: Path, tmp_path: Path) -> None:
    make_notebooks.export(tmp_path, strip=False)
    fresh = json.loads((tmp_path / f"{src.stem}.ipynb").read_text())
    committed_path = ROOT / "notebooks" / f"{src.stem}.ipynb"
    assert committed_path.exists(), f"run `make notebooks`: {committed_path} is missing"
    committed = json.loads(committed_path.read_text())
    assert committed["cells"] == fresh["cells"], f"run `make notebooks`: {committed_path.name} is stale"


@pytest.mark.parametrize("src", CHAPTERS, ids=lambda p: p.stem)
def test_students_edition_has_exercises_but_no_solutions(src: Path) -> None:
    nb = jupytext.read(src)
    text = "\n".join(c.source for c in nb.cells)
    n_solutions = text.count("{solution-start}")
    stripped, removed = make_notebooks.strip_solutions(nb)
    nbformat.validate(stripped)
    out = "\n".join(c.source for c in stripped.cells)
    assert removed == n_solutions
    assert "{solution-start}" not in out and "{solution-end}" not in out
    assert out.count("{exercise}") == text.count("{exercise}")
    assert out.count(make_notebooks.NOTE) == n_solutions


def test_strip_solutions_removes_code_between_gates() -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("```{exercise}\n:label: ex-a\nQ?\n```\n\n````{solution-start} ex-a\n:class: dropdown\n````"),
        nbformat.v4.new_code_cell("answer = 42"),
        nbformat.v4.new_markdown_cell("````{solution-end}\n````\n\nAfter the solution."),
        nbformat.v4.new_code_cell("kept = True"),
    ]
    stripped, removed = make_notebooks.strip_solutions(nb)
    sources = [c.source for c in stripped.cells]
    assert removed == 1
    assert "answer = 42" not in sources
    assert "kept = True" in sources
    assert any("After the solution." in s for s in sources)


def test_unclosed_gate_is_an_error() -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("````{solution-start} ex-a\n````"), nbformat.v4.new_code_cell("x = 1")]
    with pytest.raises(ValueError, match="solution-end"):
        make_notebooks.strip_solutions(nb)


def test_an_exported_notebook_runs(tmp_path: Path) -> None:
    """Execute one exported chapter as a classic notebook (the others run through nbval)."""
    from nbclient import NotebookClient

    make_notebooks.export(tmp_path, strip=True)
    nb = nbformat.read(tmp_path / "01_topic_models.ipynb", as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(ROOT / "book")}}).execute()
    assert any(c.get("outputs") for c in nb.cells if c.cell_type == "code")


RAW_ROLE = re.compile(r"\{[a-z][\w:-]*\}`")
RAW_FENCE = re.compile(r"^[ \t>]*(`{3,}|:{3,})\{|^[ \t>]*:{3,}[ \t]*$|^[ \t>]*\([^()\s]+\)=[ \t]*$", re.M)


@pytest.mark.parametrize("strip", [False, True], ids=["full", "students"])
def test_exported_markdown_has_no_myst_markup(strip: bool, tmp_path: Path) -> None:
    """Classic Jupyter and Colab show MyST roles, directive fences and labels verbatim."""
    for path in make_notebooks.export(tmp_path, strip=strip):
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type != "markdown":
                continue
            role, fence = RAW_ROLE.search(cell.source), RAW_FENCE.search(cell.source)
            assert role is None, f"{path.name}: raw role {cell.source[role.start():role.start() + 60]!r}"
            assert fence is None, f"{path.name}: raw MyST {fence.group(0)!r}"
            assert "$$ (" not in cell.source, f"{path.name}: an equation label is left"


# what the built book shows for these labels (read off the HTML of a full build)
BOOK_NUMBERS = {
    "fig-sample-docs": "Fig. 1.1", "fig-alpha": "Fig. 1.3", "ex-polysemy": "Exercise 1.3",
    "thm-value-authors": "Theorem 4.1", "thm-value-block": "Theorem 4.2",
    "prop-value-closed-forms": "Proposition 4.1", "fig-value-ce-boost": "Fig. 4.6",
    "eq-value-weighted-gap": "(4.1)", "ex-value-keep": "Exercise 4.2",
    # unnumbered pages share one counter per kind, in table-of-contents order
    "eq-authors-band": "(2)", "eq-value-loss": "(3)", "eq-value-centred": "(18)",
    "lem-value-sigma-pd": "Lemma 1", "lem-value-bias": "Lemma 6",
}


def test_references_are_numbered_as_in_the_book() -> None:
    index = make_notebooks.LabelIndex()
    for label, shown in BOOK_NUMBERS.items():
        assert index.targets[label].numbered() == shown, label
    # chapter numbers run on across the numbered parts (the reproduction page is chapter 10)
    chapters = dict(make_notebooks.toc_pages())
    assert chapters["01_topic_models"] == 1 and chapters["reproduction"] == 10
    assert chapters["appendix_value"] is None


def test_roles_render_as_readable_markdown() -> None:
    md = make_notebooks.MystToMarkdown()
    text = ("See {numref}`fig-value-ce-boost`, {prf:ref}`thm-value-authors`, {eq}`eq-value-loss`,\n"
            "{ref}`the stage-1 chapter <ch-value-matrix>`, {ref}`ch-topic-models`, {cite:t}`li2023slides`,\n"
            "{cite:p}`li2023transformers,blei2003lda` and {glue:text}`vm_T:d`.")
    out = md.convert(text, "04_value_matrix")
    assert out == (
        "See Fig. 4.6, Theorem 4.1, (3) in *Appendix: the stage-1 value matrix, derived*,\n"
        "*the stage-1 chapter*, *Topic models as a sandbox*, Li (2023, slides),\n"
        "(Li et al., 2023, paper; Blei et al., 2003) and `vm_T`.")
    linked = make_notebooks.MystToMarkdown(book_url="https://example.org/book/")
    assert linked.convert("{ref}`sec-vm-bias`", "01_topic_models") == (
        "[The authors' logit bias](https://example.org/book/book/04_value_matrix.html#sec-vm-bias)")


def test_directives_render_as_readable_markdown() -> None:
    md = make_notebooks.MystToMarkdown()
    text = ("::::{prf:theorem} Stage 1 (ours)\n:label: thm-value-block\n\nBody with\n\n"
            "$$\nx\n$$ (eq-value-weighted-gap)\n::::\n\n"
            "```{admonition} Watch out\n:class: tip\nText.\n```")
    out = md.convert(text, "04_value_matrix")
    assert out.startswith("> **Theorem 4.2 (Stage 1 (ours)).**\n>\n> Body with\n")
    assert "> x\n> \\tag{4.1}\n> $$" in out
    assert out.endswith("> **Watch out**\n>\n> Text.")
    with pytest.raises(ValueError, match="nowhere"):
        md.convert("{ref}`nowhere`", "04_value_matrix")


def test_exported_notebook_explains_the_glued_names(tmp_path: Path) -> None:
    make_notebooks.export(tmp_path, strip=False)
    nb = nbformat.read(tmp_path / "04_value_matrix.ipynb", as_version=4)
    assert nb.cells[1].cell_type == "markdown" and "GLUED[" in nb.cells[1].source
    assert any("from topicmech.notebook import GLUED, show_values" in c.source
               for c in nb.cells if c.cell_type == "code")


def _values_names(cell) -> list[str]:
    """The specs a values cell passes to ``show_values``."""
    import ast

    call = ast.parse(cell.source).body[0].value
    assert isinstance(call, ast.Call) and call.func.id == "show_values", cell.source
    return [arg.value for arg in call.args]


CODE_NAME = re.compile(r"`([^`\s]+)`")


def _balanced(markdown: str) -> bool:
    """Whether a markdown cell closes every code fence and display-maths block it opens."""
    fences = [m for m in re.finditer(r"^[ \t>]*(`{3,}|~{3,})", markdown, re.M)]
    return len(fences) % 2 == 0 and markdown.count("$$") % 2 == 0


@pytest.mark.parametrize("strip", [False, True], ids=["full", "students"])
def test_each_paragraph_with_numbers_is_followed_by_its_values_cell(strip: bool, tmp_path: Path) -> None:
    """A markdown cell that names glued numbers is cut after each paragraph that names some,
    and a cell that shows exactly that paragraph's numbers follows it (for a markdown cell
    above the install cell, not cut: right after the install cell, which imports
    ``show_values``); no other cell carries the values metadata, no cut falls inside a
    fence or a display-maths block, the text is the book's, and no glued number is lost."""
    sources = {p.stem: p for p in CHAPTERS}
    md = make_notebooks.MystToMarkdown()
    note = "> **Reading this notebook outside the book.**"
    for path in make_notebooks.export(tmp_path, strip=strip):
        nb = nbformat.read(path, as_version=4)
        book = jupytext.read(sources[path.stem])
        if strip:
            book, _ = make_notebooks.strip_solutions(book)
        book_md = [c.source for c in book.cells if c.cell_type == "markdown"]
        page_names = {s.split(":", 1)[0] for c in book_md for s in make_notebooks.glue_specs(c)}
        install = next(i for i, c in enumerate(nb.cells) if make_notebooks._is_install_cell(c))
        values = {i: _values_names(c) for i, c in enumerate(nb.cells)
                  if c.metadata.get("topicmech") == "values"}
        markdown = [i for i, c in enumerate(nb.cells)
                    if c.cell_type == "markdown" and not c.source.startswith(note)]
        # each book cell is one exported cell above the install cell, consecutive ones below
        deferred, k = install + 1, 0
        for text in book_md:
            want = re.sub(r"\n{3,}", "\n\n", md.convert(text, path.stem))
            specs = make_notebooks.glue_specs(text)
            got, shown = [], []
            while "\n\n".join(got) != want:
                assert k < len(markdown) and len("\n\n".join(got)) < len(want), (
                    f"{path.name}: the exported cells do not give back {want[:80]!r}")
                got.append(nb.cells[markdown[k]].source)
                i, k = markdown[k], k + 1
                shown += [s for s in values.get(deferred if i < install else i + 1, [])
                          if s not in shown]
                if i < install:
                    assert len(got) == 1, f"{path.name}: a cell above the install cell is cut"
                    deferred += bool(specs)
            assert shown == specs, f"{path.name}: {want[:80]!r}"
        assert k == len(markdown), path.name
        # the deferred values cells, then each one right after the markdown cell it shows
        for i in values:
            if i >= deferred:
                above = nb.cells[i - 1]
                assert above.cell_type == "markdown", f"{path.name}, cell {i}"
                names = {s.split(":", 1)[0] for s in values[i]}
                glued_above = set(CODE_NAME.findall(above.source)) & page_names
                assert names == glued_above, f"{path.name}, cell {i}: {names ^ glued_above}"
            assert i > install and i not in markdown
        for i in markdown:
            cell = nb.cells[i]
            assert cell.source.strip() and _balanced(cell.source), f"{path.name}, cell {i}"
            if i > install and set(CODE_NAME.findall(cell.source)) & page_names:
                assert i + 1 in values, f"{path.name}: no values cell after cell {i}"
        # as many glued numbers in the text as in the book, none lost at a cut
        n_book = sum(len(make_notebooks.GLUE_PLACEHOLDER.findall(c)) for c in book_md)
        n_out = sum(1 for i in markdown for name in CODE_NAME.findall(nb.cells[i].source)
                    if name in page_names)
        assert n_out == n_book, path.name
        for i, cell in enumerate(nb.cells):
            if i in values:
                assert cell.cell_type == "code" and "tags" not in cell.metadata
                assert max(map(len, cell.source.splitlines())) <= make_notebooks.WIDTH


def test_cells_are_cut_only_between_paragraphs_that_may_part() -> None:
    text = "\n".join([
        "(sec-a)=", "", "## Heading", "", "Intro, no numbers.", "",
        "A {glue:text}`a:.2f` here.", "", "```python", "x = 1", "", "y = 2", "```", "",
        "- item {glue:text}`b`", "", "- item two", "", "  continued {glue:text}`c`", "",
        "After the list.", "", "$$", "x", "", "y", "$$ (eq-x)", "",
        "::::{note}", "Body {glue:text}`d`", "", ":::{math}", "z", "", ":::", "more", "::::", "",
        "| a | b |", "|---|---|", "| {glue:text}`e` | 2 |", "", "Tail.", "", "(sec-b)=",
    ])
    pieces = make_notebooks.split_paragraphs(text)
    assert pieces == [
        "(sec-a)=\n\n## Heading", "Intro, no numbers.", "A {glue:text}`a:.2f` here.",
        "```python\nx = 1\n\ny = 2\n```",
        "- item {glue:text}`b`\n\n- item two\n\n  continued {glue:text}`c`",
        "After the list.", "$$\nx\n\ny\n$$ (eq-x)",
        "::::{note}\nBody {glue:text}`d`\n\n:::{math}\nz\n\n:::\nmore\n::::",
        "| a | b |\n|---|---|\n| {glue:text}`e` | 2 |", "Tail.", "(sec-b)="]
    parts = make_notebooks.split_at_values(text)
    assert [specs for _, specs in parts] == [["a:.2f"], ["b", "c"], ["d"], ["e"], []]
    assert parts[0][0].endswith("here.") and parts[2][0].startswith("After the list.")
    # the parts give the text back; a label line at the end makes no cell of its own
    assert "\n\n".join(t for t, _ in parts) == "\n\n".join(pieces)
    assert parts[-1][0] == "Tail.\n\n(sec-b)="
    assert make_notebooks.split_at_values("x\n\n(sec-c)=") == [("x\n\n(sec-c)=", [])]
    assert make_notebooks.split_at_values("A {glue:text}`a`\n\n(sec-c)=") == [
        ("A {glue:text}`a`\n\n(sec-c)=", ["a"])]


def test_values_cell_source_wraps_at_the_code_width() -> None:
    assert make_notebooks.values_source(["a:.3f", "b"]) == 'show_values("a:.3f", "b")'
    long = [f"name_{k}:.2f" for k in range(30)]
    source = make_notebooks.values_source(long)
    lines = source.splitlines()
    assert lines[0] == "show_values(" and lines[-1] == ")"
    assert max(map(len, lines)) <= make_notebooks.WIDTH
    import ast

    assert [a.value for a in ast.parse(source).body[0].value.args] == long
    assert make_notebooks.glue_specs("{glue:text}`a:.2f` and {glue:text}`b`, {glue:text}`a:.2f`") == ["a:.2f", "b"]


def test_citations_that_would_read_alike_are_an_error(tmp_path: Path) -> None:
    bib = tmp_path / "refs.bib"
    bib.write_text("@misc{a, author = {Li, Yuchen}, year = {2023}}\n"
                   "@misc{b, author = {Li, Yuchen}, year = {2023}}\n", encoding="utf-8")
    with pytest.raises(ValueError, match="'a' and 'b'"):
        make_notebooks._citations(bib)


def test_each_paragraph_gets_its_own_values_cell() -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# Title\n\nAbove the install cell: {glue:text}`a`.\n\nAnd `b`."),
        nbformat.v4.new_code_cell('%pip install "topicmech"'),
        nbformat.v4.new_markdown_cell(
            "First {glue:text}`b:.2f`.\n\nNo numbers.\n\n```{note}\nIn a note {glue:text}`c`.\n\n"
            "Still the note.\n```\n\nLast, no numbers."),
    ]
    out = make_notebooks.make_portable(nb, "0.0", "04_value_matrix", make_notebooks.MystToMarkdown())
    shown = [(c.cell_type, _values_names(c) if c.metadata.get("topicmech") else c.source)
             for c in out.cells]
    assert shown[0] == ("markdown", "# Title\n\nAbove the install cell: `a`.\n\nAnd `b`.")
    assert shown[1][0] == "markdown" and shown[2][0] == "code"  # the note, the install cell
    assert shown[3:] == [
        ("code", ["a"]),  # the cell above the install cell: not cut, its values here
        ("markdown", "First `b`."), ("code", ["b:.2f"]),
        ("markdown", "No numbers.\n\n> **Note**\n>\n> In a note `c`.\n>\n> Still the note."),
        ("code", ["c"]),
        ("markdown", "Last, no numbers."),
    ]
