"""Sphinx extension: keep the API page to the package's own members.

``autodoc-skip-member`` hides, on every ``automodule`` of ``book/api.md``:

- the members of :class:`torch.nn.Module` that a model class overrides (``extra_repr``, the
  hook registrations, a ``forward`` without a docstring of its own), whose text is PyTorch's
  or plumbing; a ``forward`` with its own docstring stays;
- the ``Alias for field number N`` properties that :func:`collections.namedtuple` writes (each
  result class says what its fields hold in its own docstring).
"""

from __future__ import annotations

import sys
from typing import Any

#: Names every ``torch.nn.Module`` has, read once (torch is imported by the package anyway).
_MODULE_MEMBERS: frozenset[str] | None = None


def _module_members() -> frozenset[str]:
    global _MODULE_MEMBERS
    if _MODULE_MEMBERS is None:
        import torch

        _MODULE_MEMBERS = frozenset(dir(torch.nn.Module))
    return _MODULE_MEMBERS


def _owned_by_a_torch_module(obj: Any) -> bool:
    """Whether ``obj`` is a method defined on a subclass of ``torch.nn.Module`` (or on it)."""
    func = getattr(obj, "__func__", obj)
    module = sys.modules.get(getattr(func, "__module__", None) or "")
    owner = getattr(module, getattr(func, "__qualname__", "").split(".")[0], None)
    import torch

    return isinstance(owner, type) and issubclass(owner, torch.nn.Module)


def skip_member(app: Any, what: str, name: str, obj: Any, skip: bool, options: Any) -> bool | None:
    """True to hide ``name``; None leaves the decision to autodoc."""
    own_doc = getattr(obj, "__doc__", None)
    if what == "class" and name in _module_members() and _owned_by_a_torch_module(obj):
        if name == "forward" and own_doc and "computation performed at every call" not in own_doc:
            return None
        return True
    if isinstance(own_doc, str) and own_doc.startswith("Alias for field number"):
        return True
    return None


def setup(app: Any) -> dict[str, Any]:
    app.connect("autodoc-skip-member", skip_member)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
