"""Sphinx extension: a download / launch bar under the title of every chapter notebook.

For each page whose source is a MyST-Markdown notebook (a jupytext header with a
kernelspec), it adds links to

- the chapter as a classic ``.ipynb`` (written by ``scripts/make_notebooks.py`` into
  ``_build/html/notebooks`` by ``make book``),
- the same notebook opened in Google Colab (from the ``notebooks`` folder of the
  repository's published build), and
- the MyST source opened on Binder (Binder opens Markdown notebooks through jupytext).

The bar is raw HTML placed after the first heading, so it needs no extra Sphinx
configuration and the browser test checks its internal link like any other.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path, PurePosixPath

HEADING = re.compile(r"^# .+$", re.M)


def _is_notebook(source: str) -> bool:
    head = source[:600]
    return head.startswith("---") and "kernelspec" in head


def _bar(app, docname: str) -> str:
    repo = app.config.html_theme_options.get("repository_url", "").rstrip("/")
    branch = app.config.html_theme_options.get("repository_branch", "main")
    stem = PurePosixPath(docname).name
    depth = docname.count("/")
    up = "../" * depth
    slug = repo.removeprefix("https://github.com/")
    colab = f"https://colab.research.google.com/github/{slug}/blob/{branch}/notebooks/{stem}.ipynb"
    binder = f"https://mybinder.org/v2/gh/{slug}/{branch}?urlpath=lab/tree/{docname}.md"
    return (
        '\n<p class="notebook-links">'
        f'<a class="reference internal" href="{up}notebooks/{stem}.ipynb" download>Download notebook (.ipynb)</a>'
        f' · <a class="reference external" href="{colab}">Open in Colab</a>'
        f' · <a class="reference external" href="{binder}">Launch on Binder</a>'
        "</p>\n"
    )


def _not_exported(srcdir: str) -> set[str]:
    """Pages that ``scripts/make_notebooks.py`` does not export (its ``EXCLUDED``)."""
    path = Path(srcdir) / "scripts" / "make_notebooks.py"
    spec = importlib.util.spec_from_file_location("make_notebooks", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return set(module.EXCLUDED)


def add_links(app, docname: str, source: list[str]) -> None:
    text = source[0]
    name = PurePosixPath(docname).name
    if not _is_notebook(text) or name.startswith("_") or name in _not_exported(app.srcdir):
        return
    m = HEADING.search(text)
    if m is None:
        return
    source[0] = text[: m.end()] + "\n" + _bar(app, docname) + text[m.end():]


def setup(app):
    app.connect("source-read", add_links)
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}
