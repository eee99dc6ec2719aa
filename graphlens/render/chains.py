"""Chains: long stretches of ops repeating one pattern, found from the graph's structure and drawn as one node each."""

from __future__ import annotations

from collections import Counter
from functools import partial
from itertools import accumulate, compress, islice, repeat, takewhile
from operator import is_, itemgetter, ne, not_
from typing import Callable, Iterable, Mapping

from .labels import esc, op_text
from .modules import remap_edges
from ..graph import OpNode
from .scene import DataParts, Edge, Node, Options, _positions, data_edges, data_nodes, op_node
from .style import BOX_BORDER, BOX_FILL, MIN_CHAIN

__all__ = ["periodic_segment", "find_chains", "chain_node", "collapse_chains", "collapse_parts", "collapse_fans"]

_FIRST = itemgetter(0)
_SECOND = itemgetter(1)


def periodic_segment(sigs: list[str], max_period: int = 4) -> tuple[int, int, int]:
    """``(start, period, repeats)`` of the longest stretch of ``sigs`` that repeats one
    pattern of up to ``max_period`` ops (the shortest pattern on ties).

    >>> periodic_segment(["a", "m", "a", "m", "a", "m", "x"])
    (0, 2, 3)
    """
    n = len(sigs)
    best = (0, 1, 0)
    for p in range(1, max_period + 1):
        if best[1] * best[2] >= n:  # (nothing longer is left to find)
            break
        start = 0
        # the places where the pattern of period p breaks, then the end
        breaks = list(compress(range(p, n), map(ne, sigs[p:], sigs)))
        breaks.append(n)
        for k in breaks:
            repeats = (k - start) // p
            if repeats * p > best[1] * best[2]:
                best = (start, p, repeats)
            start = k - p + 1 if k < n else k
    return best


def _walk(nid: str, step: Mapping[str, str], live: set) -> list[str]:
    """The nodes of ``live`` met going from ``nid`` along ``step`` (``pred`` or ``succ``, a
    dict), up to the first one not in it, ``nid`` left out.  Stepped at C speed: each step is
    ``step.get(node, None)`` made by ``accumulate``, the walk ends where ``takewhile`` meets a
    node not in ``live`` (or None, where no step goes on)."""
    return list(takewhile(live.__contains__, islice(accumulate(repeat(None), step.get, initial=nid), 1, None)))


def find_chains(starts: Iterable[str], is_op: Callable[[str], bool], simple: set, pred: Mapping[str, str], succ: Mapping[str, str],
                sigs_of: Callable[[list[str]], list[str]], *, through: set | None = None) -> list[tuple[list[str], list[str], int, int]]:
    """The chains to draw, each as ``(member ids, the op texts of its pattern, period,
    repeats)``: from each op of ``starts`` (in drawing order) that is ``simple`` (one way
    in, ``pred``, one way out, ``succ``; nothing marked), the maximal linear run of simple
    nodes through it, cut to the stretch that repeats one pattern at least ``MIN_CHAIN``
    times.  ``sigs_of`` gives the op texts of a list of op ids.  ``through``, when given,
    holds every non-op that ``simple`` holds (the tensors a chain may pass through)."""
    live = set(simple)  # (the simple nodes no run has taken yet)
    runs = []
    for nid in filter(live.__contains__, starts):  # (checked as each is taken)
        live.discard(nid)
        run = _walk(nid, pred, live)
        live.difference_update(run)  # (where the run closes a loop, the walk on meets none of it)
        after = _walk(nid, succ, live)
        live.difference_update(after)
        run.reverse()
        run.append(nid)
        run += after
        if through is not None and through.isdisjoint(run):
            op_pos: list[int] | range = range(len(run))
            sigs = sigs_of(run)
        else:
            op_pos = [k for k, m in enumerate(run) if is_op(m)]
            sigs = sigs_of([run[k] for k in op_pos])
        start, period, repeats = periodic_segment(sigs)
        if repeats < MIN_CHAIN:
            continue
        a, b = op_pos[start], op_pos[start + period * repeats - 1]
        runs.append((run[a:b + 1], sigs[start:start + period], period, repeats))
    return runs


def chain_node(first: Node, members: list[str], pattern: list[str], period: int, repeats: int) -> Node:
    """The node drawn for a chain whose first member (an op) is ``first``."""
    n_ops = period * repeats
    if period == 1:
        head = f"{esc(pattern[0])} <B>×{n_ops:,}</B>"
        detail = f"chain of {n_ops:,} identical ops"
    else:
        head = f"({esc(', '.join(pattern))}) <B>×{repeats:,}</B>"
        detail = f"{n_ops:,} ops repeating a pattern of {period}"
    return _many_node("chain_", first, head, detail, members)


def _many_node(prefix: str, first: Node, head: str, detail: str, members: list[str]) -> Node:
    """A node that stands for many (a chain, alike strands side by side): ``head`` over a small
    grey ``detail``, drawn in ``first``'s place with a double border; ``members``: what it stands for."""
    label = (
        f'<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="0"><TR><TD>{head}</TD></TR>'
        f'<TR><TD><FONT POINT-SIZE="8" COLOR="#555555">{detail}</FONT></TD></TR></TABLE>>'
    )
    attrs = dict(first.attrs)
    attrs.update({"style": "rounded,filled", "fillcolor": BOX_FILL, "color": BOX_BORDER, "peripheries": "2"})
    attrs.pop("tooltip", None)
    node = Node(prefix + first.id, "chain", label, attrs, scope=first.scope)
    node.members = tuple(members)
    return node


def _links(srcs: list[str], dsts: list[str]) -> tuple[set, dict, dict]:
    """``(ids with exactly one edge in and one out, the one way in, the one way out)`` of the
    edges ``srcs[k] -> dsts[k]``."""
    pred = dict(zip(dsts, srcs))
    succ = dict(zip(srcs, dsts))
    one_in: Iterable = pred.keys()
    one_out: Iterable = succ.keys()
    if len(pred) < len(dsts):  # (some have more than one: count)
        one_in = {k for k, v in Counter(dsts).items() if v == 1}
    if len(succ) < len(srcs):
        one_out = {k for k, v in Counter(srcs).items() if v == 1}
    one = one_in & one_out  # type: ignore[operator]
    return one if isinstance(one, set) else set(one), pred, succ


def collapse_chains(nodes: list[Node], edges: list[Edge]) -> tuple[list[Node], list[Edge]]:
    """Replace each long stretch of ops that repeats one pattern of up to four ops (a run
    of one op, or the steps of a loop: ``mul, add, mul, add, ...``), together with the
    unnamed tensors between them, every member with one way in and one way out, by a
    single node, once the pattern repeats at least ``MIN_CHAIN`` times."""
    one, pred, succ = _links([e.src for e in edges], [e.dst for e in edges])
    by_id = {n.id: n for n in nodes}
    simple = _simple(nodes, one)
    starts = [n.id for n in nodes if n.kind == "op" and n.id in simple]
    runs = find_chains(starts, lambda i: by_id[i].kind == "op", simple, pred, succ, lambda ids: [by_id[i].sig for i in ids])
    if not runs:
        return nodes, edges
    alias: dict[str, str] = {}
    new_nodes: dict[str, Node] = {}
    for members, pattern, period, repeats in runs:
        node = chain_node(by_id[members[0]], members, pattern, period, repeats)
        new_nodes[members[0]] = node
        for m in members:
            alias[m] = node.id
    return _replaced(nodes, edges, new_nodes, alias)


def _simple(nodes: list[Node], one: set) -> set:
    """The ids of ``nodes`` a chain or a strand may hold: one way in and one way out (``one``), an
    op text or an unnamed tensor passing through (``sig``), nothing marked (no region, rank or highlight)."""
    return {n.id for n in nodes if n.sig is not None and n.region is None and n.rank is None and not n.hl and n.id in one}


def _replaced(nodes: list[Node], edges: list[Edge], new_nodes: Mapping[str, Node], alias: Mapping[str, str]) -> tuple[list[Node], list[Edge]]:
    """``nodes`` with each node of ``new_nodes`` drawn in its first member's place (its key) and the
    other members (``alias``: member id -> the new node's id) left out; the edges remapped to it."""
    out = []
    for n in nodes:
        if n.id in new_nodes:
            out.append(new_nodes[n.id])
        elif n.id not in alias:
            out.append(n)
    return out, remap_edges(edges, alias)


def collapse_fans(nodes: list[Node], edges: list[Edge]) -> tuple[list[Node], list[Edge]]:
    """Replace each set of at least ``MIN_CHAIN`` alike strands side by side by a single node.
    A strand is a run of nodes each with one way in and one way out, nothing marked (what a
    chain is made of), holding an op; strands are alike when they run from the same node to
    the same node through the same op texts: ``torch.stack([x * w for w in ws])``'s products,
    one per item, each reading ``x`` and feeding the stack.  A strand may also begin at leaves
    of its own that nothing else reads: one (``torch.stack([w * 2 for w in ws])``: each
    product's ``w``; ``torch.stack(ws)``: the leaf alone) or several that one op gathers
    (``torch.stack([x * y for x, y in zip(xs, ys)])``); such strands are alike when their leaves
    are (unnamed or items of one list, the same shape, dtype and requires_grad; never a
    parameter), their ops the same, and they end at the same node.  The node drawn says how
    many, and stands for every member (``members``); the edges into and out of the strands are
    drawn once."""
    srcs = [e.src for e in edges]
    one, pred, succ = _links(srcs, [e.dst for e in edges])
    plain = {(e.src, e.dst) for e in edges if e.kind == "flow" or e.kind == "variable"}
    simple = _simple(nodes, one)
    by_id = {n.id: n for n in nodes}

    def run_from(strand: list[str]) -> list[str]:
        while succ[strand[-1]] in simple and len(strand) <= len(simple):
            strand.append(succ[strand[-1]])
        return strand

    # (a leaf nothing draws an edge into, with one way out, nothing marked: where a strand may
    # begin, running on through nodes with one way in and out; several of them may end at one op)
    outs = Counter(srcs)
    own = {n.id: run_from([n.id]) for n in nodes if n.leaf is not None and n.region is None and n.rank is None
           and not n.hl and n.id not in pred and outs[n.id] == 1}

    def keyed(n: Node, first: str | None, starts: list[list[str]], body: list[str]) -> tuple | None:
        """``(key, strand)`` of a strand (``first``: the node before it; ``starts``: the runs from its
        own leaves; ``body``: its run from its op on), or None where it is not one."""
        strand = [*(m for run in starts for m in run), *body]
        last = succ[strand[-1]]
        # (the runs whose every step must be a plain edge: a detach on the way is drawn as it is)
        if first is not None:
            paths = [[first, *body, last]]
        elif body:
            paths = [[*run, body[0]] for run in starts] + [[*body, last]]
        else:
            paths = [[*starts[0], last]]
        if not all(pair in plain for path in paths for pair in zip(path, path[1:])):
            return None
        if first is None:
            leaves = tuple((by_id[run[0]].leaf[1], *(by_id[i].sig for i in run[1:])) for run in starts)  # type: ignore[index]
            sigs: tuple = (leaves, *(by_id[i].sig for i in body))
        else:
            sigs = tuple(by_id[i].sig for i in strand)
            if not any(sigs):  # (tensors alone: no op to say what the strands do)
                return None
        return (first, last, sigs, n.scope), strand

    groups: dict[tuple, list[list[str]]] = {}
    # (an op gathering leaves of its own, x * y for x, y in zip(xs, ys): its strand holds them when
    # enough alike ones are side by side; else each leaf is a strand of its own)
    for g, leaves in _gathers(nodes, edges, own, outs).items():
        hit = keyed(by_id[g], None, [own[i] for i in leaves], run_from([g]))
        if hit is not None:
            groups.setdefault(hit[0], []).append(hit[1])
    taken = {m for strands in groups.values() if len(strands) >= MIN_CHAIN for strand in strands for m in strand}
    groups = {k: v for k, v in groups.items() if len(v) >= MIN_CHAIN}
    for n in nodes:
        if n.id in taken:
            continue
        if n.id in own:
            hit = keyed(n, None, [own[n.id]], [])
        elif n.id not in simple or pred[n.id] in simple or pred[n.id] in own:
            continue  # (a strand starts where its way in is not part of one)
        else:
            hit = keyed(n, pred[n.id], [], run_from([n.id]))
        if hit is not None:
            groups.setdefault(hit[0], []).append(hit[1])
    alias: dict[str, str] = {}
    new_nodes: dict[str, Node] = {}
    for (first, _, sigs, _), strands in groups.items():
        if len(strands) < MIN_CHAIN:
            continue
        members = [m for strand in strands for m in strand]
        if first is None:
            pattern = [x for s in sigs[0] for x in s[1:] if x] + [x for x in sigs[1:] if x]
            node = _leaf_fan_node(by_id, strands, pattern, len(sigs[0]))
        else:
            node = _fan_node(by_id[next(i for i in strands[0] if by_id[i].sig)], [s for s in sigs if s], len(strands), members)
        new_nodes[strands[0][0]] = node
        for m in members:
            alias[m] = node.id
    if not alias:
        return nodes, edges
    return _replaced(nodes, edges, new_nodes, alias)


def _gathers(nodes: list[Node], edges: list[Edge], own: Mapping[str, list[str]], outs: Counter) -> dict[str, list[str]]:
    """``{op: the leaves whose strands it gathers, in the order of its ways in}``: each unmarked op
    with one way out whose ways in (two or more) are all the ends of strands from leaves of their own."""
    ends = {s[-1]: leaf for leaf, s in own.items()}
    into: dict[str, list[str]] = {}
    for e in edges:
        into.setdefault(e.dst, []).append(e.src)
    out: dict[str, list[str]] = {}
    for n in nodes:
        ins = into.get(n.id)
        if (ins and len(ins) > 1 and n.kind == "op" and n.sig and n.region is None and n.rank is None and not n.hl
                and outs[n.id] == 1 and all(i in ends for i in ins)):
            out[n.id] = [ends[i] for i in ins]
    return out


def _leaf_fan_node(by_id: Mapping[str, Node], strands: list[list[str]], pattern: list[str], per: int) -> Node:
    """The node drawn for alike strands that each begin at ``per`` leaves of their own (``pattern``:
    the op texts after them, none for leaves alone): the leaves' first and last names, how many, their kind."""
    leaves = [by_id[m] for strand in strands for m in strand if by_id[m].leaf is not None]
    names = f"{esc(leaves[0].leaf[0])} … {esc(leaves[-1].leaf[0])}"  # type: ignore[index]
    looks = list(dict.fromkeys(n.leaf[1] for n in leaves[:per]))  # type: ignore[index]
    grad = " requiring grad" if all(look[2] for look in looks) else ""
    shapes = " and ".join(f"[{', '.join(map(str, look[0]))}]" for look in looks)
    what = f"leaves{grad}, shape{'s' if len(looks) > 1 else ''} {shapes}, {', '.join(dict.fromkeys(look[1] for look in looks))}"
    count = len(strands)
    members = [m for strand in strands for m in strand]
    if not pattern:
        return _many_node("fan_", leaves[0], f"{names} <B>×{count:,}</B>", f"{count:,} alike {what}: side by side", members)
    ops = esc(pattern[0]) if len(pattern) == 1 else f"({esc(', '.join(pattern))})"
    own = "its own leaf" if per == 1 else f"{per} leaves of its own"
    return _many_node("fan_", leaves[0], f"{ops} <B>×{count:,}</B>", f"{count:,} alike strands side by side, each from {own}: {names} ({what})",
                      members)


def _fan_node(first: Node, pattern: list[str], count: int, members: list[str]) -> Node:
    """The node drawn for ``count`` alike strands side by side, each doing ``pattern`` (op texts)."""
    if len(pattern) == 1:
        head = f"{esc(pattern[0])} <B>×{count:,}</B>"
        detail = f"{count:,} alike ops side by side"
    else:
        head = f"({esc(', '.join(pattern))}) <B>×{count:,}</B>"
        detail = f"{count:,} alike strands side by side, {len(pattern)} ops each"
    return _many_node("fan_", first, head, detail, members)


def collapse_parts(parts: DataParts, o: Options) -> tuple[list[Node], list[Edge]]:
    """The nodes and edges of ``parts`` as ``collapse_chains(*data_scene(...))`` draws them
    (when ``parts`` has more than ``o.max_nodes`` nodes), found from the structure alone:
    the nodes a chain takes in are never made, nor the edges inside it."""
    tensors, ops, pairs = parts.tensors, parts.ops, parts.pairs
    runs: list = []
    if len(tensors) + len(ops) > o.max_nodes:
        srcs = list(map(_FIRST, pairs))
        dsts = list(map(_SECOND, pairs))
        one, pred, succ = _links(srcs, dsts)
        op_ids = list(map(_FIRST, ops))
        passing = {t.id for t in tensors if t.name is None and not t.is_leaf and t.grad is None and t.region is None}
        regions = list(map(_REGION, ops))
        if regions.count(None) < len(regions):  # (some ops ran under no_grad: never in a chain)
            simple = one.intersection(compress(op_ids, map(is_, regions, repeat(None))))
        else:
            simple = one.intersection(op_ids)
        simple |= passing & one
        simple.difference_update(parts.rank, o.hl_nodes)
        passing &= simple
        starts = list(compress(op_ids, map(simple.__contains__, op_ids)))
        if starts:
            op_of = parts.op_by_id or dict(zip(op_ids, ops))
            runs = find_chains(starts, lambda i: i not in passing, simple, pred, succ, partial(_op_texts, op_of, o.view), through=passing)
    if not runs:
        return data_nodes(parts, o), data_edges(parts)
    alias: dict[str, str] = {}
    skip: dict[str, object] = {}
    cache: dict = {}
    for members, pattern, period, repeats in runs:
        first = op_node(op_of[members[0]], o, cache)
        node = chain_node(first, members, pattern, period, repeats)
        skip.update(dict.fromkeys(members))
        skip[members[0]] = node
        # (a member has one way in and one way out, from and to the members beside it: an
        # edge left after those inside are dropped leads into the first or out of the last)
        alias[members[0]] = alias[members[-1]] = node.id
    # the edges inside a chain: out of each of its members but the last
    inside = list(map(skip.__contains__, srcs))
    for k in _positions(srcs, [members[-1] for members, _, _, _ in runs]):
        inside[k] = False
    edges = data_edges(parts, map(not_, inside))
    return data_nodes(parts, o, skip), remap_edges(edges, alias)


def _op_texts(op_of: Mapping[str, OpNode], view: str, ids: list[str]) -> list[str]:
    """:func:`~graphlens.render.labels.op_text` of each op of ``ids`` (a snapshot's ops,
    which have no forward name, are their backward node's name)."""
    chosen = list(map(op_of.__getitem__, ids))
    names = list(map(_OP_NAME, chosen))
    if None not in names and (view == "function" or list(map(_FORWARD, chosen)).count(None) == len(chosen)):
        return names
    return list(map(op_text, chosen, repeat(view)))


_OP_NAME = itemgetter(1)  # OpNode.name
_FORWARD = itemgetter(2)  # OpNode.forward
_REGION = itemgetter(5)  # OpNode.region
