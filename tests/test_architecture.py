"""The package follows its own rules (README, "Architecture"): imports run one way, no module reads
another's private names or torch's, no module grows past 900 lines, and the key convention
``attend_to_masked`` is never defaulted: every caller says which convention it uses."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "topicmech"
MAX_LINES = 900


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


FILES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(module: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute module an ``ImportFrom`` names (``from . import x`` names the package)."""
    if node.level == 0:
        return node.module or ""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = package[: len(package) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str, path: Path) -> list[tuple[str, str, ast.AST, bool]]:
    """``(imported module, bound name, node, at top level)`` for each import of a topicmech module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = {id(n) for n in tree.body}
    typing_only = {id(n) for block in tree.body if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
                   for n in ast.walk(block)}  # annotations only: never imported at run time
    out = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            out += [(a.name, a.asname or a.name, node, id(node) in top) for a in node.names
                    if a.name.split(".")[0] == "topicmech"]
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, path, node)
            if target.split(".")[0] != "topicmech":
                continue
            for a in node.names:
                sub = f"{target}.{a.name}"
                out.append((sub if sub in FILES else target, a.asname or a.name, node, id(node) in top))
    return out


def test_no_function_level_imports_between_modules():
    offenders = [f"{m}:{node.lineno} imports {target}" for m, p in FILES.items()
                 for target, _, node, at_top in _imports(m, p) if not at_top and m != "topicmech"]
    assert not offenders, offenders


def test_imports_run_one_way():
    """No cycle among the package's modules (the top-level ``topicmech/__init__`` aside: it
    re-exports and lazily imports its submodules)."""
    graph = {m: {t for t, _, _, _ in _imports(m, p) if t in FILES and t not in (m, "topicmech")}
             for m, p in FILES.items() if m != "topicmech"}
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                pytest.fail("import cycle: " + " -> ".join([*stack[stack.index(nxt):], nxt]))
            if nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])


def test_no_private_names_across_modules():
    offenders = []
    for m, p in FILES.items():
        imports = _imports(m, p)
        aliases = {bound for target, bound, _, _ in imports if target in FILES}
        for target, bound, node, _ in imports:
            if bound.startswith("_") and not bound.startswith("__") and target not in FILES:
                offenders.append(f"{m}:{node.lineno} imports {bound} from {target}")
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                offenders.append(f"{m}:{node.lineno} reads {node.value.id}.{node.attr}")
    assert not offenders, offenders


@pytest.mark.parametrize("needle", ["._version", "._forward_hooks", "._forward_pre_hooks", "increment_version"])
def test_no_private_torch_internals(needle):
    offenders = [f"{m}:{i}" for m, p in FILES.items()
                 for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if needle in line]
    assert not offenders, offenders


@pytest.mark.parametrize("module", sorted(FILES))
def test_module_length(module):
    n = len(FILES[module].read_text(encoding="utf-8").splitlines())
    assert n <= MAX_LINES, f"{module} has {n} lines (at most {MAX_LINES})"


def _public_callables():
    for m in sorted(FILES):
        mod = importlib.import_module(m)
        for name, obj in vars(mod).items():
            if name.startswith("_") or getattr(obj, "__module__", None) != m:
                continue
            if inspect.isclass(obj):
                yield f"{m}.{name}", obj
                for attr, meth in vars(obj).items():
                    if (not attr.startswith("_") or attr == "__init__") and inspect.isfunction(meth):
                        yield f"{m}.{name}.{attr}", meth
                    elif isinstance(meth, (classmethod, staticmethod)):
                        yield f"{m}.{name}.{attr}", meth.__func__
            elif inspect.isfunction(obj):
                yield f"{m}.{name}", obj


def test_key_convention_is_never_defaulted():
    """``attend_to_masked`` is the book's most important switch: no public signature defaults it."""
    offenders = []
    for name, obj in _public_callables():
        if inspect.isclass(obj) and dataclasses.is_dataclass(obj):
            offenders += [f"{name}.{f.name}" for f in dataclasses.fields(obj) if f.name == "attend_to_masked"
                          and (f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING)]
            continue
        if inspect.isclass(obj):
            continue
        try:
            param = inspect.signature(obj).parameters.get("attend_to_masked")
        except (TypeError, ValueError):
            continue
        if param is not None and param.default is not inspect.Parameter.empty:
            offenders.append(name)
    assert not offenders, offenders
