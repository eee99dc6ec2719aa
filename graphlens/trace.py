"""Recording a program as it runs: a TorchFunctionMode for the forward, node hooks for backward."""

from __future__ import annotations

from threading import get_ident
from typing import Any, Callable, Mapping

import torch
from torch.overrides import TorchFunctionMode

from ._attribution import as_user
from ._checks import check_count, check_flag
from ._facts import MAX_ELEMENTS
from ._freeze import freeze
from ._recorder import _DETACHES, _TENSOR_PROPERTIES, DETACH, PLAIN, Recorder, func_name, grad_fn_of, sequence_now
from ._util import paused_gc, tensors_in
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

# How the mode treats each function torch hands it, decided once per function.
_BACKWARD, _AS_USER = 2, 3
_KINDS: dict[Any, int] = {}


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
    else:
        kind = PLAIN
    if len(_KINDS) < 8192:
        _KINDS[func] = kind
    return kind


class _Mode(TorchFunctionMode):
    def __init__(self, owner: "Trace") -> None:
        super().__init__()
        self.record = owner._rec.record
        self.run_backward = owner._run_backward

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        if _compiling():
            # torch.compile is tracing a compiled function: it sees a plain call, so the
            # compiled code computes exactly what it computes without graphlens; its
            # result enters the trace as one opaque input, like a tensor made outside.
            return func(*args, **kwargs)
        try:
            kind = _KINDS[func]
        except (KeyError, TypeError):
            kind = _kind(func) if getattr(func, "__hash__", None) is not None else PLAIN
        if kind > DETACH:
            if kind == _BACKWARD:
                return self.run_backward(func, args, kwargs)
            return as_user(func, args, kwargs)
        out = func(*args, **kwargs)
        self.record(func, kind, args, kwargs, out)
        return out


class Trace:
    """What :func:`trace` records; use it as a context manager, then call :meth:`graph`.

    Recording is cheap per op: the forward pass keeps only weak references, flags, the
    head of each new CPU tensor's value and the sequence number of each new backward
    node.  The backward structure (``next`` edges, saved attributes) is read from the
    live nodes when backward runs inside the block and when the graph is taken, so a
    node that died unseen by either keeps only its forward edges.
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
        self._active = False
        self._exited = False

    # -- context manager --------------------------------------------------------------
    def __enter__(self) -> "Trace":
        if self._active or self._exited:
            raise RuntimeError("a trace can be entered only once: use a new graphlens.trace() for each recording")
        rec = self._rec
        rec.frame = user_frame(1)
        rec.code = None if rec.frame is None else rec.frame.f_code
        rec.first_seq = sequence_now()
        self._hook_modules()
        try:
            self._mode = _Mode(self)
            self._mode.__enter__()
        except BaseException:
            self._unhook_modules()
            self._mode = None
            rec.frame = None
            raise
        self._active = True
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        rec = self._rec
        try:
            if self._mode is not None:
                self._mode.__exit__(exc_type, exc, tb)
        finally:
            self._unhook_modules()
            self._active = False
            self._mode = None
            try:
                rec.last_lasti = -1
                rec.scan_names()  # the block's variables as they stand at its end
            finally:
                rec.frame = None
                self._exited = True
        if self._explain_errors and isinstance(exc, (RuntimeError, TypeError, AttributeError)):
            self._add_explanation(exc)
        return False

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
        with torch._C.DisableTorchFunction():  # reading values must not record itself
            if self._active:
                self._rec.last_lasti = -1
                self._rec.scan_names()
            return freeze(self._rec, names=self._names, module=self._module)

    def replay(self):
        """The backward passes run inside the block, step by step, as PyTorch's engine ran
        them (a :class:`~graphlens.replay.Replay`): observed with hooks on the real nodes,
        never recomputed.  Needs ``grads=True`` (the default)."""
        from .replay import build

        if not self._rec.grads:
            raise RuntimeError("this trace was made with grads=False, so it saw no backward step: use graphlens.trace()")
        return build(self._rec, self.graph())

    @property
    def backward_passes(self) -> int:
        """How many backward calls ran inside the block."""
        return self._rec.passes

    # -- module scopes -----------------------------------------------------------------
    def _hook_modules(self) -> None:
        """Forward hooks on every submodule of ``module=`` keep a stack of the submodule
        names that are running, so each op knows its scope (for collapsed diagrams)."""
        if self._module is None:
            return
        scopes = self._rec.scopes
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
        self._rec.scopes.clear()

    # -- backward ------------------------------------------------------------------------
    def _run_backward(self, func, args, kwargs):
        roots: list = []
        if func is _Tensor.backward:
            roots = [args[0]] if args else [kwargs.get("self")]
        else:
            tensors_in(args[0] if args else kwargs.get("tensors", kwargs.get("outputs")), roots)
        # Recording makes many small objects while backward runs; collecting them one
        # generation at a time would cost more than the backward pass itself.
        with paused_gc():
            return self._run_backward_paused(func, args, kwargs, roots)

    def _run_backward_paused(self, func, args, kwargs, roots: list):
        rec = self._rec
        handles: list = []
        done = False
        try:
            if func is torch.autograd.grad:
                keep = kwargs.get("retain_graph", args[3] if len(args) > 3 else None)
                create = kwargs.get("create_graph", args[4] if len(args) > 4 else False)
            else:
                keep = kwargs.get("retain_graph", args[2] if len(args) > 2 else None)
                create = kwargs.get("create_graph", args[3] if len(args) > 3 else False)
            rec.begin_pass(roots, kept=bool(create if keep is None else keep))
            rec.complete([grad_fn_of(t) for t in roots if isinstance(t, _Tensor)], handles=handles if rec.grads else None)
            if rec.grads and func is torch.autograd.grad:
                handles.extend(rec.hook_grad_inputs(args[1] if len(args) > 1 else kwargs.get("inputs")))
            out = as_user(func, args, kwargs)
            done = True
            return out
        finally:
            _remove_all(handles)
            rec.end_pass(done=done)


def _remove_all(handles: list) -> None:
    """Remove every hook of ``handles`` (what ``RemovableHandle.remove`` does, in one loop:
    a backward of many small nodes removes as many hooks as it ran nodes)."""
    for h in handles:
        try:
            hooks = h.hooks_dict_ref()
            if hooks is not None:
                hooks.pop(h.id, None)
            if h.extra_dict_ref:
                h.remove()
        except AttributeError:  # a torch whose handles look otherwise
            h.remove()


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
