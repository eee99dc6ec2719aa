"""The module view: buffers kept out of the picture, repeated blocks drawn once with "× N", frozen boxes."""

from __future__ import annotations

from bisect import bisect_right
from typing import Mapping

import numpy as np

from ..graph import Graph
from .labels import esc
from .scene import Edge, Node

__all__ = ["lowered_ops", "buffer_ids", "hide_buffers", "fold_repeats", "fold_loops", "fold", "acyclic", "remap_edges", "REPEAT", "repeat_title"]

#: A region whose name starts with this marks the nodes of a block drawn once for N repeats.
REPEAT = "\x02"


_LOW = frozenset({"float16", "bfloat16"})
_CASTS = frozenset({"to", "type", "half", "bfloat16", "_to_copy", "float16", "__torch_function__"})


def lowered_ops(graph: Graph) -> dict[str, str]:
    """``{op id: dtype}`` for the ops that made a float16 or bfloat16 tensor from a wider
    float input without being a cast: eager type promotion never narrows, so they ran under
    ``torch.autocast`` (what a module box then says)."""
    dtype = {t.id: t.dtype for t in graph.tensors}
    ins: dict[str, list[str]] = {}
    outs: dict[str, list[str]] = {}
    for e in graph.edges:
        if e.kind == "input":
            ins.setdefault(e.dst, []).append(dtype.get(e.src, ""))
        elif e.kind == "output":
            outs.setdefault(e.src, []).append(dtype.get(e.dst, ""))
    found: dict[str, str] = {}
    for op in graph.ops:
        if op.forward is None or op.forward in _CASTS:
            continue
        low = [d for d in outs.get(op.id, ()) if d in _LOW]
        if low and any(d in ("float32", "float64") for d in ins.get(op.id, ())):
            found[op.id] = low[0]
    return found


def buffer_ids(graph: Graph) -> tuple[frozenset[str], frozenset[str]]:
    """``(tensors, ops)``: the module buffers of ``graph`` (BatchNorm's ``running_mean``,
    ``running_var``, ``num_batches_tracked``, ...) and the ops that only update them.

    A buffer is a tensor that does not require grad, is no parameter, carries a module's
    dotted name (``layer1.0.bn1.running_mean``, as ``module=`` names them) and is read or
    written only by ops of that module (its ``scope``): it takes no part in the backward
    graph.  Such a leaf that no recorded op reads is one too.  An op whose every tensor input and output is such a buffer (the in-place
    ``add_`` that counts batches) goes with them."""
    consumers: dict[str, set] = {}
    producers: dict[str, str] = {}
    op_in: dict[str, list[str]] = {}
    op_out: dict[str, list[str]] = {}
    for e in graph.edges:
        if e.kind == "input":
            consumers.setdefault(e.src, set()).add(e.dst)
            op_in.setdefault(e.dst, []).append(e.src)
        elif e.kind == "output":
            producers[e.dst] = e.src
            op_out.setdefault(e.src, []).append(e.dst)
    scope = {op.id: op.scope for op in graph.ops}
    found: set[str] = set()
    for t in graph.tensors:
        if t.requires_grad or t.is_parameter or not t.name or "." not in t.name or t.detached_from is not None:
            continue
        owner = t.name.rsplit(".", 1)[0]
        users = set(consumers.get(t.id, ()))
        if t.id in producers:
            users.add(producers[t.id])
        if not users:  # touched by nothing the graph holds (the count an in-place add_ bumps)
            if t.is_leaf and t.op is None:
                found.add(t.id)
            continue
        if all((scope.get(u) or "") == owner or (scope.get(u) or "").startswith(owner + ".") for u in users):
            found.add(t.id)
    ops = frozenset(
        oid for oid in op_out
        if op_out[oid] and all(i in found for i in op_out[oid]) and all(i in found for i in op_in.get(oid, ()))
    )
    return frozenset(found), ops


def hide_buffers(graph: Graph, nodes: list[Node], edges: list[Edge]) -> tuple[list[Node], list[Edge]]:
    """The scene without the module buffers of :func:`buffer_ids` and the ops that only update them."""
    tensors, ops = buffer_ids(graph)
    gone = tensors | ops
    if not gone:
        return nodes, edges
    return [n for n in nodes if n.id not in gone], [e for e in edges if e.src not in gone and e.dst not in gone]


def repeat_title(region: str) -> str:
    """The title of a repeat region (what the cluster says above the block drawn once)."""
    return region[len(REPEAT):].rpartition("#")[0]


def _path(n: Node) -> list[str] | None:
    return n.scope.split(".") if n.scope else None


def fold_repeats(nodes: list[Node], edges: list[Edge], *, minimum: int = 2) -> tuple[list[Node], list[Edge]]:
    """Draw each run of consecutive numbered blocks (``transformer.h.0`` … ``transformer.h.11``)
    that are the same graph once, with "× N": the first block stands for all of them.

    Blocks are the numbered entries of a module list or ``Sequential`` (a path part that
    is a number).  Two blocks are the same graph when their drawn nodes, in order, have the
    same kinds, sub-paths, ops and parameter/requires-grad marks and the same edges between
    them; only a run of at least ``minimum`` such blocks with consecutive numbers folds.
    Edges into or out of any block of a run are drawn to or from the first block's node in
    the same place; edges from one block to the next are left out (the title says they
    run one after another).  The first block's node lists every folded node among its
    ``members`` (what a page says a drawn node stands for).  The values drawn are the first
    block's."""
    under: dict[tuple[str, ...], list[tuple[int, Node]]] = {}  # the path before a number -> (the number, node), in order
    for n in nodes:
        parts = _path(n)
        if parts:
            for j, p in enumerate(parts):
                if p.isdigit():
                    under.setdefault(tuple(parts[:j]), []).append((int(p), n))
    if not under:
        return nodes, edges
    runs: list[tuple[list[list[Node]], str, str]] = []  # (blocks in order, title, first block's name)
    taken: set[str] = set()
    internal = _internal(edges)
    sizes = _region_sizes(nodes)
    for prefix in sorted(under, key=lambda p: (len(p), p)):
        k = len(prefix)
        if any(n.id in taken for _, n in under[prefix]):  # inside a run already folded at a shallower level
            continue
        blocks: dict[int, list[Node]] = {}
        for i, n in under[prefix]:
            blocks.setdefault(i, []).append(n)
        if len(blocks) < minimum:
            continue
        for run in _alike_runs(blocks, k + 1, internal, minimum, sizes):
            first_name, last_name = _name(prefix, run[0]), _name(prefix, run[-1])
            runs.append(([blocks[i] for i in run], f"{first_name} … {last_name}", first_name))
            for i in run:
                taken.update(m.id for m in blocks[i])
    return fold(nodes, edges, runs)


def _internal(edges: list[Edge]) -> dict[str, list[Edge]]:
    out: dict[str, list[Edge]] = {}
    for e in edges:
        out.setdefault(e.src, []).append(e)
    return out


def _region_sizes(nodes: list[Node]) -> dict[str, int]:
    """How many of ``nodes`` each region holds."""
    sizes: dict[str, int] = {}
    for n in nodes:
        if n.region:
            sizes[n.region] = sizes.get(n.region, 0) + 1
    return sizes


def _alike_runs(blocks: Mapping[int, list[Node]], depth: int, internal: Mapping[str, list[Edge]], minimum: int,
                sizes: Mapping[str, int] | None = None) -> list[list[int]]:
    """The runs of consecutive block numbers whose blocks are the same graph (``sizes``: the
    nodes of each region in the picture, see :func:`_signature`)."""
    sigs = {i: _signature(members, depth, internal, sizes) for i, members in blocks.items()}
    runs: list[list[int]] = []
    for i in sorted(blocks):
        if sigs[i] is None:
            continue
        if runs and i == runs[-1][-1] + 1 and sigs[i] == sigs[runs[-1][0]]:
            runs[-1].append(i)
        else:
            runs.append([i])
    return [r for r in runs if len(r) >= minimum]


def fold(nodes: list[Node], edges: list[Edge], runs: list[tuple[list[list[Node]], str, str]], *,
         number: int = 1) -> tuple[list[Node], list[Edge]]:
    """Draw each run of alike blocks once: ``runs`` holds, per run, its blocks (each a list of
    nodes, the same graph node for node), the run's title and the first block's name.

    A run whose blocks are joined through nodes outside them (a residual add a snapshot
    could place in no block) is left unfolded: drawn once, it would feed itself, a cycle
    no autograd graph has."""
    if not runs:
        return nodes, edges
    out = _fold(nodes, edges, runs, number)
    if acyclic(*out) or not acyclic(nodes, edges):
        return out
    runs = [run for run in runs if acyclic(*_fold(nodes, edges, [run], number))]
    out = _fold(nodes, edges, runs, number) if runs else (nodes, edges)
    return out if acyclic(*out) else (nodes, edges)


def acyclic(nodes: list[Node], edges: list[Edge]) -> bool:
    """Whether the picture's edges (between its nodes, loops aside) make no cycle."""
    indegree = {n.id: 0 for n in nodes}
    succs: dict[str, list[str]] = {}
    for e in edges:
        a, b = e.src, e.dst
        if a != b and a in indegree and b in indegree:
            succs.setdefault(a, []).append(b)
            indegree[b] += 1
    ready = [nid for nid, k in indegree.items() if k == 0]
    done = 0
    while ready:
        done += 1
        for b in succs.get(ready.pop(), ()):
            indegree[b] -= 1
            if not indegree[b]:
                ready.append(b)
    return done == len(indegree)


def _fold(nodes: list[Node], edges: list[Edge], runs: list[tuple[list[list[Node]], str, str]], number: int = 1) -> tuple[list[Node], list[Edge]]:
    folded: dict[str, str] = {}  # node id -> the first block's node that stands for it
    block_of: dict[str, tuple[int, int]] = {}  # node id -> (run, block) for every node of a run
    kept_region: dict[str, str] = {}
    relabel: dict[str, tuple[str, int, str]] = {}
    sizes = _region_sizes(nodes)
    inner: set[str] = set()  # the kept nodes whose region is drawn inside their block's frame
    for count, (blocks, title, first_name) in enumerate(runs, number):
        first = blocks[0]
        single = len(first) == 1 and first[0].kind == "box"
        local = _local_regions(first, sizes)
        if not single and any(b.region and b.region not in local for b in first):
            continue  # (a frame of its own cannot sit inside a no_grad or checkpoint frame; one inside it can)
        inner.update(b.id for b in first if b.region in local and not single)
        for i, block in enumerate(blocks):
            for a, b in zip(block, first):
                block_of[a.id] = (count, i)
                if i:
                    folded[a.id] = b.id
        if single:
            relabel[first[0].id] = (title, len(blocks), first_name)
        else:
            region = f"{REPEAT}× {len(blocks)}: {title} (the same graph each; {first_name} drawn)#{count}"
            for b in first:
                kept_region[b.id] = region
    by_id = {n.id: n for n in nodes}
    stands_for: dict[str, list[str]] = {}
    for a, b in folded.items():
        stands_for.setdefault(b, []).extend(by_id[a].members)
    out: list[Node] = []
    for n in nodes:
        if n.id in folded:
            continue
        if n.id in stands_for or n.id in kept_region or n.id in relabel:
            n = _copy(n)  # the scene's nodes are shared by the levels collapse() tries
        if n.id in stands_for:
            n.members = tuple(n.members) + tuple(stands_for[n.id])
        if n.id in kept_region:
            if n.id in inner:  # (an optimizer's step under no_grad, in each step of a training loop)
                n.inner = n.region
            n.region = kept_region[n.id]
        if n.id in relabel:
            title, times, first_name = relabel[n.id]
            n.label = n.label.replace(
                f"<B>{esc(first_name)}</B>",
                f"<B>{esc(title)}</B></TD></TR><TR><TD><B>× {times}</B> (the same graph each; {esc(first_name)} drawn)",
                1,
            )
            n.attrs = {**n.attrs, "peripheries": "2"}
        out.append(n)
    crossing = [e for e in edges if not _next_block(block_of.get(e.src), block_of.get(e.dst))]
    return out, remap_edges(crossing, folded)


def _next_block(a: tuple[int, int] | None, b: tuple[int, int] | None) -> bool:
    """Whether an edge runs from one block of a run to another (the title says they run in turn)."""
    return a is not None and b is not None and a[0] == b[0] and a[1] != b[1]


def remap_edges(edges: list[Edge], alias: Mapping[str, str]) -> list[Edge]:
    """``edges`` with each end drawn as its ``alias`` (a box or a kept node for a folded one):
    no edge from a node to itself, one edge per pair and kind (highlighted if any was)."""
    out: list[Edge] = []
    index: dict[tuple[str, str, str], Edge] = {}
    for e in edges:
        src = alias.get(e.src, e.src)
        dst = alias.get(e.dst, e.dst)
        if src == dst:
            continue
        key = (src, dst, e.kind)
        prev = index.get(key)
        if prev is not None:
            prev.hl = prev.hl or e.hl
            continue
        ne = Edge(src, dst, e.kind, dict(e.attrs), e.hl)
        ne.orig = e.orig
        index[key] = ne
        out.append(ne)
    return out


#: How many loops one picture looks for at most (each in what the ones before left).
MAX_LOOPS = 8


def fold_loops(graph: Graph, nodes: list[Node], edges: list[Edge], *, minimum: int = 3,
               budget: int | None = None) -> tuple[list[Node], list[Edge]]:
    """Draw the body of a Python loop the trace saw run many times (an unrolled ``LSTMCell``,
    a training loop) once, with "× N".

    The loop is found in the forward ops in program order, each known by its line and
    op: the longest stretch that repeats one pattern at least ``minimum`` times.  Each
    repetition (an iteration) holds its ops and the tensors they made; consecutive
    iterations that are the same graph (as for blocks) fold into the first.

    Given a ``budget``, while the picture still has more nodes: every stretch where that
    pattern repeats folds, each in its frame; a shorter pattern is tried too, and the one
    that leaves fewer nodes drawn is kept (a training loop that also evaluates every tenth
    step: its runs of alike single steps, rather than one frame of ten steps); and the next
    loop is looked for in the ops left (a program with two loops), up to :data:`MAX_LOOPS`."""
    ops = [op for op in graph.ops if op.forward is not None]
    if len(ops) < 2 * minimum:
        return nodes, edges
    seq: list = [(op.line, op.forward) for op in ops]
    folded = 0  # (the runs drawn so far: each run's frame is numbered on from them)
    below = None

    def attempt(below: int | None) -> tuple | None:
        start, period, repeats = _periodic(seq, minimum, below)
        if repeats < minimum:
            return None
        found = period
        pattern = seq[start:start + period]
        for q in range(1, period):  # (a body of one call, h, c = cell(x, (h, c)), repeats in pairs too: count its own runs)
            if period % q == 0 and pattern == pattern[:q] * (period // q):
                period, repeats = q, repeats * (period // q)
                break
        stretches = [(start, repeats)] if budget is None else _occurrences(seq, seq[start:start + period], minimum)
        return (found, period, stretches, *_fold_stretches(graph, nodes, edges, ops, stretches, period, minimum, folded))

    for _ in range(MAX_LOOPS if budget is not None else 1):
        best = attempt(below)
        if best is None:
            break
        if budget is not None and len(best[3]) > budget and best[0] > 2:
            shorter = attempt(best[0])  # (a shorter loop inside: one step, where every tenth differs)
            if shorter is not None and shorter[5] and len(shorter[3]) < len(best[3]):
                best = shorter
        found, period, stretches, nodes, edges, runs = best
        folded += runs
        if budget is None or len(nodes) <= budget:
            break
        if not runs:  # (no two iterations alike: look for a shorter loop inside)
            below = found
            continue
        below = None
        for start, repeats in stretches:  # (taken: each item now stands for itself alone, matching nothing)
            seq[start:start + period * repeats] = [(None, k) for k in range(start, start + period * repeats)]
    return nodes, edges


def _occurrences(seq: list, pattern: list, minimum: int) -> list[tuple[int, int]]:
    """``(start, repeats)`` of every stretch of ``seq`` where ``pattern`` repeats ``minimum``
    times or more in a row, in order, none overlapping (numpy compares)."""
    n, p = len(seq), len(pattern)
    if n < p:
        return []
    codes: dict = {}
    items = np.fromiter((codes.setdefault(x, len(codes)) for x in seq), dtype=np.int64, count=n)
    want = np.fromiter((codes.get(x, -1) for x in pattern), dtype=np.int64, count=p)
    at = np.ones(n - p + 1, dtype=bool)
    for d in range(p):
        at &= items[d:n - p + 1 + d] == want[d]
    out: list[tuple[int, int]] = []
    k = 0
    hits = np.flatnonzero(at)
    for i in hits:
        i = int(i)
        if i < k:
            continue
        reps = 1
        while i + reps * p < len(at) and at[i + reps * p]:
            reps += 1
        if reps >= minimum:
            out.append((i, reps))
            k = i + reps * p
    return out


def _fold_stretches(graph: Graph, nodes: list[Node], edges: list[Edge], ops: list, stretches: list[tuple[int, int]],
                    period: int, minimum: int, folded: int) -> tuple[list[Node], list[Edge], int]:
    """:func:`fold_loops` for the ``stretches`` (``(start, repeats)`` in the forward ``ops``) where
    one pattern of ``period`` ops repeats; the frames it draws are numbered from ``folded + 1``.
    Returns the picture and how many runs it folded."""
    iteration: dict[str, int] = {}
    bases: list[int] = []  # (each stretch's first iteration number: a gap between stretches keeps their runs apart)
    number = 0
    for start, repeats in stretches:
        bases.append(number)
        for k in range(period * repeats):
            iteration[ops[start + k].id] = number + k // period
        number += repeats + 1
    # The backward nodes a call made inside itself (lstm_cell's gates: no forward call of
    # their own, drawn in the function view) belong to the iteration of that call: each
    # iteration, in forward order, claims what its calls' nodes reach through such nodes,
    # up to another call's node, a leaf's AccumulateGrad, or a node claimed already.
    children = graph.adjacency.next
    stops = {op.id for op in graph.ops if op.forward is not None or op.is_accumulate_grad}
    for start, repeats in stretches:
        for op in ops[start:start + period * repeats]:
            j = op.id
            stack = list(children.get(j, ()))
            while stack:
                x = stack.pop()
                if x not in stops and x not in iteration:
                    iteration[x] = iteration[j]
                    stack.extend(children.get(x, ()))
    made_by = {t.id: t.op for t in graph.tensors if t.op is not None}
    # A leaf's AccumulateGrad (drawn in the function view) made in the loop (a parameter's
    # version an optimizer's step made under no_grad) goes with the one iteration whose nodes
    # send it gradients; a leaf from outside the loop keeps its own outside it.
    users_of = graph.adjacency.prev
    for op in graph.ops:
        if op.is_accumulate_grad and op.id not in iteration and iteration.get(made_by.get(op.variable or "")) is not None:
            users = {iteration.get(u) for u in users_of.get(op.id, ())}
            if len(users) == 1 and None not in users:
                iteration[op.id] = users.pop()
    consumers = graph.adjacency.consumers
    roots = {t.id for t in graph.roots}  # (read once: a training loop has a root per step)
    kept = {t.id for t in graph.tensors if t.name is not None or t.is_parameter or t.id in roots}
    blocks: dict[int, list[Node]] = {}
    between: dict[str, int] | None = None
    for n in nodes:
        i = iteration.get(n.id)
        if i is None and n.kind == "tensor":
            op = made_by.get(n.id)
            if op is not None:
                i = iteration.get(op)
            elif n.id not in kept:  # (made by no recorded call, torch.randn(...) in the loop: the input of one iteration)
                users = {iteration.get(c) for c in consumers.get(n.id, ())}
                i = users.pop() if len(users) == 1 else None
                if i is None and not users:
                    if between is None:
                        between = _made_between(graph, iteration, made_by)
                    i = between.get(n.id)
        if i is None and n.kind in ("box", "chain"):  # one iteration's call of a submodule
            seen = {iteration.get(m, iteration.get(made_by.get(m))) for m in n.members}
            i = seen.pop() if len(seen) == 1 else None
        if i is not None:
            blocks.setdefault(i, []).append(n)
    internal = _internal(edges)
    runs = []
    first = stretches[0][0]
    lines = sorted({op.line for op in ops[first:first + period] if op.line is not None})
    where = f"line {lines[0]}" if len(lines) == 1 else f"lines {lines[0]}–{lines[-1]}" if lines else "one stretch"
    for run in _alike_runs(blocks, 0, internal, minimum, _region_sizes(nodes)):
        base = bases[bisect_right(bases, run[0]) - 1]  # (iterations counted from 1 in each stretch)
        a, b = run[0] - base + 1, run[-1] - base + 1
        runs.append(([blocks[i] for i in run], f"a loop ({where}), iterations {a} … {b}", f"iteration {a}"))
    return (*fold(nodes, edges, runs, number=folded + 1), len(runs))


def _made_between(graph: Graph, iteration: Mapping[str, int], made_by: Mapping[str, str]) -> dict[str, int]:
    """The iteration of each tensor no recorded op made and nothing used (``torch.autograd.grad``'s
    result, kept in a variable the loop rebinds) that the trace recorded after a tensor an
    iteration's ops made and before any of a later iteration's but the next one's: it was made
    during that iteration, or right after its last op (what ``autograd.grad`` of its loss is)."""
    tensors = graph.tensors
    known = [iteration.get(made_by.get(t.id, "")) for t in tensors]
    before: list[int | None] = []
    last = None
    for k in known:
        before.append(last)
        last = k if k is not None else last
    out: dict[str, int] = {}
    after = None
    for t, k, b in zip(reversed(tensors), reversed(known), reversed(before)):
        if k is None and b is not None and (after is None or after in (b, b + 1)):
            out[t.id] = b
        after = k if k is not None else after
    return out


def _periodic(seq: list, minimum: int, below: int | None = None) -> tuple[int, int, int]:
    """``(start, period, repeats)`` of the stretch of ``seq`` covering the most items by
    repeating one pattern (of at least two items) ``minimum`` times or more (the shortest
    period, then the earliest stretch, on ties); the work is bounded (about 4 million
    comparisons, made by numpy) by trying only the shorter periods of long sequences.

    >>> _periodic(["x", "a", "b", "a", "b", "a", "b", "y"], 3)
    (1, 2, 3)
    """
    n = len(seq)
    best = (0, 1, 0)
    longest = min(n // minimum, max(2, 4_000_000 // max(n, 1)))
    if below is not None:  # (only patterns shorter than ``below``)
        longest = min(longest, below - 1)
    if longest < 2:
        return best
    codes: dict = {}
    items = np.fromiter((codes.setdefault(x, len(codes)) for x in seq), dtype=np.int64, count=n)
    for p in range(2, longest + 1):
        m = n - p
        # the runs of items equal to the one p further on: between the places where they differ
        bounds = np.concatenate(([-1], np.flatnonzero(items[:m] != items[p:]), [m]))
        runs = np.diff(bounds) - 1
        repeats = (runs + p) // p
        cover = np.where(repeats >= minimum, repeats * p, 0)
        k = int(np.argmax(cover))  # (the first of the best)
        if cover[k] > best[1] * best[2]:
            best = (int(bounds[k]) + 1, p, int(repeats[k]))
    return best


def _copy(n: Node) -> Node:
    c = Node.__new__(Node)
    for slot in Node.__slots__:
        setattr(c, slot, getattr(n, slot))
    return c


def _name(prefix: tuple[str, ...], i: int) -> str:
    return ".".join(prefix + (str(i),))


def _local_regions(members: list[Node], sizes: Mapping[str, int] | None) -> dict[str, tuple]:
    """The regions all of whose nodes are among ``members`` (``sizes``: the nodes of each
    region in the picture), each as what two blocks compare: its kind and tag (its number
    left out: each step of a loop has its own ``no_grad`` region) and its place among them."""
    if not sizes:
        return {}
    here: dict[str, int] = {}
    for n in members:
        if n.region:
            here[n.region] = here.get(n.region, 0) + 1
    local: dict[str, tuple] = {}
    for r, k in here.items():
        if k == sizes.get(r) and not r.startswith(REPEAT):
            kind, _, rest = r.partition("#")
            local[r] = (kind, rest.lstrip("0123456789"), len(local))
    return local


def _signature(members: list[Node], depth: int, internal: Mapping[str, list[Edge]], sizes: Mapping[str, int] | None = None):
    """What makes two blocks the same graph: their nodes' kinds, sub-paths, ops and marks
    in order, and the edges between them; ``None`` for a block that cannot fold (a node
    highlighted or already drawn for a repeat).  A region that lies wholly inside the block
    (``sizes``: how many nodes each region of the picture holds) is compared by its kind
    and place, not its number."""
    pos = {n.id: i for i, n in enumerate(members)}
    local = _local_regions(members, sizes)
    items = []
    for n in members:
        if n.hl or (n.region or "").startswith(REPEAT):
            return None
        sub = ".".join((n.scope or "").split(".")[depth:])
        region = local.get(n.region, n.region) if n.region else None
        if n.kind == "box":
            items.append(("box", sub, n.content, n.rg, n.frozen, region))
        elif n.kind == "tensor":
            items.append(("tensor", sub, n.param, n.rg, n.named, region))
        else:
            items.append((n.kind, sub, n.sig, region))
    links = sorted(
        (pos[e.src], pos[e.dst], e.kind) for n in members for e in internal.get(n.id, ()) if e.dst in pos
    )
    return tuple(items), tuple(links)
