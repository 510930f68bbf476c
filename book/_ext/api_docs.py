"""Sphinx extension: keep the API page to the package's own members.

``autodoc-skip-member`` hides, on every ``automodule`` of ``book/api.md``:

- the members of :class:`torch.nn.Module` that a model class overrides (``extra_repr``, the
  hook registrations, a ``forward`` without a docstring of its own), whose text is PyTorch's
  or plumbing; a ``forward`` with its own docstring stays;
- the ``Alias for field number N`` properties that :func:`collections.namedtuple` writes (each
  result class says what its fields hold in its own docstring).

``missing-reference`` resolves a cross-reference to a package name that the page documents
under another path: a re-export (``topicmech.theory.moments`` is documented as
``topicmech.theory.value.moments``, ``topicmech.Setting`` as ``topicmech.setting.Setting``) or a
bare name that the referring module imports (``moments()`` in ``topicmech.theory.estimates``).
"""

from __future__ import annotations

import functools
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


@functools.cache
def _owners_of(name: str) -> tuple[str, ...]:
    """The package modules that define ``name`` and list it in ``__all__``."""
    import importlib
    import pkgutil

    import topicmech

    found = []
    for info in pkgutil.walk_packages(topicmech.__path__, "topicmech."):
        module = importlib.import_module(info.name)
        obj = getattr(module, name, None)
        if name in getattr(module, "__all__", ()) and getattr(obj, "__module__", None) == info.name:
            found.append(info.name)
    return tuple(found)


def _defining_name(target: str, module_name: str | None) -> str | None:
    """The dotted name under which the package object ``target`` is defined, or None."""
    import importlib

    target = target.lstrip("~.")
    candidates = [target]
    if "." not in target:
        # a bare name: the referring module's namespace, then the one module whose __all__ has it
        candidates = [f"{module_name}.{target}"] if module_name else []
        owners = _owners_of(target)
        if len(owners) == 1:
            candidates.append(f"{owners[0]}.{target}")
    for name in candidates:
        head, _, attr = name.rpartition(".")
        if not head.startswith("topicmech"):
            continue
        try:
            owner = importlib.import_module(head)
        except ImportError:
            # ``head`` names a class: ``topicmech.stage2.GradientSummary.ratio``
            owner_name, _, cls = head.rpartition(".")
            try:
                owner = getattr(importlib.import_module(owner_name), cls)
            except (ImportError, AttributeError):
                continue
        obj = getattr(owner, attr, None)
        defined_in = getattr(obj, "__module__", None)
        qualname = getattr(obj, "__qualname__", None)
        if defined_in and qualname and defined_in.startswith("topicmech"):
            return f"{defined_in}.{qualname}"
    return None


def resolve_reexport(app: Any, env: Any, node: Any, contnode: Any) -> Any:
    """Resolve a ``py`` reference to where its object is defined; None leaves it unresolved."""
    if node.get("refdomain") != "py":
        return None
    name = _defining_name(node["reftarget"], node.get("py:module"))
    if name is None or name == node["reftarget"]:
        return None
    domain = env.get_domain("py")
    for role in ("obj", node["reftype"]):
        found = domain.resolve_xref(env, node["refdoc"], app.builder, role, name, node, contnode)
        if found is not None:
            return found
    return None


def setup(app: Any) -> dict[str, Any]:
    app.connect("autodoc-skip-member", skip_member)
    app.connect("missing-reference", resolve_reexport)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
