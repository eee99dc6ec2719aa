"""What an exception's traceback tells an explanation: the user's frame, line and variables, the root of a failed backward."""

from __future__ import annotations

import linecache
import re
from contextlib import contextmanager
from types import FrameType, TracebackType
from typing import Any, Iterator

import torch

from .. import names as _names
from .._util import tensors_in
from ..graph import Graph
from ..names import frame_candidates, frame_objects_where
from ..snapshot import snapshot
from .live import find_live

__all__ = [
    "Context", "TENSOR_TYPES", "short", "root_graph", "backward_roots", "root_label", "on_graph", "line_op", "assignment_line", "frame_objects",
    "as_code", "one_reading",
]

TENSOR_TYPES = {
    "FloatTensor": "float32", "DoubleTensor": "float64", "HalfTensor": "float16", "BFloat16Tensor": "bfloat16",
    "LongTensor": "int64", "IntTensor": "int32", "ShortTensor": "int16", "CharTensor": "int8",
    "ByteTensor": "uint8", "BoolTensor": "bool", "ComplexFloatTensor": "complex64", "ComplexDoubleTensor": "complex128",
}


class Context:
    """What the exception's traceback tells: the user's frame and line, and the root of a failed backward."""

    def __init__(self, exc: BaseException | None, caller: FrameType | None = None) -> None:
        self.exc = exc  # the exception explained (released by close())
        self.line = ""
        self.lineno: int | None = None
        self.frame: FrameType | None = None  # the user's frame that raised (released by close())
        self.candidates: list[tuple[str, torch.Tensor]] = []
        self.root: list[torch.Tensor] = []
        self.inputs: list[torch.Tensor] = []  # what a failing torch.autograd.grad was asked about
        #: torch's own frames of the traceback, outermost first (released by close()): where
        #: an error raised inside torch came from (``add_param_group``'s ``param``, ``F.relu``).
        self.torch_frames: list[FrameType] = []
        #: the user's frames of the traceback with their lines, outermost first (released by close())
        self.user_frames: list[tuple[FrameType, int]] = []
        self.caller = caller  # the frame that asked for the explanation (released by close())
        self._objects: list[tuple[str, Any]] | None = None
        tb: TracebackType | None = getattr(exc, "__traceback__", None)
        user = None
        #: the user's frame that called backward, when the error came from code backward ran (a
        #: custom Function's backward, a hook): its variables hold the loss and the model
        self.backward_caller: FrameType | None = None
        while tb is not None:
            frame = tb.tb_frame
            module = frame.f_globals.get("__name__", "") or ""
            if module == "torch" or module.startswith("torch."):
                self.torch_frames.append(frame)
                if frame.f_code.co_name in ("backward", "grad", "_engine_run_backward") and self.backward_caller is None:
                    self.backward_caller = user[0] if user is not None else None
                if frame.f_code.co_name in ("backward", "grad", "_engine_run_backward") and not self.root:
                    local = frame.f_locals
                    for key in ("t_outputs", "tensors", "outputs", "self"):
                        if key in local:
                            self.root = tensors_in(local[key], depth=8)
                            if self.root:
                                break
                    for key in ("t_inputs", "inputs"):
                        if frame.f_code.co_name == "grad" and key in local and not self.inputs:
                            self.inputs = tensors_in(local[key], depth=8)
                    del local
            elif module == "numpy" or module.startswith("numpy."):
                pass  # (NumPy converting a tensor it was given: the user's line is the call into it)
            elif not _names.is_internal(module) and not module.startswith("graphlens.") and frame.f_code.co_name != _names.CALLER_NAME:
                user = (frame, tb.tb_lineno)
                self.user_frames.append(user)
            tb = tb.tb_next
        if user is not None:
            frame, lineno = user
            self.frame, self.lineno = frame, lineno
            self.line = linecache.getline(frame.f_code.co_filename, lineno).strip()
            self.candidates = frame_candidates(frame, readable=True)
        if self.backward_caller is not None and user is not None and self.backward_caller is not user[0]:
            self.candidates.extend(frame_candidates(self.backward_caller, readable=True))
        else:
            self.backward_caller = None
        if caller is not None and (user is None or caller is not user[0]):
            # The frame that asks for the explanation often holds the variables (the error
            # may have been raised in a helper that it called).
            self.candidates.extend(frame_candidates(caller, readable=True))

    def in_line(self, keep) -> list[tuple[str, torch.Tensor]]:
        """Candidates that ``keep`` accepts and whose name appears in the failing line,
        the one right before an in-place call or assignment first."""
        if not self.line:
            return []
        tokens = re.findall(r"[A-Za-z_][\w.]*", self.line)
        out = []
        for name, t in self.candidates:
            if keep(t) and any(tok == name or tok.startswith(name + ".") for tok in tokens):
                out.append((name, t))
        return out

    def name_of(self, t: torch.Tensor) -> str | None:
        for name, c in self.candidates:
            if c is t:
                return name
        return None

    def torch_local(self, function: str, name: str, default: Any = None) -> Any:
        """The local ``name`` of the innermost torch frame of the traceback running ``function``
        (``torch_local("add_param_group", "param")``: the tensor an optimizer refused)."""
        for frame in reversed(self.torch_frames):
            if frame.f_code.co_name == function:
                return frame.f_locals.get(name, default)
        return default

    def torch_called(self, function: str) -> bool:
        """Whether the traceback passes through a torch frame running ``function``."""
        return any(f.f_code.co_name == function for f in self.torch_frames)

    def objects(self, kind: type | tuple[type, ...]) -> list[tuple[str, Any]]:
        """``(name, object)`` of the values of ``kind`` the user's frames hold (the raising
        frame, then the asking one): variables, then the submodules of modules
        (``D.2``, ``self.relu``), as :func:`frame_objects` reads them."""
        if self._objects is None:
            seen: set[int] = set()
            self._objects = []
            for frame in (self.frame, self.backward_caller, self.caller):
                for name, obj in frame_objects(frame):
                    if id(obj) not in seen:
                        seen.add(id(obj))
                        self._objects.append((name, obj))
        return [(n, o) for n, o in self._objects if isinstance(o, kind)]

    def object_name(self, obj: Any) -> str | None:
        """The name the user's frames give ``obj`` (see :meth:`objects`)."""
        return next((n for n, o in self.objects(object) if o is obj), None)

    def close(self) -> None:
        self.candidates.clear()
        self.root.clear()
        self.inputs.clear()
        self.torch_frames.clear()
        self.user_frames.clear()
        self._objects = None
        self.frame = self.exc = self.caller = self.backward_caller = None


def _wanted(value: Any) -> bool:
    """The objects :func:`frame_objects` reports: the ones an explanation names."""
    cls = type(value)  # (by its type alone: a proxy's __class__ is its own code)
    if issubclass(cls, type):
        return issubclass(value, torch.autograd.Function)
    return issubclass(cls, (torch.nn.Module, torch.optim.Optimizer))


def frame_objects(frame: FrameType | None) -> list[tuple[str, Any]]:
    """``(name, object)`` of the modules, optimizers and autograd.Function classes a frame's variables hold (its
    locals, then its globals), then the submodules of each module under dotted names.

    Reads ``f_locals`` the way :func:`graphlens.names.frame_candidates` does: the dict
    Python < 3.13 caches on the frame is emptied again when nobody else holds it."""
    if frame is None:
        return []
    items = frame_objects_where(frame, _wanted)
    out: list[tuple[str, Any]] = []
    later: list[tuple[str, Any]] = []
    for key, value in items:
        if not isinstance(key, str) or (key.startswith("_") and key != "__class__"):
            continue
        out.append((key, value))
        if isinstance(value, torch.nn.Module):
            try:
                later.extend((f"{key}.{sub}", m) for sub, m in value.named_modules() if sub)
            except Exception:  # noqa: BLE001 - a broken module must not break an explanation
                pass
    del items
    return out + later


def short(message: str) -> str:
    text = message.strip().splitlines()[0] if message.strip() else ""
    return text if len(text) <= 160 else text[:157] + "..."


def root_graph(g: Graph | None, ctx: Context) -> Graph | None:
    """The given graph, else a snapshot of the failed backward's root (named after the user's variables)."""
    if g is not None:
        return g
    if ctx.root:
        names = {n: t for n, t in ctx.candidates if any(t is r for r in ctx.root) or t.grad_fn is not None or t.requires_grad}
        return snapshot(*ctx.root, names=names)
    return None


def backward_roots(g: Graph) -> list[str]:
    """The ids of ``g``'s roots a backward can start from.  A trace that saw no backward takes
    the outputs nothing used as its roots; among them only those that require grad and were
    made by a call that recorded a backward node can start one: not ``d`` of ``d = t.detach();
    d.add_(1)``, nor the record of ``t`` that write made (its values changed, its node did not)."""
    able = [r.id for r in g.roots if r.requires_grad and (r.op is None or g.node(r.op).name is not None)]
    return able or [r.id for r in g.roots if r.requires_grad] or [r.id for r in g.roots]


def root_label(g: Graph | None, ctx: Context) -> str:
    if ctx.root:
        n = ctx.name_of(ctx.root[0])
        if n:
            return n
    if g is not None and g.roots:
        return " and ".join(g.node(r).label for r in backward_roots(g))
    return "the output"


def on_graph(g: Graph, tensor: torch.Tensor | None) -> str | None:
    return find_live(g, tensor) if tensor is not None else None


_AUGMENTED = {"+=": "add_", "-=": "sub_", "*=": "mul_", "/=": "div_", "@=": "matmul_", "**=": "pow_"}


def line_op(line: str | None) -> tuple[str | None, str | None]:
    """``(op, target)`` of the in-place operation a source line performs, read from its text:
    ``x.mul_(2)`` gives ``("mul_", "x")``, ``w[0] -= 1`` gives ``("sub_", "w[0]")``,
    ``a[i] = v`` gives ``("__setitem__", "a")``, ``torch.add(a, b, out=c)`` gives ``("add", "c")``."""
    if not line:
        return None, None
    m = re.search(r"([A-Za-z_][\w.]*(?:\[[^\]]*\])*)\.(\w+_)\(", line)
    if m:
        return m.group(2), m.group(1)
    m = re.match(r"\s*([A-Za-z_][\w.]*(?:\[[^\]]*\])*)\s*(\*\*=|[-+*/@]=)", line)
    if m:
        return _AUGMENTED[m.group(2)], m.group(1)
    m = re.match(r"\s*([A-Za-z_][\w.]*)\[[^\]]*\]\s*=(?!=)", line)
    if m:
        return "__setitem__", m.group(1)
    m = re.search(r"(?:torch\.)?(\w+)\([^()]*\bout\s*=\s*([A-Za-z_][\w.]*)", line)
    if m:
        return m.group(1), m.group(2)
    return None, None


def assignment_line(frame: FrameType | None, lineno: int | None, name: str | None,
                    made_by: str | None = None) -> tuple[int | None, str | None]:
    """``(line, text)`` of the last assignment to the variable ``name`` before ``lineno`` in
    ``frame``'s function, read from its source (``(None, None)`` when there is none).
    ``made_by``: the forward name of the op a trace saw make the tensor; an assignment whose
    right side is an operator on ``name`` itself that is another op (``loss = -loss`` where
    the trace saw cross_entropy make it, in a branch that did not run) is passed over."""
    if frame is None or not lineno or not name or not name.isidentifier():
        return None, None
    lines = linecache.getlines(frame.f_code.co_filename)
    pattern = re.compile(rf"^\s*(?:[\w\s,()]*,\s*)?{re.escape(name)}\s*(?:,[\w\s,]*)?=(?!=)")
    for ln in range(min(lineno, len(lines) + 1) - 1, max(frame.f_code.co_firstlineno, 1) - 1, -1):
        if pattern.match(lines[ln - 1]):
            if made_by and _other_op_on_itself(lines[ln - 1], name, made_by):
                continue
            return ln, lines[ln - 1].strip()
    return None, None


#: The op an operator on a tensor runs (``-x`` is neg, ``x * 2`` mul).
_OPERATOR_OPS = {"USub": "neg", "Mult": "mul", "Add": "add", "Sub": "sub", "Div": "div", "Pow": "pow", "MatMult": "matmul"}


def _other_op_on_itself(line: str, name: str, made_by: str) -> bool:
    """Whether ``line`` assigns ``name`` an operator applied to ``name`` itself (``x = -x``,
    ``x = x * 2``) that is not the op ``made_by``."""
    import ast

    try:
        node = ast.parse(line.strip())
    except SyntaxError:
        return False
    stmt = node.body[0] if node.body else None
    if not isinstance(stmt, ast.Assign):
        return False
    value = stmt.value
    if isinstance(value, ast.UnaryOp):
        op, operands = _OPERATOR_OPS.get(type(value.op).__name__), [value.operand]
    elif isinstance(value, ast.BinOp):
        op, operands = _OPERATOR_OPS.get(type(value.op).__name__), [value.left, value.right]
    else:
        return False
    own = any(isinstance(o, ast.Name) and o.id == name for o in operands)
    made = made_by.lstrip("_").removeprefix("r").rstrip("_") if made_by.startswith("__") else made_by.rstrip("_")
    return op is not None and own and made not in (op, f"{op}_")


def as_code(name: str) -> str:
    """A dotted name as Python code: ``model.1`` (a Sequential's second module) -> ``model[1]``."""
    return re.sub(r"\.(\d+)(?=\.|$)", r"[\1]", name)


@contextmanager
def one_reading(trace: Any) -> Iterator[None]:
    """Inside, a trace's graph() and replay() are each built once and handed out again: one
    question (an explanation reads both several times) reads the tensors at one moment, and
    pays once.  Anything else (a graph, None) passes through; the outer of two nested readings holds."""
    if not hasattr(trace, "_read_once") or trace._read_once is not None:
        yield
        return
    trace._read_once = {}
    try:
        yield
    finally:
        trace._read_once = None
