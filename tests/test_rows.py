"""The rows a wide diagram is drawn in: the planner that reads only the nodes each row places
chooses exactly the rows of the plain one that reads every ready node for every row."""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import example, given
from hypothesis import strategies as st

import graphlens.render.rows as rows
from graphlens.render.rows import GAP


def _plain_stage_rows(members, succs, preds, width, budget):
    """The plain planner (graphlens before 2026-12-07): every ready node sorted and read again for each row."""
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
    ready = [nid for nid, k in waiting.items() if k == 0]
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
    row = 0
    while len(level) < len(order) or band is not None:
        ready.sort(key=lambda nid: (nid not in bottom or row > 0, -height[nid], -order[nid]))
        if band is None:
            free = [nid for nid in ready if nid not in region]
            now = set(ready)
            openable = [region[nid] for nid in ready if nid in region and exits.get(region[nid], set()) <= now]
            if openable and (not free or (region.get(ready[0]) in openable and not any(height[f] == 0 for f in free))):
                # (leaves ready first: they belong right above what they feed, not above the region)
                band = openable[0] if region.get(ready[0]) not in openable else region[ready[0]]
            elif not free and ready:  # (a cycle through the region) open it anyway
                band = region[ready[0]]
        if band is not None and left.get(band, 0) == 0:  # the region is placed: its title's row
            titles[band] = row
            band = None
            row += 1
            continue
        pool = [nid for nid in ready if (region.get(nid) == band if band is not None else nid not in region)]
        if band is not None and pool:  # a region's rows: one height each, the lowest first (a grid)
            low = min(height[nid] for nid in pool)
            pool = [nid for nid in pool if height[nid] == low]
        if not pool:  # a cycle (collapsed boxes can make one): take the node closest to ready
            stuck = [nid for nid in order if nid not in level and nid not in ready]
            stuck = [nid for nid in stuck if region.get(nid) == band] or stuck
            if not stuck:
                band = None
                continue
            ready.append(min(stuck, key=lambda nid: (waiting[nid], -order[nid])))
            continue
        # edges from below up to what is not placed yet pass through this row: each takes a gap
        used, placed = -GAP + GAP * (passing - sum(into.get(nid, 0) for nid in pool)), []
        for nid in pool:
            w = width[nid] + GAP
            if not placed or used + w <= budget or (row == 0 and nid in bottom):
                placed.append(nid)
                used += w
        if band is not None:
            bands.add(row)
        taken = set(placed)
        ready = [nid for nid in ready if nid not in taken]
        for nid in placed:
            level[nid] = row
            passing -= into.pop(nid, 0)
            if nid in region:
                left[region[nid]] -= 1
            for p in preds[nid]:
                into[p] = into.get(p, 0) + 1
                passing += 1
                if p in waiting:
                    waiting[p] -= 1
                    if waiting[p] == 0 and p not in level and p not in ready:
                        ready.append(p)
        row += 1
    return level, titles, bands


@st.composite
def stages(draw):
    """One stage of a picture: nodes in forward order, each feeding later ones (or, in a fan, most
    of them the root), now and then an earlier one (collapsed boxes can close a cycle) or a node
    of a later stage; some in no_grad regions; the root at the bottom; widths as node_width
    gives them; a row budget."""
    n = draw(st.integers(1, 40))
    ids = [f"n{k}" for k in range(n)]
    regions = [None] * n
    how = draw(st.sampled_from(["none", "spans", "scattered"]))
    if how == "spans":  # (a no_grad block: an optimizer's step, a metric)
        for name in ("r1", "r2")[: draw(st.integers(1, 2))]:
            a = draw(st.integers(0, n - 1))
            for k in range(a, min(n, a + draw(st.integers(1, 6)))):
                regions[k] = name
    elif how == "scattered":
        regions = draw(st.lists(st.sampled_from([None, None, None, "r1", "r2"]), min_size=n, max_size=n))
    ranks = [None] * n
    ranks[-1] = "max"
    if n > 2 and draw(st.booleans()):
        ranks[draw(st.integers(0, n - 2))] = draw(st.sampled_from(["max", "min"]))
    members = [SimpleNamespace(id=i, region=r, rank=k) for i, r, k in zip(ids, regions, ranks)]
    succs = {i: set() for i in ids}
    preds = {i: set() for i in ids}
    fan = draw(st.booleans())  # (many leaves feeding one op, as a model's parameters or a loop's inputs do)
    for k in range(n - 1):
        for j in {n - 1} if fan and k % 4 else draw(st.sets(st.integers(k + 1, n - 1), max_size=3)):
            succs[ids[k]].add(ids[j])
            preds[ids[j]].add(ids[k])
    for k in draw(st.sets(st.integers(0, n - 1), max_size=3)):
        succs[ids[k]].add(f"later{k}")  # (fed to a later stage: drawn below)
    for _ in range(draw(st.integers(0, 2)) if n > 1 else 0):
        a, b = sorted(draw(st.lists(st.integers(0, n - 1), min_size=2, max_size=2, unique=True)))
        succs[ids[b]].add(ids[a])
        preds[ids[a]].add(ids[b])
    narrow = draw(st.sampled_from([54.0, 54.0, 71.5]))  # (node_width gives 54 points at least)
    width = {i: draw(st.one_of(st.just(narrow), st.floats(54.0, 300.0, allow_nan=False))) for i in ids}
    budget = draw(st.one_of(st.sampled_from([300.0, 800.0]), st.floats(100.0, 1600.0, allow_nan=False)))
    return members, succs, preds, width, budget


def _stage(spec, regions=None, budget=300.0):
    """A stage from ``{node: nodes it feeds}`` in forward order (the last is the root)."""
    ids = list(spec)
    regions = regions or {}
    members = [SimpleNamespace(id=i, region=regions.get(i), rank="max" if i == ids[-1] else None) for i in ids]
    succs = {i: set(spec[i]) for i in ids}
    preds = {i: {j for j in ids if i in spec[j]} for i in ids}
    return members, succs, preds, {i: 54.0 for i in ids}, budget


# a region ready beside a chain outside it that holds no leaf: the chain's node comes first
REGION_BESIDE_A_CHAIN = _stage({"d": ["c"], "c": ["b"], "b": ["root"], "a": ["root"], "root": []}, {"a": "r1"})


@example(REGION_BESIDE_A_CHAIN)
@given(stages())
def test_the_rows_of_a_stage_are_the_plain_planners_rows(stage):
    """Every node, region title and region row lands where the plain planner puts it, in the same order."""
    got = rows._stage_rows(*stage)
    want = _plain_stage_rows(*stage)
    assert got == want
    assert list(got[0].items()) == list(want[0].items()) and list(got[1].items()) == list(want[1].items())


def test_a_stage_keeping_hundreds_of_nodes_ready_is_planned_as_the_plain_planner_plans_it():
    """An unrolled loop's inputs wait for hundreds of rows (what made the plain planner quadratic): same rows."""
    n = 600
    ids = [f"n{k}" for k in range(n)]
    members = [SimpleNamespace(id=i, region=None, rank="max" if k == n - 1 else None) for k, i in enumerate(ids)]
    succs = {i: set() for i in ids}
    preds = {i: set() for i in ids}
    spine = [k for k in range(n) if k % 3 != 0]
    for a, b in zip(spine, spine[1:]):
        succs[ids[a]].add(ids[b])
        preds[ids[b]].add(ids[a])
    for k in range(0, n, 3):  # (a leaf per step, feeding the step's op)
        j = min(k + 1, n - 1)
        succs[ids[k]].add(ids[j])
        preds[ids[j]].add(ids[k])
    width = {i: 54.0 + 20 * (k % 4) for k, i in enumerate(ids)}
    got = rows._stage_rows(members, succs, preds, width, 300.0)
    assert got == _plain_stage_rows(members, succs, preds, width, 300.0)
    assert max(got[0].values()) > 100 and GAP > 0
