"""What a trace records of writes the program makes: in-place ops on tensors first seen, item assignment, out=, gradient hooks, optimizer state, fills in helpers."""

from __future__ import annotations

import gc
import weakref

import torch

import graphlens as gl
from graphlens.graph import Graph


def _makers(g: Graph) -> dict[str, str]:
    """``{tensor id: forward name of the op that made it}``."""
    ops = {o.id: o for o in g.ops}
    return {e.dst: ops[e.src].forward for e in g.edges if e.kind == "output" and ops[e.src].forward}


def _inputs(g: Graph, op_forward: str) -> list:
    op = next(o for o in g.ops if o.forward == op_forward)
    return [g.node(e.src) for e in sorted(g.edges, key=lambda e: e.input_nr) if e.kind == "input" and e.dst == op.id]


def _causal(t: int) -> torch.Tensor:
    return torch.triu(torch.full((t, t), float("-inf")))  # the fill's own line


# -- in-place ops on a tensor the trace has not seen yet ------------------------------------------
def test_an_in_place_op_as_the_first_use_of_a_tensor_is_recorded_with_the_value_before_it():
    """w.div_(s) on a w made before the block records div_, with w's record holding its value before the call."""
    s, w = torch.zeros(3), torch.ones(3)
    with gl.trace() as tr:
        w.div_(s)
        loss = (w * 2).sum()
    g = tr.graph()
    assert "div_" in _makers(g).values()
    before = _inputs(g, "div_")[0]
    assert before.value.head == (1.0, 1.0, 1.0) and before.value.finite is True
    e = gl.explain(loss, tr)
    assert e.op == "div_" and "division_by_zero" in e.reasons
    assert "already held" not in str(e)


def test_augmented_assignment_and_out_are_in_place_writes_too():
    """w /= s and torch.div(w, s, out=w) on a tensor first seen are each named as the op that made the inf."""
    for write in (lambda w, s: w.__itruediv__(s), lambda w, s: torch.div(w, s, out=w)):
        s, w = torch.zeros(2), torch.ones(2)
        with gl.trace() as tr:
            write(w, s)
            loss = w.sum()
        e = gl.explain(loss, tr)
        assert e.op in ("__itruediv__", "div", "div_") and "division_by_zero" in e.reasons, str(e)


def test_a_tensor_first_seen_by_an_in_place_op_keeps_the_nan_it_already_held():
    """A NaN held before the block and carried by s.mul_(0.9) is the input's, not mul_'s."""
    s = torch.zeros(3)
    s[1] = float("nan")
    with gl.trace() as tr:
        with torch.no_grad():
            s.mul_(0.9)
        loss = (s * 2).sum()
    e = gl.explain(loss, tr)
    assert "nonfinite_input" in e.reasons and "s[1]" in str(e)


def test_item_assignment_in_the_block_is_recorded_at_its_line():
    """w[1] = nan inside the block is the op that made the NaN (named at its line), not data from before the block."""
    for seen_before in (False, True):
        w = torch.ones(3)
        with gl.trace() as tr:
            if seen_before:
                _ = w * 1
            w[1] = float("nan")
            loss = (w * 2).sum()
        e = gl.explain(loss, tr)
        assert e.op == "__setitem__" and e.line == "w[1] = float(\"nan\")", str(e)
        assert "already held" not in str(e) and "wrote NaN" in str(e)


def test_recording_writes_changes_no_number_and_no_version():
    """The values, versions and gradients of a program with in-place writes are the same traced and untraced."""
    def program(ctx):
        torch.manual_seed(0)
        w = torch.randn(4, requires_grad=True)
        s, buf = torch.rand(4) + 0.5, torch.randn(4)
        with ctx():
            with torch.no_grad():
                buf.mul_(s)
                buf[0] = 3.0
            y = (w * buf).sum()
            y.backward()
        return w.grad.clone(), buf.clone(), buf._version, s._version

    import contextlib
    plain, traced = program(contextlib.nullcontext), program(gl.trace)
    assert all(torch.equal(a, b) for a, b in zip(plain[:2], traced[:2])) and plain[2:] == traced[2:]


def _written(tr) -> list:
    return [o.written for o in tr.graph().ops if o.forward == "__setitem__"]


def test_an_assignment_records_the_positions_it_wrote():
    """z[i] = v records, on its op, the flat positions of z it wrote, each once and in order: an int, a slice (with a
    step), a tuple, a bool mask, an index tensor, a list with a repeated index."""
    x = torch.ones(2, requires_grad=True)
    with gl.trace() as tr:
        a = torch.zeros(3, 4)
        a[1] = x.sum()
        a[:, 2:] = x * 3
        a[2, 1] = x[0]
        a[a > 2] = x[1] * 0.5
        b = torch.zeros(5)
        b[torch.tensor([0, 4])] = x
        b[[3, 1, 3]] = 7.0
        b[::2] = x[0]
    assert _written(tr) == [(4, 5, 6, 7), (2, 3, 6, 7, 10, 11), (9,), (2, 3, 6, 7, 10, 11), (0, 4), (1, 3), (0, 2, 4)]
    g = tr.graph()
    assert Graph.from_json(g.to_json()) == g
    assert all(o.written is None for o in g.ops if o.forward != "__setitem__")


def test_assignment_positions_change_nothing_the_program_sees():
    """Working the positions out makes no autograd node and leaves values, versions, gradients and warnings as they were."""
    import contextlib
    import warnings

    def program(ctx):
        x = torch.ones(3, requires_grad=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with ctx():
                z = torch.zeros(3)
                before = (x * 1).grad_fn._sequence_nr()
                z[1:] = x[1:] * 2
                z[torch.tensor([True, False, False])] = 5.0
                gap = (x * 1).grad_fn._sequence_nr() - before
                z.sum().backward()
        return z.detach().clone(), z._version, x.grad.clone(), gap, [str(w.message) for w in caught]

    plain, traced = program(contextlib.nullcontext), program(gl.trace)
    assert torch.equal(plain[0], traced[0]) and torch.equal(plain[2], traced[2])
    assert plain[1] == traced[1] and plain[3] == traced[3] and plain[4] == traced[4]


def test_a_large_target_keeps_no_positions():
    """A target above ASSIGN_LIMIT elements gets no positions (None): nothing is worked out on a mask that large."""
    from graphlens._live.writes import ASSIGN_LIMIT
    with gl.trace() as tr:
        z = torch.zeros(ASSIGN_LIMIT + 1)
        z[0] = 1.0
    assert _written(tr) == [None]


# -- gradient hooks -------------------------------------------------------------------------------
def test_a_hook_that_makes_nan_is_named_at_the_line_that_registered_it():
    """A hook g / g.norm() on a tensor whose gradient is all zeros is the origin of the NaN, at its register_hook line."""
    w = torch.ones(3, requires_grad=True)
    with gl.trace() as tr:
        h = w * 0
        h.register_hook(lambda g: g / g.norm())
        loss = (h * 0).sum()
        loss.backward()
    g = tr.graph()
    note = g.notes[g.find("h").id]
    line = test_a_hook_that_makes_nan_is_named_at_the_line_that_registered_it.__code__.co_firstlineno + 5
    assert note == (f"a gradient hook registered at line {line}: h.register_hook(lambda g: g / g.norm())",)
    e = gl.explain(w, tr)
    assert tuple(e.reasons) == ("nonfinite_backward", "nonfinite_hook")
    assert e.line == "h.register_hook(lambda g: g / g.norm())" and "eps" in e.fix
    assert "afterwards" not in str(e)


def test_a_hook_registered_in_the_block_still_runs_and_is_not_kept():
    """register_hook hands back the user's handle; the hook runs as without graphlens and is removable."""
    seen = []
    w = torch.ones(2, requires_grad=True)
    with gl.trace():
        h = w * 2
        handle = h.register_hook(lambda g: seen.append(g.clone()))
        h.sum().backward()
    assert len(seen) == 1 and torch.equal(seen[0], torch.ones(2))
    handle.remove()


# -- optimizer state --------------------------------------------------------------------------------
def test_an_optimizers_state_is_named_after_its_parameter():
    """Adam's exp_avg_sq of model.weight is named opt.state[model.weight]['exp_avg_sq'] in the graph."""
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.Adam(model.parameters())
    x = torch.randn(4, 2)
    with gl.trace() as tr:
        for _ in range(2):
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
    names = {t.name for t in tr.graph().tensors if t.name}
    assert "opt.state[model.weight]['exp_avg_sq']" in names and "opt.state[model.bias]['exp_avg']" in names


def test_naming_an_optimizers_state_keeps_nothing_alive():
    """The optimizer a trace saw is freed when the program drops it."""
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    with gl.trace():
        model(torch.ones(1, 2)).sum().backward()
        opt.step()
    ref = weakref.ref(opt)
    del opt
    gc.collect()
    assert ref() is None


def test_a_nan_in_a_loaded_optimizer_state_is_named_as_that_state():
    """An exp_avg_sq loaded with a NaN is the source, named as the optimizer's state, with a fix that checks the state."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.randn(2, 3)).sum().backward()
    opt.step()
    state = opt.state_dict()
    state["state"][0]["exp_avg_sq"][0, 1] = float("nan")
    opt.load_state_dict(state)
    x = torch.randn(4, 3)
    with gl.trace() as tr:
        for _ in range(2):
            opt.zero_grad()
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
    e = gl.explain(loss, tr)
    assert "nonfinite_input" in e.reasons and "exp_avg_sq of model.weight" in str(e)
    assert "opt.state" in e.fix and "from finite inputs" not in str(e)


# -- fills made inside the user's functions ---------------------------------------------------------
def test_a_fill_holding_inf_made_in_a_helper_keeps_the_helpers_line():
    """torch.full(..., -inf) called in the user's helper is placed at the helper's line."""
    with gl.trace() as tr:
        mask = _causal(3)
    g = tr.graph()
    fill = next(t for t in g.tensors if t.made_by == "full")
    assert fill.line == _causal.__code__.co_firstlineno + 1 and fill.code.startswith("return torch.triu(")
    assert mask is not None


# -- writes through a detach() alias --------------------------------------------------------------
def _alias_program():
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    with gl.trace() as tr:
        y = x * 2
        d = y.detach()
        d.add_(1)  # the write through the alias
        z = y.sum()
        z.backward()
    return x, tr


def test_a_write_through_a_detach_alias_is_noted_at_the_op_and_at_the_changed_tensor():
    """d = y.detach(); d.add_(1): the add_ op's note says it changes y too, and y's record read by sum says add_ on d changed it, at its line."""
    x, tr = _alias_program()
    g = tr.graph()
    add = next(o for o in g.ops if o.forward == "add_")
    (op_note,) = g.notes[add.id]
    assert "y" in op_note and "d" in op_note and "detach()" in op_note and "memory" in op_note
    ys = g.find_all("y")
    assert [t.version for t in ys] == [0, 1]
    assert ys[0].id not in g.notes  # (the value mul made: nothing changed it yet)
    (t_note,) = g.notes[ys[1].id]
    assert "add_" in t_note and "on d" in t_note and f"line {add.line}" in t_note
    assert ys[1].value.head == (3.0, 5.0, 7.0) and ys[0].value.head == (2.0, 4.0, 6.0)
    assert x.grad.tolist() == [2.0, 2.0, 2.0]  # (the program's own numbers)


def test_the_alias_notes_are_drawn_beside_their_nodes():
    """The DOT of such a trace holds both notes as note nodes."""
    from graphlens.render import to_dot

    _, tr = _alias_program()
    src = to_dot(tr.graph()).source
    assert src.count("shape=note") == 2 and "also changes y in place" in src and "changed in place by add_" in src


def test_no_alias_note_without_a_shared_memory():
    """d = y.detach().clone(); d.add_(1), and a write through .data (drawn as an edge instead), get no detach note."""
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    with gl.trace() as tr:
        y = x * 2
        d = y.detach().clone()
        d.add_(1)
        z = y.sum()
    assert not tr.graph().notes
    w = torch.ones(2, requires_grad=True)
    with gl.trace() as tr2:
        loss = (w * 3).sum()
        loss.backward()
        w.data.sub_(0.1 * w.grad)
        loss2 = (w * 3).sum()
    assert not any("detach()" in n for notes in tr2.graph().notes.values() for n in notes)


def test_a_write_through_a_detach_of_a_leaf_is_noted_too():
    """w.detach().mul_(0.5) on a leaf: the op's note names w, and w's next record says mul_ changed it."""
    w = torch.tensor([2.0, 4.0], requires_grad=True)
    with gl.trace() as tr:
        v = w.detach()
        v.mul_(0.5)
        loss = (w * w).sum()
        loss.backward()
    g = tr.graph()
    op = next(o for o in g.ops if o.forward == "mul_")
    assert "also changes w in place" in g.notes[op.id][0]
    changed = [t for t in g.find_all("w") if t.id in g.notes]
    assert len(changed) == 1 and "changed in place by mul_" in g.notes[changed[0].id][0] and changed[0].value.head == (1.0, 2.0)
    assert w.grad.tolist() == [2.0, 4.0]
