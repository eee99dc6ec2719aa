"""Leads read from the user's source code: where a gradient path is most likely cut, said as a lead, never as a fact."""

from __future__ import annotations

import ast
import keyword
import linecache
import re
from collections import deque
from types import FrameType

import torch

from ..names import parsed, strip_comment
from .kinds import CODE_CUTS as _CODE_CUTS, INDEXED as _INDEXED, Cut

__all__ = ["code_cut", "origin_cut", "leaf_root_lead", "rebinding", "rebind_fix"]

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
        if isinstance(node, ast.BinOp):
            # (a + b.item(): an operand made a Python number is no tensor's result; its value carries no gradient)
            for side in (node.left, node.right):
                inner = _spine_cuts(side)
                if inner and inner[0][0] in _NUMBER_EXITS:
                    found.append(inner[0])
                    break
        elif isinstance(node, ast.Compare):
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
            elif node.attr == "grad":
                found.append(("grad_attr", node))  # p.grad: what backward() left there
            nxt = node.value
        elif isinstance(node, ast.Call):
            name = _call_name(node)
            literal = name in ("tensor", "Tensor", "FloatTensor", "DoubleTensor", "LongTensor", "as_tensor") and (
                any(k.arg == "requires_grad" for k in node.keywords)
                or not any(isinstance(n, ast.Name) for a in node.args for n in ast.walk(a))
            )  # a leaf made from literals, not a value rewrapped
            if name in _CODE_CUTS and not literal:
                found.append((name, node))
            elif name == "grad" and ast.unparse(node.func).split(".")[-2:-1] in ([], ["autograd"]):
                found.append(("grad", node))  # torch.autograd.grad(...): a gradient
            elif name in ("checkpoint", "checkpoint_sequential") and not _keyword_is(node, "use_reentrant", False):
                found.append(("checkpoint", node))
            elif name == "type" and node.args and "long" in ast.unparse(node.args[0]).lower():
                found.append(("long", node))
            f = node.func
            if isinstance(f, ast.Attribute) and not (isinstance(f.value, ast.Name) and f.value.id in _MODULES):
                nxt = f.value  # a method: its receiver is on the spine
        node = nxt
    return found


#: Calls that hand a tensor's value out as Python numbers.
_NUMBER_EXITS = frozenset({"item", "tolist", "numpy"})


def _value_names(value: ast.AST) -> list[str]:
    """The variables ``value`` is computed from, left to right, without those used only as an
    index (``log_probs[0, top_i]``: ``top_i`` picks an element, the value is ``log_probs``'s) or
    as a keyword's value (``dim=d``)."""
    skip: set[int] = set()
    for node in ast.walk(value):
        if isinstance(node, ast.Subscript):
            skip.update(id(n) for n in ast.walk(node.slice))
        elif isinstance(node, ast.Call):
            skip.update(id(n) for k in node.keywords for n in ast.walk(k.value))
    return list(dict.fromkeys(n.id for n in ast.walk(value) if isinstance(n, ast.Name) and id(n) not in skip))


def _keyword_is(call: ast.Call, arg: str, value) -> bool:
    """Whether ``call`` passes ``arg=value`` as a literal keyword."""
    return any(k.arg == arg and isinstance(k.value, ast.Constant) and k.value.value is value for k in call.keywords)


def _kind_of(name: str, node: ast.AST | None = None) -> str:
    if name in ("indices", "comparison", *_COMPARISONS.values()) or name in _INDEXED:
        return "cut_by_integer_op"
    if name == "data":
        return "cut_by_detach"
    if name == "grad":
        given = next((k.value for k in node.keywords if k.arg == "create_graph"), None) if isinstance(node, ast.Call) else None
        if given is not None and not isinstance(given, ast.Constant):
            return "gradient_without_graph"  # (create_graph=flag: which one it was, the code does not say)
        return "constant_gradient" if given is not None and given.value is True else "grad_without_create_graph"
    if name == "grad_attr":
        return "grad_without_create_graph"
    if name == "checkpoint":
        return "cut_by_checkpoint"
    return _CODE_CUTS[name]


#: What a lead read from the code says the call does, by the kind of cut.
_WHAT = {
    "cut_by_integer_op": "gives integer or bool values (they carry no gradient)",
    "cut_by_python_value": "makes plain numbers or a new tensor from numbers, without history",
    "cut_by_detach": "gives a tensor cut from the graph",
    "cut_by_nondifferentiable_op": "has no gradient in PyTorch: its result has no history",
    "grad_without_create_graph": "computes a gradient without create_graph=True, a tensor with no graph of its own that "
    "cannot be differentiated again",
    "constant_gradient": "computes a gradient with create_graph=True; one that still has no graph is a constant (it "
    "depends on nothing that requires grad, as for a function linear in its inputs), so its derivative is zero",
    "gradient_without_graph": "computes a gradient whose create_graph is set by a variable: a gradient without a "
    "graph of its own if it was False, a constant (whose derivative is zero) if it was True",
    "cut_by_checkpoint": "runs its function inside torch.no_grad() (the reentrant torch.utils.checkpoint, "
    "use_reentrant=True) and gives the result a graph only when a tensor passed to it requires grad",
}
_WHAT_ATTR = (
    "reads a gradient that backward() left in .grad, which has no graph of its own unless that backward ran with "
    "create_graph=True"
)


def _scope_of(tree: ast.AST, lineno: int) -> ast.AST:
    best: ast.AST = tree
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            end = getattr(node, "end_lineno", node.lineno)
            if node.lineno <= lineno <= end and node.lineno >= getattr(best, "lineno", 0):
                best = node
    return best


def code_cut(
    frame: FrameType | None, lineno: int | None, root: str | None, live: dict | None = None, *, filename: str | None = None,
    depth: int = 0, frozen: bool = True, through: bool = False,
) -> Cut | None:
    """A lead read from the source of ``frame``'s function: following the variables ``root``
    was assigned from (before ``lineno``), the closest call whose result carries no gradient
    (argmax, ``.long()``, a comparison, ``.item()``, ``torch.tensor(...)``, ``.detach()``).
    Source reading cannot see values, so the cut is a lead: ``known`` is False.  ``live``
    (the caller's variables) lets it see which leaves require grad now (a flag switched on
    after the line that used it) and, when the code shows no cut, whether every parameter
    among them is frozen (that one is a live fact: ``known`` is True).  ``through``: the
    line ``lineno`` itself made ``root`` (its assignment is read too)."""
    if (frame is None and filename is None) or root is None or lineno is None or not root.isidentifier():
        return None
    found = _code_cut(frame, lineno, root, live, filename, depth, through)
    if found is not None and not found.known and live and _made_from_what_reaches(found, live, root):
        found = None  # (b_gt = ones_like(b) beside b in the loss: the values go through b, the lead is no cut)
    if found is None and depth == 0:
        found = _grad_disabled(root)
    if found is None and depth == 0 and live and frozen:
        found = _all_frozen(root, live)
    return found


def _made_from_what_reaches(cut: Cut, live: dict, root: str) -> bool:
    """Whether the variable a code lead blames was made from a tensor the live root's graph reaches
    anyway (``b_gt = torch.ones_like(b)`` while the loss also uses ``b``): the values flow through
    that tensor, so the call that made the blamed variable is no cut on the way."""
    from .live import reaches

    top = live.get(root)
    if not isinstance(top, torch.Tensor) or top.grad_fn is None or not cut.code:
        return False
    try:
        tree = ast.parse(cut.code.strip())
    except SyntaxError:
        return False
    names = {n.id for c in ast.walk(tree) if isinstance(c, ast.Call) for a in c.args for n in ast.walk(a) if isinstance(n, ast.Name)}
    for n in names - {cut.tensor, root}:
        t = live.get(n)
        if isinstance(t, torch.Tensor) and t.grad_fn is not None and reaches([top.grad_fn], t):
            return True
    return False


def _grad_disabled(root: str) -> Cut | None:
    """When gradient recording is off in this thread where graphlens is asked, with no block of
    the source around the line doing it (that would have been found first): a live fact."""
    if torch.is_grad_enabled():
        return None
    how = "torch.inference_mode()" if torch.is_inference_mode_enabled() else "torch.set_grad_enabled(False)"
    text = (
        f"Gradient recording is switched off in this thread right now (torch.is_grad_enabled() is False where "
        f"graphlens was asked), and no with block around the line does it: something switched it off for the whole "
        f"thread ({how}, torch.autograd.set_grad_enabled(False), or a library or framework that calls it), so no "
        f"operation on the way to {root} recorded a graph."
    )
    return Cut("grad_disabled", None, None, root, None, None, text, (), facts=())


def _all_frozen(root: str, live: dict) -> Cut | None:
    """When every parameter among the caller's variables is frozen: a live fact."""
    import torch

    params: dict[int, str] = {}
    for n, t in live.items():  # (a module path names a parameter better than a loop variable)
        if isinstance(t, torch.nn.Parameter) and (id(t) not in params or "." in n and "." not in params[id(t)]):
            params[id(t)] = n
    if not params or any(t.requires_grad for t in live.values() if id(t) in params):
        return None
    if any(t.requires_grad and t.is_leaf for t in live.values() if id(t) not in params):
        return None  # (an input that requires grad: frozen parameters do not explain a missing graph)
    names = sorted(params.values())
    shown = ", ".join(names[:4]) + (f", ... ({len(names)} in all)" if len(names) > 4 else "")
    text = (
        f"Every parameter among your variables ({shown}) is frozen (requires_grad=False): when {root} is computed from "
        f"them and from inputs that need no grad, no operation on the way records a graph."
    )
    return Cut("frozen_parameters", None, None, root, None, None, text, ())


def _code_cut(frame, lineno: int, root: str, live: dict | None, filename: str | None, depth: int,
              through: bool = False) -> Cut | None:
    filename = filename or frame.f_code.co_filename
    tree, lines = parsed(filename)
    if not lines or tree is None:
        return None
    scope = _scope_of(tree, lineno)
    functions = {n.name: n for n in getattr(tree, "body", ()) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    # (a method of a class of the file, called as obj.name(): followed where one class alone defines that name)
    defs = [m for c in getattr(tree, "body", ()) if isinstance(c, ast.ClassDef) for m in c.body
            if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))]
    methods = {m.name: m for m in defs if sum(d.name == m.name for d in defs) == 1}
    assigns: dict[str, list[tuple[int, ast.AST]]] = {}
    shown: dict[tuple[str, int], str] = {}  # (variable, line) -> what the line assigns, when it is an entry of it
    lineno += through  # (the statements before this bound are read: with through, the line itself too)
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
                if isinstance(target, ast.Attribute):
                    continue  # (x.requires_grad = True sets an attribute: it does not make x)
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        assigns.setdefault(name.id, []).append((node.lineno, node.value))
                        if isinstance(target, ast.Subscript) and name is target.value:
                            shown[(name.id, node.lineno)] = ast.unparse(target)  # cache["g"] = ...: that entry
    seen: set[tuple[str, int]] = set()
    queue: deque[tuple[str, int, list[str]]] = deque([(root, lineno, [root])])
    while queue:
        var, before, chain = queue.popleft()
        if (var, before) in seen or len(seen) > 200:
            continue
        seen.add((var, before))
        t = (live or {}).get(var)
        leaf_now = t is not None and getattr(t, "is_leaf", False) and t.requires_grad
        if (leaf_now or (live is None and depth > 0)) and var != root:  # (inside a function: its variables are gone)
            late = _flag_line(scope, lines, var, before, lineno)
            if late is not None:  # (a detach() that made var a fresh leaf is then correct: not blamed)
                fln, ftext = late
                used = strip_comment(lines[before - 1]) if 0 < before <= len(lines) else ""
                text = (
                    f"graphlens read your code: line {fln} ({ftext}) switches requires_grad on for {var} only after "
                    f"line {before} ({used}) used it; PyTorch records an operation only if an input requires grad when "
                    f"it runs, so the graph of {root} was built before the flag was set and does not lead back to {var}."
                )
                return Cut("requires_grad_set_late", "requires_grad_", None, var, fln, ftext, text, (), known=False)
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
        if t is not None and var != root and getattr(t, "requires_grad", False) and isinstance(t, torch.Tensor):
            continue  # (var holds a tensor that requires grad: however it was made, the path is not cut there)
        earlier = [(ln, value) for ln, value in assigns.get(var, ()) if ln < before and value is not None]
        if len(earlier) > 1 and frame is not None:
            # (an assignment in the body of a for loop that never ran, its loop variable unbound in the
            # frame, did not make var: the one before it did)
            ran = [(ln, value) for ln, value in earlier if not _never_ran(scope, frame, ln)]
            earlier = ran or earlier
        if not earlier:
            continue
        ln, value = max(earlier, key=lambda a: a[0])
        block = _grad_off_block(scope, value)
        if block is not None:
            wln, wtext = block
            text_line = strip_comment(lines[ln - 1]) if ln - 1 < len(lines) else ""
            via = "" if var == root else f"{root} comes from {var} ({' <- '.join(chain)}), and "
            text = (
                f"graphlens read your code (not the graph): {via}line {ln} ({text_line}) computes {var} inside "
                f"`{wtext}` (line {wln}), where PyTorch records no graph: {var} has no history, so nothing computed "
                f"from it reaches the tensors it was made from."
            )
            return Cut("cut_by_no_grad", "no_grad", None, var, ln, text_line, text, (), known=False)
        calls = _spine_cuts(value)
        called = _callee(value, functions, methods)
        if not calls and called is not None:
            # A function (or method) of the same file: what it returns (one level down, through the calls it
            # returns the result of), then what that is made from there.
            found = _follow(called, functions, methods, filename, depth)
            if isinstance(found, Cut):
                return found._replace(text=found.text.replace(
                    "graphlens read your code (not the graph): ", f"graphlens read your code (not the graph): {root} is what ", 1))
            if found is not None:
                calls, ln, names = found
                chain = chain + [f"{n}()" for n in names]
        if calls:
            name, node = calls[0]  # the outermost step is the closest to the result
            kind = _kind_of(name, node)
            text_line = strip_comment(lines[ln - 1]) if ln - 1 < len(lines) else ""
            via = " <- ".join(chain)
            call = {"grad_attr": ".grad", "grad": "torch.autograd.grad", "checkpoint": "checkpoint"}.get(name, name)
            entry = shown.get((var, ln))
            origin = (
                f"line {ln} ({text_line}) makes {entry or root} with {call}" if len(chain) == 1
                else f"{root} comes from {entry or chain[-1]}{f' ({via})' if len(chain) > 2 else ''}, and line {ln} "
                f"({text_line}) uses {call}"
            )
            what = _WHAT_ATTR if name == "grad_attr" else _WHAT[kind]
            text = (
                f"graphlens read your code (not the graph): {origin}, which {what}. "
                f"If {root} is really computed that way, the graph is cut there."
            )
            op = {"grad_attr": "grad", "checkpoint": "checkpoint"}.get(name, name)
            return Cut(kind, op, None, var if not chain[-1].endswith("()") else chain[-2], ln, text_line, text, (), known=False)
        for sub in _value_names(value):
            if (sub, ln) not in seen:
                queue.append((sub, ln, chain + ([sub] if sub != var else [])))
    return None



def _callee(value: ast.AST, functions: dict, methods: dict) -> ast.AST | None:
    """The definition in the file of the function (``f(...)``) or method (``obj.m(...)``) ``value`` calls."""
    f = value.func if isinstance(value, ast.Call) else None
    return functions.get(f.id) if isinstance(f, ast.Name) else methods.get(f.attr) if isinstance(f, ast.Attribute) else None


def _follow(called: ast.AST, functions: dict, methods: dict, filename: str, depth: int, hops: int = 0):
    """What ``called`` returns: ``(cuts, line, names of the functions followed)`` when a return's own
    expression makes a cut, a :class:`Cut` (its text to be completed with "<root> is what ") found
    among the variables a return is made from, or None."""
    for ret in ast.walk(called):
        if not (isinstance(ret, ast.Return) and ret.value is not None):
            continue
        inner = _spine_cuts(ret.value)
        if inner:
            return inner, ret.lineno, [called.name]
        nxt = _callee(ret.value, functions, methods)
        if nxt is not None and nxt is not called and hops < 3:  # (return agent.train(): into that method)
            found = _follow(nxt, functions, methods, filename, depth, hops + 1)
            if isinstance(found, Cut):
                return found._replace(text=found.text.replace(
                    "graphlens read your code (not the graph): ",
                    f"graphlens read your code (not the graph): {called.name}() returns (line {ret.lineno}), which is what ", 1))
            if found is not None:
                return found[0], found[1], [called.name] + found[2]
        if depth < 2:
            found = [c for sub in _value_names(ret.value)
                     if (c := _code_cut(None, ret.lineno, sub, None, filename, depth + 1)) is not None]
            # (a flag switched on after the forward is the cause: a detach() that made the leaf is then right)
            found.sort(key=lambda c: c.kind != "requires_grad_set_late")
            if found:
                return found[0]._replace(text=found[0].text.replace(
                    "graphlens read your code (not the graph): ",
                    f"graphlens read your code (not the graph): {called.name}() returns (line {ret.lineno}), and inside it ", 1))
    return None


def _never_ran(scope: ast.AST, frame, ln: int) -> bool:
    """Whether line ``ln`` lies in the body of a ``for`` loop of ``scope`` that never ran an
    iteration in ``frame``: its loop variables are bound nowhere in the frame (a for loop binds
    them at its first iteration, and nothing else in the function assigns them)."""
    try:
        bound = frame.f_locals
    except Exception:  # noqa: BLE001 - a frame that cannot be read: nothing known
        return False
    stores = {n.id for n in ast.walk(scope) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    for node in ast.walk(scope):
        if not isinstance(node, ast.For) or not node.body or not (node.body[0].lineno <= ln <= (node.end_lineno or 0)):
            continue
        names = [n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)]
        # (the loop variable is stored by this loop only: counted once among the stores)
        others = [n for n in ast.walk(scope) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.id in names
                  and not any(n is m for m in ast.walk(node.target))]
        if names and all(x in stores and x not in bound for x in names) and not others:
            return True
    return False


def _flag_line(scope: ast.AST, lines: list[str], var: str, after: int, before: int) -> tuple[int, str] | None:
    """``(line, text)`` of the first statement after line ``after`` and before line ``before``
    that switches requires_grad on for ``var`` (``var.requires_grad = True``,
    ``var.requires_grad_()``), or None."""
    hits = []
    for node in ast.walk(scope):
        ln = getattr(node, "lineno", 0)
        if not after < ln < before:
            continue
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Attribute) and t.attr == "requires_grad" and isinstance(t.value, ast.Name) and t.value.id == var
            for t in node.targets
        ) and not (isinstance(node.value, ast.Constant) and node.value.value is False):
            hits.append(ln)
        elif (isinstance(node, ast.Call) and _call_name(node) == "requires_grad_" and isinstance(node.func, ast.Attribute)
              and isinstance(node.func.value, ast.Name) and node.func.value.id == var
              and not any(isinstance(a, ast.Constant) and a.value is False for a in node.args)):
            hits.append(ln)
    if not hits:
        return None
    ln = min(hits)
    return ln, strip_comment(lines[ln - 1]) if ln - 1 < len(lines) else ""


def leaf_root_lead(frame: FrameType | None, root: str | None, lineno: int | None) -> tuple[int, str, str] | None:
    """``(line, text, how)`` of the code that made the variable ``root`` a leaf that requires
    grad (read from ``frame``'s function, before ``lineno``): ``torch.tensor(..., requires_grad=True)``
    or ``Variable(..., requires_grad=True)`` from a value (``how`` is ``"created"``), or
    ``root.requires_grad = True`` / ``root.requires_grad_()`` (``how`` is ``"flag"``).  A lead."""
    if frame is None or not root or not root.isidentifier() or lineno is None:
        return None
    tree, lines = parsed(frame.f_code.co_filename)
    if tree is None:
        return None
    return _leaf_root_in(tree, lines, _scope_of(tree, lineno), root, lineno, 0)


def _leaf_root_in(tree, lines: list[str], scope, root: str, lineno: int, depth: int) -> tuple[int, str, str] | None:
    flag = _flag_line(scope, lines, root, 0, lineno + 1)
    made = None
    for node in ast.walk(scope):
        if (isinstance(node, ast.Assign) and node.lineno <= lineno and isinstance(node.value, ast.Call)
                and any(isinstance(t, ast.Name) and t.id == root for t in node.targets)
                and _call_name(node.value) in ("tensor", "Variable", "as_tensor", "Tensor")
                and _keyword_is(node.value, "requires_grad", True)):
            if made is None or node.lineno > made:
                made = node.lineno
    if made is not None and (flag is None or made > flag[0]):
        return made, strip_comment(lines[made - 1]), "created"
    if flag is not None:
        return flag[0], flag[1], "flag"
    if depth < 2:  # root = helper(...) (or a, root = helper(...)): what the helper of this file did to its root
        functions = {n.name: n for n in getattr(tree, "body", ()) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        calls = [node for node in ast.walk(scope) if isinstance(node, ast.Assign) and node.lineno <= lineno
                 and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name)
                 and node.value.func.id in functions
                 and any(isinstance(n, ast.Name) and n.id == root for t in node.targets for n in ast.walk(t))]
        if calls:
            fn = functions[max(calls, key=lambda n: n.lineno).value.func.id]
            return _leaf_root_in(tree, lines, fn, root, getattr(fn, "end_lineno", fn.lineno), depth + 1)
    return None


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
    tree, lines = parsed(frame.f_code.co_filename)
    if tree is None:
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
            found.append((node.lineno, strip_comment(lines[node.lineno - 1]), _in_no_grad(scope, node)))
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


def origin_cut(view, tid: str, origins: dict[str, tuple[str, int]], kinds: tuple[str, ...] = ("cut_by_python_value",)) -> Cut | None:
    """A lead for a traced tensor that does not require grad: following its forward inputs
    back to a tensor without history that the trace saw only when it was first used
    (``origins``: tensor id -> (file, line) of that use; made by a call the mode cannot see,
    such as the legacy ``torch.FloatTensor([...])``; or the line where the trace saw it made,
    by ``torch.autograd.grad``), the source of that line's function is read for how the
    names on it were made (:func:`code_cut`).  A lead, not a fact."""
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
            for name in dict.fromkeys(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", strip_comment(line))):
                if keyword.iskeyword(name):
                    continue
                # (a tensor the trace saw made there, by torch.autograd.grad: the line's own assignment counts)
                made = view.t(t).made_by is not None
                cut = code_cut(None, lineno, name, filename=filename, through=made)
                if cut is not None and cut.kind in kinds and (not made or cut.line == lineno or _one_grad_call(filename, cut.line)):
                    return cut
            continue
        node = view.t(t)
        if node.op is not None and node.op in view.g:
            stack.extend(i for i in view.adj.inputs.get(node.op, ()) if not view.t(i).requires_grad)
    return None


def _one_grad_call(filename: str, lineno: int | None) -> bool:
    """Whether the function holding line ``lineno`` of ``filename`` calls ``torch.autograd.grad``
    once only (a helper called on a traced line: with two calls, which one made the tensor
    the trace saw is not known)."""
    tree = parsed(filename)[0]
    if tree is None:
        return False
    if lineno is None:
        return False
    scope = _scope_of(tree, lineno)
    calls = [n for n in ast.walk(scope) if isinstance(n, ast.Call) and _call_name(n) == "grad"
             and ast.unparse(n.func).split(".")[-2:-1] in ([], ["autograd"])]
    return len(calls) == 1
