"""Tests for the Graph data model: lookups, counts, JSON round trips."""

import json

import pytest
import torch

import graphlens as gl
from graphlens import Edge, Graph, OpNode, TensorNode
from graphlens.charts import CHARTS, article_example


def small_graph():
    """A snapshot of w * 3 summed, after backward."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    h = w * 3
    loss = h.sum()
    loss.backward()
    return gl.snapshot(loss)


def test_json_round_trip_is_equal_for_snapshots_and_traces():
    """Graph.from_json(g.to_json()) == g for snapshot, trace and every chart."""
    graphs = [small_graph(), article_example()] + [c.build() for c in CHARTS.values()]
    for g in graphs:
        again = Graph.from_json(g.to_json())
        assert again == g
        assert again.to_json() == g.to_json()
        assert json.loads(g.to_json())["schema"] == 3


def test_from_json_rejects_wrong_schema_and_unknown_fields():
    """A foreign schema or an unknown record field is a clear ValueError."""
    data = small_graph().to_dict()
    with pytest.raises(ValueError, match="unsupported graph schema"):
        Graph.from_dict({**data, "schema": 99})
    data["tensors"][0]["colour"] = "red"
    with pytest.raises(ValueError, match=r"unknown TensorNode field\(s\) \['colour'\]"):
        Graph.from_dict(data)
    with pytest.raises(TypeError, match="must be a dict"):
        Graph.from_dict("{}")


def test_find_node_inputs_producer_and_counts():
    """find, node, inputs, producer and counts agree with the records."""
    g = small_graph()
    h = g.find("h")
    assert isinstance(h, TensorNode) and h.shape == (2,)
    mul = g.producer(h)
    assert isinstance(mul, OpNode) and mul.name == "MulBackward0"
    assert g.find("MulBackward0") == mul
    (edge,) = g.inputs(mul)
    assert isinstance(edge, Edge) and g.node(edge.dst).is_accumulate_grad
    assert g.counts == {"tensors": 3, "ops": 3, "leaves": 1, "next": 2, "input": 2, "output": 2, "detach": 0}
    assert "op0" in g and "nope" not in g
    with pytest.raises(KeyError, match="named tensors: \\['h', 'loss', 'w'\\]"):
        g.find("nope")


def test_inputs_follow_next_functions_in_order_for_every_op():
    """g.inputs(op) lists, for every op, one edge per non-None entry of its grad_fn's next_functions, by input_nr, to that entry's node."""
    torch.manual_seed(0)
    a = torch.randn(3, requires_grad=True)
    b = torch.randn(3, requires_grad=True)
    c = torch.randn(3)  # (no grad: a None entry in next_functions)
    y = torch.cat([a * c, b, a + b, torch.addcmul(a, b, c)]).sum()
    g = gl.snapshot(y)
    by_name = {o.name: o for o in g.ops if not o.is_accumulate_grad}  # (each class once in this program)
    stack, seen = [y.grad_fn], set()
    while stack:  # (torch's own graph, walked here: each grad_fn against its op's inputs)
        fn = stack.pop()
        if fn in seen:
            continue
        seen.add(fn)
        entries = [(k, type(f).__name__) for k, (f, _) in enumerate(fn.next_functions) if f is not None]
        if type(fn).__name__ == "AccumulateGrad":
            assert not entries
        else:
            edges = g.inputs(by_name[type(fn).__name__])
            assert [(e.input_nr, g.node(e.dst).name) for e in edges] == entries
        stack.extend(f for f, _ in fn.next_functions if f is not None)
    assert len(seen) == len(g.ops) > 5
    assert all(g.inputs(o) == () for o in g.ops if o.is_accumulate_grad)


def test_find_returns_the_latest_binding_of_a_reused_name():
    """When a name was rebound (y1 = y1.detach()), find gives the latest and find_all both."""
    g = article_example()
    both = g.find_all("y1")
    assert len(both) == 2
    assert g.find("y1") == both[-1]
    assert both[-1].detached_from == both[0].id


def test_find_prefers_a_tensors_name_then_an_id_then_the_first_op_so_named():
    """A tensor named like an op's id wins over that op; an id wins over an op's name; of ops, the first by backward or forward name."""
    a = TensorNode(id="t0", name="op1", shape=(1,), dtype="float32", device="cpu", requires_grad=True, is_leaf=True)
    b = TensorNode(id="t1", name=None, shape=(1,), dtype="float32", device="cpu", requires_grad=True, is_leaf=False, op="op0")
    ops = [OpNode(id="op0", name="MulBackward0", forward="mul"), OpNode(id="op1", name="MulBackward0", forward="t1"),
           OpNode(id="op2", name="AddBackward0", forward="mul")]
    g = gl.Graph([a, b], ops, [Edge("op0", "t1", "output")], ["t1"])
    assert g.find("op1") is a and g.find("t1") is b and g.find("op2") is ops[2]
    assert g.find("MulBackward0") is ops[0] and g.find("mul") is ops[0] and g.find("AddBackward0") is ops[2]
    with pytest.raises(KeyError, match=r"no tensor or op named 'x'.*\['op1'\]"):
        g.find("x")


def test_notes_added_one_call_at_a_time_equal_those_added_at_once():
    """annotate() per node gives the graph one annotate() of all the notes gives, and keeps what was built of the records."""
    g = article_example()
    before = dict(g.notes)
    one_by_one = g
    for node in (*g.tensors, *g.ops, g.tensors[0]):
        one_by_one = one_by_one.annotate({node.id: f"seen {node.id}"})
    at_once = g.annotate({n.id: [f"seen {n.id}"] * (2 if n is g.tensors[0] else 1) for n in (*g.tensors, *g.ops)})
    assert one_by_one == at_once and one_by_one.to_json() == at_once.to_json()
    assert one_by_one.notes[g.tensors[0].id] == before.get(g.tensors[0].id, ()) + (f"seen {g.tensors[0].id}",) * 2
    assert one_by_one.find(g.ops[0].id) == g.ops[0] and one_by_one.adjacency is g.adjacency
    assert dict(g.notes) == before


def test_records_are_immutable_values():
    """Records cannot be changed in place and compare by value."""
    g = small_graph()
    t = g.tensors[0]
    with pytest.raises(AttributeError):
        t.name = "other"  # type: ignore[misc]
    assert t == TensorNode(**t._asdict())
    assert t.has_grad is (t.grad is not None)


def test_repr_summarises_the_graph():
    """repr names the source, the counts and the roots."""
    assert repr(small_graph()) == "<Graph from snapshot: 3 tensors (1 leaves), 3 ops, 6 edges; roots: loss>"


def test_graph_draws_itself_through_render(tmp_path):
    """Graph.to_dot, Graph.render and the notebook hook delegate to graphlens.render."""
    from graphlens import render

    g = small_graph()
    assert g.to_dot().source == render.to_dot(g).source
    assert g.to_dot(view="function").source == render.to_dot(g, view="function").source
    path = g.render(tmp_path / "g.dot")
    assert path.read_text() == g.to_dot().source
    bundle = g._repr_mimebundle_()
    assert bundle["text/plain"] == repr(g)
    try:
        render.find_layout_program()
    except render.LayoutProgramNotFound:
        return
    assert "<svg" in bundle["image/svg+xml"]
    assert g.render(tmp_path / "g.svg").read_text().lstrip().startswith("<?xml")


def test_find_wants_a_string():
    """find(None) or find(3) is a TypeError naming the argument, not a silent match."""
    g = small_graph()
    with pytest.raises(TypeError, match="name must be a str"):
        g.find(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="name must be a str"):
        g.find(3)  # type: ignore[arg-type]
