"""The scene: view-independent nodes and edges of the data view and the function view, before collapsing."""

from __future__ import annotations

from itertools import compress, count, filterfalse, repeat
from operator import eq, itemgetter, not_
from typing import Iterable, Mapping, NamedTuple

import graphviz

from ..graph import Graph, OpNode, TensorNode
from .labels import op_label, op_text, tensor_label
from .style import GRAD_BORDER, HIGHLIGHT, LEAF_FILL, NONLEAF_FILL, OP_BORDER, OP_FILL, PARAM_PERIPHERIES, PLAIN_BORDER

__all__ = ["Node", "Edge", "Options", "DataParts", "tensor_node", "op_node", "data_scene", "data_parts", "data_nodes", "data_edges", "function_scene", "graph_buffers"]


class Node:
    """One drawn node: a tensor, an op, or (after collapsing) a submodule box or a chain.

    Its ``label`` (the HTML-like text, the costly part) is made on first use from what
    ``make`` holds (a function and its arguments): nodes that collapse into a box or a
    chain never make theirs."""

    __slots__ = ("id", "kind", "_label", "_make", "attrs", "region", "inner", "scope", "sig", "rank", "members", "hl", "rg", "param",
                 "named", "frozen", "content", "backward", "leaf")

    def __init__(self, id: str, kind: str, label: str | None, attrs: dict, *, region=None, scope=None, sig=None, hl=False, rg=False,
                 param=False, named=False, make: tuple | None = None, backward=False):
        self.id = id
        self.kind = kind  # tensor | op | box | chain
        self._label = label
        self._make = make
        self.attrs = attrs
        self.region = region
        self.inner: tuple[str, ...] = ()  # frames drawn inside ``region``, outermost first (a no_grad step inside a folded loop's body)
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
        self.backward = backward  # an op that recorded a backward node (so its result needs grad)
        self.leaf: tuple | None = None  # an unnamed leaf's or a listed one's (name or id, (shape, dtype, requires_grad, list)): what makes two alike

    @property
    def label(self) -> str:
        """The node's HTML-like label (made now if it was not yet)."""
        label = self._label
        if label is None and self._make is not None:
            fn, args = self._make
            label = self._label = fn(*args)
            self._make = None
        return label

    @label.setter
    def label(self, value: str) -> None:
        self._label = value
        self._make = None


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
    kind = "parameter" if t.is_parameter else "leaf" if t.is_leaf else "non-leaf"
    tooltip = f"{t.label}: {kind}, requires_grad={t.requires_grad}"
    attrs["tooltip"] = graphviz.nohtml(tooltip)
    sig = "" if chainable and t.name is None and not t.is_leaf and t.grad is None and not hl else None
    node = Node(node_id or t.id, "tensor", None, attrs, region=t.region, scope=t.scope, sig=sig, hl=hl,
                rg=t.requires_grad, param=t.is_parameter, named=t.name is not None, make=(_tensor_label, (t, o, hl)))
    if t.is_leaf and not t.is_parameter and (t.name is None or t.name.endswith("]")):
        # (an unnamed leaf, or an item of a list or dict, ws[3]: one of many alike; a parameter or a
        # leaf of its own name is drawn as itself)
        node.leaf = (t.label, (t.shape, t.dtype, t.requires_grad, None if t.name is None else t.name.partition("[")[0]))
    return node


def _tensor_label(t: TensorNode, o: Options, hl: bool) -> str:
    return tensor_label(t, values=o.values, grads=o.grads, max_elements=o.max_elements, hl=hl, precision=o.precision)


def op_node(op: OpNode, o: Options, cache: dict | None = None) -> Node:
    """The node of ``op``; ops with the same text share one label and attributes via ``cache``."""
    hl = op.id in o.hl_nodes
    text = op_text(op, o.view)
    key = (text, hl)
    if cache is not None and not (o.saved and op.saved):
        hit = cache.get(key)
        if hit is None:
            hit = cache[key] = op_node(op, o)
        return Node(op.id, "op", hit.label, hit.attrs, region=op.region, scope=op.scope, sig=text, hl=hl, backward=op.name is not None)
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
    return Node(op.id, "op", label, attrs, region=op.region, scope=op.scope, sig=text, hl=hl, backward=op.name is not None)
class DataParts(NamedTuple):
    """The data view before its nodes are made: the tensors and the drawn ops (in drawing
    order: tensors first), the edges as ``(src, dst)`` pairs (the indices in ``detach``
    are detach edges, the others flow), the highlighted pairs and the ranks
    (``"max"``/``"min"`` by node id).  :func:`data_nodes` makes the nodes and
    :func:`data_edges` the edges; a caller that collapses first makes only the ones it draws."""

    tensors: list[TensorNode]
    ops: list[OpNode]
    pairs: list[tuple[str, str]]
    detach: frozenset[int]
    wanted: set
    rank: dict[str, str]
    #: every op of the graph by id (drawn or not)
    op_by_id: dict[str, OpNode] = {}


def data_scene(graph: Graph, o: Options) -> tuple[list[Node], list[Edge]]:
    """The data view: tensors, the ops between them, detach edges and no_grad regions."""
    parts = data_parts(graph, o)
    return data_nodes(parts, o), data_edges(parts)


def data_edges(parts: DataParts, keep: Iterable[bool] | None = None) -> list[Edge]:
    """The edges of ``parts`` (only those ``keep`` says, one flag per pair, when given)."""
    detach, wanted = parts.detach, parts.wanted
    pairs: Iterable = enumerate(parts.pairs)
    if keep is not None:
        pairs = compress(pairs, keep)
    return [Edge(s, d, "detach" if detach and k in detach else "flow", None, (s, d) in wanted if wanted else False)
            for k, (s, d) in pairs]


def data_nodes(parts: DataParts, o: Options, skip: Mapping[str, object] | None = None) -> list[Node]:
    """The nodes of ``parts``, ranked; an id in ``skip`` is left out, or, where it maps to a
    Node, that node is drawn in its place."""
    rank = parts.rank
    cache: dict = {}
    nodes: list[Node] = []
    for t in parts.tensors:
        if skip and t.id in skip:
            if isinstance(skip[t.id], Node):
                nodes.append(skip[t.id])  # type: ignore[arg-type]
            continue
        n = tensor_node(t, o, chainable=True)
        if rank:
            n.rank = rank.get(t.id)
        nodes.append(n)
    ops: Iterable = parts.ops
    if skip:  # (what is left: each op, or the node drawn in its place; C-speed for 100k ops)
        ops = filter(None, map(skip.get, map(_ID, parts.ops), parts.ops))
    for op in ops:
        if type(op) is Node:
            nodes.append(op)
            continue
        n = op_node(op, o, cache)
        if rank:
            n.rank = rank.get(op.id)
        nodes.append(n)
    return nodes


_ID = itemgetter(0)  # (TensorNode.id, OpNode.id)


def data_parts(graph: Graph, o: Options) -> DataParts:
    """The :class:`DataParts` of the data view of ``graph``."""
    ops = graph.ops
    op_ids = list(map(_ID, ops))
    op_by_id = dict(zip(op_ids, ops))
    # AccumulateGrad -> its leaf (or None)
    hidden = {op.id: op.variable for op in compress(ops, map(eq, map(_OP_NAME, ops), repeat("AccumulateGrad")))}
    traced_calls: set[str] = set()
    all_edges = graph.edges
    is_next = list(map(eq, map(_KIND, all_edges), repeat("next")))
    nexts = list(compress(all_edges, is_next))
    others: Iterable = compress(all_edges, map(not_, is_next)) if len(nexts) < len(all_edges) else ()
    if graph.source == "trace":
        # A trace recorded every call with its inputs: the backward nodes a call made
        # inside itself (the TBackward0 of linear) are the engine's business, not data.
        produces = {e.src for e in all_edges if e.kind == "output"}
        traced_calls = {op.id for op in ops if op.forward is not None}
        for op in ops:
            if op.forward is None and op.id not in produces and op.id not in hidden:
                hidden[op.id] = None
    tensor_list = list(graph.tensors)
    tensors = {t.id: t for t in tensor_list}
    pairs: list[tuple[str, str]] = []
    detach: set[int] = set()
    inputs_of: dict[str, set] = {}
    for src, dst, kind, _, _ in others:
        if kind == "input":
            if dst in hidden:
                continue
            t = tensors.get(src)
            if t is not None:
                key = ("acc", t.id) if t.op is None else (t.op, t.output_nr)
                inputs_of.setdefault(dst, set()).add(key)
        elif kind == "output":
            if src in hidden:
                continue
        elif kind == "detach":
            detach.add(len(pairs))
        else:
            continue
        pairs.append((src, dst))
    # next_functions no known tensor stands for (a snapshot's unnamed intermediates, or an
    # op a trace saw only as some tensor's grad_fn): connect in forward direction, from the
    # recorded tensor of that output where there is one, else from the op itself; a hidden
    # op is followed through to the nodes it stands for (it is never drawn).  Each pair
    # once, and none already drawn above.  Most edges lead from a drawn op to a drawn op
    # with nothing recorded on either side: those are paired column by column, and only
    # the others (found by set lookups) one at a time, in the edges' order.
    outputs = {(t.op, t.output_nr): t.id for t in tensor_list if t.op is not None}
    special = hidden.keys() | {key[0] for key in outputs}
    skip = hidden.keys() | traced_calls if traced_calls else hidden.keys()
    srcs = list(map(_SRC, nexts))
    if not skip.isdisjoint(srcs):
        nexts = list(compress(nexts, map(not_, map(skip.__contains__, srcs))))
        srcs = list(map(_SRC, nexts))
    dsts = list(map(_DST, nexts))
    odd = _positions(srcs, inputs_of.keys()) | _positions(dsts, special)
    if not all(map(op_by_id.__contains__, dsts)):
        odd.update(compress(count(), map(not_, map(op_by_id.__contains__, dsts))))
    flows: list[tuple[str, str]] = []
    nexts_of: list = []  # (the next edges by op, made when a hidden op is first met)
    start = 0
    for k in sorted(odd):
        flows.extend(zip(dsts[start:k], srcs[start:k]))
        start = k + 1
        _, dst, _, _, nr = nexts[k]
        _one_flow(flows, srcs[k], dst, nr, inputs_of, special, hidden, op_by_id, outputs, nexts_of, all_edges)
    flows.extend(zip(dsts[start:], srcs[start:]))
    if pairs:
        pairs.extend(filterfalse(set(pairs).__contains__, dict.fromkeys(flows)))
    else:
        pairs = list(dict.fromkeys(flows))
    drawn_ops = list(compress(ops, map(not_, map(hidden.__contains__, op_ids)))) if hidden else list(ops)
    region = {t.id: t.region for t in tensor_list}  # (ranks are given to tensors only)
    wanted = _wanted_edges(o, hidden) if o.hl_edges else set()
    return DataParts(tensor_list, drawn_ops, pairs, frozenset(detach), wanted, _rank_map(graph, region, pairs, detach), op_by_id)


def _positions(column: list[str], keys: Iterable[str]) -> set[int]:
    """The indices in ``column`` of the ids in ``keys`` (a few keys: found by ``index``,
    each a scan at C speed; many: by one lookup per element)."""
    if len(keys) > 8:  # type: ignore[arg-type]
        return set(compress(count(), map(keys.__contains__, column)))  # type: ignore[attr-defined]
    found: set[int] = set()
    for key in keys:
        k = -1
        try:
            while True:
                k = column.index(key, k + 1)
                found.add(k)
        except ValueError:
            pass
    return found


def _one_flow(flows: list, src: str, dst: str, nr: int, inputs_of: Mapping[str, set], special: set, hidden: Mapping[str, str | None],
              op_by_id: Mapping[str, OpNode], outputs: Mapping[tuple, str], nexts_of: list, all_edges: Iterable) -> None:
    """Append to ``flows`` what the next edge ``src -> dst`` (to output ``nr``) draws, for
    an edge that is not simply drawn op to drawn op (see :func:`data_parts`)."""
    if dst not in special:  # (the op itself)
        if inputs_of and src in inputs_of and (dst, nr) in inputs_of[src]:
            return
        if dst in op_by_id:
            flows.append((dst, src))
        return
    if dst not in hidden:
        if dst not in op_by_id:
            return
        found: list | tuple = (((dst, nr), outputs.get((dst, nr), dst)),)
    else:
        if not nexts_of:  # (only a hidden op's own next edges are ever followed)
            nexts: dict[str, list] = {}
            for n in compress(all_edges, map(hidden.__contains__, map(_SRC, all_edges))):
                if n.kind == "next":
                    nexts.setdefault(n.src, []).append(n)
            nexts_of.append(nexts)
        found = _drawn_sources(dst, nr, op_by_id, hidden, outputs, nexts_of[0])
    for key, source in found:
        if not (inputs_of and src in inputs_of and key in inputs_of[src]):
            flows.append((source, src))


_KIND = itemgetter(2)  # Edge.kind
_SRC = itemgetter(0)  # Edge.src
_DST = itemgetter(1)  # Edge.dst
_OP_NAME = itemgetter(1)  # OpNode.name


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


def _wanted_edges(o: Options, alias: Mapping[str, str | None]) -> set:
    """The highlighted ``(src, dst)`` pairs, in both directions; ``alias`` maps a hidden op to the node drawn for it."""
    wanted: set = set()
    for src, dst in o.hl_edges:
        wanted.add((alias.get(src) or src, alias.get(dst) or dst))
        wanted.add((alias.get(dst) or dst, alias.get(src) or src))  # pairs may be given in backward order
    return wanted


def _mark_edges(edges: list[Edge], o: Options, *, alias: Mapping[str, str | None]) -> None:
    """Mark the highlighted edges, given in either direction; ``alias`` maps a hidden op to the node drawn for it."""
    if not o.hl_edges:
        return
    wanted = _wanted_edges(o, alias)
    for e in edges:
        if e.orig in wanted:
            e.hl = True


def _set_ranks(graph: Graph, nodes: list[Node], edges: list[Edge]) -> None:
    """Roots at the bottom; leaves requiring grad that feed two or more roots at the top."""
    by_id = {n.id: n for n in nodes}
    rank = _rank_map(graph, {i: n.region for i, n in by_id.items()}, [(e.src, e.dst) for e in edges],
                     {k for k, e in enumerate(edges) if e.kind == "detach"})
    for nid, r in rank.items():
        by_id[nid].rank = r


def _rank_map(graph: Graph, region: Mapping[str, str | None], pairs: list[tuple[str, str]], detach: Iterable[int]) -> dict[str, str]:
    """Node id -> ``"max"`` for the roots (at the bottom), ``"min"`` for leaves requiring grad
    that feed two or more roots (at the top); ``region`` maps each tensor node's id to its
    region, ``pairs`` are the edges ``(src, dst)``, those at the indices ``detach`` detach edges."""
    roots = [r.id for r in graph.roots if r.id in region and region[r.id] is None]
    if not roots:
        return {}
    rank = dict.fromkeys(roots, "max")
    if len(roots) < 2:
        return rank
    preds: dict[str, list[str]] = {}
    for k, (src, dst) in enumerate(pairs):
        if k not in detach:
            preds.setdefault(dst, []).append(src)
    # Which roots reach each node, up to two of them: a node takes a root's mark once and
    # passes it on, and a node that has two takes no third (its ancestors have those two
    # from it), so each node is entered at most twice however many roots there are (a
    # traced training loop has one per step, each reaching every step before it).
    reach: dict[str, tuple] = {r: (r,) for r in roots}
    stack = [(r, r) for r in reversed(roots)]
    while stack:
        n, r = stack.pop()
        for p in preds.get(n, ()):
            marks = reach.get(p, ())
            if len(marks) < 2 and r not in marks:
                reach[p] = (*marks, r)
                stack.append((p, r))
    for t in graph.tensors:
        if t.id in region and t.is_leaf and t.requires_grad and len(reach.get(t.id, ())) >= 2 and region[t.id] is None:
            rank[t.id] = "min"
    return rank


_BUFFERS: list = [None, None]  # (a weak reference to the last graph asked about, its buffer ids)


def graph_buffers(graph: Graph) -> tuple[frozenset[str], frozenset[str]]:
    """:func:`~graphlens.render.modules.buffer_ids` of ``graph``, remembered for the last
    graph asked about (drawing asks twice: to hide them, and for the legend's count)."""
    import weakref

    from .modules import buffer_ids

    ref, ids = _BUFFERS
    if ref is not None and ref() is graph:
        return ids
    ids = buffer_ids(graph)
    _BUFFERS[:] = [weakref.ref(graph), ids]
    return ids
