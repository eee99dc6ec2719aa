"""What a trace records so that an answer names the right source: inner lines, values written through aliases, autocast, buffer names."""

from __future__ import annotations

import json

import torch

import graphlens as gl
from graphlens.graph import Graph


def _root(v: torch.Tensor) -> torch.Tensor:
    return torch.sqrt(v)  # the inner line


def _scaled(v: torch.Tensor) -> torch.Tensor:
    return v * 3.0  # a product: its derivative is finite everywhere


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        return torch.log(h.abs() + 1.0)


def _op(g: Graph, forward: str):
    return next(o for o in g.ops if o.forward == forward)


def _first_input(g: Graph, op: str):
    return g.node(next(e.src for e in sorted(g.edges, key=lambda e: e.input_nr) if e.kind == "input" and e.dst == op))


# -- inner lines ---------------------------------------------------------------------------------
def test_an_op_whose_derivative_can_be_infinite_keeps_its_line_inside_a_helper():
    """sqrt called inside the user's helper is recorded at the helper's line, not at the block's line that called it."""
    w = torch.tensor([0.0, 4.0], requires_grad=True)
    with gl.trace() as tr:
        y = _root(w).sum()
    op = _op(tr.graph(), "sqrt")
    assert op.code == "return torch.sqrt(v)" and op.line == _root.__code__.co_firstlineno + 1
    assert y is not None


def test_a_module_forward_of_the_users_keeps_the_line_of_its_log():
    """log inside a user's nn.Module forward keeps that line; linear, called from torch's own module, keeps the block's line."""
    net = _Net()
    with gl.trace() as tr:
        out = net(torch.ones(1, 2)).sum()
    g = tr.graph()
    assert _op(g, "log").code == "return torch.log(h.abs() + 1.0)"
    assert _op(g, "linear").code == "out = net(torch.ones(1, 2)).sum()"
    assert out is not None


def test_ops_with_a_finite_derivative_keep_the_blocks_line():
    """A product inside a helper (finite derivative everywhere) is recorded at the block's line: no frame is read for it."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    with gl.trace() as tr:
        y = _scaled(w).sum()
    assert _op(tr.graph(), "mul").code == "y = _scaled(w).sum()"
    assert y is not None


def test_the_backward_origin_inside_a_helper_is_answered_at_its_own_line():
    """A NaN gradient from sqrt at 0 inside a helper: explain names the helper's line (its source text)."""
    w = torch.tensor([0.0, 4.0], requires_grad=True)
    with gl.trace() as tr:
        loss = _root(w).sum()
        loss.backward()
    e = gl.explain(w, tr)
    assert e.reasons[:2] == ("nonfinite_backward", "infinite_derivative")
    assert e.op == "sqrt" and e.line == "return torch.sqrt(v)"


# -- values written where the version counter does not see it ------------------------------------
def test_a_write_through_data_makes_a_new_record_of_the_tensor_with_the_written_value():
    """w.data -= ... changes w's values without moving its version: the next use of w is a new record holding them."""
    w = torch.tensor([2.0, -1.0], requires_grad=True)
    with gl.trace() as tr:
        a = (w * 1.0).sum()
        w.data -= torch.tensor([1.0, 1.0])
        b = (w * 1.0).sum()
    g = tr.graph()
    first, second = (_first_input(g, o.id) for o in g.ops if o.forward == "mul")
    assert first.id != second.id and first.name == second.name == "w"
    assert first.value.head == (2.0, -1.0) and second.value.head == (1.0, -2.0)
    maker = g.producer(second.id)
    assert maker is not None and maker.forward in ("sub_", "__isub__")
    assert (a.item(), b.item()) == (1.0, -1.0)


def test_a_gradient_accumulated_in_place_between_two_reads_is_recorded_again_and_named():
    """w.grad read after a second backward (accumulated in place, untraced) is a new record with the values read then, named w.grad."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    with gl.trace() as tr:
        (w * 3.0).sum().backward()
        a = w.grad * 1.0
        (w * 3.0).sum().backward()
        b = w.grad * 1.0
    g = tr.graph()
    ins = [_first_input(g, o.id) for o in g.ops if o.forward == "mul" and not o.name]
    assert [(t.name, t.value.head) for t in ins] == [("w.grad", (3.0, 3.0)), ("w.grad", (6.0, 6.0))]
    assert torch.equal(a, torch.tensor([3.0, 3.0])) and torch.equal(b, torch.tensor([6.0, 6.0]))


def test_tracing_a_data_update_loop_changes_no_number():
    """The same hand-written update loop, plain and traced: parameters and losses bitwise equal."""

    def run(trace: bool):
        w = torch.tensor([2.0, -1.0], requires_grad=True)
        x = torch.tensor([[1.0, 1.0], [2.0, 0.0]])
        losses = []
        ctx = gl.trace() if trace else torch.enable_grad()
        with ctx:
            for _ in range(3):
                loss = ((x @ w) ** 2).mean()
                loss.backward()
                w.data -= 0.1 * w.grad
                w.grad.zero_()
                losses.append(loss.detach())
        return w.detach(), torch.stack(losses)

    assert all(torch.equal(p, q) for p, q in zip(run(False), run(True)))


# -- autocast ------------------------------------------------------------------------------------
def test_ops_run_under_autocast_say_so_and_others_do_not():
    """Under CPU autocast to bfloat16 a linear layer's op carries autocast='bfloat16'; the ops outside carry None."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 3)
    x = torch.randn(2, 3)
    with gl.trace() as tr:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = lin(x)
        loss = h.float().pow(2).sum()
    g = tr.graph()
    assert _op(g, "linear").autocast == "bfloat16"
    assert _op(g, "pow").autocast is None and _op(g, "float").autocast is None
    assert loss.dtype == torch.float32


def test_autocast_survives_json_and_a_document_without_it_reads_as_none():
    """OpNode.autocast is written to JSON and read back; a schema-2 document written before it existed reads as None."""
    lin = torch.nn.Linear(2, 2)
    with gl.trace() as tr:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = lin(torch.ones(1, 2)).sum()
    g = tr.graph()
    again = Graph.from_json(g.to_json())
    assert _op(again, "linear").autocast == "bfloat16"
    data = json.loads(g.to_json())
    for o in data["ops"]:
        o.pop("autocast")
    assert all(o.autocast is None for o in Graph.from_json(json.dumps(data)).ops)
    assert y is not None


# -- names ---------------------------------------------------------------------------------------
def test_module_buffers_are_named_after_the_module():
    """A BatchNorm's running_var used in eval mode is named after the model's variable and the module path."""
    net = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2)).eval()
    with gl.trace() as tr:
        out = net(torch.ones(3, 2)).sum()
    names = {t.name for t in tr.graph().tensors}
    assert "net.1.running_var" in names and "net.1.running_mean" in names
    assert out is not None
