"""Tests of a snapshot's inferred scopes: which module each op ran inside, said only where the graph shows it."""

import torch

import graphlens as gl
from graphlens.render import to_dot
from graphlens.scopes import infer_scopes


class Res(torch.nn.Module):
    """A residual block whose own forward runs a relu, a scaling and the residual add between its submodules."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 8)
        self.n = torch.nn.LayerNorm(8)

    def forward(self, x):
        return self.n(x + torch.relu(self.b(torch.tanh(self.a(x)))) * 0.5)


def _ops(g, name):
    return [o for o in g.ops if o.name == name]


def test_what_runs_between_two_submodules_of_a_block_is_inside_the_block():
    """Each block's relu, scaling and residual add lie between its own `b` and `n`, so they are scoped to the block, and the four alike blocks fold."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(*[Res() for _ in range(4)])
    loss = net(torch.randn(2, 8)).sum()
    g = infer_scopes(gl.snapshot(loss))
    relus = _ops(g, "ReluBackward0")
    assert len(relus) == 4
    for relu in relus:
        (fed_by,) = [o for o in g.next_ops(relu) if o.name == "AddmmBackward0"]
        block = fed_by.scope.rpartition(".")[0]  # (net.k.b -> net.k)
        assert fed_by.scope == f"{block}.b" and relu.scope == block
    residual = [a for a in _ops(g, "AddBackward0") if any(o.name == "MulBackward0" for o in g.next_ops(a))]
    assert sorted(a.scope for a in residual) == [f"net.{k}" for k in range(4)]
    assert "× 4: net.0 … net.3" in to_dot(gl.snapshot(loss)).source


def test_what_runs_between_numbered_blocks_is_left_to_the_module_around_them():
    """Between layers.0 and layers.1 of a TransformerEncoder (a ModuleList, which never runs) ops are scoped to the encoder, and no layer is split into two runs."""
    torch.manual_seed(0)
    model = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True), 3,
                                        enable_nested_tensor=False)
    loss = model(torch.randn(2, 5, 16)).pow(2).mean()
    g = infer_scopes(gl.snapshot(loss))
    between = [o for o in g.ops if o.name == "TransposeBackward0"
               and any((n.scope or "").startswith("model.layers.") and n.scope.endswith("norm2") for n in g.next_ops(o))]
    assert len(between) == 2  # (before layers.1 and layers.2)
    assert {o.scope for o in between} == {"model"}
    # the residual adds of each layer are the layer's: no layer drawn in two pieces
    source = to_dot(gl.snapshot(loss), depth=3).source
    assert all(f"model.layers.{k}" in source for k in range(3))
    assert "model.layers.1 #" not in source and "model.layers.2 #" not in source


def test_what_runs_between_two_calls_of_one_module_is_not_said_to_be_inside_it():
    """A Linear called twice, a tanh between its calls: the tanh has no scope (before, it was put inside the Linear)."""
    torch.manual_seed(0)
    cell = torch.nn.Linear(4, 4)
    loss = cell(torch.tanh(cell(torch.randn(2, 4)))).sum()
    g = infer_scopes(gl.snapshot(loss))
    (tanh,) = _ops(g, "TanhBackward0")
    assert tanh.scope is None
    assert {o.scope for o in _ops(g, "AddmmBackward0")} == {"cell"}


def test_inferred_scopes_never_put_an_op_deeper_than_a_trace_finds_it():
    """On a residual net and a TransformerEncoder, every op that reads no parameter gets as inferred scope its traced scope or a module around it (matched op by op, walking torch's own graph)."""
    for build in (lambda: torch.nn.Sequential(*[Res() for _ in range(3)]),
                  lambda: torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True), 2,
                                                      enable_nested_tensor=False)):
        torch.manual_seed(0)
        model = build()
        x = torch.randn(2, 3, 8)
        with gl.trace(module=model) as tr:
            traced_loss = model(x).sum()
        loss = model(x).sum()
        snap = infer_scopes(gl.snapshot(loss, module=None))
        truth = _scopes_by_walk(tr.graph(), traced_loss.grad_fn)
        guess = _scopes_by_walk(snap, loss.grad_fn)
        assert len(truth) == len(guess) > 20
        checked = 0
        for (name_t, true_scope, reads_param), (name_g, inferred, _) in zip(truth, guess):
            assert name_t == name_g
            if inferred is None or reads_param:
                # (an op reading a parameter is given the parameter's module, a convention: F.linear
                # with out_proj.weight runs in self_attn's own forward)
                continue
            inferred = inferred.split(".", 1)[1] if "." in inferred else ""  # (drop the variable's name: model.)
            assert true_scope is not None and (inferred == "" or true_scope == inferred or true_scope.startswith(inferred + ".")), (name_t, true_scope, inferred)
            checked += 1
        assert checked > 10


def _scopes_by_walk(g, grad_fn):
    """(op name, scope, reads a parameter) of the graph's ops in the order a walk of torch's own graph from ``grad_fn`` meets them."""
    by_name: dict = {}
    for o in g.ops:
        by_name.setdefault(o.name, []).append(o)
    # torch's nodes in a fixed order, matched to the graph's ops of the same name by their own walk
    order, seen, stack = [], set(), [grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        order.append(type(fn).__name__)
        stack.extend(f for f, _ in reversed(fn.next_functions))
    ops, seen_ops, stack = [], set(), [g.roots[0].op]
    while stack:
        op = stack.pop()
        if op is None or op in seen_ops:
            continue
        seen_ops.add(op)
        node = g.node(op)
        reads = any(g.node(e.dst).name in ("AccumulateGrad", "TBackward0") for e in g.inputs(op)) or node.name == "AccumulateGrad"
        ops.append((node.name, node.scope, reads))
        stack.extend(e.dst for e in reversed(g.inputs(op)))
    assert [n for n, _, _ in ops] == order
    return ops
