"""Export the book's chapters (MyST-Markdown notebooks) to classic ``.ipynb`` files.

Usage::

    python scripts/make_notebooks.py --out notebooks
    python scripts/make_notebooks.py --out _build/students --strip-solutions

With ``--strip-solutions`` every gated solution (``{solution-start}`` ... ``{solution-end}``,
including the code cells between the gates) is replaced by a one-line note, giving a
students' edition. The chapter list comes from the book folder: every ``book/*.md`` with a
jupytext header, except files whose name starts with ``_`` and the pages in ``EXCLUDED``.

The exported notebooks run anywhere (Colab, Binder, a fresh virtual environment), without
Jupyter Book and without the repository:

* the install cell installs ``topicmech[notebooks]`` at this release (``__version__``) when
  the package is missing; the extra brings everything a chapter imports;
* ``from myst_nb import glue`` becomes a fallback: myst_nb's ``glue`` when it is installed,
  otherwise a stand-in that records each value in a dict (``GLUED``) and shows it when
  ``display`` is true;
* the ``{pagetime}`page``` role of the book (``book/_ext/run_times.py``) becomes the text
  it renders, the stored run time of the page ("about 9 s on two CPU cores"), so
  regenerate the notebooks after ``benchmarks/bench_chapters.py`` has stored new times.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import re
import sys
from pathlib import Path

import jupytext
import nbformat

ROOT = Path(__file__).resolve().parents[1]
START = re.compile(r"^(`{3,}|:{3,})\{solution-start\}", re.M)
END = re.compile(r"^(`{3,}|:{3,})\{solution-end\}[^\n]*\n\1[ \t]*$", re.M)
NOTE = "*Solution removed in the students' edition.*"
REPO_URL = "https://github.com/topicmech/topicmech.git"
# Pages that cannot run outside the repository, with the reason.
EXCLUDED = {"performance": "reads the stored benchmark results in benchmarks/results/"}
PAGETIME = re.compile(r"\{pagetime\}`([^`]*)`")
GLUE_IMPORT = re.compile(r"^([ \t]*)from myst_nb import glue[ \t]*$", re.M)
GLUE_FALLBACK = '''try:
    from myst_nb import glue
except ImportError:  # outside Jupyter Book: record glued values, show them on request
    from IPython.display import display as _display

    GLUED = {}

    def glue(name, value, display=True):
        """Record ``value`` under ``name`` in ``GLUED``; show it when ``display`` is true."""
        GLUED[name] = value
        if display:
            _display(value)'''


def package_version(init: Path = ROOT / "topicmech" / "__init__.py") -> str:
    """``topicmech.__version__``, read from the source without importing torch."""
    for node in ast.parse(init.read_text(encoding="utf-8")).body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and getattr(node.targets[0], "id", None) == "__version__"):
            return str(ast.literal_eval(node.value))
    raise ValueError(f"no __version__ in {init}")


def install_source(version: str) -> str:
    """The install cell: this release of ``topicmech[notebooks]``, only when it is missing."""
    return (
        "# Colab / Binder / a fresh environment: install the companion package (this release,\n"
        "# with everything the chapters import) when it is missing.\n"
        "try:\n"
        "    import topicmech\n"
        "except ImportError:\n"
        f'    %pip install -q "topicmech[notebooks] @ git+{REPO_URL}@v{version}"'
    )


def _run_times():
    """The book's run-time extension (``book/_ext/run_times.py``), loaded from its file."""
    spec = importlib.util.spec_from_file_location("run_times", ROOT / "book" / "_ext" / "run_times.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def render_pagetimes(text: str) -> str:
    """Replace each ``{pagetime}`page [full]``` by the stored time the book shows for it.

    Raises
    ------
    ValueError
        If a page has no stored run time (the book build fails on it too).
    """
    if not PAGETIME.search(text):
        return text
    rt = _run_times()

    def render(m: re.Match) -> str:
        page, mode = (m.group(1).split() + ["quick"])[:2]
        stored = rt.load(ROOT, mode)
        seconds = rt.page_seconds(stored)
        if page not in seconds:
            raise ValueError(f"no stored {mode}-mode run time for page {page!r}")
        return rt.about(seconds[page]) + (f" on {rt.cores(stored)}" if rt.cores(stored) else "")

    return PAGETIME.sub(render, text)


def _is_install_cell(cell: nbformat.NotebookNode) -> bool:
    return cell.cell_type == "code" and "%pip install" in cell.source and "topicmech" in cell.source


def make_portable(nb: nbformat.NotebookNode, version: str) -> nbformat.NotebookNode:
    """Pin the install cell to ``version`` (adding one if missing) and make ``glue`` optional."""
    install = [c for c in nb.cells if _is_install_cell(c)]
    for cell in install:
        cell.source = install_source(version)
    if not install:
        first_code = next((i for i, c in enumerate(nb.cells) if c.cell_type == "code"), len(nb.cells))
        cell = nbformat.v4.new_code_cell(install_source(version))
        cell.metadata["tags"] = ["remove-cell"]
        nb.cells.insert(first_code, cell)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = render_pagetimes(cell.source)
        if cell.cell_type == "code" and GLUE_IMPORT.search(cell.source):
            cell.source = GLUE_IMPORT.sub(
                lambda m: "\n".join(m.group(1) + line if line else line for line in GLUE_FALLBACK.splitlines()),
                cell.source)
    return nb


def chapter_sources(book: Path) -> list[Path]:
    """MyST-Markdown notebooks in ``book`` (files with a kernelspec header), sorted."""
    out = []
    for path in sorted(book.glob("*.md")):
        head = path.read_text(encoding="utf-8")[:600]
        if (not path.name.startswith("_") and path.stem not in EXCLUDED
                and head.startswith("---") and "kernelspec" in head):
            out.append(path)
    return out


def _strip_text(text: str, inside: bool) -> tuple[str, bool, int]:
    """Strip gated solutions from one markdown cell; return (kept text, still inside, count)."""
    kept, removed = [], 0
    while text:
        if inside:
            end = END.search(text)
            if end is None:
                return "".join(kept), True, removed  # the solution goes on past this cell
            text, inside = text[end.end():], False
            continue
        start = START.search(text)
        if start is None:
            kept.append(text)
            break
        kept.append(text[: start.start()] + NOTE + "\n")
        removed += 1
        # skip the rest of the opening directive (its options and closing fence)
        fence = start.group(1)
        close = re.compile(rf"^{re.escape(fence)}\s*$", re.M)
        after = text[start.end():]
        m = close.search(after)
        text = after[m.end():] if m else ""
        inside = True
    return "".join(kept), inside, removed


def strip_solutions(nb: nbformat.NotebookNode) -> tuple[nbformat.NotebookNode, int]:
    """Remove gated solutions; return the new notebook and the number removed.

    Raises
    ------
    ValueError
        If a ``{solution-start}`` gate has no matching ``{solution-end}``.
    """
    cells, inside, removed = [], False, 0
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            text, inside, n = _strip_text(cell.source, inside)
            removed += n
            if text.strip():
                cell.source = text.strip("\n")
                cells.append(cell)
        elif not inside:
            cells.append(cell)
    if inside:
        raise ValueError("a {solution-start} gate has no matching {solution-end}")
    nb.cells = cells
    return nb, removed


def export(out: Path, strip: bool, book: Path = ROOT / "book") -> list[Path]:
    """Write one ``.ipynb`` per chapter into ``out``; return the written paths."""
    out.mkdir(parents=True, exist_ok=True)
    for stem, why in EXCLUDED.items():  # drop stale copies of pages that are not exported
        stale = out / f"{stem}.ipynb"
        if stale.exists():
            stale.unlink()
            print(f"removed {stale} (not exported: it {why})")
    version = package_version()
    written = []
    for src in chapter_sources(book):
        nb = jupytext.read(src)
        if strip:
            nb, n = strip_solutions(nb)
            print(f"{src.name}: removed {n} solution(s)")
        nb = make_portable(nb, version)
        for i, cell in enumerate(nb.cells):  # stable ids: regenerating gives identical files
            cell.id = f"{src.stem}-{i:03d}"
        nb.metadata.pop("jupytext", None)
        nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
        dest = out / (src.stem + ".ipynb")
        nbformat.validate(nb)
        nbformat.write(nb, dest)
        written.append(dest)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument("--strip-solutions", action="store_true", help="students' edition")
    args = parser.parse_args(argv)
    paths = export(args.out, args.strip_solutions)
    print(f"wrote {len(paths)} notebooks to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
