"""Scope inference: which submodule each op and tensor of a snapshot belongs to, from parameter names."""

from __future__ import annotations

from typing import Iterable

from .graph import Graph

__all__ = ["infer_scopes"]


def infer_scopes(graph: Graph) -> Graph:
    """A snapshot knows no submodules, but its parameters carry dotted names
    (``layers.0.linear1.weight``).  Give each parameter its module's name as scope, each
    op that consumes a parameter (directly or through a one-input op such as
    ``TBackward0``) that scope, and each connected run of other ops lying between two or
    more scoped ops the common prefix of their scopes.  Graphs that already have
    scopes (traced with ``module=``) are returned as they are.

    Reads the graph's cached :attr:`~graphlens.graph.Graph.adjacency` (``next``/``prev``
    between ops, ``accumulate_grad`` from a leaf to its op); the graph is not changed, a new
    one is returned.

    >>> import torch, graphlens as gl
    >>> model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Tanh(), torch.nn.Linear(2, 1))
    >>> g = infer_scopes(gl.snapshot(model(torch.ones(1, 2)).sum(), module=model))
    >>> sorted({op.scope for op in g.ops if op.scope})
    ['0', '2']
    """
    if any(t.scope for t in graph.tensors):
        return graph
    scope: dict[str, str] = {}
    for t in graph.tensors:
        if t.is_leaf and t.requires_grad and t.name and "." in t.name and (t.is_parameter or t.op is None):
            scope[t.id] = t.name.rsplit(".", 1)[0]
    if not scope or any(op.scope for op in graph.ops):  # (nothing to infer from, or scopes recorded already)
        return graph
    adjacency = graph.adjacency
    children, parents = adjacency.next, adjacency.prev
    for leaf, acc in adjacency.accumulate_grad.items():
        if leaf in scope:
            scope[acc] = scope[leaf]
    accumulating = {op.id for op in graph.ops if op.is_accumulate_grad}
    # Ops fed by a parameter, directly or through a chain of one-input ops.
    for op in graph.ops:
        if op.id in scope:
            continue
        found = []
        for child in children.get(op.id, ()):
            hop = child
            while hop not in scope and len(children.get(hop, ())) == 1 and hop not in accumulating:
                hop = children[hop][0]
            if hop in scope and hop in accumulating:
                found.append(scope[hop])
        common = _common_scope(found) if found else None
        if common:
            scope[op.id] = common
    # The rest, a connected run of unscoped ops at a time: the common prefix of the scoped
    # ops around it, when it lies between two or more of them and holds no root.
    seen: set[str] = set()
    for op in graph.ops:
        if op.id in scope or op.id in seen or op.is_accumulate_grad:
            continue
        run, border, stack, has_root = [], set(), [op.id], False
        seen.add(op.id)
        while stack:
            node = stack.pop()
            run.append(node)
            has_root = has_root or not parents.get(node)
            for n in children.get(node, ()) + parents.get(node, ()):
                if n in accumulating:
                    continue
                if n in scope:
                    border.add(n)
                elif n not in seen:
                    seen.add(n)
                    stack.append(n)
        if has_root or len(border) < 2:
            continue
        common = _common_scope(scope[n] for n in border)
        if common:
            for node in run:
                scope[node] = common
    for t in graph.tensors:
        if t.id not in scope and t.op in scope and not t.name:
            scope[t.id] = scope[t.op]
    get = scope.get
    out = Graph(
        (_scoped(t, get(t.id)) for t in graph.tensors),
        (_scoped(op, get(op.id)) for op in graph.ops),
        graph.edges,
        (t.id for t in graph.roots),
        source=graph.source,
    )
    out._adj = adjacency  # (the same ops, variables and edges: only scopes were given)
    return out


def _scoped(rec, scope: str | None):
    """``rec`` (a TensorNode or OpNode) with ``scope`` (itself where that changes nothing)."""
    if scope is None and rec.scope is None:
        return rec
    cls = type(rec)
    k = _SCOPE_AT.get(cls)
    if k is None:
        k = _SCOPE_AT[cls] = cls._fields.index("scope")
    return tuple.__new__(cls, (*rec[:k], scope, *rec[k + 1:]))  # (what rec._replace(scope=scope) makes, faster)


_SCOPE_AT: dict[type, int] = {}


def _common_scope(scopes: Iterable[str]) -> str | None:
    """The longest dotted prefix the scopes share (``"layers.0"``), or ``None``."""
    parts = None
    for scope in scopes:
        bits = scope.split(".")
        if parts is None:
            parts = bits
        else:
            n = 0
            while n < min(len(parts), len(bits)) and parts[n] == bits[n]:
                n += 1
            parts = parts[:n]
    return ".".join(parts) if parts else None
