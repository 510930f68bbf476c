"""Export the book's chapters (MyST-Markdown notebooks) to classic ``.ipynb`` files.

Usage::

    python scripts/make_notebooks.py --out notebooks
    python scripts/make_notebooks.py --out _build/students --strip-solutions
    python scripts/make_notebooks.py --out notebooks --book-url https://HOST/PATH

With ``--strip-solutions`` every gated solution (``{solution-start}`` ... ``{solution-end}``,
including the code cells between the gates) is replaced by a one-line note, giving a
students' edition. The chapter list comes from the book folder: every ``book/*.md`` with a
jupytext header, except files whose name starts with ``_`` and the pages in ``EXCLUDED``.

The exported notebooks run anywhere (Colab, Binder, a fresh virtual environment), without
Jupyter Book and without the repository:

* the install cell installs ``topicmech[notebooks]`` at this release (``__version__``) when
  the package is missing; the extra brings everything a chapter imports;
* ``from myst_nb import glue`` becomes a fallback: myst_nb's ``glue`` when it is installed,
  otherwise a stand-in that records each value in ``topicmech.notebook.GLUED`` and shows
  it when ``display`` is true; the install cell imports that dict, which ``tm.glue_values``
  fills too;
* the markdown cells read as plain Markdown (:class:`MystToMarkdown`): references become
  titles in italics (links to the rendered book with ``--book-url``) or the numbers the
  book shows ("Fig. 4.1", "Theorem 3.2", "(4.1)", computed like Sphinx's ``numfig`` from
  ``_toc.yml``: :class:`LabelIndex`), citations "Author (year)", glued numbers their
  names in code font, a markdown cell that quotes some cut after each paragraph that does
  (:func:`split_at_values`; never inside a fence, a directive, display maths, a table or a
  list), each such paragraph followed by a short code cell (metadata
  ``{"topicmech": "values"}``) that shows its numbers, ``show_values("name:format", ...)``
  from :mod:`topicmech.notebook` (a note after the first cell says so), directives
  blockquotes under a bold title, labelled equations display maths with ``\\tag``;
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
EXCLUDED = {"performance": "reads the stored benchmark results in benchmarks/results/",
            "api": "shows the package's docstrings, which only Sphinx renders"}
PAGETIME = re.compile(r"\{pagetime\}`([^`]*)`")
GLUE_IMPORT = re.compile(r"^([ \t]*)from myst_nb import glue[ \t]*$", re.M)
GLUE_FALLBACK = '''try:
    from myst_nb import glue
except ImportError:  # outside Jupyter Book: record glued values, show them on request
    from IPython.display import display as _display

    from topicmech.notebook import GLUED  # where tm.glue_values records, too

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
        named = page == "slowest"
        if named:
            page = rt.slowest(stored)
        if page not in seconds:
            raise ValueError(f"no stored {mode}-mode run time for page {page!r}")
        text = rt.about(seconds[page]) + (f" on {rt.cores(stored)}" if rt.cores(stored) else "")
        return f"{page} ({text})" if named else text

    return PAGETIME.sub(render, text)


# ---------------------------------------------------------------------------------------------
# MyST markup -> plain Markdown, for readers outside Jupyter Book
# ---------------------------------------------------------------------------------------------
#: Sphinx's numfig prefixes (``numfig_format``) and sphinx-proof's / sphinx-exercise's names.
KIND_NAMES = {"figure": "Fig.", "table": "Table", "code-block": "Listing", "exercise": "Exercise"}
#: The options line of a directive (``:label: x``) and the MyST label line ``(label)=``.
OPTION = re.compile(r"^[ \t]*:([\w-]+):[ \t]*(.*)$")
LABEL_LINE = re.compile(r"^[ \t]*\(([^()\s]+)\)=[ \t]*$")
HEADING = re.compile(r"^(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
DIRECTIVE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|:{3,})\{(?P<name>[^}\s]+)\}[ \t]*(?P<arg>.*?)[ \t]*$")
CODE_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[^`{]*$")
LABELLED_EQ = re.compile(r"^(?P<indent>[ \t]*)\$\$[ \t]*\((?P<label>[^()\s]+)\)[ \t]*$")
ROLE = re.compile(r"\{(?P<name>[a-z][\w:-]*)\}`(?P<body>[^`]*)`")
EXPLICIT = re.compile(r"^(?P<text>.*?)\s*<(?P<label>[^<>]+)>$", re.S)
ADMONITIONS = {"note", "tip", "hint", "important", "warning", "caution", "attention", "danger",
               "error", "seealso", "dropdown", "admonition", "margin", "sidebar", "topic"}


def _norm_id(label: str) -> str:
    """The HTML id Sphinx gives a label (docutils ``make_id``)."""
    return re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")


def _first_words(text: str, n: int = 12) -> str:
    """The first sentence of a caption, or its first ``n`` words."""
    text = " ".join(text.split())
    sentence = re.split(r"(?<=[.:;])\s", text, maxsplit=1)[0].rstrip(".:;")
    words = sentence.split()
    return " ".join(words[:n]) + (" ..." if len(words) > n else "")


def toc_pages(root: Path = ROOT) -> list[tuple[str, int | None]]:
    """The book's pages in table-of-contents order, each with the chapter number the book
    shows (``None`` on unnumbered pages), from ``_toc.yml`` (parts marked ``numbered``
    number their chapters on from the previous numbered part)."""
    import yaml

    toc = yaml.safe_load((root / "_toc.yml").read_text(encoding="utf-8"))
    pages: list[tuple[str, int | None]] = [(Path(toc["root"]).name, None)]
    number = 0
    for part in toc.get("parts", [{"chapters": toc.get("chapters", [])}]):
        for chapter in part.get("chapters", []):
            if part.get("numbered"):
                number += 1
            pages.append((Path(chapter["file"]).name, number if part.get("numbered") else None))
    return pages


class Target:
    """What a label points at: its page, kind (``section``, ``figure``, ``equation``,
    ``exercise``, ``theorem``, ...), title or caption, and the number the book shows."""

    def __init__(self, page: str, kind: str, title: str = "", number: str | None = None,
                 anchor: str | None = None):
        self.page, self.kind, self.title, self.number, self.anchor = page, kind, title, number, anchor

    def numbered(self) -> str | None:
        """``"Fig. 4.1"``, ``"Theorem 3.2"``, ``"(4.1)"``, or ``None`` without a number."""
        if self.number is None:
            return None
        if self.kind == "equation":
            return f"({self.number})"
        return f"{KIND_NAMES.get(self.kind, self.kind.capitalize())} {self.number}"


def _yaml_options(lines: list[str], start: int) -> tuple[dict, int]:
    """A directive's options (``:key: value`` lines or a ``---`` YAML block) from ``start``;
    return them and the index of the first body line."""
    import yaml

    if start < len(lines) and lines[start].strip() == "---":
        end = next((j for j in range(start + 1, len(lines)) if lines[j].strip() == "---"), None)
        if end is not None:
            return yaml.safe_load("\n".join(lines[start + 1:end])) or {}, end + 1
    options, i = {}, start
    while i < len(lines) and OPTION.match(lines[i]):
        key, value = OPTION.match(lines[i]).groups()
        options[key] = value.strip()
        i += 1
    return options, i


def _closing(lines: list[str], start: int, fence: str) -> int:
    """Index of the line that closes a fence opened with ``fence`` (or ``len(lines)``)."""
    close = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
    return next((j for j in range(start, len(lines)) if close.match(lines[j])), len(lines))


class LabelIndex:
    """Every label of the book (``(label)=`` before a heading, ``:label:`` / ``:name:`` of a
    directive, figures' ``name`` in code-cell metadata, ``$$ (label)`` equations) with the
    number the built book shows.

    Numbers follow Sphinx's ``numfig``: one counter per kind (figure, equation, exercise and
    each ``prf`` kind) and per chapter number, so a numbered chapter counts from 1 ("Fig. 4.2")
    and the unnumbered pages share one running counter in table-of-contents order
    ("Lemma 3", "(18)"). Only labelled equations are numbered; ``:nonumber:`` items are not.
    """

    def __init__(self, book: Path = ROOT / "book", root: Path = ROOT):
        self.targets: dict[str, Target] = {}
        self.page_titles: dict[str, str] = {}
        self.chapters: dict[str, int | None] = {}
        counters: dict[tuple[str, int | None], int] = {}
        for stem, chapter in toc_pages(root):
            path = book / f"{stem}.md"
            if not path.exists():
                continue
            self.chapters[stem] = chapter
            self._scan(stem, chapter, path.read_text(encoding="utf-8"), counters)

    def _add(self, label: str, target: Target, counters: dict, chapter: int | None, number: bool) -> None:
        if number:
            key = (target.kind, chapter)
            counters[key] = counters.get(key, 0) + 1
            target.number = (f"{chapter}." if chapter is not None else "") + str(counters[key])
        if target.anchor is None:
            target.anchor = _norm_id(label)
        self.targets[label] = target

    def _scan(self, stem: str, chapter: int | None, text: str, counters: dict) -> None:
        nb = jupytext.reads(text, fmt="md:myst")
        for cell in nb.cells:
            if cell.cell_type == "code":
                figure = cell.metadata.get("mystnb", {}).get("figure", {})
                if figure.get("name"):
                    target = Target(stem, "figure", _first_words(str(figure.get("caption", ""))))
                    self._add(figure["name"], target, counters, chapter, True)
            elif cell.cell_type == "markdown":
                self._scan_markdown(stem, chapter, cell.source.splitlines(), counters)

    def _scan_markdown(self, stem: str, chapter: int | None, lines: list[str], counters: dict) -> None:
        i, pending = 0, None
        while i < len(lines):
            line = lines[i]
            label = LABEL_LINE.match(line)
            heading = HEADING.match(line.strip())
            directive = DIRECTIVE.match(line)
            code = CODE_FENCE.match(line) if not directive else None
            equation = LABELLED_EQ.match(line)
            if label:
                pending = label.group(1)
            elif heading:
                title = heading.group(2)
                if len(heading.group(1)) == 1 and stem not in self.page_titles:
                    self.page_titles[stem] = title
                if pending:
                    self._add(pending, Target(stem, "section", title), counters, chapter, False)
                pending = None
            elif equation:
                self._add(equation.group("label"), Target(stem, "equation", anchor=f"equation-{_norm_id(equation.group('label'))}"),
                          counters, chapter, True)
            elif directive:
                name, arg = directive.group("name"), directive.group("arg")
                options, body = _yaml_options(lines, i + 1)
                label = options.get("label") or options.get("name")
                kind = name.split(":", 1)[1] if name.startswith("prf:") else name
                if name == "math":
                    kind = "equation"
                if label and name not in ("prf:proof",) and not name.startswith("solution"):
                    numbered = kind in ("equation", "figure", "table", "exercise") or name.startswith("prf:")
                    anchor = f"equation-{_norm_id(label)}" if kind == "equation" else None
                    title = arg if kind != "figure" else _first_words(arg)
                    self._add(label, Target(stem, kind, title, anchor=anchor), counters, chapter,
                              numbered and "nonumber" not in options)
                elif pending and not label:  # a label line just above a directive
                    self._add(pending, Target(stem, "section", arg), counters, chapter, False)
                pending = None
                end = _closing(lines, i + 1, directive.group("fence"))
                indent = directive.group("indent")
                # the body: nested directives and equations
                self._scan_markdown(stem, chapter, [b[len(indent):] for b in lines[body:end]], counters)
                i = end + 1
                continue
            elif code:
                i = _closing(lines, i + 1, code.group("fence")) + 1
                continue
            elif line.strip():
                pending = None
            i += 1


class MystToMarkdown:
    """Render a chapter's MyST markup as Markdown that classic Jupyter, JupyterLab and Colab
    show as it reads in the book.

    * ``{ref}`label``` / ``{ref}`text <label>``` become the target's title (or the text), a
      link to the rendered page when ``book_url`` is given, else in italics;
    * ``{numref}``, ``{prf:ref}`` and ``{eq}`` become the number the book shows ("Fig. 4.1",
      "Theorem 3.2", "(4.1)"), followed by the page's title when the target is on another,
      unnumbered page;
    * ``{cite:t}`` becomes "Author (year)" and ``{cite}`` / ``{cite:p}`` "(Author, year)",
      with the ``citetag`` of ``book/_ext/bib_author_year.py`` after the year;
    * ``{glue:text}`name:format``` becomes ``name`` in code font: the value is computed by
      the notebook's cells and kept in ``GLUED``;
    * directives become Markdown: admonitions and dropdowns a bold title over a blockquote,
      ``prf`` blocks and exercises "**Theorem 3.1 (title).**" over a blockquote, solutions a
      heading line, ``{math}`` and ``$$ (label)`` display maths with ``\\tag``, figures an
      image with its caption, ``literalinclude`` the included source.
    """

    def __init__(self, index: LabelIndex | None = None, bib: Path = ROOT / "references.bib",
                 book_url: str = "", root: Path = ROOT):
        self.index = index or LabelIndex()
        self.book_url = book_url.rstrip("/")
        self.root = root
        self.cites = _citations(bib)
        self.page = ""

    # -- inline roles ---------------------------------------------------------------------
    def _target(self, label: str) -> Target:
        target = self.index.targets.get(label)
        if target is None:
            raise ValueError(f"unknown label {label!r} on page {self.page!r}")
        return target

    def _link(self, text: str, target: Target, *, emphasis: bool) -> str:
        if self.book_url:
            anchor = "" if target.kind == "section" and target.title == self.index.page_titles.get(target.page) else f"#{target.anchor}"
            return f"[{text}]({self.book_url}/book/{target.page}.html{anchor})"
        return f"*{text}*" if emphasis else text

    def _numbered(self, label: str, explicit: str | None) -> str:
        target = self._target(label)
        shown = target.numbered()
        if explicit:
            text = explicit.replace("%s", target.number or "").replace("{number}", target.number or "")
            text = text.replace("{name}", target.title)
        elif shown:
            text = shown
            if self.index.chapters.get(target.page) is None and target.page != self.page:
                text += f" in *{self.index.page_titles.get(target.page, target.page)}*"
        else:
            text = target.title or label
        return self._link(text, target, emphasis=False)

    def role(self, name: str, body: str) -> str:
        """The Markdown for one role ``{name}`body```."""
        explicit = EXPLICIT.match(body)
        text, label = (explicit.group("text"), explicit.group("label")) if explicit else (None, body.strip())
        if name.startswith("glue"):
            return f"`{body.split(':', 1)[0].strip()}`"
        if name == "ref":
            target = self._target(label)
            return self._link(text or target.title or target.numbered() or label, target, emphasis=True)
        if name in ("numref", "prf:ref", "eq"):
            return self._numbered(label, text)
        if name == "doc":
            stem = Path(label).name
            title = text or self.index.page_titles.get(stem, stem)
            return self._link(title, Target(stem, "section", title, anchor=""), emphasis=True)
        if name in ("cite", "cite:p", "cite:t", "cite:ps", "cite:ts"):
            keys = [k.strip() for k in body.split(",") if k.strip()]
            missing = [k for k in keys if k not in self.cites]
            if missing:
                raise ValueError(f"unknown citation key {missing[0]!r} on page {self.page!r}")
            if name.startswith("cite:t"):
                return "; ".join(f"{self.cites[k][0]} ({self.cites[k][1]})" for k in keys)
            return "(" + "; ".join(f"{self.cites[k][0]}, {self.cites[k][1]}" for k in keys) + ")"
        if name == "math":
            return f"${body}$"
        if name == "pagetime":
            return render_pagetimes(f"{{pagetime}}`{body}`")
        raise ValueError(f"no Markdown rendering for the role {{{name}}} on page {self.page!r}")

    def inline(self, text: str) -> str:
        return ROLE.sub(lambda m: self.role(m.group("name"), m.group("body")), text)

    # -- blocks -----------------------------------------------------------------------------
    def convert(self, text: str, page: str) -> str:
        """``text`` (one markdown cell of ``page``) as plain Markdown."""
        self.page = page
        out = "\n".join(self._blocks(text.splitlines()))
        return re.sub(r"\n{3,}", "\n\n", out).strip("\n")

    def _blocks(self, lines: list[str]) -> list[str]:
        out: list[str] = []
        text: list[str] = []  # a run of plain lines: a role may span a line break

        def flush() -> None:
            if text:
                out.extend(self.inline("\n".join(text)).split("\n"))
                text.clear()

        i = 0
        while i < len(lines):
            if not (LABEL_LINE.match(lines[i]) or LABELLED_EQ.match(lines[i])
                    or DIRECTIVE.match(lines[i]) or CODE_FENCE.match(lines[i])):
                text.append(lines[i])
                i += 1
                continue
            flush()
            line = lines[i]
            directive = DIRECTIVE.match(line)
            code = CODE_FENCE.match(line) if not directive else None
            equation = LABELLED_EQ.match(line)
            if LABEL_LINE.match(line):
                i += 1
            elif equation:
                target = self._target(equation.group("label"))
                indent = equation.group("indent")
                if target.number:
                    out.append(f"{indent}\\tag{{{target.number}}}")
                out.append(f"{indent}$$")
                i += 1
            elif code:
                end = _closing(lines, i + 1, code.group("fence"))
                out.extend(lines[i:end + 1])
                i = end + 1
            elif directive:
                end = _closing(lines, i + 1, directive.group("fence"))
                options, body_start = _yaml_options(lines, i + 1)
                indent = directive.group("indent")
                body = [b[len(indent):] if b.startswith(indent) else b.lstrip() for b in lines[body_start:end]]
                rendered = self._directive(directive.group("name"), directive.group("arg"), options, body)
                out.extend(indent + r if r else "" for r in rendered)
                i = end + 1
        flush()
        return out

    def _quote(self, head: str, body: list[str]) -> list[str]:
        inner = self._blocks(body)
        while inner and not inner[0].strip():
            inner.pop(0)
        lines = [head] + ([""] if inner else []) + inner
        return [""] + [f"> {x}" if x.strip() else ">" for x in lines] + [""]

    def _directive(self, name: str, arg: str, options: dict, body: list[str]) -> list[str]:
        arg = self.inline(arg)
        label = options.get("label") or options.get("name")
        if name == "admonition" or name in ADMONITIONS:
            title = arg or name.capitalize()
            return self._quote(f"**{title}**", body)
        if name == "prf:proof":
            return self._quote("*Proof.*", body)
        if name.startswith("prf:") or name == "exercise":
            kind = name.split(":", 1)[-1]
            target = self.index.targets.get(label) if label else None
            head = (target.numbered() if target else None) or KIND_NAMES.get(kind, kind.capitalize())
            return self._quote(f"**{head}" + (f" ({arg})" if arg else "") + ".**", body)
        if name == "solution-start":
            target = self.index.targets.get(arg.strip())
            of = f" to {target.numbered()}" if target and target.numbered() else ""
            return ["", f"**Solution{of}.**", ""] + self._blocks(body)
        if name == "solution-end":
            return ["", "*End of the solution.*", ""]
        if name == "math":
            target = self.index.targets.get(label) if label else None
            tag = [f"\\tag{{{target.number}}}"] if target and target.number else []
            return ["", "$$"] + body + tag + ["$$", ""]
        if name == "figure":
            target = self.index.targets.get(label) if label else None
            caption = " ".join(self._blocks(body)).strip()
            number = f"{target.numbered()}: " if target and target.numbered() else ""
            return ["", f"![{caption}]({arg})", "", f"*{number}{caption}*", ""]
        if name == "literalinclude":
            return ["", f"```{options.get('language', 'python')}", *self._include(arg, options), "```", ""]
        if name in ("code-block", "code", "sourcecode"):
            return ["", f"```{arg}", *body, "```", ""]
        raise ValueError(f"no Markdown rendering for the directive {{{name}}} on page {self.page!r}")

    def _include(self, arg: str, options: dict) -> list[str]:
        """The lines a ``literalinclude`` shows (a ``pyobject`` or the whole file)."""
        path = (self.root / "book" / arg).resolve()
        source = path.read_text(encoding="utf-8")
        obj = options.get("pyobject")
        if not obj:
            return source.splitlines()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == obj:
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                return source.splitlines()[first - 1:node.end_lineno]
        raise ValueError(f"no {obj!r} in {arg} (literalinclude on page {self.page!r})")


def _citations(bib: Path) -> dict[str, tuple[str, str]]:
    """``key -> (authors, year)`` as the book cites them: one author "Li", two "Řehůřek and
    Sojka", more "Li et al."; the year followed by the entry's ``citetag`` ("2023, slides").
    ``ValueError`` naming the keys when two entries would cite alike (no ``citetag``)."""
    from pybtex.database import parse_file
    from pybtex.richtext import Text

    out = {}
    for key, entry in parse_file(str(bib)).entries.items():
        people = entry.persons.get("author") or entry.persons.get("editor") or []
        last = [Text.from_latex(" ".join(p.prelast_names + p.last_names)).render_as("text") for p in people]
        if len(last) == 1:
            who = last[0]
        elif len(last) == 2:
            who = f"{last[0]} and {last[1]}"
        elif last:
            who = f"{last[0]} et al."
        else:
            who = Text.from_latex(entry.fields.get("title", key)).render_as("text")
        year = entry.fields.get("year", "n.d.")
        tag = entry.fields.get("citetag")
        out[key] = (who, f"{year}, {tag}" if tag else year)
    seen: dict[tuple[str, str], str] = {}
    for key, cited in out.items():
        if cited in seen:  # the book tells them apart by a label letter; give them citetags
            raise ValueError(f"citations {seen[cited]!r} and {key!r} both read {cited[0]} ({cited[1]});"
                             " give them a citetag field in references.bib")
        seen[cited] = key
    return out


def _is_install_cell(cell: nbformat.NotebookNode) -> bool:
    return cell.cell_type == "code" and "%pip install" in cell.source and "topicmech" in cell.source


GLUE_PLACEHOLDER = re.compile(r"\{glue(?::\w+)?\}`([^`]+)`")
GLUE_NOTE = (
    "> **Reading this notebook outside the book.** A number that the text shows in code font,"
    " such as `{name}`, is computed by the code cells. The short cell after each such paragraph"
    " shows the paragraph's numbers (`name = value`, formatted as the book shows them) once the"
    " cells above it have run; a number computed further down reads \"not computed yet\" until"
    " its cell has run. `GLUED[\"{name}\"]` holds each number too. Titles in italics name the"
    " book's pages and sections; numbers such as \"Fig. 4.1\" or \"Theorem 3.1\" are the book's."
)
#: Appended to the install cell: the dict that tm.glue_values fills outside Jupyter Book, and
#: the function the values cells call.
GLUED_IMPORT = (
    "# the numbers the text shows as `name`, by name, once the cells below have run\n"
    "from topicmech.notebook import GLUED, show_values"
)
#: Metadata of the cells that show a paragraph's glued numbers (only in exported notebooks).
VALUES_META = {"topicmech": "values"}
WIDTH = 88


def glue_specs(text: str) -> list[str]:
    """The ``"name"`` / ``"name:format"`` of each ``{glue:text}`` role in ``text``, in order,
    each once."""
    specs: list[str] = []
    for m in GLUE_PLACEHOLDER.finditer(text):
        name, colon, fmt = m.group(1).partition(":")
        spec = name.strip() + (colon + fmt.strip() if colon else "")
        if spec not in specs:
            specs.append(spec)
    return specs


def values_source(specs: list[str]) -> str:
    """The values cell's code: ``show_values("a:.3f", "b")`` on one line, or wrapped with a
    hanging indent at :data:`WIDTH` characters."""
    args = [f'"{spec}"' for spec in specs]
    one = f"show_values({', '.join(args)})"
    if len(one) <= WIDTH:
        return one
    lines, line = [], "   "
    for arg in args:
        if len(line) + 1 + len(arg) + 1 > WIDTH and line.strip():
            lines.append(line)
            line = "   "
        line += f" {arg},"
    lines.append(line)
    return "\n".join(["show_values("] + lines + [")"])


def values_cell(specs: list[str]) -> nbformat.NotebookNode:
    """A code cell that shows the glued numbers ``specs`` (see :func:`values_source`)."""
    cell = nbformat.v4.new_code_cell(values_source(specs))
    cell.metadata.update(VALUES_META)
    return cell


#: A list item's first line (``- x``, ``* x``, ``+ x``, ``1. x``, ``1) x``).
LIST_ITEM = re.compile(r"^[ \t]*(?:[-*+]|\d{1,9}[.)])(?:[ \t]|$)")


def _math_end(lines: list[str], start: int) -> int:
    """Index of the line that closes a display-maths block opened by ``lines[start]``
    (a line starting with ``$$``): that line itself for ``$$ x $$``, else the next line that
    starts or ends with ``$$`` (``$$``, ``$$ (label)``, ``x $$``), or the last line."""
    first = lines[start].strip()
    if len(first) > 4 and first.endswith("$$"):
        return start
    for j in range(start + 1, len(lines)):
        line = lines[j].strip()
        if line.startswith("$$") or line.endswith("$$"):
            return j
    return len(lines) - 1


def split_paragraphs(text: str) -> list[str]:
    """Split one markdown cell's MyST source into the pieces a cell may be cut into: at blank
    lines, never inside a code fence, a directive (its whole body, nested ones included), a
    display-maths block (``$$ ... $$``), a table or a list (a blank line followed by an
    indented line or by another item of the same list does not cut), and never right after a
    label line ``(label)=``, which belongs to what follows. Joined with blank lines, the
    pieces give ``text`` back, up to blank lines at the cuts."""
    lines = text.split("\n")
    pieces: list[list[str]] = []
    current: list[str] = []
    blank, in_list = False, False
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            blank = True
            current.append(line)
            i += 1
            continue
        if blank or not current:  # a paragraph starts
            item = bool(LIST_ITEM.match(line))
            indented = line[:1] in (" ", "\t")
            written = [x for x in current if x.strip()]
            after_label = all(LABEL_LINE.match(x) for x in written)
            if written and not indented and not (in_list and item) and not after_label:
                pieces.append(current)
                current = []
            if not indented:
                in_list = item
            blank = False
        fence = DIRECTIVE.match(line) or CODE_FENCE.match(line)
        if fence:
            end = min(_closing(lines, i + 1, fence.group("fence")), len(lines) - 1)
        elif line.lstrip().startswith("$$"):
            end = _math_end(lines, i)
        else:
            end = i
        current.extend(lines[i:end + 1])
        i = end + 1
    if current:
        pieces.append(current)
    return [t for t in ("\n".join(piece).strip("\n") for piece in pieces) if t.strip()]


def split_at_values(text: str) -> list[tuple[str, list[str]]]:
    """Cut one markdown cell's MyST source after each piece (:func:`split_paragraphs`) that
    quotes glued numbers; return each part with the specs (:func:`glue_specs`) its values
    cell shows. Pieces without glued numbers stay with the piece before or after them, so a
    cut comes only where a values cell goes; the last part's specs may be empty."""
    parts: list[tuple[str, list[str]]] = []
    run: list[str] = []
    for piece in split_paragraphs(text):
        run.append(piece)
        specs = glue_specs(piece)
        if specs:
            parts.append(("\n\n".join(run), glue_specs("\n\n".join(run))))
            run = []
    if run and parts and all(LABEL_LINE.match(x) for x in "\n".join(run).split("\n") if x.strip()):
        # only label lines left (what they label is in the next cell): no empty cell for them
        parts[-1] = ("\n\n".join([parts[-1][0], *run]), parts[-1][1])
    elif run:
        parts.append(("\n\n".join(run), []))
    return parts


def make_portable(nb: nbformat.NotebookNode, version: str, page: str = "",
                  markdown: MystToMarkdown | None = None) -> nbformat.NotebookNode:
    """Pin the install cell to ``version`` (adding one if missing), make ``glue`` optional,
    and, when ``markdown`` is given, render the MyST markup of the markdown cells of ``page``
    as plain Markdown, with a note on the glued numbers after the first cell and, after each
    paragraph (or run of paragraphs, :func:`split_at_values`) that names glued numbers, a
    values cell (:func:`values_cell`) that shows them; the markdown cell is cut there. A
    markdown cell above the install cell, which imports ``show_values``, is not cut: its
    values cell comes right after the install cell."""
    install = [c for c in nb.cells if _is_install_cell(c)]
    source = install_source(version) + ("\n" + GLUED_IMPORT if markdown is not None else "")
    for cell in install:
        cell.source = source
    if not install:
        first_code = next((i for i, c in enumerate(nb.cells) if c.cell_type == "code"), len(nb.cells))
        cell = nbformat.v4.new_code_cell(source)
        cell.metadata["tags"] = ["remove-cell"]
        nb.cells.insert(first_code, cell)
    specs = {id(c): glue_specs(c.source) for c in nb.cells if c.cell_type == "markdown"}
    glued = [spec.split(":", 1)[0] for c in nb.cells for spec in specs.get(id(c), [])]
    if markdown is not None and glued:
        # below the install cell, a markdown cell that quotes glued numbers is cut after each
        # paragraph that quotes some, so that each values cell follows its own paragraph
        cells, installed, split = [], False, []  # split: keeps the ids in ``specs`` unique
        for cell in nb.cells:
            installed = installed or _is_install_cell(cell)
            if not (installed and specs.get(id(cell))):
                cells.append(cell)
                continue
            for text, part_specs in split_at_values(cell.source):
                part = nbformat.v4.new_markdown_cell(text)
                part.metadata.update(cell.metadata)
                specs[id(part)] = part_specs
                cells.append(part)
            split.append(cell)
        nb.cells = cells
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = render_pagetimes(cell.source)
            if markdown is not None:
                cell.source = markdown.convert(cell.source, page)
        if cell.cell_type == "code" and GLUE_IMPORT.search(cell.source):
            cell.source = GLUE_IMPORT.sub(
                lambda m: "\n".join(m.group(1) + line if line else line for line in GLUE_FALLBACK.splitlines()),
                cell.source)
    if markdown is not None and glued:
        cells, pending, installed = [], [], False
        for cell in nb.cells:
            cells.append(cell)
            if specs.get(id(cell)):
                (cells if installed else pending).append(values_cell(specs[id(cell)]))
            if _is_install_cell(cell) and not installed:  # show_values is imported from here on
                installed = True
                cells.extend(pending)
        nb.cells = cells
        first_md = next((i for i, c in enumerate(nb.cells) if c.cell_type == "markdown"), -1)
        nb.cells.insert(first_md + 1, nbformat.v4.new_markdown_cell(GLUE_NOTE.format(name=glued[0])))
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


def export(out: Path, strip: bool, book: Path = ROOT / "book", book_url: str = "") -> list[Path]:
    """Write one ``.ipynb`` per chapter into ``out``; return the written paths."""
    out.mkdir(parents=True, exist_ok=True)
    for stem, why in EXCLUDED.items():  # drop stale copies of pages that are not exported
        stale = out / f"{stem}.ipynb"
        if stale.exists():
            stale.unlink()
            print(f"removed {stale} (not exported: it {why})")
    version = package_version()
    markdown = MystToMarkdown(LabelIndex(book), book_url=book_url)
    written = []
    for src in chapter_sources(book):
        nb = jupytext.read(src)
        if strip:
            nb, n = strip_solutions(nb)
            print(f"{src.name}: removed {n} solution(s)")
        nb = make_portable(nb, version, src.stem, markdown)
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
    parser.add_argument("--book-url", default="",
                        help="base URL of the rendered book: references become links to its pages")
    args = parser.parse_args(argv)
    paths = export(args.out, args.strip_solutions, book_url=args.book_url)
    print(f"wrote {len(paths)} notebooks to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
