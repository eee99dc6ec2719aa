"""Notes for a claim's evidence graphs, computed from what the run observed (never written in by hand)."""

from __future__ import annotations

from typing import Any, Callable, Mapping

from ..flowed import flowed_items
from ..graph import FREED, Graph, TensorNode
from ..values import PRECISION, Summary

__all__ = ["observed_notes", "annotate_evidence", "NoteMaker"]

#: A claim's own notes: ``(facts, graph, index) -> {node id or name: text}``, from what was observed.
NoteMaker = Callable[[Mapping[str, Any], Graph, int], Mapping[str, Any]]


def _fmt(s: Summary | None) -> str:
    return "None" if s is None else s.format(PRECISION)


def _reached(g: Graph, tid: str) -> bool:
    """Whether a root's backward path (``next`` edges, then AccumulateGrad) reaches ``tid``."""
    adj = g.adjacency
    t = g.node(tid)
    goal = adj.accumulate_grad.get(tid) if t.is_leaf else t.op
    if goal is None:
        return False
    stack = [r.op for r in g.roots if r.op is not None]
    seen = set(stack)
    while stack:
        op = stack.pop()
        if op == goal:
            return True
        for nxt in adj.next.get(op, ()):
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return False


def _sum_text(parts: list[Summary]) -> str:
    return " + ".join(_fmt(p) for p in parts)


def observed_notes(g: Graph) -> dict[str, list[str]]:
    """The notes every evidence graph gets, each read off the graph itself:

    - a tensor made by ``detach()`` (or ``.data``): whether it is a leaf cut from the graph;
    - a leaf that requires grad and has no ``.grad`` after a backward pass: whether a path
      from the root reaches it;
    - a leaf whose ``.grad`` is the sum of several passes: the sum, pass by pass;
    - a non-leaf that kept its ``.grad`` (``retain_grad()``).
    """
    notes: dict[str, list[str]] = {}
    ran = any(flowed_items(t.flowed) for t in g.tensors)
    roots = " and ".join(r.name or "the root" for r in g.roots) or "the root"
    for t in g.tensors:
        add = notes.setdefault(t.id, []).append
        if t.detached_from is not None and t.name:
            how = f"{t.made_by or 'detach'}()" if (t.made_by or "detach") == "detach" else f".{t.made_by}"
            if t.is_leaf and not t.requires_grad:
                add(f"leaf, no grad_fn: {how} cut here")
            else:
                add(f"{how} gave a {'leaf' if t.is_leaf else 'non-leaf'} that {'requires' if t.requires_grad else 'does not require'} grad")
        elif t.is_leaf and t.requires_grad and t.grad is None and ran:
            if not _reached(g, t.id):
                add(f"grad None: no path from {roots}")
        elif t.is_leaf and t.grad is not None:
            passes = [f for _, f in flowed_items(t.flowed)]
            if len(passes) >= 2:
                add(f"grad {_fmt(t.grad)} = {_sum_text(passes)} (accumulated)")
        elif not t.is_leaf and t.retains_grad and t.grad is not None:
            add(f"grad kept (retain_grad): {_fmt(t.grad)}")
    return {k: v for k, v in notes.items() if v}


def freed_notes(g: Graph) -> dict[str, list[str]]:
    """On each op whose saved tensors backward freed: which ones."""
    out = {}
    for o in g.ops:
        freed = [e.name for e in o.saved if e.state is FREED]
        if freed:
            out[o.id] = [f"saved {', '.join(freed)}: freed by backward"]
    return out


def released_notes(g: Graph, names: tuple[str, ...] = ()) -> dict[str, list[str]]:
    """On each named non-leaf (or those in ``names``) whose gradient flowed and was released."""
    out = {}
    for t in g.tensors:
        if t.is_leaf or t.retains_grad or t.grad is not None or (names and t.name not in names) or (not names and not t.name):
            continue
        flowed = [f for _, f in flowed_items(t.flowed)]
        if flowed:
            out[t.id] = [f"grad {_fmt(flowed[-1])} flowed, then released"]
    return out


def region_notes(g: Graph) -> dict[str, list[str]]:
    """On the first tensor of each no_grad region: what torch gave it."""
    out: dict[str, list[str]] = {}
    seen: set[str] = set()
    for t in g.tensors:
        if t.region is not None and t.region not in seen:
            seen.add(t.region)
            kind = t.region.partition("#")[0]
            grad = "requires grad" if t.requires_grad else "requires_grad=False"
            out[t.id] = [f"made in {kind}: {grad}, {'no grad_fn' if t.op is None or not g.node(t.op).name else 'a grad_fn'}"]
    return out


def annotate_evidence(g: Graph, facts: Mapping[str, Any], index: int, extra: NoteMaker | None) -> Graph:
    """``g`` with the observed notes and the claim's own (``extra``) added."""
    notes: dict[str, list[str]] = observed_notes(g)
    if extra is not None:
        for key, text in (extra(facts, g, index) or {}).items():
            if key is None:
                continue
            try:
                node = key if key in g else g.find(key).id
            except KeyError:  # (a name the run did not record: no note rather than a broken verdict)
                continue
            texts = [text] if isinstance(text, str) else list(text)
            notes.setdefault(node, [])
            notes[node].extend(t for t in texts if t not in notes[node])
    return g.annotate(notes) if notes else g


def leaf_note(g: Graph, t: TensorNode) -> str:
    """``"leaf, requires grad, no grad_fn"`` as observed on a tensor record."""
    parts = ["leaf" if t.is_leaf else "non-leaf", "requires grad" if t.requires_grad else "requires_grad=False"]
    op = g.node(t.op) if t.op is not None else None
    parts.append(f"grad_fn {op.name}" if op is not None and op.name else "no grad_fn")
    return ", ".join(parts)
