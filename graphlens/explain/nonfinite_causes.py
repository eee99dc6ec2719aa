"""What makes a NaN or an infinity, op by op: the cause and the fix of each kind, read from a graph's values.

:mod:`graphlens.explain.nonfinite` finds *where* the first non-finite number appeared (an op of
the forward pass, or a backward node the engine ran); this module says *why*, from the values
the records hold at that position: ``log(0)``, a zero denominator, a result too large for its
dtype, an infinite derivative (``sqrt`` at 0, ``acos`` at 1), and the fix for each.  Nothing
here guesses: a cause is named only when the recorded values show it, else the answer says
what the op did and no more.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from ..graph import Graph, OpNode, TensorNode
from ..values import Summary, format_number

__all__ = ["Links", "Cause", "bad", "kind", "index", "value_at", "base", "forward_cause", "backward_cause", "safe_where_fix"]


def bad(s: Summary | None) -> bool:
    """Whether the summary ``s`` says its tensor holds a NaN or an infinity."""
    return s is not None and s.finite is False


def kind(v: Any) -> str:
    """``"NaN"``, ``"inf"`` or ``"-inf"`` for a number (a complex one: NaN if a part is)."""
    if type(v) is complex:
        return "NaN" if v != v else "inf"
    if type(v) is float:
        return "NaN" if v != v else ("inf" if v > 0 else "-inf")
    return "a NaN or an infinity"


def index(shape: tuple, flat: int | None) -> str:
    """``[i, j]`` for the flat row-major index ``flat`` of a tensor of ``shape`` (``""`` for a
    0-d tensor or an unknown position)."""
    if flat is None or not shape:
        return ""
    if any(type(n) is not int for n in shape):
        return f"[flat {flat}]"
    out = []
    for n in reversed(shape):
        out.append(flat % n if n else 0)
        flat = flat // n if n else 0
    return "[" + ", ".join(map(str, reversed(out))) + "]"


def value_at(s: Summary | None, flat: int | None, shape: tuple) -> Any:
    """The value summarised by ``s`` at the flat position ``flat`` of a tensor of ``shape``,
    where it can be told: a one-element tensor, or one of that shape read that far."""
    if s is None or s.head is None or flat is None:
        return None
    if s.numel == 1 and s.head:
        return s.head[0]
    if tuple(s.shape) == tuple(shape) and flat < len(s.head):
        return s.head[flat]
    return None


def base(name: str | None) -> str:
    """An op's plain name: ``torch.log`` -> ``log``, ``add_`` -> ``add``, ``__truediv__`` -> ``truediv``."""
    return (name or "").rsplit(".", 1)[-1].strip("_")


class Links:
    """The graph's structure as the searches need it: who made each tensor, who used it, and
    where each backward node sends its gradients."""

    def __init__(self, g: Graph) -> None:
        self.g = g
        self.order = {t.id: k for k, t in enumerate(g.tensors)}
        self.inputs: dict[str, list[tuple[int, str]]] = {}  # op -> [(input_nr, tensor)]
        self.maker: dict[str, str] = {}  # tensor -> op that made it
        self.made: dict[str, dict[int, str]] = {}  # op -> {output_nr: tensor}
        self.nexts: dict[str, dict[int, tuple[str, int]]] = {}  # op -> {input_nr: (child op, output_nr)}
        self.parents: dict[str, list[str]] = {}  # op -> ops whose next edges point at it
        self.consumers: dict[str, list[str]] = {}  # tensor -> ops it fed
        self.detached: dict[str, str] = {}  # tensor -> the tensor it was detached from (the same data)
        for e in g.edges:
            if e.kind == "input":
                self.inputs.setdefault(e.dst, []).append((e.input_nr, e.src))
                self.consumers.setdefault(e.src, []).append(e.dst)
            elif e.kind == "output":
                self.maker[e.dst] = e.src
                self.made.setdefault(e.src, {})[e.output_nr] = e.dst
            elif e.kind == "detach":
                self.detached[e.dst] = e.src
            elif e.kind == "next":
                self.nexts.setdefault(e.src, {})[e.input_nr] = (e.dst, e.output_nr)
                self.parents.setdefault(e.dst, []).append(e.src)
        for rows in self.inputs.values():
            rows.sort()

    def forward_inputs(self, op: str) -> list[str]:
        return [t for _, t in self.inputs.get(op, ())]

    def made_by(self, tid: str | None) -> str:
        """The plain forward name of the op that made ``tid`` (``""``: none)."""
        op = self.maker.get(tid) if tid else None
        return base(self.g.node(op).forward) if op is not None else ""

    def ancestors(self, tid: str) -> list[str]:
        """``tid`` and every tensor its value was computed from (through ops), in program order."""
        seen, stack = set(), [tid]
        while stack:
            t = stack.pop()
            if t in seen:
                continue
            seen.add(t)
            op = self.maker.get(t)
            if op is not None:
                stack.extend(self.forward_inputs(op))
            if t in self.detached:  # (detach() shares the data: its values were made where the original's were)
                stack.append(self.detached[t])
        return sorted(seen, key=lambda t: self.order.get(t, 0))

    def upstream(self, op: str) -> set[str]:
        """The backward nodes from which ``op`` is reached along next edges (``op`` too): those
        whose gradients can end up at it."""
        seen, stack = set(), [op]
        while stack:
            o = stack.pop()
            if o not in seen:
                seen.add(o)
                stack.extend(self.parents.get(o, ()))
        return seen

    def target_of(self, op: str, input_nr: int) -> str | None:
        """The tensor the gradient ``op`` sends along its ``input_nr``-th next edge is for."""
        child = self.nexts.get(op, {}).get(input_nr)
        if child is None:
            return None
        node = self.g.node(child[0])
        if isinstance(node, OpNode) and node.variable is not None:
            return node.variable
        return self.made.get(child[0], {}).get(child[1])

    def label(self, tid: str | None) -> str:
        """What an answer calls a tensor: its variable name, the name of a later in-place version
        of it, else what made it (``log's result``), else its id."""
        if tid is None:
            return "its input"
        node = self.g.node(tid)
        if isinstance(node, TensorNode) and node.name:
            return node.name
        later, seen = tid, set()
        while later not in seen:  # (w updated in place by an optimizer: its later version has the name)
            seen.add(later)
            nxt = [self.made.get(op, {}).get(0) for op in self.consumers.get(later, ())
                   if (self.g.node(op).forward or "").endswith("_") and self.forward_inputs(op)[:1] == [later]]
            nxt = [t for t in nxt if t is not None]
            if not nxt:
                break
            later = nxt[0]
            if self.g.node(later).name:
                return self.g.node(later).name
        fwd = self.made_by(tid)
        return f"{fwd}'s result" if fwd else tid


class Cause(NamedTuple):
    """Why an op made a non-finite number: a reason code, one sentence, the fix."""

    code: str
    why: str
    fix: str


_LOGS = {"log", "log2", "log10", "log1p"}
_DIVS = {"div", "true_divide", "truediv", "rdiv", "rtruediv", "divide"}
_CASTS = {"to", "half", "bfloat16", "float", "double", "type", "type_as"}
_HALF = {"float16", "bfloat16"}


def _limit(dtype: str) -> str:
    try:
        return format_number(float(torch.finfo(getattr(torch, dtype)).max), 5)
    except (AttributeError, TypeError):
        return "its largest value"


def forward_cause(g: Graph, links: Links, op: OpNode, op_id: str, at: int | None, out: TensorNode, bad_value: Any) -> Cause:
    """Why the forward op ``op`` made the first non-finite value, at flat position ``at`` of
    its output ``out`` (every input it was given was finite)."""
    fwd = op.forward or op.name or op_id
    name = base(fwd)
    inputs = links.forward_inputs(op_id)
    nums = [value_at(g.node(t).value, at, out.shape) for t in inputs]
    nums = [v for v in nums if type(v) in (float, int)]
    inf = type(bad_value) is float and bad_value in (float("inf"), float("-inf"))
    if name in _LOGS:
        x = links.label(inputs[0]) if inputs else "x"
        x = x if _named_like(x) else "x"
        if links.made_by(inputs[0] if inputs else None) in ("softmax", "_softmax") and bad_value == float("-inf"):
            return Cause("log_of_softmax", f"softmax underflowed to exactly 0 there (its logit was far below the largest one), "
                         f"and {name}(0) = -inf.", "Use torch.log_softmax(x, dim) (F.log_softmax) instead of "
                         "torch.log(torch.softmax(x, dim)): the same values without the underflow; for a loss, "
                         "F.cross_entropy takes the logits directly.")
        src = links.made_by(inputs[0] if inputs else None)
        if src == "sigmoid" and bad_value == float("-inf"):
            return Cause("log_of_zero", "The sigmoid saturated to exactly 0 there (a very negative input), and log(0) = -inf.",
                         "Use F.logsigmoid(z) instead of torch.log(torch.sigmoid(z)) (and F.logsigmoid(-z) for "
                         "log(1 - sigmoid(z))); for a loss, F.binary_cross_entropy_with_logits takes the logits directly.")
        if src == "rsub" and bad_value == float("-inf"):
            inner = links.forward_inputs(links.maker[inputs[0]])
            if inner and links.made_by(inner[-1]) == "sigmoid":
                return Cause("log_of_zero", "The sigmoid saturated to exactly 1 there (a very large input), so 1 - sigmoid is 0 "
                             "and log(0) = -inf.", "Use F.logsigmoid(-z) instead of torch.log(1 - torch.sigmoid(z)); for "
                             "a loss, F.binary_cross_entropy_with_logits takes the logits directly.")
        if nums and nums[0] == (-1 if name == "log1p" else 0):
            return Cause("log_of_zero", f"The {name} of {'-1' if name == 'log1p' else '0'} is -inf.",
                         f"Keep the input away from 0: torch.{name}({x}.clamp(min=eps)) or torch.{name}({x} + eps).")
        if nums and nums[0] < (-1 if name == "log1p" else 0):
            return Cause("invalid_domain", f"The {name} of a negative number ({format_number(nums[0], 6)}) is NaN.",
                         f"Find out why {x} is negative there; clamp it first, or take the log of its absolute value "
                         f"if that is what you mean.")
    if name in _DIVS or name == "reciprocal" or name == "rsqrt":
        den = nums[-1] if nums else None
        if den == 0:
            zero_over_zero = name not in ("reciprocal", "rsqrt", "rdiv", "rtruediv") and len(nums) >= 2 and nums[0] == 0
            what = "0 / 0 is NaN" if zero_over_zero else "dividing by 0 gives an infinity"
            b = links.label(inputs[-1]) if inputs else "b"
            b = b if _named_like(b) else "b"
            fix = (f"Keep the denominator away from 0: divide by ({b} + eps) or {b}.clamp(min=eps); where 0 / 0 should "
                   f"mean 0, divide by torch.where({b} == 0, torch.ones_like({b}), {b}) and mask the result.")
            return Cause("division_by_zero", f"The denominator is 0 there: {what}.", fix)
    if name in ("sqrt", "acos", "asin", "acosh", "atanh") and nums and not inf:
        lo, hi = {"sqrt": (0, None), "acos": (-1, 1), "asin": (-1, 1), "acosh": (1, None), "atanh": (-1, 1)}[name]
        v = nums[0]
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            span = f">= {lo}" if hi is None else f"between {lo} and {hi}"
            return Cause("invalid_domain", f"The input {format_number(v, 6)} is outside {name}'s domain ({span}): the result "
                         f"is NaN.", f"Find out why the input leaves the domain; clamp it first ({name}(x.clamp({lo}"
                         f"{', ' + str(hi) if hi is not None else ''}))) if values just outside it are rounding errors.")
    if name == "pow" and len(nums) >= 1 and nums[0] < 0 and not inf:
        return Cause("invalid_domain", "A negative base to a fractional power is NaN.",
                     "Keep the base >= 0 (clamp it, or use its absolute value) before the power.")
    if name == "pow" and nums and nums[0] == 0 and inf:
        return Cause("division_by_zero", "0 to a negative power is an infinity (a division by 0).",
                     "Keep the base away from 0: (x + eps) ** p or x.clamp(min=eps) ** p.")
    if inf and name not in _LOGS and name not in _DIVS:
        return _overflow(g, links, op_id, name, inputs, nums, out)
    return Cause("nonfinite_forward", f"{fwd} made it from finite inputs.",
                 f"Check the inputs of {fwd} at that position before the op (torch.isfinite).")


def _overflow(g: Graph, links: Links, op_id: str, name: str, inputs: list[str], nums: list, out: TensorNode) -> Cause:
    """A finite input, a result too large for the dtype (named, with autocast when the dtypes show it)."""
    dtype = out.dtype
    in_dtypes = {g.node(t).dtype for t in inputs}
    autocast = dtype in _HALF and in_dtypes and all(d == "float32" for d in in_dtypes) and name not in _CASTS
    if name in ("sum", "mean", "cumsum", "nansum") and inputs:
        n = g.node(inputs[0]).value.numel if g.node(inputs[0]).value is not None else None
        many = f"its {n} elements" if n else "its elements"
        return Cause("overflow", f"Every element it summed was finite, but the sum of {many} is larger than {dtype} can hold "
                     f"({_limit(dtype)}).", f"Accumulate in float32: torch.{name}(x, dtype=torch.float32) or x.float()."
                     f"{name}() (under autocast, torch.{name} runs in float32 by itself).")
    why = f"Its inputs were finite, but the result is larger than {dtype} can hold ({_limit(dtype)})"
    if autocast:
        why += f": autocast ran {name} in {dtype} although its inputs were float32"
    wider = None
    if name in ("exp", "exp2", "expm1") and nums:
        wider = nums[0] < (88.7 if name != "exp2" else 128)  # (float32 would hold it)
        why += f"; exp overflows {dtype} for inputs above about {format_number(_exp_edge(dtype), 3)}"
    why += "."
    parts = []
    if name in ("exp", "exp2", "expm1"):
        parts.append("subtract the maximum before exp, as softmax and logsumexp do (torch.softmax, torch.logsumexp, "
                     "F.log_softmax), or scale the values down")
    else:
        parts.append("scale the values down (normalise the inputs, a smaller learning rate or initialisation)")
    if dtype == "float16" and wider is not False:
        parts.append(f"compute {name} in float32 ({'outside autocast: with torch.autocast(device_type, enabled=False) on .float() inputs' if autocast else 'on .float() inputs'})")
    fix = "; ".join(parts)
    fix = fix[0].upper() + fix[1:] + "."
    if dtype == "bfloat16" or (dtype == "float16" and wider is False):
        fix += " (Computing it in float32 would overflow too: float32's range is " + \
            ("bfloat16's." if dtype == "bfloat16" else "exceeded there as well.") + ")"
    return Cause("overflow", why, fix)


def _exp_edge(dtype: str) -> float:
    import math

    try:
        return math.log(float(torch.finfo(getattr(torch, dtype)).max))
    except (AttributeError, TypeError):
        return 88.7


# -- backward: nodes whose derivative is infinite (or 0/0) somewhere -------------------------------
_DERIVATIVES: dict[str, tuple[str, str]] = {
    "SqrtBackward0": ("the derivative of sqrt, 1 / (2·sqrt(x)), is infinite at x = 0",
                      "keep the input of sqrt away from 0: torch.sqrt({x} + eps) or torch.sqrt({x}.clamp(min=eps))"),
    "RsqrtBackward0": ("the derivative of rsqrt, -1 / (2·x^1.5), is infinite at x = 0", "use torch.rsqrt({x} + eps)"),
    "PowBackward0": ("the derivative of x ** p, p·x^(p-1), is infinite at x = 0 when p < 1",
                     "keep the base away from 0: ({x} + eps) ** p or {x}.clamp(min=eps) ** p"),
    "PowBackward1": ("the derivative of a power is infinite or undefined there", "keep the base away from 0: ({x} + eps) ** p"),
    "PowBackward2": ("the derivative of b ** x is b^x·log(b), and log(0) is -inf", "keep the base away from 0"),
    "LogBackward0": ("the derivative of log, 1 / x, is infinite at x = 0",
                     "keep the input of log away from 0: torch.log({x}.clamp(min=eps)) or torch.log({x} + eps)"),
    "Log2Backward0": ("the derivative of log2, 1 / (x·ln 2), is infinite at x = 0", "torch.log2({x}.clamp(min=eps))"),
    "Log10Backward0": ("the derivative of log10, 1 / (x·ln 10), is infinite at x = 0", "torch.log10({x}.clamp(min=eps))"),
    "Log1PBackward0": ("the derivative of log1p, 1 / (1 + x), is infinite at x = -1", "keep 1 + {x} away from 0"),
    "DivBackward0": ("the division's derivative, 1 / b for the numerator and -a / b² for the denominator, is infinite "
                     "at b = 0", "keep the denominator away from 0: divide by ({x} + eps) or {x}.clamp(min=eps)"),
    "ReciprocalBackward0": ("the derivative of the reciprocal, -1 / x², is infinite at x = 0",
                            "keep the input away from 0: 1 / ({x} + eps)"),
    "AcosBackward0": ("the derivative of acos, -1 / sqrt(1 - x²), is infinite at x = ±1",
                      "keep the input strictly inside (-1, 1): torch.acos({x}.clamp(-1 + eps, 1 - eps))"),
    "AsinBackward0": ("the derivative of asin, 1 / sqrt(1 - x²), is infinite at x = ±1",
                      "keep the input strictly inside (-1, 1): torch.asin({x}.clamp(-1 + eps, 1 - eps))"),
    "AtanhBackward0": ("the derivative of atanh, 1 / (1 - x²), is infinite at x = ±1",
                       "keep the input strictly inside (-1, 1): torch.atanh({x}.clamp(-1 + eps, 1 - eps))"),
    "Atan2Backward0": ("atan2(y, x) has no derivative at (0, 0)", "keep the point away from the origin, e.g. atan2(y, x + eps)"),
    "ExpBackward0": ("the derivative of exp is exp(x) itself, which overflows to inf there",
                     "keep the input of exp small: subtract its maximum first, or clamp it"),
    "NormBackward0": ("the derivative of the norm, x / ||x||, is 0/0 for a zero vector",
                      "add eps inside the root: torch.sqrt(({x} ** 2).sum() + eps)"),
    "NormBackward1": ("the derivative of the norm, x / ||x||, is 0/0 for a zero vector",
                      "add eps inside the root: torch.sqrt(({x} ** 2).sum(dim) + eps)"),
    "CdistBackward0": ("the derivative of cdist is 0/0 where two points coincide", "add eps to the squared distance before the root"),
}

def backward_cause(g: Graph, links: Links, op_id: str, node_name: str, fwd: str, x: str) -> tuple[list[str], str]:
    """Why backward node ``node_name`` (the backward of ``fwd``, whose input is called ``x``)
    sent a non-finite gradient from a finite one: extra reason codes, one sentence, the fix."""
    why, fix = _DERIVATIVES.get(node_name, (f"the derivative of {fwd} is not finite at that input",
                                            f"keep the input of {fwd} away from the values where its derivative is not finite"))
    codes = ["infinite_derivative"]
    inputs = links.forward_inputs(op_id)
    src = links.maker.get(inputs[0]) if inputs else None
    srcname = base(g.node(src).forward) if src is not None else ""
    root_like = node_name == "SqrtBackward0" or (node_name == "PowBackward0" and _exponent(g, op_id) == 0.5)
    root = "the square root" if node_name == "SqrtBackward0" else "the power 0.5"
    plain = x if _named_like(x) else "x"
    if root_like and srcname in ("sum", "mean"):
        inner = links.forward_inputs(src)
        sq = _squared(g, links, inner[0]) if inner else None
        if sq is not None:
            v = links.label(sq)
            v = v if _named_like(v) else "v"
            why = (f"{root} takes a sum of squares here: this is the norm of a vector, and where that vector is zero the "
                   f"norm's derivative, v / ||v||, is 0/0 (the derivative of the root is infinite at 0)")
            fix = (f"use torch.linalg.vector_norm({v}, dim=...) (its gradient at a zero vector is 0), or add eps inside the "
                   f"root: torch.sqrt(({v} ** 2).sum(dim) + eps)")
    elif root_like and srcname == "add" and all(_squared(g, links, t) is not None for t in links.forward_inputs(src)):
        why = (f"{root} takes a sum of squares here (the length of a vector, sqrt(a² + b²)): where every part is zero "
               f"its derivative is 0/0 (the derivative of the root is infinite at 0)")
        fix = "add eps inside the root: (a ** 2 + b ** 2 + eps) ** 0.5, or torch.sqrt(a ** 2 + b ** 2 + eps)"
    elif root_like and inputs and _squared(g, links, inputs[0]) is not None:
        v = links.label(_squared(g, links, inputs[0]))
        why = (f"here {root} takes a square: sqrt(v ** 2) is |v|, and the root's infinite derivative at 0 times the "
               f"square's derivative 0 there is 0 · inf = NaN")
        fix = (f"use {v}.abs() instead of the root of its square" if _named_like(v) else
               "take the absolute value of what you square (v.abs()) instead of the root of its square") + \
            " (its gradient at 0 is 0)"
    elif node_name == "LogBackward0" and srcname in ("softmax", "_softmax"):
        codes.append("log_of_softmax")
        why = ("here log takes a softmax: softmax underflowed to 0 for a logit far below the largest one, and the "
               "derivative of log is infinite at 0")
        fix = ("use torch.log_softmax(x, dim) (F.log_softmax) instead of torch.log(torch.softmax(x, dim)); for a loss, "
               "F.cross_entropy takes the logits directly")
    elif node_name in ("AcosBackward0", "AsinBackward0") and srcname == "clamp":
        fix = (f"clamp the input to [-1 + eps, 1 - eps] instead of [-1, 1] (torch.{fwd}(x.clamp(-1 + eps, 1 - eps))): at "
               f"exactly ±1 the derivative of {fwd} is still infinite")
    return codes, why[0].upper() + why[1:] + ".", fix.replace("{x}", plain)


def _named_like(label: str) -> bool:
    """Whether an answer's label for a tensor is a name a fix can use in code (not ``log's result``, ``t7``)."""
    return label.replace(".", "_").isidentifier() and not (label[:1] == "t" and label[1:].isdigit())


def _squared(g: Graph, links: Links, tid: str) -> str | None:
    """The tensor ``v`` when ``tid`` is its square (``v ** 2``, ``v.square()``, ``v * v``), else None."""
    op = links.maker.get(tid)
    if op is None:
        return None
    ins = links.forward_inputs(op)
    name = base(g.node(op).forward)
    if name in ("pow", "square") and _exponent(g, op) == 2 and ins:
        return ins[0]
    if name == "mul" and len(ins) == 2 and ins[0] == ins[1]:
        return ins[0]
    return None


def _exponent(g: Graph, op_id: str | None) -> Any:
    """The exponent a pow op saved (``exponent``), where the graph read it."""
    node = g.node(op_id) if op_id is not None else None
    for e in getattr(node, "saved", ()) or ():
        if e.name == "exponent" and type(e.value) in (int, float):
            return e.value
    return None


def safe_where_fix(fwd: str, x: str, mask: str, exp_like: bool) -> str:
    """The double-where fix: make the op's input safe where the other branch is chosen."""
    safe = "torch.zeros_like" if exp_like else "torch.ones_like"
    named = _named_like(x)
    x = x if named else "x"
    if base(fwd) in ("div", "truediv", "true_divide", "divide", "rdiv"):
        b = x if named and x != "b" else "b"
        return (f"Make the denominator safe before the division, so its branch is finite even where it is not chosen: "
                f"torch.where({mask}, a / torch.where({mask}, {b}, torch.ones_like({b})), other) (the double-where "
                f"pattern); masking after the op cannot help.")
    call = f"torch.{base(fwd)}" if base(fwd) in ("log", "log2", "log10", "sqrt", "exp", "acos", "asin", "rsqrt", "reciprocal") else base(fwd)
    return (f"Make the input safe before {base(fwd)}, so its branch is finite even where it is not chosen: "
            f"torch.where({mask}, {call}(torch.where({mask}, {x}, {safe}({x}))), other) (the double-where pattern); "
            f"masking after the op cannot help.")
