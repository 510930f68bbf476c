"""Sphinx extension: a download / launch bar under the title of every chapter notebook.

For each page whose source is a MyST-Markdown notebook (a jupytext header with a
kernelspec), it adds links to

- the chapter as a classic ``.ipynb`` (written by ``scripts/make_notebooks.py`` into
  ``_build/html/notebooks`` by ``make book``),
- the same notebook opened in Google Colab, and
- the same notebook opened on Binder,

both from the committed ``notebooks/`` folder of the repository (written by
``scripts/make_notebooks.py --out notebooks``; a test keeps it in step with ``book/``).

The bar is raw HTML placed after the first heading, so it needs no extra Sphinx
configuration and the browser test checks its internal link like any other.

It also corrects the header launch buttons of sphinx-book-theme. The theme builds their
target as ``path_to_docs + pagename + extension``, here ``book/05_attention.md``: a
MyST-Markdown file, which Colab cannot open. No theme setting maps a page to a file in
another folder, so ``fix_launch_buttons`` runs after the theme's own ``html-page-context``
handler (priority 501) and points the Colab and Binder buttons at
``notebooks/<page>.ipynb``; pages that are not exported lose the launch buttons.
"""

from __future__ import annotations

import functools
import importlib.util
import re
from pathlib import Path, PurePosixPath

HEADING = re.compile(r"^# .+$", re.M)


def _is_notebook(source: str) -> bool:
    head = source[:600]
    return head.startswith("---") and "kernelspec" in head


def notebook_path(docname: str) -> str:
    """The committed notebook of a page, relative to the repository root."""
    return f"notebooks/{PurePosixPath(docname).name}.ipynb"


def launch_urls(app, docname: str) -> dict[str, str]:
    """Colab and Binder URLs that open the committed notebook of ``docname``."""
    options = app.config.html_theme_options
    repo = options.get("repository_url", "").rstrip("/")
    branch = options.get("repository_branch", "main")
    slug = repo.removeprefix("https://github.com/")
    launch = options.get("launch_buttons", {})
    colab = launch.get("colab_url", "https://colab.research.google.com").rstrip("/")
    binder = launch.get("binderhub_url", "https://mybinder.org").rstrip("/")
    ui = {"classic": "tree", "jupyterlab": "lab/tree"}[launch.get("notebook_interface", "classic")]
    path = notebook_path(docname)
    return {"Colab": f"{colab}/github/{slug}/blob/{branch}/{path}",
            "Binder": f"{binder}/v2/gh/{slug}/{branch}?urlpath={ui}/{path}"}


def _bar(app, docname: str) -> str:
    stem = PurePosixPath(docname).name
    up = "../" * docname.count("/")
    urls = launch_urls(app, docname)
    colab, binder = urls["Colab"], urls["Binder"]
    return (
        '\n<p class="notebook-links">'
        f'<a class="reference internal" href="{up}notebooks/{stem}.ipynb" download>Download notebook (.ipynb)</a>'
        f' · <a class="reference external" href="{colab}">Open in Colab</a>'
        f' · <a class="reference external" href="{binder}">Launch on Binder</a>'
        "</p>\n"
    )


# the repository (this file is book/_ext/notebook_links.py): a one-page build
# (`jupyter-book build book/PAGE.md`) has book/ as its source folder
ROOT = Path(__file__).resolve().parents[2]

@functools.cache
def _not_exported(srcdir: str) -> frozenset[str]:
    """Pages that ``scripts/make_notebooks.py`` does not export (its ``EXCLUDED``)."""
    path = ROOT / "scripts" / "make_notebooks.py"
    spec = importlib.util.spec_from_file_location("make_notebooks", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return frozenset(module.EXCLUDED)


def _exported(app, docname: str) -> bool:
    name = PurePosixPath(docname).name
    return not name.startswith("_") and name not in _not_exported(app.srcdir)


def add_links(app, docname: str, source: list[str]) -> None:
    text = source[0]
    if not _is_notebook(text) or not _exported(app, docname):
        return
    m = HEADING.search(text)
    if m is None:
        return
    source[0] = text[: m.end()] + "\n" + _bar(app, docname) + text[m.end():]


def fix_launch_buttons(app, pagename: str, templatename: str, context: dict, doctree) -> None:
    """Point the theme's header launch buttons at ``notebooks/<page>.ipynb``."""
    buttons = context.get("header_buttons")
    if not buttons:
        return
    groups = [b for b in buttons if b.get("label") == "launch-buttons"]
    if not groups:
        return
    if not _exported(app, pagename):
        for group in groups:
            buttons.remove(group)
        return
    urls = launch_urls(app, pagename)
    for group in groups:
        for button in group.get("buttons", []):
            if button.get("text") in urls:
                button["url"] = urls[button["text"]]
        # a launcher this extension does not know would still open book/*.md: drop it
        group["buttons"] = [b for b in group.get("buttons", [])
                            if b.get("text") in urls or b.get("type") == "javascript"]


def setup(app):
    app.connect("source-read", add_links)
    # after sphinx-book-theme's add_launch_buttons (priority 501)
    app.connect("html-page-context", fix_launch_buttons, priority=520)
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}
