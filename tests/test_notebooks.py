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


@pytest.mark.parametrize("strip", [False, True], ids=["full", "students"])
def test_each_paragraph_with_numbers_is_followed_by_its_values_cell(strip: bool, tmp_path: Path) -> None:
    """After each markdown cell that names glued numbers comes a cell that shows exactly them
    (for a markdown cell above the install cell: right after the install cell, which imports
    ``show_values``); no other cell carries the values metadata."""
    sources = {p.stem: p for p in CHAPTERS}
    for path in make_notebooks.export(tmp_path, strip=strip):
        nb = nbformat.read(path, as_version=4)
        book = jupytext.read(sources[path.stem])
        if strip:
            book, _ = make_notebooks.strip_solutions(book)
        # the exported markdown cells are the book's, in order, plus the note on the numbers
        specs = [make_notebooks.glue_specs(c.source) for c in book.cells if c.cell_type == "markdown"]
        note = "> **Reading this notebook outside the book.**"
        markdown = [i for i, c in enumerate(nb.cells)
                    if c.cell_type == "markdown" and not c.source.startswith(note)]
        assert len(markdown) == len(specs), path.name
        install = next(i for i, c in enumerate(nb.cells) if make_notebooks._is_install_cell(c))
        expected_at = {}  # index of each values cell -> the specs it must show
        deferred = install + 1
        for i, names in zip(markdown, specs):
            if not names:
                continue
            if i < install:
                expected_at[deferred], deferred = names, deferred + 1
            else:
                expected_at[i + 1] = names
            shown = set(re.findall(r"`([^`\s]+)`", nb.cells[i].source))
            assert {s.split(":", 1)[0] for s in names} <= shown, f"{path.name}: {names}"
        values = {i: c for i, c in enumerate(nb.cells) if c.metadata.get("topicmech") == "values"}
        assert sorted(values) == sorted(expected_at), path.name
        for i, cell in values.items():
            assert cell.cell_type == "code" and "tags" not in cell.metadata
            assert _values_names(cell) == expected_at[i], f"{path.name}, cell {i}"
            assert max(map(len, cell.source.splitlines())) <= make_notebooks.WIDTH


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
