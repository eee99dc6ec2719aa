"""Overflow: a result too large for its dtype, made from finite inputs, and the op or the dtype that avoids it (autocast, exp patterns)."""

from __future__ import annotations

import math

import torch

from ..graph import Graph, TensorNode
from ..values import format_number
from .nonfinite_links import CASTS, HALF, SOFTMAXES, Cause, Links, base, limit, named_like, trained
from .nonfinite_rules import RECURRENT, exp_fix, saturation_edge

__all__ = ["overflow_cause", "saturated", "exp_floor", "exp_edge"]


def overflow_cause(g: Graph, links: Links, op_id: str, name: str, inputs: list[str], nums: list, out: TensorNode) -> Cause:
    """A finite input, a result too large for the dtype (named, with autocast when the trace saw
    autocast run the op, or the dtypes show it)."""
    dtype = out.dtype
    in_dtypes = {g.node(t).dtype for t in inputs}
    narrowed = dtype in HALF and in_dtypes and all(d == "float32" for d in in_dtypes) and name not in CASTS
    autocast = g.node(op_id).autocast is not None or narrowed
    if name in ("sum", "mean", "cumsum", "nansum") and inputs:
        n = g.node(inputs[0]).value.numel if g.node(inputs[0]).value is not None else None
        many = f"its {n} elements" if n else "its elements"
        return Cause("overflow", f"Every element it summed was finite, but the sum of {many} is larger than {dtype} can hold "
                     f"({limit(dtype)}).", f"Accumulate in float32: torch.{name}(x, dtype=torch.float32) or x.float()."
                     f"{name}() (under autocast, torch.{name} runs in float32 by itself).")
    why = f"Its inputs were finite, but the result is larger than {dtype} can hold ({limit(dtype)})"
    if name in RECURRENT:
        why += (f": the recurrent network's hidden state grew at every time step (a recurrent weight that multiplies "
                f"the state by more than 1 per step, with nothing to saturate it) until it passed {dtype}'s range")
    if narrowed:
        why += f": autocast ran {name} in {dtype} although its inputs were float32"
    elif autocast:
        wide = [links.label(t) for t in inputs if g.node(t).dtype == "float32"]
        why += (f": autocast ran {name} in {dtype}, casting its float32 input{'s' if len(wide) > 1 else ''} "
                f"({', '.join(wide[:3])}) to {dtype}" if wide else
                f": {name} ran under autocast in {dtype} (its inputs were {dtype} already, made by earlier ops under "
                f"autocast)")
    wider = None
    if name in ("exp", "exp2", "expm1") and nums:
        wider = nums[0] < (88.7 if name != "exp2" else 128)  # (float32 would hold it)
        why += f"; exp overflows {dtype} for inputs above about {format_number(exp_edge(dtype), 3)}"
    why += "."
    parts = []
    if name in ("exp", "exp2", "expm1"):
        found = exp_fix(g, links, op_id)
        if found is not None:
            why += f" It computes {found[0]}."
            parts.append(found[1])
        else:
            x = links.label(inputs[0]) if inputs else "x"
            x = x if named_like(x) else "x"
            parts.append(f"keep the input of exp in range: torch.exp({x}.clamp(max=...)) (for a log-variance or a log-scale, "
                         f"clamp it or predict it through F.softplus); find out where an input this large comes from (the data, a buffer, or a layer that "
                         f"has diverged" + (": a learning rate too high" if trained(g, links, op_id) else "") + ")")
    elif name in RECURRENT:
        parts.append("keep the hidden state from exploding: use the tanh nonlinearity (or an LSTM or GRU, whose gates "
                     "bound the state) instead of relu, initialise the recurrent weight with a spectral radius at most 1 "
                     "(orthogonal or scaled down), or truncate the sequence; clipping the gradients does not bound the "
                     "forward state")
    elif _attention_scores(g, links, op_id, name):
        parts.append("scale the attention scores before the softmax: divide q @ k.T by sqrt(head size), as "
                     "F.scaled_dot_product_attention does (or normalise q and k)")
    elif (source := _huge_source(g, links, inputs, dtype)) is not None:
        exp_op, x_t = source
        e, xs = g.node(exp_op), links.label(x_t)
        xv, ev = _largest(g.node(x_t).value), _largest(g.node(links.made.get(exp_op, {}).get(0, "")).value if links.made.get(exp_op) else None)
        at = f" at line {e.line} ({e.code})" if e.line and e.code else ""
        xs = xs if named_like(xs) else "its input"
        why = (why[:-1] if why.endswith(".") else why) + (
            f": its inputs were that large because {base(e.forward)}{at} made them, from {xs}"
            + (f" = {format_number(xv, 4)}" if xv is not None else "")
            + (f" (the result: {format_number(ev, 3)})" if ev is not None else "") + ".")
        x = xs if named_like(xs) else "x"
        parts.append(f"keep the input of {base(e.forward)} in range: torch.{base(e.forward)}({x}.clamp(max=...)) (for a "
                     f"log-variance or a log-scale, clamp it, as VAEs bound a log-std, or predict it through F.softplus); find "
                     f"out why {x} grew that large" + (" (a learning rate too high)" if trained(g, links, op_id) else ""))
    else:
        parts.append("scale the values down (normalise the inputs, " + ("a smaller learning rate or initialisation)" if trained(g, links, op_id)
                                                                       else "a smaller initialisation)"))
    if dtype == "float16" and wider is not False:
        if autocast:
            recast = base(name) in _AUTOCAST_LOW  # (ops autocast runs in float16 whatever their inputs: matmuls, convs)
            parts.append(f"compute {name} in float32 outside autocast: with torch.autocast(device_type, enabled=False): "
                         f"on .float() inputs" + (f" (casting the inputs alone is undone: autocast runs {name} in float16 "
                         f"again)" if recast else "") + "; or autocast to torch.bfloat16, which has float32's range")
        else:
            parts.append(f"compute {name} in float32 (on .float() inputs)")
    fix = "; ".join(parts)
    fix = fix[0].upper() + fix[1:] + "."
    if dtype == "bfloat16" or (dtype == "float16" and wider is False):
        fix += " (Computing it in float32 would overflow too: float32's range is " + \
            ("bfloat16's." if dtype == "bfloat16" else "exceeded there as well.") + ")"
    return Cause("overflow", why, fix)


#: Ops that turn a moderate input into a huge result.
_GROWERS = frozenset({"exp", "exp2", "expm1", "cosh", "sinh"})


def _largest(v) -> float | None:
    """The largest finite magnitude a recorded value's head shows (None: none shown)."""
    nums = [abs(x) for x in (v.head or ()) if type(x) in (int, float) and math.isfinite(x)] if v is not None else []
    return max(nums) if nums else None


def _huge_source(g: Graph, links: Links, inputs: list[str], dtype: str) -> tuple[str, str] | None:
    """``(op, its input)``: the exp-like op that made the huge finite values ``inputs`` of an
    overflowing op hold, from a moderate input, found by following the huge values up through
    the ops that carried them (a few hops; None when the records do not show it)."""
    try:
        big = float(torch.finfo(getattr(torch, dtype)).max) ** 0.4
    except (AttributeError, TypeError):
        return None
    huge = lambda t: (_largest(g.node(t).value) or 0.0) >= big  # noqa: E731
    frontier, seen = [t for t in inputs if huge(t)], set()
    for _ in range(8):
        nxt = []
        for t in frontier:
            op = links.maker.get(t)
            if t in seen or op is None:
                continue
            seen.add(t)
            ins = links.forward_inputs(op)
            if base(g.node(op).forward) in _GROWERS and ins and not huge(ins[0]) and _largest(g.node(ins[0]).value) is not None:
                return op, ins[0]
            nxt += [i for i in ins if huge(i)]
        frontier = nxt
    return None


_MATMULS = {"matmul", "bmm", "mm", "baddbmm", "einsum", "__matmul__", "matmul_"}
#: Ops autocast casts to its lower precision whatever their inputs' dtype (an elementwise op, mul, is not one).
_AUTOCAST_LOW = frozenset({"linear", "matmul", "mm", "bmm", "addmm", "addbmm", "baddbmm", "conv1d", "conv2d", "conv3d",
                           "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "prelu", "__matmul__", "einsum",
                           "scaled_dot_product_attention", "addmv", "mv", "chain_matmul", "linalg_multi_dot"})


def _attention_scores(g: Graph, links: Links, op_id: str, name: str) -> bool:
    """Whether op ``op_id`` (a matrix product) made scores that a softmax takes (directly, or
    after a scaling, masking or view)."""
    if name not in _MATMULS and base(name) not in _MATMULS:
        return False
    frontier = list(links.made.get(op_id, {}).values())
    for _ in range(3):
        nxt = []
        for t in frontier:
            for c in links.consumers.get(t, ()):
                cname = base(g.node(c).forward)
                if cname in SOFTMAXES:
                    return True
                if cname in ("mul", "div", "truediv", "add", "masked_fill", "where", "view", "reshape", "float", "to"):
                    nxt += list(links.made.get(c, {}).values())
        frontier = nxt
    return False


def exp_floor(dtype: str) -> float:
    """The input below which exp rounds to 0 in ``dtype`` (the log of its smallest subnormal number)."""
    try:
        info = torch.finfo(getattr(torch, dtype))
        return math.log(float(info.smallest_normal) * float(info.eps))
    except (AttributeError, TypeError):
        return -103.3


def exp_edge(dtype: str) -> float:
    try:
        return math.log(float(torch.finfo(getattr(torch, dtype)).max))
    except (AttributeError, TypeError):
        return 88.7



def saturated(dtype: str, *, high: bool = True) -> str:
    """Where ``sigmoid`` rounds to exactly 1 (``high``) or 0 in ``dtype``, as words."""
    edge = saturation_edge(dtype) if high else None
    if not high:
        return "a very negative input"
    if edge is None:
        return "a very large input"
    if dtype in ("float16", "bfloat16"):
        f32 = saturation_edge("float32")
        return (f"in {dtype} it rounds to 1 for every input above about {format_number(edge, 3)}, where float32 holds it "
                f"below 1 up to about {format_number(f32, 3)}")
    return f"{dtype} rounds it to 1 above about {format_number(edge, 3)}"
