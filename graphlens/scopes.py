"""Scope inference: which submodule each op and tensor of a snapshot belongs to, from parameter names."""

from __future__ import annotations

from typing import Container, Iterable

from .graph import Graph

__all__ = ["infer_scopes"]


def infer_scopes(graph: Graph) -> Graph:
    """A snapshot knows no submodules, but its parameters carry dotted names
    (``layers.0.linear1.weight``).  Give each parameter its module's name as scope, each
    op that consumes a parameter (directly or through a one-input op such as
    ``TBackward0``) that scope, and each connected run of other ops lying between two or
    more scoped ops the module whose call held them all (their common prefix, see
    :func:`_ran_around`), or, op by op, a deeper one where the op lies between an op of that
    module and a later one (:func:`_inside`); never a module one of whose parameters is used
    twice (called twice, or tied), for what lies between its calls.  Graphs that already have
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
    # (where a chain of one-input ops ends, at an AccumulateGrad or an op with other than one
    # input: each chain walked once, not once per op above it, whatever order the ops come in)
    end_of: dict[str, str] = {}

    def chain_end(hop: str) -> str:
        path = []
        while hop not in end_of and len(children.get(hop, ())) == 1 and hop not in accumulating:
            path.append(hop)
            hop = children[hop][0]
        end = end_of.get(hop, hop)
        for p in path:
            end_of[p] = end
        return end

    for op in graph.ops:
        if op.id in scope:
            continue
        found = []
        for child in children.get(op.id, ()):
            hop = chain_end(child)
            if hop in scope and hop in accumulating:
                found.append(scope[hop])
        common = _common_scope(found) if found else None
        if common:
            scope[op.id] = common
    # The rest, a connected run of unscoped ops at a time: the common prefix of the scoped
    # ops around it, when it lies between two or more of them and holds no root.
    # A module with a parameter used more than once (called twice, or a weight tied to another
    # module's): no op can be said to lie inside one call of it.
    reused = {scope[acc] for acc in accumulating if acc in scope and len(parents.get(acc, ())) > 1}
    known = {".".join(p[: k + 1]) for p in (v.split(".") for v in set(scope.values())) for k in range(len(p))}
    seen: set[str] = set()
    for op in graph.ops:
        if op.id in scope or op.id in seen or op.is_accumulate_grad:
            continue
        run, up, down, stack, has_root = [], set(), set(), [op.id], False
        seen.add(op.id)
        while stack:
            node = stack.pop()
            run.append(node)
            has_root = has_root or not parents.get(node)
            for side, ns in ((up, children.get(node, ())), (down, parents.get(node, ()))):
                for n in ns:
                    if n in accumulating:
                        continue
                    if n in scope:
                        side.add(n)
                    elif n not in seen:
                        seen.add(n)
                        stack.append(n)
        if has_root or len(up | down) < 2:
            continue
        common = _ran_around(*{scope[n] for n in up | down}, known=known)
        while common and any(_within(common, r) for r in reused):
            common = common.rpartition(".")[0]  # (what lies between two calls of a module is not inside it)
        inside = _inside(run, up, down, scope, children, parents, reused, common, known)
        for node in run:
            found = inside.get(node) or common
            if found:
                scope[node] = found
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


def _inside(run: list[str], up: set[str], down: set[str], scope: dict[str, str], children, parents,
            reused: set[str] = frozenset(), common: str | None = None,  # type: ignore[assignment]
            known: Container[str] = ()) -> dict[str, str]:
    """For ops of a run of unscoped ops, the module each ran inside, where the ops around it say
    so: the deepest module ``M`` such that the op lies on a way (through the run) from an op of
    ``M`` whose output it reads to an op of ``M`` that reads its output.  A module that ran once
    runs its ops in one stretch of time, so what lies between two of them ran inside it (the
    dropout and the residual add between a self-attention's output projection and the layer's
    norm: the layer's).  An op with no such module, or with two neither inside the other, is
    left out, and so is a module inside or around one of the ``reused`` scopes (it may have run
    twice).
    Nothing is looked at op by op where no two of the run's neighbours give a module deeper than
    ``common`` (what the run gets as a whole)."""
    around = {(a, b): _ran_around(a, b, known=known) for a in {scope[u] for u in up} for b in {scope[d] for d in down}}
    depth = -1 if common is None else common.count(".")
    if not any(c and c.count(".") > depth for c in around.values()):
        return {}
    members = set(run)
    # (the run in the order the forward pass made it: an op after the ops whose outputs it reads)
    waiting = {n: sum(1 for c in children.get(n, ()) if c in members) for n in run}
    order = [n for n in run if not waiting[n]]
    for n in order:
        for p in parents.get(n, ()):
            if p in members:
                waiting[p] -= 1
                if not waiting[p]:
                    order.append(p)
    if len(order) != len(run):
        return {}
    ups: dict[str, frozenset] = {}
    for n in order:  # the scopes of the ops before it (through the run) whose output it reads
        ups[n] = _merged([frozenset(scope[c] for c in children.get(n, ()) if c in up)] +
                         [ups[c] for c in children.get(n, ()) if c in members])
    downs: dict[str, frozenset] = {}
    for n in reversed(order):  # the scopes of the ops after it that read its output
        downs[n] = _merged([frozenset(scope[p] for p in parents.get(n, ()) if p in down)] +
                           [downs[p] for p in parents.get(n, ()) if p in members])
    out: dict[str, str] = {}
    for n in run:
        if not ups[n] or not downs[n] or _MANY in ups[n] or _MANY in downs[n]:
            continue
        shared = {c for c in (around[u, d] for u in ups[n] for d in downs[n]) if c}
        if not shared:
            continue
        best = max(shared, key=lambda c: c.count("."))
        if all(_within(best, c) for c in shared) and not any(_within(best, r) or _within(r, best) for r in reused):
            out[n] = best
    return out


def _ran_around(*scopes: str, known: Container[str] = ()) -> str | None:
    """The module whose one call held ops of all these modules (in time between them): their
    common prefix, or its parent where they lie in numbered children of it and every number
    between them is a ``known`` module too (``h.0`` and ``h.1``: a ``Sequential`` runs nothing
    between two children, so what ran there ran around a ``ModuleList``, which never runs;
    ``0.0`` and ``0.2`` with no module ``0.1`` known are a ``Sequential``'s layers with a
    parameterless one between, which ran inside it)."""
    common = _common_scope(scopes)
    if common is None:
        return None
    k = common.count(".") + 1
    numbers = {int(p[k]) if len(p) > k and p[k].isdigit() else -1 for p in (s.split(".") for s in scopes)}
    if min(numbers) >= 0 and all(f"{common}.{m}" in known for m in range(min(numbers), max(numbers) + 1) if m not in numbers):
        return common.rpartition(".")[0] or None
    return common


def _within(inner: str, outer: str) -> bool:
    """Whether module ``inner`` is ``outer`` or lies inside it."""
    return inner == outer or inner.startswith(outer + ".")


_MANY = "\x00many"  # (more modules around an op than it is worth pairing: it keeps the run's scope)


def _merged(sets: list[frozenset]) -> frozenset:
    out = frozenset().union(*sets) if sets else frozenset()
    return out if len(out) <= 8 else frozenset((_MANY,))


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
