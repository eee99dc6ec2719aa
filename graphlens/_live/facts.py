"""Reading facts off live tensors and backward nodes as plain numbers (no tensor is kept)."""

from __future__ import annotations

import math
import weakref
from typing import Any, Callable

import torch

from .guard import unreadable_why
from ..graph import FREED, HIDDEN, LIVE, MODIFIED, UNREADABLE, SavedEntry, SavedState, Summary, TensorNode
from .storages import StorageBook, checkpoint_storages, saved_storages

__all__ = [
    "summarize", "read_head", "make_summary", "dtype_name", "tensor_node", "version_of", "saved_attributes",
    "read_saved", "saved_plan", "saved_value", "tensor_summary", "numel_of", "check_roots", "flatten_tensors",
    "StorageBook", "known_finite",
]

#: How many elements a value summary shows before it elides the rest.
MAX_ELEMENTS = 6


_T = torch.Tensor
_DTYPE_NAMES: dict = {}
_STRIDED = torch.strided


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float32`` -> ``"float32"``."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).removeprefix("torch.")
    return name


#: dtypes whose values numpy can read in place.
_NUMPY_DTYPES = frozenset({
    torch.float16, torch.float32, torch.float64, torch.complex64, torch.complex128, torch.bool,
    torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
})
_FLOATING = {torch.float16, torch.bfloat16, torch.float32, torch.float64}
_COMPLEX = {torch.complex32, torch.complex64, torch.complex128}

#: With ``stats=True``, tensors up to this many elements get min, max and mean read by a
#: torch reduction when they are summarised.  Graphs never ask for it: their summaries
#: have min / max / mean only where the head holds every element (free), since a
#: reduction per leaf value and gradient was two thirds of a model's snapshot.
STATS_LIMIT = 1 << 20


def summarize(t: torch.Tensor | None, max_elements: int = MAX_ELEMENTS, *, stats: bool = False) -> Summary | None:
    """A :class:`~graphlens.graph.Summary` of a tensor's values: shape, dtype, the first
    ``max_elements`` numbers, min / max / mean where they are all read and, with
    ``stats``, min / max / mean of a larger tensor too (a reduction).

    Never raises on odd tensors (meta, sparse, quantized, nested): their values are then
    not read (``head`` is ``None``).
    """
    if t is None:
        return None
    return make_summary(read_head(t, max_elements), t if stats else None)


def read_head(t: torch.Tensor, max_elements: int = MAX_ELEMENTS, *, finite: bool = False, check: bool = True) -> tuple:
    """What :func:`summarize` reads while a program runs, cheaply: ``(shape, dtype,
    numel, head)`` with ``head`` a tuple of Python numbers, so nothing refers to the
    tensor; where the values cannot be read, ``head`` is ``None`` and a fifth item says
    why.  :func:`make_summary` turns it into a Summary later.  A floating tensor with more
    elements than the head holds is checked for NaN and inf (one reduction), unless the
    caller knows it is ``finite`` (for instance
    a view holding only elements of a tensor known finite), or is told not to ``check``
    (then whether it is finite is unknown: the fourth item is all there is)."""
    try:
        shape = shape_of(t)
        dtype = t.dtype
    except Exception as exc:  # noqa: BLE001 - a summary must never break the caller
        return ((), "unknown", 0, None, f"its shape could not be read ({type(exc).__name__})")
    try:
        why = _unread_layout(t)
        if why is not None:
            return (shape, dtype, numel_of(shape), None, why)
        n = _T.numel(t)  # (torch's own methods, called unbound: a subclass's Python overrides never run)
        if not shape:
            return (shape, dtype, n, (_T.item(t),))
        if t.requires_grad:  # read through an alias: views of t must not enter its graph
            t = _T.detach(t)
        if max_elements <= 0 or n == 0:
            return (shape, dtype, n, ())
        if n <= max_elements and len(shape) == 1:
            return (shape, dtype, n, tuple(_T.tolist(t)))
        if dtype in _NUMPY_DTYPES and t.is_cpu:
            try:  # numpy reads the head of any strides without a torch op (a third of the cost)
                head = tuple(_T.numpy(t).flat[:max_elements].tolist())
            except Exception:  # noqa: BLE001 - e.g. a conjugate view numpy will not take
                head = None
            if head is not None:
                if n > max_elements and check and (dtype in _FLOATING or dtype in _COMPLEX):
                    if finite:
                        return (shape, dtype, n, head, None, True, None)
                    return _checked(t, shape, dtype, n, head)
                return (shape, dtype, n, head)
        if n <= max_elements:
            return (shape, dtype, n, tuple(_T.tolist(_T.reshape(t, -1))))
        head = tuple(_T.tolist(_leading(t, max_elements)))
        if check and (dtype in _FLOATING or dtype in _COMPLEX):
            if finite:
                return (shape, dtype, n, head, None, True, None)
            return _checked(t, shape, dtype, n, head)
        return (shape, dtype, n, head)
    except Exception as exc:  # noqa: BLE001
        return (shape, dtype, numel_of(shape), None, f"reading its values failed ({type(exc).__name__}: {str(exc)[:80]})")


def finiteness(t: torch.Tensor) -> tuple[bool | None, int | None]:
    """``(finite, at)``: whether every element of a floating or complex tensor is finite
    (no NaN, no infinity) and, when not, the flat row-major index of the first one that is
    not.  One sum tells it (NaN and infinities survive a sum; a sum that overflows is checked
    element by element); only a tensor that is not finite pays for the index.  Read on the
    CPU only (elsewhere it would wait for the device): ``(None, None)``."""
    if not t.is_cpu:
        return None, None
    try:
        total = _T.sum(t, dtype=torch.float32) if t.dtype in _HALF else _T.sum(t)
        value = _T.item(total)
        if (math.isfinite(value.real) and math.isfinite(value.imag)) if type(value) is complex else math.isfinite(value):
            return True, None
        bad = torch.logical_not(torch.isfinite(t)).reshape(-1)
        if not _T.item(_T.any(bad)):
            return True, None  # (the sum overflowed; every element is finite)
        return False, int(_T.item(_T.argmax(_T.to(bad, torch.uint8))))
    except Exception:  # noqa: BLE001 - finiteness is a bonus
        return None, None


def _checked(t: torch.Tensor, shape: tuple, dtype: Any, n: int, head: tuple) -> tuple:
    """A head read with the tensor's finiteness (see :func:`read_head`): the first element that
    is not finite, when one is, as an eighth item."""
    ok, at = finiteness(t)
    if ok is False:
        return (shape, dtype, n, head, None, ok, at, _element(t, at, head))
    return (shape, dtype, n, head, None, ok, at)


def _element(t: torch.Tensor, at: int | None, head: tuple) -> Any:
    """The element at flat row-major position ``at`` of ``t`` (the first that is not finite), as
    a Python number: from ``head`` when it holds it, else read (one element; only a tensor that
    is not finite pays for it)."""
    if at is None:
        return None
    if at < len(head):
        return head[at]
    try:
        return _T.item(_T.reshape(t, -1)[at])
    except Exception:  # noqa: BLE001 - a bonus
        return None


_HALF = frozenset({torch.float16, torch.bfloat16})


def known_finite(h: Any) -> bool:
    """Whether a head (see :func:`read_head`) proves every element finite: the whole
    tensor's check said so, or the head holds every element and they all are."""
    if h is None:
        return False
    if len(h) > 5:
        return h[5] is True
    values, n = h[3], h[2]
    if values is None or len(values) < n:
        return False
    if n and h[1] not in _FLOATING and h[1] not in _COMPLEX:
        return True
    return _finite_head(values)[0]


def _finite_head(head: tuple) -> tuple[bool, int | None]:
    for k, v in enumerate(head):
        if type(v) is float:
            if v != v or v in (math.inf, -math.inf):
                return False, k
        elif type(v) is complex and not (math.isfinite(v.real) and math.isfinite(v.imag)):
            return False, k
    return True, None


def _unread_layout(t: torch.Tensor) -> str | None:
    """Why ``t``'s values are not read at all (None: they are)."""
    if t.layout != _STRIDED:
        return f"a {str(t.layout).removeprefix('torch.')} tensor: only strided values are read"
    if t.is_meta:
        return "a meta tensor: it has no data"
    if t.is_quantized:
        return "a quantized tensor: its stored integers are not read"
    if t.is_nested:
        return "a nested tensor: its values are not read"
    return unreadable_why(t)


def numel_of(shape: tuple) -> int:
    """The element count of a plain shape; -1 when a size is symbolic or ragged."""
    if not shape:
        return 1
    if all(type(n) is int for n in shape):
        return math.prod(shape)
    return -1


def _stats_from_head(head: tuple) -> tuple:
    vals = [float(v) for v in head]
    if not vals:
        return (None, None, None)
    if any(v != v for v in vals):
        nan = float("nan")
        return (nan, nan, nan)
    try:
        total = math.fsum(vals)
    except (ValueError, OverflowError):  # inf + -inf is nan, finite overflow is inf, as in torch
        total = sum(vals)
    return (min(vals), max(vals), total / len(vals))


def make_summary(read: tuple, live: torch.Tensor | None = None) -> Summary:
    """A Summary from what :func:`read_head` read; min / max / mean come from the head
    when it holds every element, else from ``live`` (a reduction) when it is given."""
    shape, dtype, numel, head = read[:4]
    if type(shape) is not tuple:  # a torch.Size, as a trace records it
        shape = plain_shape(shape)
    name = dtype_name(dtype) if not isinstance(dtype, str) else dtype
    lo = hi = mean = None
    if head is not None and dtype not in _COMPLEX and dtype is not torch.bool:
        if len(head) >= numel > 0:
            lo, hi, mean = _stats_from_head(head)
        elif live is not None and 0 < numel <= STATS_LIMIT:
            try:
                with torch._C.DisableTorchFunction(), torch.no_grad():
                    lo_t, hi_t = torch.aminmax(live.detach())
                    lo, hi = float(lo_t), float(hi_t)
                    mean = float(live.detach().mean(dtype=torch.float64))
            except Exception:  # noqa: BLE001 - stats are a bonus
                lo = hi = mean = None
    finite = at = bad = None
    if len(read) > 5:
        finite, at = read[5], read[6]
        bad = read[7] if len(read) > 7 else (head[at] if at is not None and head and at < len(head) else None)
    elif head is not None and len(head) >= numel >= 0 and (dtype in _FLOATING or dtype in _COMPLEX):
        finite, at = _finite_head(head)  # (an empty tensor holds no NaN: finite)
        bad = head[at] if at is not None else None
    return Summary(shape, name, numel, head, lo, hi, mean, read[4] if len(read) > 4 else None, finite, at, bad)


def _leading(t: torch.Tensor, k: int) -> torch.Tensor:
    """The first ``k`` elements of ``t`` in row-major order, copying at most about one
    row: ``reshape(-1)`` of a transposed or strided tensor would copy all of it."""
    if _T.is_contiguous(t):
        return _T.view(t, -1)[:k]
    while _T.dim(t) > 1:
        inner = math.prod(t.shape[1:])
        if inner < k:
            return _T.reshape(t[: -(-k // inner)], -1)[:k]
        t = t[0]
    return t[:k]


def shape_of(t: torch.Tensor) -> tuple:
    """``t``'s sizes as plain values: ints, and the text of a symbolic or ragged size
    (``"j1"`` of a jagged nested tensor, ``"?"`` where a strided nested tensor has none)."""
    try:
        return plain_shape(t.shape)
    except RuntimeError:  # a strided nested tensor has no single size per dimension
        out: list = []
        for i in range(t.dim()):
            try:
                out.append(int(t.size(i)))
            except RuntimeError:
                out.append("?")
        return tuple(out)


def plain_shape(shape: Any) -> tuple:
    """A shape with every symbolic size (``SymInt``) spelled as text, so it can be JSON."""
    out = tuple(shape)
    for n in out:
        if type(n) is not int:
            return tuple(n if type(n) is int else str(n) for n in out)
    return out


def version_of(t: torch.Tensor) -> int:
    """``t._version``, or -1 for a tensor that keeps no version counter (made in
    ``torch.inference_mode()``: torch raises when asked)."""
    try:
        return int(t._version)
    except RuntimeError:
        return -1


def tensor_node(
    t: torch.Tensor,
    id: str,
    name: str | None,
    *,
    op: str | None = None,
    output_nr: int | None = None,
    max_elements: int = MAX_ELEMENTS,
    stats: bool = False,
    **extra: Any,
) -> TensorNode:
    """A :class:`TensorNode` with the facts of the live tensor ``t`` right now."""
    retains = bool(t.retains_grad)  # (read first: it answers is_leaf without a read of the node, see node_unsafe)
    is_leaf = not retains and t.is_leaf
    grad = t.grad if retains or is_leaf else None
    return TensorNode(
        id=id,
        name=name,
        shape=shape_of(t),
        dtype=dtype_name(t.dtype),
        device=str(t.device),
        is_leaf=is_leaf,
        requires_grad=t.requires_grad,
        retains_grad=retains,
        grad=summarize(grad, max_elements, stats=stats),
        version=version_of(t),
        is_view=bool(t._is_view()),
        op=op,
        output_nr=int(t.output_nr) if output_nr is None else output_nr,
        value=summarize(t, max_elements, stats=stats),
        is_parameter=isinstance(t, torch.nn.Parameter),
        **extra,
    )


#: The saved attributes of torch's own backward classes (``MulBackward0``: a fixed set, made in C++).
_SAVED_NAMES: dict[type, tuple[tuple[str, str, str | None], ...]] = {}
#: The same for classes made at run time (one per ``autograd.Function``, which a program may
#: define afresh each step): weakly keyed, so the cache never keeps a class alive.
_RUNTIME_SAVED_NAMES: "weakref.WeakKeyDictionary[type, tuple]" = weakref.WeakKeyDictionary()
_SAVED_TENSOR = getattr(torch._C._autograd, "SavedTensor", None)
_CUSTOM_NODE = torch.autograd.function.BackwardCFunction


def saved_plan(fn: Any) -> tuple[tuple[str, str, str | None], ...]:
    """``(attribute, short name, raw attribute or None)`` of each ``_saved_*`` attribute
    of ``fn``'s class (read once per class)."""
    names = _SAVED_NAMES.get(type(fn))
    return names if names is not None else _saved_names(fn)


def tensor_summary(value: torch.Tensor) -> Summary:
    """What a saved-entry record keeps of a saved tensor: its shape and dtype (and its number, for a 0-d one)."""
    try:
        shape = plain_shape(value.shape)
    except RuntimeError:
        shape = shape_of(value)
    head = None
    if shape == () and not _T.is_complex(value) and unreadable_why(value) is None:  # a wrapped number (w * 3 saves 3): worth its one read
        try:
            head = (_T.item(value),)
        except Exception:  # noqa: BLE001 - meta, fake or freed data holds no number
            head = None
    return tuple.__new__(Summary, (shape, dtype_name(value.dtype), numel_of(shape), head, None, None, None, None, None, None, None))


def saved_value(value: Any) -> tuple[Any, bool]:
    """``(plain, holds)``: a saved value that is not a tensor, as plain JSON-able data, and
    whether it holds tensors (so backward may still free it)."""
    cls = type(value)
    if value is None or cls in _NUMBERS:
        return value, False
    if (cls is tuple or cls is list) and len(value) <= 8 and _NUMBERS.issuperset(map(type, value)):
        return tuple(value), False  # (sizes, strides, dims: as _plain makes them, with no tensor held)
    return _plain(value), _holds_tensor(value)


def _saved_names(fn: Any) -> tuple[tuple[str, str, str | None], ...]:
    """``(attribute, short name, raw attribute or None)`` of each ``_saved_*`` attribute
    of ``fn``'s class; the raw one (``_raw_saved_*``) hands back the saved slot itself."""
    cls = type(fn)
    names = _SAVED_NAMES.get(cls)
    if names is not None:
        return names
    builtin = cls.__module__ == "builtins"
    if not builtin:
        try:
            names = _RUNTIME_SAVED_NAMES.get(cls)
        except TypeError:  # a class that takes no weak reference: not cached
            builtin = None
        if names is not None:
            return names
    attrs = set(dir(fn))
    names = tuple(
        (a, a.removeprefix("_saved_"), "_raw" + a if "_raw" + a in attrs else None)
        for a in sorted(attrs)
        if a.startswith("_saved_")
    )
    if issubclass(cls, _CUSTOM_NODE) and "_raw_saved_tensors" in attrs:  # ctx.save_for_backward of an autograd.Function
        names += (("saved_tensors", "tensors", "_raw_saved_tensors"),)
    if builtin:
        _SAVED_NAMES[cls] = names
    elif builtin is not None:
        _RUNTIME_SAVED_NAMES[cls] = names
    return names


def _slot_state(fn: Any, raw: str | None) -> SavedState | None:
    """What the raw saved slot(s) behind an attribute say without unpacking them:
    ``HIDDEN`` when a saved-tensor hook packed them (unpacking would run the user's
    unpack hook), ``FREED`` when backward released a tensor slot, else ``None`` (read
    the attribute itself).  Reading a freed attribute would cost an exception, ~9 µs."""
    if raw is None or _SAVED_TENSOR is None:
        return None
    try:
        slot = getattr(fn, raw)
    except Exception:  # noqa: BLE001 - fall back to reading the attribute itself
        return None
    slots = slot if isinstance(slot, (list, tuple)) else (slot,)
    for one in slots:
        if type(one) is _SAVED_TENSOR and one.unpack_hook is not None:
            return HIDDEN
    if type(slot) is _SAVED_TENSOR and slot.data is None:
        return FREED
    return None


_NUMBERS = frozenset({int, float, bool, complex})


def _plain(value: Any, depth: int = 0) -> Any:
    """A saved value that is not a tensor, as plain JSON-able data: numbers, tuples of
    numbers, or a short text for anything else."""
    cls = type(value)
    if cls is tuple or cls is list:  # sizes, strides, dims: the common case
        if len(value) <= 8 and all(type(v) in _NUMBERS for v in value):
            return tuple(value)
    elif value is None or cls in _NUMBERS:
        return value
    if cls is str:
        return value if cls is not str or len(value) <= 40 else value[:37] + "..."
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return str(value)
    if isinstance(value, (tuple, list)) and depth == 0:
        if len(value) > 8:
            return f"{cls.__name__} of {len(value)}"
        items = tuple(_plain(v, 1) for v in value)
        if all(type(v) in (int, float, bool, complex) for v in items):
            return items
        return "(" + ", ".join(map(str, items)) + ("," if len(items) == 1 else "") + ")"
    if isinstance(value, torch.Tensor):
        return f"{dtype_name(value.dtype)}{list(value.shape)}"
    if isinstance(value, torch.dtype):
        return dtype_name(value)
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _holds_tensor(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    return isinstance(value, (tuple, list)) and any(isinstance(v, torch.Tensor) for v in value)


def _unreadable_saved(exc: RuntimeError) -> SavedState:
    """``FREED`` when backward released the saved tensor; ``MODIFIED`` when it was
    changed in place after it was saved (backward would then fail)."""
    return MODIFIED if "modified by an inplace operation" in str(exc) else FREED


def _entry(fn: Any, attr: str, short: str, raw: str | None, resolve: Callable | None, previous: SavedEntry | None,
           book: StorageBook | None = None):
    """``(entry, volatile)`` for one saved attribute; ``volatile`` when backward may
    still change what it says (it holds a tensor).  With a ``book``, a tensor's storage is read too."""
    state = _slot_state(fn, raw)
    if state is not None:
        keep = previous if previous is not None else None
        if state is HIDDEN:
            kept = () if book is None else saved_storages(checkpoint_storages(fn, raw, book))
            return SavedEntry(short, HIDDEN, keep.tensor if keep else None, keep.summary if keep else None, None, kept), True
        # (An empty slot may also be a tensor that was never saved: on a first read,
        # read the attribute for real.)
        if previous is not None:
            return previous._replace(state=FREED), False
    try:
        value = getattr(fn, attr)
    except RuntimeError as exc:
        state = _unreadable_saved(exc)
        prev = previous or SavedEntry(short)
        return prev._replace(state=state), state is not FREED
    except Exception:  # noqa: BLE001 - an odd attribute must not break the walk
        prev = previous or SavedEntry(short)
        return prev._replace(state=UNREADABLE), True
    if isinstance(value, torch.Tensor):
        tid = resolve(value, short) if resolve is not None else None
        return SavedEntry(short, LIVE, tid, tensor_summary(value), None, () if book is None else saved_storages(book.of(value))), True
    holds = _holds_tensor(value)
    return SavedEntry(short, LIVE, None, None, _plain(value), saved_storages(book.of(value)) if holds and book is not None else ()), holds


def same_data(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors are the same data: PyTorch hands back a saved tensor as a new
    Python object, so identity is not enough (same memory, shape, strides and dtype)."""
    if a is b:
        return True
    try:
        return (  # (the address first: it tells most pairs apart)
            a.data_ptr() == b.data_ptr() and a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride()
            and a.device == b.device
        )
    except Exception:  # noqa: BLE001 - sparse, nested or freed storage
        return False


def saved_attributes(fn: Any, resolve: Callable | None = None, *, book: StorageBook | None = None) -> tuple[SavedEntry, ...]:
    """One :class:`~graphlens.graph.SavedEntry` per ``_saved_*`` attribute of a backward
    node.  A user's saved-tensor unpack hook is never run: such entries are ``HIDDEN``."""
    return read_saved(fn, resolve=resolve, book=book)[0]


def read_saved(
    fn: Any, previous: tuple | None = None, volatile: tuple = (), *, resolve: Callable | None = None,
    book: StorageBook | None = None,
) -> tuple[tuple, tuple]:
    """``(entries, volatile)``: :func:`saved_attributes` of ``fn`` and the positions of
    the attributes that backward may still free (the ones holding tensors).

    Given the ``previous`` entries and ``volatile`` positions of the same node, only
    those positions are read again: every other attribute is a plain value that never
    changes, or is already freed.  ``resolve(tensor, name)`` gives the id of the tensor
    node a saved tensor is, where known; a ``book`` (:class:`StorageBook`) numbers the
    storages of the saved tensors (``SavedEntry.storages``).
    """
    names = _saved_names(fn)
    if previous is not None:
        if not volatile:
            return previous, volatile
        out = list(previous)
        still = []
        for k in volatile:
            attr, short, raw = names[k]
            out[k], moving = _entry(fn, attr, short, raw, resolve, previous[k], book)
            if moving:
                still.append(k)
        return tuple(out), tuple(still)
    out = []
    moving_at = []
    for k, (attr, short, raw) in enumerate(names):
        entry, moving = _entry(fn, attr, short, raw, resolve, None, book)
        out.append(entry)
        if moving:
            moving_at.append(k)
    return tuple(out), tuple(moving_at)


def _kind(obj: Any) -> str:
    if isinstance(obj, torch.nn.Module):
        return f"an nn.Module ({type(obj).__name__})"
    if isinstance(obj, torch.optim.Optimizer):
        return f"an optimizer ({type(obj).__name__})"
    name = type(obj).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def flatten_tensors(obj: Any, where: str, out: list, *, depth: int = 0) -> None:
    """Collect the tensors of ``obj`` (a tensor, or a tuple/list/dict of them, as models
    return) into ``out`` as ``(where, tensor)``; raise a ``TypeError`` naming ``where``
    for anything else."""
    if isinstance(obj, torch.Tensor):
        out.append((where, obj))
    elif isinstance(obj, (tuple, list)) and depth < 8:
        for i, item in enumerate(obj):
            flatten_tensors(item, f"{where}[{i}]", out, depth=depth + 1)
    elif isinstance(obj, dict) and depth < 8:
        for key, item in obj.items():
            flatten_tensors(item, f"{where}[{key!r}]", out, depth=depth + 1)
    elif hasattr(obj, "_fields") and isinstance(obj, tuple):  # pragma: no cover - namedtuple handled above
        flatten_tensors(tuple(obj), where, out, depth=depth + 1)
    elif isinstance(obj, torch.nn.Module):
        raise TypeError(
            f"{where} is {_kind(obj)}, not a tensor: pass the tensor the model returned "
            f"(for example snapshot(model(x)) or snapshot(loss)), and module=model to name its parameters"
        )
    else:
        raise TypeError(
            f"{where} must be a torch.Tensor (or a tuple, list or dict of tensors), not {_kind(obj)}"
        )


def check_roots(func: str, roots: tuple) -> list:
    """The ``(where, tensor)`` pairs of ``roots`` for ``func``, or a clear error."""
    if not roots:
        raise TypeError(
            f"{func}() needs at least one root tensor, e.g. {func}(loss) "
            f"or {func}(out1, out2) for several outputs"
        )
    pairs: list = []
    for i, root in enumerate(roots):
        flatten_tensors(root, f"roots[{i}]" if len(roots) > 1 else "root", pairs)
    if not pairs:
        raise TypeError(f"{func}() got no tensor in {roots!r}: pass the output tensor(s), e.g. {func}(loss)")
    return pairs
