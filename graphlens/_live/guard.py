"""How graphlens stays unseen: its own reads of tensors run where no user's mode, subclass or transform sees them."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

import torch

__all__ = ["quiet", "unreadable_why", "transform_active", "node_unsafe"]

_Tensor = torch.Tensor
_Parameter = torch.nn.Parameter
_DisableTorchFunction = torch._C.DisableTorchFunction
_DisableTorchDispatch = getattr(torch._C, "_DisableTorchDispatch", None)
_dispatch_depth = getattr(torch._C, "_len_torch_dispatch_stack", None) or (lambda: 0)
_NO_DISPATCH = getattr(torch._C, "_disabled_torch_dispatch_impl", None)
_functorch = getattr(torch._C, "_functorch", None)
_peek_transform = getattr(_functorch, "peek_interpreter_stack", None) or (lambda: None)
_is_wrapped = getattr(_functorch, "is_functorch_wrapped_tensor", None) or (lambda t: False)


@contextmanager
def _hidden_from_all() -> Iterator[None]:
    with _DisableTorchFunction(), _DisableTorchDispatch():  # (C-level guards: nothing between them to interrupt)
        yield


def quiet() -> Any:
    """The context graphlens reads tensors in: no ``TorchFunctionMode`` of the user, no
    ``__torch_function__`` subclass and, while a user's ``TorchDispatchMode`` is on, no
    dispatch mode sees what graphlens reads (``.tolist()``, ``.item()``, shapes, flags).
    The user's own calls are never run in it."""
    if _DisableTorchDispatch is not None and _dispatch_depth():
        return _hidden_from_all()
    return _DisableTorchFunction()


def transform_active() -> bool:
    """Whether a ``torch.func`` transform (vmap, grad, jacrev, ...) is running here: its
    tensors are wrappers whose values and graph belong to the transform, not to autograd."""
    return _peek_transform() is not None


def unreadable_why(t: _Tensor) -> str | None:
    """Why graphlens does not read ``t``'s values (None: it can).  A subclass with its own
    ``__torch_dispatch__`` (a wrapper such as a logging tensor) decides what its values
    are, and reading them would run the user's code; a tensor wrapped by a ``torch.func``
    transform holds a batch or a level, not one value."""
    cls = type(t)
    if cls is not _Tensor and cls is not _Parameter:
        if getattr(cls, "__torch_dispatch__", _NO_DISPATCH) is not _NO_DISPATCH:
            return f"a {cls.__name__}: a tensor subclass with its own __torch_dispatch__"
    if _is_wrapped(t):
        return "a tensor inside a torch.func transform"
    return None


def node_unsafe(t: _Tensor) -> bool:
    """Whether reading ``t.grad_fn`` or ``t.is_leaf`` could change what backward gives it: a
    view that retains its grad, whose data was changed in place since it was made (possibly
    through an alias). PyTorch then rebuilds the view's node on that read and moves the
    retain_grad hook off the node backward runs, so ``t.grad`` would stay None.  (The version
    the view was made at is not readable from Python: a view made after an earlier in-place
    write answers True too.)  Reads only ``retains_grad``, ``_version`` and ``_is_view()``."""
    try:
        return bool(t.retains_grad and t._version and t._is_view())
    except Exception:  # noqa: BLE001 - a subclass or wrapper without these: nothing to protect
        return False
