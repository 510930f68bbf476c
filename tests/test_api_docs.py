"""The API page documents every public name of the package, each with a docstring."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

import topicmech

ROOT = Path(__file__).resolve().parents[1]
API_PAGE = (ROOT / "book" / "api.md").read_text(encoding="utf-8")
MODULES = sorted(m.name for m in pkgutil.iter_modules(topicmech.__path__) if not m.name.startswith("_"))


def test_every_module_is_on_the_api_page() -> None:
    listed = set(re.findall(r"automodule:: topicmech\.(\w+)", API_PAGE))
    assert set(MODULES) <= listed, f"missing from book/api.md: {sorted(set(MODULES) - listed)}"


def test_every_module_is_in_the_package_map() -> None:
    for name in MODULES:
        assert f"topicmech.{name}`" in topicmech.__doc__, f"topicmech.{name} missing from the module map"


@pytest.mark.parametrize("name", MODULES)
def test_public_names_have_docstrings(name: str) -> None:
    module = importlib.import_module(f"topicmech.{name}")
    assert module.__doc__ and len(module.__doc__.strip()) > 40, f"topicmech.{name} needs a module docstring"
    assert hasattr(module, "__all__"), f"topicmech.{name} must declare __all__"
    for public in module.__all__:
        obj = getattr(module, public)
        if inspect.isfunction(obj) or inspect.isclass(obj):
            assert inspect.getdoc(obj), f"topicmech.{name}.{public} has no docstring"
