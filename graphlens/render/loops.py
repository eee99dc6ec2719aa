"""Loops drawn once: the body of a loop a trace saw run many times, a snapshot's repeating stretch, "× N"."""

from __future__ import annotations

from bisect import bisect_right
from typing import Collection, Mapping

import numpy as np

from ..graph import Graph
from .modules import REPEAT, _alike_runs, _internal, _region_sizes, fold, longest_ways, updated_in_place
from .scene import Edge, Node

__all__ = ["fold_loops", "fold_structure", "MAX_LOOPS"]


#: How many loops one picture looks for at most (each in what the ones before left).
MAX_LOOPS = 8


def fold_loops(graph: Graph, nodes: list[Node], edges: list[Edge], *, minimum: int = 3,
               budget: int | None = None, updates: Collection[tuple[str, str]] | None = None) -> tuple[list[Node], list[Edge]]:
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
    loop is looked for in the ops left (a program with two loops), up to :data:`MAX_LOOPS`.
    ``updates``: :func:`~graphlens.render.modules.updated_in_place` of ``graph``, when the caller
    has it already."""
    ops = [op for op in graph.ops if op.forward is not None]
    if len(ops) < 2 * minimum:
        return nodes, edges
    return _fold_sequence(graph, nodes, edges, ops, [(op.at_block, op.forward, op.line if op.block_line is not None else None) for op in ops],
                          minimum, budget, _LOOP_WORDS, updated_in_place(graph) if updates is None else updates)


def fold_structure(graph: Graph, nodes: list[Node], edges: list[Edge], *, minimum: int = 3,
                   budget: int | None = None) -> tuple[list[Node], list[Edge]]:
    """:func:`fold_loops` for a graph that knows no forward calls or lines (a snapshot): its
    backward nodes are put in the order of their longest way down to a leaf (the order the
    forward pass could have made them: an unrolled cell's nodes, one step after the other) and
    a stretch where one pattern of node names repeats is folded the same way: only where the
    repeats are the same graph, node for node and edge for edge, which is what the frame says."""
    ops = [op for op in graph.ops if not op.is_accumulate_grad]
    if len(ops) < 2 * minimum:
        return nodes, edges
    down = _down_heights(graph)
    place = {op.id: k for k, op in enumerate(graph.ops)}
    ops.sort(key=lambda op: (down[op.id], place[op.id]))
    names = [op.name for op in ops]
    out = _fold_sequence(graph, nodes, edges, ops, list(names), minimum, budget, _STRETCH_WORDS)
    if budget is None or len(out[0]) <= budget:
        return out
    longest = _periodic(names, minimum)
    # (still too large: the nodes in the order of their longest way up from a root instead, ties in
    # the walk's order.  Where each step joins the one before and a side input of its own, a sum
    # over many terms, the steps are then one after the other (by the way down, every term's
    # product has the same height and they come first, all together); folded only where a
    # longer stretch repeats in that order, and kept if it draws fewer)
    up = longest_ways([op.id for op in graph.ops], graph.adjacency.next)
    ops.sort(key=lambda op: (-up[op.id], place[op.id]))
    names = [op.name for op in ops]
    found = _periodic(names, minimum)
    if found[1] * found[2] <= longest[1] * longest[2]:
        return out
    other = _fold_sequence(graph, nodes, edges, ops, names, minimum, budget, _STRETCH_WORDS)
    return other if len(other[0]) < len(out[0]) else out


#: How a folded stretch is titled: what it is, and what its repeats are called.
_LOOP_WORDS = ("a loop", "iterations", "iteration")
_STRETCH_WORDS = ("a repeating stretch of the graph", "repeats", "repeat")
_NESTING_WORDS = ("a repeating stretch with a loop inside", "runs", "run")


def _down_heights(graph: Graph) -> dict[str, int]:
    """Each op's longest way down ``next`` edges (0: it leads to no op)."""
    children, parents = graph.adjacency.next, graph.adjacency.prev
    waiting = {op.id: len(parents.get(op.id, ())) for op in graph.ops}
    ready = [op.id for op in graph.ops if not waiting[op.id]]
    order = []
    while ready:
        x = ready.pop()
        order.append(x)
        for c in children.get(x, ()):
            waiting[c] -= 1
            if not waiting[c]:
                ready.append(c)
    height: dict[str, int] = {}
    for x in reversed(order):
        height[x] = 1 + max((height[c] for c in children.get(x, ()) if c in height), default=-1)
    for op in graph.ops:  # (none is left out in a graph without cycles; a read one might have them)
        height.setdefault(op.id, 0)
    return height


def _fold_sequence(graph: Graph, nodes: list[Node], edges: list[Edge], ops: list, seq: list, minimum: int,
                   budget: int | None, words: tuple[str, str, str],
                   updates: Collection[tuple[str, str]] = frozenset()) -> tuple[list[Node], list[Edge]]:
    """The search of :func:`fold_loops` on ``seq`` (what to compare of each of ``ops``, in order).

    A body that holds a loop of its own (a training loop's epochs, each running over the
    batches; a loop that evaluates every tenth step) is folded first; the loop inside is then
    looked for in what is drawn of it, and folds in a frame inside the body's frame."""
    folded = 0  # (the runs drawn so far: each run's frame is numbered on from them)
    hidden: set = set()  # (the ops of the iterations folded into a body that holds a loop)
    below = None
    tried: dict = {}  # below -> attempt(below), until the sequence changes
    made: list = []

    def ends() -> set:  # (the ops that made a root a backward ran from, read once)
        if not made:
            made.append({t.op for t in graph.roots if t.op is not None})
        return made[0]

    def attempt(below: int | None) -> _Attempt | None:
        if below not in tried:
            tried[below] = _attempt(below)
        return tried[below]

    def _attempt(below: int | None) -> _Attempt | None:
        start, period, repeats = _periodic(seq, minimum, below)
        if repeats < minimum:
            return None
        found = period
        pattern = seq[start:start + period]
        for q in range(1, period):  # (a body of one call, h, c = cell(x, (h, c)), repeats in pairs too: count its own runs)
            if period % q == 0 and pattern == pattern[:q] * (period // q):
                period, repeats = q, repeats * (period // q)
                break
        if period == 1 and words is _STRETCH_WORDS:  # (a snapshot's run of one op: a chain, drawn as one node
            return _Attempt(start, repeats)  # by the chains' own step; the search goes on past it)
        said = words
        nests = budget is not None and words is _LOOP_WORDS and period == found and _holds_loop(pattern, ops[start:start + period], minimum, ends())
        if nests:  # (an outer loop, or a loop that does more every k-th step: the lines cannot tell)
            said = _NESTING_WORDS

        def fold_at(start: int, repeats: int) -> _Attempt:
            stretches = [(start, repeats)] if budget is None else _occurrences(seq, seq[start:start + period], minimum)
            return _Attempt(start, repeats, found, period, stretches, nests,
                            *_fold_stretches(graph, nodes, edges, ops, stretches, period, minimum, folded, said, hidden, updates))

        if words is not _LOOP_WORDS:
            return fold_at(start, repeats)
        # Each iteration starts where the body does, read from the block's lines; where some calls
        # keep a line of their own (made in a function the block called: the closure an optimizer
        # calls back, a module's forward), the place their lines give is tried too, and the one
        # that draws fewer nodes is kept (the block's on a tie).
        places = [_aligned(seq, start, period, repeats, minimum)]
        if any(len(item) > 2 and item[2] is not None for item in pattern):
            own = [(item[2], item[1], item[2]) if len(item) > 2 and item[2] is not None else item for item in seq]
            other = _aligned(own, start, period, repeats, minimum)
            if other != places[0]:
                places.append(other)
        return min((fold_at(*place) for place in places), key=lambda a: len(a.nodes))

    for _ in range(MAX_LOOPS if budget is not None else 1):
        best = attempt(below)
        if best is None:
            break
        if best.found is None:  # (a chain: taken out of the search)
            seq[best.start:best.start + best.repeats] = [(None, k) for k in range(best.start, best.start + best.repeats)]
            tried.clear()
            continue
        if budget is not None and len(best.nodes) > budget and best.found > 2 and not (best.nests and best.runs):
            shorter = attempt(best.found)  # (a shorter loop inside: one step, where every tenth differs)
            if shorter is not None and shorter.found is not None and shorter.runs and len(shorter.nodes) < len(best.nodes):
                best = shorter
        nodes, edges = best.nodes, best.edges
        folded += best.runs
        if budget is None or len(nodes) <= budget:
            break
        if not best.runs:  # (no two iterations alike: look for a shorter loop inside)
            below = best.found
            continue
        below = None
        tried.clear()
        period = best.period
        # (taken: each item now stands for itself alone, matching nothing; where the body holds a
        # loop, the iterations drawn stay, for the loop inside them to be found next)
        for start in (best.away if best.nests else [s + k * period for s, r in best.stretches for k in range(r)]):
            seq[start:start + period] = [(None, k) for k in range(start, start + period)]
            if best.nests:
                hidden.update(op.id for op in ops[start:start + period])
    return nodes, edges


class _Attempt:
    """One search's outcome: a loop's stretch (``start``, ``repeats``) and, unless it is a
    snapshot's chain (``found`` None), the period found, the body's ``period``, every stretch
    where it repeats, whether the body holds a loop of its own (``nests``), the picture folded,
    how many runs folded and the first item of each iteration folded away (``away``)."""

    __slots__ = ("start", "repeats", "found", "period", "stretches", "nests", "nodes", "edges", "runs", "away")

    def __init__(self, start: int, repeats: int, found: int | None = None, period: int = 0, stretches: list | None = None,
                 nests: bool = False, nodes: list | None = None, edges: list | None = None, runs: int = 0, away: list | None = None) -> None:
        self.start, self.repeats, self.found, self.period, self.stretches = start, repeats, found, period, stretches or []
        self.nests, self.nodes, self.edges, self.runs, self.away = nests, nodes or [], edges or [], runs, away or []


def _holds_loop(pattern: list, body: list, minimum: int, ends: set) -> bool:
    """Whether a loop's body (items ``(line, op)``, made by the ops ``body``) holds a loop of
    its own: a pattern that repeats ``minimum`` times or more and makes up half the body or
    more, written on several of the user's lines or running a backward in each repeat (each
    makes a root, of ``ends``), not all under ``no_grad``: a training loop's epochs, each over
    the batches; the steps between two evaluations.  Not what one call repeats inside it (an
    optimizer's update, parameter after parameter; the layers of a model), which is on one line
    and runs no backward."""
    if len(pattern) < 2 * minimum:
        return False
    start, period, repeats = _periodic(pattern, minimum)
    if repeats < minimum or 2 * period * repeats < len(pattern):
        return False
    if all(op.region is not None for op in body[start:start + period]):
        return False  # (all under no_grad: an optimizer's own loop over its parameters)
    if len({item[2] if len(item) > 2 and item[2] is not None else item[0] for item in pattern[start:start + period]}) > 1:  # (a call's own line counts)
        return True
    return all(any(op.id in ends for op in body[k:k + period]) for k in range(start, start + period * repeats, period))


def _aligned(seq: list, start: int, period: int, repeats: int, minimum: int) -> tuple[int, int]:
    """``(start, repeats)`` of a loop's stretch (items ``(line, op)``) moved so that each
    iteration starts where the loop's body does: at the pattern's lowest line, where the lines
    go back up to it (the jump back to the body's top).  The search finds the stretch that
    covers most, which can start inside the body (a training loop whose first step differs:
    the stretch starts at that step's optimizer update), and an iteration cut there splits the
    body's ``no_grad`` step between two frames, where it matches no other.  Moved back when
    the items before the stretch hold the body's start, else on (one repeat fewer, unless the
    items after it complete the last); left where the lines tell nothing (one line each) or
    too few repeats would be left."""
    lines = [item[0] for item in seq[start:start + period]]
    if None in lines:
        return start, repeats
    low = min(lines)
    turn = next((k for k in range(period) if lines[k] == low and lines[k - 1] > low), 0)
    if turn == 0:
        return start, repeats
    back = period - turn
    if start >= back and seq[start - back:start] == seq[start + turn:start + period]:
        return start - back, repeats
    end = start + period * repeats
    if seq[end:end + turn] == seq[start:start + turn]:
        return start + turn, repeats
    return (start + turn, repeats - 1) if repeats - 1 >= minimum else (start, repeats)


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
                    period: int, minimum: int, folded: int, words: tuple[str, str, str] = _LOOP_WORDS,
                    hidden: set | frozenset = frozenset(),
                    updates: Collection[tuple[str, str]] = frozenset()) -> tuple[list[Node], list[Edge], int, list[int]]:
    """:func:`fold_loops` for the ``stretches`` (``(start, repeats)`` in the forward ``ops``) where
    one pattern of ``period`` ops repeats; the frames it draws are numbered from ``folded + 1``.
    ``hidden``: the ops of iterations folded before into a body that holds this loop; ``updates``: see
    :func:`~graphlens.render.modules.updated_in_place`.
    Returns the picture, how many runs it folded and the first item of each iteration folded away."""
    iteration: dict[str, int] = {}
    bases: list[int] = []  # (each stretch's first iteration number: a gap between stretches keeps their runs apart)
    # (how many iterations of the same loop ran before each stretch)
    before = _iterations_before(ops, stretches, period) if words is _LOOP_WORDS else [0] * len(stretches)
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
    # A variable or parameter no op made that only one iteration uses goes with it where
    # several iterations have such, alike (a batch the loop takes, each layer's own weight; in
    # the function view its AccumulateGrad too); where one alone has one (the loop's first
    # input, the parameters before the first update), it stays outside, as what the loop
    # starts from.  So does each slice the loop steps through (``for x in xs``: one of the many
    # outputs of an ``unbind`` or ``split`` made before the loop, each used by one iteration).
    outputs: dict[str, int] = {}
    for op in made_by.values():
        outputs[op] = outputs.get(op, 0) + 1
    own: dict[str, int] = {}
    kinds: dict[tuple, set[int]] = {}  # (parameter or not, shape, dtype) -> the iterations with such
    kind_of: dict[str, tuple] = {}
    # (an optimizer's update of a parameter in a training step does not keep it from the one iteration
    # that used it with grad on, each block's own weight: see modules.updated_in_place)
    for t in graph.tensors:
        if (t.id in kept) if t.op is None else (outputs[t.op] > 1 and t.op not in iteration):
            users = {iteration.get(c) for c in consumers.get(t.id, ()) if c not in hidden and (t.id, c) not in updates}
            if hidden and len(users) > 1 and None not in users:
                # (a loop inside a body drawn for many: the batch each of its steps takes, in every
                # run of the body, goes with that step where the body is drawn, its first stretch)
                steps = {u - bases[bisect_right(bases, u) - 1] for u in users}
                if max(steps) - min(steps) <= 1:
                    users = {min(users), min(users) + max(steps) - min(steps)}
            if users and None not in users and max(users) - min(users) <= 1:
                own[t.id] = min(users)  # (or the next one too: the target also fed in next, teacher forcing)
                kind_of[t.id] = (t.is_parameter, t.shape, t.dtype)
                kinds.setdefault(kind_of[t.id], set()).add(own[t.id])
    own = {t: i for t, i in own.items() if len(kinds[kind_of[t]]) > 1}
    for op in graph.ops:
        if op.is_accumulate_grad and op.variable in own and op.id not in iteration:
            iteration[op.id] = own[op.variable]
    between: dict[str, int] | None = None
    read = {t.id for t in graph.tensors if t.op is None and t.id not in kept and t.id not in own}
    # (such a leaf, unnamed, that one iteration alone reads goes with it, below: in the function
    # view its AccumulateGrad goes with it too, not drawn once per iteration beside the loop)
    for op in graph.ops:
        if op.is_accumulate_grad and op.id not in iteration and op.variable in read:
            users = {iteration.get(c) for c in consumers.get(op.variable, ())}
            if len(users) == 1 and None not in users:
                iteration[op.id] = users.pop()
    blocks: dict[int, list[Node]] = {}
    for n in nodes:
        i = iteration.get(n.id)
        if i is None and n.kind == "tensor":
            op = made_by.get(n.id)
            if op is not None:
                i = iteration.get(op)
                if i is None:
                    i = own.get(n.id)
            elif n.id in kept:
                i = own.get(n.id)
            else:  # (made by no recorded call, torch.randn(...) in the loop: the input of one iteration)
                users = {iteration.get(c) for c in consumers.get(n.id, ())}
                i = users.pop() if len(users) == 1 else None
                if i is None and not users:
                    if between is None:
                        between = _made_between(graph, iteration, made_by)
                    i = between.get(n.id)
        if i is None and n.kind in ("box", "chain"):  # one iteration's call of a submodule
            # (an unnamed tensor no op made inside it is something it read: an optimizer step's .grad)
            # (a member that is no tensor or op of the graph, a submodule's box drawn inside a no_grad
            # step's box, says nothing: its own members are the box's too)
            # (a parameter inside it that only this iteration uses, each block's own weight, goes with it)
            seen = {iteration.get(m, iteration.get(made_by.get(m), own.get(m))) for m in n.members if m not in read and m in graph}
            if n.region and n.region.startswith(REPEAT):  # (inside a body drawn for many: it stands for calls
                seen.discard(None)  # of the iterations folded into it too, which are in no stretch now)
            i = seen.pop() if len(seen) == 1 else None
        if i is not None:
            blocks.setdefault(i, []).append(n)
    internal = _internal(edges)
    runs = []
    first = stretches[0][0]
    lines = sorted({op.at_block for op in ops[first:first + period] if op.at_block is not None})
    where = f" (line {lines[0]})" if len(lines) == 1 else f" (lines {lines[0]}–{lines[-1]})" if lines else ""
    what, many, one = words
    if words is not _STRETCH_WORDS and not where:
        where = " (one stretch)"
    # (an iteration drawn without an op, its ops inside a box that spans several, e.g. an
    # optimizer's update drawn as one box: only the tensors it read are left, no loop body)
    blocks = {i: b for i, b in blocks.items() if any(n.kind != "tensor" for n in b)}
    slices = {t for t in own if made_by.get(t) is not None}
    away = []  # (the first item of each iteration folded into another)
    for run in _alike_runs(blocks, 0, internal, minimum, _region_sizes(nodes), slices):
        k = bisect_right(bases, run[0]) - 1  # (iterations counted from 1 in each loop)
        a, b = run[0] - bases[k] + 1 + before[k], run[-1] - bases[k] + 1 + before[k]
        runs.append(([blocks[i] for i in run], f"{what}{where}, {many} {a} … {b}", f"{one} {a}"))
        away.extend(stretches[k][0] + (i - bases[k]) * period for i in run[1:])
    return (*fold(nodes, edges, runs, number=folded + 1), len(runs), away)


def _iterations_before(ops: list, stretches: list[tuple[int, int]], period: int) -> list[int]:
    """How many iterations of a loop ran before each of its ``stretches`` (a first step that
    differs: an optimizer making its state, an evaluation every tenth step): the times the
    body starts again in the ops before it, back to one on a line above the body's (what ran
    before the loop), counted in one pass.  A body written on several lines starts again
    where its lowest line does; one on a single line, where its whole pattern comes again.
    All 0 where the lines tell nothing."""
    start = stretches[0][0]
    lines = [op.at_block for op in ops[start:start + period]]
    if None in lines:
        return [0] * len(stretches)
    low = min(lines)
    one = low == max(lines)
    pattern = [op.forward for op in ops[start:start + period]]
    out = []
    count, k, previous = 0, 0, None
    for start, repeats in stretches:
        while k < start:
            line = ops[k].at_block
            if line is None or line < low:
                count, previous = 0, line
                k += 1
            elif one:
                if k + period <= start and line == low and [op.forward for op in ops[k:k + period]] == pattern:
                    count += 1
                    k += period
                else:
                    k += 1
                previous = None
            else:
                if line == low and previous != low:
                    count += 1
                previous = line
                k += 1
        out.append(count)
        count += repeats
        k = start + period * repeats
        previous = ops[k - 1].at_block
    return out


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
    longest = min(n // minimum, max(2, 4_000_000 // max(n, 1)))
    if below is not None:  # (only patterns shorter than ``below``)
        longest = min(longest, below - 1)
    if longest < 2:
        return (0, 1, 0)
    codes: dict = {}
    items = np.fromiter((codes.setdefault(x, len(codes)) for x in seq), dtype=np.int64, count=n)
    # A stretch repeating a pattern of p items holds a run of places where an item equals the one p
    # further on, at least (minimum - 1) * p long, and covers at most that run plus p items: a period
    # whose places that match are fewer cannot give a stretch, and one whose matches plus p are
    # fewer than the best stretch found cannot beat it.  The periods are searched from the most
    # they could cover down, each period's runs found exactly, until none left can beat the best.
    counts = _matches(items, longest)
    periods = np.arange(2, longest + 1)
    bound = np.where(counts >= (minimum - 1) * periods, counts + periods, 0)
    best = (0, 1, 0)
    cover = 0
    for r in np.lexsort((periods, -bound)):  # (the most first; the shorter period first on ties)
        most, p = int(bound[r]), int(periods[r])
        if most <= 0 or most < cover or (most == cover and p > best[1]):
            break  # (none after it can beat, or tie with a shorter period)
        m = n - p
        # the runs of items equal to the one p further on: between the places where they differ
        ends = np.concatenate(([-1], np.flatnonzero(items[:m] != items[p:]), [m]))
        runs = np.diff(ends) - 1
        repeats = (runs + p) // p
        covers = np.where(repeats >= minimum, repeats * p, 0)
        k = int(np.argmax(covers))  # (the first of the best)
        c = int(covers[k])
        if c > cover or (c == cover and c > 0 and p < best[1]):
            best, cover = (int(ends[k]) + 1, p, int(repeats[k])), c
    return best


#: At most this many (period, place) comparisons are made by one numpy call in :func:`_matches`.
_CHUNK_CELLS = 1_000_000


def _matches(items: np.ndarray, longest: int) -> np.ndarray:
    """For each period p from 2 to ``longest``, how many places i hold the item at i + p."""
    n = len(items)
    m = n - 1  # (the places compared: row p's places from n - p on meet the padding, which matches nothing)
    padded = np.concatenate((items, np.full(longest + 1, -1, dtype=items.dtype)))
    counts = np.empty(longest - 1, dtype=np.int64)
    rows = max(1, _CHUNK_CELLS // max(m, 1))
    for a in range(2, longest + 1, rows):
        b = min(longest + 1, a + rows)
        window = np.lib.stride_tricks.sliding_window_view(padded[a:b - 1 + m], m)
        counts[a - 2:b - 2] = np.count_nonzero(window == items[:m], axis=1)
    return counts
