"""The chapters as classic notebooks: exported, committed for Colab, students' edition, runnable.

``notebooks/*.ipynb`` are generated from ``book/*.md`` by ``make notebooks`` and committed
so that the "Open in Colab" links work; these tests fail when a committed notebook is
stale, so the two can never drift apart.
"""

from __future__ import annotations

import importlib.util
import json
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
