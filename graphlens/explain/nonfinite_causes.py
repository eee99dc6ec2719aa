"""What makes a NaN or an infinity, op by op: the cause and the fix of each kind, read from a graph's values.

:mod:`graphlens.explain.nonfinite` finds *where* the first non-finite number appeared (an op of
the forward pass, or a backward node the engine ran); this module says *why*, from the values
the records hold at that position: ``log(0)``, a zero denominator, a result too large for its
dtype, an infinite derivative (``sqrt`` at 0, ``acos`` at 1), and the fix for each.  Nothing
here guesses: a cause is named only when the recorded values show it, else the answer says
what the op did and no more.
"""

from __future__ import annotations

from typing import Any

import torch

from ..graph import Graph, OpNode, TensorNode
from ..values import format_number
from .nonfinite_links import ATTENTIONS, CASTS as _CASTS, CONTRACTIONS, DIVS as _DIVS, FILLS, HALF as _HALF, SOFTMAXES, Cause, \
    Links, bad, base, index, kind, limit, live_as_recorded, named_like, position, positional, value_at, value_read
from .nonfinite_overflow import exp_floor as _exp_floor, overflow_cause as _overflow, saturated as _saturated
from .nonfinite_rules import all_positive, arithmetic, exact_cause, factors_per_product, largest, underflowed_exp

__all__ = ["Links", "Cause", "bad", "kind", "index", "value_at", "position", "positional", "CONTRACTIONS", "FILLS", "SOFTMAXES", "ATTENTIONS", "masked_softmax_cause", "live_as_recorded", "base", "forward_cause", "safe_where_fix", "named_like", "squared", "exponent", "limit"]


_LOGS = {"log", "log2", "log10", "log1p"}
#: Ops infinite at some inputs by definition: (the test on the input, where).
_POLES = {
    "atanh": (lambda v: abs(v) == 1, "at ±1"), "lgamma": (lambda v: v <= 0 and float(v).is_integer(), "at 0 and the negative integers"),
    "digamma": (lambda v: v <= 0 and float(v).is_integer(), "at 0 and the negative integers"),
    "polygamma": (lambda v: v <= 0 and float(v).is_integer(), "at 0 and the negative integers"),
    "logit": (lambda v: v in (0, 1), "at 0 and 1"), "erfinv": (lambda v: abs(v) == 1, "at ±1"),
}


#: What an eps must be in float16 (its smallest subnormal is 6e-8: an eps below half of it rounds to 0).
_HALF_EPS = (" The input is float16, where an eps below about 3e-8 (1e-8 among them) rounds to 0, so x + eps and "
             "x.clamp(min=eps) are still 0 there: use an eps float16 holds (1e-4; torch.finfo(torch.float16).tiny is 6.1e-5), "
             "or add it in float32: torch.log(x.float() + 1e-8) (x is already 0 in float16, so x.float() alone is still 0).")


_ARC = {"arccos": "acos", "arcsin": "asin", "arccosh": "acosh", "arctanh": "atanh"}


def forward_cause(g: Graph, links: Links, op: OpNode, op_id: str, at: int | None, out: TensorNode, bad_value: Any) -> Cause:
    """Why the forward op ``op`` made the first non-finite value, at flat position ``at`` of
    its output ``out`` (every input it was given was finite)."""
    fwd = op.forward or op.name or op_id
    name = base(fwd)
    inputs = links.forward_inputs(op_id)
    vals = [value_read(g, t, at, out.shape) if positional(fwd) else None for t in inputs]  # (past a head: the live value)
    nums = [v for v in vals if type(v) in (float, int)]
    inf = type(bad_value) is float and bad_value in (float("inf"), float("-inf"))
    if name in _LOGS:
        if not nums and bad_value == float("-inf") and name in ("log", "log2", "log10") and len(inputs) == 1:
            nums = [0.0]  # (not read there, past the head: but of a finite input, log is -inf only at 0)
        x = links.label(inputs[0]) if inputs else "x"
        x = x if _named_like(x) else "x"
        if links.made_by(inputs[0] if inputs else None) in ("softmax", "_softmax") and bad_value == float("-inf"):
            return Cause("log_of_softmax", f"softmax underflowed to exactly 0 there (its logit was far below the largest one), "
                         f"and {name}(0) = -inf.", "Use torch.log_softmax(x, dim) (F.log_softmax) instead of "
                         "torch.log(torch.softmax(x, dim)): the same values without the underflow; for a loss, "
                         "F.cross_entropy takes the logits directly.")
        src = links.made_by(inputs[0] if inputs else None)
        if src == "sigmoid" and bad_value == float("-inf"):
            return Cause("log_of_zero", f"The sigmoid saturated to exactly 0 there ({_saturated(g.node(inputs[0]).dtype, high=False)}), "
                         "and log(0) = -inf.",
                         "Use F.logsigmoid(z) instead of torch.log(torch.sigmoid(z)) (and F.logsigmoid(-z) for "
                         "log(1 - sigmoid(z))); for a loss, F.binary_cross_entropy_with_logits takes the logits directly.")
        if src in ("prod", "cumprod") and bad_value == float("-inf"):
            factors = links.forward_inputs(links.maker[inputs[0]])
            dtype, n = g.node(inputs[0]).dtype, factors_per_product(g, factors[0] if factors else None, inputs[0])
            many = f" ({n} factors in each product here)" if n else ""
            sum_logs = (f"sum the logs instead of taking the log of the product: torch.log(x).sum(dim) (x.log().sum(-1)), "
                        f"which stays finite; a clamp before the log would give a wrong value and no gradient")
            if all_positive(g, factors):
                return Cause("log_of_zero", f"The product it takes the {name} of is 0 there, though every factor is above 0: "
                             f"a product of many factors below 1 underflows to exactly 0 in {dtype}{many}, and {name}(0) = "
                             f"-inf.", sum_logs[0].upper() + sum_logs[1:] + ".", ("underflow",))
            return Cause("log_of_zero", f"The product it takes the {name} of is 0 there, and {name}(0) = -inf: either a factor "
                         f"is 0, or the factors are all above 0 and their product underflowed to 0 in {dtype}{many} (the "
                         f"records do not say which).", f"If the factors are positive, {sum_logs}; if one is 0, find why.")
        if src == "rsub" and bad_value == float("-inf"):
            inner = links.forward_inputs(links.maker[inputs[0]])
            if inner and links.made_by(inner[-1]) == "sigmoid":
                return Cause("log_of_zero", f"The sigmoid saturated to exactly 1 there ({_saturated(g.node(inner[-1]).dtype)}), "
                             "so 1 - sigmoid is 0 and log(0) = -inf.", "Use F.logsigmoid(-z) instead of torch.log(1 - torch.sigmoid(z)); for "
                             "a loss, F.binary_cross_entropy_with_logits takes the logits directly.")
        if name == "log1p" and nums and nums[0] == -1:
            src1 = links.made_by(inputs[0] if inputs else None)
            inner = links.forward_inputs(links.maker[inputs[0]]) if src1 == "neg" and inputs else []
            if inner and links.made_by(inner[0]) == "sigmoid":
                return Cause("log_of_zero", "The sigmoid saturated to exactly 1 there, so log1p(-sigmoid) = log(0) = -inf.",
                             "Use F.logsigmoid(-z) instead of torch.log1p(-torch.sigmoid(z)); for a loss, "
                             "F.binary_cross_entropy_with_logits takes the logits directly.")
            return Cause("log_of_zero", "The log1p of -1 is -inf (log of 1 + x at x = -1).",
                         f"Keep 1 + {x} away from 0: torch.log1p({x}.clamp(min=-1 + eps)).")
        if nums and nums[0] == 0 and src == "exp" and inputs:
            inner = links.forward_inputs(links.maker[inputs[0]])
            y = links.label(inner[0]) if inner else "x"
            y = y if _named_like(y) else "x"
            return Cause("log_of_zero", f"{x} = exp({y}) underflowed to exactly 0 ({y} is below about "
                         f"{format_number(_exp_floor(out.dtype), 3)}, where exp is 0 in {out.dtype}), and the {name} of 0 "
                         f"is -inf.", f"Use {y} itself: log(exp({y})) is {y} (write the loss with {y}, e.g. "
                         f"0.5 * ({y} + (t - mu) ** 2 * torch.exp(-{y})), or F.gaussian_nll_loss); keep {y} in a range "
                         f"(clamp it) where exp({y}) is needed.", ("underflow",))
        if nums and nums[0] == 0 and src in ("sum", "mean") and inputs:
            inner = links.forward_inputs(links.maker[inputs[0]])
            masked = False
            if inner and links.made_by(inner[0]) in ("mul", "masked_fill", "where") and links.maker.get(inner[0]):
                # (exp(x) * mask, exp(x).masked_fill(...): the terms are exps, some masked to 0)
                terms = [i for i in links.forward_inputs(links.maker[inner[0]]) if links.made_by(i) == "exp"]
                if terms:
                    inner, masked = terms, True
            if inner and links.made_by(inner[0]) == "exp":
                return Cause("log_of_zero", f"Every exp in that {src} underflowed to exactly 0"
                             f"{' or was masked out' if masked else ''} ({'the inputs of the others' if masked else 'their inputs'}"
                             f" are all far below 0: exp is 0 in {out.dtype} below about "
                             f"{format_number(_exp_floor(out.dtype), 3)}), so the "
                             f"{src} is 0 and the {name} of 0 is -inf.",
                             "Use torch.logsumexp(x, dim) for log(sum(exp(x))): it subtracts the maximum before exp, so "
                             "nothing underflows (a clamp before the log would hide the error and stop the gradient)"
                             + ("; for masked terms, set the masked logits to -inf (masked_fill) and take logsumexp of that"
                                if masked else "") + ". Logits this far below 0 often mean unscaled inputs (features not "
                             "normalised, a small temperature): look at their scale too.",
                             ("underflow",))
        if nums and nums[0] == 0 and src in ("ndtr", "special_ndtr", "rsub"):
            inner = links.forward_inputs(links.maker[inputs[0]]) if src == "rsub" else [inputs[0]]
            if src != "rsub" or (inner and links.made_by(inner[-1]) in ("ndtr", "special_ndtr")):
                upper = src == "rsub"
                return Cause("log_of_zero", f"The normal CDF{' (1 - ndtr(z))' if upper else ' ndtr(z)'} underflowed to "
                             f"exactly 0 there (z far {'above' if upper else 'below'} 0), and the {name} of 0 is -inf.",
                             "Use torch.special.log_ndtr(z) for log(ndtr(z)) (and log_ndtr(-z) for log(1 - ndtr(z))): it "
                             "stays finite where ndtr rounds to 0.", ("underflow",))
        kl = _kl_log_target(g, links, out.id) if nums and nums[0] == 0 else None
        if kl is not None:
            return Cause("log_of_zero", f"The {name} of 0 is -inf, and kl_div was given it as a log-target "
                         f"(log_target=True): it computes exp(t) · (t − input), which is 0 · (−inf) = NaN where the target "
                         f"probability is 0.",
                         f"Pass the probabilities themselves with log_target=False (kl_div gives 0 where the target is 0), "
                         f"or make the log-target with F.log_softmax, which is finite, instead of {x}.log().")
        if nums and nums[0] == 0 and name != "log1p":
            return Cause("log_of_zero", f"The {name} of 0 is -inf.",
                         f"Keep the input away from 0: torch.{name}({x}.clamp(min=eps)) or torch.{name}({x} + eps)."
                         + (_HALF_EPS if inputs and g.node(inputs[0]).dtype == "float16" else ""))
        if nums and nums[0] < (-1 if name == "log1p" else 0):
            return Cause("invalid_domain", f"The {name} of a negative number ({format_number(nums[0], 6)}) is NaN.",
                         f"Find out why {x} is negative there; clamp it first, or take the log of its absolute value "
                         f"if that is what you mean.")
    if name in _DIVS or name == "reciprocal" or name == "rsqrt":
        num, den, den_id = _division(g, op_id, name, inputs, vals)
        if den == 0:
            what = "0 / 0 is NaN" if kind(bad_value) == "NaN" else "dividing by 0 gives an infinity"
            b = links.label(den_id) if den_id else "b"
            shown = f" ({b})" if den_id and not _named_like(b) else ""
            b = b if _named_like(b) else "b"
            made = links.made_by(den_id)
            if made in ("vdot", "dot") and inputs and ".parametrizations.weight.original" in links.label(inputs[0]):
                return Cause("division_by_zero", f"spectral_norm divides the weight by its largest singular value, "
                             f"estimated as σ = u · (W v), and the weight ({links.label(inputs[0])}) is all zeros (or maps v to 0), so σ = 0 "
                             f"and {what}.",
                             "Do not zero-initialise a layer under spectral_norm (σ of a zero matrix is 0): initialise it "
                             "with non-zero values (the default init), and zero only a layer without the parametrization.")
            inside = next(iter(links.forward_inputs(links.maker[den_id])), None) if made == "sqrt" else None
            if made == "sqrt" and _variance_like(g, links, inside):
                centred = _centred(g, links, inside)  # (a variance: x minus its mean, squared; else a mean of squares, an RMS)
                return Cause("division_by_zero", f"The denominator{shown} is 0 there: the square root of "
                             + ("a variance, and a variance is 0 where every value it summarises is the same (a constant "
                                "row or column)" if centred else "a mean of squares (an RMS), which is 0 where every value "
                                "it summarises is 0") + f", so {what}.", "Add eps inside the root: torch.sqrt(s + eps), with s "
                             "what it takes the root of (what LayerNorm and BatchNorm do with the variance), or torch.rsqrt(s + eps).")
            if made in ("std", "var", "std_mean", "var_mean"):
                why = (f"The denominator{shown} is 0 there: {made} is 0 where every value it summarises is the same (a "
                       f"constant column or row, or a single value), and {what}.")
                src = links.label(next(iter(links.forward_inputs(links.maker[den_id])), None))
                src = src if _named_like(src) else "x"
                fix = (f"Add eps to the denominator: divide by ({src}.{made.split('_')[0]}(dim) + 1e-8) (what LayerNorm and "
                       f"BatchNorm do); or drop the features that never vary.")
                return Cause("division_by_zero", why, fix)
            under = underflowed_exp(g, links, den_id)
            if under is not None:
                eo = g.node(under)
                return Cause("division_by_zero", f"The denominator{shown} is 0 there, and {what}: it is a sum or product of "
                             f"exp values that underflowed to exactly 0 (exp{_line(eo)}; exp(x) is 0 in "
                             f"{g.node(den_id).dtype} below about {format_number(_exp_floor(g.node(den_id).dtype), 3)}).",
                             "Compute it in log space (torch.logsumexp instead of a sum of exp, as a log-domain Sinkhorn "
                             "does), or keep the inputs of exp in range (a larger temperature or regularisation, the "
                             "costs divided by their maximum).", ("underflow",))
            lost = _lost_eps(g, links, den_id)
            if lost is not None:
                return Cause("division_by_zero", f"The denominator{shown} is 0 there, and {what}: {lost}",
                             f"Use an eps {g.node(den_id).dtype} can hold (1e-5 or larger in float16), or compute this part in "
                             f"float32 (.float() before it, and back with .to(dtype) after).", ("eps_too_small",))
            root = _root_through_views(g, links, den_id)
            if root is not None:  # (a length written as sqrt(sum(x * x)): eps after the root leaves its gradient NaN)
                ro = g.node(root)
                return Cause("division_by_zero", f"The denominator{shown} is 0 there, and {what}: it is a square root"
                             f"{_line(ro)}, 0 where what it takes the root of is 0 (the length of a zero vector).",
                             f"Divide by ({b} + eps), and take the root safely too: torch.linalg.vector_norm(x, dim=...) "
                             f"for a length (its gradient at a zero vector is 0), or torch.sqrt(s + eps) with the eps inside: "
                             f"sqrt's derivative at 0 is infinite, so an eps added only after the root leaves the gradient NaN.")
            of = (f": {made} is 0 for a vector of zeros" if made in ("norm", "linalg_vector_norm", "vector_norm") else "")
            if name == "rsqrt":
                fix = f"Keep the input of rsqrt away from 0: torch.rsqrt({b if den_id and _named_like(b) else 'x'} + eps)."
            elif name == "reciprocal":
                fix = f"Keep the input away from 0: 1 / ({b if den_id and _named_like(b) else 'x'} + eps)."
            elif den_id is None:  # (the divisor is a Python number the backward node saved: 0)
                return Cause("division_by_zero", f"The denominator is the number 0 (a plain Python number in the code, not a "
                             f"tensor: a count, a size minus 1, a number of steps), and {what}.",
                             "Make sure that number is never 0: use max(n, 1), or check what it is computed from (a batch "
                             "size smaller than expected, a size of 1); adding eps to it would turn the 0 into a huge "
                             "factor instead of an error.")
            elif den_id and _named_like(links.label(den_id)):
                fix = (f"Keep the denominator away from 0: divide by ({b} + eps) or {b}.clamp(min=eps); where 0 / 0 should "
                       f"mean 0, divide by torch.where({b} == 0, torch.ones_like({b}), {b}) and mask the result.")
            else:  # (an unnamed denominator: no placeholder a reader could take for one of their variables)
                fix = ("Keep the denominator away from 0: add eps to it, or clamp it (.clamp(min=eps)) before dividing; "
                       "where 0 / 0 should mean 0, divide by 1 where it is 0 (torch.where) and mask the result.")
            dn = g.node(den_id) if den_id else None
            if dn is not None and den_id not in links.maker and not dn.requires_grad and not dn.made_by:
                # (an input of the block, not computed in it: the 0 was in it when the trace first saw it)
                return Cause("division_by_zero", f"The denominator{shown} is 0 there{of}, and {what}: {b} is an input of the "
                             f"block (data, or a tensor made before it), with that 0 in it before the block began.",
                             f"If 0 marks a missing value in the data ({b} read from a sensor or a file), fill those values or "
                             f"leave their positions out of the loss: an eps there would make them huge but finite targets. "
                             f"Otherwise: {fix[0].lower()}{fix[1:]}")
            return Cause("division_by_zero", f"The denominator{shown} is 0 there{of}, and {what}.", fix)
    name = _ARC.get(name, name)  # (torch.arccos is acos: the same function, the same domain)
    if name in ("sqrt", "acos", "asin", "acosh", "atanh") and nums and not inf:
        lo, hi = {"sqrt": (0, None), "acos": (-1, 1), "asin": (-1, 1), "acosh": (1, None), "atanh": (-1, 1)}[name]
        v = nums[0]
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            span = f">= {lo}" if hi is None else f"between {lo} and {hi}"
            shown_v = format_number(v, 6)
            if shown_v in (str(lo), str(hi), format_number(float(lo), 6), format_number(float(hi or 0), 6)):
                shown_v = f"{v!r} (just past {lo if v < lo else hi}: a rounding error of the values it was computed from)"
            # (clamped to the edge itself, the derivative is still infinite there: sqrt at 0, acosh at 1, acos at ±1)
            inside = {"sqrt": "x.clamp(min=eps)", "acosh": "x.clamp(min=1 + eps)"}.get(name, "x.clamp(-1 + eps, 1 - eps)")
            return Cause("invalid_domain", f"The input {shown_v} is outside {name}'s domain ({span}): the result "
                         f"is NaN.", f"Find out why the input leaves the domain; if values just outside it are rounding "
                         f"errors, clamp it strictly inside first ({name}({inside})): clamped to the edge itself, the "
                         f"derivative of {name} is still infinite there.")
    if name == "pow" and len(nums) >= 1 and nums[0] < 0 and not inf:
        return Cause("invalid_domain", "A negative base to a fractional power is NaN.",
                     "If a negative base is meant to have a real root (a cube root, x ** (1 / 3)), take the root of its "
                     "magnitude and keep the sign: torch.sign(x) * x.abs() ** e, with e the fractional power (1 / 3 for "
                     "a cube root); else keep the base >= 0 (clamp it) before the power.")
    if name == "pow" and inf and len(nums) >= 2 and nums[1] < 0 and 0 < abs(nums[0]) < 1:
        x = links.label(inputs[0]) if inputs else "x"
        return Cause("overflow", f"A base this close to 0 ({format_number(nums[0], 6)}) raised to a negative power "
                     f"({format_number(nums[1], 6)}) is larger than {out.dtype} can hold ({_limit(out.dtype)}).",
                     f"Keep the base away from 0 ({x if _named_like(x) else 'x'}.clamp(min=eps) with a larger eps) and the "
                     f"exponent from going negative: a learnable exponent can be clamped after each step, or made "
                     f"positive by construction (p = 1 + F.softplus(q)).")
    if name == "pow" and nums and nums[0] == 0 and inf:
        return Cause("division_by_zero", "0 to a negative power is an infinity (a division by 0).",
                     "Keep the base away from 0: (x + eps) ** p or x.clamp(min=eps) ** p.")
    if inf and name in FILLS:
        return Cause("masked_infinity", f"{fwd} wrote {kind(bad_value)} there: the value the program gave it (a mask), not a "
                     f"result of arithmetic, and every later non-finite value was computed from it.",
                     "Keep the masked positions out of what reaches the loss: softmax turns -inf into a weight of 0, but a "
                     "sum, a mean or a product over masked values stays infinite; select the valid positions "
                     "(torch.where(mask, 0, x), x[~mask]) before such an op, or mask with a large finite number "
                     "(torch.finfo(x.dtype).min) instead of -inf.")
    if name in FILLS and not any(bad(g.node(t).value) for t in inputs):
        return Cause("nonfinite_forward", f"{fwd} wrote {kind(bad_value)} there: a value the program gave it (a number in the "
                     f"code, or a variable that held it), not a result of arithmetic on the tensors.",
                     "Write a finite value there (a sentinel such as 0, or torch.finfo(x.dtype).min for a mask), or drop "
                     "the positions that hold it before they reach the loss.")
    if name in ("xlogy", "special_xlogy") and len(nums) >= 2 and nums[1] == 0 and nums[0] != 0:
        y = links.label(inputs[1]) if len(inputs) > 1 else "y"
        return Cause("log_of_zero", f"xlogy(x, y) is x · log(y), and y = 0 there while x = {format_number(nums[0], 6)}: "
                     f"log(0) = -inf. A Beta or Dirichlet log_prob computes xlogy(a - 1, value) and xlogy(b - 1, 1 - value): "
                     f"a value on the boundary of the support (exactly 0 or 1) makes it -inf.",
                     f"Keep the value inside the support: {y if _named_like(y) else 'value'}.clamp(eps, 1 - eps) (e.g. "
                     f"actions clamped to [1e-6, 1 - 1e-6] before log_prob), or scale the actions into the open interval.")
    if name == "poisson_nll_loss" and kind(bad_value) == "NaN" and inputs:
        # (with log_input=True it computes exp(input) - target * input: never NaN from finite inputs)
        low = _lowest(g, inputs[0])
        if low is None or low < 0:
            seen = f" (as low as {format_number(low, 4)})" if low is not None else " at some position"
            return Cause("invalid_domain", f"From finite inputs poisson_nll_loss gives NaN only with log_input=False: it then "
                         f"computes input − target · log(input + eps), and a rate it was given is negative{seen}: the "
                         f"log of a negative number is NaN.",
                         "Keep the rate positive: predict log-rates and pass log_input=True (the default), or map the "
                         "output through F.softplus or torch.exp before the loss; a clamp(min=eps) hides the error.")
    if name in ("std", "var", "std_mean", "var_mean") and kind(bad_value) == "NaN" and inputs:
        n_in, n_out = g.node(inputs[0]).value, out.value
        if n_in is not None and n_out is not None and n_out.numel and n_in.numel == n_out.numel:
            return Cause("std_of_one", f"Each {name} here was over a single element: with the default correction (N - 1, "
                         f"Bessel's) it divides by 1 - 1 = 0, and 0 / 0 is NaN.",
                         f"Reduce over at least two elements (a batch of one has no spread to estimate), or ask for the "
                         f"population value: x.{name.split('_')[0]}(dim, correction=0) (unbiased=False).")
    exact = exact_cause(g, links, op_id, name, inputs, out, bad_value)
    if exact is not None:
        return exact
    pole = _POLES.get(name)
    if pole is not None and inputs and type(vals[0] if vals else None) in (float, int) and pole[0](vals[0]):
        return Cause("pole", f"{name} is infinite at {format_number(vals[0], 6)} by definition ({pole[1]}): not an overflow.",
                     f"Keep the input of {name} away from {pole[1][3:]}: clamp it first, or find out why it "
                     f"reaches that value (a saturated sigmoid or tanh, a softplus that underflowed to 0).")
    zero_den = len(vals) >= 3 and vals[2] == 0
    if name == "addcdiv" and (zero_den or (kind(bad_value) == "NaN" and len(vals) >= 3)):
        # (x + value * t1 / t2 of finite numbers is NaN only where t1 / t2 is 0 / 0: the denominator was 0 there)
        tiny = out.dtype in _HALF
        eps = (f" In {out.dtype}, the default eps (1e-8 for Adam and RMSprop, 1e-10 for Adagrad) rounds to 0: "
               f"{out.dtype}'s smallest number is about "
               f"{format_number(float(torch.finfo(getattr(torch, out.dtype)).smallest_normal * torch.finfo(getattr(torch, out.dtype)).eps), 2)}."
               if tiny else "")
        head = (f"{fwd} divides by its third input, which is 0 there: "
                f"{'0 / 0 is NaN' if kind(bad_value) == 'NaN' else 'dividing by 0 gives an infinity'}" if zero_den else
                f"{fwd} computes x + value × t1 / t2, and from finite inputs it makes NaN only where t1 / t2 is 0 / 0: its "
                f"third input was 0 there")
        return Cause("division_by_zero", f"{head} (an Adam or "
                     f"RMSprop update divides by sqrt(v) + eps, and v is 0 where every gradient so far was 0"
                     f"{f', or so small that its square underflowed to 0 in {out.dtype}' if tiny else ''}).{eps}",
                     "Keep the parameters and the optimizer's state in float32 (train with autocast or a float32 master "
                     "copy, not a model made .half()), or give the optimizer an eps the dtype holds (eps=1e-4 in float16)."
                     if tiny else "Keep eps > 0 in the optimizer (its default), or keep the denominator away from 0.")
    if inf and (arithmetic(name) or name in _CASTS):
        return _overflow(g, links, op_id, name, inputs, nums, out)
    if inf and name in _DIVS and nums and len(nums) == len(vals) and all(v != 0 for v in nums[1:]):
        return _overflow(g, links, op_id, name, inputs, nums, out)  # (a finite quotient of finite numbers, too large)
    shown = ", ".join(f"{links.label(t)} = {format_number(v, 6)}" for t, v in zip(inputs, vals) if type(v) in (float, int))
    at_what = f" (there, {shown})" if shown else ""
    huge = _near_limit(g, inputs, out.dtype)
    if op.forward is None or not inputs:
        # (a backward node made it, for a gradient computed with create_graph=True, or an op whose inputs the trace
        # did not record: what went in is not known, so "from finite inputs" would be a guess)
        return Cause("nonfinite_forward", f"{fwd} made {kind(bad_value)} there, but the trace recorded none of its inputs "
                     f"(a gradient computed with create_graph=True is made by backward nodes, whose incoming gradients "
                     f"are not recorded as inputs), so graphlens cannot tell whether {fwd} made it or passed it on.",
                     f"Ask about the tensors that gradient was computed from (explain each one), or run the forward under "
                     f"torch.autograd.set_detect_anomaly(True), which names the backward node that first returned NaN.")
    if inf and huge is not None:
        return Cause("nonfinite_forward", f"{fwd} returned {kind(bad_value)} from finite inputs, some as large as "
                     f"{format_number(huge, 3)}, near {out.dtype}'s range: it may have overflowed inside, or be infinite "
                     f"where it is singular (graphlens has no rule for {fwd}).",
                     f"Look at why its inputs are this large{at_what} (values that grew step after step, weights that "
                     f"diverged), and at the values where {fwd} is undefined.")
    if inf:
        return Cause("nonfinite_forward", f"{fwd} returned {kind(bad_value)} from finite inputs: not an overflow of a sum or "
                     f"a product (graphlens has no rule for {fwd}); an op that computes a log, a quotient or an inverse "
                     f"inside is infinite exactly where that part is singular.",
                     f"Look at the inputs of {fwd} at that position{at_what} for the value where it is undefined (a log of "
                     f"0, a division by 0 inside it), and keep the input away from it.")
    return Cause("nonfinite_forward", f"{fwd} made NaN from finite inputs (graphlens has no rule for {fwd}): an op that "
                 f"divides or takes a log inside gives NaN where that part is 0 / 0, inf − inf or a log of a negative number.",
                 f"Look at the inputs of {fwd} at that position{at_what} for the value where it is undefined, and keep the "
                 f"input away from it.")


def _lowest(g: Graph, tid: str) -> float | None:
    """The smallest value of tensor ``tid``: from its record (minimum or head), else from the
    live tensor while it is still the recorded version; None when not known."""
    v = g.node(tid).value
    if v is not None and type(v.min) is float:
        return v.min
    nums = [x for x in (v.head or ()) if type(x) is float] if v is not None else []
    if v is not None and v.head is not None and len(v.head) >= v.numel and nums:
        return min(nums)
    t = live_as_recorded(g, tid)
    try:
        return float(t.detach().min()) if t is not None and t.is_floating_point() and t.numel() else None
    except Exception:  # noqa: BLE001 - a read of live data is a bonus
        return None


def _kl_log_target(g: Graph, links: Links, tid: str) -> str | None:
    """The kl_div op that takes ``tid`` (a log with -inf) as its target, when it ran with
    ``log_target=True`` (its result is NaN: with a probability target, 0 · log 0 is 0)."""
    frontier = [tid]
    for _ in range(3):
        nxt = []
        for t in frontier:
            for c in links.consumers.get(t, ()):
                cname = base(g.node(c).forward)
                if cname == "kl_div":
                    ins = links.forward_inputs(c)
                    outs = list(links.made.get(c, {}).values())
                    if len(ins) >= 2 and ins[1] == t and outs and bad(g.node(outs[0]).value):
                        x = g.node(outs[0]).value.nonfinite_value
                        return c if type(x) is float and x != x else None
                elif cname in ("view", "reshape", "to", "float", "detach", "clone", "contiguous"):
                    nxt += list(links.made.get(c, {}).values())
        frontier = nxt
    return None


def _near_limit(g: Graph, inputs: list[str], dtype: str) -> float | None:
    """The largest input magnitude when it is within the square root of ``dtype``'s range (where a
    product or a sum of squares can overflow), else ``None``."""
    try:
        top = float(torch.finfo(getattr(torch, dtype)).max)
    except (AttributeError, TypeError):
        return None
    sizes = [largest(g, t) for t in inputs]
    big = max((x for x in sizes if x is not None), default=None)
    return big if big is not None and big * big > top else None


def masked_softmax_cause(g: Graph, links: Links, op_id: str, at: int | None, out: TensorNode, fill: TensorNode) -> Cause:
    """Why softmax (``op_id``; or attention recorded as one call) made NaN at flat position ``at``
    of ``out`` from an input that held only the infinities a mask wrote (``fill``, made by a fill
    op): a fully masked row, checked on the live input where it is still the tensor recorded."""
    name = base(g.node(op_id).forward)
    maker = links.maker.get(fill.id)
    filler = g.node(maker) if maker is not None else None
    line = filler.line if filler is not None else fill.line
    where = f" at line {line}" if line else ""
    written = base(filler.forward) if filler is not None else base(fill.made_by)
    v = fill.value
    if v is not None and v.nonfinite_value == float("inf") and not any(x == float("-inf") for x in (v.head or ())):
        # (the mask wrote +inf: -float('-inf') is +inf; no row of it is "every element -inf")
        return Cause("masked_softmax", f"The mask {written}{where} wrote +inf, not -inf (-float('-inf') is +inf): a softmax "
                     f"over a row that holds +inf computes exp(inf - inf) = NaN, and the masked positions get the "
                     f"highest weight instead of none.",
                     "Fill the masked positions with float('-inf') (or torch.finfo(x.dtype).min), the lowest value: check "
                     "the sign of the fill value.")
    if name in ATTENTIONS:
        rows = _masked_rows(g, fill.id, -1)
        why = (f"Attention takes a softmax over the keys of each query, and the softmax of a row whose every element is "
               f"-inf is 0 / 0 = NaN: the mask ({written}{where}, from key_padding_mask or attn_mask) hides "
               f"every key of a query.")
        if rows:
            shown = ", ".join(rows[:4]) + (", ..." if len(rows) > 4 else "")
            why += f" Here every key is masked in {shown} of the mask."
        fix = ("Leave at least one key visible to every query (drop fully padded sequences from the batch), or call the "
               "module with need_weights=False (its fused path gives 0 for such a query); F.scaled_dot_product_attention "
               "gives 0 there too.")
        tri = _diagonal_masked(g, links, fill.id)
        if tri is not None:
            why += (f" The mask is {tri}(...) of -inf with diagonal=0 (the default) or below: it hides the diagonal too, each query's "
                    f"own position, so the first query sees no key at all.")
            fix = ("Mask only the future: torch.triu(torch.full((T, T), float('-inf')), diagonal=1), as "
                   "nn.Transformer.generate_square_subsequent_mask(T) builds it (or pass is_causal=True); "
                   "need_weights=False would only hide the NaN and keep the wrong mask.")
        return Cause("masked_softmax", why, fix)
    src = links.forward_inputs(op_id)[:1]
    dim = _saved_int(g, op_id, "dim")
    rows = _masked_rows(g, src[0], dim) if src and dim is not None else None
    why = (f"The softmax of a row whose every element is -inf is 0 / 0 = NaN (exp(-inf) is 0 above and below the "
           f"fraction bar); the -inf came from the mask {written} wrote on purpose{where}.")
    if rows:
        shown = ", ".join(rows[:4]) + (", ..." if len(rows) > 4 else "")
        why += f" Here every position is masked in row{'s' if len(rows) > 1 else ''} {shown} of {links.label(src[0])}."
    else:
        why += (" (A row without NaN gives NaN only when its largest value is infinite: every position masked, all -inf; "
                "or one +inf.)")
    fix = ("Leave at least one unmasked position in every row (drop or skip fully padded sequences, or let a query always "
           "see itself); or mask with a large finite number, torch.finfo(x.dtype).min, instead of -inf and zero the "
           "rows that have no valid position after the softmax. F.scaled_dot_product_attention gives 0 for such rows "
           "(nn.MultiheadAttention does in training; its fast path in eval mode still gives NaN).")
    return Cause("masked_softmax", why, fix)


def _diagonal_masked(g: Graph, links: Links, fill: str) -> str | None:
    """``"triu"`` when the -inf fill ``fill`` was cut to a triangle that still
    masks the diagonal (its first element, [0, 0], is -inf: diagonal=0 kept it)."""
    for c in links.consumers.get(fill, ()):
        name = base(g.node(c).forward)
        if name == "triu":
            outs = list(links.made.get(c, {}).values())
            v = g.node(outs[0]).value if outs else None
            if v is not None and v.head and len(v.shape) >= 2 and v.head[0] == float("-inf"):
                return name
    return None


def _saved_int(g: Graph, op_id: str, name: str) -> int | None:
    """An integer op ``op_id``'s backward node saved as ``name`` (a negative one is saved as an
    unsigned 64-bit number: turned back)."""
    v = next((e.value for e in getattr(g.node(op_id), "saved", ()) or () if e.name == name and type(e.value) is int), None)
    return v - 2 ** 64 if v is not None and v >= 2 ** 63 else v


def _masked_rows(g: Graph, tid: str, dim: int) -> list[str] | None:
    """The rows along ``dim`` of the live tensor ``tid`` that are -inf at every position, where
    that tensor is still the one the trace recorded (same version); else None."""
    t = live_as_recorded(g, tid)
    try:
        if t is None or not t.is_floating_point() or t.dim() == 0:
            return None
        with torch.no_grad(), torch._C.DisableTorchFunction():
            full = torch.isneginf(t.detach()).all(dim=dim)
            where = full.nonzero().tolist()
    except Exception:  # noqa: BLE001 - a check on live data is a bonus
        return None
    names = []
    for idx in where:
        idx = list(idx)
        idx.insert(dim % t.dim(), ":")
        names.append("[" + ", ".join(map(str, idx)) + "]")
    return names or None


def _lost_eps(g: Graph, links: Links, den_id: str | None) -> str | None:
    """Words saying that the denominator ``den_id``, 0 there, was made by adding a number (an eps)
    to a tensor in float16 or bfloat16, where so small a number rounds away (None otherwise)."""
    if den_id is None or links.made_by(den_id) not in ("add", "radd") or g.node(den_id).dtype not in _HALF:
        return None
    op = links.maker[den_id]
    if len(links.forward_inputs(op)) != 1:  # (x + eps: one tensor and a number)
        return None
    dtype = g.node(den_id).dtype
    tiny = float(torch.finfo(getattr(torch, dtype)).smallest_normal * torch.finfo(getattr(torch, dtype)).eps)
    return (f"it was made by adding a number (an eps) to a tensor that is 0 there, and in {dtype} a number "
            f"below about {format_number(tiny, 2)} rounds to 0, so the eps is lost (1e-12 or 1e-8 are too small).")


def _line(o: OpNode) -> str:
    return f" at line {o.line} ({o.code})" if o.line and o.code else ""


def _division(g: Graph, op_id: str, name: str, inputs: list[str], vals: list) -> tuple[Any, Any, str | None]:
    """``(numerator, denominator, the denominator's tensor id)`` of a division at one position
    (None where not known): ``1 / x`` and ``2 / x`` have the tensor as denominator; ``x / 2.0``
    has a number the backward node saved."""
    if name in ("reciprocal", "rsqrt"):
        return 1, (vals[0] if vals else None), (inputs[0] if inputs else None)
    if name in ("rdiv", "rtruediv"):
        return None, (vals[0] if vals else None), (inputs[0] if inputs else None)
    if len(inputs) >= 2:
        return vals[0], vals[1], inputs[1]
    node = g.node(op_id)
    other = None
    for e in getattr(node, "saved", ()) or ():
        if e.name != "other":
            continue
        if type(e.value) in (int, float):
            other = e.value
        else:  # (a Python number the op wrapped as a 0-d tensor: its value is in the summary's head)
            head = getattr(getattr(e, "summary", None), "head", None)
            if head and len(head) == 1 and type(head[0]) in (int, float) and tuple(getattr(e.summary, "shape", (1,))) == ():
                other = head[0]
    return (vals[0] if vals else None), other, None


def _variance_like(g: Graph, links: Links, tid: str | None) -> bool:
    """Whether ``tid`` is a variance: ``x.var()``, or the mean of a square (``((x - mu) ** 2).mean()``)."""
    made = links.made_by(tid)
    if made in ("var", "var_mean"):
        return True
    if made == "mean" and tid is not None:
        ins = links.forward_inputs(links.maker[tid])
        return bool(ins) and _squared(g, links, ins[0]) is not None
    return False


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


#: (for :mod:`graphlens.explain.nonfinite_derivatives`)
squared, exponent = _squared, _exponent
_named_like, _limit = named_like, limit


#: Ops that keep the values they are given (a new shape, a copy): a denominator made by sqrt through them is that sqrt's.
_KEEPS_VALUES = frozenset({"unsqueeze", "view", "reshape", "expand", "expand_as", "squeeze", "contiguous", "clone", "flatten"})


def _root_through_views(g: Graph, links: Links, tid: str | None) -> str | None:
    """The ``sqrt`` op that made ``tid``, directly or through ops that keep its values (None otherwise)."""
    for _ in range(4):
        op = links.maker.get(tid) if tid else None
        if op is None:
            return None
        name = base(g.node(op).forward)
        if name == "sqrt":
            return op
        ins = links.forward_inputs(op)
        if name not in _KEEPS_VALUES or not ins:
            return None
        tid = ins[0]
    return None


def _centred(g: Graph, links: Links, tid: str | None) -> bool:
    """Whether the variance-like ``tid`` is centred: ``var()``, or the mean of the square of a difference (``x - mu``)."""
    if links.made_by(tid) in ("var", "var_mean"):
        return True
    ins = links.forward_inputs(links.maker[tid]) if tid is not None and tid in links.maker else []
    v = _squared(g, links, ins[0]) if ins else None
    return v is not None and links.made_by(v) in ("sub", "rsub")
