"""Tests of notes on graphs (Graph.annotate, to_dot(notes=)) and of graphs compared side by side."""

import json
import re

import pytest
import torch

import graphlens as gl
from graphlens.render import to_dot


def _graph():
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    x = torch.tensor([3.0, 4.0])
    h = w * x
    loss = (h * h).sum()
    return gl.snapshot(loss)


def _note_lines(source):
    return [line.strip() for line in source.splitlines() if "note" in line]


def test_a_note_is_a_note_shaped_node_tied_to_its_target_in_its_rank():
    """g.annotate({"w": ...}) draws note0 (shape=note, pale yellow) with a dotted arrowless edge from w, same rank."""
    g = _graph().annotate({"w": "the weight"})
    w = g.find("w").id
    src = to_dot(g).source
    assert re.search(r'note0 \[label="the weight\\l" shape=note style=filled fillcolor="#fff6bf"', src)
    assert f"{w} -> note0 [style=dotted dir=none" in src
    assert f"{{rank=same; {w}; note0}}" in src


def test_notes_work_in_the_function_view_on_ops():
    """A note on an op (by its backward name) is drawn beside that op in the function view."""
    g = _graph()
    op = g.find("SumBackward0").id
    src = to_dot(g.annotate({"SumBackward0": "the loss's node"}), view="function").source
    assert f"{op} -> note0" in src and "shape=note" in src


def test_several_notes_stack_and_long_ones_wrap():
    """Two notes on one node are two note nodes; a long text is wrapped to about 30 characters a line."""
    long = "a long note that says a great deal more than thirty characters can hold on one line"
    g = _graph().annotate({"w": ["first", long]})
    src = to_dot(g).source
    assert "note0" in src and "note1" in src
    label = re.search(r'note1 \[label="([^"]*)"', src).group(1)
    assert all(len(line) <= 31 for line in label.split("\\l") if line)


def test_note_ids_are_deterministic():
    """The same graph with the same notes gives byte-identical DOT (note0, note1 in node order)."""
    a = to_dot(_graph().annotate({"loss": "L", "w": "W"})).source
    b = to_dot(_graph().annotate({"w": "W", "loss": "L"})).source
    assert a == b


def test_a_note_on_a_collapsed_node_goes_to_its_box():
    """With submodules collapsed, a note on a parameter inside a box is tied to the box."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    with gl.trace(module=model) as tr:
        model(torch.randn(2, 3)).sum().backward()
    g = tr.graph()
    inner = next(t for t in g.tensors if t.scope == "0" and not t.is_leaf)
    src = to_dot(g.annotate({inner.id: "inside the first layer"}), depth=1, max_nodes=5).source
    (edge,) = [line for line in _note_lines(src) if "-> note0" in line]
    assert edge.startswith("scope_0 ->") and inner.id not in src.split("note0")[0].split("\n")[-1]


def test_unknown_targets_raise_and_name_close_names():
    """A note on a name the graph does not have raises a KeyError listing close names."""
    with pytest.raises(KeyError, match=r"no node named 'ww' to annotate \(close names: \['w'"):
        _graph().annotate({"ww": "?"})
    with pytest.raises(TypeError, match="notes must be a dict"):
        _graph().annotate(["w"])


def test_notes_are_part_of_the_graph_value_and_its_json():
    """Equality and JSON include notes; a loaded note on an unknown id is rejected."""
    g = _graph()
    a = g.annotate({"w": "W"})
    assert a != g and a == g.annotate({"w": "W"})
    assert gl.Graph.from_json(a.to_json()) == a
    bad = json.loads(a.to_json())
    bad["notes"] = {"t99": ["?"]}
    with pytest.raises(ValueError, match="t99"):
        gl.Graph.from_json(json.dumps(bad))


def test_to_dot_notes_adds_for_one_drawing_and_false_hides():
    """to_dot(notes={...}) adds notes without changing the graph; notes=False draws none."""
    g = _graph().annotate({"w": "W"})
    assert "shape=note" not in to_dot(g, notes=False).source
    src = to_dot(g, notes={"loss": "L"}).source
    assert src.count("shape=note") == 2 and len(g.notes) == 1


def test_an_explanation_puts_its_cause_beside_the_node():
    """explain() on an argmax cut notes the argmax op in its diagram."""
    with gl.trace() as tr:
        w = torch.randn(3, 2, requires_grad=True)
        preds = (torch.randn(4, 3) @ w).argmax(1)
        (preds.float() - 1).pow(2).mean()
    e = gl.explain(w, tr)
    src = e.to_dot().source
    assert e.cause is not None and f"{e.cause} -> note0" in src and "argmax" in src.split("note0 [label=")[1][:60]


# -- compare ------------------------------------------------------------------------------------
def _frozen_pair():
    p = torch.tensor([1.0, 2.0], requires_grad=True)
    with gl.trace() as tr:
        y = (p * 2).sum()
        y.backward()
    before = tr.graph()
    p.grad = None
    p.requires_grad_(False)
    with gl.trace() as tr:
        y = (p * 2).sum()
    return before, tr.graph()


def test_compare_matches_by_name_and_lists_what_changed():
    """Tensors match by name; p's requires_grad and grad changed, the AccumulateGrad is only before."""
    before, after = _frozen_pair()
    cmp = gl.compare(before, after, labels=("trained", "frozen"))
    texts = {c.text for c in cmp.changes}
    assert any(t.startswith("requires_grad True -> False") and "grad [2, 2] -> None" in t for t in texts)
    assert "AccumulateGrad: only in trained" in texts
    assert len(cmp.matched) >= 3


def test_compare_draws_both_graphs_side_by_side_with_notes():
    """to_dot() holds two titled boxes, the matching tensors level, a note on each difference."""
    before, after = _frozen_pair()
    src = gl.compare(before, after, labels=("trained", "frozen")).to_dot().source
    assert "subgraph cluster_side0" in src and "subgraph cluster_side1" in src
    assert "<B>trained</B>" in src and "<B>frozen</B>" in src
    pid_a, pid_b = before.find("p").id, after.find("p").id
    assert f"{{rank=same; a_{pid_a}; b_{pid_b}}}" in src
    assert "requires_grad True -&gt; False" in src or "requires_grad True -> False" in src


def _doubled(n, shape=(2,)):
    x = torch.ones(shape, requires_grad=True)
    with gl.trace() as tr:
        y = x
        for _ in range(n):
            y = y * 2
    return tr.graph()


def test_compare_matches_unnamed_tensors_by_the_op_that_made_them_and_their_shape():
    """One more doubling is all a longer chain has more; the same ops on another shape match nothing unnamed."""
    longer = gl.compare(_doubled(3), _doubled(4))
    assert longer.only_first == () and len(longer.matched) == 8
    assert [c.text for c in longer.changes] == ["t3: only in after", "MulBackward0: only in after"]
    other = gl.compare(_doubled(3), _doubled(3, (3,)))
    assert {c.text for c in other.changes} == {"t1: only in before", "t2: only in before", "MulBackward0: only in before",
                                               "t1: only in after", "t2: only in after", "MulBackward0: only in after"}


def test_compare_rejects_what_is_not_a_graph():
    """compare() names what it got instead of two graphs, and wants two labels."""
    g = _graph()
    with pytest.raises(TypeError, match="two graphlens Graphs"):
        gl.compare(g, torch.ones(1))
    with pytest.raises(TypeError, match="labels must be two strings"):
        gl.compare(g, g, labels=("one",))


def _positions(src):
    """Node centres (points) from Graphviz's own layout of ``src`` (plain output)."""
    import subprocess

    out = subprocess.run(["dot", "-Tplain"], input=src, capture_output=True, text=True, check=True).stdout
    pos = {}
    for line in out.splitlines():
        parts = line.split()
        if parts and parts[0] == "node":
            pos[parts[1]] = (float(parts[2]), float(parts[3]), float(parts[4]), float(parts[5]))
    return pos


@pytest.mark.skipif(__import__("shutil").which("dot") is None, reason="needs the Graphviz dot program")
@pytest.mark.parametrize("target", ["h", "loss"])
def test_notes_on_one_node_stack_next_to_it(target):
    """Three notes on one node (an inner one, and the bottom-row root) are tied to it and laid out as a column beside it, none far off."""
    g = _graph().annotate({target: ["first", "second note, a little longer", "third"]})
    tid = g.find(target).id
    src = to_dot(g).source
    for k in range(3):
        assert re.search(rf"\b{tid} -> note{k} \[style=dotted dir=none", src), k
    pos = _positions(src)
    x, y, w, h = pos[tid]
    notes = [pos[f"note{k}"] for k in range(3)]
    assert all(nx > x for nx, _, _, _ in notes)  # all on the right of the node
    xs = [nx for nx, _, _, _ in notes]
    assert max(xs) - min(xs) < 1.0  # one column (inches), not spread along the rank
    ys = sorted(ny for _, ny, _, _ in notes)
    assert all(b - a > 0.2 for a, b in zip(ys, ys[1:]))  # stacked, not overlapping
    assert all(abs(ny - y) < 2.5 for _, ny, _, _ in notes)  # near the node


def test_a_note_on_a_node_made_under_no_grad_sits_in_its_region():
    """A note on a tensor inside a no_grad region is declared inside that region's cluster, so it can sit right beside it."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    with gl.trace() as tr:
        with torch.no_grad():
            y = w * 2
        loss = (w * y).sum()
    g = tr.graph().annotate({"y": "made under no_grad"})
    src = to_dot(g).source
    cluster = src.split("subgraph cluster_no_grad_0 {", 1)[1].split("\n\t}", 1)[0]
    assert "note0 [label=" in cluster and f"{g.find('y').id} [label=" in cluster
