"""Calls and backward nodes that make no NaN or infinity from finite inputs: their outputs need no check."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from .capture import _DTYPE, _HEAD, _VERSION
from .facts import known_finite, version_of
from .guard import _dispatch_depth

__all__ = ["KEEPS_FINITE", "SENDS_FINITE", "FINITE_DERIVATIVES", "BOUNDED_DERIVATIVES", "may_send_nonfinite", "plain_args", "finite_record", "keeps_finite", "current", "made_finite", "elements_within", "head_not_finite"]

_T = torch.Tensor
_stack_len = torch._C._len_torch_function_stack


def _existing(owner: Any, names: str) -> frozenset:
    return frozenset(f for f in (getattr(owner, n, None) for n in names.split()) if f is not None)


#: Forward calls whose output is finite whenever every tensor they read is and no Python
#: float or dtype is passed (a bound, a slope, a scale or a reinterpreting ``view(dtype)``
#: could make an infinity): activations that only select, negate or bound (``relu``,
#: ``sigmoid``, ``tanh``, ``softmax``...) and calls that only move, copy or select elements.
#: Not those that multiply the input by something: torch's ``gelu`` of 2.9e38 in float32 is
#: inf (an intermediate product overflows), and so may be ``silu``'s, ``mish``'s or
#: ``hardswish``'s.  Known by the function object torch hands the mode, never by name (a
#: user's function called ``relu`` is checked like any other).
KEEPS_FINITE: frozenset = (
    _existing(torch, "relu sigmoid tanh neg negative abs absolute softmax clone t transpose permute reshape flatten "
                     "squeeze unsqueeze cat concat concatenate stack narrow select where maximum minimum flip "
                     "movedim swapaxes swapdims")
    | _existing(_T, "relu sigmoid tanh neg negative __neg__ abs absolute __abs__ softmax clone contiguous t transpose "
                    "permute view reshape flatten squeeze unsqueeze expand expand_as view_as reshape_as __getitem__ "
                    "narrow select where maximum minimum flip movedim swapaxes swapdims")
    | _existing(F, "relu sigmoid tanh softmax relu6 hardsigmoid")
)

#: Backward nodes (torch's C++ ones, by class name) whose every outgoing gradient is finite
#: whenever every gradient that arrived is, whatever they saved: each sends elements of what
#: arrived or zeros (ReLU's and hardtanh's masks, a copy, a negation, a view's backward, a
#: select or slice written into zeros), or what arrived divided by a count (a mean).
#: Nodes that add gradients up (``expand``, overlapping pools, indexing with repeats),
#: multiply by saved values or by a Python number, or change the dtype are not here.
SENDS_FINITE: frozenset = frozenset(
    "ReluBackward0 ThresholdBackward0 HardtanhBackward0 NegBackward0 CloneBackward0 MeanBackward0 MeanBackward1 "
    "SelectBackward0 SliceBackward0 ViewBackward0 UnsafeViewBackward0 ReshapeAliasBackward0 PermuteBackward0 "
    "TransposeBackward0 TBackward0 SqueezeBackward0 SqueezeBackward1 SqueezeBackward2 UnsqueezeBackward0 "
    "AliasBackward0 NarrowBackward0".split()
)

#: Backward nodes whose derivative is finite wherever their inputs are: from finite gradients
#: and finite inputs they send a non-finite gradient only when a sum or product overflows.
FINITE_DERIVATIVES: frozenset = frozenset({
    "AddmmBackward0", "MmBackward0", "BmmBackward0", "BaddbmmBackward0", "MvBackward0", "AddmvBackward0",
    "LinearBackward0", "ConvolutionBackward0", "MulBackward0", "AddBackward0", "SubBackward0", "RsubBackward1",
    "SumBackward0", "SumBackward1", "MeanBackward0", "MeanBackward1", "ToCopyBackward0", "UnsafeViewBackward0",
    "ViewBackward0", "TBackward0", "ExpandBackward0", "CloneBackward0", "EmbeddingBackward0", "NegBackward0",
    "DotBackward0", "MulBackward1", "AddBackward1", "SubBackward1", "CatBackward0", "StackBackward0",
    "PermuteBackward0", "TransposeBackward0", "SelectBackward0", "SliceBackward0", "IndexBackward0",
})

#: Backward nodes of activations, losses and layers whose derivative is bounded wherever their
#: inputs are finite (like :data:`FINITE_DERIVATIVES`: from finite gradients and inputs they send
#: a non-finite one only by overflow), but that users call in their own functions: a trace keeps
#: their inner line (cheaply, without reading the frame's names).
BOUNDED_DERIVATIVES: frozenset = frozenset({
    "SplitBackward0", "SplitWithSizesBackward0", "UnbindBackward0", "RepeatBackward0", "IndexSelectBackward0",
    "GatherBackward0", "WhereBackward0", "MaskedFillBackward0", "ClampBackward1", "ClampMinBackward0", "AbsBackward0",
    "TanhBackward0", "SigmoidBackward0", "SiluBackward0", "GeluBackward0", "EluBackward0", "LeakyReluBackward0",
    "SoftmaxBackward0", "SafeSoftmaxBackward0", "LogSoftmaxBackward0", "MaxPool2DWithIndicesBackward0",
    "AvgPool2DBackward0", "AdaptiveAvgPool2DBackward0", "MseLossBackward0", "NllLossBackward0", "L1LossBackward0",
    "SmoothL1LossBackward0", "MkldnnRnnLayerBackward0", "ScaledDotProductFlashAttentionForCpuBackward0",
})


def may_send_nonfinite(node: str) -> bool:
    """Whether backward node ``node`` (its class name) can send a NaN or an infinity from finite
    gradients and finite inputs other than by overflow: its derivative is infinite or undefined
    somewhere (``SqrtBackward0`` at 0, ``DivBackward0`` at a zero denominator, a layer norm of
    a constant row), or graphlens does not know that it is finite everywhere."""
    return (node not in FINITE_DERIVATIVES and node not in BOUNDED_DERIVATIVES and node not in SENDS_FINITE
            and node != "AccumulateGrad")


_PLAIN_SCALARS = (int, bool, str, type(None), slice, type(Ellipsis), torch.memory_format, torch.device, torch.layout)


def plain_args(args: tuple, kwargs: dict | None) -> bool:
    """Whether a call passes no Python number but ints and bools (nor a dtype): every other
    argument a tensor, a string, a slice of ints or a container of these."""
    for a in args:
        if not _plain(a):
            return False
    if kwargs:
        for a in kwargs.values():
            if not _plain(a):
                return False
    return True


def _plain(a: Any) -> bool:
    if type(a) is _T or isinstance(a, _PLAIN_SCALARS):
        if type(a) is slice:
            return all(type(b) in (int, type(None)) or type(b) is _T for b in (a.start, a.stop, a.step))
        return not isinstance(a, float)
    if type(a) in (list, tuple) or isinstance(a, torch.Size):
        return all(_plain(b) for b in a)
    return False


def finite_record(rec: tuple) -> bool:
    """Whether a tensor record proves its value holds no NaN or infinity: a dtype that holds
    none (integers, bools), or a real floating one whose head says so (see
    :func:`graphlens._live.facts.known_finite`).  Never a complex one: the magnitude of
    finite parts can overflow (``abs(3e38+3e38j)`` is inf in complex64)."""
    dtype = rec[_DTYPE]
    if dtype.is_complex:
        return False
    if not dtype.is_floating_point:
        return True
    return known_finite(rec[_HEAD])


def keeps_finite(recs: list, ins: Any, args: tuple, kwargs: dict | None) -> bool:
    """Whether a call of :data:`KEEPS_FINITE` whose inputs are the tensor records ``recs[i]``
    for ``i`` in ``ins`` (each of its tensor as it is now) made outputs with no NaN or
    infinity: every input proves itself finite, no Python float was passed, and no mode of
    the user's, below graphlens's, could have changed what the call returned."""
    if _stack_len() or _dispatch_depth() or not plain_args(args, kwargs):
        return False
    for i in ins:
        if not finite_record(recs[i]):
            return False
    return True


def current(rec: Any, i: Any, t: Any) -> bool:
    """Whether record ``i`` of recorder ``rec`` is of the plain tensor ``t`` as it is now."""
    return i is not None and type(t) is _T and rec.refs[i]() is t and rec.tensors[i][_VERSION] == version_of(t)


def made_finite(rec: Any, func: Any, ins: tuple, tensors: list, args: tuple, kwargs: dict | None) -> bool:
    """:func:`keeps_finite` for any call: ``func`` keeps values finite and each input record
    (``ins``, of ``tensors``) is :func:`current`."""
    if func not in KEEPS_FINITE:
        return False
    for i, t in zip(ins, tensors):
        if not current(rec, i, t):
            return False
    return keeps_finite(rec.tensors, ins, args, kwargs)


def elements_within(v: torch.Tensor, t: torch.Tensor) -> bool:
    """Whether every element of ``v`` is an element of ``t``, read from their memory
    alone: both plain CPU tensors of one dtype on one storage, ``t`` dense (its elements
    fill one run of addresses, in any order of dimensions) and ``v``'s addresses inside
    that run.  Then ``v`` is finite wherever ``t`` is, while they share a version (a
    transpose, view, expand or slice of ``t``, as backward sends them)."""
    try:
        if v.dtype != t.dtype or not v.is_cpu or not t.is_cpu or type(v) is not _T or type(t) is not _T:
            return False
        if _T.untyped_storage(v).data_ptr() != _T.untyped_storage(t).data_ptr():
            return False
        lo = t.storage_offset()
        expected = 1
        for stride, size in sorted(zip(t.stride(), t.shape)):
            if size == 1:
                continue
            if stride != expected:
                return False  # (gaps or overlaps: not one run)
            expected *= size
        vlo = v.storage_offset()
        vhi = vlo
        for stride, size in zip(v.stride(), v.shape):
            if size == 0:
                return True  # (no elements)
            if stride < 0:
                return False
            vhi += (size - 1) * stride
        return lo <= vlo and vhi < lo + expected
    except Exception:  # noqa: BLE001 - storage-less or odd tensors: not known
        return False


def head_not_finite(h: tuple) -> bool:
    """Whether a value's head (see :func:`graphlens._live.facts.read_head`) shows a NaN or an
    infinity: the whole tensor's check, read with it, or the head's own numbers (their sum
    minus itself is 0 exactly when it is finite; for integers and bools always)."""
    if len(h) > 5:
        return h[5] is False
    values = h[3]
    if not values:
        return False
    try:
        total = sum(values)
    except TypeError:
        return False
    return total - total != 0
