"""Ops that make an exact NaN or infinity from finite inputs (not an overflow): losses, linear algebra, empty reductions, normalisations.

:func:`graphlens.explain.nonfinite_causes.forward_cause` asks :func:`exact_cause` before it calls a
non-finite result an overflow: these ops compute a log, a quotient or an inverse inside, and give NaN
or an infinity exactly at inputs of ordinary size (a singular matrix, an empty mean, a constant row
normalised with eps = 0, a CTC target that no alignment fits).  Each rule is recognised from the
recorded op and the values the trace read, and says what torch computed there.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..graph import Graph, TensorNode
from ..values import format_number
from .nonfinite_links import Cause, Links, bad, base, live_as_recorded, named_like, read_live, trained

__all__ = ["all_positive", "factors_per_product", "masked_product", "exact_cause", "arithmetic", "RECURRENT", "largest", "saturation_edge", "exp_fix", "underflowed_exp"]

#: Ops whose non-finite result from finite inputs can only be an overflow: sums, products, powers,
#: exponentials, casts and the layers made of them.  Any other op (a log inside, an inverse, a
#: special function) can return an infinity exactly, so its infinity is not called an overflow.
_ARITHMETIC = frozenset({
    "add", "sub", "rsub", "mul", "neg", "matmul", "mm", "bmm", "baddbmm", "addmm", "addmv", "addbmm", "mv", "dot", "einsum",
    "linear", "bilinear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
    "pow", "square", "exp", "exp2", "expm1", "sinh", "cosh", "sum", "mean", "cumsum", "prod", "cumprod", "nansum",
    "to", "half", "bfloat16", "float", "double", "type", "type_as", "copy", "lerp", "addcmul", "scaled_dot_product_attention",
    "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "interpolate", "upsample", "avg_pool1d", "avg_pool2d",
    "avg_pool3d", "embedding_bag", "gelu", "silu", "mish", "softplus", "hardswish", "norm", "linalg_vector_norm",
    "vector_norm", "frobenius_norm", "std", "var", "std_mean", "var_mean", "layer_norm", "group_norm", "batch_norm",
    "instance_norm", "rms_norm", "multi_head_attention_forward", "tensordot", "kron", "outer", "cross", "trace",
} | {"rnn_relu", "rnn_tanh", "lstm", "gru", "rnn_relu_cell", "rnn_tanh_cell", "lstm_cell", "gru_cell",
     "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell"})

#: The recurrent kernels: a result that overflows grew over the time steps.
RECURRENT = frozenset({"rnn_relu", "rnn_tanh", "lstm", "gru", "rnn_relu_cell", "rnn_tanh_cell", "lstm_cell", "gru_cell",
                       "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell"})

_NORMS = ("layer_norm", "group_norm", "batch_norm", "instance_norm", "rms_norm", "native_layer_norm")


def arithmetic(name: str) -> bool:
    """Whether a non-finite result of ``name`` from finite inputs can only be an overflow."""
    return name in _ARITHMETIC


def _label(links: Links, tid: str | None) -> str:
    return links.label(tid) if tid else "x"


def _whole(g: Graph, tid: str | None) -> tuple | None:
    """Every value of tensor ``tid``, when its record holds them all."""
    if tid is None:
        return None
    v = g.node(tid).value
    if v is None or v.head is None or v.numel < 0 or len(v.head) < v.numel:
        return None
    return v.head


def largest(g: Graph, tid: str) -> float | None:
    """The largest magnitude the trace read in tensor ``tid`` (its minimum and maximum, or its
    head), ``None`` when nothing was read."""
    v = g.node(tid).value
    if v is None:
        return None
    seen = [abs(x) for x in (v.min, v.max) if type(x) in (float, int)]
    if not seen and v.head:
        seen = [abs(x) for x in v.head if type(x) in (float, int)]
    seen = [x for x in seen if x == x and x != float("inf")]
    return max(seen) if seen else None


def _squares_overflow(g: Graph, tid: str, name: str, trained: bool) -> Cause | None:
    """A normalisation whose input is so large that the sum of its squares (the variance it
    divides by) passes the dtype's largest number: an overflow inside the norm, not a constant row."""
    x = g.node(tid)
    big = largest(g, tid)
    try:
        top = float(torch.finfo(getattr(torch, x.dtype)).max)
    except (AttributeError, TypeError):
        return None
    n = x.shape[-1] if name in ("layer_norm", "rms_norm", "native_layer_norm") and x.shape else \
        max(1, int(torch.Size(x.shape[2:]).numel())) if len(x.shape) > 2 else (x.shape[0] if x.shape else 1)
    if big is None or big * big * max(n, 1) <= top:
        return None
    return Cause("overflow", f"Its input holds values as large as {format_number(big, 3)}: the squares {name} sums to "
                 f"compute the variance pass {x.dtype}'s largest number ({format_number(top, 3)}), so the variance is inf "
                 f"and the normalised result NaN. Values this large mean what feeds the norm has diverged (weights "
                 f"grown by updates, activations that grew layer after layer).",
                 ("Find where the values started to grow: lower the learning rate (and the weight decay, if it is "
                  "applied with a sign error or a huge factor), clip the gradients (torch.nn.utils.clip_grad_norm_), "
                  "and check the weights (p.abs().max()) after each step." if trained else
                  "Find where the values started to grow (the layers before the norm, the input data): normalise the "
                  "input, and check the weights (p.abs().max()) that feed it."))


def exact_cause(g: Graph, links: Links, op_id: str, name: str, inputs: list[str], out: TensorNode, bad_value: Any) -> Cause | None:
    """Why op ``op_id`` (plain name ``name``) made an exact NaN or infinity from finite inputs
    ``inputs``, or None when no rule here knows the op."""
    nan = bad_value != bad_value
    if name == "gumbel_softmax":
        return Cause("division_by_zero", "gumbel_softmax computes softmax((logits + gumbel noise) / tau): with tau = 0 (or "
                     "a tau so small that the scores leave the dtype's range) they are ±inf, and softmax of them is "
                     "inf − inf = NaN.",
                     "Keep the temperature above a floor: tau = max(tau, 0.1) in an annealing schedule (for a one-hot "
                     "sample use hard=True with a positive tau).")
    if name == "ctc_loss" and not nan:
        return _ctc(g, links, inputs)
    if name in ("logdet", "slogdet", "linalg_slogdet", "det", "linalg_det", "logabsdet"):
        what = "NaN" if nan else "-inf"
        why = ("The matrix is singular there: its determinant is 0, and the log of 0 is -inf." if not nan else
               f"The determinant is negative there, and {name} takes its log: NaN (slogdet gives the sign and the log of "
               f"the absolute value separately).")
        return Cause("singular_matrix", why + f" ({name} gave {what} from finite entries: not an overflow.)",
                     "Keep the matrix away from singular: add a small multiple of the identity (cov + 1e-6 * torch.eye(n), "
                     "a 'jitter'), or build it positive definite by construction (L @ L.T + eps * I, a softplus on the "
                     "diagonal of L).")
    if nan and name in ("mean", "nanmean", "var", "std", "var_mean", "std_mean") and inputs:
        src = g.node(inputs[0]).value
        if src is not None and src.numel == 0:
            x = _label(links, inputs[0])
            return Cause("empty_reduction", f"{x} was empty (it holds no element: a selection or a mask that matched "
                         f"nothing), and the {name} of no elements is 0 / 0 = NaN.",
                         f"Take the {name} only when there is something to average: check {x}.numel() > 0 (mask.any()) "
                         f"first, or divide the sum by the count clamped to at least 1 (x.sum() / mask.sum().clamp(min=1)).")
    if nan and name in ("cross_entropy", "nll_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits"):
        return _no_targets(g, links, name, inputs)
    if name in _NORMS and inputs:
        squares = _squares_overflow(g, inputs[0], name, trained(g, links, op_id))
        if squares is not None:
            return squares
    if nan and name in _NORMS:
        return Cause("zero_variance", f"{name} divides by sqrt(variance + eps): the row it normalised there has every "
                     f"value the same (its variance is 0, as for padding or a constant feature), and with eps = 0 (or an "
                     f"eps too small for {out.dtype}) that is 0 / 0 = NaN.",
                     "Keep eps > 0 in the layer (nn.LayerNorm's default is 1e-5; in float16 no smaller than about 1e-5), "
                     "or normalise in float32.")
    if nan and name in ("_weight_norm", "weight_norm", "_weight_norm_interface"):
        v = _label(links, inputs[0] if inputs else None)
        return Cause("division_by_zero", f"weight_norm computes g · v / ‖v‖ for each output row, and the direction v ({v}) "
                     f"is all zeros in a row there (its norm is 0): 0 / 0 = NaN. A layer zero-initialised before (or "
                     f"after) weight_norm was applied has v = 0.",
                     "Do not zero-initialise a weight under weight_norm: initialise it with non-zero values, and if the "
                     "layer should start at zero output, set the magnitude g (parametrizations.weight.original0) to 0 "
                     "instead.")
    if nan and name in ("normalize", "cosine_similarity", "pairwise_distance", "cosine_embedding_loss"):
        zero = [t for t in inputs[:2] if _has_zero_row(g, t)]
        named = zero[0] if len(zero) == 1 else (inputs[0] if inputs and not zero else None)
        x = _label(links, named) if named else "one of its inputs"
        vec = f"{x} is a vector of zeros there" if named else "an input is a vector of zeros there"
        if len(zero) > 1:
            vec = f"{' and '.join(_label(links, t) for t in zero)} each hold a vector of zeros"
        eps_of = {"normalize": "1e-12", "cosine_similarity": "1e-8", "pairwise_distance": "1e-6",
                  "cosine_embedding_loss": "1e-12, fixed inside it"}.get(name, "1e-12")
        if out.dtype == "float16":  # (1e-12 and 1e-8 are below float16's smallest number, 6e-8: they round to 0)
            own_eps = name != "cosine_embedding_loss"  # (it has no eps argument)
            arg = x if named and named_like(x) else "x"
            fix = (f"Compute it in float32 ({name}({arg}.float(), ...) and cast the result back)" +
                   (", or pass eps=1e-4: an eps float16 holds is not enough, since the gradient at a zero vector is about "
                    "1 / eps, which must stay below float16's largest number, 65504 (1e-5 is still too small)." if own_eps else
                    "; it takes no eps argument, so otherwise drop the pairs with an empty (all-zero) vector before the "
                    "loss, or use F.cosine_similarity(a, b, eps=1e-4) and write the loss from it."))
            return Cause("eps_too_small", f"{name} divides by max(norm, eps), and {vec} (its norm is 0); its eps "
                         f"({eps_of}) rounds to 0 in float16, so the division is 0 / 0 = NaN.", fix)
        return Cause("eps_too_small", f"{name} divides by max(norm, eps), and {vec} (its norm is "
                     f"0): with an eps of 0 the division is 0 / 0 = NaN.", f"Keep eps > 0 (the default) in {name}.")
    return None


def _has_zero_row(g: Graph, tid: str) -> bool:
    """Whether tensor ``tid`` has a vector (along its last dim) of zeros: read from its head when it
    holds every value, else from the live tensor while it is the version recorded."""
    node = g.node(tid)
    v = node.value
    try:
        if v is not None and v.head is not None and v.numel >= 0 and len(v.head) >= v.numel and node.shape:
            n = node.shape[-1] or 1
            return any(all(x == 0 for x in v.head[k:k + n]) for k in range(0, len(v.head), n))
        t = live_as_recorded(g, tid)
        if t is not None and t.dim() > 0 and t.numel():
            return bool((t.detach() == 0).all(dim=-1).any())
    except Exception:  # noqa: BLE001 - a read of live data is a bonus
        return False
    return False


def _ctc(g: Graph, links: Links, inputs: list[str]) -> Cause:
    """ctc_loss is inf for an item whose target no alignment fits (the input is too short)."""
    lens = [_whole(g, t) for t in inputs[2:4]] if len(inputs) >= 4 else [None, None]
    targets = _whole(g, inputs[1]) if len(inputs) >= 2 else None
    which = ""
    if lens[0] is not None and lens[1] is not None and len(lens[0]) == len(lens[1]):
        rows = len(lens[0])
        need = list(lens[1])
        shape = g.node(inputs[1]).shape if targets is not None else ()
        if targets is not None and len(shape) == 2 and shape[0] == rows:
            width = shape[1]
            for b in range(rows):
                row = targets[b * width: b * width + int(lens[1][b])]
                need[b] = int(lens[1][b]) + sum(1 for a, c in zip(row, row[1:]) if a == c)
        short = [b for b in range(rows) if lens[0][b] < need[b]]
        if short:
            b = short[0]
            which = (f" Item {b} of the batch has {int(lens[0][b])} input frame{'s' if lens[0][b] != 1 else ''} for a "
                     f"target of {int(lens[1][b])} label{'s' if lens[1][b] != 1 else ''}, which needs at least {need[b]} "
                     f"(one frame per label, and a blank between two equal labels).")
    return Cause("impossible_alignment", "ctc_loss is -log of the probability of every alignment of the target to the "
                 "input; where the input sequence is too short for the target, no alignment exists, the probability is 0 "
                 f"and the loss is inf (exactly, not an overflow).{which}",
                 "Pass zero_infinity=True to F.ctc_loss (those items then count 0 and send no gradient), and check "
                 "input_lengths >= target_lengths (plus repeats) where the data is made: downsample the input less, or "
                 "drop the items whose target is too long.")


def _no_targets(g: Graph, links: Links, name: str, inputs: list[str]) -> Cause:
    """A mean-reduced classification loss over no counted target: 0 / 0."""
    target = _whole(g, inputs[1]) if len(inputs) >= 2 else None
    ignored = target is not None and len(target) > 0 and all(v == -100 for v in target)
    seen = (" Every target here is -100, the default ignore_index." if ignored else "")
    return Cause("empty_reduction", f"With reduction='mean', {name} divides the sum of the losses of the targets that count "
                 f"by their number (their total weight): when every target is ignore_index, or has weight 0, that is "
                 f"0 / 0 = NaN.{seen}",
                 "Skip the batch when no target counts ((target != ignore_index).sum() == 0), or use reduction='sum' and "
                 "divide by the count clamped to at least 1.")


def saturation_edge(dtype: str, high: bool = True) -> float | None:
    """The smallest input (``high``) above which ``sigmoid`` rounds to exactly 1 in ``dtype``."""
    try:
        dt = getattr(torch, dtype)
        lo, hi = 0.0, 60.0
        with torch.no_grad(), torch._C.DisableTorchFunction():
            for _ in range(40):
                mid = (lo + hi) / 2
                if float(torch.sigmoid(torch.tensor(mid, dtype=dt))) == 1.0:
                    hi = mid
                else:
                    lo = mid
        return hi
    except Exception:  # noqa: BLE001 - a dtype torch cannot make here
        return None


_THROUGH = frozenset({"mul", "masked_fill", "where", "view", "reshape", "t", "transpose", "permute", "clone", "contiguous",
                      "getitem", "index", "select", "narrow", "squeeze", "unsqueeze", "flatten", "triu", "tril", "fill_diagonal"})
_DIVIDES = frozenset({"div", "truediv", "rdiv", "true_divide", "rtruediv", "divide"})
_MIXERS = frozenset({"sum", "mean", "matmul", "mm", "mv", "bmm", "einsum", "logsumexp", "cumsum"})


def _downstream(g: Graph, links: Links, tid: str, hops: int, through: frozenset = _THROUGH) -> list[tuple[str, str]]:
    """``(op, plain name)`` of the ops that use ``tid``, followed through elementwise masks,
    scalings and views (``through``) for up to ``hops`` ops."""
    out, frontier = [], [tid]
    for _ in range(hops):
        nxt = []
        for t in frontier:
            for c in links.consumers.get(t, ()):
                name = base(g.node(c).forward)
                out.append((c, name))
                if name in through:
                    nxt += list(links.made.get(c, {}).values())
        frontier = nxt
    return out


def exp_fix(g: Graph, links: Links, op_id: str) -> tuple[str, str] | None:
    """What an overflowing ``exp`` was for, read from the ops after it (through masks and views),
    and the op that computes that without the overflow: ``(what, fix)``, or None (a plain exp)."""
    for t in links.made.get(op_id, {}).values():
        for c, cname in _downstream(g, links, t, 3):
            outs = list(links.made.get(c, {}).values())
            later = [n for u in outs for _, n in _downstream(g, links, u, 3, through=_THROUGH | _DIVIDES)]
            if cname in ("log1p",) or (cname in ("add", "radd") and "log" in later[:2]):
                return ("log(1 + exp(x)), the softplus", "use F.softplus(x): it computes log(1 + exp(x)) without "
                        "overflowing (it returns x itself for large x)")
            if cname in ("sum", "logsumexp") and "log" in later:
                return ("log(sum(exp(x))): a log-softmax or a cross-entropy written by hand",
                        "work in log space: torch.logsumexp(x, dim) (it subtracts the maximum before exp), or "
                        "F.log_softmax / F.cross_entropy on the scores themselves")
            if (cname == "sum" and any(n in _DIVIDES for n in later)) or (
                    cname in _DIVIDES and any(links.made_by(i) == "sum" for i in links.forward_inputs(c) if i != t)):
                return ("a softmax written by hand", "subtract the maximum before exp (x - x.max(dim, keepdim=True)"
                        ".values), or use torch.softmax(x, dim), which does it")
    return None


def underflowed_exp(g: Graph, links: Links, tid: str | None, hops: int = 3) -> str | None:
    """The ``exp`` op whose values underflowed to exactly 0 and that ``tid`` (a 0 there) was
    computed from by sums, products and views, when the records show such zeros; else None."""
    frontier = [tid] if tid else []
    for _ in range(hops):
        nxt = []
        for t in frontier:
            op = links.maker.get(t)
            if op is None:
                continue
            name = base(g.node(op).forward)
            if name == "exp":
                v = g.node(t).value
                if v is not None and v.head is not None and 0.0 in v.head:
                    return op
                continue
            if name in _MIXERS or name in _THROUGH or name == "neg":
                nxt += links.forward_inputs(op)
        frontier = nxt
    return None


#: Ops whose result is a mask (bool, or 0/1 once cast).
_MASKERS = frozenset({"ge", "gt", "le", "lt", "eq", "ne", "__ge__", "__gt__", "__le__", "__lt__", "__eq__", "__ne__", "__and__",
                      "__or__", "logical_and", "logical_or", "logical_not", "bitwise_and", "bitwise_or", "isfinite", "isnan",
                      "__invert__"})


def masked_product(g: Graph, links: Links, bad_ids: list, first: TensorNode, nan_asked: bool) -> tuple[str, str] | None:
    """``(sentence, fix)`` where an infinity (``first``, the earliest non-finite value) became the
    asked NaN in a multiplication by a mask (``x * mask``): 0 × inf is NaN where the mask is 0,
    and selecting with ``torch.where`` keeps the masked positions finite.  None otherwise."""
    head = first.value.head if first.value is not None else None
    if not nan_asked or not head or any(type(v) is float and v != v for v in head):
        return None  # (the first value must hold infinities only: a NaN of its own is its own answer)
    for t in bad_ids:
        op = links.maker.get(t)
        if op is None or base(g.node(op).forward) not in ("mul", "__mul__", "__rmul__"):
            continue
        ins = links.forward_inputs(op)
        masks = [m for m in ins if g.node(m).dtype == "bool" or links.made_by(m) in _MASKERS]
        others = [x for x in ins if x not in masks and bad(g.node(x).value)]
        out = g.node(t).value
        if len(ins) != 2 or not masks or not others or out is None or not any(type(v) is float and v != v for v in (out.head or ())):
            continue
        o, m, x = g.node(op), links.label(masks[0]), links.label(others[0])
        at = f" at line {o.line} ({o.code})" if o.line and o.code else ""
        m, x = (m if named_like(m) else "mask"), (x if named_like(x) else "x")
        return (f" Then the multiplication by the mask {m}{at} made the NaN: where {m} is 0 (False) and {x} is inf, 0 × inf "
                f"is NaN, so masking by multiplying does not hide the infinity.",
                f" To drop the masked positions whatever they hold, select instead of multiplying: torch.where({m}, {x}, 0).")
    return None

def all_positive(g: Graph, inputs: list[str]) -> bool:
    """Whether every value of the first of ``inputs`` is above 0: its record's smallest value, else
    the live tensor while it is the version the trace recorded (False where neither can say)."""
    if not inputs:
        return False
    v = g.node(inputs[0]).value
    if v is not None and v.min is not None:
        return type(v.min) in (int, float) and v.min > 0
    return read_live(g, inputs[0], lambda t: bool((t > 0).all()), False)


def factors_per_product(g: Graph, x: str | None, out: str) -> int | None:
    """How many factors each product of ``x`` into ``out`` multiplies (their numbers of elements' ratio)."""
    if x is None:
        return None
    try:
        a = math.prod(g.node(x).shape)
        b = math.prod(g.node(out).shape) or 1
        return a // b if a and a % b == 0 and a // b > 1 else None
    except TypeError:
        return None

