"""Mistakes PyTorch reports with less common messages, or as plain Python errors (a float's backward, a None grad)."""

from __future__ import annotations

import re

import torch

from .context import Context, line_op
from .live import reaches
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
    ("float_has_no_backward", (AttributeError,), re.compile(r"'(?P<type>float|int|bool)' object has no attribute 'backward'")),
    (
        "grad_is_none",
        (TypeError,),
        re.compile(r"unsupported operand type\(s\) for [^:]+: (?:'\w+' and 'NoneType'|'NoneType' and '\w+')|'NoneType' object is not subscriptable"),
    ),
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
    return Explanation(
        ["out_argument"], sentences, tensor_name=name or target, graph=g, message=message, line=ctx.line or None,
        lineno=ctx.lineno, op=op,
        fix="Drop out= and use the result: c = torch.add(a, b) instead of torch.add(a, b, out=c).",
    )


def _wrong_number(message, match, g, trace, ctx: Context) -> Explanation:
    fn, want, got = match.group("fn"), int(match.group("want")), int(match.group("got"))
    cls = fn.removesuffix("Backward")
    sentences = [
        f"The backward of the custom autograd.Function {cls} returned {got} gradient(s), but its forward took {want} "
        f"input(s): backward must return one value per input of forward, in order."
    ]
    return Explanation(
        ["wrong_number_of_grads"], sentences, graph=g, message=message, op=fn,
        fix=f"Return {want} values from {cls}.backward: a gradient for each tensor input, and None for every input "
        f"that needs none (non-tensor arguments, flags, tensors that do not require grad).",
    )


def _leaf_moved(message, match, g, trace, ctx: Context) -> Explanation:
    found = ctx.in_line(lambda t: not t.is_leaf)
    name = found[0][0] if found else None
    who = name or "a leaf the graph uses"
    sentences = [
        f"{who} was a leaf when a graph used it; then an in-place operation from a tensor that requires grad "
        f"(for example {who}.copy_(y)) gave it a grad_fn, so it is no longer a leaf, and the graph's "
        f"AccumulateGrad for it points to a tensor inside the graph." + _line_note(ctx)
    ]
    return Explanation(
        ["leaf_moved_interior"], sentences, tensor_name=name, graph=g, message=message, line=ctx.line or None,
        lineno=ctx.lineno,
        fix=f"Update {name or 'the leaf'} under torch.no_grad() (with torch.no_grad(): {name or 'w'}.copy_(y)), or "
        f"make a new tensor instead of writing into the leaf.",
    )


def _float_backward(message, match, g, trace, ctx: Context) -> Explanation:
    kind = match.group("type")
    tokens = re.findall(r"([A-Za-z_]\w*)(?:\.item\(\))?\.backward\(", ctx.line or "")
    name = tokens[0] if tokens else None
    via_item = ".item()" in (ctx.line or "")
    sentences = [
        f"backward() was called on a Python {kind}, not on a tensor: a number has no graph"
        + (" — .item() turned the tensor into one." if via_item else
           f" ({name or 'it'} holds a {kind}: a value read with .item() or float(), or the wrong item of what a "
           f"function returned).")
        + _line_note(ctx)
    ]
    return Explanation(
        ["float_has_no_backward"], sentences, tensor_name=name, graph=g, message=message, line=ctx.line or None,
        lineno=ctx.lineno, op="item" if via_item else None,
        fix="Call backward on the loss tensor itself (loss.backward()), and use .item() only to print or log it; "
        "if a function returns several values, check which one is the loss tensor.",
    )


def _grad_is_none(message, match, g, trace, ctx: Context) -> Explanation:
    # The variables of the failing line whose .grad is None (``p.data -= lr * p.grad``).
    found = [(n, t) for n, t in ctx.in_line(lambda t: (t.is_leaf or t.retains_grad) and t.grad is None)
             if re.search(rf"(?<![\w.]){re.escape(n)}\.grad\b", ctx.line or "")]
    if not found:
        return Explanation(
            ["unknown_error"],
            ["graphlens does not recognise this error: a value is None where a number or tensor was expected."
             + _line_note(ctx)],
            graph=g, message=message,
            fix="If the line uses p.grad, check which parameters get a gradient: graphlens.explain(p, loss).",
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
            sentences.append(f"Either no backward reached {name} yet, or one that ran does not depend on it.")
        fix = f"Guard the code (if {local}.grad is not None: ...), and check with graphlens.explain({name}, loss) why it gets none."
    return Explanation(reasons, sentences, tensor_name=name, graph=g, message=message, line=ctx.line or None,
                       lineno=ctx.lineno, fix=fix)


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


HANDLERS = {
    "out_argument": _out_argument,
    "wrong_number_of_grads": _wrong_number,
    "leaf_moved_interior": _leaf_moved,
    "float_has_no_backward": _float_backward,
    "grad_is_none": _grad_is_none,
    "parameter_assignment": _parameter_assignment,
}
