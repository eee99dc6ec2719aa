"""Keeping deep graphs safe to free after graphlens walked them (any thread, any depth).

Why it is needed (torch 2.13): once graphlens has the Python wrapper of a backward node
(from ``grad_fn`` or ``next_functions``), that wrapper owns the node and the node keeps
the wrapper alive, so while the graph lives each wrapped node has two owners.  PyTorch
frees a graph iteratively only through nodes with one owner (``gatherFunctions`` in
``torch/csrc/autograd/function.cpp``); a wrapped node is freed in place instead, and
frees its own children from inside its destructor: about 200 bytes of C stack per node,
so a chain of ~40,000 wrapped nodes overflows an 8 MiB stack and kills the interpreter.
A plain Python walk of ``next_functions`` does the same without graphlens.

The remedy: each walked node of a deep graph keeps the tuple of its children's wrappers
(its own ``next_functions``) in its ``metadata`` under :data:`KEEP_KEY`.  When the node
dies, its children are released by the deallocation of that dict and tuple, which
CPython flattens into a loop (its "trashcan" nests at most ~50 container frees), in
whatever thread frees the graph and whatever that thread's stack size.  The tuple holds
only what the node already owns, so no node or tensor lives a moment longer.  Graphs of
fewer than :data:`KEEP_MIN_NODES` nodes are never touched.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any, Iterable

__all__ = ["DeepGraphWarning", "KEEP_KEY", "KEEP_MIN_NODES", "keep_children", "keep_behind", "keep_walked"]

#: The one key graphlens writes into ``grad_fn.metadata``, on the nodes of deep graphs only.
KEEP_KEY = "graphlens.children"

#: Graphs with fewer walked nodes are left untouched: freeing that many wrapped nodes
#: in place needs about 1 MiB of C stack, which any default thread stack holds.
KEEP_MIN_NODES = 5_000


class DeepGraphWarning(RuntimeWarning):
    """Freeing a very deep autograd graph after a walk may overflow the C stack."""


def keep_children(fn: Any, nexts: tuple | None = None) -> tuple:
    """Make ``fn`` hold the wrappers of its children until it dies (see the module
    docstring); returns ``nexts`` (read now when not given)."""
    if nexts is None:
        nexts = fn.next_functions
    if nexts:
        try:
            fn.metadata[KEEP_KEY] = nexts
        except Exception as exc:  # noqa: BLE001 - never fail the walk; say what is at risk
            _warn(exc)
    return nexts


def keep_behind(fn: Any) -> None:
    """A trace's graph has just grown past :data:`KEEP_MIN_NODES`: make every node it can
    reach from ``fn`` (the nodes it wrapped before, one by one, while the graph was small)
    hold its children too, so that freeing the whole graph stays flat.  Nodes that already
    hold theirs are not walked again."""
    key = KEEP_KEY
    seen: set = set()
    stack = [fn]
    try:
        while stack:
            node = stack.pop()
            if node is None or node in seen:
                continue
            seen.add(node)
            nexts = node.next_functions
            if not nexts:
                continue
            meta = node.metadata
            if key in meta:
                continue  # (kept already, and so is everything behind it that was walked)
            meta[key] = nexts
            stack.extend(c for c, _ in nexts)
    except Exception as exc:  # noqa: BLE001
        _warn(exc)
    finally:
        node = stack = None


def keep_walked(fns: Iterable[Any], nexts: Iterable[tuple]) -> None:
    """After a walk: every node of ``fns`` keeps its ``next_functions`` (parallel ``nexts``)."""
    key = KEEP_KEY
    try:
        for fn, nf in zip(fns, nexts):
            if nf:
                fn.metadata[key] = nf
    except Exception as exc:  # noqa: BLE001
        _warn(exc)


_warned = False


def _warn(exc: BaseException) -> None:
    global _warned
    if _warned:
        return
    _warned = True
    warnings.warn(
        f"graphlens could not protect a deep autograd graph it walked ({exc}); freeing that graph may "
        f"overflow the C stack. Free it on a thread with a large stack (threading.stack_size()).",
        DeepGraphWarning,
        stacklevel=_user_stacklevel(),
    )


def _user_stacklevel() -> int:
    """The ``stacklevel`` that points a warning at the first frame outside graphlens."""
    here = os.path.dirname(os.path.abspath(__file__)) + os.sep
    frame = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(here):
        frame = frame.f_back
        level += 1
    return level
