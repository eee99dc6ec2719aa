"""The scene: view-independent nodes and edges of the data view and the function view, before collapsing."""

from __future__ import annotations

from typing import Mapping, NamedTuple

import graphviz

from ..graph import Graph, OpNode, TensorNode
from .labels import op_label, op_text, tensor_label
from .style import GRAD_BORDER, HIGHLIGHT, LEAF_FILL, NONLEAF_FILL, OP_BORDER, OP_FILL, PARAM_PERIPHERIES, PLAIN_BORDER

__all__ = ["Node", "Edge", "Options", "tensor_node", "op_node", "data_scene", "function_scene"]


class Node:
    """One drawn node: a tensor, an op, or (after collapsing) a submodule box or a chain."""

    __slots__ = ("id", "kind", "label", "attrs", "region", "scope", "sig", "rank", "members", "hl", "rg", "param", "named", "frozen", "content")

    def __init__(self, id: str, kind: str, label: str, attrs: dict, *, region=None, scope=None, sig=None, hl=False, rg=False, param=False, named=False):
        self.id = id
        self.kind = kind  # tensor | op | box | chain
        self.label = label
        self.attrs = attrs
        self.region = region
        self.scope = scope
        self.sig = sig  # chain signature: op label, "" for a tensor a chain may pass through, None otherwise
        self.rank: str | None = None
        self.members = (id,)
        self.hl = hl
        self.rg = rg
        self.param = param
        self.named = named
        self.frozen = False
        self.content: tuple = ()  # a box's members, as (kind, op text, marks): what makes two boxes alike


class Edge:
    """One drawn edge; ``orig`` is the pair of node ids it had before collapsing."""

    __slots__ = ("src", "dst", "kind", "attrs", "orig", "hl")

    def __init__(self, src: str, dst: str, kind: str, attrs: dict | None = None, hl: bool = False):
        self.src = src
        self.dst = dst
        self.kind = kind  # flow | detach | variable
        self.attrs = attrs or {}
        self.orig = (src, dst)
        self.hl = hl


class Options(NamedTuple):
    """The checked options of :func:`~graphlens.render.to_dot`."""

    view: str
    direction: str
    legend: bool
    values: bool
    grads: bool
    saved: bool
    max_elements: int | None
    precision: int
    max_nodes: int
    depth: int | None
    hl_nodes: frozenset
    hl_edges: frozenset
    #: what the diagram calls each tensor (its name, else its id): saved rows say ``self = x``
    names: Mapping[str, str] = {}
    #: draw module buffers (BatchNorm's running statistics), which take no part in backward
    buffers: bool = False
    #: draw runs of identical numbered blocks (``h.0`` … ``h.11``) once, with "× N"
    repeats: bool = True


def tensor_node(t: TensorNode, o: Options, node_id: str | None = None, *, chainable: bool = False) -> Node:
    """The node of tensor ``t`` (under ``node_id`` when given); ``chainable`` lets an
    unnamed intermediate tensor be folded into a chain of ops."""
    hl = t.id in o.hl_nodes
    attrs = {
        "shape": "box",
        "style": "rounded,filled",
        "fillcolor": LEAF_FILL if t.is_leaf else NONLEAF_FILL,
        "color": GRAD_BORDER if t.requires_grad else PLAIN_BORDER,
        "penwidth": "3" if t.requires_grad else "1",
    }
    if t.is_parameter:
        attrs["peripheries"] = PARAM_PERIPHERIES
    if hl:
        attrs["color"] = HIGHLIGHT
        attrs["penwidth"] = "3.5"
    label = tensor_label(t, values=o.values, grads=o.grads, max_elements=o.max_elements, hl=hl, precision=o.precision)
    kind = "parameter" if t.is_parameter else "leaf" if t.is_leaf else "non-leaf"
    tooltip = f"{t.label}: {kind}, requires_grad={t.requires_grad}"
    attrs["tooltip"] = graphviz.nohtml(tooltip)
    sig = "" if chainable and t.name is None and not t.is_leaf and t.grad is None and not hl else None
    return Node(node_id or t.id, "tensor", label, attrs, region=t.region, scope=t.scope, sig=sig, hl=hl,
                rg=t.requires_grad, param=t.is_parameter, named=t.name is not None)


def op_node(op: OpNode, o: Options, cache: dict | None = None) -> Node:
    """The node of ``op``; ops with the same text share one label and attributes via ``cache``."""
    hl = op.id in o.hl_nodes
    text = op_text(op, o.view)
    key = (text, hl)
    if cache is not None and not (o.saved and op.saved):
        hit = cache.get(key)
        if hit is None:
            hit = cache[key] = op_node(op, o)
        return Node(op.id, "op", hit.label, hit.attrs, region=op.region, scope=op.scope, sig=text, hl=hl)
    label = op_label(op, text, saved=o.saved, names=o.names, precision=o.precision)
    attrs = {
        "shape": "box",
        "style": "rounded,filled",
        "fillcolor": OP_FILL,
        "color": HIGHLIGHT if hl else OP_BORDER,
        "penwidth": "3" if hl else "1",
        "fontsize": "10",
        "height": "0.25",
        "margin": "0.08,0.03",
    }
    return Node(op.id, "op", label, attrs, region=op.region, scope=op.scope, sig=text, hl=hl)
def data_scene(graph: Graph, o: Options) -> tuple[list[Node], list[Edge]]:
    """The data view: tensors, the ops between them, detach edges and no_grad regions."""
    ops = graph.ops
    op_by_id = {op.id: op for op in ops}
    hidden = {op.id: op.variable for op in ops if op.is_accumulate_grad}  # AccumulateGrad -> its leaf (or None)
    traced_calls: set[str] = set()
    if graph.source == "trace":
        # A trace recorded every call with its inputs: the backward nodes a call made
        # inside itself (the TBackward0 of linear) are the engine's business, not data.
        produces = {e.src for e in graph.edges if e.kind == "output"}
        traced_calls = {op.id for op in ops if op.forward is not None}
        for op in ops:
            if op.forward is None and op.id not in produces and op.id not in hidden:
                hidden[op.id] = None
    tensors = {t.id: t for t in graph.tensors}

    nodes: list[Node] = [tensor_node(t, o, chainable=True) for t in graph.tensors]
    cache: dict = {}
    nodes.extend(op_node(op, o, cache) for op in ops if op.id not in hidden)
    edges: list[Edge] = []
    inputs_of: dict[str, set] = {}
    for e in graph.edges:
        if e.kind == "input":
            if e.dst in hidden:
                continue
            edges.append(Edge(e.src, e.dst, "flow"))
            t = tensors.get(e.src)
            if t is not None:
                key = ("acc", t.id) if t.op is None else (t.op, t.output_nr)
                inputs_of.setdefault(e.dst, set()).add(key)
        elif e.kind == "output":
            if e.src in hidden:
                continue
            edges.append(Edge(e.src, e.dst, "flow"))
        elif e.kind == "detach":
            edges.append(Edge(e.src, e.dst, "detach"))
    # next_functions no known tensor stands for (a snapshot's unnamed intermediates, or an
    # op a trace saw only as some tensor's grad_fn): connect in forward direction, from the
    # recorded tensor of that output where there is one, else from the op itself; a hidden
    # op is followed through to the nodes it stands for (it is never drawn).
    outputs = {(t.op, t.output_nr): t.id for t in graph.tensors if t.op is not None}
    nexts: dict[str, list] = {}
    for e in graph.edges:
        if e.kind == "next":
            nexts.setdefault(e.src, []).append(e)
    seen_pairs = {(e.src, e.dst) for e in edges}
    for e in graph.edges:
        if e.kind != "next" or e.src in hidden or e.src in traced_calls:
            continue
        for key, src in _drawn_sources(e.dst, e.output_nr, op_by_id, hidden, outputs, nexts):
            if key in inputs_of.get(e.src, ()) or (src, e.src) in seen_pairs:
                continue
            seen_pairs.add((src, e.src))
            edges.append(Edge(src, e.src, "flow"))
    _mark_edges(edges, o, alias=hidden)
    _set_ranks(graph, nodes, edges)
    return nodes, edges


def function_scene(graph: Graph, o: Options) -> tuple[list[Node], list[Edge]]:
    """The function view: the backward nodes linked by next_functions, leaves above their AccumulateGrad."""
    tensors = {t.id: t for t in graph.tensors}
    nodes: list[Node] = []
    edges: list[Edge] = []
    drawn = {op.id for op in graph.ops if op.name is not None}
    var_nodes: list[Node] = []
    cache: dict = {}
    for op in graph.ops:
        if op.id not in drawn:
            continue
        nodes.append(op_node(op, o, cache))
        if op.is_accumulate_grad and op.variable in tensors:
            var = tensor_node(tensors[op.variable], o, node_id=op.variable)
            var_nodes.append(var)
            edges.append(Edge(op.variable, op.id, "variable"))
    root_nodes = []
    for r in graph.roots:
        if r.op in drawn:
            root_nodes.append(tensor_node(r, o))
    for e in graph.edges:
        if e.kind == "next" and e.src in drawn and e.dst in drawn:
            edges.append(Edge(e.dst, e.src, "flow"))
    for r in root_nodes:
        edges.append(Edge(tensors[r.id].op, r.id, "flow"))
    # roots are drawn after their ops; variables before everything (they sit on top).
    nodes = var_nodes + nodes + root_nodes
    _mark_edges(edges, o, alias={})
    _set_ranks(graph, nodes, edges)
    return nodes, edges


def _drawn_sources(op_id: str, output_nr: int, op_by_id: Mapping[str, OpNode], hidden: Mapping[str, str | None],
                   outputs: Mapping[tuple, str], nexts: Mapping[str, list]) -> list[tuple[tuple, str]]:
    """``(input key, drawn node id)`` of what output ``output_nr`` of op ``op_id`` is in the
    data view: a leaf for an ``AccumulateGrad``, the recorded tensor of that output, else
    the op itself; an op the view hides stands for what its own ``next`` edges lead to."""
    found: list[tuple[tuple, str]] = []
    stack = [(op_id, output_nr)]
    visited: set = set()
    while stack:
        item = stack.pop()
        if item in visited:
            continue
        visited.add(item)
        oid, nr = item
        op = op_by_id.get(oid)
        if op is None:
            continue
        if op.is_accumulate_grad:
            if op.variable is not None:
                found.append((("acc", op.variable), op.variable))
        elif (oid, nr) in outputs:
            found.append(((oid, nr), outputs[(oid, nr)]))
        elif oid not in hidden:
            found.append(((oid, nr), oid))
        else:  # hidden: what flows into it (last pushed is taken first: keep input order)
            stack.extend((n.dst, n.output_nr) for n in reversed(nexts.get(oid, ())))
    return found


def _mark_edges(edges: list[Edge], o: Options, *, alias: Mapping[str, str | None]) -> None:
    """Mark the highlighted edges, given in either direction; ``alias`` maps a hidden op to the node drawn for it."""
    if not o.hl_edges:
        return
    wanted = set()
    for src, dst in o.hl_edges:
        wanted.add((alias.get(src) or src, alias.get(dst) or dst))
        wanted.add((alias.get(dst) or dst, alias.get(src) or src))  # pairs may be given in backward order
    for e in edges:
        if e.orig in wanted:
            e.hl = True


def _set_ranks(graph: Graph, nodes: list[Node], edges: list[Edge]) -> None:
    """Roots at the bottom; leaves requiring grad that feed two or more roots at the top."""
    by_id = {n.id: n for n in nodes}
    roots = [r.id for r in graph.roots if r.id in by_id and by_id[r.id].region is None]
    if not roots:
        return
    for r in roots:
        by_id[r].rank = "max"
    if len(roots) < 2:
        return
    preds: dict[str, list[str]] = {}
    for e in edges:
        if e.kind != "detach":
            preds.setdefault(e.dst, []).append(e.src)
    reach: dict[str, int] = {}
    for r in roots:
        seen = {r}
        stack = [r]
        while stack:
            n = stack.pop()
            for p in preds.get(n, ()):
                if p not in seen:
                    seen.add(p)
                    stack.append(p)
        for n in seen:
            reach[n] = reach.get(n, 0) + 1
    for t in graph.tensors:
        n = by_id.get(t.id)
        if n is not None and t.is_leaf and t.requires_grad and reach.get(t.id, 0) >= 2 and n.region is None:
            n.rank = "min"
