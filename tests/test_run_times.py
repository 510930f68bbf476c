"""The run times the book quotes: one stored measurement, read by ``book/_ext/run_times.py``."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

# the book toolchain (Sphinx's docutils, jupytext) is not a dependency of the package: the
# lower-bound environment (scripts/check_lower_bounds.sh) has neither, and skips this file
pytest.importorskip("docutils")
pytest.importorskip("jupytext")

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


rt = _load("topicmech_run_times", ROOT / "book" / "_ext" / "run_times.py")
mk = _load("make_notebooks", ROOT / "scripts" / "make_notebooks.py")


def test_slowest_names_the_page_with_the_longest_stored_time() -> None:
    stored = {"pages": [{"page": "a", "wall_s": 3.0}, {"page": "b", "wall_s": 7.4}]}
    assert rt.slowest(stored) == "b"
    assert rt.slowest({}) == ""
    assert rt.about(7.4) == "about 7 s"


def test_exported_text_names_the_slowest_page_with_its_time() -> None:
    stored = rt.load(ROOT)
    seconds = rt.page_seconds(stored)
    page = rt.slowest(stored)
    text = mk.render_pagetimes("the slowest is {pagetime}`slowest`.")
    assert text.startswith(f"the slowest is {page} ({rt.about(seconds[page])}")


def test_every_stored_page_is_within_the_quick_mode_budget() -> None:
    # the budget the README, the introduction and the performance page state
    seconds = rt.page_seconds(rt.load(ROOT))
    assert seconds and max(seconds.values()) < 40, seconds
