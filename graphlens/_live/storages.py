"""Which storages the saved tensors of a graph keep alive: numbered per graph, with their size and kind."""

from __future__ import annotations

import weakref
from collections import deque
from typing import Any

import torch

from .guard import unreadable_why
from ..values import SavedStorage

__all__ = ["StorageBook", "checkpoint_storages", "saved_storages", "wrapped_number"]

_T = torch.Tensor
_SAVED_TENSOR = getattr(torch._C._autograd, "SavedTensor", None)


#: 0-d tensors of the lowest dtype of each category a Python number is wrapped as: torch's type
#: promotion lets a wrapped number (and only one) take the other operand's dtype.
_WRAPPED_PROBES: dict = {
    dtype: torch.zeros((), dtype=low)
    for dtype, low in ((torch.float64, torch.float16), (torch.int64, torch.int8), (torch.complex128, torch.complex64))
}


def wrapped_number(t: torch.Tensor) -> bool:
    """Whether ``t`` is a Python number torch wrapped into a 0-d tensor (``x * 0.5`` saves 0.5).
    Only such a tensor loses type promotion to a 0-d tensor of a lower dtype of its category;
    a Python bool cannot be told apart (it stays counted)."""
    probe = _WRAPPED_PROBES.get(t.dtype)
    if probe is None or t.dim() != 0 or not t.is_cpu:
        return False
    try:
        return _result_type(probe, t) is not t.dtype
    except Exception:  # noqa: BLE001 - a subclass or fake tensor: not a plain number
        return False


_result_type = torch.result_type


_EXPIRED = torch.UntypedStorage._expired  # type: ignore[attr-defined]
_STORAGE_OF = _T.untyped_storage
_IS_VIEW = _T._is_view
_BASE_OF = _T._base.__get__  # type: ignore[attr-defined]
_FREE_WEAK_REF = torch.UntypedStorage._free_weak_ref  # type: ignore[attr-defined]
_DATA_PTR = torch.UntypedStorage.data_ptr
_NBYTES = torch.UntypedStorage.nbytes
_IS_LEAF = _T.is_leaf.__get__  # type: ignore[attr-defined]
_REQUIRES_GRAD = _T.requires_grad.__get__  # type: ignore[attr-defined]


class StorageBook:
    """Numbers for the storages saved tensors keep alive, one book per graph, numbered in the
    order first seen.  A storage is known by its data pointer while it lives: the book keeps
    torch's own weak reference to each (a number; no memory is kept), so an address reused
    after a storage was freed gets a new number.  What it hands out are plain tuples
    ``(number, nbytes, kind)`` (:func:`saved_storages` makes them
    :class:`~graphlens.values.SavedStorage`): a trace of many ops then adds no object the
    cyclic garbage collector must keep visiting."""

    __slots__ = ("_seen", "_count", "_refs", "_release", "_weak", "__weakref__")

    def __init__(self, *, weak: bool = True) -> None:
        self._seen: dict[int, tuple] = {}  # data pointer -> (number, weak reference, last tuple made)
        self._count = 0
        # (weak=False: for a book filled while every storage it numbers stays alive, as in one walk
        # of a live graph, where two storages alive at once never share an address; no weak
        # reference is then taken)
        self._weak = weak
        self._refs: list[int] = []  # every weak reference taken, released together when the book goes
        # (by torch's C function, mapped in C: no line of Python runs while the book is freed,
        # so an interrupt arriving then is never swallowed by a __del__)
        self._release = weakref.finalize(self, deque, map(_FREE_WEAK_REF, self._refs), 0)

    def of(self, value: Any) -> tuple[tuple, ...]:
        """The storages of a saved value: one for a tensor, one per tensor of a list or tuple;
        none where torch hands out no storage (sparse, nested, meta or wrapper tensors)."""
        if isinstance(value, torch.Tensor):
            one = self._one(value)
            return () if one is None else (one,)
        if isinstance(value, (tuple, list)):
            out = []
            for v in value:
                if isinstance(v, torch.Tensor):
                    one = self._one(v)
                    if one is None:
                        return ()  # (one unknown storage makes the whole entry unknown)
                    out.append(one)
            return tuple(out)
        return ()

    def of_many(self, tensors: list) -> list[tuple[tuple, ...]]:
        """``[self.of(t) for t in tensors]``, numbered in that order; in a book that takes no
        weak references, read column by column with C-level maps (the snapshot's case)."""
        if self._weak or not tensors:
            return list(map(self.of, tensors))
        try:
            for cls in set(map(type, tensors)):
                if cls is not _T and any(unreadable_why(t) is not None for t in tensors if type(t) is cls):
                    return list(map(self.of, tensors))
            storages = list(map(_STORAGE_OF, tensors))
            ptrs = list(map(_DATA_PTR, storages))
            sizes = list(map(_NBYTES, storages))
            views = list(map(_IS_VIEW, tensors))
            bases = tensors if not any(views) else [_base(t) if v else t for t, v in zip(tensors, views)]
            leaves = list(map(_IS_LEAF, bases))
            grads = list(map(_REQUIRES_GRAD, bases))
        except Exception:  # noqa: BLE001 - one tensor with no storage: each on its own, as `of` reads it
            return list(map(self.of, tensors))
        out: list[tuple[tuple, ...]] = []
        seen_of, seen = self._seen.get, self._seen
        for t, ptr, nbytes, leaf, grad in zip(tensors, ptrs, sizes, leaves, grads):
            if not leaf:  # (a backward node made it: read without making the node's Python object)
                kind = "activation"
            elif grad:
                kind = "parameter"
            else:
                kind = "number" if wrapped_number(t) else "untracked"
            known = seen_of(ptr)
            if known is None:
                made = (self._count, nbytes, kind)
                seen[ptr] = (self._count, None, made)
                self._count += 1
            else:
                made = known[2]
                if made[1] != nbytes or made[2] != kind:
                    made = (known[0], nbytes, kind)
                    seen[ptr] = (known[0], known[1], made)
            out.append((made,))
        return out

    def _one(self, t: torch.Tensor) -> tuple | None:
        try:
            if type(t) is not _T and unreadable_why(t) is not None:
                return None
            storage = _STORAGE_OF(t)
            ptr = storage.data_ptr()
            nbytes = storage.nbytes()
            base = _BASE_OF(t) if _IS_VIEW(t) else None
            if base is None:
                base = t
            if not base.is_leaf:  # (a backward node made it: read without making the node's Python object)
                kind = "activation"
            elif base.requires_grad:
                kind = "parameter"
            else:
                kind = "number" if wrapped_number(t) else "untracked"
            seen = self._seen.get(ptr)
            if seen is None or (self._weak and _EXPIRED(seen[1])):
                ref = None
                if self._weak:
                    ref = storage._weak_ref()
                    self._refs.append(ref)
                made = (self._count, nbytes, kind)
                self._seen[ptr] = (self._count, ref, made)
                self._count += 1
                return made
        except Exception:  # noqa: BLE001 - no storage to read: the entry stays unmeasured
            return None
        made = seen[2]
        if made[1] != nbytes or made[2] != kind:
            made = (seen[0], nbytes, kind)
            self._seen[ptr] = (seen[0], seen[1], made)
        return made

    def close(self) -> None:
        """Let go of every weak reference now (else when the book is dropped)."""
        self._seen = {}
        self._release()
        self._refs = []
        self._release = weakref.finalize(self, deque, map(_FREE_WEAK_REF, self._refs), 0)


def _base(t: torch.Tensor) -> torch.Tensor:
    base = _BASE_OF(t)
    return t if base is None else base


def saved_storages(raw: tuple) -> tuple[SavedStorage, ...]:
    """:class:`~graphlens.values.SavedStorage` records from what :meth:`StorageBook.of` handed out."""
    return tuple([SavedStorage(*r) for r in raw])


def checkpoint_storages(fn: Any, raw: str, book: StorageBook) -> tuple[tuple, ...]:
    """What a saved tensor hidden by ``torch.utils.checkpoint`` (non-reentrant) keeps alive:
    its unpack hook holds the region's frame, which keeps the region's inputs (to recompute
    the region) and no saved tensor of it.  Read from the frame's own saved slots without
    running any hook; ``()`` (unknown) for any other hook, or when a slot is itself hooked.
    Plain tuples, as :meth:`StorageBook.of` hands them out."""
    try:
        slot = getattr(fn, raw)
        out: list = []
        for one in slot if isinstance(slot, (list, tuple)) else (slot,):
            hook = one.unpack_hook
            if getattr(hook, "__module__", None) != "torch.utils.checkpoint":
                return ()
            frames = [c.cell_contents for c in (hook.__closure__ or ()) if type(c.cell_contents).__name__ == "_CheckpointFrame"]
            if len(frames) != 1:
                return ()
            for arg in frames[0].saved_args:
                if type(arg) is _SAVED_TENSOR:
                    if arg.unpack_hook is not None:
                        return ()
                    data = arg.data
                    found = book.of(data) if data is not None else ()
                    if not found:
                        return ()
                    out.extend(found)
        return tuple(out)
    except Exception:  # noqa: BLE001 - another torch's checkpoint: unknown, never a guess
        return ()
