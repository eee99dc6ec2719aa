"""Who is connected to whom in a Graph: its neighbour tables, built once per graph and read-only."""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Iterable, Mapping, NamedTuple, Sequence

if TYPE_CHECKING:  # (the records live in graphlens.graph, which builds its tables with this module)
    from .graph import Edge, OpNode

__all__ = ["Adjacency", "build_adjacency"]


class Adjacency(NamedTuple):
    """Who is connected to whom in a :class:`Graph`, built once per graph and read-only.

    Every mapping goes from a node id to a tuple of node ids (in edge order); a node with
    no such neighbour is absent.  ``next`` is PyTorch's own backward direction (an op to
    the ops in its ``next_functions``, by ``input_nr``); ``prev`` is its reverse; the
    forward ones (``inputs``, ``consumers``, ``outputs``) come from ``input`` and
    ``output`` edges; ``detached`` maps a tensor to the tensors ``detach()``-ed from it;
    ``accumulate_grad`` maps a leaf tensor to the ``AccumulateGrad`` op that stores its
    ``.grad`` (one id, not a tuple).
    """

    next: Mapping[str, tuple[str, ...]]
    prev: Mapping[str, tuple[str, ...]]
    inputs: Mapping[str, tuple[str, ...]]
    consumers: Mapping[str, tuple[str, ...]]
    outputs: Mapping[str, tuple[str, ...]]
    detached: Mapping[str, tuple[str, ...]]
    accumulate_grad: Mapping[str, str]


def build_adjacency(ops: Iterable[OpNode], edges: Sequence[Edge]) -> Adjacency:
    """The :class:`Adjacency` of a graph's ``ops`` and ``edges``."""
    lists: dict[str, dict[str, list[str]]] = {
        k: {} for k in ("next", "prev", "inputs", "consumers", "outputs", "detached")
    }
    nxt, prev, ins, cons, outs, det = (lists[k] for k in lists)
    ordered = sorted(edges, key=lambda e: e.input_nr)  # stable: ties keep edge order
    for e in ordered:
        kind = e.kind
        if kind == "next":
            nxt.setdefault(e.src, []).append(e.dst)
        elif kind == "input":
            ins.setdefault(e.dst, []).append(e.src)
    for e in edges:
        kind = e.kind
        if kind == "next":
            prev.setdefault(e.dst, []).append(e.src)
        elif kind == "input":
            cons.setdefault(e.src, []).append(e.dst)
        elif kind == "output":
            outs.setdefault(e.src, []).append(e.dst)
        elif kind == "detach":
            det.setdefault(e.src, []).append(e.dst)
    acc: dict[str, str] = {}
    for o in ops:
        if o.variable is not None and o.is_accumulate_grad:
            acc.setdefault(o.variable, o.id)
    frozen = {k: MappingProxyType({n: tuple(v) for n, v in d.items()}) for k, d in lists.items()}
    return Adjacency(accumulate_grad=MappingProxyType(acc), **frozen)
