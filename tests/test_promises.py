"""graphlens never changes the user's program: one test per promise the README makes."""

import uuid

import torch

import graphlens as gl
from graphlens.graph import HIDDEN


class DiskHooks:
    """The saved-tensors tutorial's 'save to disk' hooks: each saved tensor can be unpacked once."""

    def __init__(self, tmp_path):
        self.dir = tmp_path
        self.unpacks = 0

    def pack(self, t):
        path = self.dir / f"{uuid.uuid4().hex}.pt"
        torch.save(t, path)
        return path

    def unpack(self, path):
        self.unpacks += 1
        t = torch.load(path, weights_only=True)
        path.unlink()  # consumed: a second unpack fails, as in the tutorial's variant
        return t


def _program(hooks):
    w = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(hooks.pack, hooks.unpack):
        y = (w * w.exp()).sum()
    return w, y


def test_snapshot_never_runs_a_saved_tensor_unpack_hook(tmp_path):
    """snapshot shows hook-packed saved tensors as hidden and the user's backward still works."""
    hooks = DiskHooks(tmp_path)
    w, y = _program(hooks)
    g = gl.snapshot(y)
    assert hooks.unpacks == 0
    states = {e.state for o in g.ops for e in o.saved if e.name in ("self", "other", "result")}
    assert states == {HIDDEN}
    y.backward()  # would fail with FileNotFoundError had graphlens unpacked
    assert torch.allclose(w.grad, (w.detach() + 1) * w.detach().exp())


def test_trace_does_not_double_unpacks(tmp_path):
    """Inside a trace, backward unpacks each saved tensor exactly as often as without graphlens."""
    plain = DiskHooks(tmp_path)
    w, y = _program(plain)
    y.backward()
    with gl.trace() as tr:
        traced = DiskHooks(tmp_path)
        w2, y2 = _program(traced)
        before = tr.graph()
        y2.backward()
        tr.graph()
    assert traced.unpacks == plain.unpacks > 0
    assert torch.equal(w.grad, w2.grad)
    assert any(e.state is HIDDEN for o in before.ops for e in o.saved)


def _warning_hook_program(traced):
    import warnings

    w = torch.tensor([1.0, 2.0], requires_grad=True)

    def hook(grad):
        warnings.warn("hook says hi", UserWarning)
        return grad

    def run():
        h = w * 3
        h.register_hook(hook)
        h.sum().backward()

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            if traced:
                with gl.trace():
                    run()
            else:
                run()
        except UserWarning as exc:
            return str(exc), w.grad
    return None, w.grad


def test_warnings_as_errors_still_abort_backward():
    """With warnings turned into errors, a warning in a backward hook aborts backward under a trace too."""
    assert _warning_hook_program(traced=False) == ("hook says hi", None)
    assert _warning_hook_program(traced=True) == ("hook says hi", None)


def test_traced_backward_leaves_other_threads_warning_filters_alone():
    """A filter another thread installs while a traced backward runs is still there afterwards."""
    import threading
    import warnings

    started, installed = threading.Event(), threading.Event()
    marker = "graphlens-test-filter-marker"

    def hook(grad):
        started.set()
        installed.wait(5)
        return grad

    def other():
        started.wait(5)
        warnings.filterwarnings("ignore", message=marker)
        installed.set()

    w = torch.tensor([1.0], requires_grad=True)
    t = threading.Thread(target=other)
    t.start()
    try:
        with gl.trace():
            h = w * 2
            h.register_hook(hook)
            h.sum().backward()
        t.join(5)
        assert any(f[1] is not None and f[1].pattern == marker for f in warnings.filters)
    finally:
        warnings.filters[:] = [f for f in warnings.filters if not (f[1] is not None and f[1].pattern == marker)]


def test_torch_warning_in_a_trace_names_the_users_line():
    """Reading .grad of a non-leaf inside a trace warns at the user's line, in the user's module."""
    import warnings

    w = torch.tensor([1.0], requires_grad=True)
    with gl.trace():
        h = w * 2
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            h.grad  # noqa: B018 - the line the warning must name
            line = __import__("inspect").currentframe().f_lineno - 1
    (warning,) = [c for c in caught if ".grad attribute" in str(c.message)]
    assert warning.filename == __file__ and warning.lineno == line


def test_a_held_locals_dict_is_not_emptied():
    """snapshot, trace and explain leave a locals() dict the caller holds intact."""
    def program():
        w = torch.tensor([1.0, 2.0], requires_grad=True)
        loss = (w * 3).sum()
        seen = locals()
        g = gl.snapshot(loss)
        after_snapshot = dict(seen)
        with gl.trace() as tr:
            h = w * 2  # noqa: F841 - named by the trace
        after_trace = dict(seen)
        gl.explain(w, loss)
        return g, tr.graph(), after_snapshot, after_trace, dict(seen)

    g, traced, after_snapshot, after_trace, after_explain = program()
    for d in (after_snapshot, after_trace, after_explain):
        assert {"w", "loss"} <= set(d) and isinstance(d["w"], torch.Tensor)
    assert g.find("w").name == "w" and traced.find("h").name == "h"


def test_explain_error_leaves_a_held_locals_dict_intact():
    """explain_error, reading the caller's variables (here a list of tensors NumPy was given), leaves a held locals() dict intact."""
    import numpy as np

    def program():
        final = [torch.ones(2, requires_grad=True) * 2]
        seen = locals()
        try:
            np.sum(final, 0)
        except RuntimeError as exc:
            e = gl.explain_error(exc)
        return e, dict(seen)

    e, after = program()
    assert e.tensor_name == "final" and "final" in after and isinstance(after["final"], list)


def test_name_inference_keeps_no_local_alive():
    """Reading the caller's variables for names does not keep a dropped tensor alive."""
    import weakref

    def program():
        w = torch.tensor([1.0], requires_grad=True)
        loss = (w * 2).sum()
        gl.snapshot(loss)
        ref = weakref.ref(loss)
        del loss
        return ref, w

    ref, _ = program()
    assert ref() is None


def test_no_graphlens_key_stays_in_node_metadata():
    """After a trace, no backward node's metadata holds anything graphlens put there."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    with gl.trace() as tr:
        h = w * 3
        loss = h.exp().sum()
        loss.backward(retain_graph=True)
    tr.graph()
    stack, seen = [loss.grad_fn], set()
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        assert not [k for k in fn.metadata if "graphlens" in str(k)], type(fn).__name__
        stack.extend(f for f, _ in fn.next_functions)
    assert len(seen) == 4


def test_graphlens_calls_inside_a_trace_add_no_phantom_tensors():
    """snapshot (and reading values) inside a trace records nothing: no reshape/view nodes, no extra roots."""
    w = torch.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    with gl.trace() as tr:
        h = w * 2
        loss = h.sum()
        before = tr.graph()
        gl.snapshot(loss)
        gl.snapshot(h, loss)
    after = tr.graph()
    assert len(after.tensors) == len(before.tensors) == 3
    assert [o.forward for o in after.ops if o.forward] == ["mul", "sum"]
    assert [r.name for r in after.roots] == ["loss"]


def test_scopes_stay_right_when_another_thread_runs_the_model():
    """A trace with module= names the right submodules while another thread runs the same model."""
    import threading

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    stop = threading.Event()

    def other():
        x = torch.randn(3, 4)
        while not stop.is_set():
            with torch.no_grad():
                model(x)

    t = threading.Thread(target=other)
    t.start()
    try:
        for _ in range(15):
            with gl.trace(module=model) as tr:
                model(torch.randn(2, 4)).sum()
            g = tr.graph()
            scopes = [o.scope for o in g.ops if o.forward in ("linear", "relu")]
            assert scopes == ["0", "1", "2"]
    finally:
        stop.set()
        t.join()


def test_compiled_functions_give_the_same_result_inside_a_trace():
    """A torch.compile'd function inside a trace (directly or through a @contextmanager helper)
    returns exactly what it returns without graphlens, and its gradients are the same."""
    import contextlib

    torch._dynamo.reset()

    def body(x, w):
        return ((x @ w).sin() * 2).sum()

    @contextlib.contextmanager
    def helper():
        with gl.trace() as tr:
            yield tr

    for backend in ("eager", "aot_eager"):
        f = torch.compile(body, backend=backend)
        x, w = torch.randn(3, 4), torch.randn(4, 2, requires_grad=True)
        ref = f(x, w)
        ref.backward()
        ref_grad, w.grad = w.grad.clone(), None
        for context in (gl.trace, helper):
            with context() as tr:
                y = f(x, w)
                y.backward()
            assert y.shape == () and torch.equal(y, ref), backend
            assert torch.equal(w.grad, ref_grad), backend
            w.grad = None
            if context is gl.trace:
                assert tr.graph().find("w").is_leaf


def _nested_program(layout):
    a = torch.arange(6.0).reshape(2, 3).requires_grad_()
    b = torch.arange(12.0).reshape(4, 3).requires_grad_()
    nt = torch.nested.as_nested_tensor([a, b], layout=layout)
    y = nt * 2
    s = (torch.nested.to_padded_tensor(y, 0.0) if layout is torch.strided else y.values()).sum()
    s.backward()
    return a.grad, b.grad, s


def test_nested_tensors_work_in_trace_and_snapshot_as_in_plain_torch():
    """Strided and jagged nested tensors give the same results inside a trace; graphs of them
    (symbolic sizes included) snapshot, draw to JSON and load back."""
    import json
    import warnings

    from graphlens.graph import Graph

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the nested-tensor API is a prototype and says so
        for layout in (torch.strided, torch.jagged):
            plain = _nested_program(layout)
            with gl.trace() as tr:
                traced = _nested_program(layout)
            assert all(torch.equal(p, q) for p, q in zip(plain, traced)), layout
            g = tr.graph()
            again = Graph.from_json(g.to_json())
            assert again == g
            ragged = [t.shape for t in g.tensors if len(t.shape) == 3 and any(type(n) is str for n in t.shape)]
            assert ragged and all(shape[0] == 2 and shape[2] == 3 for shape in ragged), layout
            json.loads(g.to_json())
            s = traced[2]
            gl.snapshot(s).to_json()


def test_recording_an_autograd_grad_result_changes_no_number_warning_or_node_order():
    """A gradient autograd.grad hands back with create_graph=True is recorded at the call: the program's values, second
    derivatives, warnings and the sequence numbers of the nodes it makes afterwards are as without graphlens."""
    import contextlib
    import warnings

    def program(ctx):
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(1, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
        x = torch.linspace(0, 1, 3).reshape(-1, 1).requires_grad_()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with ctx():
                u = net(x)
                u_x = torch.autograd.grad(u.sum(), x, create_graph=True)[0]  # (not used again in the block)
                before = (x * 1).grad_fn._sequence_nr()
                gap = (x * 1).grad_fn._sequence_nr() - before
            u_xx = torch.autograd.grad(u_x.sum(), x)[0]
        return u_x.detach(), u_xx, gap, [str(w.message) for w in caught]

    plain, traced = program(contextlib.nullcontext), program(gl.trace)
    assert torch.equal(plain[0], traced[0]) and torch.equal(plain[1], traced[1])
    assert plain[2] == traced[2] and plain[3] == traced[3]
