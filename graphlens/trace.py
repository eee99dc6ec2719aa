"""Recording a program as it runs: a TorchFunctionMode for the forward, node hooks for backward."""

from __future__ import annotations

import gc
import itertools
import weakref
from types import FrameType
from typing import Any, Callable, Mapping

import torch
from torch.overrides import TorchFunctionMode

from ._facts import MAX_ELEMENTS, dtype_name, saved_attributes, summarize, tensor_node
from ._safety import guard_teardown
from .graph import Edge, Graph, OpNode, TensorNode
from .names import NameBook, frame_candidates, user_frame

__all__ = ["trace", "Trace"]

_TOKENS = itertools.count()
_Tensor = torch.Tensor
_Parameter = torch.nn.Parameter
_DETACHES = {_Tensor.detach, _Tensor.detach_}
_BACKWARDS = {_Tensor.backward, torch.autograd.backward, torch.autograd.grad}
_DATA_GET = _Tensor.data.__get__  # type: ignore[attr-defined]
_PASS_THROUGH = {"__get__", "__set__", "__repr__", "__format__", "__str__"}


def _func_name(func: Callable) -> str:
    name = getattr(func, "__name__", None) or repr(func)
    if name in ("__get__", "__set__"):
        owner = getattr(getattr(func, "__self__", None), "__name__", "")
        return f"{owner}.{name}" if owner else name
    return name


def _tensors_in(obj: Any, out: list) -> None:
    """The tensors of ``obj``, one level into lists and tuples (as ``torch.cat`` takes)."""
    if isinstance(obj, _Tensor):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            if isinstance(item, _Tensor):
                out.append(item)
            elif isinstance(item, (list, tuple)):
                out.extend(i for i in item if isinstance(i, _Tensor))


def _sequence_now() -> int:
    """The autograd sequence number the next backward node made on this thread will get."""
    with torch.enable_grad():
        probe = torch.zeros((), requires_grad=True).mul(1)
    return probe.grad_fn._sequence_nr() + 1


class _T:
    """A tensor record while tracing; frozen into a TensorNode by ``graph()``."""

    __slots__ = ("ref", "name", "facts", "op", "output_nr", "flowed", "detached_from", "region", "latest", "scope")

    def __init__(self, ref, facts, op, output_nr, detached_from, region, scope) -> None:
        self.ref = ref
        self.name: str | None = None
        self.facts = facts  # (shape, dtype, device, is_leaf, requires_grad, version, is_view, is_parameter)
        self.op = op
        self.output_nr = output_nr
        self.flowed: list[str] = []
        self.detached_from = detached_from
        self.region = region
        self.latest = True
        self.scope = scope


class _O:
    """An op record while tracing."""

    __slots__ = ("name", "forward", "region", "variable", "saved", "next", "outputs", "scope", "expanded")

    def __init__(self, name, forward, region, variable=None, scope=None) -> None:
        self.name = name
        self.forward = forward
        self.region = region
        self.variable = variable
        self.scope = scope
        self.saved: tuple = ()
        self.next: list[tuple[int, int, int]] = []  # (input_nr, op index, output_nr)
        self.outputs: dict[int, int] = {}  # output_nr -> tensor record index (latest)
        self.expanded = False


class _Mode(TorchFunctionMode):
    def __init__(self, owner: "Trace") -> None:
        super().__init__()
        self.owner = owner

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _BACKWARDS:
            return self.owner._run_backward(func, args, kwargs)
        if getattr(func, "__name__", "") in _PASS_THROUGH and func is not _DATA_GET:
            return func(*args, **kwargs)
        out = func(*args, **kwargs)
        self.owner._record(func, args, kwargs, out)
        return out


class Trace:
    """What :func:`trace` records; use it as a context manager, then call :meth:`graph`.

    Recording is cheap per op: the forward pass keeps only weak references, flags and a
    tag in each new backward node's ``metadata``.  The backward structure (``next``
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
        if module is not None and not isinstance(module, torch.nn.Module):
            raise TypeError(f"module must be an nn.Module (the model whose parameters to name), not {type(module).__name__}")
        self._names = names
        self._module = module
        self._grads = grads
        self._saved = saved
        self._max = max_elements
        self._explain_errors = explain_errors
        self._key = f"graphlens.trace#{next(_TOKENS)}"
        self._tensors: list[_T] = []
        self._ops: list[_O] = []
        self._by_id: dict[int, int] = {}  # id(tensor) -> latest record index (checked by weakref)
        self._roots: list[int] = []
        self._inputs: list[tuple[int, list[int]]] = []  # (op index, input tensor indices)
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
        self._frozen: Graph | None = None

    # -- context manager --------------------------------------------------------------
    def __enter__(self) -> "Trace":
        if self._active or self._frozen is not None:
            raise RuntimeError("a trace can be entered only once: use a new graphlens.trace() for each recording")
        self._frame = user_frame(1)
        self._first_seq = _sequence_now()
        self._hook_modules()
        try:
            self._mode = _Mode(self)
            self._mode.__enter__()
        except BaseException:
            self._unhook_modules()
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
                self._scan_names()
                self._frozen = self._build()
            finally:
                self._frame = None
        if self._explain_errors and isinstance(exc, RuntimeError):
            self._add_explanation(exc)
        return False

    def _add_explanation(self, exc: RuntimeError) -> None:
        """Attach graphlens's reading of an autograd error to the exception as a note."""
        try:
            from .explain import explain_error

            text = str(explain_error(exc, self))
        except Exception:  # noqa: BLE001 - explaining must never hide the user's error
            return
        if text and hasattr(exc, "add_note"):
            exc.add_note("graphlens: " + text)

    # -- public ------------------------------------------------------------------------
    def graph(self) -> Graph:
        """The recorded graph: every tensor made inside the block, the ops between them,
        detach cuts, no_grad regions and the gradients that flowed during backward."""
        if self._frozen is not None:
            return self._frozen
        if not self._active:
            raise RuntimeError("nothing was traced yet: call graph() inside or after a 'with graphlens.trace() as tr:' block")
        with torch._C.DisableTorchFunction():  # reading values must not record itself
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
        for qualname, sub in self._module.named_modules():
            if not qualname:
                continue

            def pre(_mod, _args, name=qualname):
                scopes.append(name)

            def post(_mod, _args, _out, name=qualname):
                if scopes and scopes[-1] == name:
                    scopes.pop()

            self._module_handles.append(sub.register_forward_pre_hook(pre))
            self._module_handles.append(sub.register_forward_hook(post, always_call=True))

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
        if i is not None and self._tensors[i].ref() is t:
            return i
        return None

    def _new_tensor(self, t: _Tensor, op, output_nr: int, detached_from, region, *, external: bool = False) -> int:
        i = len(self._tensors)
        old = self._index_of(t)
        facts = (
            tuple(t.shape), t.dtype, t.device, t.is_leaf, t.requires_grad, t._version, t._is_view(),
            isinstance(t, _Parameter),
        )
        rec = _T(weakref.ref(t), facts, op, output_nr, detached_from, region, None if external else self._scope())
        if old is not None:
            self._tensors[old].latest = False
            rec.name = self._tensors[old].name
        self._tensors.append(rec)
        self._by_id[id(t)] = i
        return i

    def _input(self, t: _Tensor) -> int:
        """The record of an input tensor, made now if the tensor came from outside."""
        i = self._index_of(t)
        if i is None:
            fn = t.grad_fn
            op = None if fn is None else self._op_of(fn, None)
            i = self._new_tensor(t, op, t.output_nr if fn is not None else 0, None, None, external=True)
            if op is not None:
                self._ops[op].outputs.setdefault(t.output_nr, i)
        return i

    def _op_of(self, fn: Any, forward: str | None) -> int:
        """The op record of a backward node.  Its index is kept in the node's own
        ``metadata`` dict, so the trace holds no reference to the node."""
        meta = fn.metadata
        j = meta.get(self._key)
        if j is not None:
            return j
        if type(fn).__name__ == "AccumulateGrad":
            # torch rebuilds a leaf's AccumulateGrad node when the old one died: key it by the leaf.
            vi = self._input(fn.variable)
            j = self._acc.get(vi)
            if j is None:
                j = self._acc[vi] = len(self._ops)
                self._ops.append(_O("AccumulateGrad", None, None, variable=vi))
        else:
            j = len(self._ops)
            region = self._region_now() if forward else None
            self._ops.append(_O(type(fn).__name__, forward, region, scope=self._scope()))
        meta[self._key] = j
        return j

    def _record(self, func, args, kwargs, out) -> None:
        outs: list = []
        _tensors_in(out, outs)
        if not outs:
            return
        self._scan_names()
        ins: list = []
        for a in args:
            _tensors_in(a, ins)
        for a in kwargs.values():
            _tensors_in(a, ins)
        region = self._region_now()
        if func in _DETACHES or func is _DATA_GET:
            src = self._input(ins[0]) if ins else None
            for t in outs:
                self._new_tensor(t, None, 0, src, region)
            return
        in_ids = [self._input(t) for t in ins]
        # An op that hands back one of its inputs unchanged (requires_grad_(), .to() of the
        # same dtype, ...) makes no new tensor; an in-place op makes a new version.
        fresh = []
        for t in outs:
            i = self._index_of(t)
            if i is not None and i in in_ids:
                rec = self._tensors[i]
                if rec.facts[5] == t._version and (rec.op is None) == (t.grad_fn is None):
                    continue
            fresh.append(t)
        if not fresh:
            return
        fn = fresh[0].grad_fn
        if fn is None and not in_ids:  # a factory (torch.tensor, randn, ...): a plain leaf
            for t in fresh:
                self._new_tensor(t, None, 0, None, region)
            return
        forward = _func_name(func)
        if fn is not None:
            op = self._op_of(fn, forward)
            o = self._ops[op]
            if o.forward is None:
                o.forward, o.region, o.scope = forward, region, self._scope()
        else:
            op = len(self._ops)
            o = _O(None, forward, region, scope=self._scope())
            self._ops.append(o)
        self._inputs.append((op, in_ids))
        for k, t in enumerate(fresh):
            nr = t.output_nr if fn is not None and t.grad_fn is fn else k
            o.outputs[nr] = self._new_tensor(t, op, nr, None, region)

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
        for name, t in frame_candidates(frame, with_globals=False):
            i = self._index_of(t)
            if i is not None and self._tensors[i].name is None:
                self._tensors[i].name = name

    # -- reading the backward structure ------------------------------------------------
    def _complete(self, fns: list) -> list[tuple[Any, int]]:
        """Walk the live nodes reachable from ``fns``: record each node's ``next`` edges
        once and read its saved attributes now.  Nodes made before the block are recorded
        but not walked into.  Returns ``(node, op index)`` for every node visited."""
        visited: list[tuple[Any, int]] = []
        seen: set = set()
        stack = [fn for fn in fns if fn is not None]
        first = self._first_seq
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            while stack:
                fn = stack.pop()
                if fn in seen:
                    continue
                seen.add(fn)
                j = self._op_of(fn, None)
                o = self._ops[j]
                visited.append((fn, j))
                is_acc = o.variable is not None
                if self._saved and not is_acc:
                    o.saved = saved_attributes(fn)
                if is_acc or (not o.expanded and fn._sequence_nr() < first):
                    o.expanded = True  # made before the block: a boundary
                    continue
                nexts = fn.next_functions
                if not o.expanded:
                    o.expanded = True
                    for input_nr, (child, output_nr) in enumerate(nexts):
                        if child is not None:
                            k = self._op_of(child, None)
                            if self._ops[k].scope is None and self._ops[k].forward is None:
                                self._ops[k].scope = o.scope  # e.g. the TBackward0 inside linear
                            o.next.append((input_nr, k, output_nr))
                for child, _ in nexts:
                    if child is not None and child not in seen:
                        stack.append(child)
        finally:
            if gc_was_enabled:
                gc.enable()
        guard_teardown(len(seen))
        return visited

    def _run_backward(self, func, args, kwargs):
        roots: list = []
        if func is _Tensor.backward:
            roots = [args[0]] if args else [kwargs.get("self")]
        else:
            _tensors_in(args[0] if args else kwargs.get("tensors", kwargs.get("outputs")), roots)
        handles: list = []
        # Recording makes many small objects while backward runs; collecting them one
        # generation at a time would cost more than the backward pass itself.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            for t in roots:
                if isinstance(t, _Tensor):
                    i = self._input(t)
                    if i not in self._roots:
                        self._roots.append(i)
            visited = self._complete([t.grad_fn for t in roots if isinstance(t, _Tensor)])
            if self._grads:
                handles = self._hook(visited)
            return func(*args, **kwargs)
        finally:
            for h in handles:
                h.remove()
            self._passes += 1
            if gc_was_enabled:
                gc.enable()

    def _hook(self, visited: list[tuple[Any, int]]) -> list:
        """A pre-hook on each visited node that produced a recorded tensor, recording the
        gradient flowing into that tensor.  The hooks return None: grads are untouched."""
        pass_nr = self._passes
        handles = []
        for fn, j in visited:
            o = self._ops[j]
            targets = {0: o.variable} if o.variable is not None else dict(o.outputs)
            if targets:
                handles.append(fn.register_prehook(self._make_hook(targets, pass_nr)))
        return handles

    def _make_hook(self, targets: dict[int, int], pass_nr: int):
        tensors = self._tensors
        limit = self._max

        def hook(grad_outputs):
            for nr, i in targets.items():
                if nr < len(grad_outputs):
                    rec = tensors[i]
                    while len(rec.flowed) < pass_nr:
                        rec.flowed.append("-")
                    rec.flowed.append(summarize(grad_outputs[nr], limit) or "None")
            return None

        return hook

    # -- freezing ----------------------------------------------------------------------
    def _build(self) -> Graph:
        alive = []
        for rec in self._tensors:
            t = rec.ref() if rec.latest else None
            if t is not None and t.grad_fn is not None:
                alive.append(t.grad_fn)
        self._complete(alive)
        del alive
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
            for i, rec in enumerate(self._tensors):
                tid = f"t{i}"
                t = rec.ref() if rec.latest else None
                name = rec.name
                scope = rec.scope
                if t is not None:
                    name = book.name_of(t) or name
                    node = tensor_node(t, tid, name, output_nr=rec.output_nr, max_elements=self._max)
                    refs[tid] = rec.ref
                    if scope is None:
                        scope = param_scopes.get(id(t))
                else:
                    shape, dtype, device, is_leaf, requires_grad, version, is_view, is_param = rec.facts
                    node = TensorNode(
                        tid, name, shape, dtype_name(dtype), str(device), is_leaf, requires_grad,
                        version=version, is_view=is_view, output_nr=rec.output_nr, is_parameter=is_param,
                    )
                flowed = rec.flowed + ["-"] * (self._passes - len(rec.flowed)) if rec.flowed else []
                tensors.append(
                    node._replace(
                        op=None if rec.op is None else f"op{rec.op}",
                        flowed=tuple(flowed),
                        detached_from=None if rec.detached_from is None else f"t{rec.detached_from}",
                        region=rec.region,
                        scope=scope,
                    )
                )
        finally:
            book.close()
        ops = [
            OpNode(
                f"op{j}", o.name, o.forward, o.saved,
                None if o.variable is None else f"t{o.variable}",
                o.region,
                o.scope if o.variable is None else tensors[o.variable].scope,
            )
            for j, o in enumerate(self._ops)
        ]
        edges: list[Edge] = []
        for j, o in enumerate(self._ops):
            for input_nr, k, output_nr in o.next:
                edges.append(Edge(f"op{j}", f"op{k}", "next", input_nr, output_nr))
        for j, in_ids in self._inputs:
            for input_nr, i in enumerate(in_ids):
                edges.append(Edge(f"t{i}", f"op{j}", "input", input_nr, 0))
        for i, rec in enumerate(self._tensors):
            if rec.op is not None:
                edges.append(Edge(f"op{rec.op}", f"t{i}", "output", 0, rec.output_nr))
            if rec.detached_from is not None:
                edges.append(Edge(f"t{rec.detached_from}", f"t{i}", "detach"))
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
    >>> g.find("h").flowed, g.find("h").grad
    (('[1, 1]',), None)
    >>> g.find("w").grad
    '[3, 3]'
    """
    return Trace(
        names=names, module=module, grads=grads, saved=saved, max_elements=max_elements, explain_errors=explain_errors
    )
