"""House rules of the book's pages that a reader sees (``book/*.md``).

- No code line over 88 characters: a wider visible line is cut off in the rendered column,
  and a hidden one is read in the source and in the exported notebooks. The rule covers
  every line of every code cell, hidden or not, and every line of its options (the YAML
  cell metadata, figure captions included); prose lines are wrapped by the renderer and
  are exempt. A cell is visible unless its tags hide its input (``remove-input``,
  ``remove-cell``, ``hide-input``, ``hide-cell``).
- Every cell's options parse as YAML, and every figure caption is a non-empty string.
- At most 40 visible ``glue(`` lines in the whole book: numbers for the prose are glued in
  bookkeeping cells that readers do not see (``tm.glue_values``).
- Every markdown table row has as many cells as its header row, and no row sits outside a
  table (a row after a blank line renders as text, not in the table above it).
- The package source that a page shows with ``literalinclude`` keeps to 88 characters a
  line too: the lines it shows, after ``:pyobject:``, ``:start-after:``/``:start-at:``,
  ``:end-before:``/``:end-at:``, ``:lines:`` and ``:dedent:``, in Sphinx's order.
- Neither convention is called "the authors'": the theory's convention (masked positions
  visible as keys) and the released code's convention (selected positions hidden as keys).
"""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

BOOK = Path(__file__).resolve().parents[1] / "book"
PAGES = sorted(BOOK.glob("*.md"))
HIDDEN_TAGS = ("remove-input", "remove-cell", "hide-input", "hide-cell")
MAX_WIDTH = 88
MAX_VISIBLE_GLUE = 40


@dataclass
class CodeCell:
    """One ``{code-cell}`` of a page: its option lines and its code lines, numbered."""

    options: list[tuple[int, str]] = field(default_factory=list)
    code: list[tuple[int, str]] = field(default_factory=list)
    yaml_options: bool = False  # options in a ``---`` block rather than ``:key:`` lines

    @property
    def hidden(self) -> bool:
        return any(tag in line for _, line in self.options for tag in HIDDEN_TAGS)

    def metadata(self) -> dict:
        """The cell's options as jupytext reads them (YAML block or short-form lines)."""
        if self.yaml_options:
            text = "\n".join(line for _, line in self.options)
        else:
            text = "\n".join(line[1:].replace(":", ": ", 1) for _, line in self.options)
        return yaml.safe_load(text) or {}


def code_cells(text: str) -> list[CodeCell]:
    """Every code cell of a page, in order."""
    lines = text.split("\n")
    cells: list[CodeCell] = []
    i = 0
    while i < len(lines):
        if not lines[i].startswith("```{code-cell}"):
            i += 1
            continue
        cell, j = CodeCell(), i + 1
        if j < len(lines) and lines[j].strip() == "---":          # YAML options block
            cell.yaml_options = True
            j += 1
            while j < len(lines) and lines[j].strip() != "---":
                cell.options.append((j + 1, lines[j]))
                j += 1
            j += 1
        while j < len(lines) and lines[j].startswith(":"):          # short-form options
            cell.options.append((j + 1, lines[j]))
            j += 1
        while j < len(lines) and not lines[j].startswith("```"):
            cell.code.append((j + 1, lines[j]))
            j += 1
        cells.append(cell)
        i = j + 1
    return cells


def visible_code(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line of code a reader sees on a page."""
    return [line for cell in code_cells(text) if not cell.hidden for line in cell.code]


def cell_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every code and option line of every code cell."""
    return [line for cell in code_cells(text) for line in cell.options + cell.code]


def metadata_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of the page's front matter and of every markdown cell's metadata."""
    lines = text.split("\n")
    out: list[tuple[int, str]] = []
    if lines and lines[0] == "---":
        end = lines.index("---", 1)
        out += [(n + 1, lines[n]) for n in range(end + 1)]
    return out + [(n + 1, line) for n, line in enumerate(lines) if line.startswith("+++")]


def captions(metadata: object) -> list[object]:
    """Every value under a ``caption`` key, at any depth of a cell's metadata."""
    if isinstance(metadata, dict):
        found = [v for k, v in metadata.items() if k == "caption"]
        return found + [c for v in metadata.values() for c in captions(v)]
    if isinstance(metadata, list):
        return [c for v in metadata for c in captions(v)]
    return []


def test_parser_sees_only_visible_cells() -> None:
    page = "\n".join([
        "```{code-cell} ipython3", "x = 1", "```",
        "```{code-cell} ipython3", ":tags: [remove-cell]", "hidden = 1", "```",
        "```{code-cell} ipython3", "---", "tags: [hide-input]", "---", "also_hidden = 1", "```",
        "```python", "not_a_cell = 1", "```",
    ])
    assert [line for _, line in visible_code(page)] == ["x = 1"]
    assert [line for _, line in cell_lines(page)] == [
        "x = 1", ":tags: [remove-cell]", "hidden = 1", "tags: [hide-input]", "also_hidden = 1",
    ]


def test_parser_reads_options_and_captions() -> None:
    page = "\n".join([
        "Prose is not a cell.",
        "```{code-cell} ipython3", "---", "tags: [hide-input]", "mystnb:", "  figure:",
        "    caption: >-", "      A caption: with a colon,", "      on two lines.",
        "    name: fig-x", "---", "x = 1", "```",
        "```{code-cell} ipython3", ":tags: [remove-cell]", "y = 2", "```",
    ])
    first, second = code_cells(page)
    assert first.hidden and second.hidden
    assert captions(first.metadata()) == ["A caption: with a colon, on two lines."]
    assert second.metadata() == {"tags": ["remove-cell"]}
    assert captions(second.metadata()) == []
    front = "\n".join(["---", "jupytext:", "  formats: md:myst", "---", "Prose", "+++ {\"k\": 1}"])
    assert [n for n, _ in metadata_lines(front)] == [1, 2, 3, 4, 6]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_visible_code_line_wider_than_88(page: Path) -> None:
    wide = [f"{page.name}:{n}: {len(line)} chars" for n, line in visible_code(page.read_text())
            if len(line) > MAX_WIDTH]
    assert not wide, "visible code lines over 88 characters:\n" + "\n".join(wide)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_cell_line_wider_than_88(page: Path) -> None:
    """Hidden cells and cell metadata (figure captions) too; prose is exempt."""
    text = page.read_text()
    wide = [f"{page.name}:{n}: {len(line)} chars" for n, line in cell_lines(text) + metadata_lines(text)
            if len(line) > MAX_WIDTH]
    assert not wide, "code-cell and metadata lines over 88 characters:\n" + "\n".join(wide)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_cell_options_parse_and_captions_are_text(page: Path) -> None:
    bad = []
    for cell in code_cells(page.read_text()):
        line = cell.options[0][0] if cell.options else (cell.code or [(0, "")])[0][0]
        try:
            metadata = cell.metadata()
        except yaml.YAMLError as err:
            bad.append(f"{page.name}:{line}: options do not parse as YAML: {err}")
            continue
        if not isinstance(metadata, dict):
            bad.append(f"{page.name}:{line}: options are not a mapping: {metadata!r}")
            continue
        for caption in captions(metadata):
            if not isinstance(caption, str) or not caption.strip():
                bad.append(f"{page.name}:{line}: caption is not non-empty text: {caption!r}")
    assert not bad, "\n".join(bad)


def test_few_visible_glue_lines() -> None:
    count = sum(1 for page in PAGES for _, line in visible_code(page.read_text()) if "glue(" in line)
    assert count <= MAX_VISIBLE_GLUE, count


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_convention_is_called_the_authors(page: Path) -> None:
    text = page.read_text()
    bad = re.findall(r"the authors'? (?:own )?convention", text, flags=re.I)
    assert not bad, f"{page.name} calls a convention the authors': {bad}"


# --- markdown tables ------------------------------------------------------------------

DELIMITER_ROW = re.compile(r"^\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?$")
FENCE = re.compile(r"^(`{3,}|~{3,})\s*(.*)$")
# fences whose content is not markdown: code cells, code blocks, math, included files
VERBATIM_INFO = re.compile(
    r"^(\{(code-cell|code-block|code|sourcecode|literalinclude|math)\}|[^{]|$)"
)


def split_row(line: str) -> tuple[list[str], list[str]]:
    """The cells of a table row, and the pipes that sit inside math or code spans.

    A pipe separates cells unless it is escaped (``\\|``). One inside ``$...$`` or a
    backtick span is not counted as a separator here, but it is reported: the renderer
    (markdown-it's GFM tables) splits the row there all the same, so it must be escaped.
    """
    cells, current, hidden = [], "", []
    in_math = in_code = False
    i = 0
    while i < len(line):
        ch = line[i]
        if ch == "\\" and i + 1 < len(line):
            current += line[i:i + 2]
            i += 2
            continue
        if ch == "`" and not in_math:
            in_code = not in_code
        elif ch == "$" and not in_code:
            in_math = not in_math
        elif ch == "|" and (in_math or in_code):
            hidden.append(line)
        elif ch == "|":
            cells.append(current)
            current = ""
            i += 1
            continue
        current += ch
        i += 1
    cells.append(current)
    stripped = line.strip()
    if stripped.startswith("|"):
        cells.pop(0)
    if stripped.endswith("|") and not stripped.endswith("\\|") and len(cells) > 1:
        cells.pop()
    return [c.strip() for c in cells], hidden


def table_problems(text: str, name: str = "page") -> list[str]:
    """Rows whose cell count differs from their header's, and rows outside any table."""
    lines = text.split("\n")
    problems: list[str] = []
    fences: list[tuple[str, bool]] = []  # open fences: (backticks or tildes, verbatim)
    in_display_math = False
    i = 0
    while i < len(lines):
        stripped = lines[i].strip()
        match = FENCE.match(stripped)
        closes = (match and fences and not match.group(2)
                  and match.group(1).startswith(fences[-1][0]))
        if closes:
            fences.pop()
            i += 1
            continue
        if fences and fences[-1][1]:
            i += 1
            continue
        if match:
            fences.append((match.group(1), bool(VERBATIM_INFO.match(match.group(2)))))
            i += 1
            continue
        if stripped.startswith("$$"):
            in_display_math = not (in_display_math or stripped.endswith("$$") and len(stripped) > 2)
            i += 1
            continue
        if in_display_math:
            i += 1
            continue
        nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
        if "|" in stripped and DELIMITER_ROW.match(nxt) and "-" in nxt:
            header, _ = split_row(stripped)
            width = len(split_row(nxt)[0])
            if width != len(header):
                problems.append(f"{name}:{i + 2}: delimiter row has {width} cells, "
                                f"header {len(header)}")
            j = i + 2
            # the body runs to a blank line or the start of another block
            while j < len(lines) and lines[j].strip() and not re.match(
                    r"(`{3}|~{3}|#|\+\+\+|>)", lines[j].strip()):
                cells, in_spans = split_row(lines[j].strip())
                if len(cells) != len(header):
                    problems.append(f"{name}:{j + 1}: {len(cells)} cells, header "
                                    f"(line {i + 1}) has {len(header)}")
                if in_spans:
                    problems.append(f"{name}:{j + 1}: unescaped | inside $...$ or `...`")
                j += 1
            i = j
            continue
        if stripped.startswith("|") and stripped.endswith("|") and len(stripped) > 1:
            problems.append(f"{name}:{i + 1}: a table row outside any table "
                            "(after a blank line, or with no header and delimiter row)")
        i += 1
    return problems


def test_table_checker_counts_cells() -> None:
    good = "\n".join([
        "| a | b |", "|---|:-:|", r"| $\lvert x\rvert$ | `x` \| y |", "| {glue:text}`k:.2f` | 2 |",
        "", "```python", "| not | a | table |", "```",
    ])
    assert table_problems(good) == []
    # a directive's body is markdown: its tables are checked, and so are those after it
    note = ["```{note}", "| a | b |", "|---|---|", "| 1 |", "```"]
    assert len(table_problems("\n".join(note + [""] + note))) == 2
    assert split_row(r"| a \| b | c |")[0] == [r"a \| b", "c"]
    wide = "\n".join(["| a | b |", "|---|---|", "| 1 | 2 | 3 |", "", "| 4 | 5 |"])
    found = table_problems(wide)
    assert len(found) == 2 and "3 cells" in found[0] and "outside any table" in found[1]
    math_pipe = "\n".join(["| a | b |", "|---|---|", "| $|x|$ | 2 |"])
    assert "unescaped |" in table_problems(math_pipe)[0]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_table_rows_have_as_many_cells_as_their_header(page: Path) -> None:
    problems = table_problems(page.read_text(), page.name)
    assert not problems, "markdown tables:\n" + "\n".join(problems)


# --- package source shown with literalinclude ------------------------------------------

INCLUDE = re.compile(r"^\s*(`{3,}|~{3,}|:{3,})\{literalinclude\}\s+(\S+)\s*$")


def literalincludes(text: str) -> list[tuple[int, str, dict[str, str]]]:
    """(line number, path, options) of every ``literalinclude`` directive of a page."""
    lines = text.split("\n")
    found = []
    for n, line in enumerate(lines):
        match = INCLUDE.match(line)
        if not match:
            continue
        options = {}
        for option in lines[n + 1:]:
            key = re.match(r"^\s*:([\w-]+):\s*(.*)$", option)
            if not key:
                break
            options[key.group(1)] = key.group(2).strip()
        found.append((n + 1, match.group(2), options))
    return found


def python_object_lines(source: str, dotted: str) -> tuple[int, int]:
    """First and last line (1-based) of a function or class, decorators included."""
    body: list[ast.stmt] = ast.parse(source).body
    node = None
    for name in dotted.split("."):
        node = next((n for n in body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef
                                                   | ast.ClassDef) and n.name == name), None)
        if node is None:
            raise ValueError(f"pyobject {dotted!r} not found")
        body = node.body
    assert node is not None
    first = min([node.lineno] + [d.lineno for d in node.decorator_list])
    return first, node.end_lineno or node.lineno


def line_numbers(spec: str, count: int) -> list[int]:
    """0-based indices of a ``:lines:`` spec such as ``1,7-9`` or ``14-``, as Sphinx reads it."""
    out: list[int] = []
    for part in spec.split(","):
        part = part.strip()
        if "-" in part:
            start, _, end = part.partition("-")
            out += range(int(start or 1) - 1, int(end) if end else count)
        else:
            out.append(int(part) - 1)
    return [i for i in out if 0 <= i < count]


def shown_lines(path: Path, options: dict[str, str]) -> list[str]:
    """The lines of ``path`` a ``literalinclude`` with these options shows."""
    lines = path.read_text().split("\n")
    if "pyobject" in options:
        first, last = python_object_lines(path.read_text(), options["pyobject"])
        lines = lines[first - 1:last]
    for key, keep_match in (("start-after", False), ("start-at", True)):
        if key in options:
            n = next(i for i, line in enumerate(lines) if options[key] in line)
            lines = lines[n if keep_match else n + 1:]
    for key, keep_match in (("end-before", False), ("end-at", True)):
        if key in options:
            n = next(i for i, line in enumerate(lines) if options[key] in line)
            lines = lines[:n + 1 if keep_match else n]
    if "lines" in options:
        lines = [lines[i] for i in line_numbers(options["lines"], len(lines))]
    if "dedent" in options:
        width = options["dedent"]
        if width:
            lines = [line[int(width):] for line in lines]
        else:
            lines = textwrap.dedent("\n".join(lines)).split("\n")
    return lines


INCLUDES = [(page, n, target, options) for page in PAGES
            for n, target, options in literalincludes(page.read_text())]


def test_include_reader_agrees_with_sphinx() -> None:
    """Our reading of each directive is the one Sphinx renders (where Sphinx is installed)."""
    code = pytest.importorskip("sphinx.directives.code")
    config = pytest.importorskip("sphinx.config").Config({}, {})
    config.source_encoding = "utf-8"
    assert INCLUDES, "no literalinclude found: has the directive's spelling changed?"
    for page, _, target, options in INCLUDES:
        path = (page.parent / target).resolve()
        text, _ = code.LiteralIncludeReader(str(path), dict(options), config).read()
        assert text.rstrip("\n").split("\n") == shown_lines(path, options), (page, target)


@pytest.mark.parametrize("include", INCLUDES, ids=lambda i: f"{i[0].name}:{i[1]}")
def test_included_source_lines_within_88(include: tuple[Path, int, str, dict]) -> None:
    page, line, target, options = include
    path = (page.parent / target).resolve()
    assert path.is_file(), f"{page.name}:{line}: {target} does not exist"
    wide = [f"{len(text)} chars: {text.strip()[:60]}" for text in shown_lines(path, options)
            if len(text.expandtabs(8)) > MAX_WIDTH]
    assert not wide, (f"{page.name}:{line} shows {target} {options} with lines over 88 "
                      "characters (re-wrap them in the source):\n" + "\n".join(wide))
