"""Recording a program as it runs: a TorchFunctionMode for the forward, node hooks for backward."""

from __future__ import annotations

import weakref
from functools import partial
from threading import get_ident
from types import FrameType, FunctionType
from typing import Any, Callable, Mapping

import torch
from torch.overrides import TorchFunctionMode

from ._checks import check_count, check_flag
from ._facts import (
    MAX_ELEMENTS, dtype_name, make_summary, plain_shape, read_head, read_saved, same_data, shape_of, tensor_node,
    version_of,
)
from ._safety import guard_teardown
from ._util import paused_gc, tensors_in
from .graph import Edge, Graph, OpNode, TensorNode
from .names import CALLER_NAME, NameBook, frame_candidates, user_frame

__all__ = ["trace", "Trace"]


#: What reads an autograd error for ``trace(explain_errors=True)``: set by the package
#: (``graphlens.explain.explain_error``), so that recording never imports explaining.
_error_explainer: Callable[[BaseException, "Trace"], Any] | None = None


def set_error_explainer(func: Callable[[BaseException, "Trace"], Any] | None) -> None:
    """Install the function that explains an error escaping a trace (``None``: none)."""
    global _error_explainer
    _error_explainer = func
_Tensor = torch.Tensor
_Parameter = torch.nn.Parameter
_DETACHES = {_Tensor.detach, _Tensor.detach_}
_BACKWARDS = {_Tensor.backward, torch.autograd.backward, torch.autograd.grad}
_DATA_GET = _Tensor.data.__get__  # type: ignore[attr-defined]
_CUSTOM_NODE = torch.autograd.function.BackwardCFunction
_PASS_THROUGH = {"__get__", "__set__", "__repr__", "__format__", "__str__"}


_FUNC_NAMES: dict[Any, str] = {}


def _func_name(func: Callable) -> str:
    name = getattr(func, "__name__", None) or repr(func)
    if name in ("__get__", "__set__"):
        owner = getattr(getattr(func, "__self__", None), "__name__", "")
        return f"{owner}.{name}" if owner else name
    if len(_FUNC_NAMES) < 4096 and not isinstance(getattr(func, "__self__", None), _Tensor):
        try:
            _FUNC_NAMES[func] = name  # torch functions and Tensor methods: a small fixed set
        except TypeError:
            pass
    return name


_tensors_in = tensors_in  # one level into lists and tuples, as torch.cat takes


def _grad_fn(t: _Tensor) -> Any:
    """``t.grad_fn``, or None where PyTorch refuses to give it (a view made in no_grad
    whose base was changed in place since): graphlens must not fail where torch works."""
    try:
        return t.grad_fn
    except RuntimeError:
        return None


def _readable(t: _Tensor) -> bool:
    try:
        t.grad_fn
    except RuntimeError:
        return False
    return True


def _sequence_now() -> int:
    """The autograd sequence number the next backward node made on this thread will get."""
    with torch.enable_grad(), torch._C.DisableTorchFunction():  # an enclosing trace must not see it
        probe = torch.zeros((), requires_grad=True).mul(1)
    return probe.grad_fn._sequence_nr() + 1


# A tensor record is one immutable tuple of plain values (indexes below), so the
# garbage collector stops tracking it at its first pass: a trace of many small ops must
# not fill the oldest generation with objects that each full collection walks again.
_SHAPE, _DTYPE, _DEVICE, _IS_LEAF, _REQUIRES_GRAD, _VERSION, _IS_VIEW, _IS_PARAM = range(8)
_OP, _OUTPUT_NR, _DETACHED_FROM, _REGION, _SCOPE = range(8, 13)


def _flow(targets: tuple, pass_nr: int, flowed: list, limit: int, grad_outputs: tuple) -> None:
    """The pre-hook body: note what flows into each recorded output of a node.  It reads
    only a few numbers (spelled out later) and returns None, so grads are untouched."""
    n = len(grad_outputs)
    for nr, i in targets:
        if nr < n:
            g = grad_outputs[nr]
            flowed.append((i, pass_nr, None if g is None else read_head(g, limit)))
    return None


_compiling = getattr(torch.compiler, "is_compiling", None) or (lambda: False)

_CALLERS: dict[tuple[str, int, int], Callable] = {}


def _caller_at(frame: FrameType) -> Callable:
    """A function whose frame stands at ``frame``'s file and line, in its globals: a
    warning torch raises from C++ (attributed to the innermost Python frame) then names
    the user's line and lands in the user's warning registry, exactly as without
    graphlens.  Nothing global changes: no filter, no ``catch_warnings``."""
    code = frame.f_code
    key = (code.co_filename, frame.f_lineno, id(frame.f_globals))
    caller = _CALLERS.get(key)
    if caller is None:
        source = "\n" * max(frame.f_lineno - 1, 0) + f"def {CALLER_NAME}(f, a, k): return f(*a, **k)\n"
        scratch: dict = {}
        exec(compile(source, code.co_filename, "exec", dont_inherit=True), scratch)  # noqa: S102 - a fixed one-liner
        caller = FunctionType(scratch[CALLER_NAME].__code__, frame.f_globals, code.co_name)
        if len(_CALLERS) >= 1024:
            _CALLERS.clear()
        _CALLERS[key] = caller
    return caller


def _as_user(func: Callable, args: tuple, kwargs: dict) -> Any:
    """Call ``func`` so that a warning torch raises in C++ points at the user's line,
    as it would without graphlens, rather than at the line of graphlens that made the call."""
    frame = user_frame(1)
    if frame is None:
        return func(*args, **kwargs)
    try:
        caller = _caller_at(frame)
    finally:
        del frame
    return caller(func, args, kwargs)


class _Mode(TorchFunctionMode):
    def __init__(self, owner: "Trace") -> None:
        super().__init__()
        self.record = owner._record
        self.run_backward = owner._run_backward

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        if _compiling():
            # torch.compile is tracing a compiled function: it sees a plain call, so the
            # compiled code computes exactly what it computes without graphlens; its
            # result enters the trace as one opaque input, like a tensor made outside.
            return func(*args, **kwargs)
        if func in _BACKWARDS:
            return self.run_backward(func, args, kwargs)
        if getattr(func, "__name__", "") in _PASS_THROUGH and func is not _DATA_GET:
            # e.g. reading .grad of a non-leaf: its warning must point at the user's line
            return _as_user(func, args, kwargs)
        out = func(*args, **kwargs)
        self.record(func, args, kwargs, out)
        return out


class Trace:
    """What :func:`trace` records; use it as a context manager, then call :meth:`graph`.

    Recording is cheap per op: the forward pass keeps only weak references, flags and a
    the sequence number of each new backward node.  The backward structure (``next``
    edges, saved attributes) is read from the live nodes when backward runs inside the
    block and when the graph is taken, so a node that died unseen by either keeps only
    its forward edges.
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
        self._grads = grads
        self._saved = saved
        self._max = max_elements
        self._explain_errors = explain_errors
        self._by_seq: dict[int, int] = {}  # a backward node's sequence number -> its op record
        # Tensor records, by index: a weak reference, the facts tuple, the name.
        self._refs: list[weakref.ref] = []
        self._facts: list[tuple] = []
        self._tnames: list[str | None] = []
        self._values: dict[int, Any] = {}  # record -> head of its value when made (CPU tensors)
        self._stale: set[int] = set()  # records replaced by a newer version of their tensor
        self._flowed: list[tuple[int, int, Any]] = []  # (record, backward pass, what flowed)
        # Op records, by index (parallel lists of plain values).
        self._oname: list[str | None] = []
        self._ovar: list[int | None] = []  # an AccumulateGrad's leaf record
        self._owhere: list[tuple] = []  # (forward op name, region, scope)
        self._oout: list[dict[int, int]] = []  # output_nr -> tensor record (latest)
        self._osaved: dict[int, tuple] = {}  # read from the live node at backward / graph time
        self._volatile: dict[int, tuple[int, ...]] = {}  # op -> saved positions backward may free
        self._onext: dict[int, tuple] = {}  # op -> ((input_nr, op index, output_nr), ...)
        self._expanded: set[int] = set()
        self._by_id: dict[int, int] = {}  # id(tensor) -> latest record index (checked by weakref)
        self._roots: list[int] = []
        self._inputs: list[tuple[int, tuple[int, ...]]] = []  # (op index, input tensor indices)
        self._oin: dict[int, tuple[int, ...]] = {}  # op -> its latest input tensor indices
        self._acc: dict[int, int] = {}  # leaf record index -> its AccumulateGrad op index
        self._region: str | None = None
        self._regions = 0
        self._scopes: list[str] = []
        self._module_handles: list = []
        self._passes = 0
        self._first_seq = 0
        self._frame: FrameType | None = None
        self._last_lasti = -1
        self._mode: _Mode | None = None
        self._active = False
        self._exited = False

    # -- context manager --------------------------------------------------------------
    def __enter__(self) -> "Trace":
        if self._active or self._exited:
            raise RuntimeError("a trace can be entered only once: use a new graphlens.trace() for each recording")
        self._frame = user_frame(1)
        self._first_seq = _sequence_now()
        self._hook_modules()
        try:
            self._mode = _Mode(self)
            self._mode.__enter__()
        except BaseException:
            self._unhook_modules()
            self._mode = None
            self._frame = None
            raise
        self._active = True
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            if self._mode is not None:
                self._mode.__exit__(exc_type, exc, tb)
        finally:
            self._unhook_modules()
            self._active = False
            self._mode = None
            try:
                self._last_lasti = -1
                self._scan_names()  # the block's variables as they stand at its end
            finally:
                self._frame = None
                self._exited = True
        if self._explain_errors and isinstance(exc, RuntimeError):
            self._add_explanation(exc)
        return False

    def _add_explanation(self, exc: RuntimeError) -> None:
        """Attach graphlens's reading of an autograd error to the exception as a note
        (``add_note`` on Python 3.11+, the same ``__notes__`` list before)."""
        if _error_explainer is None:
            return
        try:
            text = str(_error_explainer(exc, self))
        except Exception:  # noqa: BLE001 - explaining must never hide the user's error
            return
        if not text:
            return
        note = "graphlens: " + text
        if hasattr(exc, "add_note"):
            exc.add_note(note)
        else:  # pragma: no cover - Python 3.10
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
        with torch._C.DisableTorchFunction():  # reading values must not record itself
            if self._active:
                self._last_lasti = -1
                self._scan_names()
            return self._build()

    @property
    def backward_passes(self) -> int:
        """How many backward calls ran inside the block."""
        return self._passes

    # -- module scopes -----------------------------------------------------------------
    def _scope(self) -> str | None:
        return self._scopes[-1] if self._scopes else None

    def _hook_modules(self) -> None:
        """Forward hooks on every submodule of ``module=`` keep a stack of the submodule
        names that are running, so each op knows its scope (for collapsed diagrams)."""
        if self._module is None:
            return
        scopes = self._scopes
        owner = get_ident()
        try:
            for qualname, sub in self._module.named_modules():
                if not qualname:
                    continue

                # The hooks sit on the shared model: another thread running it must not
                # push its submodules onto this trace's stack.
                def pre(_mod, _args, name=qualname):
                    if get_ident() == owner:
                        scopes.append(name)

                def post(_mod, _args, _out, name=qualname):
                    if get_ident() == owner and scopes and scopes[-1] == name:
                        scopes.pop()

                self._module_handles.append(sub.register_forward_pre_hook(pre))
                self._module_handles.append(sub.register_forward_hook(post, always_call=True))
        except BaseException:
            self._unhook_modules()
            raise

    def _unhook_modules(self) -> None:
        for handle in self._module_handles:
            handle.remove()
        self._module_handles.clear()
        self._scopes.clear()

    # -- recording the forward pass ------------------------------------------------------
    def _region_now(self) -> str | None:
        if torch.is_grad_enabled():
            self._region = None
        elif self._region is None:
            kind = "inference_mode" if torch.is_inference_mode_enabled() else "no_grad"
            self._region = f"{kind}#{self._regions}"
            self._regions += 1
        return self._region

    def _index_of(self, t: _Tensor) -> int | None:
        i = self._by_id.get(id(t))
        if i is not None and self._refs[i]() is t:
            return i
        return None

    def _new_tensor(self, t: _Tensor, op, output_nr: int, detached_from, region, *, external: bool = False) -> int:
        refs = self._refs
        i = len(refs)
        key = id(t)
        old = self._by_id.get(key)
        name = None
        if old is not None and refs[old]() is t:
            self._stale.add(old)
            name = self._tnames[old]
        try:
            is_leaf = t.is_leaf
        except RuntimeError:  # a view torch will not describe (see _grad_fn): no graph of its own
            is_leaf = True
        try:
            shape = tuple(t.shape)
        except RuntimeError:  # a strided nested tensor
            shape = shape_of(t)
        facts = (
            shape, t.dtype, t.device, is_leaf, t.requires_grad, version_of(t), t._is_view(),
            type(t) is _Parameter or (type(t) is not _Tensor and isinstance(t, _Parameter)), op, output_nr,
            detached_from, region,
            None if external or not self._scopes else self._scopes[-1],
        )
        if self._max > 0 and t.is_cpu:
            # A tensor keeps the head of its value as made: the record outlives the tensor,
            # and an older version (before an in-place op) shows what it held then.  (Not
            # on accelerators, where reading would wait for the device.)
            self._values[i] = read_head(t, self._max)
        refs.append(weakref.ref(t))
        self._facts.append(facts)
        self._tnames.append(name)
        self._by_id[key] = i
        return i

    def _input(self, t: _Tensor) -> int:
        """The record of an input tensor, made now if the tensor came from outside."""
        i = self._by_id.get(id(t))
        if i is not None and self._refs[i]() is t:
            f = self._facts[i]
            if f[_REQUIRES_GRAD] or (f[_OP] is not None and self._oname[f[_OP]] is not None):
                return i
            return self._adopted(t, i) if version_of(t) == f[_VERSION] else i
        fn = _grad_fn(t)
        if fn is None:
            return self._new_tensor(t, None, 0, None, None, external=True)
        op = self._op_of(fn, None)
        nr = t.output_nr
        i = self._new_tensor(t, op, nr, None, None, external=True)
        self._oout[op].setdefault(nr, i)
        return i

    def _adopted(self, t: _Tensor, i: int) -> int:
        """The record of ``t``, recorded without grad (record ``i``) and given a backward
        node since, as autograd does to what a custom ``Function.forward`` returns (its
        body runs without grad; ``Function.apply`` is not seen by the mode): a new version
        of the tensor, produced by that node."""
        fn = _grad_fn(t)
        if fn is None:
            return i
        op = self._op_of(fn, None)
        if self._owhere[op][0] is None and isinstance(fn, _CUSTOM_NODE):
            name = self._oname[op] or ""
            self._owhere[op] = (name.removesuffix("Backward") + ".apply", self._region_now(), self._scope())
        nr = t.output_nr
        j = self._new_tensor(t, op, nr, None, None)  # it has a grad_fn: made with grad on
        self._oout[op][nr] = j
        return j

    def _new_op(self, name, forward, region, variable=None, scope=None) -> int:
        j = len(self._oname)
        self._oname.append(name)
        self._ovar.append(variable)
        self._owhere.append((forward, region, scope))
        self._oout.append({})
        return j

    def _op_of(self, fn: Any, forward: str | None, region: str | None = None) -> int:
        """The op record of a backward node, found by the node's autograd sequence number
        (and class), so the trace holds no reference to the node and writes nothing into it."""
        name = type(fn).__name__
        if name == "AccumulateGrad":
            # All AccumulateGrad nodes share one sequence number, and torch rebuilds a
            # leaf's node when the old one died: key it by the leaf.
            vi = self._input(fn.variable)
            j = self._acc.get(vi)
            if j is None:
                j = self._acc[vi] = self._new_op("AccumulateGrad", None, None, variable=vi)
            return j
        seq = fn._sequence_nr()
        j = self._by_seq.get(seq)
        if j is not None and self._oname[j] == name:
            return j
        j = self._new_op(name, forward, region if forward else None, scope=self._scopes[-1] if self._scopes else None)
        self._by_seq[seq] = j
        return j

    def _record(self, func, args, kwargs, out) -> None:
        if isinstance(out, _Tensor):
            outs = [out]
        else:
            outs = []
            _tensors_in(out, outs)
            if not outs:
                return
        frame = self._frame
        if frame is not None and frame.f_lasti != self._last_lasti:
            self._scan_names()
        ins: list = []
        for a in args:
            if isinstance(a, _Tensor):
                ins.append(a)
            elif isinstance(a, (list, tuple)):
                _tensors_in(a, ins)
        if kwargs:
            for a in kwargs.values():
                _tensors_in(a, ins)
        region = self._region_now()
        if func in _DETACHES or func is _DATA_GET:
            src = self._input(ins[0]) if ins else None
            for t in outs:
                self._new_tensor(t, None, 0, src, region)
            return
        in_ids = tuple([self._input(t) for t in ins])
        # An op that hands back one of its inputs unchanged (requires_grad_(), .to() of the
        # same dtype, ...) makes no new tensor; an in-place op makes a new version.
        fresh = []
        by_id, refs, facts = self._by_id, self._refs, self._facts
        for t in outs:
            i = by_id.get(id(t))
            if i is not None and i in in_ids and refs[i]() is t:
                f = facts[i]
                if f[_VERSION] == version_of(t) and (f[_OP] is None) == (_grad_fn(t) is None):
                    continue
            fresh.append(t)
        if not fresh:
            return
        fn = _grad_fn(fresh[0])
        if fn is None and not in_ids:  # a factory (torch.tensor, randn, ...): a plain leaf
            for t in fresh:
                self._new_tensor(t, None, 0, None, region)
            return
        forward = _FUNC_NAMES.get(func) or _func_name(func)
        if fn is not None:
            op = self._op_of(fn, forward, region)
            if self._owhere[op][0] is None:
                self._owhere[op] = (forward, region, self._scope())
        else:
            op = self._new_op(None, forward, region, scope=self._scope())
        self._inputs.append((op, in_ids))
        self._oin[op] = in_ids
        outputs = self._oout[op]
        for k, t in enumerate(fresh):
            nr = t.output_nr if fn is not None and _grad_fn(t) is fn else k
            outputs[nr] = self._new_tensor(t, op, nr, None, region)

    def _scan_names(self) -> None:
        """Name recorded tensors after the variables of the block's frame that hold them
        now; a name rebound later keeps naming the tensor it held first.  The frame is
        read again only once it has moved on (a loop calling the same line is read once)."""
        frame = self._frame
        if frame is None:
            return
        lasti = frame.f_lasti
        if lasti == self._last_lasti:
            return
        self._last_lasti = lasti
        names = self._tnames
        for name, t in frame_candidates(frame, with_globals=False):
            i = self._index_of(t)
            if i is not None and names[i] is None:
                names[i] = name

    # -- reading the backward structure ------------------------------------------------
    def _complete(self, fns: list) -> list[tuple[Any, int]]:
        """Walk the live nodes reachable from ``fns``: record each node's ``next`` edges
        once and read its saved attributes now.  Nodes made before the block are recorded
        but not walked into.  Returns ``(node, op index)`` for every node visited."""
        visited: list[tuple[Any, int]] = []
        seen: set = set()
        stack = [fn for fn in fns if fn is not None]
        first = self._first_seq
        expanded, ovar, osaved, owhere = self._expanded, self._ovar, self._osaved, self._owhere
        volatile = self._volatile
        with paused_gc():
            while stack:
                fn = stack.pop()
                if fn in seen:
                    continue
                seen.add(fn)
                j = self._op_of(fn, None)
                visited.append((fn, j))
                is_acc = ovar[j] is not None
                if self._saved and not is_acc:
                    # Plain saved values never change: only tensors can be freed since.
                    osaved[j], volatile[j] = read_saved(
                        fn, osaved.get(j), volatile.get(j, ()), resolve=partial(self._saved_tensor, j)
                    )
                fresh = j not in expanded
                if is_acc or (fresh and fn._sequence_nr() < first):
                    expanded.add(j)  # made before the block: a boundary
                    continue
                nexts = fn.next_functions
                if fresh:
                    expanded.add(j)
                    links = []
                    for input_nr, (child, output_nr) in enumerate(nexts):
                        if child is not None:
                            k = self._op_of(child, None)
                            forward, region, scope = owhere[k]
                            if scope is None and forward is None:
                                owhere[k] = (forward, region, owhere[j][2])  # e.g. the TBackward0 inside linear
                            links.append((input_nr, k, output_nr))
                    self._onext[j] = tuple(links)
                for child, _ in nexts:
                    if child is not None and child not in seen:
                        stack.append(child)
        guard_teardown(len(seen))
        return visited

    def _saved_tensor(self, j: int, value: _Tensor, _name: str) -> str | None:
        """The record a tensor saved by op ``j`` is: one of the op's own recorded inputs or
        outputs holding the same data (PyTorch hands a saved tensor back as a new object)."""
        near = [*self._oin.get(j, ()), *self._oout[j].values()]
        refs = self._refs
        for i in reversed(near):  # the latest version first
            t = refs[i]()
            if t is not None and same_data(t, value):
                return f"t{i}"
        i = self._index_of(value)
        return None if i is None else f"t{i}"

    def _run_backward(self, func, args, kwargs):
        roots: list = []
        if func is _Tensor.backward:
            roots = [args[0]] if args else [kwargs.get("self")]
        else:
            _tensors_in(args[0] if args else kwargs.get("tensors", kwargs.get("outputs")), roots)
        # Recording makes many small objects while backward runs; collecting them one
        # generation at a time would cost more than the backward pass itself.
        with paused_gc():
            return self._run_backward_paused(func, args, kwargs, roots)

    def _run_backward_paused(self, func, args, kwargs, roots: list):
        handles: list = []
        try:
            for t in roots:
                if isinstance(t, _Tensor):
                    i = self._input(t)
                    if i not in self._roots:
                        self._roots.append(i)
            visited = self._complete([_grad_fn(t) for t in roots if isinstance(t, _Tensor)])
            if self._grads:
                handles = self._hook(visited)
                if func is torch.autograd.grad:
                    handles.extend(self._hook_grad_inputs(args[1] if len(args) > 1 else kwargs.get("inputs")))
            del visited
            return _as_user(func, args, kwargs)
        finally:
            for h in handles:
                h.remove()
            self._passes += 1

    def _hook_grad_inputs(self, inputs: Any) -> list:
        """torch.autograd.grad hands leaf inputs their gradient without running their
        AccumulateGrad node, so a tensor hook records what flows into each of them."""
        found: list = []
        _tensors_in(inputs, found)
        pass_nr, flowed, limit = self._passes, self._flowed, self._max
        handles = []
        for t in found:
            i = self._index_of(t)
            if i is None or not t.is_leaf or not t.requires_grad:
                continue

            def note(grad, i=i):
                flowed.append((i, pass_nr, None if grad is None else read_head(grad, limit)))

            handles.append(t.register_hook(note))
        return handles

    def _hook(self, visited: list[tuple[Any, int]]) -> list:
        """A pre-hook on each visited node that produced a recorded tensor, recording the
        gradient flowing into that tensor.  The hooks return None: grads are untouched."""
        pass_nr, flowed, limit = self._passes, self._flowed, self._max
        ovar, oout = self._ovar, self._oout
        handles = []
        try:
            for fn, j in visited:
                var = ovar[j]
                if var is not None:
                    targets: tuple = ((0, var),)
                else:
                    out = oout[j]
                    if not out:
                        continue
                    targets = tuple(out.items())
                handles.append(fn.register_prehook(partial(_flow, targets, pass_nr, flowed, limit)))
        except BaseException:
            for h in handles:
                h.remove()
            raise
        return handles

    # -- freezing ----------------------------------------------------------------------
    def _flowed_by_tensor(self) -> dict[int, list]:
        """What flowed into each tensor, one Summary per backward pass (None: nothing)."""
        out: dict[int, list] = {}
        for i, pass_nr, head in self._flowed:
            seen = out.get(i)
            if seen is None:
                seen = out[i] = []
            while len(seen) < pass_nr:
                seen.append(None)
            seen.append(None if head is None else make_summary(head))
        for seen in out.values():
            seen.extend([None] * (self._passes - len(seen)))
        return out

    def _build(self) -> Graph:
        with paused_gc():  # freezing makes several small objects per record
            return self._build_paused()

    def _build_paused(self) -> Graph:
        stale = set(self._stale)
        for i, ref in enumerate(self._refs):  # tensors torch will not describe any more
            t = ref()
            if t is not None and i not in stale and not _readable(t):
                stale.add(i)
        t = None
        for i in range(len(self._refs)):
            f = self._facts[i]
            if i not in stale and not f[_REQUIRES_GRAD] and (f[_OP] is None or self._oname[f[_OP]] is None):
                t = self._refs[i]()
                if t is not None and version_of(t) == f[_VERSION] and t.grad_fn is not None:
                    self._adopted(t, i)
        t = None
        alive = []
        for i, ref in enumerate(self._refs):
            t = ref()
            if t is not None and i not in stale:
                fn = t.grad_fn
                if fn is not None:
                    alive.append(fn)
        t = fn = None
        self._complete(alive)
        del alive
        flowed = self._flowed_by_tensor()
        book = NameBook()
        try:
            book.add_explicit(self._names)
            book.add_module(self._module)
            param_scopes: dict[int, str | None] = {}
            if self._module is not None:
                for qualname, sub in self._module.named_modules():
                    for p in sub.parameters(recurse=False):
                        param_scopes.setdefault(id(p), qualname or None)
            tensors: list[TensorNode] = []
            refs: dict[str, weakref.ref] = {}
            for i, (ref, f, name) in enumerate(zip(self._refs, self._facts, self._tnames)):
                tid = f"t{i}"
                t = None if i in stale else ref()
                scope = f[_SCOPE]
                op = f[_OP]
                detached = f[_DETACHED_FROM]
                extra = dict(
                    op=None if op is None else f"op{op}",
                    flowed=tuple(flowed.get(i, ())),
                    detached_from=None if detached is None else f"t{detached}",
                    region=f[_REGION],
                )
                if t is not None:
                    name = book.name_of(t) or name
                    if scope is None and param_scopes:
                        scope = param_scopes.get(id(t))
                    node = tensor_node(t, tid, name, output_nr=f[_OUTPUT_NR], max_elements=self._max, scope=scope, **extra)
                    refs[tid] = ref
                else:
                    made = self._values.get(i)
                    node = TensorNode(
                        tid, name, plain_shape(f[_SHAPE]), dtype_name(f[_DTYPE]), str(f[_DEVICE]), f[_IS_LEAF], f[_REQUIRES_GRAD],
                        version=f[_VERSION], is_view=f[_IS_VIEW], output_nr=f[_OUTPUT_NR], is_parameter=f[_IS_PARAM],
                        value=None if made is None else make_summary(made), scope=scope, **extra,
                    )
                tensors.append(node)
            t = None
        finally:
            book.close()
        osaved = self._osaved
        ops = [
            OpNode(
                f"op{j}", name, forward, osaved.get(j, ()),
                None if var is None else f"t{var}",
                region,
                scope if var is None else tensors[var].scope,
            )
            for j, (name, var, (forward, region, scope)) in enumerate(zip(self._oname, self._ovar, self._owhere))
        ]
        edges: list[Edge] = []
        onext = self._onext
        for j in range(len(ops)):
            for input_nr, k, output_nr in onext.get(j, ()):
                edges.append(Edge(f"op{j}", f"op{k}", "next", input_nr, output_nr))
        for j, in_ids in self._inputs:
            for input_nr, i in enumerate(in_ids):
                edges.append(Edge(f"t{i}", f"op{j}", "input", input_nr, 0))
        for i, f in enumerate(self._facts):
            if f[_OP] is not None:
                edges.append(Edge(f"op{f[_OP]}", f"t{i}", "output", 0, f[_OUTPUT_NR]))
            if f[_DETACHED_FROM] is not None:
                edges.append(Edge(f"t{f[_DETACHED_FROM]}", f"t{i}", "detach"))
        roots = [f"t{i}" for i in self._roots]
        if not roots:
            consumed = {e.src for e in edges if e.kind in ("input", "detach")}
            roots = [t.id for t in tensors if t.id not in consumed and t.op is not None]
        return Graph(tensors, ops, edges, roots, source="trace", refs=refs)


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
