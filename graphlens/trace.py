"""Recording a program as it runs: a TorchFunctionMode for the forward, node hooks for backward."""

from __future__ import annotations

import inspect
import sys
import threading
from contextlib import contextmanager
from contextvars import ContextVar
from types import FunctionType
from typing import Any, Callable, Iterator, Mapping

import torch
from torch.overrides import TorchFunctionMode

from ._live.attribution import _HANDLE_TORCH_FUNCTION, call_from, caller_of_mode, clean_traceback, forget_callers
from ._checks import check_count, check_flag
from ._live.facts import MAX_ELEMENTS
from ._live.guard import _dispatch_depth, _peek_transform, quiet
from ._live import modestack as _modestack
from ._live.modestack import fast_paths_kept, on_stack as _on_stack, put_at_bottom as _put_at_bottom, take_off_stack as _take_off_stack
from ._live.freeze import freeze
from ._live.recorder import _DETACHES, _TENSOR_PROPERTIES, DETACH, PLAIN, Recorder, func_name, grad_fn_of, sequence_now
from ._util import paused_gc, remove_all as _remove_all, tensors_in
from .graph import Graph
from .names import user_frame

__all__ = ["trace", "Trace"]


#: What reads an autograd error for ``trace(explain_errors=True)``: set by the package
#: (``graphlens.explain.explain_error``), so that recording never imports explaining.
_error_explainer: Callable[[BaseException, "Trace"], Any] | None = None


def set_error_explainer(func: Callable[[BaseException, "Trace"], Any] | None) -> None:
    """Install the function that explains an error escaping a trace (``None``: none)."""
    global _error_explainer
    _error_explainer = func


_Tensor = torch.Tensor
_BACKWARDS = {_Tensor.backward, torch.autograd.backward, torch.autograd.grad}
_DATA_GET = _Tensor.data.__get__  # type: ignore[attr-defined]
_PASS_THROUGH = {"__get__", "__set__", "__repr__", "__format__", "__str__"}
_compiling = getattr(torch.compiler, "is_compiling", None) or (lambda: False)
_jit_tracing = getattr(torch._C, "_get_tracing_state", None) or (lambda: None)
_getframe = sys._getframe
_stack_len = torch._C._len_torch_function_stack
_SUSPENDABLE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR | inspect.CO_ITERABLE_COROUTINE

# How the mode treats each function torch hands it, decided once per function.  _PASS:
# a function that hands back no tensor (a flag, a size, None) and is not a value leaving
# the graph (.item()): called and returned at once, with no line of graphlens after it,
# so an interrupt cannot land between, e.g., torch switching grad mode off inside
# ``no_grad().__enter__`` and the block that switches it back on.
_BACKWARD, _AS_USER, _PASS, _INPLACE, _HOOK = 2, 3, 4, 5, 6
#: In-place calls whose target a trace may not have seen yet: the target is recorded before the
#: call, so that the op is recorded as what changed it (and the value it changed is known).
_AUGMENTED = {"__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__imod__", "__ipow__",
              "__imatmul__", "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__"}
_NOT_INPLACE = {"requires_grad_", "retain_grad", "share_memory_", "rename_", "detach_", "set_", "pin_memory_",
                "record_stream_", "resize_", "resize_as_"}
_KINDS: dict[Any, int] = {torch._C._set_grad_enabled: _PASS}
# torch's own calls that never hand back a tensor (not learned from a first call: Tensor.type
# hands back a str without arguments and a tensor with a dtype).
for _f in (
    _Tensor.dim, _Tensor.size, _Tensor.numel, _Tensor.stride, _Tensor.element_size, _Tensor.is_contiguous,
    _Tensor.is_floating_point, _Tensor.is_complex, _Tensor.data_ptr, _Tensor.storage_offset, _Tensor.nelement,
    _Tensor.ndimension, _Tensor.get_device, _Tensor.__len__, _Tensor.retain_grad,
):
    _KINDS[_f] = _PASS
del _f
_KINDS[_Tensor.register_hook] = _HOOK  # (where a gradient hook was registered: a NaN it makes is named there)


def _inplace_name(name: str) -> bool:
    return name in _AUGMENTED or name == "__setitem__" or (name.endswith("_") and not name.startswith("__") and name not in _NOT_INPLACE)


def _kind(func: Any) -> int:
    if func in _BACKWARDS:
        kind = _BACKWARD
    elif func in _DETACHES:
        kind = DETACH
    elif func_name(func) in _TENSOR_PROPERTIES:
        kind = PLAIN  # .real, .T, ...: a getter that makes a tensor of the graph
    elif getattr(func, "__name__", "") in _PASS_THROUGH:
        # e.g. reading .grad of a non-leaf: its warning must point at the user's line
        kind = _AS_USER
    elif _inplace_name(getattr(func, "__name__", "")):
        kind = _INPLACE
    else:
        kind = PLAIN
    if len(_KINDS) < 8192 and not (type(func) is FunctionType and not func.__module__.startswith("torch")):
        _KINDS[func] = kind  # (torch's functions only: a cache must not keep a user's function alive)
    return kind


#: The traces open in this context (a task, a thread, a ``contextvars.Context``), innermost last.
_OPEN: ContextVar[tuple] = ContextVar("graphlens_open_traces", default=())
#: Per thread: the one mode graphlens puts on torch's stack while traces of the thread are open.
_threads = threading.local()
_modestack._mode_of_thread = lambda: getattr(_threads, "mode", None)


class _Mode(TorchFunctionMode):
    """The mode graphlens keeps on a thread's ``TorchFunctionMode`` stack while any trace of
    that thread is open.  Each call is recorded by the traces open in the calling context
    (asyncio task, thread, ``contextvars`` context) whose block is running now (not a
    suspended generator or coroutine); for everyone else it is a plain pass-through.
    graphlens's own reads run under :func:`graphlens._live.guard.quiet`, so a user's mode or
    subclass sees exactly the program's calls."""

    def __init__(self) -> None:
        super().__init__()
        self.traces: set = set()  # the open traces that use this mode

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        if _compiling() or _jit_tracing() is not None:
            # (checked first: torch.compile traces this very method; torch.jit.trace records
            # every op it sees, so graphlens's own reads must not run while it does)
            return func(*args, **kwargs)
        live = _OPEN.get()
        if not live:
            return func(*args, **kwargs)
        if len(live) == 1:
            t = live[0]
            if t._mode is not self or not t._recording or (t._suspendable is not None and t._suspendable.f_back is None):
                return func(*args, **kwargs)
        else:
            live = _live_here(self, live)
            if not live:
                return func(*args, **kwargs)
        if _peek_transform() is not None:
            # A torch.func transform's calls (like torch.compile's, above) run as plain calls:
            # the code computes exactly what it computes without graphlens, and its result
            # enters the trace as one opaque input, like a tensor made outside.
            return func(*args, **kwargs)
        try:
            kind = _KINDS[func]
        except (KeyError, TypeError):
            kind = _kind(func) if getattr(func, "__hash__", None) is not None else PLAIN
        if kind == _PASS:
            return func(*args, **kwargs)
        if kind == _INPLACE:
            kind = PLAIN
            if args:
                _before_inplace(live, types, args[0])
        elif kwargs and "out" in kwargs:
            _before_inplace(live, types, kwargs["out"])
        # Called from the caller's line (in its globals), so that a warning torch raises
        # names that line, as without graphlens, not this one.
        caller = _getframe(1)
        if caller.f_code is _HANDLE_TORCH_FUNCTION:
            caller = caller_of_mode(caller)
        if kind > DETACH:
            if kind == _BACKWARD:
                return _run_backward(live, caller, func, args, kwargs)
            if kind == _HOOK:
                handle = call_from(caller, func, args, kwargs)
                try:
                    if isinstance(args[0], torch.Tensor):
                        _tell(live, types, "note_hook", args[0], caller)
                finally:
                    del caller
                return handle
            return call_from(caller, func, args, kwargs)
        out = call_from(caller, func, args, kwargs)
        # Record it: unseen by the user's modes and subclasses (torch's guard is needed only
        # where one of them could see a read).  A failure inside graphlens never reaches the
        # user's program: the trace stops recording and says why when its graph is asked
        # for; an interrupt stops it too, and propagates.
        try:
            if types or _stack_len() or _dispatch_depth() or type(out) is not _Tensor:
                with quiet():
                    for t in live:
                        t._rec.record(func, kind, args, kwargs, out, caller)
            else:
                for t in live:
                    t._rec.record(func, kind, args, kwargs, out, caller)
        except Exception as exc:  # noqa: BLE001 - graphlens must never break the user's line
            for t in live:
                t._fail(exc)
        except BaseException as exc:
            for t in live:
                t._fail(exc)
            raise
        finally:
            del caller
        return out


def _before_inplace(live: tuple, types: Any, target: Any) -> None:
    """Record the target of an in-place call (a tensor, or the list a ``_foreach_*_`` op changes)
    before the call, where a trace has not seen it yet: the value it held, then the op that changed it."""
    if type(target) in (list, tuple):
        targets = [t for t in target if isinstance(t, torch.Tensor)]
    elif isinstance(target, torch.Tensor):
        targets = [target]
    else:
        return
    _tell(live, types, "before_inplace", targets)


def _tell(live: tuple, types: Any, note: str, *args: Any) -> None:
    """Call the recorder method ``note`` of each trace in ``live`` (a rare note beside a call:
    its target before an in-place write, where a hook was registered), unseen by the user's
    modes, as :meth:`_Mode.__torch_function__` records a call; a failure stops the traces,
    never the user's line (an interrupt stops them too, and propagates)."""
    try:
        if types or _stack_len() or _dispatch_depth():
            with quiet():
                for t in live:
                    getattr(t._rec, note)(*args)
        else:
            for t in live:
                getattr(t._rec, note)(*args)
    except Exception as exc:  # noqa: BLE001 - graphlens must never break the user's line
        for t in live:
            t._fail(exc)
    except BaseException as exc:
        for t in live:
            t._fail(exc)
        raise


def _live_here(mode: _Mode, traces: tuple) -> tuple:
    """Of several open ``traces``, the ones that record a call made now: on this thread's
    ``mode``, recording, and with their block running (a trace opened inside a generator
    or coroutine does not record what runs while that frame is suspended)."""
    return tuple(
        t for t in traces
        if t._mode is mode and t._recording and (t._suspendable is None or t._suspendable.f_back is not None)
    )


def _exit_nothing(exc_type: Any = None, exc: Any = None, tb: Any = None) -> bool:
    return False


class _SessionExit:
    """``Trace.__exit__``.  The ``with`` statement looks it up on the trace (``__get__``) and
    gets the exit of the trace's generator-based session: leaving the block then runs no
    line of graphlens before that generator's ``finally`` clauses.  Looked up on the class
    (as ``contextlib.ExitStack`` and ``unittest`` do: ``type(cm).__exit__(cm, *exc)``), it
    is a plain function of the trace and the exception."""

    def __get__(self, trace: "Trace | None", owner: type | None = None) -> Callable[..., Any]:
        if trace is None:
            return self
        session = trace._session
        if session is None:
            if trace._exited:
                return _exit_nothing  # (left already: a second exit does nothing)
            session = trace._session = contextmanager(trace._open_session)()
        return session.__exit__

    def __call__(self, trace: "Trace", exc_type: Any = None, exc: Any = None, tb: Any = None) -> bool:
        return self.__get__(trace)(exc_type, exc, tb)


class Trace:
    """What :func:`trace` records; use it as a context manager, then call :meth:`graph`.

    Recording is cheap per op: the forward pass keeps only weak references, flags, the
    head of each new CPU tensor's value and the sequence number of each new backward
    node.  The backward structure (``next`` edges, saved attributes) is read from the
    live nodes when backward runs inside the block and when the graph is taken, so a
    node that died unseen by either keeps only its forward edges.

    A trace belongs to the context that opened it: another asyncio task, thread or
    suspended generator running meanwhile is not recorded.  Traces nest (the outer one
    records what the inner one does, never the inner one's own reads).
    """

    def __init__(
        self,
        *,
        names: Mapping[str, Any] | None = None,
        module: torch.nn.Module | None = None,
        grads: bool = True,
        saved: bool = True,
        max_elements: int = MAX_ELEMENTS,
        explain_errors: bool = False,
    ) -> None:
        if names is not None and not isinstance(names, Mapping):
            raise TypeError(
                f"names must be a dict from name to tensor, e.g. names={{'w': w}}, not {type(names).__name__}"
            )
        for flag, value in (("grads", grads), ("saved", saved), ("explain_errors", explain_errors)):
            check_flag(flag, value)
        check_count("max_elements", max_elements)
        if module is not None and not isinstance(module, torch.nn.Module):
            raise TypeError(f"module must be an nn.Module (the model whose parameters to name), not {type(module).__name__}")
        self._names = names
        self._module = module
        self._explain_errors = explain_errors
        self._rec = Recorder(grads=grads, saved=saved, max_elements=max_elements, first_seq=0)
        self._module_handles: list = []
        self._mode: _Mode | None = None
        self._suspendable: Any = None  # the block's frame, when it is a generator's or coroutine's
        self._thread = threading.get_ident()
        self._session: Any = None
        self._recording = False  # open and healthy: the mode records for it
        self._active = False  # open (between enter and exit)
        self._exited = False
        self._failure: BaseException | None = None
        self._read_once: dict[str, Any] | None = None  # (what graph() and replay() gave, in explain's one_reading)

    # -- context manager --------------------------------------------------------------
    # The ``with`` statement looks ``__exit__`` up before it calls ``__enter__``; the
    # property hands it the exit of a generator-based session, so that leaving the block
    # runs no line of graphlens before the generator's ``finally`` clauses, which undo
    # everything (twice over: an interrupt cutting the first undo short runs the second).
    __exit__ = _SessionExit()

    def __enter__(self) -> "Trace":
        if self._active or self._exited:
            raise RuntimeError("a trace can be entered only once: use a new graphlens.trace() for each recording")
        if self._session is None:
            self._session = contextmanager(self._open_session)()
        return self._session.__enter__()

    def _open_session(self) -> Iterator["Trace"]:
        try:
            try:
                self._open()
                yield self
            except BaseException as exc:
                self._close()
                clean_traceback(exc, _Mode.__torch_function__.__code__, _run_backward.__code__)
                self._on_exit(exc)
                raise
            finally:
                self._close()
        finally:
            self._close()

    def _open(self) -> None:
        rec = self._rec
        rec.frame = frame = user_frame(1)
        rec.code = None if frame is None else frame.f_code
        if frame is not None and frame.f_code.co_flags & _SUSPENDABLE:
            self._suspendable = frame
        rec.first_seq = sequence_now()
        self._thread = threading.get_ident()
        self._active = True
        self._hook_modules()
        fast_paths_kept(self, True)
        mode = getattr(_threads, "mode", None)
        if mode is None:
            mode = _threads.mode = _Mode()
        self._mode = mode
        mode.traces.add(self)
        if not _on_stack(mode):
            _put_at_bottom(mode)
        _OPEN.set(_OPEN.get() + (self,))
        self._recording = True

    def _close(self) -> None:
        """Undo :meth:`_open`, whatever part of it ran: idempotent, and safe to run again
        after an interrupt cut it short."""
        self._recording = False
        if self._active:
            _OPEN.set(tuple(t for t in _OPEN.get() if t is not self))
            mode = self._mode
            if mode is not None:
                mode.traces.discard(self)
                if not mode.traces and threading.get_ident() == self._thread:
                    _take_off_stack(mode)
                    forget_callers()
                # (Closed from another thread, e.g. a generator holding the block closed
                # there: each thread's mode stack is its own, so the mode stays on the
                # opening thread's stack, a pass-through, until that thread opens and
                # closes a trace again.)
            self._unhook_modules()
            fast_paths_kept(self, False)
            self._active = False
            self._exited = True
            rec = self._rec
            if rec.frame is not None and self._failure is None:
                rec.last_lasti = -1
                with quiet():
                    rec.scan_names()  # the block's variables as they stand at its end
            with quiet():
                rec.note_end()  # (versions as the block ends: a change after it is not the trace's to know)
        self._rec.frame = None
        self._suspendable = None
        if self._exited:
            self._session = None  # (the session refers to the trace: no cycle left for the collector)

    def _fail(self, exc: BaseException) -> None:
        """Stop recording: graphlens failed (or was interrupted) while recording a call."""
        self._recording = False
        if self._failure is None:
            self._failure = exc

    def _on_exit(self, exc: BaseException | None) -> None:
        if self._explain_errors and isinstance(exc, (RuntimeError, TypeError, AttributeError)):
            self._add_explanation(exc)

    def _add_explanation(self, exc: RuntimeError) -> None:
        """Attach graphlens's reading of an autograd error to the exception as a note
        (``add_note`` on Python 3.11+, the same ``__notes__`` list before)."""
        if _error_explainer is None:
            return
        try:
            explanation = _error_explainer(exc, self)
            if not isinstance(exc, RuntimeError) and "unknown_error" in getattr(explanation, "reasons", ("unknown_error",)):
                return  # a Python error graphlens has nothing to say about: no note
            text = str(explanation)
        except Exception:  # noqa: BLE001 - explaining must never hide the user's error
            return
        if not text:
            return
        note = "graphlens: " + text
        if hasattr(exc, "add_note"):
            exc.add_note(note)
        else:  # Python 3.10
            notes = getattr(exc, "__notes__", None)
            if not isinstance(notes, list):
                notes = []
                try:
                    exc.__notes__ = notes
                except Exception:  # noqa: BLE001
                    return
            notes.append(note)

    # -- public ------------------------------------------------------------------------
    def graph(self) -> Graph:
        """The recorded graph: every tensor made inside the block, the ops between them,
        detach cuts, no_grad regions and the gradients that flowed during backward.

        Like :func:`graphlens.snapshot`, it describes the tensors as they are when it is
        called: a backward run after the block shows in ``.grad`` (the gradients that
        flowed are recorded only inside the block), and a tensor freed since keeps what
        was recorded of it.  Each call builds a new graph."""
        if not (self._active or self._exited):
            raise RuntimeError("nothing was traced yet: call graph() inside or after a 'with graphlens.trace() as tr:' block")
        failure = self._failure
        if failure is not None:
            raise RuntimeError(
                f"graphlens stopped recording this trace when a call failed inside graphlens "
                f"({type(failure).__name__}: {failure}); your program ran on unchanged, but the records "
                f"are incomplete. Trace the program again; if it happens again, please report it."
            ) from failure
        memo = self._read_once
        if memo is not None and "graph" in memo:
            return memo["graph"]
        with quiet():  # reading values must not record itself, nor show in a user's mode
            if self._active:
                self._rec.last_lasti = -1
                self._rec.scan_names()
            graph = freeze(self._rec, names=self._names, module=self._module)
        if memo is not None:
            memo["graph"] = graph
        return graph

    def replay(self):
        """The backward passes run inside the block, step by step, as PyTorch's engine ran
        them (a :class:`~graphlens.replay.Replay`): observed with hooks on the real nodes,
        never recomputed.  Needs ``grads=True`` (the default)."""
        from .replay import build

        if not self._rec.grads:
            raise RuntimeError("this trace was made with grads=False, so it saw no backward step: use graphlens.trace()")
        memo = self._read_once
        if memo is not None and "replay" in memo:
            return memo["replay"]
        graph = self.graph()
        with quiet(), paused_gc():  # (a record per step and gradient: acyclic, many)
            replay = build(self._rec, graph)
        if memo is not None:
            memo["replay"] = replay
        return replay

    def _op_of_node(self, fn: Any) -> str | None:
        """The id (``"op7"``) of the op this trace recorded for the live backward node ``fn``
        (found by its sequence number and class, as the recorder keys them), else None."""
        if fn is None or type(fn).__name__ == "AccumulateGrad":
            return None
        try:
            j = self._rec.by_seq.get(fn._sequence_nr())
        except Exception:  # noqa: BLE001 - not a node torch numbers
            return None
        if j is None or self._rec.ops[j][0] != type(fn).__name__:
            return None
        return f"op{j}"

    def _split_seq(self) -> int | None:
        """When the last backward call this trace saw failed: the sequence number at which the
        backward call before it began (the nodes made before it have lower numbers), else None."""
        rec = self._rec
        if len(rec.pass_seqs) < 2 or not rec.pass_done or rec.pass_done[-1]:
            return None
        return rec.pass_seqs[-2]

    @property
    def backward_passes(self) -> int:
        """How many backward calls ran inside the block."""
        return self._rec.passes

    # -- module scopes -----------------------------------------------------------------
    def _hook_modules(self) -> None:
        """Forward hooks on every submodule of ``module=`` keep a stack of the submodule
        names that are running, so each op knows its scope (for collapsed diagrams).  The
        hooks sit on the shared model: another thread or task running it meanwhile does
        not push its submodules onto this trace's stack."""
        if self._module is None:
            return
        scopes = self._rec.scopes
        handles = self._module_handles
        for qualname, sub in self._module.named_modules():
            if not qualname:
                continue

            def pre(_mod, _args, name=qualname):
                if self._recording and self in _OPEN.get() and threading.get_ident() == self._thread:
                    scopes.append(name)

            def post(_mod, _args, _out, name=qualname):
                if scopes and scopes[-1] == name and self in _OPEN.get() and threading.get_ident() == self._thread:
                    scopes.pop()

            handles.append(sub.register_forward_pre_hook(pre))
            handles.append(sub.register_forward_hook(post, always_call=True))

    def _unhook_modules(self) -> None:
        handles = self._module_handles
        while handles:
            handles[-1].remove(); handles.pop()  # noqa: E702 - one line: removing twice is harmless, losing one is not
        self._rec.scopes.clear()


# -- backward ----------------------------------------------------------------------------
def _run_backward(traces: tuple, caller, func, args, kwargs):
    """Run the user's backward call once, recorded by every trace in ``traces``: each puts
    its hooks on the graph's nodes first, and every hook is removed afterwards, also on an
    error or an interrupt (the removal is written twice: the second, in an outer
    ``finally``, runs when an interrupt cut the first short)."""
    roots: list = []
    if func is _Tensor.backward:
        roots = [args[0]] if args else [kwargs.get("self")]
    else:
        tensors_in(args[0] if args else kwargs.get("tensors", kwargs.get("outputs")), roots)
    if func is torch.autograd.grad:
        keep = kwargs.get("retain_graph", args[3] if len(args) > 3 else None)
        create = kwargs.get("create_graph", args[4] if len(args) > 4 else False)
    else:
        keep = kwargs.get("retain_graph", args[2] if len(args) > 2 else None)
        create = kwargs.get("create_graph", args[3] if len(args) > 3 else False)
    kept = bool(create if keep is None else keep)
    handles: list = []
    begun: list = []
    done: list = []  # [True] once the user's call returned
    # (The collector is not paused around the user's backward: their hooks run in it, and
    # other threads would see it off.  graphlens's own walk pauses it, in complete().)
    try:
        try:
            with quiet():
                for t in traces:
                    rec = t._rec
                    begun.append(rec)
                    rec.begin_pass(roots, kept=kept, created=bool(create))
                    rec.complete(
                        [grad_fn_of(r) for r in roots if isinstance(r, _Tensor)], handles=handles if rec.grads else None,
                        before_backward=True,
                    )
                    if rec.grads and func is torch.autograd.grad:
                        rec.hook_grad_inputs(args[1] if len(args) > 1 else kwargs.get("inputs"), handles)
            out = call_from(caller, func, args, kwargs)
            done.append(True)
            if func is torch.autograd.grad:
                _note_grad_outputs(traces, out, caller)  # (a call, not a nested try: see _note_grad_outputs)
            return out
        finally:
            _finish(handles, begun, done)
    finally:
        _finish(handles, begun, done)


def _note_grad_outputs(traces: tuple, out: Any, caller: Any) -> None:
    """Record what ``torch.autograd.grad`` handed back, in every trace (a failure stops the
    trace, never the user's line).  A function of its own: in CPython 3.11 the line event of
    a ``try:`` nested in a protected block lies outside every enclosing handler, so an
    interrupt arriving exactly there would skip the caller's ``finally``."""
    try:
        with quiet():
            for t in traces:
                t._rec.note_grad_outputs(out, caller)
    except Exception as exc:  # noqa: BLE001 - graphlens must never break the user's line
        for t in traces:
            t._fail(exc)


def _finish(handles: list, begun: list, done: list) -> None:
    """Remove every hook of ``handles`` and end the pass of every recorder in ``begun``
    (idempotent: what is done is not done again)."""
    _remove_all(handles)
    while begun:
        begun[-1].end_pass(done=bool(done)); begun.pop()  # noqa: E702 - (end_pass ends a pass once)


def trace(
    *,
    names: Mapping[str, Any] | None = None,
    module: torch.nn.Module | None = None,
    grads: bool = True,
    saved: bool = True,
    max_elements: int = MAX_ELEMENTS,
    explain_errors: bool = False,
) -> Trace:
    """Record everything torch computes inside a ``with`` block.

    Unlike :func:`graphlens.snapshot`, which sees only the backward graph, a trace sees
    every tensor made inside the block: intermediates nobody named, tensors that do not
    require grad (``xx = x ** 2``), ``detach()`` cuts, and tensors made inside
    ``torch.no_grad()``.  When backward runs inside the block (``grads=True``), the
    gradient flowing into every recorded tensor is kept, even where PyTorch discards it.
    Nothing is changed: grads are bitwise equal with and without the trace, and every
    hook and the mode are removed on exit, also on an exception.

    ``module=`` names the model's parameters and records, for every op, the submodule
    that ran it (``OpNode.scope``), so diagrams can collapse submodules.
    ``explain_errors=True`` attaches graphlens's explanation of an autograd
    ``RuntimeError`` escaping the block to the exception as a note.

    >>> import torch, graphlens as gl
    >>> with gl.trace() as tr:
    ...     w = torch.tensor([1.0, 2.0], requires_grad=True)
    ...     h = w * 3
    ...     loss = h.sum()
    ...     loss.backward()
    >>> g = tr.graph()
    >>> [str(f) for f in g.find("h").flowed], g.find("h").grad
    (['[1, 1]'], None)
    >>> g.find("w").grad.head
    (3.0, 3.0)
    """
    return Trace(
        names=names, module=module, grads=grads, saved=saved, max_elements=max_elements, explain_errors=explain_errors
    )
