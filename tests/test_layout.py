"""The house rules of the package's layout: small modules, a docstring and __all__ each, data flowing one way."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "graphlens"
MODULES = sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)
MAX_LINES = 650


def _name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _top_level_imports(path: Path) -> set[str]:
    """The graphlens modules ``path`` imports at module level (imports inside functions are
    the deliberate lazy ones, e.g. the ``Graph.to_dot()`` facade)."""
    tree = ast.parse(path.read_text())
    here = _name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If):  # if TYPE_CHECKING: ... is not an import at run time
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.startswith("graphlens"):
                out.add(mod)
                for alias in node.names:  # from . import render: the submodule itself
                    if f"{mod}.{alias.name}" in ALL:
                        out.add(f"{mod}.{alias.name}")
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("graphlens"))
    return out - {here}


ALL = {_name(p) for p in MODULES}


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_module_is_small(path):
    """No module is longer than about 600 lines."""
    assert len(path.read_text().splitlines()) <= MAX_LINES


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_module_has_a_docstring_and_all(path):
    """Each module opens with a docstring whose first line says its concern, and declares __all__."""
    tree = ast.parse(path.read_text())
    doc = ast.get_docstring(tree)
    assert doc and doc.splitlines()[0].strip(), f"{_name(path)} has no docstring"
    assert any(
        isinstance(n, (ast.Assign, ast.AnnAssign)) and any(getattr(t, "id", None) == "__all__" for t in getattr(n, "targets", [getattr(n, "target", None)]))
        for n in tree.body
    ), f"{_name(path)} declares no __all__"


def test_recording_never_imports_explaining():
    """trace, the recorder and snapshot do not import graphlens.explain (the package face wires the error explainer)."""
    for mod in ("graphlens.trace", "graphlens._live.recorder", "graphlens._live.backward", "graphlens.snapshot"):
        path = PACKAGE.parent / (mod.replace(".", "/") + ".py")
        assert not any(m.startswith("graphlens.explain") for m in _top_level_imports(path)), mod


def test_no_import_circle_between_packages():
    """Module-level imports between graphlens's modules form no circle (a package's __init__ re-exporting its own modules aside)."""
    graph = {_name(p): _top_level_imports(p) for p in MODULES}

    def resolve(mod: str) -> str:
        while mod not in graph and "." in mod:
            mod = mod.rpartition(".")[0]
        return mod

    edges = {m: {resolve(d) for d in deps} for m, deps in graph.items()}
    circles = []
    state: dict[str, int] = {}

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        stack.append(m)
        for d in sorted(edges.get(m, ())):
            # a package __init__ importing its submodules, and submodules importing their package's
            # siblings through it, is how a package face works: not a circle of concerns
            if d == m or d.startswith(m + ".") or m.startswith(d + ".") and graph.get(d) is not None and d.count(".") < m.count("."):
                continue
            if state.get(d) == 1:
                circles.append(stack[stack.index(d):] + [d])
            elif d not in state:
                visit(d, stack)
        stack.pop()
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m, [])
    assert circles == []
