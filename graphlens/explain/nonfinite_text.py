"""Reading a non-finite answer's records and phrasing them: first bad elements, positions, the input values there, lines."""

from __future__ import annotations

import math
from typing import Any

from ..graph import Graph
from ..values import Summary, format_number
from .nonfinite_causes import Links, base, index, kind, position, positional, value_at

__all__ = ["GUARD", "SELECTING", "first_bad", "infinite", "is_text", "where_text", "values_text", "data_path", "same_line",
           "cap", "versions", "occurrence"]

GUARD = ("Guard the step too: skip optimizer.step() when a gradient is not finite (check torch.isfinite(p.grad).all() "
          "for each parameter); clipping cannot remove an inf or a NaN.")


#: Forward ops that use only some elements of their input: a 0 gradient elsewhere is theirs.
SELECTING = frozenset({
    "nll_loss", "nll_loss_nd", "nll_loss2d", "cross_entropy", "getitem", "index", "index_select", "gather", "select",
    "narrow", "take", "take_along_dim", "masked_select", "max", "min", "amax", "amin", "topk", "sort", "kthvalue",
    "median", "where", "masked_fill", "slice", "embedding", "max_pool2d", "max_pool1d", "adaptive_max_pool2d",
})


def first_bad(s: Summary | None) -> tuple[int | None, Any]:
    """The flat position of the first non-finite element of ``s`` and its value (None where unread)."""
    at = s.nonfinite_at if s is not None else None
    v = s.head[at] if s is not None and s.head and at is not None and at < len(s.head) else None
    return at, (v if v is not None or s is None else s.nonfinite_value)


def infinite(v: Any) -> bool:
    """Whether ``v`` is a NaN or an infinity (a number; False for anything else)."""
    if type(v) is complex:
        return not (math.isfinite(v.real) and math.isfinite(v.imag))
    return type(v) is float and not math.isfinite(v)


def is_text(subject: str, s: Summary | None, shape: tuple) -> str:
    """``loss is NaN`` or ``out is inf at out[1]``."""
    at, v = first_bad(s)
    pos = index(shape, at)
    return f"{subject} is {kind(v)}" + (f" at {subject}{pos}" if pos else "")


def where_text(line: int | None, code: str | None) -> str:
    return f" at line {line} ({code})" if line and code else (f" at line {line}" if line else "")


def values_text(g: Graph, links: Links, op_id: str, at: int | None, shape: tuple) -> str:
    """``, where x[0] = 0`` for the inputs of ``op_id`` readable at position ``at`` of an output of ``shape``."""
    fwd = g.node(op_id).forward
    if not positional(fwd):  # (a matmul's result at one position is a sum over many inputs)
        return ""
    name = base(fwd)
    division = name in ("div", "truediv", "true_divide", "divide", "rdiv", "rtruediv")
    inputs = list(dict.fromkeys(links.forward_inputs(op_id)))
    out = []
    for k, t in enumerate(inputs):
        tn = g.node(t)
        v = value_at(tn.value, at, tuple(shape))
        if v is None:
            continue
        p = position(tuple(shape), at, tuple(tn.shape)) if at is not None else None
        label = links.label(t) + (index(tuple(tn.shape), p) if p is not None and tn.shape and tn.value.numel > 1 else "")
        if division:  # (an unnamed operand is just the numerator, the denominator)
            den = k == 1 or name in ("rdiv", "rtruediv")
            label = ("the denominator" if den else "the numerator") + (f" {label}" if tn.name else "")
        out.append(f"{label} = {format_number(v, 6)}")
    return f", where {', '.join(out)}" if out else ""


def data_path(links: Links, src: str, dst: str) -> tuple[str, ...]:
    """Tensors from ``src`` down to ``dst`` along the forward data flow (for the diagram)."""
    if src == dst:
        return (src,)
    prev: dict[str, str | None] = {src: None}
    frontier = [src]
    while frontier and dst not in prev:
        nxt = []
        for t in frontier:
            for op in links.consumers.get(t, ()):
                for out in links.made.get(op, {}).values():
                    if out not in prev:
                        prev[out] = t
                        nxt.append(out)
        frontier = nxt
    if dst not in prev:
        return (src, dst)
    chain = [dst]
    while prev[chain[-1]] is not None:
        chain.append(prev[chain[-1]])
    return tuple(reversed(chain))


def same_line(line: int | None, code: str | None, other: int | None) -> str:
    """`` at line N (code)``, or ``, on the same line`` when it is ``other``."""
    return ", on the same line" if line is not None and line == other else where_text(line, code)


def cap(s: str) -> str:
    return s[:1].upper() + s[1:]


def versions(g: Graph, links: Links, tid: str) -> list[str]:
    """``tid`` and its later versions: the outputs of the in-place ops that took it as their first input."""
    out, seen = [tid], {tid}
    while True:
        nxt = [links.made.get(op, {}).get(0) for op in links.consumers.get(out[-1], ())
               if (g.node(op).forward or "").endswith("_") and links.forward_inputs(op)[:1] == [out[-1]]]
        nxt = [t for t in nxt if t is not None and t not in seen]
        if not nxt:
            return out
        out.append(nxt[0])
        seen.add(nxt[0])


def occurrence(g: Graph, op_id: str) -> str:
    """``" (the 2nd of 3 pow calls the trace saw on that line)"``: which run of a line that ran
    more than once (a loop, a layer called in turn) made the op; ``""`` when it ran once."""
    op = g.node(op_id)
    if op.line is None or op.forward is None:
        return ""
    kin = [o for o in g.ops if o.forward == op.forward]
    same = [o.id for o in kin if o.line == op.line and o.code == op.code]
    if len(same) < 2 or op_id not in same:
        return ""
    if len(same) != len(kin) and any(o.name is None or o.line is None for o in kin):
        # (a call made inside the user's own function keeps its own line only when it ran with grad; a run
        # of the same op without grad carries the block's line: then the count for this line is not known)
        return ""
    k = same.index(op_id) + 1
    nth = f"{k}{'th' if 10 <= k % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(k % 10, 'th')}"
    return f" (the {nth} of {len(same)} {base(op.forward)} calls the trace saw on that line)"
