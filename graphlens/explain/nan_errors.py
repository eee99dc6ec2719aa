"""What anomaly mode's NaN error means: which backward node made the first NaN gradient, from which forward line, and why its derivative is undefined there."""

from __future__ import annotations

import re
from typing import Any

import torch

from .context import Context, assignment_line
from .types import Explanation

__all__ = ["anomaly_nan", "forward_line", "DERIVATIVES"]

#: What makes a backward node's gradient NaN (or infinite), by the stem of its name:
#: ``(the forward operation, where its derivative is undefined or infinite, how to stay away)``.
DERIVATIVES: dict[str, tuple[str, str, str]] = {
    "Div": ("a division", "where the denominator is 0 (the backward divides by it)",
            "divide by a safe denominator, torch.where({den} == 0, torch.ones_like({den}), {den}), and mask the result; or add a small eps to the denominator"),
    "Sqrt": ("sqrt", "at 0 (its derivative 1 / (2 sqrt(x)) is infinite) and below 0",
             "take sqrt of x.clamp_min(eps) (or of x + eps)"),
    "Rsqrt": ("rsqrt", "at 0 and below", "take rsqrt of x.clamp_min(eps)"),
    "Log": ("log", "at 0 (its derivative 1 / x is infinite) and below 0", "take log of x.clamp_min(eps) (or torch.log1p for log(1 + x))"),
    "Pow": ("a power", "at 0 for a power below 1 (x ** 0.5, x ** -1)", "raise x.clamp_min(eps) to the power"),
    "Reciprocal": ("reciprocal", "at 0", "use x.clamp_min(eps) (or a safe denominator with torch.where)"),
    "LinalgVectorNorm": ("a norm", "of an all-zero vector (its derivative x / ||x|| is 0 / 0)",
                         "add a small eps inside (torch.sqrt((x ** 2).sum() + eps)) or skip zero vectors with torch.where"),
    "Norm": ("a norm", "of an all-zero vector (its derivative x / ||x|| is 0 / 0)",
             "add a small eps inside (torch.sqrt((x ** 2).sum() + eps)) or skip zero vectors with torch.where"),
    "Acos": ("acos", "at -1 and 1", "clamp its input to (-1 + eps, 1 - eps)"),
    "Asin": ("asin", "at -1 and 1", "clamp its input to (-1 + eps, 1 - eps)"),
    "Atan2": ("atan2", "at (0, 0)", "add a small eps to one of its inputs"),
    "Cdist": ("cdist", "at zero distance", "add a small eps to the squared distances before the square root"),
}

#: Nodes that mask a result: after a division, the masked positions still receive a gradient (0).
_MASKS = ("IndexBackward0", "MaskedSelectBackward0", "WhereBackward0", "MaskedFillBackward0", "IndexPutBackward0")


def _walk(roots: list[torch.Tensor], limit: int = 100_000):
    """``(node, parents)`` of every node below ``roots`` (parents: the nodes that feed it gradient)."""
    parents: dict[int, list[Any]] = {}
    nodes: dict[int, Any] = {}
    stack = [t.grad_fn for t in roots if t.grad_fn is not None]
    while stack and len(nodes) < limit:
        fn = stack.pop()
        if id(fn) in nodes:
            continue
        nodes[id(fn)] = fn
        for c, _ in fn.next_functions:
            if c is not None:
                parents.setdefault(id(c), []).append(fn)
                stack.append(c)
    return nodes, parents


def _name_of_node(ctx: Context, fn: Any) -> str | None:
    if type(fn).__name__ == "AccumulateGrad":
        return ctx.name_of(fn.variable)
    return next((n for n, t in ctx.candidates if t.grad_fn is fn), None)


def forward_line(fn: Any) -> tuple[int | None, str | None]:
    """The user's line that made the backward node ``fn``, from the forward traceback anomaly
    mode keeps in the node's metadata (its innermost frame outside torch and graphlens):
    ``(line number, code)``, or ``(None, None)`` where the node holds none."""
    try:
        frames = fn.metadata.get("traceback_") if "traceback_" in fn.metadata else None
    except Exception:  # noqa: BLE001 - a node without metadata
        return None, None
    for entry in reversed(frames or ()):
        m = _FRAME.match(entry or "")
        if m is None:
            continue
        path = m.group("file").replace("\\", "/")
        if "/torch/" in path or "/graphlens/" in path:
            continue
        return int(m.group("line")), m.group("code").strip() or None
    return None, None


_FRAME = re.compile(r'\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in [^\n]*\n(?P<code>[^\n]*)')


def _one_line(fns: list) -> tuple[int | None, str | None]:
    """The forward line shared by every node of ``fns`` (anomaly mode's traceback), else none."""
    lines = {forward_line(fn) for fn in fns}
    return lines.pop() if len(lines) == 1 else (None, None)


def anomaly_nan(message, match, g, trace, ctx: Context) -> Explanation:
    node_name, nr = match.group("op"), int(match.group("nr"))
    nodes, parents = _walk(ctx.root)
    found = [fn for fn in nodes.values() if type(fn).__name__ == node_name]
    fn = found[0] if len(found) == 1 else None
    stem = node_name.split("Backward")[0]
    known = DERIVATIVES.get(stem)
    out_name = _name_of_node(ctx, fn) if fn is not None else None
    inputs = [c for c, _ in fn.next_functions] if fn is not None else []
    to = _name_of_node(ctx, inputs[nr]) if nr < len(inputs) and inputs[nr] is not None else None
    line = lineno = None
    if out_name and out_name.isidentifier():  # the variable whose grad_fn the node is: its assignment
        lineno, line = assignment_line(ctx.frame, ctx.lineno, out_name)
    if line is None and found:  # where anomaly mode saw the forward op made (in a helper function too)
        lineno, line = _one_line(found)
    if line is None and trace is not None and g is not None:
        ops = [o for o in g.ops if o.name == node_name and o.line is not None]
        if len(ops) == 1:
            line, lineno = ops[0].code, ops[0].line
    what = known[0] if known else f"the operation behind {node_name}"
    made = f" (line {lineno}: {line})" if line else ""
    head = (
        f"Anomaly mode checks the gradient every backward node returns and stops at the first NaN: {node_name}, the "
        f"backward of {what}{made}, returned NaN in its output {nr}, the gradient for its input {nr}"
        + (f" ({to})" if to else "") + "."
    )
    own = (" The gradient it received had no NaN (anomaly mode checked it when the node before returned it), so the "
           "NaN comes from this node's own derivative at the values the forward gave it.")
    exponent = _exponent(fn) if stem == "Pow" else None
    finite = (exponent is not None and exponent >= 1) or stem in _FINITE_STEMS
    if finite:  # (x ** 2, x * y: a finite derivative; the NaN is 0 times an inf it received, or a NaN it saved)
        known = None
        what_d = f"this power (x ** {exponent:g})" if exponent is not None else node_name
        own = (f" The gradient it received had no NaN (anomaly mode checked it), but it may have held inf, which anomaly "
               f"mode does not check: the derivative of {what_d} is finite, so its NaN is 0 times an infinite gradient "
               f"sent by a node before it (or inf − inf), or a NaN already in the forward values it saved.")
        suspects = _suspects(fn, parents)
        if suspects:
            own += " The nodes before it whose derivative can be infinite: " + "; ".join(suspects) + "."
    sentences = [head + own]
    reasons = ["anomaly_nan"]
    den = None
    if known:
        sentences.append(f"The derivative of {known[0]} is undefined or infinite {known[1]}.")
    if stem == "Div" and len(inputs) > 1 and inputs[1] is not None:
        den = _name_of_node(ctx, inputs[1])
        t = dict((n, c) for n, c in reversed(ctx.candidates)).get(den) if den else None
        if t is not None and t.numel() <= 1 << 24:
            try:
                zeros = int((t.detach() == 0).sum())
            except Exception:  # noqa: BLE001 - an odd tensor: say nothing of its values
                zeros = -1
            if zeros > 0:
                sentences.append(f"{den}, the denominator, is 0 at {zeros} of its {t.numel()} position(s).")
    masked = fn is not None and any(type(p).__name__ in _MASKS for p in parents.get(id(fn), ()))
    if masked:
        sentences.append(
            f"{out_name or 'Its result'} is indexed or masked afterwards; where that leaves a position out, it does not stop "
            f"this: the position still gets a gradient (0), and 0 divided by 0 (or times infinity) is NaN."
        )
    if finite:
        fix = ("Find the node before it that sent inf (run the code under graphlens.trace() and ask "
               "graphlens.explain(err, tr): it names that node) and keep its input away from the value where its "
               "derivative is infinite (a root, a log or a division at 0).")
    elif known:
        how = known[2].format(den=den or "den")
        fix = (f"Keep the values where the derivative is undefined out of {known[0]} itself, not only out of its result: "
               f"{how}.")
    else:
        fix = (f"Keep the input of the operation behind {node_name} away from the values where its derivative is "
               f"undefined (clamp it, add a small eps, or select with torch.where before the operation, not after it).")
    seen = _traced(g, trace, node_name)
    if seen is not None:  # the trace's records: the same answer explain(t, tr) gives for the NaN gradient
        origin = next((v for s, f, v in seen.facts if f == "op"), node_name)
        reasons += [r for r in seen.reasons if r not in reasons]
        if origin != node_name:  # (its NaN came from an inf sent before it: the trace saw where)
            sentences[0] = head
            others = [f for f in nodes.values() if type(f).__name__ == origin]
            lineno, line = _one_line(others) if others else (None, None)
            out_name = _name_of_node(ctx, others[0]) if len(others) == 1 else None
            if line is None:
                lineno, line = seen.lineno, seen.line
            node_name = origin
        sentences[1:2] = list(seen.sentences)  # (the trace's cause replaces the general one)
        if line is not None and seen.line and seen.line != line:
            # (the trace holds the line of the traced block; anomaly mode's traceback the op's own, in a helper too)
            sentences[1:] = [x.replace(f" at line {seen.lineno} ({seen.line})", f" at line {lineno} ({line})")
                             for x in sentences[1:]]
        if not (stem == "Div" and den and origin == match.group("op")):  # (a named denominator: its own fix)
            fix = seen.fix
    return Explanation(reasons, sentences, fix=fix, tensor_name=out_name, graph=g, message=message, op=node_name,
                       line=line, lineno=lineno)


#: Nodes whose derivative is finite wherever their inputs are: a NaN they return came to them.
_FINITE_STEMS = frozenset({
    "Mul", "Add", "Sub", "Rsub", "Neg", "Mm", "Addmm", "Bmm", "Baddbmm", "Mv", "Dot", "Linear", "Convolution", "Sum",
    "Mean", "Expand", "View", "UnsafeView", "Reshape", "Clone", "ToCopy", "T", "Transpose", "Permute", "Unsqueeze",
    "Squeeze", "Select", "Slice", "Index", "Cat", "Stack", "Relu", "Tanh", "Sigmoid", "Embedding", "MaskedFill", "Where",
})


def _suspects(fn: Any, parents: dict, limit: int = 3) -> list[str]:
    """The nodes that run before ``fn`` in backward (their gradients reach it) whose derivative
    can be infinite, nearest first, each with the forward line anomaly mode saw make it."""
    out, seen, frontier = [], {id(fn)}, list(parents.get(id(fn), ()))
    while frontier and len(out) < limit:
        nxt = []
        for p in frontier:
            if id(p) in seen:
                continue
            seen.add(id(p))
            stem = type(p).__name__.split("Backward")[0]
            if stem in DERIVATIVES and not (stem == "Pow" and (_exponent(p) or 0) >= 1):
                lineno, line = forward_line(p)
                out.append(f"{type(p).__name__}" + (f" (line {lineno}: {line})" if line else ""))
            nxt.extend(parents.get(id(p), ()))
        frontier = nxt
    return out[:limit]


def _exponent(fn: Any) -> float | None:
    """The number a ``PowBackward0`` node raised to (None: another node, or a tensor exponent)."""
    try:
        value = getattr(fn, "_saved_exponent", None) if fn is not None else None
    except Exception:  # noqa: BLE001 - released or unreadable
        return None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _traced(g, trace, node_name: str) -> Explanation | None:
    """What the trace's backward records say of the NaN anomaly mode stopped at (None: nothing)."""
    if trace is None or g is None or not getattr(trace._rec, "grads", False):
        return None
    from .nonfinite import explain_failed_node

    try:
        replay = trace.replay()
    except Exception:  # noqa: BLE001 - a trace that cannot replay (stopped recording): the message alone
        return None
    return explain_failed_node(g, replay, node_name)
