"""Tests for graphlens.trace: what it records, and that it changes nothing and leaves nothing."""

import weakref

import pytest
import torch

import graphlens as gl
from graphlens._live.facts import summarize
from graphlens.charts import article_example


def test_article_example_records_every_tensor_with_its_marks():
    """The article's program: x, xx, p1, p2 are leaves; y1 is a non-leaf cut by detach."""
    g = article_example()
    for name in ("x", "xx", "p1", "p2"):
        assert g.find(name).is_leaf, name
    assert g.find("p1").requires_grad and g.find("p2").requires_grad
    assert not g.find("x").requires_grad and not g.find("xx").requires_grad
    original, detached = g.find_all("y1")
    assert not original.is_leaf and original.requires_grad
    assert detached.is_leaf and not detached.requires_grad and detached.detached_from == original.id
    assert [(e.src, e.dst) for e in g.edges if e.kind == "detach"] == [(original.id, detached.id)]
    # xx = x ** 2 made no backward node, but the forward op is recorded.
    pow_op = g.producer(g.find("xx"))
    assert pow_op.name is None and pow_op.forward == "pow"
    # Behind the cut nothing requires grad until p2 joins.
    assert not g.find("y2").requires_grad and g.find("y2").is_leaf
    assert g.find("y3").requires_grad and not g.find("y3").is_leaf
    # Only p2 got a gradient; p1 is cut off.
    assert g.find("p2").grad is not None and g.find("p1").grad is None
    assert [t.name for t in g.roots] == ["loss"]


def test_flowed_gradients_match_torch_for_released_intermediates():
    """The gradient recorded as flowing into an intermediate equals the one retain_grad keeps."""
    def program():
        torch.manual_seed(3)
        w = torch.randn(3, requires_grad=True)
        h = torch.sin(w) * 2
        loss = (h * h).sum()
        return w, h, loss

    w, h, loss = program()
    h.retain_grad()
    loss.backward()
    expected = summarize(h.grad)

    with gl.trace() as tr:
        w, h, loss = program()
        loss.backward()
    g = tr.graph()
    node = g.find("h")
    assert node.grad is None and not node.retains_grad  # PyTorch released it ...
    assert node.flowed == (expected,)  # ... but graphlens saw it flow.
    assert [f.head for f in g.find("loss").flowed] == [(1.0,)]
    assert g.find("w").grad == summarize(w.grad)


def test_trace_is_transparent_bitwise():
    """Grads from a program run under trace are bitwise equal to a plain run."""
    def run():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
        x = torch.randn(4, 8)
        loss = torch.nn.functional.cross_entropy(model(x), torch.tensor([0, 1, 1, 0]))
        loss.backward()
        return [p.grad.clone() for p in model.parameters()], loss.detach()

    plain, l1 = run()
    with gl.trace():
        traced, l2 = run()
    assert torch.equal(l1, l2)
    assert all(torch.equal(a, b) for a, b in zip(plain, traced))


def test_no_grad_regions_are_recorded():
    """Tensors and ops made inside torch.no_grad() carry the region's name."""
    w = torch.ones(2, requires_grad=True)
    with gl.trace() as tr:
        a = w * 2
        with torch.no_grad():
            b = w * 3
            c = b + 1
        d = a + c
        with torch.no_grad():
            e = d * 0
    g = tr.graph()
    assert g.find("a").region is None and g.find("d").region is None
    assert g.find("b").region == g.find("c").region == "no_grad#0"
    assert g.find("e").region == "no_grad#1"
    assert not g.find("b").requires_grad and g.producer(g.find("b")).name is None
    assert g.producer(g.find("b")).region == "no_grad#0"
    del a, b, c, d, e


def test_inplace_ops_make_a_new_version_and_multi_output_ops_share_a_node():
    """An in-place op records a new version of the tensor; split's outputs share one op."""
    w = torch.ones(4, requires_grad=True)
    with gl.trace() as tr:
        h = w * 2
        h.add_(1)
        first, second = h.split(2)
    g = tr.graph()
    old, new = g.find_all("h")
    assert old.version == 0 and new.version == 1
    assert g.producer(new).forward == "add_"
    assert any(e.kind == "input" and e.src == old.id and e.dst == new.op for e in g.edges)
    assert g.find("first").op == g.find("second").op
    assert (g.find("first").output_nr, g.find("second").output_nr) == (0, 1)
    del first, second


def test_names_follow_rebinding_inside_a_function():
    """A name reused for a new tensor names both tensors, each after what it held."""
    def body():
        with gl.trace() as tr:
            p = torch.ones(2, requires_grad=True)
            y = p * 2
            y = torch.exp(y)
            y.sum()
        return tr.graph()

    g = body()
    first, second = g.find_all("y")
    assert g.producer(first).forward == "mul" and g.producer(second).forward == "exp"


def test_a_result_of_the_users_own_function_is_named_though_deleted_in_the_block():
    """y = f(x) with f the user's Python function names y's tensor even when y is deleted before the block ends
    (the caller's f_lasti points past the call's inline caches while f runs); pytest's own variables, which its
    assertion rewriting stores tensors in, name nothing."""
    def square(v):
        return v * v

    x = torch.randn(3, requires_grad=True)
    with gl.trace() as tr:
        y = square(x)
        z = (lambda v: v + 1)(y)
        assert torch.isfinite(z).all()  # (rewritten by pytest: @py_assert1 = torch.isfinite(z) ...)
        total = z.sum()
        del y, z
    g = tr.graph()
    assert g.producer(g.find("y")).forward == "mul" and g.producer(g.find("z")).forward == "add"
    assert all(t.name is None or t.name.isidentifier() or "[" in t.name or "." in t.name for t in g.tensors), [t.name for t in g.tensors]
    del total


def test_autograd_grad_inside_trace_records_flow():
    """torch.autograd.grad inside the block records the gradient flowing through the graph."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    with gl.trace() as tr:
        h = w * w
        loss = h.sum()
        (gw,) = torch.autograd.grad(loss, [w])
    g = tr.graph()
    assert [f.head for f in g.find("h").flowed] == [(1.0, 1.0)]
    assert [f.head for f in g.find("w").flowed] == [(2.0, 4.0)]  # handed to w without its AccumulateGrad node
    assert torch.equal(gw, 2 * w.detach())
    assert w.grad is None and not w._backward_hooks


def test_module_scopes_and_parameter_names():
    """With module=, parameters get their names and every op knows its submodule."""
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    x = torch.randn(2, 3)
    with gl.trace(module=model) as tr:
        out = model(x)
        loss = out.pow(2).mean()
    g = tr.graph()
    assert g.find("0.weight").scope == "0" and g.find("2.bias").scope == "2"
    forwards = {(o.forward, o.scope) for o in g.ops if o.forward}
    assert forwards == {("linear", "0"), ("relu", "1"), ("linear", "2"), ("pow", None), ("mean", None)}
    assert g.find("x").scope is None
    for sub in model.modules():
        assert not sub._forward_hooks and not sub._forward_pre_hooks
    del loss


def test_everything_is_removed_on_exit_even_after_an_exception():
    """An exception inside the block propagates unchanged and leaves no mode or hook behind."""
    model = torch.nn.Linear(2, 2)
    w = torch.ones(2, requires_grad=True)
    with pytest.raises(ValueError, match="boom"):
        with gl.trace(module=model) as tr:
            model(w)
            raise ValueError("boom")
    assert not torch._C._is_torch_function_mode_enabled()
    assert not model._forward_hooks and not model._forward_pre_hooks
    assert tr.graph().find("w").is_leaf


def test_backward_hooks_are_gone_after_backward():
    """The pre-hooks that record flowing grads exist only during backward."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    with gl.trace() as tr:
        h = w * 3
        loss = h.sum()
        loss.backward(retain_graph=True)
    loss.backward()  # outside the block: nothing may be recorded any more
    assert [f.head for f in tr.graph().find("h").flowed] == [(1.0, 1.0)]
    assert torch.equal(w.grad, torch.tensor([6.0, 6.0]))


def test_trace_keeps_no_tensor_alive(collect):
    """A trace holds only weak references to the tensors it saw."""
    with gl.trace() as tr:
        w = torch.randn(3, requires_grad=True)
        h = w.exp()
        loss = h.sum()
        loss.backward()
    refs = [weakref.ref(t) for t in (w, h, loss)]
    g = tr.graph()
    del w, h, loss
    collect()
    assert all(r() is None for r in refs)
    assert g.find("h").flowed  # the records outlive the tensors


def test_two_backward_passes_are_recorded_separately():
    """Each backward pass adds one entry to flowed; None marks a pass that did not reach it."""
    p = torch.tensor([1.0, 2.0], requires_grad=True)
    with gl.trace() as tr:
        a = p * 2
        loss1 = a.sum()
        b = p * 5
        loss2 = b.sum()
        loss1.backward()
        loss2.backward()
    g = tr.graph()
    assert tr.backward_passes == 2
    heads = lambda name: [None if f is None else f.head for f in g.find(name).flowed]  # noqa: E731
    assert heads("a") == [(1.0, 1.0), None]
    assert heads("b") == [None, (1.0, 1.0)]
    assert heads("p") == [(2.0, 2.0), (5.0, 5.0)] and g.find("p").grad.head == (7.0, 7.0)
    assert [t.name for t in g.roots] == ["loss1", "loss2"]


def test_misuse_gets_clear_errors():
    """graph() before entering, entering twice and bad options are clear errors."""
    tr = gl.trace()
    with pytest.raises(RuntimeError, match="nothing was traced yet"):
        tr.graph()
    with tr:
        pass
    with pytest.raises(RuntimeError, match="entered only once"):
        with tr:
            pass
    with pytest.raises(TypeError, match="names must be a dict"):
        gl.trace(names=["w"])
    with pytest.raises(TypeError, match="module must be an nn.Module"):
        gl.trace(module=torch.ones(1))


def test_small_tensors_keep_the_value_they_were_made_with(collect):
    """A small tensor's value is read when it is made: unnamed freed ones and older versions keep it."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    with gl.trace() as tr:
        h = w * 2
        h.add_(1)
        loss = (torch.exp(w) * 0).sum()  # the exp result is never named and dies at once
    collect()
    g = tr.graph()
    old, new = g.find_all("h")
    assert (old.value.head, new.value.head) == ((2.0, 4.0), (3.0, 5.0))
    exp_out = next(t for t in g.tensors if t.op and g.producer(t).forward == "exp")
    assert exp_out.name is None and str(exp_out.value) == "[2.718, 7.389]"
    assert exp_out.value.head == pytest.approx((2.7182817, 7.3890560))
    del loss


def test_trace_tolerates_a_view_torch_refuses_to_describe():
    """A view made in no_grad whose base changed in place makes torch refuse grad_fn; trace still works."""
    w0 = torch.tensor([1.0], requires_grad=True)
    with gl.trace() as tr:
        with torch.no_grad():
            h0 = w0[0]
            h0.add_(1.0)
        loss0 = w0.sum()
        loss0.backward()
    g = tr.graph()
    assert g.find("w0").grad.head == (1.0,) and torch.equal(w0.grad, torch.ones(1))
    assert g.find_all("h0")[-1].region == "no_grad#0"
    with pytest.raises(RuntimeError):
        h0.grad_fn  # noqa: B018 - torch itself refuses


def test_inference_mode_tensors_are_recorded_without_a_version():
    """Tensors made in torch.inference_mode() keep no version counter; trace records them in their region."""
    w = torch.randn(3, requires_grad=True)
    with gl.trace() as tr:
        with torch.inference_mode():
            x = torch.randn(3)
            y = x * 2
        loss = (w * y.clone()).sum()
        loss.backward()
    g = tr.graph()
    assert g.find("y").region == "inference_mode#0" and g.find("y").version == -1
    assert g.find("w").grad is not None and g.find("loss").region is None
    assert 'label=inference_mode' in g.to_dot().source


def test_graph_reads_the_tensors_as_they_are_when_called():
    """A backward run after the block shows in the next graph(); each call builds afresh."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    with gl.trace() as tr:
        y = (w * 3).sum()
    assert tr.graph().find("w").grad is None
    y.backward()
    assert tr.graph().find("w").grad.head == (3.0, 3.0) and tr.graph().find("w").grad == gl.snapshot(y).find("w").grad
    assert tr.graph().find("y").flowed == ()  # that backward ran outside the block


def test_nested_traces_each_record_only_the_real_ops():
    """An inner trace is seen by neither trace as an op; both record what ran inside them."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    with gl.trace() as outer:
        a = w * 2
        with gl.trace() as inner:
            b = a * 3
        c = b.sum()
    assert [(t.name, g.producer(t).forward if t.op else None) for g in [outer.graph()] for t in g.tensors] == [
        ("w", None), ("a", "mul"), ("b", "mul"), ("c", "sum"),
    ]
    assert [t.name for t in inner.graph().tensors] == ["a", "b"]
    del c


def test_torch_warnings_inside_a_trace_point_at_the_users_line():
    """Reading .grad of a non-leaf warns at the user's line, as without graphlens, not inside graphlens."""
    import warnings

    w = torch.tensor([1.0, 2.0], requires_grad=True)
    with gl.trace():
        h = w * 2
        h.sum().backward()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            h.grad  # noqa: B018 - the classic warning
    (warning,) = [c for c in caught if "not a leaf" in str(c.message)]
    assert warning.filename == __file__


def test_trace_flags_must_be_booleans():
    """trace(explain_errors='yes') is a TypeError naming the option."""
    with pytest.raises(TypeError, match="explain_errors must be True or False"):
        gl.trace(explain_errors="yes")


def _saved(g, op_name):
    op = next(o for o in g.ops if o.name == op_name)
    return {e.name: e for e in op.saved}


def test_saved_tensors_name_the_tensor_they_are_and_show_freed_after_backward():
    """A traced op's saved entries say which tensor was saved; after backward they say freed,
    also when the node died before graph() was called."""
    from graphlens.graph import FREED, LIVE

    with gl.trace() as tr:
        x = torch.tensor([1.0, 2.0], requires_grad=True)
        w = torch.tensor([3.0, 4.0], requires_grad=True)
        h = x * w
        s = torch.sigmoid(h)
        before = tr.graph()
        s.sum().backward()
    saved = _saved(before, "MulBackward0")
    assert saved["self"].state is LIVE and saved["self"].tensor == before.find("x").id
    assert saved["other"].tensor == before.find("w").id and saved["other"].summary.shape == (2,)
    assert _saved(before, "SigmoidBackward0")["result"].tensor == before.find("s").id
    alive = tr.graph()
    assert {e.state for e in _saved(alive, "MulBackward0").values()} == {FREED}
    del h, s  # the whole graph dies: graphlens can no longer read the nodes
    dead = tr.graph()
    mul = _saved(dead, "MulBackward0")
    assert mul["self"].state is FREED and mul["self"].tensor == dead.find("x").id


def test_saved_tensors_stay_live_after_a_backward_that_kept_the_graph():
    """With retain_graph=True the saved tensors are still there, and the records say so."""
    from graphlens.graph import LIVE

    with gl.trace() as tr:
        x = torch.tensor([1.0, 2.0], requires_grad=True)
        loss = (x * x).sum()
        loss.backward(retain_graph=True)
    assert {e.state for e in _saved(tr.graph(), "MulBackward0").values()} == {LIVE}
    del loss
    assert {e.state for e in _saved(tr.graph(), "MulBackward0").values()} == {LIVE}


def test_a_failed_backward_is_not_taken_as_having_freed_anything():
    """When backward raises, graphlens does not claim the saved tensors were released."""
    from graphlens.graph import FREED

    with gl.trace() as tr:
        x = torch.tensor([1.0, 2.0], requires_grad=True)
        y = x.exp()
        y.add_(1)  # exp saved its result: backward must fail
        with pytest.raises(RuntimeError, match="inplace"):
            y.sum().backward()
    exp = next(o for o in tr.graph().ops if o.name == "ExpBackward0")
    assert all(e.state is not FREED for e in exp.saved)


@pytest.mark.parametrize("where", ["main thread", "worker thread"])
def test_sequence_now_is_the_number_of_the_next_node(where):
    """sequence_now() is the autograd sequence number the next node made on this thread gets, and reading it makes no node."""
    import threading

    from graphlens._live.capture import probe_sequence_now, sequence_now

    seen = []

    def run():
        x = torch.ones(2, requires_grad=True)
        warm = (x * 1 + 1).exp()  # nodes made on this thread before: the counter is not at 0
        expected = sequence_now()
        assert expected > warm.grad_fn._sequence_nr()
        assert sequence_now() == expected  # reading it twice consumed nothing
        probed = probe_sequence_now()  # the fallback: its probe node takes the number expected
        assert probed == expected + 1 == sequence_now()
        y = x * 2
        seen.append((probed, y.grad_fn._sequence_nr()))

    if where == "main thread":
        run()
    else:
        t = threading.Thread(target=run)
        t.start()
        t.join()
    assert len(seen) == 1 and seen[0][0] == seen[0][1]


def test_nodes_made_before_the_block_are_boundaries():
    """A graph built before the trace is not walked into: its last node is recorded, the ones behind it are not."""
    a = torch.tensor([1.0, 2.0], requires_grad=True)
    before = (a * 2).exp()
    with gl.trace() as tr:
        loss = (before * 3).sum()
        loss.backward()
    names = [o.name for o in tr.graph().ops]
    assert "ExpBackward0" in names and "MulBackward0" in names
    assert names.count("MulBackward0") == 1 and "AccumulateGrad" not in names


def test_a_gradient_from_autograd_grad_is_recorded_as_made_by_it():
    """A gradient torch.autograd.grad hands back without a graph (create_graph=False) is a
    tensor of the trace made by autograd.grad at the user's line, with no history; one made
    with create_graph=True has its backward node instead."""
    x = torch.ones(2, requires_grad=True)
    with gl.trace() as tr:
        y = (x ** 2).sum()
        grads = torch.autograd.grad(y, x, retain_graph=True)[0]
        again = torch.autograd.grad(y, x, create_graph=True)[0]
        penalty = (grads ** 2).sum() + (again ** 2).sum()  # noqa: F841
    g = tr.graph()
    plain, graphed = g.find("grads"), g.find("again")
    assert plain.made_by == "autograd.grad" and plain.op is None and not plain.requires_grad
    assert plain.line is not None
    assert graphed.made_by is None and graphed.op is not None and graphed.requires_grad


def test_a_leftover_loop_variable_never_names_a_parameter():
    """After for p in model.parameters(), snapshot and trace name each parameter by its
    qualified name (model.1.bias), not by the loop variable left holding the last one."""
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))
    for p in model.parameters():
        p.grad = None
    loss = model(torch.ones(1, 2)).sum()
    assert sorted(t.name for t in gl.snapshot(loss).leaves) == ["model.0.bias", "model.0.weight", "model.1.bias", "model.1.weight"]
    with gl.trace() as tr:
        for p in model[1].parameters():
            p.requires_grad_(True)
        loss = model(torch.ones(1, 2)).sum()
    assert "p" not in {t.name for t in tr.graph().tensors}
    assert tr.graph().find("model.1.bias").is_parameter


def test_a_long_trace_leaves_its_records_untracked_by_the_collector():
    """The records of a long trace are plain tuples the cyclic garbage collector stops tracking,
    so a full collection walks no object per recorded op (only the tensors' weak references)."""
    import gc

    x = torch.randn(4, requires_grad=True)
    with gl.trace() as tr:
        y = x
        for _ in range(300):
            y = y * 1.0001
        y.sum().backward()
    gc.collect()
    gc.collect()
    rec = tr._rec
    tracked = [o for o in rec.ops if gc.is_tracked(o)] + [r for r in rec.tensors if gc.is_tracked(r)]
    assert len(rec.ops) > 300 and len(tracked) <= 4, tracked[:4]
