"""graphlens is invisible to the user's own extensions: modes, subclasses, transforms, tasks, generators, interrupts."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import os
import sys
import threading
import weakref

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import graphlens as gl

TRACE = sys.modules["graphlens.trace"]


class CallLog(TorchFunctionMode):
    """A user's TorchFunctionMode that logs every call it sees."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls.append(getattr(func, "__qualname__", repr(func)))
        return func(*args, **(kwargs or {}))


class AtenLog(TorchDispatchMode):
    """A user's TorchDispatchMode that logs every aten op it sees."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def program() -> torch.Tensor:
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    x = torch.tensor([3.0, 4.0])
    h = w * x
    y = h.detach()
    with torch.no_grad():
        z = h * 2
    loss = (h * h).sum() + (y * z).sum()
    loss.backward()
    return w


def test_a_users_function_mode_sees_exactly_the_programs_calls():
    """A TorchFunctionMode entered before (or inside) a trace logs the very calls, in order,
    that it logs without graphlens: none of graphlens's reads (heads, tolist, item, flags)."""
    with CallLog() as plain:
        program()
    with CallLog() as outside:
        with gl.trace() as tr:
            w = program()
    assert tr.graph().find("w").grad.head == (18.0, 64.0)  # (and the trace still recorded)
    with gl.trace() as tr2:
        with CallLog() as inside:
            w = program()
    assert tr2.graph().find("w").grad.head == (18.0, 64.0)
    assert outside.calls == plain.calls
    assert inside.calls == plain.calls


def test_a_users_dispatch_mode_sees_exactly_the_programs_aten_ops():
    """A TorchDispatchMode entered before or inside a trace sees the same aten ops as without
    graphlens: no _local_scalar_dense from graphlens reading a value."""
    with AtenLog() as plain:
        program()
    with AtenLog() as outside:
        with gl.trace() as tr:
            program()
        tr.graph()
    with gl.trace() as tr2:
        with AtenLog() as inside:
            program()
            tr2.graph()
            gl.snapshot(torch.ones(2, requires_grad=True).sum())  # (a snapshot reads too)
    assert outside.ops == plain.ops
    assert [op for op in inside.ops] == plain.ops + ["aten.ones.default", "aten.sum.default"]


def test_a_torch_function_subclass_sees_exactly_the_programs_calls():
    """A __torch_function__ subclass sees the same calls under trace and snapshot as without them."""

    class Seen(torch.Tensor):
        calls: list[str] = []

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            cls.calls.append(getattr(func, "__qualname__", repr(func)))
            return super().__torch_function__(func, types, args, kwargs or {})

    def run(traced: bool) -> list[str]:
        Seen.calls = []
        w = torch.tensor([1.0, 2.0], requires_grad=True).as_subclass(Seen)
        if traced:
            with gl.trace() as tr:
                loss = ((w * 3) ** 2).sum()
                loss.backward()
            tr.graph()
            gl.snapshot(loss)
        else:
            loss = ((w * 3) ** 2).sum()
            loss.backward()
        return list(Seen.calls)

    assert run(True) == run(False)


def test_a_dispatch_subclass_is_traced_without_its_values_being_read():
    """A __torch_dispatch__ wrapper subclass (a logging tensor) runs under trace and snapshot
    with the same log as without graphlens; its values are recorded as unread, never raised."""
    from torch.testing._internal.logging_tensor import LoggingTensor, capture_logs

    def run(traced: bool):
        torch.manual_seed(0)
        x = LoggingTensor(torch.randn(3)).requires_grad_()
        with capture_logs() as logs:
            if traced:
                with gl.trace() as tr:
                    y = (x * 2).sum()
                    y.backward()
                g = tr.graph()
                gl.snapshot(y)
            else:
                y = (x * 2).sum()
                y.backward()
                g = None
        return logs, g

    plain, _ = run(False)
    traced, g = run(True)
    assert traced == plain
    made = [t for t in g.tensors if t.op is not None]
    assert made and all(t.value is not None and t.value.head is None for t in made)
    assert all("__torch_dispatch__" in t.value.unread for t in made)  # (and it says why)


def test_vmap_and_func_grad_inside_a_trace_give_what_they_give_without_it():
    """torch.vmap and torch.func.grad run inside a trace as they do without it (the result
    enters the trace as an input); nothing reads a batched tensor's storage."""
    torch.manual_seed(0)
    xs = torch.randn(4, 3)
    w = torch.randn(3, requires_grad=True)

    def run(traced: bool):
        w.grad = None
        ctx = gl.trace() if traced else _null()
        with ctx:
            y = torch.vmap(lambda x: (x * 2 + 1).sin())(xs)
            g = torch.func.grad(lambda v: (v.sin() ** 2).sum())(xs[0])
            loss = (y * w).sum() + (g * w).sum()
            loss.backward()
        return y, g, w.grad.clone(), ctx

    y0, g0, gw0, _ = run(False)
    y1, g1, gw1, tr = run(True)
    assert torch.equal(y0, y1) and torch.equal(g0, g1) and torch.equal(gw0, gw1)
    graph = tr.graph()
    assert graph.find("w").grad.head == tuple(gw1.tolist())


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_quantized_and_complex32_tensors_are_recorded_not_raised():
    """A quantized tensor and a complex32 (chalf) tensor inside a trace and a snapshot are
    recorded (their values where they can be read) and drawn, never raised at the user."""
    with gl.trace() as tr:
        q = torch.quantize_per_tensor(torch.tensor([0.5, -1.0, 2.0]), 0.1, 0, torch.qint8)
        d = q.dequantize() * 2
        w = torch.tensor([1 + 2j, 3 - 1j], dtype=torch.cfloat).to(torch.chalf).requires_grad_()
        y = w * w
    g = tr.graph()
    assert g.find("q").value.head is None and "quantized" in g.find("q").value.unread  # (not read, and why)
    assert g.find("y").dtype == "complex32"
    assert g.find("d").value.head == (1.0, -2.0, 4.0)
    g.to_dot().source
    snap = gl.snapshot(y)
    assert snap.find("w").value.head == (complex(1, 2), complex(3, -1))
    snap.to_dot().source


def test_nested_traces_record_no_phantom_ops():
    """A trace inside a trace: the outer graph holds the program's ops and nothing of what
    the inner trace read; the inner one holds its own block's ops."""

    def ops(g):
        return sorted(o.forward for o in g.ops if o.forward)

    w = torch.tensor([1.0, 2.0], requires_grad=True)
    with gl.trace() as alone:
        a = w * 2
        b = a.exp()
        lb = b.sum()
        lb.backward()
        c = a.sin()
    w.grad = None
    with gl.trace() as outer:
        a = w * 2
        with gl.trace() as inner:
            b = a.exp()
            lb = b.sum()
            lb.backward()
        c = a.sin()
    assert ops(outer.graph()) == ops(alone.graph()) == ["exp", "mul", "sin", "sum"]
    assert ops(inner.graph()) == ["exp", "sum"]
    assert outer.graph().find("w").grad.head == tuple(w.grad.tolist())
    assert [f.head for f in inner.graph().find("a").flowed] == [f.head for f in outer.graph().find("a").flowed]
    assert torch._C._len_torch_function_stack() == 0


def test_two_asyncio_tasks_each_tracing_keep_their_own_ops():
    """Two asyncio tasks that trace at the same time, interleaving at awaits: each graph
    holds only its own task's ops and gradients."""

    async def task(k: int, fn):
        x = torch.tensor([float(k)], requires_grad=True)
        with gl.trace() as tr:
            y = x * k
            await asyncio.sleep(0)
            z = fn(y)
            await asyncio.sleep(0)
            loss = z.sum()
            loss.backward()
        return tr

    async def main():
        return await asyncio.gather(task(2, torch.exp), task(3, torch.cos))

    a, b = asyncio.run(main())
    ga, gb = a.graph(), b.graph()
    assert sorted(o.forward for o in ga.ops if o.forward) == ["exp", "mul", "sum"]
    assert sorted(o.forward for o in gb.ops if o.forward) == ["cos", "mul", "sum"]
    assert ga.find("x").value.head == (2.0,) and gb.find("x").value.head == (3.0,)
    assert torch._C._len_torch_function_stack() == 0


def test_interleaved_generators_that_trace_keep_their_own_ops():
    """Two generators that each trace, advanced in turn: each graph holds only its own ops
    (not the other's, nor what the caller computes between), and no mode is left behind."""

    def gen(fn):
        x = torch.tensor([1.0], requires_grad=True)
        with gl.trace() as tr:
            y = x * 2
            yield tr
            z = fn(y)
            yield tr
            z.sum().backward()
        yield tr

    g1, g2 = gen(torch.exp), gen(torch.cos)
    t1, t2 = next(g1), next(g2)
    between = torch.ones(1).tan()  # the caller's own op: in no trace
    for g in (g1, g2, g1, g2):
        next(g)
    assert sorted(o.forward for o in t1.graph().ops if o.forward) == ["exp", "mul", "sum"]
    assert sorted(o.forward for o in t2.graph().ops if o.forward) == ["cos", "mul", "sum"]
    assert t1.graph().find("x").grad.head == pytest.approx((2 * 7.389056,))
    assert torch._C._len_torch_function_stack() == 0
    del between


def test_a_context_copied_to_another_thread_records_nothing_there():
    """A context copied into another thread (as asyncio.to_thread does) carries the open
    trace, but ops run in that thread are not recorded: the trace belongs to its thread too."""
    with gl.trace() as tr:
        a = torch.ones(2) * 3
        ctx = contextvars.copy_context()
        worker = threading.Thread(target=ctx.run, args=(lambda: torch.ones(2).cos(),))
        worker.start()
        worker.join()
    assert [o.forward for o in tr.graph().ops if o.forward] == ["mul"]
    del a


def test_a_users_mode_entered_inside_the_trace_and_left_after_it_stays_on_the_stack():
    """A user's mode entered inside a trace and exited after it (crossed blocks): leaving the
    trace takes off graphlens's mode only, the user's mode keeps working, and both end clean."""
    log = CallLog()
    tr = gl.trace()
    tr.__enter__()
    log.__enter__()
    tr.__exit__(None, None, None)
    torch.ones(2).sin()
    assert log.calls[-1].endswith("sin")
    assert torch._C._len_torch_function_stack() == 1
    log.__exit__(None, None, None)
    assert torch._C._len_torch_function_stack() == 0


def test_a_failure_inside_graphlens_never_reaches_the_users_program():
    """An error raised inside graphlens's recording (injected with sys.settrace at the
    recorder's first line) does not stop the user's line: the program runs on with the same
    numbers, and tr.graph() says the records are incomplete and why."""
    recorder = os.path.join(os.path.dirname(gl.__file__), "_live", "recorder.py")
    fired = []

    def tracer(frame, event, arg):
        if frame.f_code.co_filename != recorder:
            return None
        if event == "line" and not fired:
            fired.append(frame.f_lineno)
            raise ValueError("injected")
        return tracer

    w = torch.tensor([1.0, 2.0], requires_grad=True)
    with gl.trace() as tr:
        sys.settrace(tracer)
        try:
            h = w * 3
        finally:
            sys.settrace(None)
        loss = (h * h).sum()
        loss.backward()
    assert fired and torch.equal(w.grad, torch.tensor([18.0, 36.0]))
    with pytest.raises(RuntimeError, match="stopped recording.*ValueError: injected"):
        tr.graph()


def test_a_disabled_garbage_collector_stays_disabled():
    """A trace with a backward pass and a snapshot leave a collector the user disabled disabled."""
    gc.disable()
    try:
        with gl.trace() as tr:
            program()
        tr.graph()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_functions_defined_afresh_are_not_kept_alive():
    """autograd.Function classes defined afresh each step are freed under trace and snapshot,
    as without graphlens: no cache keyed by a class owns the class."""

    def make():
        class Twice(torch.autograd.Function):
            @staticmethod
            def forward(ctx, a):
                ctx.save_for_backward(a)
                return a * 2

            @staticmethod
            def backward(ctx, g):
                (a,) = ctx.saved_tensors
                return g * 2

        return Twice

    for how in ("trace", "snapshot"):
        refs = []
        for _ in range(20):
            fn = make()
            refs.append(weakref.ref(fn))
            x = torch.ones(2, requires_grad=True)
            if how == "trace":
                with gl.trace() as tr:
                    y = fn.apply(x).sum()
                    y.backward()
                tr.graph()
                del tr
            else:
                y = fn.apply(x).sum()
                gl.snapshot(y)
                y.backward()
            del fn, x, y
        gc.collect()
        assert sum(r() is not None for r in refs) == 0, how


# -- interrupts ------------------------------------------------------------------------------
_PKG = os.path.dirname(gl.__file__) + os.sep
#: The trace machinery: every line of these files that the program below runs is a place an
#: interrupt is raised at, in turn.  (Left out: the modules that only build records from
#: records, graph.py, values.py, replay.py: they change no state an interrupt could leave behind.)
MACHINERY = frozenset(
    _PKG + name
    for name in (
        "trace.py", "_live/recorder.py", "_live/frames.py", "_live/backward.py", "_live/capture.py", "_live/facts.py", "_live/storages.py",
        "_live/freeze.py", "_util.py", "_live/guard.py", "names.py", "_live/attribution.py", "_live/safety.py", "snapshot.py", "_live/modestack.py",
        "_live/finite.py", "_live/regions.py", "_live/writes.py",
    )
)


def _root(v: torch.Tensor) -> torch.Tensor:
    return torch.sqrt(v)  # (a call whose own line a trace keeps: a helper's op with an infinite derivative somewhere)


def _interrupted_program(keep: list) -> None:
    torch.manual_seed(0)
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    lin = torch.nn.Linear(2, 2)
    buf = torch.ones(2)  # (written in place as its first use in the block)
    opt = torch.optim.SGD([w], lr=0.0, momentum=0.9)  # (its state is named as the block ends)
    keep[:] = [w, lin]
    with gl.trace(module=lin) as tr:
        keep.append(weakref.ref(tr._rec))
        buf.mul_(2.0)
        buf[0] = 1.0
        x = torch.tensor([3.0, 4.0]) * buf
        h = lin(w * x)
        h.register_hook(lambda g: g)
        with torch.no_grad():
            d = h.detach() * 2
        h.retain_grad()
        loss = (h * h).sum() + d.sum() + _root(w).sum()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = loss + lin(x).sum().float()
        keep.append(loss)
        loss.backward(retain_graph=True)
        torch.autograd.grad(loss, [w])
        opt.step()
        w.data -= 0.0 * w.grad
    tr.graph()
    tr.replay()
    gl.snapshot(loss)


def _lines_run() -> list[tuple[str, int]]:
    hits: dict = {}

    def collect(frame, event, arg):
        if frame.f_code.co_filename not in MACHINERY:
            return None
        if event == "line":
            hits[(frame.f_code.co_filename, frame.f_lineno)] = None
        return collect

    keep: list = []
    _interrupted_program(keep)  # (warm: the caches a first run fills)
    sys.settrace(collect)
    try:
        _interrupted_program(keep)
    finally:
        sys.settrace(None)
    return list(hits)


def _leftovers(keep: list) -> list[str]:
    """What an interrupted run left behind that a clean one does not."""
    problems = []
    if torch._C._len_torch_function_stack():
        problems.append(f"{torch._C._len_torch_function_stack()} mode(s) on torch's stack")
        while torch._C._len_torch_function_stack():
            torch._C._pop_torch_function_stack()
    if not gc.isenabled():
        problems.append("the garbage collector disabled")
        gc.enable()
    if not torch.is_grad_enabled():
        problems.append("grad mode off")
        torch.set_grad_enabled(True)
    if TRACE._OPEN.get():
        problems.append("a trace still open in this context")
    mode = getattr(TRACE._threads, "mode", None)
    if mode is not None and mode.traces:
        problems.append("a trace still using the mode")
        mode.traces.clear()
    if len(keep) >= 2:
        w, lin = keep[0], keep[1]
        if lin._forward_hooks or lin._forward_pre_hooks:
            problems.append("module hooks left")
        if w._backward_hooks:
            problems.append("tensor hooks left")
    rec = [k for k in keep if isinstance(k, weakref.ref)]
    if rec and rec[0]() is not None:
        gc.collect()  # (only when needed: a full collection costs ~0.1 s with torch loaded)
    if rec and rec[0]() is not None:
        problems.append("the recorder kept alive (a node hook left on the graph)")
    return problems


@pytest.mark.slow
def test_an_interrupt_at_any_line_of_the_trace_machinery_leaves_nothing_behind():
    """A KeyboardInterrupt raised (with sys.settrace) at each line of graphlens's trace
    machinery in turn, the first time the line runs: the interrupt itself propagates, and
    no mode is left on torch's stack, the garbage collector and grad mode are as they were,
    every module, tensor and node hook is removed, and no trace stays open."""
    lines = _lines_run()
    assert len(lines) > 500
    failures = []
    for filename, lineno in lines:
        fired: list = []

        def tracer(frame, event, arg, filename=filename, lineno=lineno):
            if frame.f_code.co_filename != filename:
                return None
            if event == "line" and not fired and frame.f_lineno == lineno:
                fired.append(True)
                raise KeyboardInterrupt(f"{filename}:{lineno}")
            return tracer

        keep: list = []
        caught = None
        sys.settrace(tracer)
        try:
            _interrupted_program(keep)
        except BaseException as exc:  # noqa: BLE001 - the very thing under test
            caught = exc
        finally:
            sys.settrace(None)
        problems = []
        if not fired:
            problems.append("line not reached (an earlier run changed what runs)")
        elif not isinstance(caught, KeyboardInterrupt):
            problems.append(f"the interrupt became {type(caught).__name__}: {caught}" if caught else "the interrupt was swallowed")
        caught = None
        problems += _leftovers(keep)
        if problems:
            failures.append(f"{os.path.basename(filename)}:{lineno}: {', '.join(problems)}")
    assert not failures, "\n".join(failures)


def test_torchs_warnings_inside_a_trace_name_the_line_that_called_torch():
    """A warning torch raises inside a trace, from C++ (torch.tensor of a tensor) or from
    Python with stacklevel=2 (softmax without dim), names the same file, line and module as
    without graphlens, not graphlens's own line."""
    import warnings

    def run(traced: bool):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with (gl.trace() if traced else _null()):
                a = torch.ones(2)
                b = torch.tensor(a)  # noqa: F841 - the C++ warning's line
                c = torch.nn.functional.softmax(torch.ones(2, 2))  # noqa: F841 - the Python warning's line
        return [(w.filename, w.lineno, str(w.message)[:40], w.category) for w in caught]

    plain = run(False)
    assert len(plain) == 2 and all(f == __file__ for f, *_ in plain)
    assert run(True) == plain


def test_explain_and_snapshot_are_unseen_by_a_users_mode():
    """explain (of a tensor and of an error), snapshot, to_dot and compare make no call a
    user's TorchFunctionMode can see."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    h = w * 2
    loss = (h * h).sum()
    loss.backward()
    with CallLog() as log:
        gl.explain(h, loss)
        gl.explain(w)
        g = gl.snapshot(loss)
        g.to_dot()
        gl.compare(g, g)
    try:
        loss.backward()
    except RuntimeError as err:
        with CallLog() as log2:
            gl.explain(err)
    assert log.calls == [] and log2.calls == []


def test_a_view_whose_base_changed_under_no_grad_keeps_torchs_engine_order():
    """A view whose base is changed in place under no_grad, then used there: the trace does
    not rebuild the view's stale backward node before torch does, so the engine runs the
    nodes in the same order and the gradients are bitwise equal (law 8 found the program)."""

    def program():
        w0 = torch.ones(3, 3, requires_grad=True)
        h0 = w0[0]
        with torch.no_grad():
            w0.add_(1.0)
            h1 = h0[0]
            h1.tanh()
        loss0 = h1.sum() + w0.sum() + h0.mean()
        loss1 = w0.sum()
        torch.autograd.backward([loss0, loss1])
        return w0.grad

    plain = program()
    with gl.trace() as tr:
        traced = program()
    assert torch.equal(plain, traced)
    tr.graph()
    outside_view = torch.ones(3, 3, requires_grad=True)
    h = outside_view[1]
    with torch.no_grad():
        outside_view.add_(1.0)
    with gl.trace():
        with torch.no_grad():
            h[0].tanh()  # (a view from outside the block, used with grad off)
    assert h.grad_fn is not None



# -- found by a review of the promises (each fails on the code before it) --------------------------
def test_torchs_fused_inference_paths_run_as_without_graphlens():
    """A TransformerEncoder and a MultiheadAttention in eval mode under no_grad give bitwise
    the outputs they give without graphlens (their fused fast path, which any
    TorchFunctionMode on the stack turns off, still runs; a padding mask gives zeros)."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
    enc = torch.nn.TransformerEncoder(layer, num_layers=2).eval()
    mha = torch.nn.MultiheadAttention(16, 2, batch_first=True).eval()
    x = torch.randn(2, 4, 16)
    mask = torch.tensor([[False, False, True, True], [False] * 4])
    with torch.no_grad():
        plain, plain_mha = enc(x, src_key_padding_mask=mask), mha(x, x, x)[0]
        with gl.trace() as tr:
            traced, traced_mha = enc(x, src_key_padding_mask=mask), mha(x, x, x)[0]
    assert torch.equal(plain, traced) and torch.equal(plain_mha, traced_mha)
    assert plain[0, 2:].abs().sum() == 0
    tr.graph()
    enc.train()
    with gl.trace() as tr2:  # (training: the ops are recorded as before)
        enc(x).sum().backward()
    assert sum(1 for o in tr2.graph().ops if o.forward) > 20
    import torch.nn.modules.module as module_hooks

    assert not module_hooks._global_forward_pre_hooks and not module_hooks._global_forward_hooks


def test_torch_jit_trace_inside_a_trace_runs_as_without_it():
    """torch.jit.trace of a model inside a trace runs (no crash), checks its graph, and
    graphlens's reads do not show in it as TracerWarnings."""
    import warnings

    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with gl.trace():
            traced = torch.jit.trace(model, torch.ones(1, 3))
            torch.jit.trace(model, torch.ones(1, 3), check_trace=False)
    assert torch.equal(traced(torch.ones(1, 3)), model(torch.ones(1, 3)))
    assert not [w for w in caught if os.path.dirname(gl.__file__) in (w.filename or "")]


def test_a_trace_enters_and_leaves_through_exitstack_and_unittest():
    """contextlib.ExitStack.enter_context and unittest's enterContext open and close a trace
    (they call type(cm).__exit__ as a function), leaving no mode behind."""
    import contextlib
    import unittest

    with contextlib.ExitStack() as stack:
        tr = stack.enter_context(gl.trace())
        torch.ones(2) * 3
    assert [o.forward for o in tr.graph().ops] == ["mul"]
    assert torch._C._len_torch_function_stack() == 0

    if not hasattr(unittest.TestCase, "enterContext"):  # (unittest has it from Python 3.11)
        return

    class Case(unittest.TestCase):
        def test_it(self):
            self.enterContext(gl.trace())
            torch.ones(2) * 2

    result = unittest.TestResult()
    Case("test_it").run(result)
    assert not result.errors and not result.failures
    assert torch._C._len_torch_function_stack() == 0


def test_a_users_mode_entered_before_and_left_inside_the_trace_is_the_one_popped():
    """A user's mode entered before a trace and left inside its block is popped, as without
    graphlens (graphlens's mode sits under the user's modes), and the trace keeps recording."""
    import contextlib

    stack = contextlib.ExitStack()
    log = stack.enter_context(CallLog())
    with gl.trace() as tr:
        stack.close()
        torch.ones(2) + 1
    torch.ones(2) * 3
    assert log.calls == []
    assert torch._C._len_torch_function_stack() == 0
    assert [o.forward for o in tr.graph().ops] == ["add"]


def test_a_users_mode_sees_the_users_frames_as_its_caller():
    """A user's mode entered before a trace sees the user's own frame as the caller of each
    call (graphlens's mode runs after it, not before)."""
    seen = []

    class Callers(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(sys._getframe(1).f_code.co_name)
            return func(*args, **(kwargs or {}))

    def the_users_function():
        return torch.ones(2) * 2

    with Callers():
        with gl.trace():
            the_users_function()
    assert seen and set(seen) == {"the_users_function"}


def test_a_traceback_through_a_trace_is_the_programs_own():
    """An error raised by an op inside a trace (a shape mismatch, a second backward) has the
    same traceback frames and lines as without graphlens, and its last frame, where a
    post-mortem debugger lands, holds the user's variables."""
    import traceback

    def step(a, b):
        hidden = a * 2
        return hidden @ b

    def failure(traced: bool, fn):
        try:
            with (gl.trace() if traced else _null()):
                fn()
        except RuntimeError as exc:
            frames = [(f.name, f.filename, f.lineno) for f in traceback.extract_tb(exc.__traceback__)]
            last = exc.__traceback__
            while last.tb_next is not None:
                last = last.tb_next
            return frames[1:], sorted(last.tb_frame.f_locals)  # (frame 0 is the with-block's own line)
        raise AssertionError("no error")

    a = torch.ones(2, 3)
    assert failure(True, lambda: step(a, a)) == failure(False, lambda: step(a, a))
    w = torch.ones(2, requires_grad=True)

    def twice():
        loss = (w * w).sum()
        loss.backward()
        loss.backward()

    assert failure(True, twice)[0] == failure(False, twice)[0]


def test_a_tracer_or_debugger_sees_no_call_the_program_did_not_make():
    """With sys.settrace on (a debugger, a coverage tool), a traced program makes no call event
    in the user's file for a function the user never wrote (graphlens's caller frames)."""
    names = set()

    def tracer(frame, event, arg):
        if event == "call" and frame.f_code.co_filename == __file__:
            names.add(frame.f_code.co_name)
        return None

    w = torch.ones(2, requires_grad=True)
    sys.settrace(tracer)
    try:
        with gl.trace():
            h = w * 2
            h.grad  # noqa: B018 - a property read graphlens forwards from the user's line
            h.sum().backward()
    finally:
        sys.settrace(None)
    assert "_graphlens_call" not in names and "<module>" not in names


@pytest.mark.skipif(sys.version_info >= (3, 13), reason="Python 3.13 (PEP 667): exec in a function cannot add to its locals()")
def test_names_made_by_exec_in_a_function_survive_a_snapshot_and_a_trace():
    """A variable a function made with exec (it lives only in the frame's locals dict) is
    still in locals() after a snapshot or a trace read the function's variables."""

    def with_snapshot():
        exec("w = torch.ones(2, requires_grad=True)")
        loss = (locals()["w"] * 3).sum()
        gl.snapshot(loss)
        return sorted(locals())

    def with_trace():
        exec("w = torch.ones(2, requires_grad=True)")
        with gl.trace():
            loss = (locals()["w"] * 3).sum()  # noqa: F841
        return sorted(locals())

    assert with_snapshot() == ["loss", "w"]
    assert "w" in with_trace()


def test_a_hook_that_switches_the_collector_off_in_a_traced_backward_is_obeyed():
    """A backward hook that calls gc.disable() leaves the collector off after a traced
    backward, as after a plain one (graphlens does not pause the collector around the
    user's backward, so it has nothing to switch back on)."""
    w = torch.ones(2, requires_grad=True)
    h = w * 2
    h.register_hook(lambda g: gc.disable())
    try:
        with gl.trace():
            h.sum().backward()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_subclasss_python_methods_are_never_called_by_graphlens():
    """A tensor subclass that overrides item, detach, numel, tolist in Python sees only the
    program's calls of them under trace and snapshot (graphlens calls torch's own methods)."""
    counts: dict = {}

    class Counted(torch.Tensor):
        def _count(self, name):
            counts[name] = counts.get(name, 0) + 1

        def item(self):
            self._count("item")
            return super().item()

        def detach(self):
            self._count("detach")
            return super().detach()

        def numel(self):
            self._count("numel")
            return super().numel()

        def tolist(self):
            self._count("tolist")
            return super().tolist()

    def program():
        x = torch.ones(3, requires_grad=True).as_subclass(Counted)
        y = (x * 2).sum()
        y.numel()
        y.backward()
        return x

    program()
    plain = dict(counts)
    counts.clear()
    with gl.trace() as tr:
        x = program()
    tr.graph()
    gl.snapshot((x * 3).sum())
    assert counts == plain and plain.get("numel")  # (torch's backward itself asks numel)


def test_a_deep_traced_graph_is_freed_safely_in_a_thread_with_a_small_stack():
    """A traced chain of 60,000 ops is freed in a thread with a 512 KiB stack without
    crashing the interpreter (its first nodes are protected once the graph grows deep)."""
    code = (
        "import torch, threading, graphlens as gl\n"
        "x = torch.ones(2, requires_grad=True)\n"
        "with gl.trace() as tr:\n"
        "    y = x\n"
        "    for _ in range(60000):\n"
        "        y = y * 1.0\n"
        "tr.graph()\n"
        "threading.stack_size(512 * 1024)\n"
        "holder = [y]\n"
        "del y, tr\n"
        "t = threading.Thread(target=holder.clear)\n"
        "t.start(); t.join()\n"
        "print('freed')\n"
    )
    import subprocess

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and "freed" in out.stdout, out.stderr[-2000:]


def test_a_warning_frame_costs_the_same_at_any_line_of_a_long_file():
    """The frame graphlens calls torch from at a user's line is the one compiled template
    moved to that line (nothing is compiled per line, so a long file costs no more)."""
    from graphlens._live import attribution as _attribution

    far = _attribution._one_liner("/somewhere/long.py", 1_000_000)
    near = _attribution._one_liner("/somewhere/long.py", 3)
    assert far.co_firstlineno == 1_000_000 and far.co_filename == "/somewhere/long.py"
    assert far.co_code == near.co_code == _attribution._TEMPLATE.co_code


def test_a_call_that_returned_no_tensor_once_is_still_recorded_when_it_does():
    """Tensor.type() hands back a str; Tensor.type(torch.float64) a tensor: after the first,
    the second is still recorded in a trace (no call is learned to be untensored)."""
    w = torch.ones(2, requires_grad=True)
    w.type()
    with gl.trace() as tr:
        d = w.type(torch.float64) * 2  # noqa: F841
    assert "type" in [o.forward for o in tr.graph().ops]


def test_an_inference_mode_tensor_used_after_its_block_is_recorded():
    """A tensor made in torch.inference_mode() inside a trace and used afterwards (it keeps
    no version counter) is recorded, and the graph is built."""
    w = torch.ones(2, requires_grad=True)
    with gl.trace() as tr:
        with torch.inference_mode():
            a = torch.ones(2)
        h = w * 2  # (an op with grad on after the block: the next one takes the common path)
        b = a + h
        c = b * 2  # noqa: F841
    assert [o.forward for o in tr.graph().ops if o.forward] == ["mul", "add", "mul"]


def test_a_generator_closed_from_another_thread_leaves_no_trace_open():
    """A generator that holds a trace's block open, closed from another thread, closes the
    trace (nothing more is recorded); graphlens's mode left on the opening thread's stack is
    taken off by the next trace that thread opens and closes."""

    def batches():
        with gl.trace() as tr:
            for i in range(10):
                yield tr, torch.ones(2) * i

    gen = batches()
    tr, _ = next(gen)
    holder = [gen]
    del gen
    worker = threading.Thread(target=lambda: holder.pop().close())
    worker.start()
    worker.join()
    torch.ones(2) * 5
    assert [o.forward for o in tr.graph().ops] == ["mul"]
    with gl.trace():
        torch.ones(1) + 1
    assert torch._C._len_torch_function_stack() == 0


def test_a_retained_view_changed_through_an_alias_keeps_its_grad_under_trace_and_snapshot():
    """A view whose retain_grad hook sits on a node made stale by an in-place write through a
    detached alias gets the same .grad under trace() and after snapshot() as plainly (reading its
    grad_fn or is_leaf would rebuild the node and move the hook off the graph; found by law 8)."""

    def program(watch):
        w0 = torch.tensor([1.0], requires_grad=True)
        h0 = w0[0]
        d1 = h0.detach()
        h0.retain_grad()
        loss = h0.tanh().sum()
        d1.add_(1.0)
        watch(loss, h0)
        loss.backward()
        return h0.grad, w0.grad

    plain = program(lambda loss, h0: None)
    with gl.trace():
        traced = program(lambda loss, h0: None)
    snapped = program(lambda loss, h0: gl.snapshot(loss, names={"h0": h0}))
    for got in (traced, snapped):
        assert got[0] is not None and torch.equal(got[0], plain[0]) and torch.equal(got[1], plain[1])


def _stale_retained_view(ask):
    """The program of the test above, with ``ask(trace, loss, h0)`` run after the in-place write
    through the alias and before backward; returns ``(h0.grad, what ask returned)``."""
    with gl.trace() as tr:
        w0 = torch.tensor([1.0], requires_grad=True)
        h0 = w0[0]
        d1 = h0.detach()
        h0.retain_grad()
        loss = h0.tanh().sum()
        d1.add_(1.0)
    answer = ask(tr, loss, h0)
    loss.backward()
    return h0.grad, answer


def _h0_grad_in_a_type_error(tr, loss, h0):
    try:
        h0.grad * 2  # (None before backward: a TypeError)
    except TypeError as exc:
        return gl.explain(exc)
    raise AssertionError("h0.grad * 2 did not fail")


@pytest.mark.parametrize("ask", [
    lambda tr, loss, h0: tr.graph(),
    lambda tr, loss, h0: gl.explain(h0, loss),
    lambda tr, loss, h0: gl.explain(h0, tr),
    lambda tr, loss, h0: gl.explain("h0", tr),
    _h0_grad_in_a_type_error,
], ids=["graph", "explain-live", "explain-trace", "explain-name", "explain-error"])
def test_asking_about_a_stale_retained_view_before_backward_keeps_its_grad(ask):
    """tr.graph(), explain() and explain(exc) called between the in-place write through an alias
    and backward leave the retained view's .grad as plain torch gives it."""
    plain, _ = _stale_retained_view(lambda tr, loss, h0: None)
    got, _ = _stale_retained_view(ask)
    assert plain is not None and got is not None and torch.equal(got, plain)


def test_explain_of_a_stale_retained_view_says_what_it_does_not_read():
    """Asked about such a view with a live root, explain answers from what it can read safely:
    its own reason, the tensor's name, its .grad as it stands."""
    _, before = _stale_retained_view(lambda tr, loss, h0: gl.explain(h0, loss))
    assert before.reasons == ("retained_view_unread",) and before.tensor_name == "h0"
    assert "None now" in str(before) and "version 1" in str(before)


def _carried_state_error_beside_a_stale_view(ask):
    """A module carries its state across steps (backward with retain_graph, then a step) and also
    keeps a stale retained view as an attribute; ``ask(exc)`` runs on the in-place error, then a
    backward through the view; returns ``(the view's .grad, what ask returned)``."""
    torch.manual_seed(0)
    holder = torch.nn.Module()
    holder.cell = torch.nn.Linear(2, 2)
    holder.state = torch.zeros(1, 2)
    w0 = torch.tensor([1.0], requires_grad=True)
    h0 = w0[0]
    d1 = h0.detach()
    h0.retain_grad()
    side = h0.tanh().sum()
    d1.add_(1.0)
    holder.peek = h0
    opt = torch.optim.SGD(holder.cell.parameters(), lr=0.1, momentum=0.9)
    answer = None
    for _ in range(4):
        opt.zero_grad()
        holder.state = holder.cell(holder.state)
        try:
            holder.state.pow(2).sum().backward(retain_graph=True)
        except RuntimeError as exc:
            answer = ask(exc)
            break
        opt.step()
    side.backward()
    return h0.grad, answer


def test_explaining_a_carried_state_error_leaves_a_module_kept_stale_view_its_grad():
    """explain_error, looking through a module's attributes for the carried state, does not read the
    node of a stale retained view the module keeps: the view's .grad is what plain torch gives."""
    plain, _ = _carried_state_error_beside_a_stale_view(lambda exc: None)
    got, e = _carried_state_error_beside_a_stale_view(gl.explain_error)
    assert e is not None and "carried_state" in e.reasons, e
    assert plain is not None and got is not None and torch.equal(got, plain)


class _Proxy:
    """A proxy object of the program's: every attribute it is asked for is logged (and forwarded)."""

    def __init__(self, target, log):
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_log", log)

    def __getattr__(self, name):
        object.__getattribute__(self, "_log").append(name)
        return getattr(object.__getattribute__(self, "_target"), name)

    @property
    def __class__(self):  # (a proxy that passes for what it wraps, as mocks and lazy proxies do)
        object.__getattribute__(self, "_log").append("__class__")
        return type(object.__getattribute__(self, "_target"))


class _Slotted:
    """An object without an instance dict whose __getattr__ logs every lookup."""

    __slots__ = ("log",)

    def __getattr__(self, name):
        object.__getattribute__(self, "log").append(name)
        raise AttributeError(name)


def test_objects_in_the_frames_are_read_without_running_their_code():
    """Naming and explaining read an object's own dict without its code: a proxy's __getattr__ and
    __class__, and a slotted object's __getattr__, are never called by snapshot, trace or explain."""
    log: list[str] = []
    holder = _Slotted()
    holder.log = log
    model = torch.nn.Linear(2, 1)
    proxy = _Proxy(model, log)  # noqa: F841 - (held in the frame graphlens reads)
    x = torch.ones(3, 2)
    with gl.trace() as tr:
        loss = model(x).sum()
        loss.backward()
    gl.snapshot(loss)
    gl.explain(model.weight, loss)
    gl.explain(model.weight, tr)
    try:
        (loss * 2).backward()
    except RuntimeError as err:
        gl.explain(err)
    assert log == [], log
