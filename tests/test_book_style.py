"""House rules of the book's pages that a reader sees (``book/*.md``).

- No visible code line over 88 characters: a wider line is cut off in the rendered column.
  A cell is visible unless its tags hide its input (``remove-input``, ``remove-cell``,
  ``hide-input``, ``hide-cell``).
- At most 40 visible ``glue(`` lines in the whole book: numbers for the prose are glued in
  bookkeeping cells that readers do not see (``tm.glue_values``).
- Neither convention is called "the authors'": the theory's convention (masked positions
  visible as keys) and the released code's convention (selected positions hidden as keys).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

BOOK = Path(__file__).resolve().parents[1] / "book"
PAGES = sorted(BOOK.glob("*.md"))
HIDDEN_TAGS = ("remove-input", "remove-cell", "hide-input", "hide-cell")
MAX_WIDTH = 88
MAX_VISIBLE_GLUE = 40


def visible_code(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line of code a reader sees on a page."""
    lines = text.split("\n")
    out: list[tuple[int, str]] = []
    i = 0
    while i < len(lines):
        if not lines[i].startswith("```{code-cell}"):
            i += 1
            continue
        j, options = i + 1, []
        if j < len(lines) and lines[j].strip() == "---":          # YAML options block
            j += 1
            while j < len(lines) and lines[j].strip() != "---":
                options.append(lines[j])
                j += 1
            j += 1
        while j < len(lines) and lines[j].startswith(":"):          # short-form options
            options.append(lines[j])
            j += 1
        hidden = any(tag in line for line in options for tag in HIDDEN_TAGS)
        while j < len(lines) and not lines[j].startswith("```"):
            if not hidden:
                out.append((j + 1, lines[j]))
            j += 1
        i = j + 1
    return out


def test_parser_sees_only_visible_cells() -> None:
    page = "\n".join([
        "```{code-cell} ipython3", "x = 1", "```",
        "```{code-cell} ipython3", ":tags: [remove-cell]", "hidden = 1", "```",
        "```{code-cell} ipython3", "---", "tags: [hide-input]", "---", "also_hidden = 1", "```",
        "```python", "not_a_cell = 1", "```",
    ])
    assert [line for _, line in visible_code(page)] == ["x = 1"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_visible_code_line_wider_than_88(page: Path) -> None:
    wide = [f"{page.name}:{n}: {len(line)} chars" for n, line in visible_code(page.read_text())
            if len(line) > MAX_WIDTH]
    assert not wide, "visible code lines over 88 characters:\n" + "\n".join(wide)


def test_few_visible_glue_lines() -> None:
    count = sum(1 for page in PAGES for _, line in visible_code(page.read_text()) if "glue(" in line)
    assert count <= MAX_VISIBLE_GLUE, count


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_convention_is_called_the_authors(page: Path) -> None:
    text = page.read_text()
    bad = re.findall(r"the authors'? (?:own )?convention", text, flags=re.I)
    assert not bad, f"{page.name} calls a convention the authors': {bad}"
