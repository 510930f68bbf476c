"""Pytest configuration shared by the unit tests and the notebook tests.

nbval only collects ``.ipynb`` files, but the book's chapters are MyST-Markdown
notebooks (jupytext). The collector below reads ``book/**/*.md`` notebooks with jupytext
in memory and hands them to nbval, so ``pytest --nbval-lax`` executes every chapter.
Pages that are not notebooks (no kernelspec) and files whose name starts with ``_``
(templates) are skipped; so is anything under ``_build``.
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOPICMECH_JOBS", "1")  # pytest-xdist already spreads the tests over the cores
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest

ROOT = Path(__file__).resolve().parent
collect_ignore_glob = ["_build/*", ".venv/*", "book/_build/*"]


def _is_myst_notebook(path: Path) -> bool:
    if path.suffix != ".md" or path.name.startswith("_") or "_build" in path.parts:
        return False
    try:
        (ROOT / "book").resolve()
        path.resolve().relative_to((ROOT / "book").resolve())
    except ValueError:
        return False
    head = path.read_text(encoding="utf-8")[:600]
    return head.startswith("---") and "kernelspec" in head


def pytest_collect_file(file_path: Path, parent: pytest.Collector):
    opt = parent.config.option
    if not (getattr(opt, "nbval", False) or getattr(opt, "nbval_lax", False)):
        return None
    if not _is_myst_notebook(file_path):
        return None
    from nbval.plugin import IPyNbFile

    class MystNotebook(IPyNbFile):
        """nbval's notebook collector, reading a MyST-Markdown notebook through jupytext."""

        def collect(self):
            import jupytext
            import nbformat
            import nbval.plugin as plugin

            class _Reader:
                def __getattr__(self, name):
                    return getattr(nbformat, name)

                @staticmethod
                def read(path, as_version=4):
                    return jupytext.read(path)

            original = plugin.nbformat
            plugin.nbformat = _Reader()
            try:
                yield from super().collect()
            finally:
                plugin.nbformat = original

    return MystNotebook.from_parent(parent, path=file_path)


@pytest.fixture(autouse=True)
def _one_thread():
    """Two threads on two busy cores can be 10-100x slower than one."""
    import torch

    torch.set_num_threads(1)
    yield
