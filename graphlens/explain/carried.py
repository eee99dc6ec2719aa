"""Reading what carried a graph an earlier backward freed: the loop around the failing line, the line that fed a tensor back, a running total, and where a trace saw the freed part made."""

from __future__ import annotations

import ast
import re
from typing import Any

import types

import torch

from .._live.guard import node_unsafe
from ..names import frame_objects_where, own_dict, parsed
from .context import Context, as_code

__all__ = ["cached_in_objects", "cached_parametrizations", "inplace_in_forward", "fed_back", "in_loop", "made_once", "ran_in_failing_pass", "running_total", "source", "addend", "code_only", "feed_line"]


def fed_back(ctx: Context, name: str) -> bool | None:
    """Whether the raising function's innermost loop around the failing line feeds ``name``
    back from one iteration to the next (an assignment to it inside the loop that reads it:
    ``h = rnn(x, h)``, ``out, s = model(data, s)``, ``h += ...``): True; False when the loop
    only assigns it from other values (``data = next(loader)``, ``for data in loader``) or
    not at all; None when that is not known (no source, no loop, a name that is no plain
    variable of the function: a module's state is set in its own methods)."""
    loops = _loops_around(ctx) if name.isidentifier() else None
    if not loops:
        return None
    loop = max(loops, key=lambda n: n.lineno)

    def names_in(node: Any) -> set[str]:
        return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} if node is not None else set()

    for node in ast.walk(loop):
        if isinstance(node, ast.Assign):
            targets, value, aug = node.targets, node.value, False
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets, value, aug = [node.target], node.value, isinstance(node, ast.AugAssign)
        elif isinstance(node, ast.NamedExpr):
            targets, value, aug = [node.target], node.value, False
        else:
            continue
        if any(name in names_in(t) for t in targets) and (aug or name in names_in(value)):
            return True
    return False


def in_loop(ctx: Context) -> bool | None:
    """Whether the failing line lies in a loop of the raising function (None: not known)."""
    loops = _loops_around(ctx)
    return None if loops is None else bool(loops)


def _loops_around(ctx: Context) -> list | None:
    """The ``for`` and ``while`` loops of the raising function's source that hold the failing
    line (None: no frame, line or source to read)."""
    if ctx.frame is None or not ctx.lineno:
        return None
    tree, _ = source(ctx)
    if tree is None:
        return None
    first = ctx.frame.f_code.co_firstlineno
    return [n for n in ast.walk(tree) if isinstance(n, (ast.For, ast.While)) and first <= n.lineno <= ctx.lineno <= (n.end_lineno or 0)]


def made_once(trace, nodes: list, split: int) -> tuple[int, str, str | None] | None:
    """``(line, code, variable)`` where a trace recorded the op of the latest node of the old
    part whose saved tensors are freed (the freed graph the new one reaches), when no node
    of the new part was made on that line too (then that code ran once, not in every
    iteration); ``variable``: the name the line assigns, if it is a plain assignment."""
    old = sorted((n for n in nodes if n.seq < split and n.freed), key=lambda n: -n.seq)
    if trace is None or not old:
        return None
    try:
        g = trace.graph()
    except Exception:  # noqa: BLE001 - a trace that cannot build its graph says nothing here
        return None
    op_id = trace._op_of_node(old[0].fn)
    if op_id is None or op_id not in g:
        return None
    o = g.node(op_id)
    if o.line is None or not o.code:
        return None
    made = [(o.line, o.code)]
    again = set()
    for n in nodes:
        if n.seq >= split:
            op_id = trace._op_of_node(n.fn)
            if op_id is not None and op_id in g:
                again.add(g.node(op_id).line)
    line, code = made[0]
    if line in again:
        return None
    lhs = re.match(r"\s*([A-Za-z_]\w*)\s*=[^=]", code)
    return line, code, lhs.group(1) if lhs else None


def ran_in_failing_pass(trace) -> set[str] | None:
    """The op ids a trace saw run in the backward call that failed (its last one), or None
    without a trace (or one that recorded no backward)."""
    if trace is None:
        return None
    try:
        rp = trace.replay()
    except Exception:  # noqa: BLE001 - grads=False, or a trace that cannot build its graph
        return None
    if not rp.passes:
        return None
    return {s.op for s in rp.steps if s.backward == rp.passes - 1}


_ACCUMULATE = r"^\s*{v}\s*(?:\+=|=\s*{v}\s*\+)(?!=)"


def running_total(ctx: Context) -> tuple[str, int, str, tuple[int, str] | None] | None:
    """``(variable, line, code, earlier backward)`` when the failing backward is a running
    total's: the root is a variable that the failing function adds losses to (``loss +=
    loss_t``, ``total = total + loss``) and that an earlier backward already went through:
    this same backward in an earlier iteration of a loop the total was started outside
    of, or an earlier ``total.backward()`` line with no fresh start of the total since
    (``earlier`` is that line).  Read from the code, and checked on the live root: its
    grad_fn is the addition."""
    if not ctx.root or ctx.frame is None or not ctx.lineno:
        return None
    root = ctx.root[0]
    name = ctx.name_of(root)
    fn = root.grad_fn
    if not name or not name.isidentifier() or fn is None or not type(fn).__name__.startswith("Add"):
        return None
    tree, lines = source(ctx)
    if tree is None:
        return None
    code = ctx.frame.f_code
    first, fail = code.co_firstlineno, ctx.lineno
    acc = re.compile(_ACCUMULATE.format(v=re.escape(name)))
    adds = [ln for ln in range(first, fail) if ln <= len(lines) and acc.search(lines[ln - 1])]
    if not adds:
        return None
    add = adds[-1]
    assigns = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Assign) and first <= n.lineno < fail
               and any(isinstance(t, ast.Name) and t.id == name for t in n.targets) and not acc.search(lines[n.lineno - 1])]
    back = re.compile(rf"(?<![\w.]){re.escape(name)}\.backward\(")
    earlier = [ln for ln in range(first, add) if back.search(lines[ln - 1])
               and not any(ln < a < add for a in assigns)]
    if earlier:
        return name, add, lines[add - 1].strip(), (earlier[-1], lines[earlier[-1] - 1].strip())
    loops = [n for n in ast.walk(tree) if isinstance(n, (ast.For, ast.While)) and n.lineno < add and fail <= (n.end_lineno or 0)]
    if not loops:
        return None
    loop = max(loops, key=lambda n: n.lineno)
    started = [a for a in assigns if a < loop.lineno]
    inside = [a for a in assigns if loop.lineno <= a <= (loop.end_lineno or 0)]
    if started and not inside:
        return name, add, lines[add - 1].strip(), None
    return None


def source(ctx: Context):
    return parsed(ctx.frame.f_code.co_filename)


def addend(code: str, name: str) -> str:
    """What a running-total line adds: ``loss_t`` of ``loss += loss_t``."""
    m = re.search(rf"{re.escape(name)}\s*(?:\+=|=\s*{re.escape(name)}\s*\+)\s*(.+)", code)
    value = m.group(1).split("#")[0].strip() if m else "loss"
    return value if re.fullmatch(r"[\w.\[\]]+", value) else f"({value})"


def code_only(lines: list[str]) -> list[str]:
    """``lines`` with every string literal and comment blanked (read with :mod:`tokenize`;
    the lines as they are where the source does not tokenize)."""
    import io
    import tokenize

    out = [list(line) for line in lines]
    try:
        for tok in tokenize.generate_tokens(io.StringIO("".join(lines)).readline):
            if tok.type not in (tokenize.STRING, tokenize.COMMENT) and tok.type != getattr(tokenize, "FSTRING_MIDDLE", -1):
                continue
            (r0, c0), (r1, c1) = tok.start, tok.end
            for r in range(r0, r1 + 1):
                row = out[r - 1]
                a = c0 if r == r0 else 0
                b = c1 if r == r1 else len(row)
                for c in range(a, min(b, len(row))):
                    if row[c] != "\n":
                        row[c] = " "
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return list(lines)
    return ["".join(row) for row in out]


def feed_line(ctx: Context, name: str) -> tuple[int, str] | None:
    """The source line (of the raising frame's file) that passes the carried tensor ``name``
    into a call: ``rnn(x, h_state)``, or ``self.lstm(x, self.hidden)`` for ``model.hidden``."""
    if ctx.frame is None:
        return None
    tree, lines = source(ctx)
    attr = name.split(".", 1)[1] if "." in name else None
    exprs = [re.escape(name)] + ([rf"self\.{re.escape(attr)}"] if attr else [])
    pattern = re.compile(rf"\w\s*\([^#]*(?<![\w.])(?:{'|'.join(exprs)})(?![\w])")
    # (only lines where a call starts, read without their strings and comments: never a docstring's,
    # a comment's or a string's text)
    calls = {n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call)} if tree is not None else None
    code = code_only(lines)
    hits = [(k + 1, lines[k].strip()) for k, line in enumerate(code)
            if (calls is None or k + 1 in calls) and pattern.search(line)]
    if not hits:
        return None
    before = [h for h in hits if ctx.lineno and h[0] < ctx.lineno]
    return (before or hits)[-1]


def cached_in_objects(ctx: Context, fns: dict) -> str | None:
    """``model._cached_norm``, ``t._cached_x_y[1]``: a tensor that a module or another object of the
    user's frames keeps in a private attribute (a cache it filled in an earlier call), alone or in
    a short tuple, whose node is one of the old part's nodes ``fns`` (by id)."""
    objects = list(ctx.objects(object))
    for frame in [f for f, _ in ctx.user_frames] + [ctx.caller]:
        if frame is not None:
            objects += frame_objects_where(frame, _plain_object)
    seen: set[int] = set()
    for name, obj in objects:
        if id(obj) in seen or name.startswith("_"):
            continue
        seen.add(id(obj))
        held = vars(obj) if isinstance(obj, torch.nn.Module) else own_dict(obj)  # (an object's own, read without its code)
        for attr, value in list((held or {}).items())[:64]:
            if not attr.startswith("_") or attr.startswith("__"):
                continue
            items = [(attr, value)] if isinstance(value, torch.Tensor) else (
                [(f"{attr}[{i}]", v) for i, v in enumerate(value)] if isinstance(value, (tuple, list)) and len(value) <= 4 else [])
            for label, t in items:
                if not isinstance(t, torch.Tensor) or node_unsafe(t):
                    continue
                try:
                    fn = t.grad_fn
                except RuntimeError:
                    continue
                if fn is not None and id(fn) in fns:
                    return as_code(f"{name}.{label}")
    return None


def _plain_object(value: Any) -> bool:
    """An instance of a class of its own (a transform, a helper object), whose attributes may keep a cache."""
    return not issubclass(type(value), types.MethodType) and own_dict(value) is not None


def cached_parametrizations(ctx: Context) -> tuple[int, str] | None:
    """``(line, code)`` of a ``with torch.nn.utils.parametrize.cached():`` block of the raising
    function that holds the loop around the failing line, when a module among the user's
    variables is parametrized: inside it each parametrized tensor is computed once, at its first
    use, with that call's graph, and every later step reuses it."""
    loops = _loops_around(ctx)
    if not loops:
        return None
    from torch.nn.utils import parametrize

    if not any(parametrize.is_parametrized(m) for _, m in ctx.objects(torch.nn.Module)):
        return None
    tree, lines = source(ctx)
    loop = min(loops, key=lambda n: n.lineno)  # (the outermost loop around the failing line)
    for node in ast.walk(tree):
        if isinstance(node, ast.With) and node.lineno < loop.lineno <= (node.end_lineno or 0):
            for item in node.items:
                call = item.context_expr
                f = call.func if isinstance(call, ast.Call) else None
                if (isinstance(f, ast.Attribute) and f.attr == "cached") or (isinstance(f, ast.Name) and f.id == "cached"):
                    return node.lineno, lines[node.lineno - 1].strip() if 0 < node.lineno <= len(lines) else ast.unparse(call)
    return None


def inplace_in_forward(ctx: Context, producer: str) -> tuple[str, int, str, int, str, str] | None:
    """``(class, line, code, made line, made code, variable)``: in the ``forward`` of a module class of
    the user's frames (not torch's own), a line that changes a variable in place (``out += x``,
    ``out.add_(x)``, ``out[i] = v``) after the line that made it by a call naming ``producer``
    (``relu`` for PyTorch's "output 0 of Relu": ``out = self.relu(out)``), with no other
    assignment of it in between; the first such line found.  A lead read from code."""
    import textwrap

    from .modules import own_forwards

    key = producer.lower().rstrip("0123456789").removesuffix("backward")
    if not key:
        return None
    for cls, lines, first in own_forwards(type(m) for _, m in ctx.objects(torch.nn.Module)):
        try:
            tree = ast.parse(textwrap.dedent("".join(lines)))
        except SyntaxError:
            continue
        made: dict[str, tuple[int, str]] = {}
        for node in sorted((n for n in ast.walk(tree) if isinstance(n, ast.stmt)), key=lambda n: n.lineno):
            text = lines[node.lineno - 1].strip() if node.lineno <= len(lines) else ""
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                var = node.targets[0].id
                call = node.value if isinstance(node.value, ast.Call) else None
                if call is not None and key in ast.unparse(call.func).lower():
                    made[var] = (first + node.lineno - 1, text)
                else:
                    made.pop(var, None)
                continue
            target = None
            if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
                target = node.target.id
            elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript) and isinstance(node.targets[0].value, ast.Name):
                target = node.targets[0].value.id
            elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Attribute) \
                    and node.value.func.attr.endswith("_") and isinstance(node.value.func.value, ast.Name):
                target = node.value.func.value.id
            if target in made:
                return cls.__qualname__, first + node.lineno - 1, text, made[target][0], made[target][1], target
    return None
