"""Where a gradient path is cut: in a traced graph (known), or read from the user's code (a lead)."""

from __future__ import annotations

import ast
import keyword
import linecache
import re
from collections import deque
from types import FrameType
from typing import NamedTuple

from .facts import region_kind
from .paths import PathView

__all__ = ["Cut", "traced_cut", "traced_cut_between", "code_cut", "origin_cut", "cut_fix", "rebinding", "rebind_fix", "INTEGER_DTYPE_NAMES"]

#: dtype names of the records that can never carry a gradient.
INTEGER_DTYPE_NAMES = frozenset({"int64", "int32", "int16", "int8", "uint8", "bool", "uint16", "uint32", "uint64"})

#: Calls (methods or torch functions) whose result carries no gradient, read from code:
#: name -> the reason code of the cut they make.
_CODE_CUTS = {
    "argmax": "cut_by_integer_op", "argmin": "cut_by_integer_op", "argsort": "cut_by_integer_op",
    "long": "cut_by_integer_op", "int": "cut_by_integer_op", "bool": "cut_by_integer_op", "short": "cut_by_integer_op",
    "byte": "cut_by_integer_op", "char": "cut_by_integer_op", "nonzero": "cut_by_integer_op",
    "item": "cut_by_python_value", "tolist": "cut_by_python_value", "numpy": "cut_by_python_value",
    "tensor": "cut_by_python_value", "Tensor": "cut_by_python_value", "FloatTensor": "cut_by_python_value",
    "DoubleTensor": "cut_by_python_value", "LongTensor": "cut_by_python_value", "as_tensor": "cut_by_python_value",
    "from_numpy": "cut_by_python_value", "new_tensor": "cut_by_python_value",
    "detach": "cut_by_detach",
}
#: Factories that copy values into a new tensor without history.
_REWRAPS = frozenset({"tensor", "as_tensor", "Tensor", "FloatTensor", "DoubleTensor", "LongTensor", "from_numpy", "new_tensor"})
#: ``torch.max(x, dim)[1]``, ``x.max(1)[1]``, ``.indices``: the indices of a reduction.
_INDEXED = {"max", "min", "sort", "topk", "kthvalue", "mode", "median"}


class Cut(NamedTuple):
    """One place where the gradient path stops.

    ``kind`` is the reason code (``cut_by_integer_op``, ``cut_by_python_value``,
    ``cut_by_detach``, ``cut_by_no_grad``); ``op`` the operation (``"argmax"``,
    ``"item"``); ``node`` the graph node id where it happens (None when read from code);
    ``tensor`` the variable the cut made; ``line``/``code`` where in the program;
    ``text`` one sentence saying so; ``path`` node ids to highlight; ``known``: False
    when graphlens read it from the source code rather than saw it happen."""

    kind: str
    op: str | None
    node: str | None
    tensor: str | None
    line: int | None
    code: str | None
    text: str
    path: tuple[str, ...] = ()
    known: bool = True


def _where(line: int | None, code: str | None) -> str:
    if line is not None and code:
        return f"line {line} ({code})"
    return f"line {line}" if line is not None else ""


def _op_cut(view: PathView, op_id: str, out_id: str | None, path: list[str]) -> Cut | None:
    """The cut at op ``op_id`` (a call with an input that requires grad and no backward node)."""
    op = view.o(op_id)
    ins = [i for i in view.adj.inputs.get(op_id, ()) if view.t(i).requires_grad]
    out = view.t(out_id) if out_id else None
    if not ins or (out is not None and out.requires_grad) or (out is None and op.name is not None):
        return None
    src = view.label(ins[0])
    where = _where(op.line, op.code)
    at = f" at {where}" if where else ""
    if op.region is not None and op.name is None:
        made = f" made {view.label(out_id)}" if out_id else ""
        lhs = re.match(r"\s*([A-Za-z_]\w*)\s*=[^=]", op.code or "")
        target = (out.name if out is not None and out.name else None) or (lhs.group(1) if lhs else None)
        same = [i for i in ins if target is not None and view.t(i).name == target]
        if same:  # w = w - lr * w.grad inside no_grad: the name now holds a new leaf
            text = (
                f"{op.forward}{at} rebound {target} to a new tensor made inside torch.{region_kind(op.region)}(): a leaf "
                f"that does not require grad, no longer the {target} that requires grad."
            )
            return Cut("rebound_leaf", op.forward, op_id, target, op.line, op.code, text, tuple(path))
        text = (
            f"On the way, {op.forward or 'an operation'}{at}{made} inside torch.{region_kind(op.region)}(), which "
            f"records no graph, so the gradient path from {src} stops there."
        )
        return Cut("cut_by_no_grad", op.forward, op_id, view.label(out_id) if out_id else None, op.line, op.code, text, tuple(path))
    if out is not None and out.dtype in INTEGER_DTYPE_NAMES:
        text = (
            f"The gradient path is cut at {op.forward}{at}: it turns {src} into {out.dtype} values, and no gradient "
            f"passes an integer or bool tensor, so {view.label(out_id)} and everything computed from it do not require grad."
        )
        return Cut("cut_by_integer_op", op.forward, op_id, view.label(out_id), op.line, op.code, text, tuple(path))
    if out is not None and (op.forward or "") in _REWRAPS:
        text = (
            f"torch.{op.forward}{at} copies the values of {src} into a new tensor without history, so "
            f"{view.label(out_id)} does not require grad and the gradient path stops there."
        )
        return Cut("cut_by_python_value", op.forward, op_id, view.label(out_id), op.line, op.code, text, tuple(path))
    if out is None and (op.forward or "") in {"item", "tolist", "numpy", "__float__", "__int__", "__bool__", "__index__"}:
        text = f"{op.forward}(){at} took the value of {src} out of the graph as a plain number."
        return Cut("cut_by_python_value", op.forward, op_id, None, op.line, op.code, text, tuple(path))
    return None


def _rewrapped(view: PathView, leaf_id: str) -> Cut | None:
    """A leaf made from numbers inside the trace that holds a value an earlier ``.item()``
    (or ``.numpy()``, ``.tolist()``) took out of the graph: the value left and came back."""
    leaf = view.t(leaf_id)
    if leaf.made_by is None or leaf.value is None or not leaf.value.head:
        return None
    held = {v for v in leaf.value.head if isinstance(v, float) and v not in (0.0, 1.0, -1.0)}
    if not held:
        return None
    for op in view.g.ops:
        if op.name is not None or (op.forward or "") not in {"item", "tolist", "numpy", "__float__"}:
            continue
        ins = view.adj.inputs.get(op.id, ())
        if not ins or not view.t(ins[0]).requires_grad:
            continue
        src = view.t(ins[0])
        read = set(src.value.head or ()) if src.value is not None else set()
        if held & read:
            where = _where(op.line, op.code)
            made = _where(leaf.line, leaf.code)
            text = (
                f"{view.label(src.id)}.{op.forward}(){' at ' + where if where else ''} took its value out of the graph as a "
                f"Python number, and {view.label(leaf_id)} was made from that number again by torch.{leaf.made_by}"
                f"{' at ' + made if made else ''}: a new leaf without history, so the gradient path stops there."
            )
            return Cut("cut_by_python_value", op.forward, op.id, view.label(leaf_id), op.line, op.code, text,
                       (src.id, op.id, leaf_id))
    return None


def _rewrap_lead(view: PathView, leaf_id: str) -> Cut | None:
    """A leaf made inside the trace by a factory that copies values (torch.tensor,
    torch.from_numpy, ...), after a tensor that requires grad left the graph there
    (a detach(), an .item(), a .numpy()): a lead, not a certainty, since graphlens does
    not see where the numbers went in between."""
    leaf = view.t(leaf_id)
    if leaf.made_by not in _REWRAPS:
        return None
    n = int(leaf.id[1:])
    leads = [
        t for t in view.g.tensors
        if t.detached_from is not None and int(t.id[1:]) < n and view.t(t.detached_from).requires_grad
    ]
    exits = [o for o in view.g.ops if o.name is None and o.forward in ("item", "numpy", "tolist")]
    if not leads and not exits:
        return None
    made = _where(leaf.line, leaf.code)
    if exits:
        left = f"{exits[-1].forward}() at {_where(exits[-1].line, exits[-1].code) or 'an earlier line'}"
        first = view.adj.inputs.get(exits[-1].id, ())
        src = first[0] if first else None
    else:
        src = leads[-1].detached_from
        left = f"{view.label(leads[-1].id)} = {view.label(src)}.detach()"
    text = (
        f"{view.label(leaf_id)} is a new leaf made from numbers by torch.{leaf.made_by}{' at ' + made if made else ''}: "
        f"it has no history. Earlier, {left} took a tensor that requires grad out of the graph; if those numbers "
        f"became {view.label(leaf_id)}, that is where the gradient path stops."
    )
    return Cut("cut_by_python_value", leaf.made_by, leaf_id, view.label(leaf_id), leaf.line, leaf.code, text,
               tuple(p for p in (src, leaf_id) if p), known=False)


def traced_cut(view: PathView, tid: str) -> Cut | None:
    """Where the traced tensor ``tid``, which does not require grad, lost the gradient of
    the tensors it was computed from: the closest detach(), no_grad op, integer-output op,
    or value that left the graph and came back (None when it never had one)."""
    seen = {tid}
    queue: deque[tuple[str, list[str]]] = deque([(tid, [tid])])
    while queue:
        node, path = queue.popleft()
        t = view.t(node)
        if t.detached_from is not None:
            src = view.t(t.detached_from)
            if src.requires_grad:
                text = f"{view.label(node)} = {view.label(src.id)}.detach() cuts the gradient path: a new leaf that does not require grad."
                return Cut("cut_by_detach", "detach", node, view.label(node), None, None, text, tuple([src.id] + path[::-1]))
            nxt = [src.id]
        elif t.op is not None:
            cut = _op_cut(view, t.op, node, [t.op] + path)
            if cut is not None:
                return cut._replace(path=tuple([i for i in view.adj.inputs.get(t.op, ())] + list(cut.path)))
            nxt = list(view.adj.inputs.get(t.op, ()))
        else:
            cut = _rewrapped(view, node) or _rewrap_lead(view, node)
            if cut is not None:
                return cut._replace(path=cut.path + tuple(path[1:][::-1]))
            nxt = []
        for n in nxt:
            if n not in seen:
                seen.add(n)
                queue.append((n, path + [n]))
    return None


def traced_cut_between(view: PathView, tid: str, roots: list[str]) -> Cut | None:
    """Where the forward path from tensor ``tid`` to a root stops carrying the gradient."""
    fpath = view.forward_bfs(tid, set(roots))
    if fpath:
        for a, b in zip(fpath, fpath[1:]):
            if a.startswith("t") and b.startswith("t"):  # a detach edge
                text = (
                    f"On the way, {view.label(b)} = {view.label(a)}.detach() cuts the gradient path: "
                    f"{view.label(b)} is a new leaf that does not require grad."
                )
                return Cut("cut_by_detach", "detach", b, view.label(b), None, None, text, tuple(fpath))
            if b.startswith("op"):
                outs = [o for o in view.adj.outputs.get(b, ()) if o in fpath]
                cut = _op_cut(view, b, outs[0] if outs else None, fpath)
                if cut is not None:
                    return cut
        return None
    # No forward path: did the value leave the graph (.item()) and come back (torch.tensor)?
    for root in roots:
        cut = traced_cut(view, root)
        if cut is not None and cut.kind == "cut_by_python_value":
            return cut
    return None


# -- reading the user's code -------------------------------------------------------------------
_MODULES = {"torch", "np", "numpy", "F", "nn", "math"}
_COMPARISONS = {ast.Gt: "gt", ast.Lt: "lt", ast.GtE: "ge", ast.LtE: "le", ast.Eq: "eq", ast.NotEq: "ne"}


def _call_name(node: ast.AST) -> str | None:
    f = node.func if isinstance(node, ast.Call) else None
    if isinstance(f, ast.Attribute):
        return f.attr
    if isinstance(f, ast.Name):
        return f.id
    return None


def _spine_cuts(value: ast.AST) -> list[tuple[str, ast.AST]]:
    """The cut-making steps on the spine of an expression: the chain of method calls,
    indexing and conversions whose result *is* the value (``softmax(x).argmax(1).float()``),
    outermost first.  Arguments are not on the spine (``torch.where(x > 0, a, b)`` and
    ``x[idx.long()]`` keep the gradient of ``a``, ``b`` and ``x``)."""
    found: list[tuple[str, ast.AST]] = []
    node: ast.AST | None = value
    while node is not None:
        nxt = None
        if isinstance(node, ast.Compare):
            found.append((_COMPARISONS.get(type(node.ops[0]), "comparison"), node))
        elif isinstance(node, ast.Subscript):
            inner = node.value
            name = _call_name(inner) if isinstance(inner, ast.Call) else None
            if name in _INDEXED and isinstance(node.slice, ast.Constant) and node.slice.value == 1:
                found.append((name, node))  # torch.max(x, 1)[1]: the indices
            nxt = inner
        elif isinstance(node, ast.Attribute):
            if node.attr in ("indices", "data"):
                found.append((node.attr, node))
            nxt = node.value
        elif isinstance(node, ast.Call):
            name = _call_name(node)
            literal = name in ("tensor", "Tensor", "FloatTensor", "DoubleTensor", "LongTensor", "as_tensor") and (
                any(k.arg == "requires_grad" for k in node.keywords)
                or not any(isinstance(n, ast.Name) for a in node.args for n in ast.walk(a))
            )  # a leaf made from literals, not a value rewrapped
            if name in _CODE_CUTS and not literal:
                found.append((name, node))
            elif name == "type" and node.args and "long" in ast.unparse(node.args[0]).lower():
                found.append(("long", node))
            f = node.func
            if isinstance(f, ast.Attribute) and not (isinstance(f.value, ast.Name) and f.value.id in _MODULES):
                nxt = f.value  # a method: its receiver is on the spine
        node = nxt
    return found


def _strip_comment(line: str) -> str:
    """A source line without its trailing comment (a ``#`` outside quotes)."""
    quote = None
    for k, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#":
            return line[:k].strip()
    return line.strip()


def _kind_of(name: str) -> str:
    if name in ("indices", "comparison", *_COMPARISONS.values()) or name in _INDEXED:
        return "cut_by_integer_op"
    if name == "data":
        return "cut_by_detach"
    return _CODE_CUTS[name]


def _scope_of(tree: ast.AST, lineno: int) -> ast.AST:
    best: ast.AST = tree
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            end = getattr(node, "end_lineno", node.lineno)
            if node.lineno <= lineno <= end and node.lineno >= getattr(best, "lineno", 0):
                best = node
    return best


def code_cut(
    frame: FrameType | None, lineno: int | None, root: str | None, live: dict | None = None, *, filename: str | None = None
) -> Cut | None:
    """A lead read from the source of ``frame``'s function: following the variables ``root``
    was assigned from (before ``lineno``), the closest call whose result carries no gradient
    (argmax, ``.long()``, a comparison, ``.item()``, ``torch.tensor(...)``, ``.detach()``).
    Source reading cannot see values, so the cut is a lead: ``known`` is False."""
    if (frame is None and filename is None) or root is None or lineno is None or not root.isidentifier():
        return None
    filename = filename or frame.f_code.co_filename
    lines = linecache.getlines(filename)
    if not lines:
        return None
    try:
        tree = ast.parse("".join(lines))
    except (SyntaxError, ValueError):
        return None
    scope = _scope_of(tree, lineno)
    functions = {n.name: n for n in getattr(tree, "body", ()) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    assigns: dict[str, list[tuple[int, ast.AST]]] = {}
    for node in ast.walk(scope):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and node.lineno < lineno:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if (isinstance(target, ast.Tuple) and len(target.elts) == 2 and isinstance(target.elts[1], ast.Name)
                        and isinstance(node.value, ast.Call) and _call_name(node.value) in _INDEXED):
                    # values, indices = torch.max(x, 1): the second one holds the indices
                    assigns.setdefault(target.elts[1].id, []).append(
                        (node.lineno, ast.Subscript(value=node.value, slice=ast.Constant(1), ctx=ast.Load()))
                    )
                    if isinstance(target.elts[0], ast.Name):
                        assigns.setdefault(target.elts[0].id, []).append((node.lineno, node.value))
                    continue
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        assigns.setdefault(name.id, []).append((node.lineno, node.value))
    seen: set[str] = set()
    queue: deque[tuple[str, int, list[str]]] = deque([(root, lineno, [root])])
    while queue:
        var, before, chain = queue.popleft()
        if var in seen:
            continue
        seen.add(var)
        t = (live or {}).get(var)
        if t is not None and getattr(t, "is_leaf", False) and not t.requires_grad:
            # A leaf that does not require grad now: was it rebound in a loop (w = w - lr * w.grad)?
            found = rebinding(frame, var)
            if found and found[2]:
                ln, text_line, _ = found
                text = (
                    f"graphlens read your code: line {ln} ({text_line}) rebinds {var} to a new tensor made inside "
                    f"torch.no_grad(), a leaf that does not require grad (as {var} is now), no longer the tensor "
                    f"created with requires_grad=True" + (f"; {root} is computed from {var}" if var != root else "") + "."
                )
                return Cut("rebound_leaf", "no_grad", None, var, ln, text_line, text, (), known=False)
        earlier = [(ln, value) for ln, value in assigns.get(var, ()) if ln < before and value is not None]
        if not earlier:
            continue
        ln, value = max(earlier, key=lambda a: a[0])
        block = _grad_off_block(scope, value)
        if block is not None:
            wln, wtext = block
            text_line = _strip_comment(lines[ln - 1]) if ln - 1 < len(lines) else ""
            via = "" if var == root else f"{root} comes from {var} ({' <- '.join(chain)}), and "
            text = (
                f"graphlens read your code (not the graph): {via}line {ln} ({text_line}) computes {var} inside "
                f"`{wtext}` (line {wln}), where PyTorch records no graph: {var} has no history, so nothing computed "
                f"from it reaches the tensors it was made from."
            )
            return Cut("cut_by_no_grad", "no_grad", None, var, ln, text_line, text, (), known=False)
        calls = _spine_cuts(value)
        if not calls and isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in functions:
            # A function of the same file: what it returns (one level down).
            for ret in ast.walk(functions[value.func.id]):
                if isinstance(ret, ast.Return) and ret.value is not None:
                    inner = _spine_cuts(ret.value)
                    if inner:
                        calls = inner
                        ln = ret.lineno
                        chain = chain + [f"{value.func.id}()"]
                        break
        if calls:
            name, _ = calls[0]  # the outermost step is the closest to the result
            kind = _kind_of(name)
            text_line = _strip_comment(lines[ln - 1]) if ln - 1 < len(lines) else ""
            via = " <- ".join(chain)
            origin = (
                f"line {ln} ({text_line}) makes {root} with {name}" if len(chain) == 1
                else f"{root} comes from {chain[-1]} ({via}), and line {ln} ({text_line}) uses {name}"
            )
            what = {
                "cut_by_integer_op": "gives integer or bool values, which carry no gradient",
                "cut_by_python_value": "makes plain numbers or a new tensor from numbers, without history",
                "cut_by_detach": "gives a tensor cut from the graph",
            }[kind]
            text = (
                f"graphlens read your code (not the graph): {origin}, which {what}. "
                f"If {root} is really computed that way, the graph is cut there."
            )
            return Cut(kind, name, None, var if not chain[-1].endswith("()") else chain[-2], ln, text_line, text, (), known=False)
        for sub in ast.walk(value):
            if isinstance(sub, ast.Name) and sub.id not in seen:
                queue.append((sub.id, ln, chain + [sub.id]))
    return None


def cut_fix(cut, root: str | None) -> str:
    """What to do about a cut, by its kind."""
    loss = root or "the loss"
    if cut.kind == "cut_by_integer_op":
        return (
            f"Compute {loss} from the tensor before {cut.op} (the scores or logits, e.g. "
            f"cross_entropy(logits, target)), and use {cut.op} only for metrics: no gradient passes an integer result."
        )
    if cut.kind == "cut_by_python_value":
        return (
            f"Keep the computation in torch operations on the tensors themselves: no .item(), .tolist() or .numpy() "
            f"followed by torch.tensor(...) / torch.from_numpy(...) (e.g. torch.stack([a, b]) rather than "
            f"torch.tensor([a.item(), b.item()])); {loss} then keeps its history."
        )
    if cut.kind == "cut_by_detach":
        return f"Remove the detach() (or .data) on the way to {loss} if the gradient should flow back through it."
    if cut.kind == "rebound_leaf":
        return rebind_fix(cut.tensor or "w")
    return f"Move the computation of {loss} out of the torch.no_grad() block."


def _grad_off(expr: ast.AST) -> bool:
    """Whether a ``with`` item turns gradient recording off: ``torch.no_grad()``,
    ``torch.inference_mode()``, ``torch.set_grad_enabled(False)``."""
    text = ast.unparse(expr)
    if "no_grad" in text or "inference_mode" in text and "inference_mode(False)" not in text:
        return True
    return isinstance(expr, ast.Call) and "set_grad_enabled" in text and bool(expr.args) and (
        isinstance(expr.args[0], ast.Constant) and expr.args[0].value is False
    )


def _grad_off_block(tree: ast.AST, node: ast.AST) -> tuple[int, str] | None:
    """``(line, text)`` of the innermost ``with`` block that turns gradients off and holds ``node``."""
    found = None  # (line, text, off) of the innermost block that sets the grad mode
    for w in ast.walk(tree):
        if isinstance(w, (ast.With, ast.AsyncWith)):
            for item in w.items:
                text = ast.unparse(item.context_expr)
                off = _grad_off(item.context_expr)
                if not off and "enable_grad" not in text and "set_grad_enabled" not in text:
                    continue
                if any(sub is node for stmt in w.body for sub in ast.walk(stmt)) and (found is None or w.lineno > found[0]):
                    found = (w.lineno, f"with {text}:", off)
    return found[:2] if found is not None and found[2] else None


def _in_no_grad(tree: ast.AST, node: ast.AST) -> bool:
    """Whether ``node`` sits inside a ``with`` block of ``tree`` that turns gradients off."""
    return _grad_off_block(tree, node) is not None


def rebinding(frame: FrameType | None, name: str | None, before: int | None = None) -> tuple[int, str, bool] | None:
    """``(line, code, in_no_grad)`` of a hand-written update that rebinds ``name`` to a new
    tensor computed from itself and its gradient (``w = w - lr * w.grad``), read from the
    source of ``frame``'s function (the last one before line ``before``), or None."""
    if frame is None or not name or not name.isidentifier():
        return None
    lines = linecache.getlines(frame.f_code.co_filename)
    try:
        tree = ast.parse("".join(lines))
    except (SyntaxError, ValueError):
        return None
    here = before or frame.f_lineno
    scope = _scope_of(tree, here)
    found = []
    for node in ast.walk(scope):
        if not isinstance(node, ast.Assign):
            continue
        if not any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            continue
        uses = [sub for sub in ast.walk(node.value) if isinstance(sub, ast.Name) and sub.id == name]
        grads = [sub for sub in ast.walk(node.value) if isinstance(sub, ast.Attribute) and sub.attr == "grad"]
        if uses and grads:
            found.append((node.lineno, _strip_comment(lines[node.lineno - 1]), _in_no_grad(scope, node)))
    # The last one that ran before this line; else one later in the function (a loop runs it first).
    earlier = [f for f in found if f[0] < here]
    return max(earlier) if earlier else (max(found) if found else None)


def rebind_fix(name: str) -> str:
    """How to update a leaf by hand so that it stays the leaf."""
    return (
        f"Update {name} in place without recording a graph, so that {name} stays the same leaf: "
        f"with torch.no_grad(): {name} -= lr * {name}.grad, then {name}.grad = None (or {name}.grad.zero_()); "
        f"or let an optimizer do it (torch.optim.SGD([{name}], lr=lr).step())."
    )


def origin_cut(view, tid: str, origins: dict[str, tuple[str, int]]) -> Cut | None:
    """A lead for a traced tensor that does not require grad: following its forward inputs
    back to a tensor without history that the trace saw only when it was first used
    (``origins``: tensor id -> (file, line) of that use; made by a call the mode cannot see,
    such as the legacy ``torch.FloatTensor([...])``), the source of that line's function
    is read for how the names on it were made (:func:`code_cut`).  A lead, not a fact."""
    seen: set[str] = set()
    stack = [tid]
    while stack:
        t = stack.pop()
        if t in seen or t not in view.g:
            continue
        seen.add(t)
        if t in origins:
            filename, lineno = origins[t]
            line = linecache.getline(filename, lineno)
            for name in dict.fromkeys(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", _strip_comment(line))):
                if keyword.iskeyword(name):
                    continue
                cut = code_cut(None, lineno, name, filename=filename)
                if cut is not None and cut.kind == "cut_by_python_value":
                    return cut
            continue
        node = view.t(t)
        if node.op is not None and node.op in view.g:
            stack.extend(i for i in view.adj.inputs.get(node.op, ()) if not view.t(i).requires_grad)
    return None
