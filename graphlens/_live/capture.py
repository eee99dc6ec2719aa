"""How a trace captures live objects cheaply: the record layouts, call names, and the heads of values and gradients."""

from __future__ import annotations

from types import FunctionType
from typing import Any, Callable

import torch

from .facts import dtype_name, numel_of, plain_shape, read_head
from .guard import _is_wrapped
from .storages import saved_storages
from ..graph import LIVE, UNREADABLE, SavedEntry, Summary
from ..values import SavedStorage

__all__ = [
    "func_name", "grad_fn_of", "outputs_of", "readable", "sequence_now", "head", "grad_head", "kept_grad", "saved_entry",
    "_FUNC_NAMES", "_TENSOR_PROPERTIES",
    "_SHAPE", "_DTYPE", "_DEVICE", "_IS_LEAF", "_REQUIRES_GRAD", "_VERSION", "_IS_VIEW", "_IS_PARAM", "_OP",
    "_OUTPUT_NR", "_DETACHED_FROM", "_REGION", "_SCOPE", "_HEAD",
    "_NAME", "_VAR", "_FORWARD", "_OREGION", "_OSCOPE", "_OUTS", "_INS", "_LASTI",
]

_Tensor = torch.Tensor
_STRIDED = torch.strided
_detach, _numel, _numpy, _item, _sum = _Tensor.detach, _Tensor.numel, _Tensor.numpy, _Tensor.item, _Tensor.sum
#: Dtypes :func:`head` reads itself (numpy holds them); of those, the ones it sums to check.
_FAST_DTYPES = frozenset({torch.float32, torch.float64, torch.int64, torch.int32, torch.uint8, torch.bool, torch.int8, torch.int16})
_SUMMED = frozenset({torch.float32, torch.float64})

# A tensor record is one immutable tuple of plain values (indexes below), so the garbage
# collector stops tracking it at its first pass: a trace of many small ops must not fill
# the oldest generation with objects that each full collection walks again.
(_SHAPE, _DTYPE, _DEVICE, _IS_LEAF, _REQUIRES_GRAD, _VERSION, _IS_VIEW, _IS_PARAM, _OP, _OUTPUT_NR,
 _DETACHED_FROM, _REGION, _SCOPE, _HEAD) = range(14)
# (The weak reference lives in a list of its own: a record of plain values only is
# untracked by the collector, so a long trace does not make every full collection longer.)
# An op record is a short list: [backward name, leaf record of an AccumulateGrad, forward
# name, region, scope, {output_nr: tensor record}, input tensor records, the block frame's
# instruction offset when the call was made (-1: not a call)].  The common call's record
# is a tuple instead, its one output ``(output_nr, tensor record)``: plain values and
# tuples of them only, so the collector stops tracking it too (a dict inside would keep it
# tracked for good); ``Recorder.thaw`` makes it the list when it must change.
_NAME, _VAR, _FORWARD, _OREGION, _OSCOPE, _OUTS, _INS, _LASTI = range(8)


def outputs_of(orec: Any) -> list:
    """The tensor records of an op record's outputs (of either form)."""
    outs = orec[_OUTS]
    return list(outs.values()) if type(outs) is dict else [outs[1]]

#: Properties whose getter makes a tensor of the graph (recorded like calls).
_TENSOR_PROPERTIES = frozenset({"real", "imag", "T", "mT", "H", "mH"})

_FUNC_NAMES: dict[Any, str] = {}


def func_name(func: Callable) -> str:
    """The name a forward call is shown by (``mul``, ``linear``, ``Tensor.data.__get__``)."""
    name = _FUNC_NAMES.get(func)
    if name is not None:
        return name
    name = getattr(func, "__name__", None) or repr(func)
    if name in ("__get__", "__set__"):
        owner = getattr(getattr(func, "__self__", None), "__name__", "")
        name = owner if name == "__get__" and owner in _TENSOR_PROPERTIES else (f"{owner}.{name}" if owner else name)
    if len(_FUNC_NAMES) < 4096 and not isinstance(getattr(func, "__self__", None), _Tensor) and not (
        type(func) is FunctionType and not func.__module__.startswith("torch")  # never keep a user's function alive
    ):
        try:
            _FUNC_NAMES[func] = name  # torch functions and Tensor methods: a small fixed set
        except TypeError:
            pass
    return name


def grad_fn_of(t: _Tensor) -> Any:
    """``t.grad_fn``, or None where PyTorch refuses to give it (a view made in no_grad
    whose base was changed in place since): graphlens must not fail where torch works."""
    try:
        return t.grad_fn
    except RuntimeError:
        return None


def readable(t: _Tensor) -> bool:
    """Whether torch still describes ``t`` (see :func:`grad_fn_of`)."""
    try:
        t.grad_fn
    except RuntimeError:
        return False
    return True


#: torch's own counter (thread-local): the sequence number the next node will get.
_next_sequence_nr = getattr(torch._C._autograd, "_get_sequence_nr", None)


def sequence_now() -> int:
    """The autograd sequence number the next backward node made on this thread will get."""
    if _next_sequence_nr is not None:
        return _next_sequence_nr()
    return probe_sequence_now()


def probe_sequence_now() -> int:
    """:func:`sequence_now` on a torch without the counter: make a node and read its
    number (it costs an allocation, ~100 µs right after a large backward)."""
    with torch.enable_grad(), torch._C.DisableTorchFunction():  # an enclosing trace must not see it
        probe = torch.zeros((), requires_grad=True).mul(1)
    return probe.grad_fn._sequence_nr() + 1


def head(t: _Tensor, shape: Any, limit: int, *, check: bool = True, finite: bool = False) -> Any:
    """What a record keeps of a CPU tensor's value: numbers, read now (None elsewhere);
    ``check``: whether a large floating tensor is checked for NaN and inf now (one
    reduction; see :func:`graphlens._live.facts.read_head`); ``finite``: the caller knows
    no element is NaN or inf (then nothing is reduced)."""
    if not limit or not t.is_cpu:
        return None  # (on accelerators reading would wait for the device)
    if type(t) is _Tensor and t.layout is _STRIDED and not t.is_nested:
        if len(shape) == 1 and 0 < shape[0] <= limit:
            try:
                return (shape, t.dtype, shape[0], tuple(_Tensor.tolist(t)))
            except Exception:  # noqa: BLE001 - quantized, storage-less (vmap) or odd data: read_head says what it can
                pass
        elif shape and t.dtype in _FAST_DTYPES and not _is_wrapped(t):
            # The common large value, read as read_head reads it with fewer checks (its
            # type, layout, device and dtype are known here): the head through numpy, and
            # one sum saying whether it is finite; anything else, or a sum that is not
            # finite, is read by read_head.
            try:
                d = _detach(t) if t.requires_grad else t
                n = _numel(d)
                values = tuple(_numpy(d).flat[:limit].tolist())
            except Exception:  # noqa: BLE001 - read_head says what it can
                return read_head(t, limit, check=check, finite=finite)
            dtype = t.dtype
            if n <= limit or not check or dtype not in _SUMMED:
                return (shape, dtype, n, values)
            if finite:
                return (shape, dtype, n, values, None, True, None)
            total = _item(_sum(d))
            if total - total == 0:
                return (shape, dtype, n, values, None, True, None)
    return read_head(t, limit, check=check, finite=finite)


def grad_head(g: Any, limit: int, *, finite: bool = False) -> Any:
    """What a record keeps of a gradient: its head as numbers (never raises); ``finite``:
    the caller knows no element is NaN or inf (see :func:`graphlens._live.facts.read_head`)."""
    if g is None:
        return None
    try:
        shape = g.shape
        if len(shape) == 1 and 0 < shape[0] <= limit and type(g) is _Tensor and g.layout is _STRIDED and not g.is_nested and g.is_cpu:
            return (tuple(shape), g.dtype, shape[0], tuple(_Tensor.tolist(g)))
    except Exception:  # noqa: BLE001 - e.g. a nested tensor has no sizes
        pass
    return read_head(g, limit, finite=finite)


def kept_grad(t: Any, limit: int) -> Any:
    """The head of ``t.grad`` where torch keeps one (a leaf, or a retain_grad() tensor): never
    reading the .grad of another non-leaf, which would warn in the user's program."""
    if t is None or not (t.retains_grad or t.is_leaf):
        return None
    return grad_head(t.grad, limit)


def saved_entry(row: tuple) -> SavedEntry:
    """A SavedEntry from a compact row of :meth:`Recorder.read_saved_now` or
    :func:`~graphlens._live.saved_columns.saved_rows_of_all` (a row that is a SavedEntry already is itself).
    The records are made with ``tuple.__new__`` (every field given: the same records as
    their constructors make, without the keyword handling), and an entry of a plain value
    that compares and hashes exactly (None, a bool, an int, a str) is made once per value."""
    if type(row) is SavedEntry:
        return row
    n = len(row)
    if n >= 5:  # (name, record or tensor id, shape, dtype, storages[, number of a 0-d one])
        short, i, shape, dtype, storages = row[:5]
        shape = plain_shape(shape)
        tid = i if type(i) is not int else None if i < 0 else f"t{i}"
        summary = _new(Summary, (shape, dtype_name(dtype), numel_of(shape), (row[5],) if n == 6 else None,
                                 None, None, None, None, None, None, None))
        return _new(SavedEntry, (short, LIVE, tid, summary, None, _storages(storages) if storages else ()))
    if n == 2:  # (name, plain value)
        value = row[1]
        if type(value) in _EXACT:
            key = (row[0], type(value), value)
            entry = _PLAIN_ENTRIES.get(key)
            if entry is None:
                if len(_PLAIN_ENTRIES) >= 4096:
                    _PLAIN_ENTRIES.clear()
                entry = _PLAIN_ENTRIES[key] = _new(SavedEntry, (row[0], LIVE, None, None, value, ()))
            return entry
        return _new(SavedEntry, (row[0], LIVE, None, None, value, ()))
    if n == 3:  # (name, plain value, storages of the tensors it holds)
        return _new(SavedEntry, (row[0], LIVE, None, None, row[1], saved_storages(row[2])))
    return SavedEntry(row[0], UNREADABLE)


_new = tuple.__new__
#: Plain values whose equal keys are the same value (a float is not: 0.0 == -0.0).
_EXACT = frozenset({type(None), bool, int, str})
_PLAIN_ENTRIES: dict[tuple, SavedEntry] = {}


def _storages(raw: tuple) -> tuple:
    """:func:`~graphlens._live.storages.saved_storages`, for the common row of one storage."""
    if len(raw) == 1:
        return (_new(SavedStorage, raw[0]),)
    return saved_storages(raw)
