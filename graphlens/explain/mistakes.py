"""Mistakes PyTorch reports with less common messages, or as plain Python errors (a float's backward, a None grad)."""

from __future__ import annotations

import ast
import re

import torch

from .context import Context, line_op, short
from ..names import parsed, strip_comment
from .cuts import rebind_fix, rebinding
from .live import find_live, reaches
from .types import Explanation

__all__ = ["PATTERNS", "HANDLERS"]

#: ``(reason code, exception types, pattern)``, tried after the RuntimeErrors of errors.py.
PATTERNS: list[tuple[str, tuple[type, ...], re.Pattern]] = [
    ("out_argument", (RuntimeError,), re.compile(r"out=\.\.\. arguments don't support automatic differentiation")),
    (
        "wrong_number_of_grads",
        (RuntimeError,),
        re.compile(r"function (?P<fn>\w+) returned an incorrect number of gradients \(expected (?P<want>\d+), got (?P<got>\d+)\)"),
    ),
    ("leaf_moved_interior", (RuntimeError,), re.compile(r"leaf variable has been moved into the graph interior")),
    ("numpy_requires_grad", (RuntimeError,), re.compile(r"Can't call `?numpy\(\)`? on (?:Tensor|Variable) that requires grad")),
    ("float_has_no_backward", (AttributeError,), re.compile(r"'(?P<type>float|int|bool)' object has no attribute 'backward'")),
    (
        "grad_is_none",
        (TypeError,),
        re.compile(r"unsupported operand type\(s\) for [^:]+: (?:'\w+' and 'NoneType'|'NoneType' and '\w+')|'NoneType' object is not subscriptable"),
    ),
    ("grad_is_none", (AttributeError,), re.compile(r"'NoneType' object has no attribute '\w+'")),  # p.grad.zero_()
    (
        "parameter_assignment",
        (TypeError,),
        re.compile(r"cannot assign '(?P<type>[\w.]+)' as parameter '(?P<name>\w+)' \(torch\.nn\.Parameter or None expected\)"),
    ),
]


def _line_note(ctx: Context) -> str:
    return f" The failing line: {ctx.line}." if ctx.line else ""


def _out_argument(message, match, g, trace, ctx: Context) -> Explanation:
    found = ctx.in_line(lambda t: t.requires_grad)
    name = found[0][0] if found else None
    sentences = [
        "A tensor that requires grad was passed as out= (the result buffer) of an operation: PyTorch does not record "
        "a graph for results written into out=, so it refuses." + _line_note(ctx)
    ]
    op, target = line_op(ctx.line)
    fix = "Drop out= and use the result: c = torch.add(a, b) instead of torch.add(a, b, out=c)."
    leaf = found[0][1] if found else None
    if isinstance(leaf, torch.Tensor) and leaf.is_leaf and leaf.requires_grad:
        # (a leaf that requires grad, a Parameter most often, filled in place: an initialisation, made with gradients off)
        kind = "a Parameter" if isinstance(leaf, torch.nn.Parameter) else "a leaf that requires grad"
        sentences.append(f"{name} is {kind}: writing into it is an initialisation (or an update), which autograd must "
                         f"not record; its result cannot be a plain new tensor either (a module keeps its Parameter).")
        fix = (f"Fill {name} with gradients off: with torch.no_grad(): {ctx.line or '...'} (the same line inside the block; "
               f"{name} still requires grad afterwards).")
    return Explanation(
        ["out_argument"], sentences, tensor_name=name or target, graph=g, message=message, line=ctx.line or None,
        lineno=ctx.lineno, op=op, fix=fix,
    )


def _wrong_number(message, match, g, trace, ctx: Context) -> Explanation:
    fn, want, got = match.group("fn"), int(match.group("want")), int(match.group("got"))
    cls = fn.removesuffix("Backward")
    sentences = [
        f"The backward of the custom autograd.Function {cls} returned {got} gradient(s), but its forward took {want} "
        f"input(s): backward must return one value per input of forward, in order."
    ]
    lineno = line = None
    tree, lines = _source_tree(ctx)
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.ClassDef) and node.name == cls:
            back = [f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "backward"]
            rets = [r for f in back for r in ast.walk(f) if isinstance(r, ast.Return)]
            if rets:
                lineno = rets[-1].lineno
                line = lines[lineno - 1].strip()
                sentences.append(f"Its backward returns at line {lineno}: {line}.")
    return Explanation(
        ["wrong_number_of_grads"], sentences, graph=g, message=message, op=fn, line=line, lineno=lineno,
        fix=f"Return {want} values from {cls}.backward: a gradient for each tensor input, and None for every input "
        f"that needs none (non-tensor arguments, flags, tensors that do not require grad).",
    )


def _source_tree(ctx: Context):
    """``(tree, lines)`` of the source file of the frame that raised, or ``(None, [])``."""
    return parsed(ctx.frame.f_code.co_filename) if ctx.frame is not None else (None, [])


def _last_assignment(ctx: Context, name: str) -> ast.Assign | None:
    """The last assignment to ``name`` before the failing line, in the raising function."""
    tree, _ = _source_tree(ctx)
    if tree is None or not ctx.lineno:
        return None
    best = None
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and node.lineno < ctx.lineno and node.lineno >= ctx.frame.f_code.co_firstlineno:
            if any(isinstance(n, ast.Name) and n.id == name for t in node.targets for n in ast.walk(t)):
                if best is None or node.lineno > best.lineno:
                    best = node
    return best


def _leaf_moved(message, match, g, trace, ctx: Context) -> Explanation:
    # The leaf that moved: a variable that now has a grad_fn made by an in-place copy.
    moved = [(n, t) for n, t in ctx.candidates
             if t.grad_fn is not None and type(t.grad_fn).__name__.startswith("Copy") and t.requires_grad]
    found = moved or ctx.in_line(lambda t: not t.is_leaf)
    name = found[0][0] if found else None
    who = name or "a leaf the graph uses"
    lineno = line = None
    if name and ctx.frame is not None:
        _, lines = _source_tree(ctx)
        pattern = re.compile(rf"(?<![\w.]){re.escape(name)}\.(?:copy_|set_)\(|(?<![\w.]){re.escape(name)}\[[^\]]*\]\s*=(?!=)")
        for ln in range(min(ctx.lineno or 0, len(lines)), 0, -1):
            if pattern.search(lines[ln - 1]):
                lineno, line = ln, lines[ln - 1].strip()
                break
    sentences = [
        f"{who} was a leaf when a graph used it; then an in-place operation from a tensor that requires grad "
        f"({line or who + '.copy_(y)'}) gave it a grad_fn, so it is no longer a leaf, and the graph's "
        f"AccumulateGrad for it points to a tensor inside the graph." + _line_note(ctx)
    ]
    return Explanation(
        ["leaf_moved_interior"], sentences, tensor_name=name, graph=g, message=message, line=line or ctx.line or None,
        lineno=lineno or ctx.lineno, op="copy_" if line and "copy_" in line else None,
        fix=f"Update {name or 'the leaf'} under torch.no_grad() (with torch.no_grad(): {name or 'w'}.copy_(y)), or "
        f"make a new tensor instead of writing into the leaf.",
    )


def _float_backward(message, match, g, trace, ctx: Context) -> Explanation:
    kind = match.group("type")
    tokens = re.findall(r"([A-Za-z_]\w*)(?:\.item\(\))?\.backward\(", ctx.line or "")
    name = tokens[0] if tokens else None
    via_item = ".item()" in (ctx.line or "")
    op = "item" if via_item else None
    line, lineno = (ctx.line or None), ctx.lineno
    source = None  # the tensor the number was read from (z = y.item())
    sibling = None  # a tensor returned beside it (loss, x = f(...) in the wrong order)
    node = _last_assignment(ctx, name) if name and not via_item else None
    if node is not None:
        value = node.value
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in ("item", "tolist"):
            source, op = ast.unparse(value.func.value), value.func.attr
        elif isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in ("float", "int") and value.args:
            source, op = ast.unparse(value.args[0]), value.func.id
        elif isinstance(node.targets[0], ast.Tuple):
            others = [e.id for e in node.targets[0].elts if isinstance(e, ast.Name) and e.id != name]
            live = dict(ctx.candidates)
            with_graph = [n for n in others if n in live and live[n].grad_fn is not None]
            sibling = with_graph[0] if len(with_graph) == 1 else None
        _, lines = _source_tree(ctx)
        lineno, line = node.lineno, lines[node.lineno - 1].strip()
    if trace is not None and g is not None and op is None and node is None:
        exits = [o for o in g.ops if o.name is None and o.forward in ("item", "tolist", "__float__")]
        if exits:
            op, line, lineno = exits[-1].forward, exits[-1].code or line, exits[-1].line or lineno
    what = (
        " — .item() turned the tensor into one." if via_item else
        f" ({name} = {source}.{op}() made it one)." if source else
        f" ({sibling} is the one value of that assignment with a graph: the values were unpacked in the wrong order?)."
        if sibling else
        f" ({name or 'it'} holds a {kind}: a value read with .item() or float(), or the wrong item of what a "
        f"function returned)."
    )
    sentences = [f"backward() was called on a Python {kind}, not on a tensor: a number has no graph{what}" + _line_note(ctx)]
    target = source or sibling or "loss"
    return Explanation(
        ["float_has_no_backward"], sentences, tensor_name=name, graph=g, message=message, line=line,
        lineno=lineno, op=op,
        fix=f"Call backward on the tensor itself ({target}.backward()), and use .item() only to print or log it"
        + ("; check the order of the values the function returns." if sibling or not source else "."),
    )


def _grad_is_none(message, match, g, trace, ctx: Context) -> Explanation:
    # The variables of the failing line whose .grad is None (``p.data -= lr * p.grad``).
    found = [(n, t) for n, t in ctx.in_line(lambda t: (t.is_leaf or t.retains_grad) and t.grad is None)
             if _reads_grad(ctx, n)]
    if not found:
        # A non-leaf's .grad (never read here: reading it warns) is None by PyTorch's rule.
        nonleaf = [(n, t) for n, t in ctx.in_line(lambda t: t.grad_fn is not None and not t.retains_grad)
                   if _reads_grad(ctx, n)]
        if nonleaf:
            return _nonleaf_grad(message, g, ctx, *nonleaf[0])
        return Explanation(
            ["unknown_error"],
            [f"graphlens does not recognise this {type(ctx.exc).__name__ if ctx.exc is not None else 'error'} as an "
             f"autograd error: a value is None where a number or tensor was expected ({short(message)!r})." + _line_note(ctx)],
            graph=g, message=message,
        )
    local, p = found[0]
    # The parameter's own name (model.pitch.weight) rather than the loop variable (param).
    name = next((n for n, t in ctx.candidates if t is p and "." in n), local)
    reasons = ["grad_is_none"]
    also = f" ({local} on this line)" if local != name else ""
    sentences = [f"{name}.grad is None{also}, so the hand-written code on this line fails." + _line_note(ctx)]
    if not p.requires_grad:
        reasons.append("requires_grad_false")
        sentences.append(f"{name} does not require grad (a frozen parameter or a mask), so no gradient is ever computed for it.")
        fix = f"Skip the parameters that do not require grad (if {local}.grad is None: continue), or leave them out of the update."
    else:
        outs = list({id(t): (n, t) for n, t in reversed(ctx.candidates)
                     if t.grad_fn is not None and t.dim() == 0 and t.requires_grad}.values())[::-1]
        if outs and not any(reaches([t.grad_fn], p) for _, t in outs):
            reasons.append("not_reachable")
            sentences.append(
                f"{', '.join(n for n, _ in outs[:3])} does not depend on {name}: no backward from it gives {name} a gradient "
                f"(a part of the model the loss does not use)."
            )
        else:
            first = _before_first_backward(ctx)
            if first is not None:
                reasons.append("backward_not_run")
                where = "in each iteration, so in the first one" if first[2] else "so"
                sentences.append(
                    f"graphlens read your code: this line runs before {first[1]} (line {first[0]}) {where} no backward has "
                    f"run yet, and {name}.grad is still None: PyTorch creates .grad at the first backward that reaches {name}."
                )
                fix = (f"Use or reset {local}.grad only after a backward: move the line after {first[1]} (zeroing at the end "
                       f"of the iteration, after the update), or guard it: if {local}.grad is not None: {strip_comment(ctx.line).strip()}; "
                       f"setting {local}.grad = None (or optimizer.zero_grad()) works in either place.")
                return Explanation(reasons, sentences, tensor_name=name, graph=g, message=message, line=ctx.line or None,
                                   lineno=ctx.lineno, fix=fix)
            zero = _zero_grad_call(ctx)
            if zero is not None:  # (the program's own zero_grad() left None where this line adds into .grad)
                reasons.append("zero_grad_set_none")
                sentences.append(
                    f"graphlens read your code: line {zero[0]} ({zero[1]}) calls zero_grad(), which sets every .grad to None "
                    f"(set_to_none=True, its default since PyTorch 2.0), not to zeros: a line that adds into .grad after it "
                    f"meets None.")
                fix = (f"Call zero_grad(set_to_none=False) there, so that .grad holds zeros to add into (or, where it is "
                       f"None, start the sum with {local}.grad = the first gradient).")
                return Explanation(reasons, sentences, tensor_name=name, graph=g, message=message, line=ctx.line or None,
                                   lineno=ctx.lineno, fix=fix)
            sentences.append(f"Either no backward reached {name} yet, or one that ran does not depend on it, or something "
                             f"set it to None (zero_grad() does, by default).")
        fix = f"Guard the code (if {local}.grad is not None: ...), and check with graphlens.explain({name}, loss) why it gets none."
    return Explanation(reasons, sentences, tensor_name=name, graph=g, message=message, line=ctx.line or None,
                       lineno=ctx.lineno, fix=fix)


def _zero_grad_call(ctx: Context) -> tuple[int, str] | None:
    """``(line, code)`` of a ``zero_grad()`` call that sets .grad to None (no ``set_to_none=False``) in
    the class of the raising method (else in the raising function), when the failing line adds into
    or scales a ``.grad`` in place (``p.grad += g``).  Read from the code."""
    if not re.search(r"\.grad\s*(?:[-+*/]=)|\.grad\.(?:add|sub|mul|div|copy)_\(", ctx.line or ""):
        return None
    tree, lines = _source_tree(ctx)
    if tree is None or not ctx.lineno:
        return None
    around = [n for n in ast.walk(tree) if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
              and n.lineno <= ctx.lineno <= (n.end_lineno or 0)]
    scope = next((n for n in around if isinstance(n, ast.ClassDef)), None) or (max(around, key=lambda n: n.lineno) if around else None)
    for n in sorted(ast.walk(scope) if scope is not None else (), key=lambda n: getattr(n, "lineno", 0)):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "zero_grad" and not any(
                k.arg == "set_to_none" and isinstance(k.value, ast.Constant) and k.value.value is False for k in n.keywords):
            return n.lineno, strip_comment(lines[n.lineno - 1]) if n.lineno <= len(lines) else ast.unparse(n)
    return None


def _before_first_backward(ctx: Context) -> tuple[int, str, bool] | None:
    """``(line, code, in a loop)`` of the first ``.backward(`` call that, in the failing
    function's code, comes after the failing line, when no backward call comes before it
    (in the function, or in the loop around it): on its first run the line meets every
    ``.grad`` still None.  Read from the code."""
    tree, lines = _source_tree(ctx)
    if tree is None or not ctx.lineno or ctx.frame is None:
        return None
    first = ctx.frame.f_code.co_firstlineno
    calls = sorted({n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                    and n.func.attr == "backward" and first <= n.lineno})
    loops = [n for n in ast.walk(tree) if isinstance(n, (ast.For, ast.While)) and n.lineno < ctx.lineno <= (n.end_lineno or 0)
             and n.lineno >= first]
    loop = max(loops, key=lambda n: n.lineno) if loops else None
    end = loop.end_lineno if loop is not None else max(calls, default=0)
    after = [c for c in calls if ctx.lineno < c <= (end or 0)]
    before = [c for c in calls if c < ctx.lineno]
    if not after or before:  # (then the line's first run meets .grad None: nothing before it made one)
        return None
    return after[0], strip_comment(lines[after[0] - 1]).strip(), loop is not None


def _reads_grad(ctx: Context, name: str) -> bool:
    """Whether the failing line reads ``name.grad``."""
    return bool(re.search(rf"(?<![\w.]){re.escape(name)}\.grad\b", ctx.line or ""))


#: The backward node each arithmetic of an update's value makes (``w - lr * w.grad``: SubBackward0).
_UPDATE_OPS = {ast.Sub: "Sub", ast.Add: "Add", ast.Mult: "Mul", ast.Div: "Div"}


def _update_op(code: str | None) -> str | None:
    """The backward node name's stem of the operation an assignment's value ends with:
    ``"Sub"`` for ``w = w - lr * w.grad`` or ``w = w.sub(lr * w.grad)``, else None."""
    try:
        node = ast.parse((code or "").strip()).body[0]
    except (SyntaxError, ValueError, IndexError):
        return None
    value = node.value if isinstance(node, ast.Assign) else None
    if isinstance(value, ast.BinOp):
        return _UPDATE_OPS.get(type(value.op))
    if isinstance(value, ast.Call):
        func = value.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        return called.capitalize() if called in ("sub", "add", "mul", "div") else None
    return None


def _update_made_it(ctx: Context, name: str, ln: int, stem: str) -> bool:
    """Whether the update at line ``ln`` can be what made the current value of ``name``: it
    ran before the failing line (earlier in the code, or in an earlier iteration of a loop
    around both), and, for a loop, the value ``name`` had before the loop was not made by
    the same operation (``w = torch.randn(3, requires_grad=True) - 1`` would fit as well)."""
    if ln < (ctx.lineno or 0):
        return True
    tree, lines = _source_tree(ctx)
    if tree is None:
        return False
    loops = [n for n in ast.walk(tree) if isinstance(n, (ast.For, ast.While))
             and n.lineno <= min(ln, ctx.lineno or ln) and max(ln, ctx.lineno or ln) <= (n.end_lineno or 0)]
    if not loops:
        return False
    loop = max(loops, key=lambda n: n.lineno)
    before = [n for n in ast.walk(tree) if isinstance(n, ast.Assign) and n.lineno < loop.lineno
              and any(isinstance(t, ast.Name) and t.id == name for t in n.targets)]
    if not before:
        return True
    start = max(before, key=lambda n: n.lineno)
    return _update_op(ast.get_source_segment("".join(lines), start)) != stem


def _nonleaf_grad(message, g, ctx: Context, name: str, t) -> Explanation:
    """``name.grad`` read on a non-leaf ``t``: PyTorch keeps none there.  When the code
    rebinds ``name`` by a hand-written update (``w = w - lr * w.grad``) and ``t`` is that
    update's result (its grad_fn is the update's operation), the update is named: it turned
    the leaf ``name`` into a new non-leaf tensor."""
    made = type(t.grad_fn).__name__
    if _update_op(ctx.line) and re.match(rf"\s*{re.escape(name)}\s*=(?!=)", ctx.line):
        found = (ctx.lineno, strip_comment(ctx.line).strip(), False)  # the failing line is the update (its earlier run made t)
    else:
        found = rebinding(ctx.frame, name, before=ctx.lineno)
    stem = _update_op(found[1]) if found is not None and not found[2] else None
    tid = find_live(g, t) if g is not None else None
    if stem is None or not made.startswith(stem) or not _update_made_it(ctx, name, found[0], stem):
        return Explanation(
            ["grad_is_none", "nonleaf_not_retained"],
            [f"{name}.grad is None, so the hand-written code on this line fails: {name} is not a leaf (it was computed "
             f"by {made}) and did not call retain_grad(), and PyTorch keeps .grad only on leaves." + _line_note(ctx)],
            tensor_name=name, tensor_id=tid, graph=g, path=[tid] if tid else (), message=message, op=made,
            line=ctx.line or None, lineno=ctx.lineno,
            fix=f"Read the .grad of the leaf {name} is computed from, or make {name} itself a leaf (do the arithmetic "
            f"first, then {name} = {name}.detach().requires_grad_()), or call {name}.retain_grad() before backward.",
        )
    ln, code, _ = found
    # The leaf the update started from: the first input of the update's node (w of w - ...).
    old = next((fn.variable for fn, _ in t.grad_fn.next_functions
                if fn is not None and type(fn).__name__ == "AccumulateGrad"), None)
    held = next((n for n, c in ctx.candidates if old is not None and c is old), None)
    if ln == ctx.lineno:
        first = (f"{name}.grad is None on this line ({code}) because {name} is no longer the leaf it was: this same "
                 f"line, run in an earlier iteration of the loop, rebound {name} to its result")
    else:
        first = (f"{name}.grad is None here because {name} is no longer the leaf it was: line {ln} ({code}) rebound "
                 f"{name} to its result")
    sentences = [
        f"{first}, a new tensor made by {made} from the old {name}, which is not a leaf."
        + ("" if ln == ctx.lineno else _line_note(ctx)),
        f"PyTorch keeps .grad only on leaves, so that new tensor's .grad stays None; backward puts the gradient on the "
        f"old leaf, which " + (f"{held} still holds." if held else "no variable names any more."),
    ]
    old_id = find_live(g, old) if g is not None and old is not None else None
    path = [p for p in (tid, old_id) if p]
    return Explanation(
        ["grad_is_none", "rebound_leaf", "nonleaf_not_retained"], sentences, tensor_name=name, tensor_id=tid, graph=g,
        path=path, message=message, op=made, line=code, lineno=ln, cause=tid, fix=rebind_fix(name),
    )


def _parameter_assignment(message, match, g, trace, ctx: Context) -> Explanation:
    attr = match.group("name")
    m = re.search(rf"([\w.]+)\.{re.escape(attr)}\s*=", ctx.line or "")
    target = f"{m.group(1)}.{attr}" if m else attr
    sentences = [
        f"A plain tensor was assigned to {target}, which holds an nn.Parameter: the module refuses, since the result of "
        f"arithmetic on a parameter (like {target} - lr * {target}.grad) is a new non-leaf tensor, not a parameter."
        + _line_note(ctx)
    ]
    return Explanation(
        ["parameter_assignment"], sentences, tensor_name=target, graph=g, message=message, line=ctx.line or None,
        lineno=ctx.lineno,
        fix=f"Update the parameter in place without recording a graph: with torch.no_grad(): {target} -= lr * {target}.grad "
        f"(or use an optimizer).",
    )


def _numpy_requires_grad(message, match, g, trace, ctx: Context) -> Explanation:
    found = ctx.in_line(lambda t: t.requires_grad)
    name = found[0][0] if found else None
    line = ctx.line or ""
    held = None  # a list of tensors named in the line (np.sum(final, 0)): its items are candidates final[0], ...
    if name is None and line:
        tokens = set(re.findall(r"[A-Za-z_]\w*", line))
        held = next((n.partition("[")[0] for n, t in ctx.candidates
                     if "[" in n and n.partition("[")[0] in tokens and t.requires_grad), None)
    explicit = ".numpy(" in line
    who = name or (f"the tensors in {held}" if held else "a tensor")
    how = (
        "its .numpy() was called" if explicit else
        f"a NumPy function was given {'them' if held else 'it'} (NumPy converts a tensor by calling its .numpy())"
    )
    sentences = [
        f"{who[0].upper() + who[1:] if not name else who} {'require' if held else 'requires'} grad, and {how}: an array is outside the graph, so "
        f"whatever is computed from it has no gradient. PyTorch refuses rather than cut the gradient path without "
        f"a word." + _line_note(ctx)
    ]
    calls = re.findall(r"\b(?:np|numpy)\.(\w+)\(", line)
    stay = f" (torch.{calls[0]} for np.{calls[0]}, on torch.stack(...) of a list of tensors)" if calls else ""
    target = name or "t"
    if held:
        how_out = f"torch.stack({held}).detach().numpy()"
    else:
        how_out = f"{target}.detach().numpy() ({target}.detach().cpu().numpy() for a GPU tensor)"
    return Explanation(
        ["numpy_requires_grad"], sentences, tensor_name=name or held, graph=g, message=message, line=ctx.line or None,
        lineno=ctx.lineno, op="numpy",
        fix=f"For values to print, plot or log, take them out of the graph first: {how_out}. If the result feeds the "
        f"loss, stay in torch operations"
        f"{stay}, so the gradient can flow.",
    )


HANDLERS = {
    "numpy_requires_grad": _numpy_requires_grad,
    "out_argument": _out_argument,
    "wrong_number_of_grads": _wrong_number,
    "leaf_moved_interior": _leaf_moved,
    "float_has_no_backward": _float_backward,
    "grad_is_none": _grad_is_none,
    "parameter_assignment": _parameter_assignment,
}
