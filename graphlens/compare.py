"""Two graphs compared: tensors matched by name, what is only in one, and what changed."""

from __future__ import annotations

from typing import Any, Iterator, NamedTuple

from .graph import Graph, OpNode, TensorNode
from .values import PRECISION, same_head

__all__ = ["compare", "Comparison", "Change"]


class Change(NamedTuple):
    """One difference: the node id in the first graph (or None), in the second (or None),
    and what changed, in words (``"requires_grad True -> False"``)."""

    first: str | None
    second: str | None
    text: str


def _keys(g: Graph, intern: dict[str, int]) -> dict[str, int]:
    """A key per node that the same program gives the same node in two runs.  A tensor's: its
    name and which occurrence of that name it is, else the op that made it and the position.
    An op's: its call (or backward node), its outputs' keys, its variable's key, and which
    occurrence of all that it is.  Each key is a number from ``intern``, which both graphs
    share, for a text that spells the key out: a text's hash is kept and the collector never
    walks it (keys as tuples nesting tuples were hashed again at every lookup and filled the
    collector's generations: on a 16,000-op chain that cost twice as much per op as on 2,000)."""
    keys: dict[str, int] = {}
    seen: dict[str, int] = {}
    labels = {o.id: o.label for o in g.ops}
    number = intern.setdefault
    for t in g.tensors:
        if t.name:
            base = f"name\0{t.name}"
        else:
            op = (labels[t.op] if t.op in labels else g.node(t.op).label) if t.op is not None else None
            base = f"made\0{op!r}\0{t.output_nr}\0{t.shape}\0{t.dtype}"
        n = seen.get(base, 0)
        seen[base] = n + 1
        keys[t.id] = number(f"{base}\0{n}", len(intern))
    outputs = g.adjacency.outputs
    for o in g.ops:
        outs = ",".join([str(keys[t]) for t in outputs.get(o.id, ())])
        var = keys.get(o.variable) if o.variable else None
        base = f"op\0{o.forward or o.name!r}\0{outs}\0{var}"  # (a traced call is the same call, backward node or not)
        n = seen.get(base, 0)
        seen[base] = n + 1
        keys[o.id] = number(f"{base}\0{n}", len(intern))
    return keys


def _grad_text(t: TensorNode) -> str:
    return "None" if t.grad is None else t.grad.format(PRECISION)


def _tensor_changes(a: TensorNode, b: TensorNode) -> list[str]:
    out = []
    if a.requires_grad != b.requires_grad:
        out.append(f"requires_grad {a.requires_grad} -> {b.requires_grad}")
    if a.is_leaf != b.is_leaf:
        out.append(f"{'leaf' if a.is_leaf else 'non-leaf'} -> {'leaf' if b.is_leaf else 'non-leaf'}")
    if (a.grad is None) != (b.grad is None) or (a.grad is not None and b.grad is not None and not same_head(a.grad.head, b.grad.head)):
        out.append(f"grad {_grad_text(a)} -> {_grad_text(b)}")
    return out


class Comparison:
    """Two graphs side by side (see :func:`compare`): ``matched`` pairs of node ids,
    ``only_first`` / ``only_second`` node ids, ``changes`` (:class:`Change`)."""

    def __init__(self, first: Graph, second: Graph, labels: tuple[str, str] = ("before", "after")) -> None:
        if not isinstance(first, Graph) or not isinstance(second, Graph):
            raise TypeError(
                f"compare() takes two graphlens Graphs, not {type(first).__name__} and {type(second).__name__}"
            )
        if not (isinstance(labels, (tuple, list)) and len(labels) == 2 and all(isinstance(x, str) for x in labels)):
            raise TypeError(f"labels must be two strings, e.g. labels=('before', 'after'), not {labels!r}")
        self.first, self.second, self.labels = first, second, tuple(labels)
        intern: dict[str, int] = {}
        ka, kb = _keys(first, intern), _keys(second, intern)
        by_key_b = {k: i for i, k in kb.items()}
        by_key_a = {k: i for i, k in ka.items()}
        self.matched: tuple[tuple[str, str], ...] = tuple((i, by_key_b[k]) for i, k in ka.items() if k in by_key_b)
        self.only_first: tuple[str, ...] = tuple(i for i, k in ka.items() if k not in by_key_b)
        self.only_second: tuple[str, ...] = tuple(i for i, k in kb.items() if k not in by_key_a)
        changes: list[Change] = []
        nodes_a = {n.id: n for n in (*first.tensors, *first.ops)}
        nodes_b = {n.id: n for n in (*second.tensors, *second.ops)}
        for i, j in self.matched:
            a, b = nodes_a[i], nodes_b[j]
            if isinstance(a, TensorNode):
                texts = _tensor_changes(a, b)  # type: ignore[arg-type]
                if texts:
                    changes.append(Change(i, j, "; ".join(texts)))
            elif a.name != b.name:
                changes.append(Change(i, j, f"backward node {a.name} -> {b.name}"))
        for i in self.only_first:
            changes.append(Change(i, None, f"{nodes_a[i].label}: only in {self.labels[0]}"))
        for j in self.only_second:
            changes.append(Change(None, j, f"{nodes_b[j].label}: only in {self.labels[1]}"))
        self.changes: tuple[Change, ...] = tuple(changes)

    def __iter__(self) -> Iterator[Change]:
        return iter(self.changes)

    def __repr__(self) -> str:
        return (
            f"<Comparison {self.labels[0]!r} vs {self.labels[1]!r}: {len(self.matched)} matched, "
            f"{len(self.only_first)} only in {self.labels[0]}, {len(self.only_second)} only in {self.labels[1]}, "
            f"{sum(1 for c in self.changes if c.first and c.second)} changed>"
        )

    def annotated(self) -> tuple[Graph, Graph]:
        """The two graphs with a note on every node that differs (what changed)."""
        na: dict[str, list[str]] = {}
        nb: dict[str, list[str]] = {}
        for c in self.changes:
            if c.first and c.second:
                nb.setdefault(c.second, []).append(c.text)
            elif c.first and isinstance(self.first.node(c.first), TensorNode):
                na.setdefault(c.first, []).append(c.text)
            elif c.second and isinstance(self.second.node(c.second), TensorNode):
                nb.setdefault(c.second, []).append(c.text)
        return self.first.annotate(na), self.second.annotate(nb)

    # -- drawing (graphlens.render.compare does the work) -------------------------------
    def to_dot(self, **options: Any):
        """Both graphs in one ``graphviz.Digraph``, side by side, matching tensors level."""
        from .render.compare import comparison_dot

        return comparison_dot(self, **options)

    def render(self, path, **options: Any):
        """Write the side-by-side diagram to ``path`` (svg, png, ... by suffix)."""
        from .render.output import render_source

        return render_source(self.to_dot(**options).source, path)

    def _repr_mimebundle_(self, include=None, exclude=None, **_):
        return self.to_dot()._repr_mimebundle_(include, exclude)


def compare(first: Graph, second: Graph, *, labels: tuple[str, str] = ("before", "after")) -> Comparison:
    """Compare two graphs (two runs, before and after a change): tensors and ops are matched
    by name (and, unnamed, by the op that made them); :attr:`Comparison.changes` lists what
    is only in one graph and the tensors whose requires_grad, leaf status or ``.grad``
    differ; :meth:`Comparison.to_dot` draws both side by side with a note on each difference.

    >>> import torch, graphlens as gl
    >>> p = torch.tensor([1.0], requires_grad=True)
    >>> with gl.trace() as tr:
    ...     y = p * 2
    >>> before = tr.graph()                 # (a graph reads the tensors when it is taken)
    >>> _ = p.requires_grad_(False)
    >>> with gl.trace() as tr:
    ...     y = p * 2
    >>> for c in gl.compare(before, tr.graph(), labels=("trained", "frozen")):
    ...     print(c.text)
    requires_grad True -> False
    requires_grad True -> False; non-leaf -> leaf
    backward node MulBackward0 -> None
    AccumulateGrad: only in trained
    """
    return Comparison(first, second, labels)
