"""Recording a program as it runs: a TorchFunctionMode for the forward, node hooks for backward."""

from __future__ import annotations

import gc
import itertools
import sys
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
_DETACHES = {_Tensor.detach, _Tensor.detach_}
_BACKWARDS = {_Tensor.backward, torch.autograd.backward, torch.autograd.grad}
_DATA_GET = _Tensor.data.__get__  # type: ignore[attr-defined]


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


class _T:
    """A tensor record while tracing (mutable; frozen into a TensorNode by ``graph()``)."""

    __slots__ = ("ref", "name", "facts", "op", "output_nr", "flowed", "detached_from", "region", "latest", "scope")

    def __init__(self, ref, facts, op, output_nr, detached_from, region, scope=None) -> None:
        self.ref = ref
        self.name: str | None = None
        self.facts: TensorNode = facts
        self.op = op
        self.output_nr = output_nr
        self.flowed: list[str] = []
        self.detached_from = detached_from
        self.region = region
        self.latest = True
        self.scope = scope


class _O:
    """An op record while tracing."""

    __slots__ = ("name", "forward", "region", "variable", "saved", "next", "outputs", "scope")

    def __init__(self, name, forward, region, variable=None, scope=None) -> None:
        self.name = name
        self.forward = forward
        self.region = region
        self.variable = variable
        self.scope = scope
        self.saved: tuple = ()
        self.next: list[tuple[int, int, int]] = []  # (input_nr, op index, output_nr)
        self.outputs: dict[int, int] = {}  # output_nr -> tensor record index (latest)


class _Mode(TorchFunctionMode):
    def __init__(self, owner: "Trace") -> None:
        super().__init__()
        self.owner = owner

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        owner = self.owner
        if func in _BACKWARDS:
            return owner._run_backward(func, args, kwargs)
        name = getattr(func, "__name__", "")
        if name in ("__get__", "__set__", "__repr__", "__format__", "__str__") and func is not _DATA_GET:
            return func(*args, **kwargs)
        out = func(*args, **kwargs)
        owner._record(func, args, kwargs, out)
        return out


class Trace:
    """What :func:`trace` records; use it as a context manager, then call :meth:`graph`."""

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
        self._by_id: dict[int, int] = {}  # id(tensor) -> latest record index, while alive
        self._roots: list[int] = []
        self._inputs: list[tuple[int, list[int]]] = []  # (op index, input tensor indices)
        self._acc: dict[int, int] = {}  # leaf record index -> its AccumulateGrad op index
        self._region: str | None = None
        self._regions = 0
        self._scopes: list[str] = []
        self._module_handles: list = []
        self._passes = 0
        self._frame: FrameType | None = None
        self._mode: _Mode | None = None
        self._active = False
        self._frozen: Graph | None = None

    # -- context manager --------------------------------------------------------------
    def __enter__(self) -> "Trace":
        if self._active or self._frozen is not None:
            raise RuntimeError("a trace can be entered only once: use a new graphlens.trace() for each recording")
        self._frame = user_frame(1)
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

    # -- recording ---------------------------------------------------------------------
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

    def _new_tensor(
        self, t: _Tensor, op: int | None, output_nr: int, detached_from: int | None, region, *, external: bool = False
    ) -> int:
        i = len(self._tensors)
        key = id(t)
        by_id = self._by_id

        def forget(_ref, key=key, i=i, by_id=by_id):
            if by_id.get(key) == i:
                del by_id[key]

        old = self._index_of(t)
        if old is not None:
            self._tensors[old].latest = False
        facts = TensorNode(
            f"t{i}", None, tuple(t.shape), dtype_name(t.dtype), str(t.device), t.is_leaf, t.requires_grad,
            bool(t.retains_grad), None, int(t._version), bool(t._is_view()), None, output_nr,
            is_parameter=isinstance(t, torch.nn.Parameter),
        )
        rec = _T(weakref.ref(t, forget), facts, op, output_nr, detached_from, region, None if external else self._scope())
        if old is not None:
            rec.name = self._tensors[old].name
        self._tensors.append(rec)
        by_id[key] = i
        return i

    def _input(self, t: _Tensor) -> int:
        """The record of an input tensor, made now if the tensor came from outside."""
        i = self._index_of(t)
        if i is None:
            fn = t.grad_fn
            op = None if fn is None else self._op_of(fn, None, expand=False)
            i = self._new_tensor(t, op, t.output_nr if fn is not None else 0, None, None, external=True)
            if op is not None:
                self._ops[op].outputs.setdefault(t.output_nr, i)
        return i

    def _op_of(self, fn: Any, forward: str | None, *, expand: bool = True) -> int:
        """The op record of a backward node.  The record's index is kept in the node's own
        ``metadata`` dict, so the trace holds no reference to the node.  A node made
        before the block (met as an input's producer) is recorded without its inputs."""
        if type(fn).__name__ == "AccumulateGrad":
            vi = self._input(fn.variable)
            j = self._acc.get(vi)
            if j is None:  # torch rebuilds AccumulateGrad nodes lazily: key them by their leaf
                j = self._acc[vi] = len(self._ops)
                self._ops.append(_O("AccumulateGrad", None, None, variable=vi))
            return j
        meta = fn.metadata
        j = meta.get(self._key)
        if j is not None:
            return j
        j = len(self._ops)
        # A node not tagged yet was made by this very call (e.g. the TBackward0 inside
        # linear) or before the block: either way it belongs to the running scope.
        o = _O(type(fn).__name__, forward, self._region_now() if forward else None, scope=self._scope())
        self._ops.append(o)
        meta[self._key] = j
        if self._saved:
            o.saved = saved_attributes(fn)
        if expand:
            for input_nr, (child, output_nr) in enumerate(fn.next_functions):
                if child is not None:
                    o.next.append((input_nr, self._op_of(child, None, expand=False), output_nr))
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
        # An op that hands back one of its inputs unchanged (requires_grad_(), .to() of the
        # same dtype, ...) makes no new tensor.
        in_ids = [self._input(t) for t in ins]
        fresh = []
        for t in outs:
            i = self._index_of(t)
            if i is not None and i in in_ids:
                f = self._tensors[i].facts
                if f.version == t._version and (self._tensors[i].op is None) == (t.grad_fn is None):
                    continue
            fresh.append(t)
        if not fresh:
            return
        fn = fresh[0].grad_fn
        forward = _func_name(func)
        if fn is None and not in_ids:  # a factory (torch.tensor, randn, ...): a plain leaf
            for t in fresh:
                self._new_tensor(t, None, 0, None, region)
            return
        if fn is not None:
            op = self._op_of(fn, forward)
            o = self._ops[op]
            if o.forward is None:
                o.forward = forward
                o.region = region
                o.scope = self._scope()
        else:
            op = len(self._ops)
            o = _O(None, forward, region, scope=self._scope())
            self._ops.append(o)
        self._inputs.append((op, in_ids))
        for k, t in enumerate(fresh):
            nr = t.output_nr if fn is not None and t.grad_fn is fn else k
            i = self._new_tensor(t, op, nr, None, region)
            o.outputs[nr] = i

    def _scan_names(self) -> None:
        """Name recorded tensors after the variables of the block's frame that hold them
        now; a name rebound later keeps naming the tensor it held first."""
        frame = self._frame
        if frame is None:
            return
        for name, t in frame_candidates(frame, with_globals=False):
            i = self._index_of(t)
            if i is not None and self._tensors[i].name is None:
                self._tensors[i].name = name

    def _run_backward(self, func, args, kwargs):
        handles = []
        if self._grads:
            roots: list = []
            if func is _Tensor.backward:
                roots = [args[0]] if args else [kwargs.get("self")]
            else:
                _tensors_in(args[0] if args else kwargs.get("tensors", kwargs.get("outputs")), roots)
            for t in roots:
                if isinstance(t, _Tensor):
                    i = self._input(t)
                    if i not in self._roots:
                        self._roots.append(i)
            handles = self._hook_nodes(roots)
        try:
            return func(*args, **kwargs)
        finally:
            for h in handles:
                h.remove()
            self._passes += 1

    def _hook_nodes(self, roots: list) -> list:
        """A pre-hook on every node reached from ``roots`` that records the gradient
        flowing into each recorded tensor.  The hooks return None: grads are untouched."""
        pass_nr = self._passes
        handles = []
        seen: set = set()
        stack = [t.grad_fn for t in roots if isinstance(t, _Tensor) and t.grad_fn is not None]
        key = self._key
        while stack:
            fn = stack.pop()
            if fn in seen:
                continue
            seen.add(fn)
            if type(fn).__name__ == "AccumulateGrad":
                i = self._index_of(fn.variable)
                targets = {0: i} if i is not None else {}
            else:
                j = fn.metadata.get(key)
                targets = dict(self._ops[j].outputs) if j is not None else {}
            if targets:
                handles.append(fn.register_prehook(self._make_hook(targets, pass_nr)))
            for child, _ in fn.next_functions:
                if child is not None and child not in seen:
                    stack.append(child)
        guard_teardown(len(seen))
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
        book = NameBook()
        try:
            book.add_explicit(self._names)
            book.add_module(self._module)
            tensors: list[TensorNode] = []
            refs: dict[str, weakref.ref] = {}
            param_scopes: dict[int, str] = {}
            if self._module is not None:
                for qualname, sub in self._module.named_modules():
                    for p in sub.parameters(recurse=False):
                        param_scopes.setdefault(id(p), qualname or None)
            for i, rec in enumerate(self._tensors):
                t = rec.ref() if rec.latest else None
                name = rec.name
                if t is not None:
                    name = book.name_of(t) or name
                    node = tensor_node(t, f"t{i}", name, op=None, output_nr=rec.output_nr, max_elements=self._max)
                    refs[f"t{i}"] = rec.ref
                else:
                    node = rec.facts._replace(name=name)
                flowed = rec.flowed + ["-"] * (self._passes - len(rec.flowed)) if rec.flowed else []
                scope = rec.scope
                if scope is None and t is not None and id(t) in param_scopes:
                    scope = param_scopes[id(t)]
                node = node._replace(
                    op=None if rec.op is None else f"op{rec.op}",
                    flowed=tuple(flowed),
                    detached_from=None if rec.detached_from is None else f"t{rec.detached_from}",
                    region=rec.region,
                    scope=scope,
                )
                tensors.append(node)
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
