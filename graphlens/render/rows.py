"""Rows of a wide diagram: ranks chosen so that no row is wider than a laptop screen.

Graphviz puts every node on a rank (a row of the drawing) and never wraps a row.  A graph
with many leaves (a model's parameters, the gradients an optimizer reads, each
iteration's inputs) gets them side by side in one row thousands of pixels wide, and a
training loop's iterations side by side too.  When the rows Graphviz would make are
wider than :data:`MAX_NATURAL_WIDTH` (1,600 px), graphlens picks the rows itself:

- the program's **stages** one below the other, in the order they ran: what the first
  loss needs, then what the second loss needs and the first did not (the optimizer step
  between them, the next iteration), ...; what no loss needs right after what it reads;
- within a stage, rows filled from the loss upward, each node as low as what it feeds
  allows, up to :data:`MAX_ROW_WIDTH`; the rest moves one row up;
- a ``no_grad`` region gets **rows of its own** (a Graphviz cluster is a rectangle: a
  node beside it in one of its rows sits beside the whole rectangle), filled as a grid
  (an optimizer step: one row of updates, then the next), its title in a row above;
- each stage's backbone (its loss and the chain above it) in one straight column, the
  stages' backbones one under the other (so that iterations do not drift sideways).

The rows reach Graphviz as each edge's ``minlen`` (how many rows its ends are apart): with
every edge exactly as long as that, the rows are the only ranking Graphviz can find best.
(Letting long edges bend, ``weight=0``, gives drawings some 10% narrower, with edges
curling around each other: straight edges read better.)
Narrow graphs (the article's charts) are left to Graphviz as they are, and so are graphs
whose rows would make Graphviz route edges through more than :data:`MAX_PASSES` rows
(thousands of leaves feeding one op).
"""

from __future__ import annotations

import heapq
import html
import re
from bisect import bisect_left, insort
from itertools import islice
from typing import Hashable, Iterable, NamedTuple

from .scene import Edge, Node

__all__ = ["MAX_NATURAL_WIDTH", "MAX_ROW_WIDTH", "MAX_PASSES", "NODESEP", "Rows", "plan_rows", "node_width", "legend_width"]

#: A graph whose widest row Graphviz would make is at most this wide (points; 72 to the
#: inch: 1,600 px at 96 dpi) is left to Graphviz as it is.
MAX_NATURAL_WIDTH = 1200.0
#: How wide the rows graphlens picks are (points).  Graphviz then spreads them for the
#: edges between them: a two-iteration training loop comes out at about 1,600-2,300 px.
MAX_ROW_WIDTH = 800.0
#: The room (points) a node's neighbour, or an edge passing through the row, takes.
GAP = 0.3 * 72
#: At most this many rows passed by edges in all (Graphviz adds a node for each).
MAX_PASSES = 8000
#: Graphviz's ``nodesep`` (inches) for the rows graphlens chose (0.3 otherwise).
NODESEP = "0.15"

_ROW = re.compile(r"<TR>(.*?)</TR>", re.S)
_TAG = re.compile(r"<[^>]+>")
_SIZE = re.compile(r'POINT-SIZE="([\d.]+)"')


class Rows(NamedTuple):
    """The rows graphlens chose: ``level`` of each node id (0 is the bottom row), the row
    of each region's title, the node the legend shares its row with, invisible ``links``
    (upper node, lower node) that hold pieces of the graph no edge joins in their rows,
    and the ``spine``: each stage's backbone (its loss and the chain above it), drawn as
    one straight column (Graphviz ``group``), stage after stage (the ``aligned`` pairs)."""

    level: dict[str, int]
    titles: dict[str, int]
    legend_beside: str | None = None
    links: tuple[tuple[str, str], ...] = ()
    spine: frozenset = frozenset()
    aligned: tuple[tuple[str, str], ...] = ()

    def minlen(self, src: str, dst: str) -> int:
        """How many rows an edge from ``src`` down to ``dst`` spans (at least 1)."""
        a, b = self.level.get(src), self.level.get(dst)
        return a - b if a is not None and b is not None and a > b else 1



_WIDTHS: dict[tuple[str, str], float] = {}


def node_width(n: Node) -> float:
    """An estimate of the width Graphviz gives node ``n``, in points, from its label's
    longest line (Helvetica: about 0.55 of the font size a character, plus the margins)."""
    key = (n.label, str(n.attrs.get("fontsize", 11)))
    known = _WIDTHS.get(key)
    if known is not None:
        return known
    label = n.label
    lines = _ROW.findall(label) or [label[1:-1] if label[:1] == "<" else label]
    widest = 0.0
    for line in lines:
        size = _SIZE.search(line)
        text = html.unescape(_TAG.sub("", line))
        widest = max(widest, len(text) * (float(size.group(1)) if size else float(key[1])) * 0.55)
    width = max(54.0, widest + 20.0)
    if len(_WIDTHS) < 8192:
        _WIDTHS[key] = width
    return width


def legend_width(label: str) -> float:
    """An estimate of the legend's width, in points (its rows are 9 point text after a swatch)."""
    return max((len(html.unescape(_TAG.sub("", line))) for line in _ROW.findall(label)), default=0) * 9 * 0.55 + 50.0


def plan_rows(
    nodes: list[Node], edges: list[Edge], *, legend: float = 0.0, budget: float = MAX_ROW_WIDTH,
    natural_width: float = MAX_NATURAL_WIDTH,
) -> Rows | None:
    """Rows of at most about ``budget`` points for a diagram whose natural rows would be
    wider than ``natural_width`` points, or ``None`` (Graphviz then ranks the nodes
    itself).  ``nodes`` come in forward (topological) order; ``legend`` is the legend's
    width (0: no legend)."""
    width = {n.id: node_width(n) for n in nodes}
    succs: dict[str, set[str]] = {n.id: set() for n in nodes}
    preds: dict[str, set[str]] = {n.id: set() for n in nodes}
    for e in edges:
        if e.src in succs and e.dst in succs and e.src != e.dst:
            succs[e.src].add(e.dst)
            preds[e.dst].add(e.src)
    natural = _widest(_natural_rows(nodes, succs), width) + (legend + GAP if legend else 0.0)
    if natural <= max(budget, natural_width):
        return None
    stage = _stages(nodes, succs, preds)
    # Each row an edge passes is a node Graphviz adds (and lays out slowly): when the rows
    # would make too many (thousands of leaves feeding one op), wider rows; at worst the
    # rows Graphviz makes itself.
    limit = min(MAX_PASSES, 20 * len(nodes) + 500)
    for _ in range(4):
        rows = _plan(nodes, succs, preds, stage, width, legend, budget)
        if sum(max(0, rows.minlen(a, b) - 1) for a, out in succs.items() for b in out) <= limit:
            return rows
        budget *= 2
        if budget >= natural:
            break
    return None


def _plan(nodes: list[Node], succs: dict[str, set[str]], preds: dict[str, set[str]], stage: dict[str, float],
          width: dict[str, float], legend: float, budget: float) -> Rows:
    """The rows of :func:`plan_rows` for ``budget``, the stages given."""
    level: dict[str, int] = {}
    titles: dict[str, int] = {}
    banded: set[int] = set()
    base = 0
    spines: list[list[str]] = []
    by_stage: dict[float, list[Node]] = {}
    for n in nodes:
        by_stage.setdefault(stage[n.id], []).append(n)
    for s in sorted(by_stage, reverse=True):  # the last stage at the bottom
        members = by_stage[s]
        rows, heads, bands = _stage_rows(members, succs, preds, width, budget)
        spines.append(_spine(members, preds, rows))
        level.update((nid, base + k) for nid, k in rows.items())
        titles.update((r, base + k) for r, k in heads.items())
        banded.update(base + k for k in bands)
        base += max(rows.values(), default=-1) + 1
        base = max([base] + [titles[r] + 1 for r in heads])
    spines.reverse()  # (top to bottom)
    aligned = tuple((a[-1], b[0]) for a, b in zip(spines, spines[1:]) if a and b and level[a[-1]] > level[b[0]])
    return Rows(
        level,
        titles,
        _legend_row(level, width, legend, budget, banded) if legend else None,
        _links(nodes, succs, level),
        frozenset(nid for sp in spines for nid in sp),
        aligned,
    )


def _spine(members: list[Node], preds: dict[str, set[str]], level: dict[str, int]) -> list[str]:
    """The stage's backbone, top to bottom: from its root (its lowest node) up through the
    inputs outside regions, the one with the longest way up first."""
    ids = {n.id for n in members if not n.region}
    if not ids:
        return []
    order = {n.id: i for i, n in enumerate(members)}
    depth: dict[str, int] = {}
    for n in members:
        if n.id in ids:
            depth[n.id] = max((depth[p] + 1 for p in preds[n.id] if p in depth), default=0)
    cur = min(ids, key=lambda nid: (level[nid], -order[nid]))
    path = [cur]
    on_path = {cur}  # (a collapsed picture can hold a cycle: the climb must end anyway)
    while True:
        up = [p for p in preds[cur] if p in ids and p not in on_path]
        if not up:
            break
        cur = min(up, key=lambda nid: (-depth[nid], level[nid], order[nid]))
        path.append(cur)
        on_path.add(cur)
    path.reverse()
    return path


def _natural_rows(nodes: list[Node], succs: dict[str, set[str]]) -> dict[str, int]:
    """Roughly the rows Graphviz makes: each node just above the lowest row it must be
    above (a leaf right above what it feeds), ``rank=min`` nodes in the top row."""
    level: dict[str, int] = {}
    for n in reversed(nodes):  # consumers come after their inputs
        level[n.id] = max((level[s] + 1 for s in succs[n.id] if s in level), default=0)
    top = max(level.values(), default=0)
    for n in nodes:
        if n.rank == "min":
            level[n.id] = top
    return level


def _widest(level: dict[str, int], width: dict[str, float]) -> float:
    rows: dict[int, float] = {}
    for nid, k in level.items():
        rows[k] = rows.get(k, -GAP) + width[nid] + GAP
    return max(rows.values(), default=0.0)


def _stages(nodes: list[Node], succs: dict[str, set[str]], preds: dict[str, set[str]]) -> dict[str, float]:
    """The stage of each node; stages are drawn one below the other in increasing order.
    Stage ``k`` holds what the ``k``-th root (a loss, in forward order) needs and no
    earlier root does; what no root needs comes after the latest stage it reads from
    (``k + 0.5``: an optimizer's last step, a metric); a node that reads nothing, with
    the first stage that reads it; a piece joined to no stage, last.  A ``no_grad``
    region moves as one piece (it ran as one piece of the program)."""
    unit: dict[str, Hashable] = {n.id: ("region", n.region) if n.region else n.id for n in nodes}
    members: dict[Hashable, list[str]] = {}
    for n in nodes:
        members.setdefault(unit[n.id], []).append(n.id)
    up = {u: {unit[p] for m in ms for p in preds[m]} - {u} for u, ms in members.items()}
    down = {u: {unit[s] for m in ms for s in succs[m]} - {u} for u, ms in members.items()}
    stage: dict[Hashable, float] = {}
    for k, root in enumerate(unit[n.id] for n in nodes if n.rank == "max"):
        stack = [root]
        while stack:
            u = stack.pop()
            if u not in stage:
                stage[u] = k
                stack.extend(p for p in up[u] if p not in stage)
    needed = set(stage)
    forward = _unit_order(members, up, down)
    for u in forward:  # inputs first
        if u not in stage:
            known = [stage[p] + (0.5 if p in needed else 0.0) for p in up[u] if p in stage]
            if known:
                stage[u] = max(known)
    last = max(stage.values(), default=-0.5) + 0.5  # (what touches no stage at all comes last)
    for u in reversed(forward):  # what reads nothing joins its first reader
        if u not in stage:
            stage[u] = min((stage[s] for s in down[u] if s in stage), default=last)
    return {nid: stage[unit[nid]] for nid in unit}


def _unit_order(members: dict[Hashable, list[str]], up: dict, down: dict) -> list[Hashable]:
    """The units (nodes, and regions as one) in forward order, ties in node order."""
    units = list(members)
    rank = {u: i for i, u in enumerate(units)}
    waiting = {u: len(up[u]) for u in units}
    ready = [rank[u] for u in units if waiting[u] == 0]
    heapq.heapify(ready)
    out: list[Hashable] = []
    while ready:
        u = units[heapq.heappop(ready)]
        out.append(u)
        for s in down[u]:
            waiting[s] -= 1
            if waiting[s] == 0:
                heapq.heappush(ready, rank[s])
    if len(out) < len(units):  # a cycle through a region: the rest in node order
        done = set(out)
        out.extend(u for u in units if u not in done)
    return out


def _stage_rows(
    members: list[Node], succs: dict[str, set[str]], preds: dict[str, set[str]], width: dict[str, float], budget: float
) -> tuple[dict[str, int], dict[str, int], set[int]]:
    """Rows of one stage, from the bottom up: ``(row of each node, row of each region's
    title, the rows regions fill)``.  A node may take a row once everything it feeds lies
    below; the stage's root takes the bottom row; then, while the row has room, the nodes
    with the longest way up to a leaf first (delaying one pushes all it comes from up),
    leaves last.  A region's rows hold nothing else; they start once everything the
    region feeds is placed, and its title takes the row above them.

    The nodes ready to be placed are kept in the order the rows above the bottom one take
    them (longest way up first, then the later node), those outside regions apart from
    each region's, with the sums of edges a row's room needs: a row reads only the nodes it
    places (an unrolled loop keeps hundreds ready, its inputs, for thousands of rows; an
    optimizer's step, hundreds of updates in one region: reading them all for each row was
    quadratic)."""
    order = {n.id: i for i, n in enumerate(members)}
    region = {n.id: n.region for n in members if n.region}
    height: dict[str, int] = {}
    for n in members:  # longest path from a leaf of this stage (forward order)
        height[n.id] = max((height[p] + 1 for p in preds[n.id] if p in height), default=0)
    bottom = {n.id for n in members if n.rank == "max"}
    waiting = {nid: len(succs[nid] & order.keys()) for nid in order}  # what later stages hold is below
    left: dict[str, int] = {}
    exits: dict[str, set[str]] = {}  # region -> its nodes that feed something outside it
    for nid, r in region.items():
        left[r] = left.get(r, 0) + 1
        if any(s in order and region.get(s) != r for s in succs[nid]):
            exits.setdefault(r, set()).add(nid)
    # The ready nodes, kept in the order the rows above the bottom one take them (``ranked``:
    # longest way up first, then the later node): their ranks outside regions (``queue``)
    # and in each region (``inside``), with what a row's room and a region's opening need.
    ranked = sorted(order, key=lambda nid: (-height[nid], -order[nid]))
    rank = {nid: k for k, nid in enumerate(ranked)}
    queue: list[int] = []
    inside: dict[str, list[int]] = {r: [] for r in left}
    exits_ready = dict.fromkeys(left, 0)  # region -> how many of its exits are ready
    ready_set: set[str] = set()
    level: dict[str, int] = {}
    titles: dict[str, int] = {}
    bands: set[int] = set()
    band: str | None = None
    into: dict[str, int] = {}  # a node not placed yet -> how many of the nodes it feeds are placed
    passing = 0  # edges from placed nodes up to nodes not placed yet
    for n in members:  # what later stages (below) take from this one passes its rows too
        for s in succs[n.id]:
            if s not in order:
                into[n.id] = into.get(n.id, 0) + 1
                passing += 1
    # (of those edges, the ones ending at a ready node: outside regions, and in each region at each height)
    held = 0
    held_in: dict[tuple[str, int], int] = {}
    narrowest = min((width[nid] + GAP for nid in order), default=0.0)
    starts: dict[int, int] = {}  # height -> the first rank of that height (ranks run by height, highest first)
    for k, nid in enumerate(ranked):
        starts.setdefault(height[nid], k)

    # Each region with ready nodes by its first one (``heads``), and those of them that can open
    # (``open_heads``, a part of it in the same order), kept as their nodes come and go: a row
    # reads the first of each, not every region (an optimizer step in a loop adds one a step).
    heads: list[tuple[int, str]] = []
    open_heads: list[tuple[int, str]] = []
    head_of: dict[str, tuple[int, str]] = {}
    open_of: dict[str, tuple[int, str]] = {}

    def reseat(r: str) -> None:  # (region r's ready nodes or ready exits changed)
        for entries, of in ((heads, head_of), (open_heads, open_of)):
            old = of.pop(r, None)
            if old is not None:
                del entries[bisect_left(entries, old)]
        q = inside[r]
        if q:
            entry = head_of[r] = (q[0], r)
            insort(heads, entry)
            if opens(r):
                open_of[r] = entry
                insort(open_heads, entry)

    def make_ready(nid: str) -> None:
        nonlocal held
        ready_set.add(nid)
        r = region.get(nid)
        if r is None:
            insort(queue, rank[nid])
            held += into.get(nid, 0)
        else:
            insort(inside[r], rank[nid])
            key = (r, height[nid])
            held_in[key] = held_in.get(key, 0) + into.get(nid, 0)
            if nid in exits.get(r, ()):
                exits_ready[r] += 1
            reseat(r)

    def opens(r: str) -> bool:  # (every node of the region that feeds something outside it is ready)
        return exits_ready[r] == len(exits.get(r, ()))

    for k in sorted(rank[nid] for nid, w in waiting.items() if w == 0):
        make_ready(ranked[k])

    row = 0
    while len(level) < len(order) or band is not None:
        ready: list[str] = []
        if row == 0:  # (the bottom row puts the stage's root first)
            ready = sorted(ready_set, key=lambda nid: (nid not in bottom, -height[nid], -order[nid]))
            first = ready[0] if ready else None
            openable = [region[nid] for nid in ready if nid in region and opens(region[nid])]
        else:
            firsts = queue[:1] + [k for k, _ in heads[:1]]
            first = ranked[min(firsts)] if firsts else None
            openable = [r for _, r in open_heads[:1]]
            if first in region and region[first] in open_of and region[first] not in openable:
                openable.append(region[first])  # (what the choice below reads: the first, and the first node's)
        if band is None and region:
            # (leaves ready first: they belong right above what they feed, not above the region;
            # the ready nodes outside regions are ordered longest way up first: a leaf is last)
            if openable and (not queue or (region.get(first) in openable and height[ranked[queue[-1]]] != 0)):
                band = openable[0] if region.get(first) not in openable else region[first]
            elif not queue and first is not None:  # (a cycle through the region) open it anyway
                band = region[first]
        if band is not None and left.get(band, 0) == 0:  # the region is placed: its title's row
            titles[band] = row
            band = None
            row += 1
            continue
        # The pool the row is filled from, in order, and the edges ending at it: all ready outside
        # regions, or a region's ready nodes of its lowest height (a region's rows: one height each,
        # the lowest first, a grid); read only as far as the row fills.
        pool: Iterable[str]
        if row == 0:
            if band is not None:
                pool = [nid for nid in ready if region.get(nid) == band]
                low = min((height[nid] for nid in pool), default=0)
                pool = [nid for nid in pool if height[nid] == low]
            else:
                pool = [nid for nid in ready if nid not in region]
            empty, ending = not pool, sum(into.get(nid, 0) for nid in pool)
        elif band is not None:
            q = inside[band]
            empty = not q
            low = height[ranked[q[-1]]] if q else 0
            pool = map(ranked.__getitem__, islice(q, bisect_left(q, starts[low]) if q else 0, None))
            ending = held_in.get((band, low), 0)
        else:
            pool, empty, ending = map(ranked.__getitem__, queue), not queue, held
        if empty:  # a cycle (collapsed boxes can make one): take the node closest to ready
            stuck = [nid for nid in order if nid not in level and nid not in ready_set]
            stuck = [nid for nid in stuck if region.get(nid) == band] or stuck
            if not stuck:
                band = None
                continue
            make_ready(min(stuck, key=lambda nid: (waiting[nid], -order[nid])))
            continue
        # edges from below up to what is not placed yet pass through this row: each takes a gap
        used, placed = -GAP + GAP * (passing - ending), []
        for nid in pool:
            w = width[nid] + GAP
            if not placed or used + w <= budget or (row == 0 and nid in bottom):
                placed.append(nid)
                used += w
            elif row and used + narrowest > budget:  # (nothing after this fits either)
                break
        if band is not None:
            bands.add(row)
        for nid in placed:
            ready_set.discard(nid)
            r = region.get(nid)
            if r is None:
                del queue[bisect_left(queue, rank[nid])]
                held -= into.get(nid, 0)
            else:
                q = inside[r]
                del q[bisect_left(q, rank[nid])]
                held_in[(r, height[nid])] -= into.get(nid, 0)
                if nid in exits.get(r, ()):
                    exits_ready[r] -= 1
                reseat(r)
        for nid in placed:
            level[nid] = row
            passing -= into.pop(nid, 0)
            if nid in region:
                left[region[nid]] -= 1
            for p in preds[nid]:
                into[p] = into.get(p, 0) + 1
                passing += 1
                if p in ready_set:  # (its edges are counted where it waits)
                    if p in region:
                        held_in[(region[p], height[p])] += 1
                    else:
                        held += 1
                if p in waiting:
                    waiting[p] -= 1
                    if waiting[p] == 0 and p not in level and p not in ready_set:
                        make_ready(p)
        row += 1
    return level, titles, bands


def _legend_row(level: dict[str, int], width: dict[str, float], legend: float, budget: float, banded: set[int]) -> str | None:
    """A node of the row the legend goes in: the highest row outside a region with room
    for it, else the row with the most room."""
    used: dict[int, float] = {}
    first: dict[int, str] = {}
    for nid, k in level.items():
        used[k] = used.get(k, -GAP) + width[nid] + GAP
        first.setdefault(k, nid)
    free = [k for k in used if k not in banded] or list(used)
    if not free:
        return None
    fits = [k for k in free if used[k] + GAP + legend <= budget]
    k = max(fits) if fits else min(free, key=lambda r: (used[r], -r))
    return first[k]


def _links(nodes: list[Node], succs: dict[str, set[str]], level: dict[str, int]) -> tuple[tuple[str, str], ...]:
    """Invisible edges that hold pieces of the graph no edge joins in their rows (Graphviz
    would start each piece in the top row): from the top node of the highest piece to the
    top node of each piece that starts lower."""
    parent = {n.id: n.id for n in nodes}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, out in succs.items():
        for b in out:
            ra, rb = find(a), find(b)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)
    tops: dict[str, str] = {}
    for n in nodes:
        r = find(n.id)
        if r not in tops or level[n.id] > level[tops[r]]:
            tops[r] = n.id
    pieces = list(tops.values())
    if len(pieces) < 2:
        return ()
    anchor = max(pieces, key=lambda nid: level[nid])  # (the first of the highest)
    return tuple((anchor, other) for other in pieces if level[other] < level[anchor])
