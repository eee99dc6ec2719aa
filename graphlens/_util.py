"""Small shared helpers: pausing the garbage collector, finding tensors in containers."""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Any, Iterator

import torch

__all__ = ["paused_gc", "remove_all", "tensors_in"]

_Tensor = torch.Tensor


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector for a block that makes many small objects.

    torch alone holds ~200k tracked objects, so a collection triggered by graphlens's own
    allocations would cost more than the work itself.  The previous state is restored,
    also on an exception; a collector the user disabled stays disabled.  An interrupt
    (``KeyboardInterrupt``) arriving at any line here, even while the collector is being
    switched back on, still leaves it as it was: the restore is written twice, the second
    in an outer ``finally`` that runs when the first was cut short."""
    was_enabled = gc.isenabled()
    try:
        try:
            gc.disable()
            yield
        finally:
            if was_enabled:
                gc.enable()
    finally:
        if was_enabled:
            gc.enable()


def tensors_in(obj: Any, out: list | None = None, *, depth: int = 1) -> list:
    """The tensors in ``obj``: ``obj`` itself, or the items of lists and tuples (and the
    values of dicts) down to ``depth`` levels of nesting, in order.  ``out`` is appended to
    and returned, so hot paths can reuse one list."""
    if out is None:
        out = []
    if isinstance(obj, _Tensor):
        out.append(obj)
    elif depth >= 0 and isinstance(obj, (list, tuple)):
        for item in obj:
            if isinstance(item, _Tensor):
                out.append(item)
            elif depth > 0 and isinstance(item, (list, tuple, dict)):
                tensors_in(item, out, depth=depth - 1)
    elif depth >= 0 and isinstance(obj, dict):
        for item in obj.values():
            if isinstance(item, _Tensor):
                out.append(item)
            elif depth > 0 and isinstance(item, (list, tuple, dict)):
                tensors_in(item, out, depth=depth - 1)
    return out


def remove_all(handles: list) -> None:
    """Remove every hook of ``handles``, emptying the list as it goes (what
    ``RemovableHandle.remove`` does, in one loop: a backward of many small nodes removes as
    many hooks as it ran nodes)."""
    while handles:
        h = handles[-1]
        try:
            hooks = h.hooks_dict_ref()
            if hooks is not None:
                hooks.pop(h.id, None)
            if h.extra_dict_ref:
                h.remove()
        except AttributeError:  # a torch whose handles look otherwise
            h.remove()
        handles.pop()
