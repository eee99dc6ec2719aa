"""The data model: immutable records of tensors, operations and edges, and the Graph."""

from __future__ import annotations

import json
import weakref
from types import MappingProxyType
from typing import Any, Iterator, Mapping, NamedTuple, Sequence

from ._json_v1 import V1_SAVED, V1_TEXTS, tensor_v1
from ._util import paused_gc
from .adjacency import Adjacency, build_adjacency
from .flowed import FLOWED, flowed_json
from .values import (
    COUNT, FLAG, FREED, HIDDEN, INTEGER, INTEGER_OR_NULL, LIVE, MODIFIED, POSITIONS_OR_NULL, PRECISION, SAVED, SHAPE,
    SUMMARY_OR_NULL, TEXT, TEXT_OR_NULL, UNREADABLE, BareLiteral, SavedEntry, SavedState, Summary, describe,
    format_number, kinds_of, one_of, read_ids, read_notes, read_records, short,
)

__all__ = [
    "Summary", "SavedState", "SavedEntry", "LIVE", "FREED", "MODIFIED", "HIDDEN", "UNREADABLE",
    "TensorNode", "OpNode", "Edge", "Adjacency", "Graph", "EDGE_KINDS", "SCHEMA_VERSION", "PRECISION",
    "format_number",
]

#: Version of the JSON layout written by :meth:`Graph.to_dict` (versions 2 and 1 are still read; 3 writes
#: a tensor's ``flowed`` as the passes where something flowed, see :func:`graphlens.flowed.flowed_json`).
SCHEMA_VERSION = 3

#: The kinds of :class:`Edge`, in the order they are documented.
EDGE_KINDS = ("next", "input", "output", "detach")
#: The end of a no_grad region's name (``OpNode.region``, ``TensorNode.region``) when the no_grad
#: is the reentrant ``torch.utils.checkpoint``'s own (``"no_grad#3:checkpoint"``): its kind stays
#: ``no_grad`` (PyTorch runs the function there), and the name says whose it is (the user's code
#: holds no ``torch.no_grad()`` block).
REENTRANT_TAG = ":checkpoint"


class TensorNode(NamedTuple):
    """One tensor (a data node): what it looked like when the graph was captured.

    ``value`` is a :class:`Summary` of the tensor's contents (numbers, not text);
    ``grad`` one of ``tensor.grad`` when the tensor had one (a leaf that requires grad
    after backward, or a non-leaf that called ``retain_grad()``).  ``flowed`` holds one
    entry per backward pass seen by :func:`graphlens.trace`: a :class:`Summary` of the
    gradient that flowed into this tensor, even when PyTorch then threw it away, or
    ``None`` when none flowed in that pass (a :class:`~graphlens.flowed.Flowed`, which reads as
    that tuple and keeps only the passes where something flowed).
    ``op`` is the id of the :class:`OpNode` that produced the tensor (its ``grad_fn``
    or, inside ``no_grad``, the forward operation), ``None`` for a tensor made directly.
    ``detached_from`` is the id of the tensor it was ``detach()``-ed from; ``region``
    the region it was made in: ``no_grad``/``inference_mode`` (``"no_grad#0"``), a custom
    Function's forward (``"Scale.forward#1"``) or a non-reentrant checkpoint (``"checkpoint#2"``,
    grad on); ``scope`` as for ops.
    A tensor a trace saw made from numbers (``torch.tensor(...)``, ``torch.zeros``, ...)
    says by what (``made_by``, e.g. ``"tensor"``) and where (``line``, ``code``, as for ops).
    """

    id: str
    name: str | None
    shape: tuple[int, ...]
    dtype: str
    device: str
    is_leaf: bool
    requires_grad: bool
    retains_grad: bool = False
    grad: Summary | None = None
    version: int = 0
    is_view: bool = False
    op: str | None = None
    output_nr: int = 0
    value: Summary | None = None
    flowed: Sequence[Summary | None] = ()  # (a Flowed from a trace; a tuple read from JSON)
    detached_from: str | None = None
    region: str | None = None
    is_parameter: bool = False
    scope: str | None = None
    made_by: str | None = None
    line: int | None = None
    code: str | None = None

    @property
    def has_grad(self) -> bool:
        """Whether ``.grad`` held a tensor when the graph was captured."""
        return self.grad is not None

    @property
    def label(self) -> str:
        """The name, or the id when the tensor has no known name."""
        return self.name if self.name is not None else self.id


class OpNode(NamedTuple):
    """One operation: a backward node (``grad_fn``) and, when traced, its forward call.

    ``name`` is the backward node's class name (``MulBackward0``, ``AccumulateGrad``),
    or ``None`` for a forward call that recorded no backward node (inside ``no_grad``,
    or when no input required grad).  ``saved`` holds one :class:`SavedEntry` per saved
    attribute (its state says whether backward freed it).  ``variable`` is the tensor id
    of an ``AccumulateGrad`` node's leaf.  ``region`` names the ``no_grad`` region the op
    ran in; ``scope`` is the dotted name of the innermost submodule that was running
    (traced with ``module=``), e.g. ``"layers.0.linear1"``.  A traced call also says
    where it ran: ``line``, the line number in the file of the ``with trace()`` block (for
    a call made inside a function the block called, the block's line that called it, except
    for the calls whose own line graphlens keeps: where the gradient path stops, a NaN or an
    infinity was made, or a derivative can be infinite, as ``sqrt``'s at 0), and ``code``,
    that line's source text, stripped; ``autocast`` is the dtype autocast was set to
    (``"float16"``, ``"bfloat16"``) when the call ran under autocast and made a result of it.
    ``written``, for a traced assignment into a tensor (``z[0] = v``, ``z[mask] = v``), is the
    flat (row-major) positions of that tensor the assignment wrote, when the trace could tell
    (``None`` otherwise).  ``block_line``, for a call whose ``line`` is a line of its own
    inside a function the block called (a module's ``forward``), is the block's line that
    called it (``None`` where ``line`` is the block's own): what a loop the block ran is read
    from (:attr:`at_block`).
    """

    id: str
    name: str | None
    forward: str | None = None
    saved: tuple[SavedEntry, ...] = ()
    variable: str | None = None
    region: str | None = None
    scope: str | None = None
    line: int | None = None
    code: str | None = None
    autocast: str | None = None
    written: tuple[int, ...] | None = None
    block_line: int | None = None

    @property
    def at_block(self) -> int | None:
        """The line of the ``with trace()`` block that made this call (itself, or a function
        it called): ``block_line`` where the call keeps a line of its own, else ``line``."""
        return self.line if self.block_line is None else self.block_line

    @property
    def label(self) -> str:
        """The backward node's name, else the forward op's name."""
        return self.name or self.forward or self.id

    @property
    def is_accumulate_grad(self) -> bool:
        """Whether this is the ``AccumulateGrad`` node where a leaf's ``.grad`` is stored."""
        return self.name == "AccumulateGrad"


class Edge(NamedTuple):
    """A directed edge of one of four kinds (see :data:`EDGE_KINDS`).

    - ``next``: op ``src`` lists op ``dst`` in its ``next_functions`` at position
      ``input_nr``; ``output_nr`` is which output of ``dst`` it refers to.  This is
      the backward direction, exactly as PyTorch stores it.
    - ``input``: tensor ``src`` is argument number ``input_nr`` of op ``dst`` (forward).
    - ``output``: op ``src`` produced tensor ``dst`` as its output ``output_nr`` (forward).
    - ``detach``: tensor ``dst`` came from ``src.detach()``: same storage, no gradient path.
    """

    src: str
    dst: str
    kind: str
    input_nr: int = 0
    output_nr: int = 0


# -- reading JSON: what every field of every record must hold (see graphlens.values.read_fields)
_TEXTS = dict.fromkeys(("name", "op", "detached_from", "region", "scope", "made_by", "code"), TEXT_OR_NULL)
_TENSOR = kinds_of(
    TensorNode, id=TEXT, shape=SHAPE, dtype=TEXT, device=TEXT, version=INTEGER, output_nr=COUNT, line=INTEGER_OR_NULL,
    grad=SUMMARY_OR_NULL, value=SUMMARY_OR_NULL, flowed=FLOWED, **_TEXTS,
    **dict.fromkeys(("is_leaf", "requires_grad", "retains_grad", "is_view", "is_parameter"), FLAG),
)
_TENSOR_V1 = {**_TENSOR, "grad": TEXT_OR_NULL, "value": TEXT_OR_NULL, "flowed": V1_TEXTS}
_OP = kinds_of(OpNode, id=TEXT, saved=SAVED, line=INTEGER_OR_NULL, block_line=INTEGER_OR_NULL, written=POSITIONS_OR_NULL,
             **dict.fromkeys(("name", "forward", "variable", "region", "scope", "code", "autocast"), TEXT_OR_NULL))
_OP_V1 = {**_OP, "saved": V1_SAVED}
_GRAPH_FIELDS = ("schema", "source", "roots", "tensors", "ops", "edges", "notes")
_EDGE = kinds_of(Edge, src=TEXT, dst=TEXT, kind=one_of("edge kind", EDGE_KINDS), input_nr=COUNT, output_nr=COUNT)


class Graph:
    """A captured autograd graph: tensors, ops, edges and the root tensors.

    Build one with :func:`graphlens.snapshot` or :func:`graphlens.trace`.  A ``Graph``
    is a plain value: it holds strings and numbers, never a tensor, so it does not keep
    the program's tensors alive.  Two graphs are equal when their records are equal.
    A copy (``pickle``, ``copy.deepcopy``, ``copy.copy``) is a plain record: equal, with the
    same JSON and DOT, but without the weak references to the live tensors, so for it
    :meth:`tensor` (and what needs the live tensor) behaves as for a freed tensor.
    """

    __slots__ = ("_tensors", "_ops", "_edges", "_roots", "_source", "_index", "_found", "_adj", "_next_edges", "_refs", "_notes", "__weakref__")

    def __init__(
        self,
        tensors=(),
        ops=(),
        edges=(),
        roots=(),
        *,
        source: str = "snapshot",
        refs: Mapping[str, weakref.ref] | None = None,
        notes: Mapping[str, Any] | None = None,
    ) -> None:
        self._tensors: tuple[TensorNode, ...] = tuple(tensors)
        # ops and edges may be given as a zero-argument callable that builds them on first
        # use: a large snapshot then costs little more than the walk itself.
        self._ops = ops if callable(ops) else tuple(ops)
        self._edges = edges if callable(edges) else tuple(edges)
        self._roots: tuple[str, ...] = tuple(roots)
        self._source = source
        self._index: dict[str, TensorNode | OpNode] | None = None
        self._found: dict[str, TensorNode | OpNode] | None = None  # (what find() answers for each key)
        self._adj: Adjacency | None = None
        self._next_edges: dict[str, tuple[Edge, ...]] | None = None
        self._refs = dict(refs or {})
        self._notes: dict[str, tuple[str, ...]] = {
            k: (v,) if isinstance(v, str) else tuple(v) for k, v in (notes or {}).items()
        }

    # -- the records ---------------------------------------------------------------
    @property
    def tensors(self) -> tuple[TensorNode, ...]:
        """The tensor (data) nodes, in the order they were discovered."""
        return self._tensors

    @property
    def ops(self) -> tuple[OpNode, ...]:
        """The operation nodes, in traversal order."""
        if callable(self._ops):
            self._ops = tuple(self._ops())
        return self._ops

    def _without_saved(self) -> "Graph":
        """This graph for a use that reads no op's ``saved`` (a picture that draws none):
        while a snapshot's ops are still to be built, a graph whose ops are built without
        their saved entries (the snapshot read them already; making their records waits
        until something shows them), else this graph itself."""
        bare = getattr(self._ops, "bare", None) if callable(self._ops) else None
        if bare is None:
            return self
        out = Graph(self._tensors, bare, lambda: self.edges, self._roots, source=self._source, refs=self._refs)
        out._notes = self._notes
        out._adj = self._adj
        return out

    @property
    def edges(self) -> tuple[Edge, ...]:
        """All edges; filter by ``Edge.kind``."""
        if callable(self._edges):
            self._edges = tuple(self._edges())
        return self._edges

    @property
    def roots(self) -> tuple[TensorNode, ...]:
        """The tensors the graph was captured from (the losses)."""
        return tuple(self.node(i) for i in self._roots)  # type: ignore[misc]

    @property
    def leaves(self) -> tuple[TensorNode, ...]:
        """The leaf tensors."""
        return tuple(t for t in self._tensors if t.is_leaf)

    @property
    def source(self) -> str:
        """``"snapshot"`` or ``"trace"``: how the graph was captured."""
        return self._source

    @property
    def counts(self) -> dict[str, int]:
        """How many tensors, ops, leaves and edges of each kind the graph has."""
        out = {"tensors": len(self._tensors), "ops": len(self.ops), "leaves": len(self.leaves)}
        for kind in EDGE_KINDS:
            out[kind] = 0
        for e in self.edges:
            out[e.kind] += 1
        return out

    def _lookup(self) -> dict[str, TensorNode | OpNode]:
        if self._index is None:
            index: dict[str, TensorNode | OpNode] = {t.id: t for t in self._tensors}
            index.update((o.id, o) for o in self.ops)
            self._index = index
        return self._index

    def node(self, id: str) -> TensorNode | OpNode:
        """The record with this id (``t3``, ``op5``)."""
        if not isinstance(id, str):
            raise TypeError(f"id must be a str like 't3' or 'op5', not {type(id).__name__}")
        try:
            return self._lookup()[id]
        except KeyError:
            raise KeyError(f"no node with id {id!r} in this graph") from None

    def __contains__(self, id: object) -> bool:
        return id in self._lookup()

    def find(self, name: str) -> TensorNode | OpNode:
        """The tensor named ``name`` (the latest one when a name was reused), else the op
        with that id, backward name or forward name (the first one in traversal order)."""
        if not isinstance(name, str):
            raise TypeError(f"name must be a str like 'w' or 'op3', not {type(name).__name__}")
        if self._found is None:  # (built once: asked of every node, a scan each would be quadratic)
            found: dict[str, TensorNode | OpNode] = {}
            for o in self.ops:  # (the first op by backward or forward name; an id wins over it, a tensor's name over both)
                if o.name:
                    found.setdefault(o.name, o)
                if o.forward:
                    found.setdefault(o.forward, o)
            found.update(self._lookup())
            found.update((t.name, t) for t in self._tensors if t.name)  # (the latest one of a reused name)
            self._found = found
        node = self._found.get(name)
        if node is not None:
            return node
        known = sorted({t.name for t in self._tensors if t.name})
        raise KeyError(f"no tensor or op named {name!r} in this graph (named tensors: {known})")

    def find_all(self, name: str) -> tuple[TensorNode, ...]:
        """Every tensor that was bound to ``name``, in the order they were made."""
        return tuple(t for t in self._tensors if t.name == name)

    # -- adjacency (built once, on first use) -------------------------------------------
    @property
    def adjacency(self) -> Adjacency:
        """The graph's neighbour tables (see :class:`Adjacency`), built once and cached."""
        if self._adj is None:
            self._adj = build_adjacency(self.ops, self.edges)
        return self._adj

    def _id_of(self, node: Any, what: str, cls: type) -> str:
        if isinstance(node, (TensorNode, OpNode)):
            node = node.id
        if not isinstance(node, str):
            raise TypeError(f"{what} must be a node id like {'t3' if cls is TensorNode else 'op3'!r} or a {cls.__name__}, not {type(node).__name__}")
        found = self.node(node)  # KeyError for an unknown id
        if not isinstance(found, cls):
            raise ValueError(f"{what} {node!r} is {'an op' if isinstance(found, OpNode) else 'a tensor'} of this graph, not {'an op' if cls is OpNode else 'a tensor'}")
        return node

    def inputs(self, op: str | OpNode) -> tuple[Edge, ...]:
        """The ``next`` edges of an op (its ``next_functions``), ordered by ``input_nr``."""
        op_id = self._id_of(op, "op", OpNode)
        if self._next_edges is None:  # (built once: asked of every op, a scan each would be quadratic)
            by_op: dict[str, list[Edge]] = {}
            for e in self.edges:
                if e.kind == "next":
                    by_op.setdefault(e.src, []).append(e)
            self._next_edges = {k: tuple(sorted(v, key=lambda e: e.input_nr)) for k, v in by_op.items()}
        return self._next_edges.get(op_id, ())

    def next_ops(self, op: str | OpNode) -> tuple[OpNode, ...]:
        """The ops in an op's ``next_functions``, ordered by ``input_nr`` (backward direction)."""
        return tuple(self.node(i) for i in self.adjacency.next.get(self._id_of(op, "op", OpNode), ()))  # type: ignore[misc]

    def consumers(self, tensor: str | TensorNode) -> tuple[OpNode, ...]:
        """The ops that took this tensor as an input (forward direction)."""
        return tuple(self.node(i) for i in self.adjacency.consumers.get(self._id_of(tensor, "tensor", TensorNode), ()))  # type: ignore[misc]

    def outputs(self, op: str | OpNode) -> tuple[TensorNode, ...]:
        """The recorded tensors an op produced."""
        return tuple(self.node(i) for i in self.adjacency.outputs.get(self._id_of(op, "op", OpNode), ()))  # type: ignore[misc]

    def accumulate_grad(self, tensor: str | TensorNode) -> OpNode | None:
        """The ``AccumulateGrad`` op that stores a leaf's ``.grad``, or ``None``."""
        op = self.adjacency.accumulate_grad.get(self._id_of(tensor, "tensor", TensorNode))
        return None if op is None else self.node(op)  # type: ignore[return-value]

    def producer(self, tensor: str | TensorNode) -> OpNode | None:
        """The op that produced a tensor, or ``None`` for a tensor made directly."""
        t = self.node(self._id_of(tensor, "tensor", TensorNode))
        return None if t.op is None else self.node(t.op)  # type: ignore[union-attr,return-value]

    def tensor(self, id: str):
        """The live tensor behind a tensor node, or ``None`` once it was freed.

        The graph keeps only weak references, so this never keeps a tensor alive."""
        ref = self._refs.get(id)
        return None if ref is None else ref()

    # -- drawing (graphlens.render does the work; this module knows no Graphviz) -------
    def to_dot(self, view: str = "data", **options: Any):
        """A ``graphviz.Digraph`` of this graph (see :func:`graphlens.render.to_dot`)."""
        from .render import to_dot

        return to_dot(self, view=view, **options)

    def render(self, path, **options: Any):
        """Write the diagram to ``path`` (svg, png or pdf by suffix); returns the path."""
        from .render import render

        return render(self, path, **options)

    def to_html(self, path=None, **options: Any) -> str:
        """One self-contained explorer page (no network): opens by module, click a module to
        open or close it, search, hover for values, pan and zoom (see
        :func:`graphlens.render.explore_html.explore_page`).  Written to ``path`` when given;
        returns the HTML."""
        from .render.explore_html import explore_page

        with paused_gc():  # (drawing and the page's records make many small acyclic objects)
            page = explore_page(self, **options)
        if path is not None:
            from pathlib import Path

            Path(path).write_text(page, encoding="utf-8")
        return page

    def memory(self):
        """The bytes the saved tensors keep alive until backward, per op and per module, and
        the total (a :class:`graphlens.memory.Memory`; ``print()`` shows a table)."""
        from .memory import memory

        return memory(self)

    def _repr_mimebundle_(self, include=None, exclude=None):
        from .render import repr_mimebundle

        return repr_mimebundle(self, include, exclude)

    # -- notes ----------------------------------------------------------------------
    @property
    def notes(self) -> Mapping[str, tuple[str, ...]]:
        """Short texts attached to nodes, by node id (several per node stack up); part of the
        graph's value (equality, JSON) and drawn beside their node."""
        return MappingProxyType(self._notes)

    def annotate(self, notes: Mapping[str, Any]) -> "Graph":
        """A new graph with ``notes`` added: ``{key: text or texts}``, the key a node id
        (``t3``, ``op5``) or a name :meth:`find` knows (``"y1"``, ``"MulBackward0"``).

        >>> import torch, graphlens as gl
        >>> w = torch.tensor([1.0], requires_grad=True)
        >>> g = gl.snapshot((w * 2).sum()).annotate({"w": "the weight"})
        >>> g.notes[g.find("w").id]
        ('the weight',)
        """
        if not isinstance(notes, Mapping):
            raise TypeError(f"notes must be a dict from a node id or name to a text, not {type(notes).__name__}")
        merged = dict(self._notes)  # (texts are tuples: the notes given are added, the others shared)
        for key, text in notes.items():
            node_id = self._note_target(key)
            texts = (text,) if isinstance(text, str) else tuple(text)
            if not all(isinstance(t, str) for t in texts):
                raise TypeError(f"notes[{key!r}] must be a str (or a list of them), not {type(text).__name__}")
            merged[node_id] = merged.get(node_id, ()) + texts
        out = Graph(self._tensors, self.ops, self.edges, self._roots, source=self._source)
        out._refs, out._notes = self._refs, merged  # (never changed: shared, not copied)
        # (the same records: what was built of them once holds for the new graph, so notes added
        # one call at a time cost no rebuild each)
        out._adj, out._index, out._found, out._next_edges = self._adj, self._index, self._found, self._next_edges
        return out

    def _note_target(self, key: Any) -> str:
        if not isinstance(key, str):
            raise TypeError(f"a note's key must be a node id or a name (a str), not {type(key).__name__}")
        if key in self:
            return key
        try:
            return self.find(key).id
        except KeyError:
            import difflib

            known = sorted({t.name for t in self._tensors if t.name} | {o.label for o in self.ops})
            close = difflib.get_close_matches(key, known, n=4) or known[:8]
            raise KeyError(f"no node named {key!r} to annotate (close names: {close})") from None

    # -- value semantics ------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Graph):
            return NotImplemented
        return (
            self._tensors == other._tensors
            and self.ops == other.ops
            and self.edges == other.edges
            and self._roots == other._roots
            and self._source == other._source
            and self._notes == other._notes
        )

    def __hash__(self) -> int:
        return hash((self._tensors, self.ops, self.edges, self._roots, self._source, tuple(self._notes.items())))

    def __reduce__(self):
        # pickle, copy and deepcopy: the records (ops and edges built if they were still to be)
        # and the notes, never the weak references to live tensors (see the class docstring)
        return (type(self), (self._tensors, self.ops, self.edges, self._roots), (self._source, self._notes))

    def __setstate__(self, state: tuple) -> None:
        self._source, notes = state
        self._notes = {k: tuple(v) for k, v in notes.items()}

    def __repr__(self) -> str:
        c = self.counts
        roots = ", ".join(t.label for t in self.roots) or "-"
        return (
            f"<Graph from {self._source}: {c['tensors']} tensors ({c['leaves']} leaves), "
            f"{c['ops']} ops, {len(self.edges)} edges; roots: {roots}>"
        )

    def __iter__(self) -> Iterator[TensorNode | OpNode]:
        yield from self._tensors
        yield from self.ops

    def __len__(self) -> int:
        return len(self._tensors) + len(self.ops)

    # -- JSON -----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """A plain dict of lists, strings and numbers (see :meth:`from_dict`)."""

        def tensor(t: TensorNode) -> dict[str, Any]:
            d = t._asdict()
            d["shape"] = list(t.shape)
            d["value"] = None if t.value is None else t.value.to_dict()
            d["grad"] = None if t.grad is None else t.grad.to_dict()
            d["flowed"] = flowed_json(t.flowed)
            return d

        def op(o: OpNode) -> dict[str, Any]:
            d = o._asdict()
            d["saved"] = [e.to_dict() for e in o.saved]
            return d

        with paused_gc():  # (a dict per record and per value: acyclic, many; torch alone holds ~200k tracked objects)
            return {
                "schema": SCHEMA_VERSION,
                "source": self._source,
                "roots": list(self._roots),
                "tensors": [tensor(t) for t in self._tensors],
                "ops": [op(o) for o in self.ops],
                "edges": [e._asdict() for e in self.edges],
                "notes": {k: list(v) for k, v in self._notes.items()},
            }

    def to_json(self, *, indent: int | None = None) -> str:
        """The graph as JSON text; ``Graph.from_json(g.to_json()) == g``."""
        return json.dumps(self.to_dict(), indent=indent, sort_keys=True, allow_nan=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Graph":
        """Rebuild a graph from :meth:`to_dict` output (schema 3, or 2 and 1 as written before).

        Every field is checked: a field of the wrong type, a duplicate id, or a root, edge
        end, producer, detach source or leaf that names no node raises a ``ValueError``
        that says, in a sentence, which record and field (``bad tensor 't3': field 'shape'
        must be a list of sizes ..., not int 5``)."""
        if not isinstance(data, Mapping):
            raise TypeError(f"data must be a dict as written by Graph.to_dict(), not {type(data).__name__}")
        schema = data.get("schema")
        if type(schema) is not int or schema not in (1, 2, SCHEMA_VERSION):
            raise ValueError(f"unsupported graph schema: {short(schema)} (must be 1, 2 or {SCHEMA_VERSION})")
        unknown = sorted(str(k) for k in data if k not in _GRAPH_FIELDS)
        if unknown:
            raise ValueError(f"bad graph: unknown field(s) {unknown} (must be among {list(_GRAPH_FIELDS)})")
        for key in ("tensors", "ops", "edges", "roots"):
            if not isinstance(data.get(key, ()), (list, tuple)):
                raise ValueError(f"bad graph: field {key!r} must be a list, not {describe(data.get(key))}")
        source = data.get("source", "snapshot")
        if source not in ("snapshot", "trace") or not isinstance(source, str):
            raise ValueError(f"unknown source: {short(source)} (must be one of ['snapshot', 'trace'])")
        v1 = schema == 1
        with paused_gc():  # (a record per node and value: acyclic, many)
            g = cls(
                read_records(TensorNode, _TENSOR_V1 if v1 else _TENSOR, data.get("tensors", ()), "tensor", "id",
                             convert=tensor_v1 if v1 else None),
                read_records(OpNode, _OP_V1 if v1 else _OP, data.get("ops", ()), "op", "id"),
                read_records(Edge, _EDGE, data.get("edges", ()), "edge", "src", "dst"),
                read_ids(data.get("roots", ()), "roots", "root", "a tensor id"),
                source=source,
                notes=read_notes(data.get("notes") or {}),
            )
            g._validate()
        return g

    def _validate(self) -> None:
        kinds: dict[str, str] = {}
        for kind, records in (("tensor", self._tensors), ("op", self.ops)):
            for r in records:
                if r.id in kinds:
                    other = f"another {kind}" if kinds[r.id] == kind else ("a tensor" if kind == "op" else "an op")
                    raise ValueError(f"bad graph: duplicate node id {short(r.id)}: {other} already has it "
                                     "(ids are unique across tensors and ops)")
                kinds[r.id] = kind
        tensor_ids = {t.id for t in self._tensors}
        op_ids = {o.id for o in self.ops}
        for r in self._roots:
            if r not in tensor_ids:
                raise ValueError(f"root {short(r)} names no tensor of the graph")
        ends = {"next": (op_ids, op_ids), "input": (tensor_ids, op_ids), "output": (op_ids, tensor_ids), "detach": (tensor_ids, tensor_ids)}
        for e in self.edges:
            srcs, dsts = ends[e.kind]
            for end, ids in (("src", srcs), ("dst", dsts)):
                value = getattr(e, end)
                if value not in ids:
                    raise ValueError(f"{e.kind} edge {short(e.src)} -> {short(e.dst)}: its {end} {short(value)} names no {'op' if ids is op_ids else 'tensor'} of the graph")
        for t in self._tensors:
            if t.op is not None and t.op not in op_ids:
                raise ValueError(f"tensor {short(t.id)}: its op {short(t.op)} names no op of the graph")
            if t.detached_from is not None and t.detached_from not in tensor_ids:
                raise ValueError(f"tensor {short(t.id)}: detached_from {short(t.detached_from)} names no tensor of the graph")
        for k in self._notes:
            if k not in tensor_ids and k not in op_ids:
                raise ValueError(f"a note is attached to {short(k)}, which names no node of the graph")
        for o in self.ops:
            if o.variable is not None and o.variable not in tensor_ids:
                raise ValueError(f"op {short(o.id)}: its variable {short(o.variable)} names no tensor of the graph")
            for entry in o.saved:
                if entry.tensor is not None and entry.tensor not in tensor_ids:
                    raise ValueError(f"op {short(o.id)}: saved {short(entry.name)} names no tensor {short(entry.tensor)} of the graph")

    @classmethod
    def from_json(cls, text: str) -> "Graph":
        """Rebuild a graph from :meth:`to_json` output (checked as :meth:`from_dict` says)."""
        if not isinstance(text, (str, bytes, bytearray)):
            raise TypeError(f"text must be a str of JSON as written by Graph.to_json(), not {type(text).__name__}")
        try:
            with paused_gc():  # (the document's dicts and lists: acyclic, many)
                data = json.loads(text, parse_constant=BareLiteral)
        except RecursionError:
            raise ValueError("not graph JSON: the document is nested too deeply (a graph nests a few levels)") from None
        except ValueError as exc:  # not JSON, or an integer too long to read
            raise ValueError(f"not graph JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ValueError(f"not graph JSON: the document must be a JSON object, not {describe(data)}")
        return cls.from_dict(data)
