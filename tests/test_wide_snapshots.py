"""A snapshot of a wide program (a sum over many terms, a stack of many products, a gradient
taken with ``create_graph``) is drawn folded where its picture would not fit: a repeating
stretch found in the order of each node's way up from the root, alike ops side by side as one
node; a picture that fits is drawn as it is."""

from __future__ import annotations

import re

import torch

import graphlens as gl
from graphlens.render import to_dot
from graphlens.render.draw import build_scene
from graphlens.render.style import MAX_NODES

from traced_loops import node_count


def _sum_of_terms(n: int) -> gl.Graph:
    ws = [torch.randn(3, requires_grad=True) for _ in range(n)]
    x = torch.randn(3)
    total = sum(w * x for w in ws).sum()
    return gl.snapshot(total)


def _stack_of_products(n: int) -> gl.Graph:
    x = torch.randn(3, requires_grad=True)
    loss = torch.stack([x * float(i) for i in range(n)]).sum()
    return gl.snapshot(loss)


def _double_backward(n: int) -> gl.Graph:
    x = torch.randn(3, requires_grad=True)
    y = x
    for _ in range(n):
        y = torch.sin(y) * 1.01
    (g,) = torch.autograd.grad(y.sum(), x, create_graph=True)
    return gl.snapshot(g.pow(2).sum())


def test_a_sum_over_many_terms_folds_into_one_stretch():
    """``sum(w * x for w in ws)`` over 300 leaves (903 nodes flat, more than Graphviz lays out in
    10 s) is one stretch drawn once: a leaf, its product and the add, "× 300", in a handful of nodes."""
    source = to_dot(_sum_of_terms(300)).source
    assert node_count(source) < 15
    assert "× 300: a repeating stretch of the graph, repeats 1 … 300" in source
    assert source.count("MulBackward0") == 1 and source.count("AddBackward0") == 1


def test_the_folded_sum_grows_with_nothing():
    """The same program at 150 and 300 terms draws the same nodes, only the count differs."""
    a, b = to_dot(_sum_of_terms(150)).source, to_dot(_sum_of_terms(300)).source
    assert node_count(a) == node_count(b)
    assert "× 150:" in a and "× 300:" in b


def test_alike_products_side_by_side_are_one_node():
    """``torch.stack([x * i for i in range(500)])`` draws the 500 products as one node that says
    how many, with one edge from ``x`` into it and one out of it into the stack."""
    g = _stack_of_products(500)
    _, nodes, edges, _, _ = build_scene(g, "data", "forward", True, True, True, False, None, 16, 4, MAX_NODES, None)
    (fan,) = [n for n in nodes if n.id.startswith("fan_")]
    muls = {op.id for op in g.ops if op.name == "MulBackward0"}
    assert len(muls) == 500 and set(fan.members) == muls
    assert "MulBackward0 <B>×500</B>" in fan.label and "500 alike ops side by side" in fan.label
    (x,) = [t.id for t in g.leaves]
    stack = next(op.id for op in g.ops if op.name == "StackBackward0")
    assert [(e.src, e.dst) for e in edges if fan.id in (e.src, e.dst)] == [(x, fan.id), (fan.id, stack)]
    assert len(nodes) < 10
    assert "alike ops side by side" in to_dot(g).source  # (the legend says what the node is)


def test_a_picture_that_fits_is_not_folded_side_by_side():
    """Below ``max_nodes`` the products are drawn one by one, as before; above a smaller
    ``max_nodes`` the same picture folds them."""
    g = _stack_of_products(40)
    assert to_dot(g).source.count("MulBackward0") == 40
    assert "×40" in to_dot(g, max_nodes=20).source


def test_strands_each_from_a_leaf_of_its_own_are_one_node():
    """Products of 200 alike leaves, each ``w`` read by its product alone, are one node (the leaves
    and products it stands for, one edge out into the stack): it was 404 nodes, 12,000 px wide, 3.6 s
    of Graphviz's layout."""
    ws = [torch.randn(2, requires_grad=True) for _ in range(200)]
    g = gl.snapshot(torch.stack([w * 2.0 for w in ws]).sum())
    _, nodes, edges, _, _ = build_scene(g, "data", "forward", True, True, True, False, None, 16, 4, MAX_NODES, None)
    (fan,) = [n for n in nodes if n.id.startswith("fan_")]
    muls = {op.id for op in g.ops if op.name == "MulBackward0"}
    assert set(fan.members) == muls | {t.id for t in g.leaves} and len(muls) == 200
    assert "MulBackward0 <B>×200</B>" in fan.label and "each from its own leaf" in fan.label
    stack = next(op.id for op in g.ops if op.name == "StackBackward0")
    assert [(e.src, e.dst) for e in edges if fan.id in (e.src, e.dst)] == [(fan.id, stack)]
    assert len(nodes) < 10


def test_strands_from_leaves_read_elsewhere_are_not_alike():
    """Products of different leaves that something else reads too (each ``w`` also in a second
    sum) are not one fan: a fan stands for strands that run between the same two nodes, or that
    each begin at a leaf nothing else reads."""
    ws = [torch.randn(2, requires_grad=True) for _ in range(200)]
    g = gl.snapshot(torch.stack([w * 2.0 for w in ws]).sum() + torch.stack([w.sum() for w in ws]).sum())
    assert "each from its own leaf" not in to_dot(g).source


def test_alike_leaves_alone_are_one_node():
    """``torch.stack(ws)`` over 300 leaves draws them as one node naming the first and the last,
    with their shape, how many, and one edge into the stack; the legend says what it is."""
    ws = [torch.randn(3, requires_grad=True) for _ in range(300)]
    g = gl.snapshot(torch.stack(ws).pow(2).sum())
    _, nodes, edges, _, _ = build_scene(g, "data", "forward", True, True, True, False, None, 16, 4, MAX_NODES, None)
    (fan,) = [n for n in nodes if n.id.startswith("fan_")]
    assert set(fan.members) == {t.id for t in g.leaves} and len(fan.members) == 300
    assert "×300" in fan.label and "300 alike leaves requiring grad, shape [3], float32" in fan.label
    stack = next(op.id for op in g.ops if op.name == "StackBackward0")
    assert [(e.src, e.dst) for e in edges if fan.id in (e.src, e.dst)] == [(fan.id, stack)]
    assert "alike leaves side by side" in to_dot(g).source
    fn = to_dot(g, view="function").source  # (each leaf above its AccumulateGrad: one strand each)
    assert "AccumulateGrad <B>×300</B>" in fn and node_count(fn) < 10


def test_strands_from_two_leaves_of_their_own_are_one_node():
    """``torch.stack([x * y for x, y in zip(xs, ys)])`` over 200 pairs of leaves (604 nodes flat,
    10 s of Graphviz's layout at 100 pairs) is one node standing for every leaf and product, in both
    views; a stack of 200 leaves beside it is still one node of its own."""
    xs = [torch.randn(3, requires_grad=True) for _ in range(200)]
    ys = [torch.randn(3, requires_grad=True) for _ in range(200)]
    g = gl.snapshot(torch.stack([x * y for x, y in zip(xs, ys)]).sum())
    _, nodes, edges, _, _ = build_scene(g, "data", "forward", True, True, True, False, None, 16, 4, MAX_NODES, None)
    (fan,) = [n for n in nodes if n.id.startswith("fan_")]
    muls = {op.id for op in g.ops if op.name == "MulBackward0"}
    assert set(fan.members) == muls | {t.id for t in g.leaves} and len(fan.members) == 600
    assert "MulBackward0 <B>×200</B>" in fan.label and "each from 2 leaves of its own" in fan.label
    assert len(nodes) < 10
    fn = to_dot(g, view="function").source
    assert "(AccumulateGrad, AccumulateGrad, MulBackward0) <B>×200</B>" in fn and node_count(fn) < 10


def test_an_op_gathering_all_the_leaves_leaves_them_alike():
    """An op that reads many leaves of their own (the stack itself) is not one strand: its leaves
    are the alike ones, one node, and the stack stays drawn."""
    ws = [torch.randn(3, requires_grad=True) for _ in range(300)]
    source = to_dot(gl.snapshot(torch.stack(ws).sum())).source
    assert "×300" in source and "StackBackward0" in source and node_count(source) < 10


def test_leaves_of_two_shapes_are_two_fans():
    """Leaves are alike when their shape, dtype and flags are: 150 of shape [2] and 150 of shape [3]
    feeding one cat are two nodes, each naming its own."""
    ws = [torch.randn(2 + i % 2, requires_grad=True) for i in range(300)]
    g = gl.snapshot(torch.cat(ws).sum())
    source = to_dot(g).source
    assert source.count("×150") == 2
    assert "shape [2]" in source and "shape [3]" in source


def test_a_marked_node_stays_out_of_a_fan():
    """A highlighted product is drawn on its own; the others still fold."""
    g = _stack_of_products(300)
    one = next(op.id for op in g.ops if op.name == "MulBackward0")
    source = to_dot(g, highlight={one}).source
    assert re.search(rf"^\s*{one} \[", source, re.M)
    assert "×299" in source


def test_a_gradient_taken_with_create_graph_folds_both_chains():
    """The graph of a gradient of a 150-step chain (312 nodes flat, more than Graphviz lays out in
    10 s) draws the forward steps and their derivatives each once: two stretches, within max_nodes."""
    source = to_dot(_double_backward(150)).source
    assert node_count(source) < 30
    assert len(re.findall(r"× 14\d: a repeating stretch of the graph", source)) == 2


def test_a_wide_picture_is_the_same_from_json_read_back():
    """The folds read the graph alone: a snapshot written to JSON and read back draws the same bytes."""
    for g in (_sum_of_terms(200), _stack_of_products(300)):
        again = gl.Graph.from_json(g.to_json())
        assert to_dot(again).source == to_dot(g).source


class _Heads(torch.nn.Module):
    """Many small heads applied side by side to one input, their outputs joined."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.heads = torch.nn.ModuleList(torch.nn.Linear(4, 2) for _ in range(n))

    def forward(self, x):
        return torch.cat([h(x) for h in self.heads], dim=-1)


def test_heads_side_by_side_open_at_the_level_where_they_fold():
    """A model of 120 heads side by side does not fit at its own level (each head's call is a run
    of its own: 120 boxes); the search goes on to the heads' level, where the alike numbered
    blocks fold into one: "model.heads.0 … model.heads.119, × 120"."""
    model = _Heads(120)
    g = gl.snapshot(model(torch.randn(2, 4)).pow(2).mean())
    source = to_dot(g).source
    assert node_count(source) < 12
    assert "model.heads.0 … model.heads.119" in source and "× 120" in source
    assert "model #2" not in source


class _ResidualMLP(torch.nn.Module):
    """``x = x + relu(block(x))`` over numbered Linear blocks: the adds between them belong to no
    block (from the parameters alone), so the numbered blocks are not one after another."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(n))

    def forward(self, x):
        for block in self.blocks:
            x = x + torch.relu(block(x))
        return x


def test_a_models_repeating_stretch_folds_above_the_module_budget():
    """A snapshot of 30 residual blocks (93 nodes at every module level, under ``max_nodes`` but over
    the 60 a model's picture aims at) folds its repeating stretch, as a trace's loop folds above 60:
    the same few nodes at 30 and at 60 blocks."""
    sources = []
    for n in (30, 60):
        torch.manual_seed(0)
        model = _ResidualMLP(n)
        sources.append(to_dot(gl.snapshot(model(torch.randn(2, 4)).sum())).source)
    assert node_count(sources[0]) == node_count(sources[1]) < 12
    assert "× 30: a repeating stretch of the graph" in sources[0] and "× 60:" in sources[1]


def test_a_snapshots_runs_are_numbered_in_forward_order():
    """An LSTM cell unrolled over 6 steps, snapshotted (its nodes walked from the root): its runs
    (two a step) are numbered as the forward pass made them, ``cell #1`` nearest the input, each
    run feeding only runs numbered after it (they were numbered from the root: the last step's first)."""
    torch.manual_seed(0)
    cell = torch.nn.LSTMCell(3, 5)
    h = c = torch.zeros(1, 5)
    for x in torch.randn(6, 1, 3):
        h, c = cell(x, (h, c))
    g = gl.snapshot(h.pow(2).mean())
    titles = [int(n) for n in re.findall(r"<B>cell #(\d+)</B>", to_dot(g, depth=1, repeats=False).source)]
    lines = to_dot(g, depth=1, repeats=False).source.splitlines()
    first = {k: next(i for i, line in enumerate(lines) if f"<B>cell #{k}</B>" in line) for k in titles}
    assert sorted(titles) == list(range(1, 13))
    feeds = {}
    for line in lines:
        m = re.match(r"\s*(\S+) -> (\S+)", line)
        if m:
            feeds.setdefault(m.group(1), set()).add(m.group(2))
    ids = {k: re.match(r"\s*(\S+) \[", lines[first[k]]).group(1) for k in titles}
    # (a run feeds only runs numbered after it: forward order)
    for k, node in ids.items():
        seen, stack = set(), [node]
        while stack:
            for nxt in feeds.get(stack.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
        assert all(j > k for j, other in ids.items() if other in seen)
