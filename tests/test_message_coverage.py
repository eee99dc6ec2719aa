"""The message table covers what the installed torch raises: every Python message of its autograd, optimizers, checkpoint and module hooks, and the autograd engine's C++ messages.

``tests/data/autograd_messages.json`` promises to cover every autograd and optimizer message of the
installed torch, each recognised or honestly unknown (``tests/test_explain_errors.py`` runs every
row).  This file holds the promise against torch itself:

* **Python**: every ``raise <Name>Error(<message>)`` (and ``CheckpointError``, ``GradcheckError``) in
  ``torch/autograd/*.py``, ``torch/optim/*.py``, ``torch/utils/checkpoint.py`` and the hook-related
  part of ``torch/nn/modules/module.py`` (functions whose name holds ``hook``, and messages that say
  ``hook``), read with :mod:`ast` from the files of the installed torch (``torch.__file__``).  A message
  is a string literal, an f-string, a ``+`` concatenation of them, ``"..." % x`` or ``"...".format(x)``,
  or a local variable assigned one of those in the same function; each non-literal part is a
  placeholder.  A row covers a message when its text matches the message with any text at each
  placeholder (``re.fullmatch``).  Messages built by helper calls (gradcheck's ``_get_notallclose_msg``)
  are not read.
* **C++**: the strings ``strings`` finds in the installed ``libtorch_cpu.so``, filtered to the
  autograd engine's and variables' messages: the block of strings that starts at the first ``.cpp``
  source path under ``torch/csrc/autograd/`` (outside ``generated/``) and ends at the next ``.cpp`` path outside
  it (the linker keeps each object file's strings together, and the autograd objects are adjacent);
  in it, prose only (two words with a space between), and not: source paths, ``INTERNAL ASSERT
  FAILED`` invariants, C++ signatures (``::``, ``->``), JSON templates, and the profiler's, CUDA
  streams' and graph capture's strings.  A row covers a string when the string (stripped) is part of
  its text: C++ builds its messages from such pieces.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import NamedTuple

import pytest
import torch

TABLE = json.loads((Path(__file__).parent / "data" / "autograd_messages.json").read_text())
ROWS = TABLE["messages"]
TORCH = Path(torch.__file__).parent


class Message(NamedTuple):
    """One message torch's Python code raises: where, which exception, and its parts (``None``
    where a value is filled in)."""

    file: str
    function: str | None
    line: int
    exception: str
    parts: tuple

    @property
    def pattern(self) -> re.Pattern:
        return re.compile("".join(".*?" if p is None else re.escape(p) for p in self.parts), re.S)

    def text(self) -> str:
        return "".join("<value>" if p is None else p for p in self.parts)


def _percent(text: str) -> list:
    out: list = []
    for k, piece in enumerate(re.split(r"%[-#0 +]*\d*(?:\.\d+)?[sdrfigx]", text)):
        out += ([None] if k else []) + [piece]
    return out


def _parts(node: ast.AST, assigned: dict[str, list]) -> list | None:
    """The parts of a message expression, or None when it is not one this file reads."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        return [v.value if isinstance(v, ast.Constant) else None for v in node.values]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _parts(node.left, assigned), _parts(node.right, assigned)
        return None if left is None and right is None else (left or [None]) + (right or [None])
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and isinstance(node.left, ast.Constant) \
            and isinstance(node.left.value, str):
        return _percent(node.left.value)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format" \
            and isinstance(node.func.value, ast.Constant) and isinstance(node.func.value.value, str):
        out: list = []
        for k, piece in enumerate(re.split(r"\{[^{}]*\}", node.func.value.value)):
            out += ([None] if k else []) + [piece]
        return out
    if isinstance(node, ast.Name) and node.id in assigned:
        return assigned[node.id]
    return None


def _assignments(function: ast.AST) -> dict[str, list]:
    """``msg = "..."`` (then ``msg += "..."``) in a function body: the message each local holds."""
    out: dict[str, list] = {}
    for node in sorted((n for n in ast.walk(function) if isinstance(n, (ast.Assign, ast.AugAssign))), key=lambda n: n.lineno):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            parts = _parts(node.value, {})
            if parts is not None:
                out[node.targets[0].id] = parts
        elif isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add) and isinstance(node.target, ast.Name) \
                and node.target.id in out:
            more = _parts(node.value, {})
            out[node.target.id] = out[node.target.id] + (more or [None])
    return out


def messages_in(path: Path, keep=None) -> list[Message]:
    """The messages ``path`` raises (``keep(function, parts)`` filters them)."""
    tree = ast.parse(path.read_text())
    found: list[Message] = []

    def walk(node: ast.AST, function: str | None, assigned: dict) -> None:
        for child in ast.iter_child_nodes(node):
            name, local = function, assigned
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name, local = child.name, _assignments(child)
            if isinstance(child, ast.Raise) and isinstance(child.exc, ast.Call) and child.exc.args:
                f = child.exc.func
                exc = f.id if isinstance(f, ast.Name) else getattr(f, "attr", "")
                parts = _parts(child.exc.args[0], local) if exc.endswith("Error") else None
                if parts is not None and "".join(p for p in parts if p).strip() and (keep is None or keep(function, parts)):
                    found.append(Message(str(path.relative_to(TORCH.parent)), function, child.lineno, exc, tuple(parts)))
            walk(child, name, local)

    walk(tree, None, {})
    return found


def _about_hooks(function: str | None, parts: tuple) -> bool:
    return "hook" in (function or "") or "hook" in "".join(p for p in parts if p).lower()


def python_messages() -> list[Message]:
    """Every distinct message the Python files of the installed torch named above raise."""
    files = sorted((TORCH / "autograd").glob("*.py")) + sorted((TORCH / "optim").glob("*.py")) + [TORCH / "utils" / "checkpoint.py"]
    found = [m for f in files for m in messages_in(f)]
    found += messages_in(TORCH / "nn" / "modules" / "module.py", _about_hooks)
    return list({m.parts: m for m in reversed(found)}.values())[::-1]


#: Strings of the block that are not the engine's or variables' messages.
_NOT_MESSAGES = re.compile(
    r"INTERNAL ASSERT FAILED|::|->|\$\{|[Pp]rofil|Kineto|NVTX|ITT |RecordFunction|CUDA event|Events |LegacyEvent|activit"
    r"|CPU performance|Toggling|post processing|GenericList|IValue|stream|capture|warmup|__start_profile"
)
_SOURCE = re.compile(r"^/\S+\.(?:cpp|h)$")


def cpp_messages() -> list[str] | None:
    """The autograd engine's and variables' strings of the installed libtorch_cpu.so (None
    without the ``strings`` tool)."""
    tool = shutil.which("strings")
    lib = TORCH / "lib" / "libtorch_cpu.so"
    if tool is None or not lib.exists():
        return None
    out = subprocess.run([tool, "-n", "12", str(lib)], capture_output=True, text=True, errors="replace", check=True).stdout
    lines = out.splitlines()
    start = next(i for i, s in enumerate(lines) if _SOURCE.match(s) and re.search(r"/torch/csrc/autograd/(?!generated/).*\.cpp$", s))
    end = next(i for i in range(start, len(lines))
               if _SOURCE.match(lines[i]) and "/torch/csrc/autograd/" not in lines[i] and lines[i].endswith(".cpp"))
    found = []
    for s in lines[start:end]:
        text = s.strip()
        if _SOURCE.match(s) or _NOT_MESSAGES.search(s) or not re.search(r"[A-Za-z] [a-z]", text) or text.startswith('"'):
            continue
        found.append(text)
    return list(dict.fromkeys(found))


def _uncovered_python() -> list[Message]:
    return [m for m in python_messages() if not any(m.pattern.fullmatch(r["message"]) for r in ROWS)]


def test_every_python_message_torch_raises_has_a_row():
    """Each message the installed torch's autograd, optim, checkpoint and module-hook code raises is matched by a row of the table."""
    found = python_messages()
    assert len(found) > 300, f"only {len(found)} messages read: the extraction broke"
    missing = _uncovered_python()
    assert not missing, f"{len(missing)} message(s) without a row:\n" + "\n".join(
        f"{m.file}:{m.line} {m.function} {m.exception}: {m.text()[:120]!r}" for m in missing[:40])


def test_every_cpp_autograd_message_of_libtorch_cpu_has_a_row():
    """Each autograd engine or variable string of the installed libtorch_cpu.so is part of a row's message."""
    found = cpp_messages()
    if found is None:
        pytest.skip("the strings tool (binutils) is not installed, or torch has no lib/libtorch_cpu.so")
    assert len(found) > 80, f"only {len(found)} strings kept: the filter or the library's layout changed"
    missing = [s for s in found if not any(s in r["message"] for r in ROWS)]
    assert not missing, f"{len(missing)} string(s) in no row:\n" + "\n".join(repr(s[:120]) for s in missing[:40])


def test_rows_for_python_messages_name_where_torch_raises_them():
    """A row added for a Python message says its file and function, and an honest unknown row gets no reason but unknown."""
    by_source = [r for r in ROWS if r["source"].startswith("torch/") and r["source"].split()[0].endswith(".py")]
    assert len(by_source) > 300
    for r in by_source:
        path = TORCH.parent / r["source"].split()[0]
        assert path.exists(), r["id"]
    unknown = [r for r in ROWS if r["reason"] == "unknown"]
    assert all("alone" not in r or r["alone"] == "unknown" for r in unknown)


def test_coverage_counts():
    """The counts the table's coverage is reported with: Python messages, C++ strings, recognised and unknown rows."""
    known = [r for r in ROWS if r["reason"] != "unknown"]
    counts = {"python": len(python_messages()), "rows": len(ROWS), "recognised": len(known), "unknown": len(ROWS) - len(known)}
    cpp = cpp_messages()
    if cpp is not None:
        counts["cpp"] = len(cpp)
    assert counts["python"] > 300 and counts["recognised"] >= 60 and counts["unknown"] > counts["recognised"], counts
    print(counts)
