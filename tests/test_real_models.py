"""Real models through snapshot, trace and render: transformer, LSTM, custom Function,
double backward and multi-output ops."""

from __future__ import annotations

import pytest
import torch

import graphlens as gl

try:
    from graphlens.render import to_dot
except Exception:  # noqa: BLE001 - render is optional here
    to_dot = None

needs_render = pytest.mark.skipif(to_dot is None, reason="graphlens.render is not available")


def grads_of(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.grad.clone() for p in model.parameters()]


def backward_names(g: gl.Graph) -> set[str]:
    return {op.name for op in g.ops if op.name}


# -- transformer --------------------------------------------------------------------------
def transformer():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, batch_first=True, dropout=0.0)
    model = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
    return model, torch.randn(2, 5, 16)


def test_transformer_snapshot_leaves_are_exactly_its_parameters():
    """A snapshot of a 2-layer TransformerEncoder's loss has the model's parameters as its
    leaves, named by module=, and attention, layer-norm and softmax backward nodes."""
    model, x = transformer()
    loss = model(x).pow(2).mean()
    g = gl.snapshot(loss, module=model)
    assert {t.name for t in g.leaves} == {name for name, _ in model.named_parameters()}
    assert all(t.is_parameter and t.requires_grad for t in g.leaves)
    names = backward_names(g)
    assert "NativeLayerNormBackward0" in names
    assert any("Attention" in n or "Softmax" in n for n in names)  # fused or not, per torch build
    assert sum(1 for op in g.ops if op.is_accumulate_grad) == len(list(model.parameters()))
    assert [t.name for t in g.roots] == ["loss"]


def test_transformer_trace_is_bitwise_transparent_and_scoped():
    """Tracing a transformer's forward and backward with module= gives bitwise the grads of a
    plain run, records a flowed grad for the output, and tags ops with their submodule."""
    model, x = transformer()
    model(x).pow(2).mean().backward()
    plain = grads_of(model)
    model.zero_grad(set_to_none=True)
    with gl.trace(module=model) as tr:
        out = model(x)
        loss = out.pow(2).mean()
        loss.backward()
    g = tr.graph()
    assert all(torch.equal(a, b) for a, b in zip(plain, grads_of(model)))
    assert g.find("out").flowed and g.find("out").flowed[0] != "-"
    scopes = {op.scope for op in g.ops if op.scope}
    assert {"layers.0.self_attn", "layers.1.linear1", "layers.1.norm2"} <= scopes
    assert {t.name for t in g.leaves if t.is_parameter} == {name for name, _ in model.named_parameters()}


@needs_render
def test_transformer_renders_collapsed_by_module_deterministically():
    """The traced transformer's data view is the same DOT text twice, and collapsing to the
    encoder layers (depth=2: layers.0, layers.1) draws far fewer nodes than everything expanded."""
    model, x = transformer()
    with gl.trace(module=model) as tr:
        loss = model(x).pow(2).mean()
        loss.backward()
    g = tr.graph()
    full = to_dot(g, max_nodes=10**6).source
    collapsed = to_dot(g, depth=2).source
    assert to_dot(g, depth=2).source == collapsed
    assert collapsed.count("[label=") < full.count("[label=") / 3
    assert "<B>layers.0</B>" in collapsed and "<B>layers.1</B>" in collapsed


# -- LSTM -----------------------------------------------------------------------------------
def test_lstm_snapshot_and_trace_over_a_sequence():
    """nn.LSTM over 50 steps: the snapshot's leaves are its four parameters; the trace gives
    bitwise the plain grads and records the gradient flowing into the output."""
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(4, 8)
    seq = torch.randn(50, 1, 4)
    out, _ = lstm(seq)
    loss = out.pow(2).mean()
    g = gl.snapshot(loss, module=lstm)
    assert {t.name for t in g.leaves} == {"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"}
    loss.backward()
    plain = grads_of(lstm)
    lstm.zero_grad(set_to_none=True)
    with gl.trace(module=lstm) as tr:
        out, (h, c) = lstm(seq)
        loss = out.pow(2).mean()
        loss.backward()
    g = tr.graph()
    assert all(torch.equal(a, b) for a, b in zip(plain, grads_of(lstm)))
    node = g.find("out")
    assert node.shape == (50, 1, 8) and node.flowed[0].shape == (50, 1, 8)
    assert g.find("h").op == node.op  # one fused op makes out, h and c


@pytest.mark.slow
def test_unrolled_lstm_cell_graph_is_deep_and_walkable():
    """An LSTMCell unrolled over 300 steps makes a graph of thousands of nodes; snapshot sees
    every node next_functions exposes and the cell's parameters as the only leaves."""
    torch.manual_seed(0)
    cell = torch.nn.LSTMCell(4, 8)
    h, c = torch.zeros(1, 8), torch.zeros(1, 8)
    for x in torch.randn(300, 1, 4):
        h, c = cell(x, (h, c))
    loss = h.sum()
    g = gl.snapshot(loss, module=cell)
    seen, stack = set(), [loss.grad_fn]
    while stack:
        fn = stack.pop()
        if fn not in seen:
            seen.add(fn)
            stack.extend(ch for ch, _ in fn.next_functions if ch is not None)
    assert len(g.ops) == len(seen) > 3000
    assert {t.name for t in g.leaves} == {name for name, _ in cell.named_parameters()}


# -- custom autograd.Function -----------------------------------------------------------------
class Cube(torch.autograd.Function):
    """x**3 with a hand-written backward that saves its input."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 3 * x * x


def test_custom_function_appears_as_its_backward_node():
    """A custom Function's output is produced by a node named after it (CubeBackward); its grads,
    traced, equal the plain run's, and the gradient flowing into its output is recorded."""
    w = torch.tensor([1.0, -2.0, 0.5], requires_grad=True)
    y = Cube.apply(w)
    loss = (y * 2).sum()
    g = gl.snapshot(loss)
    assert g.producer(g.find("y")).name == "CubeBackward"
    assert [t.name for t in g.leaves] == ["w"]
    loss.backward()
    expected = w.grad.clone()
    w.grad = None
    with gl.trace() as tr:
        y = Cube.apply(w)
        loss = (y * 2).sum()
        loss.backward()
    g = tr.graph()
    assert torch.equal(w.grad, expected)
    assert g.producer(g.find("y")).name == "CubeBackward"
    assert [f.head for f in g.find("y").flowed] == [(2.0, 2.0, 2.0)]
    assert g.find("w").grad.head == (6.0, 24.0, 1.5)


# -- double backward ------------------------------------------------------------------------
def test_double_backward_graph_and_second_pass():
    """grad with create_graph=True builds a graph behind the gradient itself; snapshot walks
    it back to x, and its backward inside a trace gives the analytic second derivative."""
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = (x**3).sum()
    (gx,) = torch.autograd.grad(y, x, create_graph=True)  # 3 x^2
    g = gl.snapshot(gx)
    assert gx.requires_grad and gx.grad_fn is not None
    assert [t.name for t in g.leaves] == ["x"]
    assert "PowBackward0" in backward_names(g) or "MulBackward0" in backward_names(g)

    with gl.trace() as tr:
        y = (x**3).sum()
        (gx,) = torch.autograd.grad(y, x, create_graph=True)
        gx.sum().backward()
    g = tr.graph()
    assert torch.equal(x.grad, 6 * x.detach())
    assert tr.backward_passes == 2
    assert g.find("gx").requires_grad and not g.find("gx").is_leaf
    assert g.find("gx").flowed[1].head == (1.0, 1.0, 1.0)  # what the second pass sent into gx
    assert g.find("y").flowed[0].head == (1.0,)


# -- multi-output ops -----------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["split", "unbind", "topk", "max"])
def test_multi_output_ops_share_one_node_with_distinct_output_numbers(kind):
    """Each output of split / unbind / topk / max(dim) comes from the same op, numbered by its
    output_nr, in snapshot and trace alike; traced grads equal plain ones bitwise."""
    def program(w):
        h = w * 2
        if kind == "split":
            a, b = h.split(2)
        elif kind == "unbind":
            a, b = h.view(2, 2).unbind(0)
        elif kind == "topk":
            a, b = h.topk(2)
        else:
            a, b = h.view(2, 2).max(dim=1)
        loss = a.sum() * 3 + (b.sum() if b.requires_grad else 0)
        return h, a, b, loss

    base = torch.tensor([0.5, -1.0, 2.0, 4.0])
    w = base.clone().requires_grad_(True)
    h, a, b, loss = program(w)
    g = gl.snapshot(loss)
    ta = g.find("a")
    assert ta.op is not None and ta.output_nr == 0
    if b.requires_grad:  # split, unbind: both outputs are differentiable
        tb = g.find("b")
        assert tb.op == ta.op and tb.output_nr == 1
    loss.backward()
    expected = w.grad.clone()

    w2 = base.clone().requires_grad_(True)
    with gl.trace() as tr:
        h, a, b, loss = program(w2)
        loss.backward()
    g = tr.graph()
    assert torch.equal(w2.grad, expected)
    ta, tb = g.find("a"), g.find("b")
    assert ta.op == tb.op and (ta.output_nr, tb.output_nr) == (0, 1)
    assert g.producer(ta).forward == {"split": "split", "unbind": "unbind", "topk": "topk", "max": "max"}[kind]
    if kind in ("topk", "max"):
        assert not tb.requires_grad and tb.dtype == "int64"  # the indices
    assert [f.head for f in ta.flowed] == [(3.0, 3.0)]
