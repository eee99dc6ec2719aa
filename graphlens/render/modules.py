"""The module view: buffers kept out of the picture, repeated blocks drawn once with "× N", frozen boxes (loops: :mod:`.loops`)."""

from __future__ import annotations

import re
from operator import attrgetter
from typing import Iterable, Mapping

from ..graph import REENTRANT_TAG, Graph
from .labels import esc
from .scene import Edge, Node

__all__ = ["grad_off", "updated_in_place", "lowered_ops", "buffer_ids", "hide_buffers", "fold_repeats", "fold", "acyclic", "remap_edges", "longest_ways", "REPEAT", "repeat_title"]


#: The kinds of region where grad is off by the user's own hand (an optimizer's update, an evaluation).
GRAD_OFF_KINDS = ("no_grad", "inference_mode")


def grad_off(region: str | None) -> bool:
    """Whether ``region`` (a node's) is a ``no_grad`` or ``inference_mode`` region of the program's
    own, not the reentrant checkpoint's (``"no_grad#3:checkpoint"``, where the forward runs)."""
    return bool(region) and region.partition("#")[0] in GRAD_OFF_KINDS and not region.endswith(REENTRANT_TAG)


def updated_in_place(graph: Graph | None) -> set[tuple[str, str]]:
    """``(parameter id, op id)`` for each use of a parameter with grad off in a region that wrote a
    later version of it in place (an optimizer's step: its update, and the state it made from the
    parameter), in a trace that saw at most one backward pass (a training step).  Such a use does
    not keep the parameter out of the one module call that used it with grad on: drawn inside that
    box, the step reads the box.  Over several passes a loop's folding draws the parameters as they
    were before the first update as what it starts from; a use with grad off in a region that
    writes no version of it (an evaluation under no_grad) is drawn as a use."""
    if graph is None or graph.source != "trace" or max(map(len, map(_FLOWED, graph.tensors)), default=0) > 1:
        return set()
    tensors = {t.id: t for t in graph.tensors}
    region = {op.id: op.region for op in graph.ops if grad_off(op.region)}
    outputs, consumers = graph.adjacency.outputs, graph.adjacency.consumers
    out: set[tuple[str, str]] = set()
    for t in graph.tensors:
        if t.is_parameter and t.name:
            uses = [c for c in consumers.get(t.id, ()) if c in region]
            writes = {region[c] for c in uses
                      if any(tensors[o].name == t.name and tensors[o].version > t.version for o in outputs.get(c, ()) if o in tensors)}
            out.update((t.id, c) for c in uses if region[c] in writes)
    return out


_FLOWED = attrgetter("flowed")

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
    if not any(t.name and "." in t.name for t in graph.tensors):
        return _NONE  # (no tensor carries a dotted name: none is a buffer, and no op only updates one)
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
    by_id = {t.id: t for t in graph.tensors}
    # An op no module scope is known for (a trace without module=) that only bumps one attribute of a
    # module in place (BatchNorm's num_batches_tracked.add_(1)): no backward node, every tensor it
    # reads and writes a version of that attribute (a module path, the same last name), none needing grad.
    bumps = set()
    for op in graph.ops:
        if op.name is None and op.scope is None and op.id in op_out:
            touched = [by_id.get(i) for i in (*op_in.get(op.id, ()), *op_out[op.id])]
            if all(t is not None and _attribute(t) for t in touched) and len({t.name.rsplit(".", 1)[1] for t in touched}) == 1:
                bumps.add(op.id)
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
        if all((scope.get(u) or "") == owner or (scope.get(u) or "").startswith(owner + ".") or u in bumps for u in users):
            found.add(t.id)
    ops = frozenset(
        oid for oid in op_out
        if op_out[oid] and all(i in found for i in op_out[oid]) and all(i in found for i in op_in.get(oid, ()))
    )
    return frozenset(found), ops


def _attribute(t) -> bool:
    """Whether tensor record ``t`` is named as a module's attribute (``model.3.bn1.num_batches_tracked``:
    names and numbers joined by dots, not a ``.grad`` nor an optimizer's state) and needs no grad."""
    return (not t.requires_grad and not t.is_parameter and t.detached_from is None and bool(t.name) and "." in t.name
            and _PATH.fullmatch(t.name) is not None and not t.name.endswith(".grad"))


_PATH = re.compile(r"[A-Za-z_]\w*(?:\.\w+)+")
_NONE: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset())


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
        for r in frames_of(n):
            sizes[r] = sizes.get(r, 0) + 1
    return sizes


def frames_of(n: Node) -> tuple[str, ...]:
    """The frames ``n`` is drawn in, outermost first (its region, then the frames inside it)."""
    return (n.region, *n.inner) if n.region else ()


def _alike_runs(blocks: Mapping[int, list[Node]], depth: int, internal: Mapping[str, list[Edge]], minimum: int,
                sizes: Mapping[str, int] | None = None, loose: frozenset[str] | set[str] = frozenset()) -> list[list[int]]:
    """The runs of consecutive block numbers whose blocks are the same graph (``sizes``: the
    nodes of each region in the picture; ``loose``: nodes whose name does not count, see
    :func:`_signature`)."""
    sigs = {i: _signature(members, depth, internal, sizes, loose) for i, members in blocks.items()}
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
    placed: dict[str, tuple] = {}  # kept node -> (the frames around its run, its frames inside its block)
    fed = {e.dst for e in edges}
    for count, (blocks, title, first_name) in enumerate(runs, number):
        first = blocks[0]
        single = len(first) == 1 and first[0].kind == "box"
        local = _local_regions(first, sizes)
        if not single:
            # (a frame of its own sits inside a loop's frame that holds every block of the run, not
            # inside a no_grad or checkpoint frame; a frame inside the block sits inside it; a tensor
            # fed by nothing drawn and in no frame, the batch a step takes, goes with its block)
            locals_ = [local] + [_local_regions(block, sizes) for block in blocks[1:]]
            outer = {frames_of(b)[:_outer_depth(b, here)] for block, here in zip(blocks, locals_) for b in block
                     if b.region or b.kind != "tensor" or b.id in fed}
            if len(outer) > 1 or any(not r.startswith(REPEAT) for r in next(iter(outer), ())):
                continue
            enclosing = next(iter(outer), ())
            for b in first:
                placed[b.id] = (enclosing, frames_of(b)[_outer_depth(b, local):])
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
            # (its block's frame inside the frames around the run; inside it, what lay inside the
            # block: an optimizer's step under no_grad, in each step of a training loop)
            enclosing, within = placed[n.id]
            n.region, *rest = (*enclosing, kept_region[n.id], *within)
            n.inner = tuple(rest)
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


def longest_ways(ids: list[str], succ: Mapping[str, Iterable[str]]) -> dict[str, int]:
    """Each of ``ids``'s longest way along ``succ`` from one of them nothing leads to (those: 0),
    counting only steps between ``ids``; 0 for one no such way reaches (a cycle, in a graph read from JSON)."""
    waiting = dict.fromkeys(ids, 0)
    for x in ids:
        for y in succ.get(x, ()):
            if y in waiting:
                waiting[y] += 1
    level = {i: 0 for i, w in waiting.items() if not w}
    ready = list(level)
    while ready:
        x = ready.pop()
        d = level[x] + 1
        for y in succ.get(x, ()):
            if y in waiting:
                if level.get(y, -1) < d:
                    level[y] = d
                waiting[y] -= 1
                if not waiting[y]:
                    ready.append(y)
    for i in ids:
        level.setdefault(i, 0)
    return level


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
        for r in frames_of(n):
            here[r] = here.get(r, 0) + 1
    local: dict[str, tuple] = {}
    for r, k in here.items():
        if k == sizes.get(r) and not r.startswith(REPEAT):
            kind, _, rest = r.partition("#")
            local[r] = (kind, rest.lstrip("0123456789"), len(local))
    return local


def _outer_depth(n: Node, local: Mapping[str, tuple]) -> int:
    """How many of ``n``'s frames, outermost first, lie around its block (are not ``local``)."""
    frames = frames_of(n)
    k = 0
    while k < len(frames) and frames[k] not in local:
        k += 1
    return k


def _enclosing(n: Node, local: Mapping[str, tuple]) -> bool:
    """Whether ``n``'s frames are frames around its block, then only frames inside it."""
    frames = frames_of(n)
    return all(r in local for r in frames[_outer_depth(n, local):])


def _signature(members: list[Node], depth: int, internal: Mapping[str, list[Edge]], sizes: Mapping[str, int] | None = None,
               loose: frozenset[str] | set[str] = frozenset()):
    """What makes two blocks the same graph: their nodes' kinds, sub-paths, ops and marks
    in order, and the edges between them; ``None`` for a block that cannot fold (a node
    highlighted or already drawn for a repeat).  A region that lies wholly inside the block
    (``sizes``: how many nodes each region of the picture holds) is compared by its kind
    and place, not its number; whether a node of ``loose`` is named does not count (the
    slice a loop steps through: named by the loop's variable in its first and last step)."""
    pos = {n.id: i for i, n in enumerate(members)}
    local = _local_regions(members, sizes)
    items = []
    for n in members:
        if n.hl:
            return None
        region = None
        if n.region:
            # (a frame that encloses the block, a loop's, is named as it is: blocks alike lie in the same one)
            region = tuple([local.get(r, r) for r in frames_of(n)])
            if any(type(r) is str and r.startswith(REPEAT) for r in region) and not _enclosing(n, local):
                return None  # (drawn for a repeat already)
            region = region[0] if len(region) == 1 else region
        sub = ".".join((n.scope or "").split(".")[depth:])
        if n.kind == "box":
            items.append(("box", sub, n.content, n.rg, n.frozen, region))
        elif n.kind == "tensor":
            items.append(("tensor", sub, n.param, n.rg, n.named and n.id not in loose, region))
        else:
            items.append((n.kind, sub, n.sig, region))
    links = sorted(
        (pos[e.src], pos[e.dst], e.kind) for n in members for e in internal.get(n.id, ()) if e.dst in pos
    )
    return tuple(items), tuple(links)
