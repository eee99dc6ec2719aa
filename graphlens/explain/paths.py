"""Path queries over a :class:`~graphlens.Graph`: backward and forward walks, highlights, labels."""

from __future__ import annotations

from collections import deque
from typing import Iterable, Sequence

from ..graph import Adjacency, Graph, OpNode, TensorNode

__all__ = ["PathView"]


class PathView:
    """One graph with the path queries an explanation asks of it.

    A thin view: every neighbour table is the graph's own cached
    :attr:`~graphlens.Graph.adjacency` (read-only mappings of tuples), nothing is copied.
    """

    __slots__ = ("g", "adj", "_bound")

    def __init__(self, g: Graph) -> None:
        self.g = g
        self.adj: Adjacency = g.adjacency
        self._bound: dict[str, int] | None = None  # name -> how many tensors were bound to it (counted once)

    def has_edge(self, src: str, dst: str) -> bool:
        """Whether the graph has an edge ``src -> dst`` of any kind."""
        adj = self.adj
        return (
            dst in adj.next.get(src, ())
            or dst in adj.consumers.get(src, ())
            or dst in adj.outputs.get(src, ())
            or dst in adj.detached.get(src, ())
        )

    def _forward(self, node: str) -> tuple[str, ...]:
        """Where ``node`` leads forward: a tensor to the ops it feeds and the tensors
        detached from it, an op to the tensors it produced."""
        adj = self.adj
        if node.startswith("t"):
            return adj.consumers.get(node, ()) + adj.detached.get(node, ())
        return adj.outputs.get(node, ())

    def t(self, id: str) -> TensorNode:
        return self.g.node(id)  # type: ignore[return-value]

    def o(self, id: str) -> OpNode:
        return self.g.node(id)  # type: ignore[return-value]

    def backward_children(self, node: str) -> list[str]:
        """Where a gradient goes next from ``node`` (a tensor or an op), backward."""
        if node.startswith("t"):
            t = self.t(node)
            if t.op is not None and t.op in self.g and self.o(t.op).name is not None:
                return [t.op]
            return []
        op = self.o(node)
        if op.is_accumulate_grad:
            return [op.variable] if op.variable else []
        nxt = self.adj.next.get(node, ())
        # A leaf input is reached only through its AccumulateGrad node among the op's next
        # functions (when they were recorded): a leaf whose requires_grad was switched on after
        # the op ran requires grad now, but the op's backward node does not lead to it.
        acc = self.adj.accumulate_grad
        out = [i for i in self.adj.inputs.get(node, ()) if self.t(i).requires_grad
               and (not self.t(i).is_leaf or not nxt or acc.get(i) in nxt)]
        out.extend(nxt)
        return out

    def bfs(self, starts: Iterable[str], goal: str | None = None) -> tuple[dict[str, str | None], list[str]]:
        """Backward breadth-first walk from ``starts``: (parents, path to ``goal`` or [])."""
        parents: dict[str, str | None] = {}
        queue = deque()
        for s in starts:
            if s not in parents:
                parents[s] = None
                queue.append(s)
        while queue:
            node = queue.popleft()
            if node == goal:
                break
            for child in self.backward_children(node):
                if child not in parents:
                    parents[child] = node
                    queue.append(child)
        path: list[str] = []
        if goal is not None and goal in parents:
            node: str | None = goal
            while node is not None:
                path.append(node)
                node = parents[node]
            path.reverse()
        return parents, path

    def forward_bfs(self, start: str, goals: set[str], avoid: frozenset | set = frozenset()) -> list[str]:
        """A forward path (input, output and detach edges) from ``start`` to one of ``goals``,
        through none of the nodes of ``avoid``."""
        parents: dict[str, str | None] = {start: None, **dict.fromkeys(avoid)}
        queue = deque([start])
        hit = None
        while queue:
            node = queue.popleft()
            if node in goals and node != start:
                hit = node
                break
            nxt = self._forward(node)
            for child in nxt:
                if child not in parents:
                    parents[child] = node
                    queue.append(child)
        if hit is None:
            return []
        path = []
        node: str | None = hit
        while node is not None:
            path.append(node)
            node = parents[node]
        return path[::-1]

    def forward_sinks(self, start: str) -> list[str]:
        """The tensors reachable forward from ``start`` that nothing consumes."""
        seen = {start}
        queue = deque([start])
        sinks = []
        while queue:
            node = queue.popleft()
            nxt = self._forward(node)
            if node.startswith("t") and not nxt and node != start:
                sinks.append(node)
            for child in nxt:
                if child not in seen:
                    seen.add(child)
                    queue.append(child)
        return sinks

    def highlight_edges(self, path: Sequence[str]) -> list[tuple[str, str]]:
        """The graph's edges along a path (either direction), plus ``next`` edges between
        consecutive ops of the path, so both diagram views light up."""
        out = []
        for a, b in zip(path, path[1:]):
            if self.has_edge(a, b):
                out.append((a, b))
            if self.has_edge(b, a):
                out.append((b, a))
        ops = [p for p in path if p.startswith("op")]
        for a, b in zip(ops, ops[1:]):
            if self.has_edge(a, b):
                out.append((a, b))
            if self.has_edge(b, a):
                out.append((b, a))
        return out

    def label(self, id: str) -> str:
        """What an explanation calls a node: a tensor's name (with its id when several
        tensors of the graph had that name: a rebound variable), else ``an unnamed tensor (t3)``."""
        node = self.g.node(id)
        if isinstance(node, TensorNode):
            if node.name is None:
                return f"an unnamed tensor ({id})"
            if self._bound is None:
                self._bound = {}
                for t in self.g.tensors:
                    if t.name is not None:
                        self._bound[t.name] = self._bound.get(t.name, 0) + 1
            if self._bound.get(node.name, 0) > 1:
                return f"{node.name} ({id})"
            return node.name
        return node.label

    def chain(self, path: Sequence[str]) -> str:
        """The backward node names along a path: ``SumBackward0 -> MulBackward0`` (or ``directly``)."""
        names = [self.o(p).label for p in path if p.startswith("op")]
        return " -> ".join(names) or "directly"

    def with_acc(self, path: list[str]) -> list[str]:
        """Fill a backward path in for both diagram views: the tensor between two ops joined by
        a ``next`` edge (when the graph knows it), and the leaf's AccumulateGrad node before the
        leaf at the end."""
        out: list[str] = []
        for i, node in enumerate(path):
            if out and node.startswith("op") and out[-1].startswith("op"):
                a = out[-1]
                between = [t for t in self.adj.inputs.get(a, ()) if self.t(t).op == node]
                if between:
                    out.append(between[0])
            out.append(node)
        path = out
        if len(path) >= 2 and path[-1].startswith("t") and path[-2].startswith("op"):
            acc = self.adj.accumulate_grad.get(path[-1])
            if acc is not None and acc != path[-2] and self.has_edge(path[-2], acc):
                return path[:-1] + [acc, path[-1]]
        return path

    def leaves_below(self, tid: str) -> list[str]:
        """The leaf tensors requiring grad that a gradient through ``tid`` reaches."""
        parents, _ = self.bfs([tid])
        return [n for n in parents if n.startswith("t") and n != tid and self.t(n).is_leaf and self.t(n).requires_grad]
