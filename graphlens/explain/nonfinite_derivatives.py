"""Why a backward node sent a NaN or an infinity from finite gradients: its derivative at the input it had.

:mod:`graphlens.explain.nonfinite` finds the node (the first, in the engine's order, that sent a
non-finite gradient while what arrived was finite); this module says why, from the node's kind and
the input value the records hold there: an infinite derivative (``sqrt`` or ``log`` at 0, ``acos`` at
1), an input outside the op's domain (NaN), a derivative that overflows near a singular point, or a
node whose derivative is finite everywhere, whose gradient overflowed (float16 under autocast).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..graph import Graph
from ..values import format_number
from .._live.finite import BOUNDED_DERIVATIVES, FINITE_DERIVATIVES as _LINEAR
from .nonfinite_causes import Links, base, exponent as _exponent, limit as _limit, named_like as _named_like, squared as _squared

__all__ = ["FINITE_DERIVATIVES", "backward_cause"]

#: Backward nodes whose derivative is finite wherever their inputs are (sums, products, views,
#: bounded activations and losses): from finite gradients and inputs they send a non-finite
#: gradient only when a sum or a product overflows.
FINITE_DERIVATIVES = _LINEAR | BOUNDED_DERIVATIVES


# -- backward: nodes whose derivative is infinite (or 0/0) somewhere -------------------------------
_DERIVATIVES: dict[str, tuple[str, str]] = {
    "SqrtBackward0": ("the derivative of sqrt, 1 / (2·sqrt(x)), is infinite at x = 0",
                      "keep the input of sqrt away from 0: torch.sqrt({x} + eps) or torch.sqrt({x}.clamp(min=eps))"),
    "RsqrtBackward0": ("the derivative of rsqrt, -1 / (2·x^1.5), is infinite at x = 0", "use torch.rsqrt({x} + eps)"),
    "PowBackward0": ("the derivative of x ** p, p·x^(p-1), is infinite at x = 0 when p < 1",
                     "keep the base away from 0: ({x} + eps) ** p or {x}.clamp(min=eps) ** p"),
    "PowBackward1": ("the derivative of a power is infinite or undefined there", "keep the base away from 0: ({x} + eps) ** p"),
    "PowBackward2": ("the derivative of b ** x is b^x·log(b), and log(0) is -inf", "keep the base away from 0"),
    "SpecialEntrBackward0": ("the derivative of entr(p) = -p·log(p) is -log(p) - 1, infinite at p = 0 (a probability a "
                             "softmax rounded to 0)",
                             "compute the entropy from the logits: -(F.softmax(logits, -1) * F.log_softmax(logits, -1))"
                             ".sum(-1), or torch.distributions.Categorical(logits=logits).entropy(); both stay finite "
                             "where a probability is 0"),
    "XlogyBackward0": ("the function xlogy(x, y) = x·log(y) (kl_div computes its target·log(target) with it) is 0 where x = 0, but its "
                       "derivative with respect to y, x / y, is 0 / 0 where y = 0 too: a probability of 0 that a gradient "
                       "still flows into (a target that requires grad)",
                       "keep the probabilities that receive a gradient away from 0 (target.clamp(min=eps), or a softmax with "
                       "eps added), or detach the target (target.detach()) if it is not meant to be trained"),
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
    "LogitBackward0": ("the derivative of logit, 1 / (x·(1 − x)), is infinite at x = 0 and x = 1",
                       "keep the input strictly inside (0, 1): torch.logit({x}, eps=1e-6) clamps it; if {x} is a "
                       "sigmoid's output, use the sigmoid's input (the logits) directly instead of logit(sigmoid(z))"),
    "ErfinvBackward0": ("the derivative of erfinv, (√π / 2)·exp(erfinv(x)²), is infinite at x = ±1",
                        "keep the input strictly inside (-1, 1): torch.erfinv({x}.clamp(-1 + eps, 1 - eps))"),
    "LinalgEighBackward0": ("the derivative of the eigenvectors has 1 / (λi − λj) in it: infinite where two eigenvalues "
                            "are equal (repeated, degenerate eigenvalues: the eigenvectors are not unique there), and 0 × inf "
                            "or inf − inf gives NaN",
                            "Perturb the matrix so its eigenvalues differ (add a small random 'jitter' to the diagonal: "
                            "{x} + eps * torch.diag(torch.rand(n))), or use only the eigenvalues (torch.linalg.eigvalsh: "
                            "their gradient is finite), or a whitening that needs no eigenvectors (Cholesky, Newton-Schulz)"),
    "LinalgEigBackward0": ("the derivative of the eigenvectors has 1 / (λi − λj) in it: infinite where two eigenvalues are "
                           "equal (repeated eigenvalues)", "Perturb the matrix so its eigenvalues differ (a small random "
                           "jitter), or use only the eigenvalues (torch.linalg.eigvals)"),
    "LinalgSvdBackward0": ("the derivative of the singular vectors has 1 / (σi² − σj²) in it: infinite where two singular "
                           "values are equal (repeated singular values)", "Perturb the matrix so its singular values differ "
                           "(a small random jitter), or use only the singular values (torch.linalg.svdvals)"),
    "SvdHelperBackward0": ("the derivative of the singular vectors has 1 / (σi² − σj²) in it: infinite where two singular "
                           "values are equal", "Perturb the matrix (a small random jitter), or use torch.linalg.svdvals"),
}


#: Where each node's derivative is singular (infinite), and where its input leaves the domain (NaN).
_SINGULAR: dict[str, tuple[Any, Any]] = {  # node -> (singular points, domain test: True where NaN)
    "SqrtBackward0": ((0.0,), lambda v: v < 0), "RsqrtBackward0": ((0.0,), lambda v: v < 0),
    "SpecialEntrBackward0": ((0.0,), lambda v: v < 0),
    "LogBackward0": ((0.0,), lambda v: v < 0), "Log2Backward0": ((0.0,), lambda v: v < 0),
    "Log10Backward0": ((0.0,), lambda v: v < 0), "Log1PBackward0": ((-1.0,), lambda v: v < -1),
    "ReciprocalBackward0": ((0.0,), lambda v: False), "AcosBackward0": ((-1.0, 1.0), lambda v: abs(v) > 1),
    "AsinBackward0": ((-1.0, 1.0), lambda v: abs(v) > 1), "AtanhBackward0": ((-1.0, 1.0), lambda v: abs(v) > 1),
    "LogitBackward0": ((0.0, 1.0), lambda v: v < 0 or v > 1), "ErfinvBackward0": ((-1.0, 1.0), lambda v: abs(v) > 1),
}


def _derivative_size(node_name: str, v: float, p: Any = None) -> float | None:
    """|derivative| of the node's op at ``v`` (away from its singular points), where known."""
    import math

    try:
        return {
            "SqrtBackward0": lambda: 0.5 / math.sqrt(v), "RsqrtBackward0": lambda: 0.5 * v ** -1.5,
            "LogBackward0": lambda: 1 / abs(v), "Log2Backward0": lambda: 1 / abs(v * math.log(2)),
            "Log10Backward0": lambda: 1 / abs(v * math.log(10)), "Log1PBackward0": lambda: 1 / abs(1 + v),
            "ReciprocalBackward0": lambda: 1 / (v * v), "AcosBackward0": lambda: 1 / math.sqrt(1 - v * v),
            "AsinBackward0": lambda: 1 / math.sqrt(1 - v * v), "AtanhBackward0": lambda: 1 / abs(1 - v * v),
            "PowBackward0": lambda: abs(p) * abs(v) ** (p - 1), "LogitBackward0": lambda: 1 / abs(v * (1 - v)),
        }[node_name]()
    except (KeyError, ValueError, ZeroDivisionError, OverflowError, TypeError):
        return None


_SPECTRAL = frozenset({"LinalgEighBackward0", "LinalgEigBackward0", "LinalgSvdBackward0", "SvdHelperBackward0"})


def _repeated(g: Graph, links: Links, op_id: str) -> str:
    """The eigenvalues (singular values) the op made, when the records hold them all and two are
    equal: the words saying so (``""`` otherwise: nothing is claimed)."""
    outs = links.made.get(op_id, {})
    tid = outs.get(1 if g.node(op_id).name == "LinalgSvdBackward0" else 0)
    v = g.node(tid).value if tid else None
    if v is None or v.head is None or len(v.head) < v.numel or v.numel > 64:
        return ""
    vals = [x for x in v.head if type(x) in (int, float)]
    seen = sorted(vals)
    if any(a == b for a, b in zip(seen, seen[1:])):
        shown = ", ".join(format_number(x, 6) for x in vals[:6])
        what = "singular values" if "Svd" in (g.node(op_id).name or "") else "eigenvalues"
        return f". The {what} it made here are [{shown}]: two are equal"
    return ""


def backward_cause(g: Graph, links: Links, op_id: str, node_name: str, fwd: str, x: str, *, value: Any = None,
                   dtype: str | None = None, inputs_finite: bool = False, values: list | None = None) -> tuple[list[str], str, str]:
    """Why backward node ``node_name`` (the backward of ``fwd``, whose input is called ``x``)
    sent a non-finite gradient from a finite one: extra reason codes, one sentence, the fix.
    ``value``: the input at that position, where it was read (the text then says what the
    derivative is there, not only where it is infinite); ``dtype``: the gradient's;
    ``inputs_finite``: every forward input of the op was finite."""
    why, fix = _DERIVATIVES.get(node_name, (f"the derivative of {fwd} is not finite at that input",
                                            f"keep the input of {fwd} away from the values where its derivative is not finite"))
    codes = ["infinite_derivative"]
    if fwd.endswith(".apply") and node_name not in _DERIVATIVES:  # (a custom autograd.Function: the user's backward)
        cls = fwd.removesuffix(".apply")
        why = (f"{cls} is an autograd.Function of the program's own: its backward ({cls}.backward, code graphlens does "
               f"not see into) returned a NaN or an infinity from finite gradients; the usual cause is a division or a "
               f"root there whose denominator is 0 at that position (a magnitude or a norm that is 0)")
        fix = (f"look at the divisions and roots in {cls}.backward: add eps to the denominator, or use "
               f"torch.where(denominator > 0, ..., 0) for the positions where it is 0; "
               f"torch.autograd.gradcheck checks a hand-written backward")
    if node_name == "Atan2Backward0" and values and len(values) >= 2 and all(type(v) in (int, float) for v in values[:2]):
        yv, xv = values[0], values[1]
        if yv != 0 or xv != 0:  # (not the origin: the derivative y / (x² + y²) overflowed)
            r2 = xv * xv + yv * yv
            big = 1 / r2 if r2 else math.inf
            dt = dtype or "float32"
            return (["overflow"], f"The point there, ({format_number(yv, 6)}, {format_number(xv, 6)}), is not the origin, "
                    f"but it is so close to it that atan2's backward, which computes 1 / (x² + y²) = "
                    f"{format_number(big, 3)}, overflows {dt} ({_limit(dt)}), even where the gradient itself would fit.",
                    "Compute atan2 in float32 (torch.atan2(y.float(), x.float())), or keep the vector away from the origin "
                    "(normalise it, or add a small eps to its length)." if dt in ("float16", "bfloat16") else
                    "Keep the vector away from the origin (normalise it, or add a small eps to its length).")
    if node_name in _SPECTRAL:
        why += _repeated(g, links, op_id)
    if node_name in FINITE_DERIVATIVES and inputs_finite:
        return ["overflow"], *_backward_overflow(node_name, fwd, dtype)
    exponent = _exponent(g, op_id) if node_name == "PowBackward0" else None
    if exponent is not None and exponent >= 1 and float(exponent).is_integer():  # (x ** 2, x ** 3: a finite derivative)
        if inputs_finite:
            return ["overflow"], *_backward_overflow(node_name, fwd, dtype)
        return ([], f"The derivative of x ** {exponent:g} is finite, but the input there was already infinite or NaN in "
                f"the forward pass: the gradient only carries that value back.",
                "Find where the input of the power became non-finite in the forward pass (graphlens.explain on it).")
    singular = _SINGULAR.get(node_name) or (((0.0,), lambda v: v < 0) if exponent is not None and 0 < exponent < 1 else None)
    plain_x = x if _named_like(x) else "x"
    if singular is not None and type(value) in (int, float) and value not in singular[0]:
        if singular[1](value):
            return (["invalid_domain"], f"The input there is {format_number(value, 6)}, outside the domain of {base(fwd)}: "
                    f"its value and its derivative are NaN.", f"Find out why {plain_x} is {format_number(value, 6)} there; "
                    f"keep the input inside the domain before {base(fwd)} (clamp it, or pick the branch before the op).")
        size = _derivative_size(node_name, float(value), exponent)
        limit = _max(dtype or "float32")
        if size is not None and limit is not None and size > limit:
            return (["overflow"], f"The input there is {format_number(value, 6)}: not 0, but so close to it that the "
                    f"derivative, about {format_number(size, 3)}, is larger than {dtype or 'float32'} can hold "
                    f"({_limit(dtype or 'float32')}): it overflowed to inf.", fix.replace("{x}", plain_x))
        if size is not None:
            return (["overflow"], f"The derivative there (the input is {format_number(value, 6)}) is about "
                    f"{format_number(size, 3)}: finite, but times the gradient that arrived it is larger than "
                    f"{dtype or 'float32'} can hold.", fix.replace("{x}", plain_x))
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


def _max(dtype: str) -> float | None:
    try:
        return float(torch.finfo(getattr(torch, dtype)).max)
    except (AttributeError, TypeError):
        return None


def _backward_overflow(node_name: str, fwd: str, dtype: str | None) -> tuple[str, str]:
    """The sentence and fix for a gradient that overflowed in a node with a finite derivative."""
    d = dtype or "float32"
    why = (f"The derivative of {fwd} is finite everywhere, and every gradient that arrived and every input of {fwd} was "
           f"finite, but the gradient {node_name} computed (sums of products) is larger than {d} can hold ({_limit(d)}): "
           f"it overflowed.")
    if d == "float16":
        why += " An op autocast (or .half()) ran in float16 has its backward in float16 too."
        fix = ("Keep the gradients inside float16's range: on CUDA scale the loss with torch.amp.GradScaler (it also "
               "skips the steps whose gradients overflow); on CPU use torch.autocast(device_type='cpu', "
               "dtype=torch.bfloat16), which has float32's range; or run this layer in float32.")
    else:
        fix = ("Keep the values smaller: normalise the inputs, lower the learning rate or the scale of the "
               "initialisation; clipping the gradient afterwards cannot remove an inf.")
    return why, fix
