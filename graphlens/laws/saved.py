"""Law 10: backward frees what the forward pass saved, so a second backward raises unless retain_graph=True."""

from __future__ import annotations

from typing import Any

import torch

from ..programs import _subject, _tensors_in, backward_nodes
from ._base import _fail, _Watch

__all__ = ["law_saved_freed"]


_SAVED_KEY = "graphlens.laws.saved"


def _holds_saved_tensor(fn: Any) -> bool:
    """Whether a node holds a tensor among its ``_saved_*`` attributes (before backward)."""
    for attr in dir(fn):
        if attr.startswith("_saved_"):
            try:
                value = getattr(fn, attr)
            except RuntimeError:
                return True  # already freed: it did hold one
            items = value if isinstance(value, (tuple, list)) else (value,)
            if any(isinstance(v, torch.Tensor) for v in items):
                return True
    return False


def law_saved_freed(subject: Any, **_: Any) -> None:
    """Law 10: a second backward raises iff some node it would run saved a tensor during
    forward; with ``retain_graph=True`` it never raises.

    "Saved" is what ``saved_tensors_hooks`` see being packed, plus two things the plain
    statement misses: the Python numbers an op keeps as 0-d "wrapped number" tensors
    (``w * 0.5`` keeps ``0.5``; backward frees them, but the hooks never see them), and a
    ``CopySlices`` node (``h[0] = y``), which saves no tensor but drops the node it wraps
    when backward releases the graph."""
    subject = _subject(subject)
    packed = [0]
    marked: list = []

    def pack(t):
        packed[0] += 1
        return t

    def on_call(func, args, ins, rg_before, grad_mode, out):
        if packed[0] == 0:
            return
        packed[0] = 0
        outs: list = []
        _tensors_in(out, outs)
        target = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if target is not None and (out is target or getattr(func, "__name__", "") == "__setitem__"):
            outs.append(target)  # an in-place op: its node is the target's new grad_fn
        for t in outs:
            if t.grad_fn is not None:
                t.grad_fn.metadata[_SAVED_KEY] = True
                marked.append(t.grad_fn)

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), _Watch(on_call):
        a = subject.run()
    nodes, _ = backward_nodes(a.losses)
    saving = [n for n in nodes if n.metadata.get(_SAVED_KEY)]
    # A Python number an op saved (w * 0.5 keeps 0.5 as a 0-d "wrapped number" tensor)
    # is freed by backward like any saved tensor, but saved_tensors_hooks never see it.
    wrapped = [n for n in nodes if not n.metadata.get(_SAVED_KEY) and _holds_saved_tensor(n)]
    # CopySlices (an in-place op on a view, x[0] = y) saves no tensor, but backward drops
    # the node it wraps, so it cannot run twice either.
    copies = [n for n in nodes if type(n).__name__ == "CopySlices"]
    saved = bool(saving or wrapped or copies)
    what = ", ".join(
        [f"{type(n).__name__} ({a.name_of(n)})" for n in saving[:3]]
        + [f"{type(n).__name__} ({a.name_of(n)}, a saved Python number)" for n in wrapped[:3]]
        + [f"CopySlices ({a.name_of(n)}, drops its wrapped node)" for n in copies[:3]]
    ) or "no node"
    del nodes, saving, marked, a

    b = subject.run()
    b.backward()
    try:
        b.backward()
        raised = None
    except RuntimeError as exc:
        raised = exc
    if saved and raised is None:
        raise _fail(10, subject, f"{what} saved tensors during forward, yet a second backward ran without error")
    if not saved and raised is not None:
        raise _fail(10, subject, f"nothing reachable saved a tensor, yet a second backward raised: {raised}")
    if raised is not None and "second time" not in str(raised):
        raise _fail(10, subject, f"the second backward raised an unexpected error: {raised}")
    c = subject.run()
    try:
        c.backward(retain_graph=True)
        c.backward(retain_graph=True)
        c.backward()
    except RuntimeError as exc:
        raise _fail(10, subject, f"backward with retain_graph=True then backward again raised: {exc}") from exc
