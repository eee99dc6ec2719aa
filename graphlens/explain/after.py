"""What a trace cannot know: tensors changed in place after its block ended, told apart from what it saw."""

from __future__ import annotations

import weakref
from typing import Any

import torch

from .._live.capture import _VERSION
from .._live.facts import summarize, version_of
from ..graph import Graph
from .types import Explanation

__all__ = ["moved_after", "changed_after_sentence", "after_trace", "with_later_version"]


def moved_after(g: Graph, trace: Any) -> dict[str, tuple[int, int]]:
    """``{tensor id: (version at the block's end, version now)}`` for the tensors of ``g`` whose
    version moved after the trace's block ended (empty for a graph without its trace, or a
    trace still open: then nothing has ended)."""
    rec = getattr(trace, "_rec", None)
    if rec is None or not getattr(rec, "ended", False):
        return {}
    out: dict[str, tuple[int, int]] = {}
    recs, ends = rec.tensors, rec.end_versions
    for node in g.tensors:
        i = int(node.id[1:])
        if i >= len(recs) or i in rec.stale:
            continue
        t = g.tensor(node.id)
        if t is None:
            continue
        end = ends.get(i, recs[i][_VERSION])
        now = version_of(t)
        if end >= 0 and now >= 0 and now != end:
            out[node.id] = (end, now)
    return out


def changed_after_sentence(who: str, end: int, now: int, finite: bool | None = None) -> str:
    """The sentence that says the tensor changed after the trace, and what the answer is about
    (``finite`` False: its values now hold NaN or infinity, which the trace never saw)."""
    held = " Its values now hold NaN or inf, which the trace never saw." if finite is False else ""
    return (
        f"Note: {who} was changed in place after the trace's block ended (its version counter went from {end} to "
        f"{now}): graphlens did not see that change, nor what made it; this answer holds for what the trace saw, not "
        f"for what happened since.{held}"
    )


def with_later_version(g: Graph, tid: str, live: torch.Tensor) -> Graph | None:
    """``g`` with one more record: the tensor ``tid`` as it is now, a later version no op the
    trace saw made or used (what a non-finite value written after the block is); None when
    its value now is finite (then the records say all there is)."""
    now = summarize(live)
    if now is None or now.finite is not False:
        return None
    node = g.node(tid)
    later = node._replace(id=f"t{len(g.tensors)}", value=now, op=None, flowed=(), detached_from=None, made_by=None,
                          line=None, code=None)
    refs = {n.id: weakref.ref(t) for n in g.tensors if (t := g.tensor(n.id)) is not None}
    refs.pop(tid, None)  # (the live tensor is the later version now)
    refs[later.id] = weakref.ref(live)
    return Graph(list(g.tensors) + [later], g.ops, g.edges, [r.id for r in g.roots], source=g.source, refs=refs,
                 notes=dict(g.notes))


def after_trace(e: Explanation, moved: tuple[int, int], *, reason: bool = True) -> Explanation:
    """``e`` with the sentence (and, with ``reason``, the reason code) saying the tensor changed
    after the block ended, in place of the guess of how (in place after the block, or through .data)."""
    who = e.tensor_name or "the tensor"
    sentences = [
        s.replace(" (in place after the block, or through .data)", " (in place, after the trace's block ended)")
        for s in e.sentences
    ] + [changed_after_sentence(who, *moved)]
    return Explanation(
        list(e.reasons) + (["changed_after_trace"] if reason else []), sentences, fix=e.fix, tensor_name=e.tensor_name, tensor_id=e.tensor_id,
        graph=e.graph, path=e.path, edges=e.edges, message=e.message, op=e.op, line=e.line, lineno=e.lineno, cause=e.cause,
        facts=e.facts,
    )
