"""Tests of graphlens.replay: the engine's real backward, step by step."""

import pytest
import torch

import graphlens as gl


def _two_backwards():
    with gl.trace() as tr:
        w = torch.tensor([1.0, 2.0], requires_grad=True)
        x = torch.tensor([3.0, 4.0])
        h = w * x
        h.retain_grad()
        loss = (h * h).sum()
        loss.backward(retain_graph=True)
        loss.backward()
    return tr, w


def test_steps_follow_the_engine_order_and_name_the_graphs_ops():
    """Each step is one backward node, in the engine's order, pointing at an op of tr.graph()."""
    tr, _ = _two_backwards()
    rp = tr.replay()
    g = rp.graph
    assert [s.name for s in rp.steps] == ["SumBackward0", "MulBackward0", "MulBackward0", "AccumulateGrad"] * 2
    assert [s.backward for s in rp.steps] == [0] * 4 + [1] * 4
    assert [s.index for s in rp.steps] == list(range(8))
    assert all(g.node(s.op).name == s.name for s in rp.steps)


def test_grads_out_are_what_the_node_sent_and_grads_in_what_arrived():
    """h * h sends 2h = [6, 16] to h's node; h = w * x sends x * 2h = [18, 64] to w."""
    tr, _ = _two_backwards()
    steps = tr.replay().steps
    square, mul = steps[1], steps[2]
    assert square.grads_in[0].head == (1.0, 1.0) and [s.head for s in square.grads_out] == [(3.0, 8.0), (3.0, 8.0)]
    assert mul.grads_in[0].head == (6.0, 16.0)
    assert mul.grads_out[0].head == (18.0, 64.0) and mul.grads_out[1] is None  # x does not require grad


def test_two_backward_calls_show_grad_going_from_none_to_g1_to_g1_plus_g2():
    """AccumulateGrad writes w.grad: None -> [18, 64] in the first pass, -> [36, 128] in the second."""
    tr, w = _two_backwards()
    rp = tr.replay()
    writes = [(s.backward, wr) for s in rp.steps for wr in s.writes if rp.graph.node(wr.tensor).name == "w"]
    (p0, first), (p1, second) = writes
    assert (p0, p1) == (0, 1)
    assert first.before is None and first.after.head == (18.0, 64.0)
    assert second.before.head == (18.0, 64.0) and second.after.head == (36.0, 128.0)
    assert second.after.head == tuple(w.grad.tolist())


def test_retain_grad_writes_show_on_the_producing_step():
    """h.retain_grad(): the step of h's node writes h.grad, [6, 16] then [12, 32]."""
    tr, _ = _two_backwards()
    rp = tr.replay()
    h_writes = [wr for s in rp.steps for wr in s.writes if rp.graph.node(wr.tensor).name == "h"]
    assert [w.after.head for w in h_writes] == [(6.0, 16.0), (12.0, 32.0)]
    assert h_writes[1].before.head == (6.0, 16.0)


def test_a_user_hook_that_changes_the_gradient_is_marked():
    """A tensor hook doubling the gradient: the step that receives it is marked as hooked."""
    with gl.trace() as tr:
        w = torch.tensor([1.0, 2.0], requires_grad=True)
        h = w * 3
        h.register_hook(lambda g: g * 2)
        h.sum().backward()
    steps = tr.replay().steps
    mul = next(s for s in steps if s.name == "MulBackward0")
    assert mul.hooked == (0,) and mul.grads_in[0].head == (2.0, 2.0)
    assert not next(s for s in steps if s.name == "SumBackward0").hooked
    assert "hook" in tr.replay().describe(mul)



def test_a_gradient_changed_in_place_before_its_node_runs_is_read_again():
    """A hook that changes the arriving gradient in place (mul_): the node's step shows the
    changed values, as a hook on the node sees them, not what the sender sent."""
    seen = []
    with gl.trace() as tr:
        w = torch.tensor([1.0, 2.0], requires_grad=True)
        h = w * 3
        y = h * torch.tensor([1.0, 0.5])
        h.register_hook(lambda g: (g.mul_(2), None)[1])
        h.grad_fn.register_hook(lambda gi, go: seen.append(go[0].tolist()))
        y.sum().backward()
    steps = tr.replay().steps
    g = tr.graph()
    sender = next(s for s in steps if s.op == g.find("y").op)
    mul = next(s for s in steps if s.op == g.find("h").op)
    assert sender.grads_out[0].head == (1.0, 0.5)  # what y's node sent, before the hook
    assert mul.grads_in[0].head == tuple(seen[0]) == (2.0, 1.0)


def test_a_gradient_summed_from_two_consumers_is_read_as_it_arrived():
    """x feeds two ops: the gradient arriving at x's node is the sum of both, even when the
    engine adds the second into the first's tensor in place."""
    with gl.trace() as tr:
        w = torch.tensor([1.0, 2.0], requires_grad=True)
        x = w * 1.0
        loss = (x * 3 + x * 5).sum()
        loss.backward()
    steps = tr.replay().steps
    first = next(s for s in steps if s.op == tr.graph().node(tr.graph().find("x").op).id)
    assert first.grads_in[0].head == (8.0, 8.0)
    assert w.grad.tolist() == [8.0, 8.0]

def test_a_backward_that_fails_keeps_the_steps_up_to_the_failure():
    """When backward raises midway, the replay holds the steps that ran before."""
    with gl.trace() as tr:
        w = torch.tensor([1.0, 2.0], requires_grad=True)
        y = w.exp()
        z = (y * 2).sum()
        y.add_(1)
        with pytest.raises(RuntimeError):
            z.backward()
    names = [s.name for s in tr.replay().steps]
    assert names[:1] == ["SumBackward0"] and "AccumulateGrad" not in names


def test_replay_runs_a_function_and_prints_a_table():
    """gl.replay(fn) traces fn and returns its replay; str() is a table with the writes."""
    def step():
        w = torch.tensor([1.0, 2.0], requires_grad=True)
        (w * torch.tensor([3.0, 4.0])).sum().backward()

    rp = gl.replay(step)
    text = str(rp)
    assert "AccumulateGrad" in text and "w.grad: None -> [3, 4]" in text
    assert rp.describe(rp.steps[-1]).startswith("AccumulateGrad stores")


def test_reading_each_gradient_once_keeps_no_gradient_alive():
    """The heads reused between nodes are found by weak reference: the gradients that
    flowed inside a traced backward are freed when it ends, as without graphlens."""
    import gc
    import weakref

    seen = []
    with gl.trace() as tr:
        w = torch.randn(3, requires_grad=True)
        h = w * 2
        y = h * 3
        h.grad_fn.register_hook(lambda gi, go: seen.append(weakref.ref(go[0])))
        y.sum().backward()
    gc.collect()
    assert seen and seen[0]() is None
    assert not tr._rec.sent_heads  # (cleared at the end of the pass)


def test_user_grads_are_bitwise_the_same_with_replay_recording():
    """Recording the replay changes no gradient (law 8 with the post-hooks in place)."""
    def run():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Tanh(), torch.nn.Linear(5, 1))
        model(torch.randn(3, 4)).pow(2).mean().backward()
        return [p.grad.clone() for p in model.parameters()]

    plain = run()
    with gl.trace() as tr:
        traced = run()
    assert len(tr.replay()) > 0
    assert all(torch.equal(a, b) for a, b in zip(plain, traced))


def test_a_view_changed_in_place_under_no_grad_keeps_the_engines_order():
    """Recording an in-place change of a view under no_grad does not rebuild its backward node early: the engine runs the same order with and without a trace, and the replay is that order."""

    def program():
        w0 = torch.tensor(1.0, requires_grad=True)
        h0 = w0 + w0
        h1 = h0.reshape(-1)
        with torch.no_grad():
            h1.add_(1.0)
            h1.tanh()
        return h0.sum() + h1.sum()

    def order(loss):
        seen, stack, handles, done = [], [loss.grad_fn], [], set()
        while stack:
            fn = stack.pop()
            if fn is None or fn in done:
                continue
            done.add(fn)
            handles.append(fn.register_hook(lambda gi, go, fn=fn: seen.append(type(fn).__name__)))
            stack.extend(c for c, _ in fn.next_functions)
        loss.backward()
        for h in handles:
            h.remove()
        return seen

    plain = order(program())
    with gl.trace() as tr:
        traced = order(program())
    assert traced == plain
    assert [s.name for s in tr.replay().steps] == plain
