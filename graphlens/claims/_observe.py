"""Small observation helpers the claim programs share: attempts, grads, values, saved bytes."""

from __future__ import annotations

import contextlib
import warnings
from typing import Any, Callable, Iterator

import torch

__all__ = ["attempt", "failed", "short", "grad_of", "grad_list", "values", "fn_name", "same", "SavedBytes", "backward_ends"]


def attempt(action: Callable[[], Any]) -> str:
    """``"ok"`` when ``action()`` runs, else ``"ExceptionType: message"`` (first line)."""
    try:
        action()
    except Exception as exc:  # noqa: BLE001 - what failed is the observation
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip()
    return "ok"


def failed(outcome: str, kind: str | None = None) -> bool:
    """Whether an :func:`attempt` outcome is a failure (of type ``kind`` when given)."""
    if outcome == "ok":
        return False
    return kind is None or outcome.startswith(kind + ":")


def short(outcome: str, limit: int = 90) -> str:
    """An :func:`attempt` outcome cut to its first sentence and at most ``limit`` characters."""
    head = outcome.split(". ", 1)[0].rstrip(".")
    return head if len(head) <= limit else head[: limit - 1] + "…"


def grad_of(t: torch.Tensor) -> list | None:
    """``t.grad`` as a list (``None`` when absent), read without PyTorch's warning
    about non-leaf ``.grad``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = t.grad
    return None if g is None else values(g)


def grad_list(t: torch.Tensor) -> list | None:
    """Like :func:`grad_of`, but read with ``tolist()`` alone (no ``detach()``), so that
    inside :func:`graphlens.trace` it records nothing."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = t.grad
    return None if g is None else _rounded(g.tolist(), 6)


def values(t: torch.Tensor | None, digits: int = 6) -> list | float | None:
    """The values of ``t`` as (nested) Python floats rounded to ``digits`` places."""
    if t is None:
        return None
    return _rounded(t.detach().tolist(), digits)


def _rounded(data: list | float, digits: int) -> list | float:
    return [_rounded(x, digits) for x in data] if isinstance(data, list) else round(float(data), digits)


def fn_name(t: torch.Tensor) -> str | None:
    """The class name of ``t.grad_fn`` (``"MulBackward0"``), or ``None``."""
    return None if t.grad_fn is None else type(t.grad_fn).__name__


def same(a: list | None, b: list | None, *, tol: float = 1e-6) -> bool:
    """Whether two value lists (from :func:`values`/:func:`grad_of`) are equal within ``tol``."""
    if a is None or b is None:
        return a is b
    return torch.allclose(torch.tensor(a), torch.tensor(b), rtol=tol, atol=tol)


class SavedBytes:
    """Counts the tensors autograd saves for backward while active, with
    ``torch.autograd.graph.saved_tensors_hooks``: ``count``, ``bytes``, and
    ``leaf_bytes`` (the part held by leaves, e.g. weights and inputs, which stay
    alive anyway)."""

    def __init__(self) -> None:
        self.count = 0
        self.bytes = 0
        self.leaf_bytes = 0

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        size = t.numel() * t.element_size()
        self.count += 1
        self.bytes += size
        if t.is_leaf:
            self.leaf_bytes += size
        return t

    def as_dict(self) -> dict:
        """``{"saved_tensors", "saved_bytes", "leaf_bytes"}``."""
        return {"saved_tensors": self.count, "saved_bytes": self.bytes, "leaf_bytes": self.leaf_bytes}

    @contextlib.contextmanager
    def measure(self) -> Iterator["SavedBytes"]:
        with torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t):
            yield self


def backward_ends(root: torch.Tensor) -> tuple[list[str], list[Any]]:
    """Walk ``root.grad_fn.next_functions`` and return the class names of the nodes
    where the walk ends (no further node) and the tensors those nodes accumulate into
    (``AccumulateGrad.variable``; ``None`` for other kinds of end node)."""
    ends: list[str] = []
    variables: list[Any] = []
    seen: set = set()
    stack = [root.grad_fn] if root.grad_fn is not None else []
    while stack:
        fn = stack.pop()
        if fn in seen:
            continue
        seen.add(fn)
        children = [child for child, _ in fn.next_functions if child is not None]
        if not children:
            ends.append(type(fn).__name__)
            variables.append(getattr(fn, "variable", None))
        stack.extend(children)
    return ends, variables
