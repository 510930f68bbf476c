"""Sphinx extension: run times quoted from one stored measurement, and the build's own report.

Every run time the book quotes comes from one file: ``benchmarks/results/chapters.json``,
written by ``benchmarks/bench_chapters.py`` (each executable page in a fresh kernel, wall
time from starting the kernel to the last cell, with the machine it ran on). Full-mode times
come from ``chapters_full.json``, written by the same script under ``TOPICMECH_MODE=full``.

``{pagetime}`05_attention```
    renders the stored quick-mode time of a page with the machine's core count, as
    "about 15 s on two CPU cores", linked to the status page, which names the machine.
    ``{pagetime}`05_attention full``` quotes the full-mode file instead. Any page name
    works, and ``slowest`` names the slowest stored page with its time (a link to the page,
    then "(about 38 s on two CPU cores)"), so prose never names it by hand; a page with no stored time is a Sphinx warning, so the ``-W`` build fails
    until ``python benchmarks/bench_chapters.py --only <page>`` has measured it.

``{run-times}``
    a table of every stored page in the order of the table of contents (quick mode, and full
    mode where measured), preceded by one sentence per mode that names the machine, the date
    and the versions of the measurement.

``{build-report}``
    what this build ran with (mode, seed offset, commit, versions, machine) and, once every
    page has executed, a table of this build's execution of each page next to the stored
    time the headers quote. The table replaces myst-nb's ``nb-exec-table``, whose "Modified"
    column is the time of execution.
"""

from __future__ import annotations

import json
import os
import platform
import posixpath
import subprocess
from datetime import datetime
from importlib import metadata
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.addnodes import pending_xref
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective, SphinxRole

LOGGER = logging.getLogger(__name__)
RESULTS = Path("benchmarks") / "results"
# the repository (this file is book/_ext/run_times.py): a one-page build has book/ as its
# source folder
ROOT = Path(__file__).resolve().parents[2]
FILES = {"quick": "chapters.json", "full": "chapters_full.json"}
STATUS_LABEL = "status-run-times"
CORES = {1: "one", 2: "two", 3: "three", 4: "four", 6: "six", 8: "eight"}


def load(srcdir: str | Path, mode: str = "quick") -> dict:
    """The stored measurement of ``mode`` (``"quick"`` or ``"full"``); ``{}`` when absent."""
    path = Path(srcdir) / RESULTS / FILES[mode]
    if not path.exists():
        return {}
    return json.loads(path.read_text(encoding="utf-8"))


def book_order(pages: list[str]) -> list[str]:
    """``pages`` (file stems) in the order of the table of contents, unknown ones last."""
    toc = ROOT / "_toc.yml"
    order: list[str] = []
    if toc.exists():
        import yaml

        def walk(node) -> None:
            if isinstance(node, dict):
                for key in ("root", "file"):  # the root page first, then each file
                    if key in node:
                        order.append(posixpath.basename(str(node[key])))
                for value in node.values():
                    walk(value)
            elif isinstance(node, list):
                for item in node:
                    walk(item)

        walk(yaml.safe_load(toc.read_text(encoding="utf-8")))
    rank = {page: i for i, page in enumerate(order)}
    return sorted(pages, key=lambda page: (rank.get(page, len(rank)), pages.index(page)))


def page_seconds(stored: dict) -> dict[str, float]:
    """Page name (file stem) -> stored wall time in seconds."""
    return {r["page"]: float(r["wall_s"]) for r in stored.get("pages", [])}


def slowest(stored: dict) -> str:
    """The stored page (file stem) that took longest; ``""`` when nothing is stored."""
    seconds = page_seconds(stored)
    return max(seconds, key=seconds.get) if seconds else ""


def about(seconds: float) -> str:
    """A rounded duration for prose: "about 9 s", "about 15 s", "about 2.5 min"."""
    if seconds < 100:
        return f"about {max(1, round(seconds))} s"
    return f"about {seconds / 60:.1f} min"


def cores(stored: dict) -> str:
    n = stored.get("machine", {}).get("usable_cores")
    if not n:
        return ""
    return f"{CORES.get(n, str(n))} CPU core{'s' if n != 1 else ''}"


def machine_sentence(stored: dict) -> str:
    """Where and when a stored measurement was taken, in one sentence."""
    m = stored.get("machine", {})
    gpu = f"; GPU: {m['cuda']}" if m.get("cuda") else ""
    return (f"{m.get('mode', 'quick').capitalize()}-mode times were measured "
            f"on {m.get('date', '?')[:10]}, on "
            f"{m.get('usable_cores', '?')} usable cores (CPU: {m.get('cpu_model', 'unknown')}"
            f"{gpu}) with one torch thread "
            f"(Python {m.get('python', '?')}, torch {m.get('torch', '?')}, NumPy "
            f"{m.get('numpy', '?')}): each page in a fresh Jupyter kernel, timed from starting "
            "the kernel to the end of its last cell.")


def _ref(target: str, text: str, refdoc: str, reftype: str = "ref") -> pending_xref:
    ref = pending_xref("", refdomain="std", reftype=reftype, reftarget=target, refdoc=refdoc,
                       refexplicit=bool(text), refwarn=True)
    ref += nodes.inline(text=text) if text else nodes.inline()
    return ref


def chapter_number(page: str) -> str:
    """A chapter's number from its file stem (``05_attention`` -> ``"5"``); ``""`` otherwise."""
    stem = posixpath.basename(page)
    return str(int(stem[:2])) if stem[:2].isdigit() else ""


def _doc(page: str, refdoc: str) -> pending_xref:
    """A link to ``book/<page>`` showing the page's title."""
    ref = pending_xref("", refdomain="std", reftype="doc", reftarget="/book/" + page,
                       refdoc=refdoc, refexplicit=False, refwarn=True)
    ref += nodes.inline(text=page)
    return ref


class PageTime(SphinxRole):
    """``{pagetime}`page``` or ``{pagetime}`page full```: the stored run time of a page."""

    def run(self):
        parts = self.text.split()
        page, mode = (parts + ["quick"])[:2] if parts else ("", "quick")
        if len(parts) > 2 or mode not in FILES:
            return self._fail(f"pagetime: expected `page` or `page full`, got {self.text!r}")
        path = ROOT / RESULTS / FILES[mode]
        self.env.note_dependency(str(path))
        stored = load(ROOT, mode)
        seconds = page_seconds(stored)
        named = page == "slowest"
        if named:
            page = slowest(stored)
        if page not in seconds:
            return self._fail(
                f"pagetime: no stored {mode}-mode run time for page {page!r} in {path.name} "
                f"(stored: {', '.join(sorted(seconds)) or 'none'}); measure it with "
                f"python benchmarks/bench_chapters.py --only {page}")
        text = about(seconds[page])
        if cores(stored):
            text += " on " + cores(stored)
        if named:
            return [_doc(page, self.env.docname), nodes.Text(" ("),
                    _ref(STATUS_LABEL, text, self.env.docname), nodes.Text(")")], []
        return [_ref(STATUS_LABEL, text, self.env.docname)], []

    def _fail(self, message: str):
        LOGGER.warning(message, location=(self.env.docname, self.lineno))
        return [nodes.inline(text=self.text)], []


class RunTimes(SphinxDirective):
    """``{run-times}``: the stored time of every page, with the machine named."""

    has_content = False
    option_spec = {"pages": directives.unchanged}

    def run(self):
        quick, full = load(self.env.srcdir, "quick"), load(self.env.srcdir, "full")
        for mode in FILES:
            self.env.note_dependency(str(Path(self.env.srcdir) / RESULTS / FILES[mode]))
        if not quick:
            LOGGER.warning(f"run-times: no {RESULTS / FILES['quick']}",
                           location=(self.env.docname, self.lineno))
            return []
        q, f = page_seconds(quick), page_seconds(full)
        pages = self.options.get("pages", "").split() or book_order(list(q))
        unknown = [p for p in pages if p not in q]
        if unknown:
            LOGGER.warning(f"run-times: no stored run time for {', '.join(unknown)}",
                           location=(self.env.docname, self.lineno))
        rows = [[chapter_number(p), _doc(p, self.env.docname), about(q[p]),
                 about(f[p]) if p in f else "not measured"] for p in pages if p in q]
        # where both columns were measured, before the table
        out = [nodes.paragraph(text=machine_sentence(quick))]
        if full:
            out.append(nodes.paragraph(text=machine_sentence(full)))
        out.append(_table(["chapter", "page", "quick mode", "full mode"], rows))
        return out


class BuildReportNode(nodes.General, nodes.Element):
    """Placeholder for this build's execution table, filled once every page has run."""


def _versions() -> str:
    names = ["topicmech", "torch", "numpy", "scipy", "jupyter-book", "sphinx", "myst-nb"]
    out = [f"Python {platform.python_version()}"]
    for name in names:
        try:
            out.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            out.append(f"{name} (not installed)")
    return ", ".join(out)


def _commit(srcdir: str) -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=srcdir, capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
    try:
        commit = git("rev-parse", "--short=12", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return "unknown (not a git checkout)"
    return commit + (" with uncommitted changes" if dirty else "")


def _benchmarks_common():
    """``benchmarks/_common.py``, the one place that describes a machine (stdlib imports only)."""
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "_common.py"
    spec = importlib.util.spec_from_file_location("topicmech_benchmarks_common", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cpu() -> str:
    return _benchmarks_common().cpu_model()


def build_facts(srcdir: str) -> list[tuple[str, str]]:
    """(name, value) pairs describing this build."""
    from topicmech.utils import run_mode, seed_offset  # the package's reading of the variables

    mode, offset = run_mode(), seed_offset()
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return [
        ("mode", f"{mode} (TOPICMECH_MODE)"),
        ("seed offset", f"{offset} (TOPICMECH_SEED_OFFSET; 0 runs the committed seeds)"),
        ("commit", _commit(srcdir)),
        ("built", datetime.now().strftime("%Y-%m-%d %H:%M")),
        ("machine", f"{n} usable cores (CPU: {_cpu()})"),
        ("versions", _versions()),
    ]


class BuildReport(SphinxDirective):
    """``{build-report}``: this build's settings, then its execution table."""

    has_content = False

    def run(self):
        from myst_nb.sphinx_ import NbMetadataCollector

        NbMetadataCollector.set_doc_data(self.env, self.env.docname, "has_build_report", True)
        facts = [[name, value] for name, value in build_facts(self.env.srcdir)]
        return [_table(["setting", "value of this build"], facts), BuildReportNode()]


def _when(mtime) -> str:
    return datetime.fromtimestamp(mtime).strftime("%Y-%m-%d %H:%M:%S") if mtime else ""


class BuildReportTransform(SphinxPostTransform):
    default_priority = 8  # before the reference resolvers (9, 10), like myst-nb's table

    def run(self, **kwargs) -> None:
        from myst_nb.sphinx_ import NbMetadataCollector

        data = NbMetadataCollector.get_doc_data(self.env)
        stored = page_seconds(load(self.env.srcdir, "quick"))
        docname = self.env.docname
        for node in self.document.findall(BuildReportNode):
            rows = []
            by_page = {posixpath.basename(doc): doc for doc in data}
            for doc in (by_page[page] for page in book_order(list(by_page))):
                ex = data[doc].get("exec_data")
                if not ex:
                    continue
                page = posixpath.basename(doc)
                ref = pending_xref("", refdomain="std", reftype="doc", refdoc=docname,
                                   reftarget=posixpath.relpath(doc, posixpath.dirname(docname)),
                                   refexplicit=False, refwarn=True)
                ref += nodes.inline(text=doc)
                ok = "ran without error" if ex.get("succeeded") else f"failed: {ex.get('error')}"
                runtime = ex.get("runtime")
                rows.append([chapter_number(page), ref, _when(ex.get("mtime")),
                             "-" if runtime is None else f"{runtime:.1f}",
                             f"{stored[page]:.1f}" if page in stored else "not stored", ok])
            node.replace_self(_table(
                ["chapter", "page", "executed at", "run time in this build (s)",
                 "stored run time (s), quoted in the headers", "status"], rows))


def _update_reports(app, env):
    """Pages with a build report are rewritten once every page has executed."""
    from myst_nb.sphinx_ import NbMetadataCollector

    return [doc for doc, d in NbMetadataCollector.get_doc_data(env).items()
            if d.get("has_build_report")]


def _cell(value) -> nodes.entry:
    if isinstance(value, nodes.Node):
        para = nodes.paragraph()
        para += value
        return nodes.entry("", para)
    return nodes.entry("", nodes.paragraph(text=str(value)))


def _table(header: list[str], rows: list[list]) -> nodes.table:
    table = nodes.table(classes=["colwidths-auto"])
    group = nodes.tgroup(cols=len(header))
    table += group
    group += [nodes.colspec(colwidth=1) for _ in header]
    head, body = nodes.thead(), nodes.tbody()
    group += head
    group += body
    head += nodes.row("", *[_cell(h) for h in header])
    for row in rows:
        body += nodes.row("", *[_cell(v) for v in row])
    return table


def setup(app):
    app.add_role("pagetime", PageTime())
    app.add_directive("run-times", RunTimes)
    app.add_directive("build-report", BuildReport)
    app.add_node(BuildReportNode)
    app.add_post_transform(BuildReportTransform)
    app.connect("env-updated", _update_reports)
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}
