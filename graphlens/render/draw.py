"""Drawing a Graph: checking the options of :func:`to_dot` and running scene, collapse and emit."""

from __future__ import annotations

from itertools import compress
from operator import attrgetter
from typing import Any, Iterable

import graphviz

from .._checks import check_choice, check_count, check_flag
from .._util import paused_gc
from ..graph import Graph, OpNode, TensorNode
from ..values import PRECISION
from ..scopes import infer_scopes
from .chains import collapse_fans, collapse_parts
from .collapse import collapse
from .dot import emit
from .loops import fold_structure
from .modules import hide_buffers
from .notes import resolve_notes
from .scene import DataParts, Options, data_parts, data_scene, function_scene, graph_buffers
from .style import DIRECTIONS, MAX_ELEMENTS, MAX_NODES, VIEWS

__all__ = ["to_dot", "check_graph", "build_scene"]


def to_dot(
    graph: Graph,
    *,
    view: str = "data",
    direction: str = "forward",
    legend: bool = True,
    values: bool = True,
    grads: bool = True,
    saved: bool = False,
    highlight: Iterable[Any] | None = None,
    max_elements: int | None = MAX_ELEMENTS,
    precision: int = PRECISION,
    max_nodes: int = MAX_NODES,
    depth: int | None = None,
    notes: Any = None,
    buffers: bool = False,
    repeats: bool = True,
    name: str = "graphlens",
) -> graphviz.Digraph:
    """Draw ``graph`` as a :class:`graphviz.Digraph` (nothing is rendered or opened).

    ``view="data"`` draws tensors as the main nodes (leaf: green, non-leaf: white,
    requires grad: thick orange border, kept ``grad`` and released grads as rows) with
    small grey operation boxes between them, ``detach()`` as a dashed edge and
    ``no_grad`` regions as a dashed box.  ``view="function"`` draws the backward nodes
    PyTorch links by ``next_functions`` (as torchviz does), leaves above their
    ``AccumulateGrad``.  ``direction="backward"`` points arrows the way gradients flow.
    ``highlight`` is a collection of node ids (``"t3"``) and ``(src, dst)`` id pairs.
    ``values``/``grads`` show value and grad rows (``max_elements`` numbers each, with
    ``precision`` significant digits),
    ``saved=True`` lists each op's saved values (``self = x`` names the saved tensor).  Above ``max_nodes`` drawn nodes,
    submodules (``scope``, traced with ``module=``) collapse into one box each, at
    ``depth`` levels below the model (``depth=1``: its direct children; a depth below the
    deepest module draws every op), and runs of identical ops collapse into one node.
    With ``depth=None`` a model's graph above ``MODULE_NODES`` (60) drawn nodes opens at the
    deepest module level that fits in 60.  ``repeats=True`` draws a run of numbered
    blocks that are the same graph (``transformer.h.0`` … ``h.11``) once, with "× 12"; a
    box whose parameters all have ``requires_grad=False`` is drawn grey and dashed
    (frozen).  ``buffers=False`` leaves out module buffers (BatchNorm's running
    statistics), which take no part in backward; the legend counts them.
    The graph's notes (:meth:`~graphlens.Graph.annotate`) are drawn beside their nodes as
    pale yellow ``shape=note`` nodes; ``notes={...}`` adds some for this drawing (keys:
    node ids or names), ``notes=False`` hides them.
    The DOT text (``.source``) is deterministic: the same program gives the same bytes.

    >>> import torch, graphlens as gl
    >>> from graphlens.render import to_dot
    >>> w = torch.tensor([1.0, 2.0], requires_grad=True)
    >>> loss = (w * 3).sum()
    >>> dot = to_dot(gl.snapshot(loss), legend=False)
    >>> [line.strip() for line in dot.source.splitlines() if "->" in line]
    ['op0 -> t0', 't1 -> op1', 'op1 -> op0']
    >>> 'fillcolor="#c8ebc4" penwidth=3' in dot.source  # w: a leaf (green) requiring grad (thick)
    True
    """
    graph = check_graph(graph, "to_dot")
    with paused_gc():  # drawing makes many small objects; torch alone holds ~200k tracked ones
        return _to_dot(graph, view, direction, legend, values, grads, saved, highlight, max_elements, precision, max_nodes, depth, name,
                       notes, buffers=buffers, repeats=repeats)


def _to_dot(graph, view, direction, legend, values, grads, saved, highlight, max_elements, precision, max_nodes, depth, name, notes=None,
            prefix="", *, buffers=False, repeats=True):
    graph, nodes, edges, o, drawn_notes = build_scene(
        graph, view, direction, legend, values, grads, saved, highlight, max_elements, precision, max_nodes, depth, notes,
        buffers=buffers, repeats=repeats,
    )
    return emit(graph, nodes, edges, o, name, drawn_notes, prefix)


def build_scene(graph, view, direction, legend, values, grads, saved, highlight, max_elements, precision, max_nodes, depth, notes=None,
                *, buffers=False, repeats=True):
    """``(graph, nodes, edges, options, notes)``: the checked options and the collapsed scene
    :func:`to_dot` emits (the replay page reads which drawn node stands for which op)."""
    if saved is False:  # (no saved value drawn: a snapshot's ops are made without their entries)
        graph = graph._without_saved()
    drawn_notes = resolve_notes(graph, notes)
    hl_nodes, hl_edges = _check_highlight(graph, highlight)
    o = Options(
        view=check_choice("view", view, VIEWS),
        direction=check_choice("direction", direction, DIRECTIONS),
        legend=check_flag("legend", legend),
        values=check_flag("values", values),
        grads=check_flag("grads", grads),
        saved=check_flag("saved", saved),
        max_elements=check_count("max_elements", max_elements, allow_none=True, minimum=0),
        precision=check_count("precision", precision, minimum=1),  # type: ignore[arg-type]
        max_nodes=check_count("max_nodes", max_nodes, minimum=1),  # type: ignore[arg-type]
        depth=check_count("depth", depth, allow_none=True, minimum=1),
        hl_nodes=frozenset(hl_nodes),
        hl_edges=frozenset(hl_edges),
        names={t.id: t.name or t.id for t in graph.tensors} if saved is True else {},
        buffers=check_flag("buffers", buffers),
        repeats=check_flag("repeats", repeats),
    )
    graph = infer_scopes(graph)
    if o.view == "data" and _chains_only(graph, o):
        # Nothing but chains can collapse: find them in the structure and make only the
        # nodes that are drawn (a 100k-op chain draws a handful).
        parts = data_parts(graph, o)
        if not o.buffers:
            parts = _without_buffers(graph, parts)
        nodes, edges = collapse_parts(parts, o)
        if o.repeats and len(nodes) > o.max_nodes:
            # (still more than a picture holds: a repeating stretch of what is drawn may fold, as
            # collapse folds a snapshot's scene once its chains are drawn as one, which these are)
            folded = fold_structure(graph, nodes, edges, budget=o.max_nodes)
            if len(folded[0]) < len(nodes):
                nodes, edges = folded
        if len(nodes) > o.max_nodes:  # (alike strands side by side, as collapse draws them last)
            nodes, edges = collapse_fans(nodes, edges)
        return graph, nodes, edges, o, drawn_notes
    if o.view == "data":
        nodes, edges = _data_scene(graph, o)
    else:
        nodes, edges = function_scene(graph, o)
    nodes, edges = collapse(nodes, edges, o, graph)
    return graph, nodes, edges, o, drawn_notes


def _data_scene(graph: Graph, o: Options) -> tuple[list, list]:
    nodes, edges = data_scene(graph, o)
    return (nodes, edges) if o.buffers else hide_buffers(graph, nodes, edges)


def _chains_only(graph: Graph, o: Options) -> bool:
    """Whether :func:`~graphlens.render.collapse.collapse` can do nothing to ``graph``'s
    scene but fold chains: no node has a module scope (no boxes), and no loop of a trace
    is folded."""
    if o.repeats and graph.source == "trace":
        return False
    return not any(map(_SCOPE_OP, graph.ops)) and not any(map(_SCOPE_T, graph.tensors))


_SCOPE_OP = attrgetter("scope")
_SCOPE_T = attrgetter("scope")


def _without_buffers(graph: Graph, parts: DataParts) -> DataParts:
    """``parts`` without the module buffers and the ops that only update them (as :func:`hide_buffers`)."""
    tensors, ops = graph_buffers(graph)
    gone = tensors | ops
    if not gone:
        return parts
    keep = [s not in gone and d not in gone for s, d in parts.pairs]
    detach = frozenset(j for j, k in enumerate(compress(range(len(keep)), keep)) if k in parts.detach) if parts.detach else parts.detach
    return parts._replace(tensors=[t for t in parts.tensors if t.id not in gone], ops=[op for op in parts.ops if op.id not in gone],
                          pairs=list(compress(parts.pairs, keep)), detach=detach)


def check_graph(graph: Any, func: str) -> Graph:
    """``graph`` if it is a Graph, else a TypeError saying how to make one."""
    if not isinstance(graph, Graph):
        raise TypeError(
            f"{func}() needs a graphlens.Graph, not {type(graph).__name__}: make one with "
            f"graphlens.snapshot(loss) or 'with graphlens.trace() as tr: ...' then tr.graph()"
        )
    return graph


def _check_highlight(graph: Graph, highlight: Any) -> tuple[set[str], set[tuple[str, str]]]:
    """The highlighted node ids and ``(src, dst)`` pairs, each checked to be in ``graph``."""
    if highlight is None:
        return set(), set()
    if isinstance(highlight, (str, TensorNode, OpNode)):
        highlight = [highlight]
    nodes: set[str] = set()
    edges: set[tuple[str, str]] = set()
    try:
        items = list(highlight)
    except TypeError:
        raise TypeError(
            f"highlight must be a set of node ids (and (src, dst) pairs for edges), not {type(highlight).__name__}"
        ) from None
    for item in items:
        if isinstance(item, (TensorNode, OpNode)):
            item = item.id
        if isinstance(item, str):
            ids = (item,)
        elif isinstance(item, tuple) and len(item) == 2 and all(isinstance(i, str) for i in item):
            ids = item
        else:
            raise TypeError(f"highlight items must be node ids like 't3' or (src, dst) id pairs, not {item!r}")
        for i in ids:
            if i not in graph:
                raise ValueError(f"highlight names {i!r}, which is not a node of this graph (ids look like 't0', 'op3')")
        if isinstance(item, str):
            nodes.add(item)
        else:
            edges.add(item)
    return nodes, edges
