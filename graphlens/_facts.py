"""Reading facts off live tensors and backward nodes as short strings (no tensor is kept)."""

from __future__ import annotations

import math
from typing import Any

import torch

from .graph import TensorNode

__all__ = ["summarize", "dtype_name", "tensor_node", "saved_attributes", "check_roots", "flatten_tensors"]

#: How many elements a value summary shows before it elides the rest.
MAX_ELEMENTS = 6


_DTYPE_NAMES: dict = {}


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float32`` -> ``"float32"``."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).removeprefix("torch.")
    return name


def _num(v: Any) -> str:
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
    try:
        if t.layout != torch.strided or t.is_meta or t.is_quantized:
            return f"<{dtype_name(t.dtype)}{list(t.shape)}>"
        n = t.numel()
        dim = t.dim()
        if dim == 0:
            return _num(t.item())
        if max_elements <= 0:
            head = []
        elif dim == 1:
            head = (t if n <= max_elements else t[:max_elements]).tolist()
        else:
            flat = t.reshape(-1)
            head = (flat if n <= max_elements else flat[:max_elements]).tolist()
    except Exception:  # noqa: BLE001 - a summary must never break the caller
        return f"<{type(t).__name__}>"
    body = ", ".join(_num(v) for v in head)
    if n > len(head):
        body = (body + ", " if body else "") + f"… ({n} elements)"
    return f"[{body}]"


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
        version=int(t._version),
        is_view=bool(t._is_view()),
        op=op,
        output_nr=int(t.output_nr) if output_nr is None else output_nr,
        value=summarize(t, max_elements),
        is_parameter=isinstance(t, torch.nn.Parameter),
        **extra,
    )


_SAVED_NAMES: dict[type, tuple[str, ...]] = {}


def _saved_names(fn: Any) -> tuple[str, ...]:
    cls = type(fn)
    names = _SAVED_NAMES.get(cls)
    if names is None:
        names = tuple(a for a in dir(fn) if a.startswith("_saved_"))
        _SAVED_NAMES[cls] = names
    return names


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"{dtype_name(value.dtype)}{list(value.shape)}"
    if isinstance(value, (tuple, list)):
        if len(value) > 4:
            return f"{type(value).__name__} of {len(value)}"
        return "(" + ", ".join(_describe(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, (int, float, bool, complex)):
        return _num(value)
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def saved_attributes(fn: Any) -> tuple[tuple[str, str], ...]:
    """Each ``_saved_*`` attribute of a backward node with a summary, ``"freed"`` once
    backward released it (reading it then raises in PyTorch)."""
    out = []
    for attr in _saved_names(fn):
        try:
            value = getattr(fn, attr)
        except RuntimeError:
            out.append((attr.removeprefix("_saved_"), "freed"))
            continue
        except Exception as exc:  # noqa: BLE001 - an odd attribute must not break the walk
            out.append((attr.removeprefix("_saved_"), f"<unreadable: {type(exc).__name__}>"))
            continue
        out.append((attr.removeprefix("_saved_"), _describe(value)))
    return tuple(out)


def _kind(obj: Any) -> str:
    if isinstance(obj, torch.nn.Module):
        return f"an nn.Module ({type(obj).__name__})"
    if isinstance(obj, torch.optim.Optimizer):
        return f"an optimizer ({type(obj).__name__})"
    return f"a {type(obj).__name__}"


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
