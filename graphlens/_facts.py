"""Reading facts off live tensors and backward nodes as short strings (no tensor is kept)."""

from __future__ import annotations

import math
from typing import Any

import torch

from .graph import TensorNode

__all__ = [
    "summarize", "read_head", "format_head", "dtype_name", "tensor_node", "version_of", "saved_attributes",
    "read_saved", "check_roots", "flatten_tensors",
]

#: How many elements a value summary shows before it elides the rest.
MAX_ELEMENTS = 6


_DTYPE_NAMES: dict = {}
_STRIDED = torch.strided


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float32`` -> ``"float32"``."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).removeprefix("torch.")
    return name


def _num(v: Any) -> str:
    cls = type(v)
    if cls is float:
        # format() already spells nan/inf as str() does; only -0.0 needs care.
        return "0" if v == 0 else format(v, ".4g")
    if cls is int or cls is bool:
        return str(v)
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            return str(v)
        if v == 0:
            return "0"
        return f"{v:.4g}"
    if isinstance(v, complex):
        return f"{v.real:.4g}{v.imag:+.4g}j"
    return str(v)


def summarize(t: torch.Tensor | None, max_elements: int = MAX_ELEMENTS) -> str | None:
    """A short, exact-enough text for a tensor's values: ``"[0.5, 1, 1.5]"``.

    Shows at most ``max_elements`` numbers (4 significant digits), then ``…`` and the
    element count.  A 0-d tensor gives one number.  Never raises on odd tensors
    (meta, sparse, quantized): it then gives the shape only.
    """
    if t is None:
        return None
    return format_head(read_head(t, max_elements))


def read_head(t: torch.Tensor, max_elements: int = MAX_ELEMENTS) -> str | tuple:
    """The part of :func:`summarize` that reads the tensor: a finished text, or
    ``(element count, first numbers)`` for :func:`format_head` to spell later (the
    numbers are plain Python values, so nothing refers to the tensor)."""
    try:
        if t.layout != _STRIDED or t.is_meta or t.is_quantized:
            return f"<{dtype_name(t.dtype)}{list(t.shape)}>"
        dim = t.dim()
        if dim == 0:
            return _num(t.item())
        n = t.numel()
        if max_elements <= 0 or n == 0:
            return (n, ())
        if n <= max_elements:
            return (n, tuple(t.reshape(-1).tolist() if dim != 1 else t.tolist()))
        return (n, tuple(_leading(t, max_elements).tolist()))
    except Exception:  # noqa: BLE001 - a summary must never break the caller
        return f"<{type(t).__name__}>"


def _leading(t: torch.Tensor, k: int) -> torch.Tensor:
    """The first ``k`` elements of ``t`` in row-major order, copying at most about one
    row: ``reshape(-1)`` of a transposed or strided tensor would copy all of it."""
    if t.is_contiguous():
        return t.view(-1)[:k]
    while t.dim() > 1:
        inner = math.prod(t.shape[1:])
        if inner < k:
            return t[: -(-k // inner)].reshape(-1)[:k]
        t = t[0]
    return t[:k]


def format_head(head: str | tuple) -> str:
    """Spell what :func:`read_head` read: ``"[0.5, 1, 1.5]"``."""
    if type(head) is str:
        return head
    n, values = head
    body = ", ".join(map(_num, values))
    if n > len(values):
        body = (body + ", " if body else "") + f"… ({n} elements)"
    return f"[{body}]"


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
    **extra: Any,
) -> TensorNode:
    """A :class:`TensorNode` with the facts of the live tensor ``t`` right now."""
    grad = t.grad if t.is_leaf or t.retains_grad else None
    return TensorNode(
        id=id,
        name=name,
        shape=tuple(t.shape),
        dtype=dtype_name(t.dtype),
        device=str(t.device),
        is_leaf=t.is_leaf,
        requires_grad=t.requires_grad,
        retains_grad=bool(t.retains_grad),
        grad=summarize(grad, max_elements),
        version=version_of(t),
        is_view=bool(t._is_view()),
        op=op,
        output_nr=int(t.output_nr) if output_nr is None else output_nr,
        value=summarize(t, max_elements),
        is_parameter=isinstance(t, torch.nn.Parameter),
        **extra,
    )


_SAVED_NAMES: dict[type, tuple[tuple[str, str, str | None], ...]] = {}
_SAVED_TENSOR = getattr(torch._C._autograd, "SavedTensor", None)


def _saved_names(fn: Any) -> tuple[tuple[str, str, str | None], ...]:
    """``(attribute, short name, raw attribute or None)`` of each ``_saved_*`` attribute
    of ``fn``'s class; the raw one (``_raw_saved_*``) hands back the saved slot itself."""
    cls = type(fn)
    names = _SAVED_NAMES.get(cls)
    if names is None:
        attrs = set(dir(fn))
        names = tuple(
            (a, a.removeprefix("_saved_"), "_raw" + a if "_raw" + a in attrs else None)
            for a in sorted(attrs)
            if a.startswith("_saved_")
        )
        _SAVED_NAMES[cls] = names
    return names


def _released(fn: Any, raw: str | None) -> bool:
    """Whether backward freed the saved tensor behind ``raw``, checked without the
    exception (with its long message) that reading a freed attribute costs, ~9 µs.
    Only for a slot known to have held a tensor: an empty slot with no unpack hook was
    then freed; anything else (lists, tensors packed by saved-tensor hooks) is left to
    a real read."""
    if raw is None or _SAVED_TENSOR is None:
        return False
    try:
        slot = getattr(fn, raw)
        return type(slot) is _SAVED_TENSOR and slot.data is None and slot.unpack_hook is None
    except Exception:  # noqa: BLE001 - fall back to reading the attribute itself
        return False


_INTS = {int}
_PLAIN = (int, float, bool, complex)


def _describe(value: Any) -> str:
    cls = type(value)
    if cls is tuple or cls is list:
        n = len(value)
        if n > 4:
            return f"{cls.__name__} of {n}"
        if n and set(map(type, value)) <= _INTS:  # sizes, strides, dims: the common case
            return "(" + ", ".join(map(str, value)) + ("," if n == 1 else "") + ")"
    elif cls is int or value is None:
        return str(value)
    if isinstance(value, torch.Tensor):
        return f"{dtype_name(value.dtype)}{list(value.shape)}"
    if isinstance(value, (tuple, list)):
        if len(value) > 4:
            return f"{type(value).__name__} of {len(value)}"
        return "(" + ", ".join(_describe(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, _PLAIN):
        return _num(value)
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def saved_attributes(fn: Any) -> tuple[tuple[str, str], ...]:
    """Each ``_saved_*`` attribute of a backward node with a summary: ``"freed"`` once
    backward released it, ``"modified in place"`` when it changed after it was saved."""
    return read_saved(fn)[0]


def _holds_tensor(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    return isinstance(value, (tuple, list)) and any(isinstance(v, torch.Tensor) for v in value)


#: How a saved tensor that was changed in place since it was saved is summarised.
MODIFIED_IN_PLACE = "modified in place"


def _unreadable_saved(exc: RuntimeError) -> str:
    """``"freed"`` when backward released the saved tensor; ``"modified in place"``
    when it was changed after it was saved (backward would then fail)."""
    return MODIFIED_IN_PLACE if "modified by an inplace operation" in str(exc) else "freed"


def read_saved(fn: Any, previous: tuple | None = None, volatile: tuple = ()) -> tuple[tuple, tuple]:
    """``(summaries, volatile)``: :func:`saved_attributes` of ``fn`` and the positions
    of the attributes that backward may still free (the ones holding tensors).

    Given the ``previous`` summaries and ``volatile`` positions of the same node, only
    those positions are read again: every other attribute is a plain value that never
    changes, or is already freed.
    """
    if previous is not None:
        if not volatile:
            return previous, volatile
        names = _saved_names(fn)
        out = list(previous)
        still = []
        for k in volatile:
            attr, short, raw = names[k]
            if _released(fn, raw):
                out[k] = (short, "freed")
                continue
            try:
                out[k] = (short, _describe(getattr(fn, attr)))
            except RuntimeError as exc:
                out[k] = (short, _unreadable_saved(exc))
                continue
            except Exception as exc:  # noqa: BLE001 - an odd attribute must not break the walk
                out[k] = (short, f"<unreadable: {type(exc).__name__}>")
            still.append(k)
        return tuple(out), tuple(still)
    out = []
    moving = []
    for k, (attr, short, _) in enumerate(_saved_names(fn)):
        # (An empty slot may also be a tensor that was never saved: read it for real.)
        try:
            value = getattr(fn, attr)
        except RuntimeError as exc:
            out.append((short, _unreadable_saved(exc)))
            if "freed" not in out[-1][1]:
                moving.append(k)
            continue
        except Exception as exc:  # noqa: BLE001 - an odd attribute must not break the walk
            out.append((short, f"<unreadable: {type(exc).__name__}>"))
            moving.append(k)
            continue
        if _holds_tensor(value):
            moving.append(k)
        out.append((short, _describe(value)))
    return tuple(out), tuple(moving)


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
