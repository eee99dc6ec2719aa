"""Collapsing: submodules into one box each (by scope), repeated op patterns into one chain node."""

from __future__ import annotations

from typing import Mapping

from .labels import esc, plural
from .chains import collapse_chains, collapse_fans, periodic_segment
from .scene import Edge, Node, Options
from ..graph import Graph
from .loops import fold_loops, fold_structure
from .modules import acyclic, fold_repeats, grad_off, longest_ways, lowered_ops, remap_edges, updated_in_place
from .style import BOX_BORDER, BOX_FILL, FROZEN_BORDER, FROZEN_FILL, GRAD_BORDER, HIGHLIGHT, MODULE_NODES

__all__ = ["collapse", "SIDE_PATH"]


def collapse(nodes: list[Node], edges: list[Edge], o: Options, graph: Graph | None = None) -> tuple[list[Node], list[Edge]]:
    """Collapse submodules at ``o.depth``, then, if still above ``MODULE_NODES`` (or
    ``o.max_nodes`` when lower), the body of a loop ``graph``'s trace saw run many times
    (drawn once, "× N"), then, if still above ``o.max_nodes``, repeated chains of ops.

    ``o.depth=None`` picks the level: a model's graph (its nodes carry module scopes) above
    ``MODULE_NODES`` drawn nodes opens at the deepest module level whose picture fits in
    ``MODULE_NODES`` (and ``o.max_nodes``), runs of identical numbered blocks drawn once
    (``o.repeats``); any other graph collapses only above ``o.max_nodes``, where a snapshot's
    stretches that repeat one graph (an unrolled cell) fold as a trace's loops do."""
    depth = o.depth
    levels = max((len(n.scope.split(".")) for n in nodes if n.scope), default=0)
    budget = min(MODULE_NODES, o.max_nodes)
    lowered = lowered_ops(graph) if graph is not None and levels else {}
    boxes: dict[int, dict] = {}  # depth -> its box map, and the collapsed picture (each built once)
    tried: dict[int, tuple] = {}

    scene: list[_Scene] = []  # (what every depth reads of the nodes and edges: read once, when a depth is first tried)
    known: list = []

    def updates() -> set:  # (a training step's parameter updates: read once, when boxes or loops first need them)
        if not known:
            known.append(updated_in_place(graph))
        return known[0]

    def box_at(k: int) -> dict:
        if k not in boxes:
            if not scene:
                # (a snapshot's nodes come in its walk's order, from the root: its runs are numbered in
                # an order the forward pass could have made them, as a trace's are)
                scene.append(_Scene(nodes, edges, forward=graph is not None and graph.source != "trace",
                                    updates=updates()))
            boxes[k] = _box_map(nodes, edges, k, scene[0])
        return boxes[k]

    def at(k: int) -> tuple:
        if k not in tried:
            box = box_at(k)
            boxed = _collapse_scopes(nodes, edges, box, lowered)
            if box and not acyclic(*boxed) and acyclic(nodes, edges):
                # (boxes that would feed each other in a circle, which no autograd graph
                # does, e.g. around scopes a snapshot inferred: this level is not drawn)
                box, boxed = {}, (nodes, edges)
            tried[k] = (bool(box), _fold(*boxed, o), boxed)
        return tried[k]

    def fits_at(k: int) -> bool:
        # (folding repeats only drops nodes: a level whose boxes alone fit is not built)
        return _count_after(nodes, box_at(k)) <= budget or len(at(k)[1][0]) <= budget

    if depth is None and levels and len(nodes) > budget:
        fits = None
        for k in range(1, levels + 1):
            if fits_at(k):
                fits = k
            elif fits is not None:
                break
            # (nothing fits yet: a deeper level may, where its numbered blocks fold, e.g. a model's
            # heads applied side by side, each its own run of the model's box at the levels above)
        depth = fits if fits is not None else 1
    unfolded = None  # (the boxes before their numbered blocks fold: what a loop's iterations hold)
    if depth is not None:
        boxed, picture, unfolded = at(depth)
        if boxed:
            nodes, edges = picture
        else:
            unfolded = None
    if len(nodes) > budget and o.repeats and graph is not None and graph.source == "trace":
        looped, before = fold_loops(graph, nodes, edges, budget=budget, updates=updates()), (nodes, edges)
        if len(looped[0]) > budget and unfolded is not None and len(unfolded[0]) != len(nodes):
            # (a block folded inside each iteration, layers 1 and 2 of a stack run in every
            # step, keeps the iterations from folding: the loop alone, if it draws fewer)
            alone = fold_loops(graph, *unfolded, budget=budget, updates=updates())
            if len(alone[0]) < len(looped[0]):
                looped, before = alone, unfolded
        nodes, edges = looped
        if len(nodes) > o.max_nodes:
            # (still too large: each long no_grad step, an optimizer's update, as one box, and the
            # loop folded again, kept if it draws fewer)
            steps = _step_boxes(*before, _fresh(graph))
            if steps:
                boxed = fold_loops(graph, *_collapse_scopes(*before, steps), budget=budget, updates=updates())
                if len(boxed[0]) < len(nodes):
                    nodes, edges = boxed
    elif len(nodes) > o.max_nodes and graph is not None and graph.source == "trace":
        steps = _step_boxes(nodes, edges, _fresh(graph))
        if steps:
            nodes, edges = _collapse_scopes(nodes, edges, steps)
    if len(nodes) > o.max_nodes:
        nodes, edges = _collapse_chains(nodes, edges)
    # (a model's picture aims at the module budget, as a trace's loops fold above it)
    limit = budget if levels else o.max_nodes
    if len(nodes) > limit and o.repeats and graph is not None and graph.source != "trace":
        # (a snapshot's repeating stretches, found by the graph alone, once chains are drawn as one;
        # like the chains, only above max_nodes, or a model's above the module budget: a picture that
        # fits is drawn as it is)
        nodes, edges = fold_structure(graph, nodes, edges, budget=limit)
    if len(nodes) > o.max_nodes:
        nodes, edges = collapse_fans(nodes, edges)
    return nodes, edges


def _fold(nodes: list[Node], edges: list[Edge], o: Options) -> tuple[list[Node], list[Edge]]:
    return fold_repeats(nodes, edges) if o.repeats else (nodes, edges)


_REGION_SEP = "\x00"
_CALL_SEP = "\x01"
_SIDE = "\x03"  # (a box of an open module's ops on tensors that need no grad)
#: The last part of such a box's ``scope`` (it is no module of the tree: pages skip it).
SIDE_PATH = ".(needs no grad)"


class _Scene:
    """What :func:`_box_map` reads of a scene at every depth, read once per picture."""

    __slots__ = ("order", "pairs", "scoped", "side", "named", "named_flow", "params", "param_flow", "tensors")

    def __init__(self, nodes: list[Node], edges: list[Edge], *, forward: bool = False,
                 updates: set[tuple[str, str]] | frozenset = frozenset()) -> None:
        self.order = _forward_order(nodes, edges) if forward else [n.id for n in nodes]
        self.pairs = [(e.src, e.dst) for e in edges]
        self.scoped = [(n.id, n.scope.split("."), n.region) for n in nodes if n.scope]
        # An open module's own work on tensors that need no grad (BERT's attention mask, the
        # position ids) is one box beside the gradient path, not a dozen green leaves. An op
        # that recorded a backward node is never in it (its result needs grad, even where
        # the picture draws no tensor of it: a snapshot's ops, the function view).
        grad_tensors = {n.id for n in nodes if n.kind == "tensor" and n.rg}
        touches: set[str] = set()
        for src, dst in self.pairs:
            if src in grad_tensors or dst in grad_tensors:
                touches.add(src)
                touches.add(dst)
        self.side = [
            (n.id, f"{n.scope}{_SIDE}") for n in nodes
            if (n.scope and n.region is None and not n.rg and not n.param and not n.named and not n.backward
                and n.kind in ("op", "tensor") and n.id not in touches)
        ]
        self.tensors = {n.id for n in nodes if n.kind == "tensor"}
        self.named = [n.id for n in nodes if n.kind == "tensor" and n.named and not n.param]
        self.params = [n.id for n in nodes if n.kind == "tensor" and n.param]
        flow = [(e.src, e.dst) for e in edges if e.kind != "detach"]
        named, params = set(self.named), set(self.params)
        self.named_flow = [(s, d) for s, d in flow if s in named]
        # (an optimizer's update of a parameter in a training step does not keep it out of the box that
        # used it with grad on: see modules.updated_in_place)
        self.param_flow = [(s, d) for s, d in flow if s in params and (s, d) not in updates]


def _forward_order(nodes: list[Node], edges: list[Edge]) -> list[str]:
    """The ids of ``nodes`` by their longest way along ``edges`` (drawn in the forward direction)
    from a node no edge enters, ties in the order of ``nodes``: an order the forward pass could
    have made them in."""
    ids = [n.id for n in nodes]
    succ: dict[str, list[str]] = {}
    for e in edges:
        succ.setdefault(e.src, []).append(e.dst)
    level, place = longest_ways(ids, succ), {i: k for k, i in enumerate(ids)}
    return sorted(ids, key=lambda i: (level[i], place[i]))


def _box_map(nodes: list[Node], edges: list[Edge], depth: int, scene: _Scene | None = None) -> dict[str, str]:
    """node id -> submodule box name, for nodes collapsed at ``depth``.  A submodule that
    ran more than once (each iteration of a training loop, each step of an unrolled RNN)
    gets one box per run, where the runs share nothing but parameters: one box for all
    would be drawn feeding itself.  A box needs an op: tensors alone stay visible.
    ``scene``: what the picture's nodes and edges give every depth (read once for many)."""
    s = scene if scene is not None else _Scene(nodes, edges)
    scoped: dict[str, str] = {}
    for nid, parts, region in s.scoped:
        if len(parts) >= depth:
            b = ".".join(parts[:depth])
            # A submodule run inside no_grad is a different box from its training run.
            scoped[nid] = b if region is None else f"{b}{_REGION_SEP}{region}"
    for nid, b in s.side:
        if nid not in scoped:
            scoped[nid] = b
    # The program's own variables stay visible between the boxes: a named tensor that
    # something outside its box uses (``h = model.enc(x)`` read by ``model.dec``), or
    # nothing at all (an output); one used only inside its box (``out`` inside a block's
    # forward) is part of the box.
    users: dict[str, set] = {}
    for src, dst in s.named_flow:
        users.setdefault(src, set()).add(scoped.get(dst))
    for nid in s.named:
        if nid in scoped:
            used = users.get(nid)
            if not used or used != {scoped[nid]}:
                del scoped[nid]
    params = set(s.params)
    box = _runs({nid: b for nid, b in scoped.items() if nid not in params}, s.order, s.pairs)
    # A parameter folds into the one box that consumes it (with its own scope or none).
    consumers: dict[str, set] = {}
    for src, dst in s.param_flow:
        consumers.setdefault(src, set()).add(box.get(dst))
    for nid in s.params:
        if nid in box:
            continue
        targets = consumers.get(nid)
        if targets and len(targets) == 1:
            (b,) = targets
            if b is not None and (nid not in scoped or b.partition(_CALL_SEP)[0].partition(_REGION_SEP)[0] == scoped[nid]):
                box[nid] = b
    tensors = s.tensors
    with_ops = {b for nid, b in box.items() if nid not in tensors}
    return {nid: b for nid, b in box.items() if b in with_ops}


def _runs(box: dict[str, str], order: list[str], pairs: list[tuple[str, str]]) -> dict[str, str]:
    """``box`` with each box split into its runs (the pieces its members' edges join),
    numbered in graph order (``order``: the node ids) when there is more than one."""
    parent = {nid: nid for nid in box}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    get = box.get
    for src, dst in pairs:
        b = get(src)
        if b is not None and get(dst) == b:
            ra, rb = find(src), find(dst)
            if ra != rb:
                parent[rb] = ra
    root_of = {nid: find(nid) for nid in box}
    pieces: dict[str, dict[str, int]] = {}  # box -> its pieces' roots, numbered in graph order
    for nid in order:
        b = get(nid)
        if b is not None:
            roots = pieces.get(b)
            if roots is None:
                roots = pieces[b] = {}
            roots.setdefault(root_of[nid], len(roots) + 1)
    out: dict[str, str] = {}
    for nid, b in box.items():
        roots = pieces[b]
        out[nid] = b if len(roots) == 1 else f"{b}{_CALL_SEP}{roots[root_of[nid]]}"
    return out


#: A no_grad (or inference_mode) region of at least this many ops is drawn as one box in a
#: picture above ``max_nodes`` (an optimizer's update: Adam runs about nine ops per parameter).
STEP_BOX_OPS = 6
_STEP = "\x04"  # (a box of one no_grad region's ops: its key is this and the region)


def _step_boxes(nodes: list[Node], edges: list[Edge], fresh: set[str] | frozenset[str] = frozenset()) -> dict[str, str]:
    """node id -> box key for each no_grad or inference_mode region with ``STEP_BOX_OPS`` ops
    or more: its ops, and the tensors made in it that only such steps use (an optimizer's
    state, a version the step goes on changing) or nothing does.  Drawn beside the box, in the
    region's frame: each parameter's last version (the update's result), what the program
    uses elsewhere, and the named tensors the step made new that nothing uses (``fresh``: ids
    of tensors not made by changing one in place; an evaluation's output under no_grad)."""
    ops: dict[str, int] = {}
    for n in nodes:
        r = n.region
        if n.kind != "tensor" and grad_off(r):
            ops[r] = ops.get(r, 0) + 1
    big = {r for r, k in ops.items() if k >= STEP_BOX_OPS}
    if not big:
        return {}
    box = {n.id: f"{_STEP}{n.region}" for n in nodes if n.region in big and n.kind != "tensor" and not n.hl}
    users: dict[str, list] = {}
    for e in edges:
        users.setdefault(e.src, []).append(e.dst)
    for n in nodes:
        if n.region not in big or n.kind != "tensor" or n.hl:
            continue
        key = f"{_STEP}{n.region}"
        seen = [box.get(u) for u in users.get(n.id, ())]
        if n.param:
            inside = bool(seen) and all(b == key for b in seen)  # (AdamW's decayed weight, then updated)
        else:
            inside = None not in seen and (bool(seen) or not (n.named and n.id in fresh))
        if inside:
            box[n.id] = key
    # A step that updates many parameters (a transformer's optimizer: one new version of each of
    # its dozens of weights, and the gradient it read for each) holds them too, and says so.
    around: dict[str, list[str]] = {}
    for n in nodes:
        if n.kind != "tensor" or n.hl or n.id in box:
            continue
        if n.region in big and n.param:
            around.setdefault(f"{_STEP}{n.region}", []).append(n.id)
        else:
            seen = {box.get(u) for u in users.get(n.id, ())}
            if len(seen) == 1 and None not in seen and n.region not in big:  # (only the step reads it: a .grad)
                around.setdefault(seen.pop(), []).append(n.id)
    for key, ids in around.items():
        if len(ids) > STEP_BOX_AROUND:
            box.update(dict.fromkeys(ids, key))
    return box


#: A no_grad step box holds the parameters it updates and the gradients it reads when they are
#: more than this many (else they are drawn beside it).
STEP_BOX_AROUND = 12


def _fresh(graph: Graph) -> set[str]:
    """The ids of the tensors made new in a no_grad region (no version of one changed in place)."""
    return {t.id for t in graph.tensors if t.region and not t.version}


def _step_label(region: str, group: list[Node], edges: list[Edge]) -> tuple[str, str]:
    """The title and detail of a no_grad step's box: its region's kind and ops, by name, and
    how many parameters it updates (when it holds their new versions)."""
    names: dict[str, int] = {}
    for m in group:
        if m.kind == "op":
            name = (m.sig or "").partition(" / ")[0]
            names[name] = names.get(name, 0) + 1
    n_ops = sum(1 for m in group if m.kind != "tensor")
    params = {m.id for m in group if m.kind == "tensor" and m.param and m.region == region}
    if params:  # (a version the step goes on changing, AdamW's decayed weight, is not one more parameter)
        ids = {m.id for m in group}
        params -= {e.src for e in edges if e.src in params and e.dst in ids}
    n_params = len(params)
    n_tensors = len(group) - n_ops
    shown = [f"{k} ×{c}" if c > 1 else k for k, c in sorted(names.items(), key=lambda kv: (-kv[1], kv[0]))]
    detail = ", ".join(shown[:4]) + (f" and {len(shown) - 4} more" if len(shown) > 4 else "")
    if n_tensors:
        detail += f"; {plural(n_tensors, 'tensor')} inside"
    if n_params:
        detail += f"; updates {plural(n_params, 'parameter')}"
    return f"{region.partition('#')[0]} step: {plural(n_ops, 'op')}", detail


def _count_after(nodes: list[Node], box: Mapping[str, str]) -> int:
    return sum(1 for n in nodes if n.id not in box) + len(set(box.values()))


def _collapse_scopes(nodes: list[Node], edges: list[Edge], box: Mapping[str, str],
                     lowered: Mapping[str, str] | None = None) -> tuple[list[Node], list[Edge]]:
    if not box:
        return nodes, edges
    members: dict[str, list[Node]] = {}
    for n in nodes:
        b = box.get(n.id)
        if b is not None:
            members.setdefault(b, []).append(n)
    box_ids: dict[str, str] = {}
    taken: set[str] = set()
    for b in members:  # distinct ids for distinct scopes ('a-b', 'a_b' and 'a+b' are three boxes)
        base = ("side_" if _SIDE in b else "step_" if b.startswith(_STEP) else "scope_") + "".join(
            c if c.isalnum() else "_" for c in b.replace(_SIDE, "").replace(_STEP, ""))[:60]
        bid, k = base, 1
        while bid in taken:
            k += 1
            bid = f"{base}_{k}"
        taken.add(bid)
        box_ids[b] = bid
    out: list[Node] = []
    placed: set[str] = set()
    for n in nodes:
        b = box.get(n.id)
        if b is None:
            out.append(n)
            continue
        if b in placed:
            continue
        placed.add(b)
        group = members[b]
        n_ops = sum(1 for m in group if m.kind in ("op", "chain"))
        n_tensors = sum(1 for m in group if m.kind == "tensor")
        detail = plural(n_ops, "op") + (", " + plural(n_tensors, "tensor") if n_tensors else "")
        hl = any(m.hl for m in group)
        rg = any(m.rg for m in group)
        params = [m for m in group if m.param]
        frozen = bool(params) and not any(m.rg for m in params)
        if frozen:
            detail += "; frozen: no parameter requires grad"
        low = sorted({lowered[m.id] for m in group if lowered and m.id in lowered})
        if low:  # (ops that made float16/bfloat16 from float32 inputs: torch.autocast)
            n_low = sum(1 for m in group if lowered and m.id in lowered)
            detail += f"; autocast: {plural(n_low, 'op')} in {'/'.join(low)}"
        head, _, run = b.partition(_CALL_SEP)
        title, _, region = head.partition(_REGION_SEP)
        path: str | None = title
        if title.startswith(_STEP):  # (a no_grad step: no module)
            region, path = title[1:], None
            title, detail = _step_label(region, group, edges)
        elif title.endswith(_SIDE):
            path = title[:-1] + SIDE_PATH
            title = title[:-1] + ": needs no grad"
        if run:
            title = f"{title} #{run}"
        label = (
            f'<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="1"><TR><TD><B>{esc(title)}</B></TD></TR>'
            f'<TR><TD><FONT POINT-SIZE="9" COLOR="#444444">{esc(detail)}</FONT></TD></TR></TABLE>>'
        )
        attrs = {
            "shape": "box",
            "style": "filled,dashed" if frozen else "filled",
            "fillcolor": FROZEN_FILL if frozen else BOX_FILL,
            "color": HIGHLIGHT if hl else (GRAD_BORDER if rg else FROZEN_BORDER if frozen else BOX_BORDER),
            "penwidth": "2.5" if hl or rg else "1.5",
        }
        node = Node(box_ids[b], "box", label, attrs, region=region or None, scope=path, hl=hl, rg=rg)
        node.frozen = frozen
        node.content = tuple((m.kind, m.sig, m.param, m.rg, m.content) for m in group)
        node.members = tuple(m.id for m in group)
        node.rank = next((m.rank for m in group if m.rank), None)
        out.append(node)
    return out, remap_edges(edges, {i: box_ids[b] for i, b in box.items()})




def _periodic_segment(sigs: list[str], max_period: int = 4) -> tuple[int, int, int]:
    """``(start, period, repeats)`` of the longest stretch of ``sigs`` that repeats one
    pattern of up to ``max_period`` ops (the shortest pattern on ties)."""
    return periodic_segment(sigs, max_period)


def _collapse_chains(nodes: list[Node], edges: list[Edge]) -> tuple[list[Node], list[Edge]]:
    """Replace each long stretch of ops that repeats one pattern of up to four ops (a run
    of one op, or the steps of a loop: ``mul, add, mul, add, ...``), together with the
    unnamed tensors between them, every member with one way in and one way out, by a
    single node, once the pattern repeats at least ``MIN_CHAIN`` times
    (:func:`~graphlens.render.chains.collapse_chains`)."""
    return collapse_chains(nodes, edges)
