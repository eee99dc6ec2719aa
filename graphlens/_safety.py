"""Keeping deep graphs safe to free after graphlens walked them."""

from __future__ import annotations

import os
import sys
import threading
import warnings

__all__ = ["DeepGraphWarning", "guard_teardown", "DEEP_GRAPH_NODES"]

#: Graphs with at least this many backward nodes get the teardown guard.
DEEP_GRAPH_NODES = 20_000

# Measured on torch 2.13 / CPython 3.11: freeing a chain whose node wrappers once
# existed takes about 300 bytes of C stack per node.  Keep a wide margin.
_BYTES_PER_NODE = 1024
_BASE = 16 * 2**20
_CAP = 8 * 2**30


class DeepGraphWarning(RuntimeWarning):
    """Freeing a very deep autograd graph after a walk may overflow the C stack."""


def guard_teardown(n_nodes: int) -> None:
    """Make it safe to free a graph of ``n_nodes`` backward nodes after a Python walk.

    Once Python wrappers of a graph's nodes have existed, PyTorch frees that graph
    recursively, about 300 bytes of C stack per node: a chain of ~50k nodes overflows
    the default 8 MiB stack and kills the interpreter.  On Linux the main thread's stack
    grows on demand up to the soft ``RLIMIT_STACK``, so raising that limit (never past
    the hard limit) is enough.  The limit is process-wide, so it is raised from any
    thread; but a thread other than the main one has a stack of fixed size, so a graph
    walked there may still crash when that thread (or another non-main one) frees it:
    a :class:`DeepGraphWarning` then says so, once per call site.
    """
    if n_nodes < DEEP_GRAPH_NODES:
        return
    need = min(_BASE + n_nodes * _BYTES_PER_NODE, _CAP)
    reason = None
    if not sys.platform.startswith("linux"):
        reason = f"raising the stack limit is only done on Linux, not {sys.platform}"
    else:
        try:
            import resource

            soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
            if soft != resource.RLIM_INFINITY and soft < need:
                target = need if hard == resource.RLIM_INFINITY else min(need, hard)
                resource.setrlimit(resource.RLIMIT_STACK, (target, hard))
                if target < need:
                    reason = f"the hard stack limit ({hard} bytes) is below the {need} bytes needed"
        except (ImportError, ValueError, OSError) as exc:
            reason = f"the stack limit could not be raised ({exc})"
        if reason is None and threading.current_thread() is not threading.main_thread():
            reason = (
                "the walk ran outside the main thread: the raised stack limit protects a free on the "
                "main thread, but this thread's stack has a fixed size (set a larger one with "
                "threading.stack_size() before starting the thread, or free the graph on the main thread)"
            )
    if reason is None:
        return
    warnings.warn(
        f"graphlens walked a graph of {n_nodes} backward nodes; freeing it may crash the "
        f"interpreter because {reason}. Run such graphs on the main thread (Linux), or "
        f"raise the stack limit before starting Python (ulimit -s unlimited).",
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
