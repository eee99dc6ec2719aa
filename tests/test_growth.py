"""Drawing, pages, graphs and explanations stay linear on program shapes where one step was
quadratic: a traced training loop (a root per step), a folded loop of many leaves (its replay
page), a loop of backward calls, a rebound variable."""

from __future__ import annotations

import warnings

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import graphlens as gl
from graphlens.render.replay_html import page_data
from graphlens.render.scene import _rank_map
from traced_loops import training_loop


def _plain_rank_map(graph, region, pairs, detach):
    """The plain version (graphlens before 2026-12-07): one walk up from every root."""
    roots = [r.id for r in graph.roots if r.id in region and region[r.id] is None]
    if not roots:
        return {}
    rank = dict.fromkeys(roots, "max")
    if len(roots) < 2:
        return rank
    preds: dict = {}
    for k, (src, dst) in enumerate(pairs):
        if k not in detach:
            preds.setdefault(dst, []).append(src)
    reach: dict = {}
    for r in roots:
        seen, stack = {r}, [r]
        while stack:
            for p in preds.get(stack.pop(), ()):
                if p not in seen:
                    seen.add(p)
                    stack.append(p)
        for n in seen:
            reach[n] = reach.get(n, 0) + 1
    for t in graph.tensors:
        if t.id in region and t.is_leaf and t.requires_grad and reach.get(t.id, 0) >= 2 and region[t.id] is None:
            rank[t.id] = "min"
    return rank


@st.composite
def _dags(draw):
    """A graph of tensor nodes (some leaves requiring grad) with edges from earlier to later
    nodes, some of them detach edges, some nodes in a region, and several roots."""
    n = draw(st.integers(2, 14))
    leaf = [draw(st.booleans()) for _ in range(n)]
    pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)).filter(lambda p: p[0] < p[1]), max_size=30))
    detach = draw(st.sets(st.integers(0, max(0, len(pairs) - 1)), max_size=3)) if pairs else set()
    roots = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=5, unique=True))
    region = {f"t{i}": (None if draw(st.integers(0, 5)) else "no_grad#1") for i in range(n)}
    tensors = [gl.TensorNode(id=f"t{i}", name=None, shape=(1,), dtype="float32", device="cpu", is_leaf=leaf[i],
                             requires_grad=leaf[i] or draw(st.booleans())) for i in range(n)]
    graph = gl.Graph(tensors, (), (), [f"t{i}" for i in roots])
    return graph, region, [(f"t{a}", f"t{b}") for a, b in pairs], detach


@given(_dags())
def test_rank_map_is_the_plain_one(case):
    """Marking the leaves that feed two or more roots by marks passed up (each node entered at
    most twice) gives the ranks one walk per root gives."""
    graph, region, pairs, detach = case
    assert _rank_map(graph, region, pairs, detach) == _plain_rank_map(graph, region, pairs, detach)


def test_training_loop_roots_are_read_once(monkeypatch):
    """Drawing a traced loop of many steps (a root each) asks the graph for its roots a few
    times, not once per tensor: it was once per tensor, quadratic in the steps."""
    g = training_loop(12)
    calls = []
    real = gl.Graph.roots

    def counted(self):
        calls.append(1)
        return real.fget(self)
    monkeypatch.setattr(gl.Graph, "roots", property(counted))
    gl.Graph.to_dot(g)
    assert len(g.roots) == 12 and 0 < len(calls) <= 6


def _wide_sum(n: int):
    """``total = total + w * 2`` over ``n`` leaves made before the block: a loop whose
    drawing folds, one drawn leaf standing for all of them."""
    torch.manual_seed(0)
    ws = [torch.randn(3, requires_grad=True) for _ in range(n)]
    with gl.trace() as tr:
        total = torch.zeros(3)
        for w in ws:
            total = total + w * 2
        total.sum().backward()
    return tr


def test_folded_leaf_step_lists_only_its_own_gradient():
    """On the replay page of a folded loop, the step of each leaf's AccumulateGrad lists what
    reached that leaf (one gradient, 2 per element), not everything that reached the drawn
    node standing for all of them (which grew by one per leaf: a page quadratic in size)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tr = _wide_sum(100)
    data = page_data(tr.replay().to_html())
    accs = [s for s in data["steps"] if s["n"] == "AccumulateGrad"]
    assert len(accs) == 100
    assert all(len(s["a"]) == 1 and s["a"][0][1] == "[2, 2, 2]" for s in accs)
    assert len({s["a"][0][0] for s in accs}) <= 3  # (the folded iterations along one drawn edge; the first and last may be drawn apart)


def test_leaf_used_twice_lists_both_gradients():
    """A leaf that two ops use gets two gradients, summed by its AccumulateGrad: its step
    lists both (what keying by the leaf's own node keeps)."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    with gl.trace() as tr:
        a = w * 2
        b = w * 3
        (a + b).sum().backward()
    data = page_data(tr.replay().to_html())
    (acc,) = [s for s in data["steps"] if s["n"] == "AccumulateGrad"]
    assert sorted(v for _, v in acc["a"]) == ["[2, 2]", "[3, 3]"]


def test_folded_loop_page_grows_linearly():
    """The replay page of a folded loop of n leaves is about twice as large at 2n (it was
    four times: 1.6 MB at 300 leaves, 21.9 MB at 1,200)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        small, large = (len(_wide_sum(n).replay().to_html()) for n in (120, 240))
    assert large / small < 2.2


def test_flowed_of_many_backward_calls_round_trips():
    """A loop of backward calls gives each tensor one ``flowed`` entry per call, most of them
    None: the graph, its JSON and the graph read back hold the same entries, and a bad one
    far down the list is named by its place."""
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    with gl.trace() as tr:
        for k in range(6):
            loss = (x * (k + 1)).sum()
            loss.backward()
    g = tr.graph()
    flows = [[None if f is None else f.head for f in t.flowed] for t in g.tensors]
    assert all(len(f) == 6 for f in flows) and any(f.count(None) == 5 for f in flows)
    back = gl.Graph.from_json(g.to_json())
    assert [[None if f is None else f.head for f in t.flowed] for t in back.tensors] == flows
    data = g.to_dict()
    data["tensors"][0]["flowed"]["at"][-1][1] = 3
    with pytest.raises(ValueError, match=r"field 'flowed.at\[5\]' is a bad summary"):
        gl.Graph.from_dict(data)


def test_a_loop_of_backward_calls_keeps_and_writes_what_flowed_in_linear_room():
    """The graph and JSON of 2n backward calls are about twice those of n (each tensor kept an
    entry per call, None where nothing flowed: four times)."""
    def sizes(n):
        w = torch.randn(4, requires_grad=True)
        with gl.trace() as tr:
            for _ in range(n):
                (w * 2).sum().backward()
        g = tr.graph()
        return sum(len(t.flowed.items()) for t in g.tensors), len(g.to_json())

    (kept, text), (kept2, text2) = sizes(200), sizes(400)
    assert kept2 / kept < 2.1 and text2 / text < 2.2


def test_explanations_name_a_rebound_variable_with_its_id():
    """An explanation calls a tensor by its name, with its id only where several tensors
    of the graph were bound to that name (counted once per explanation)."""
    from graphlens.explain.paths import PathView

    w = torch.tensor([1.0], requires_grad=True)
    with gl.trace() as tr:
        h = w * 2
        h = h * 3
        loss = h.sum()
        loss.backward()
    view = PathView(tr.graph())
    hs = view.g.find_all("h")
    assert len(hs) == 2 and [view.label(t.id) for t in hs] == [f"h ({hs[0].id})", f"h ({hs[1].id})"]
    assert view.label(view.g.find("loss").id) == "loss"
