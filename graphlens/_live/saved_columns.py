"""The saved attributes of every node of a walk at once, as compact rows of plain data, the tensors read column by column."""

from __future__ import annotations

from itertools import chain, compress, count
from operator import attrgetter, not_
from typing import Any, Callable

import torch

from .facts import _NUMBERS, _SAVED_TENSOR, _entry, _holds_tensor, _plain, _saved_names, _slot_state, _unreadable_saved
from .facts import plain_shape, shape_of
from .guard import _is_wrapped, unreadable_why
from ..graph import HIDDEN, UNREADABLE, SavedEntry
from .storages import StorageBook

__all__ = ["saved_rows_of_all"]

_T = torch.Tensor
_SHAPE = attrgetter("shape")
_DTYPE = attrgetter("dtype")
_ITEM = _T.item
#: Tensors summarised together at most (the Python objects of saved tensors are held until then).
_BATCH = 4096
_IS_COMPLEX = _T.is_complex


_UNREAD = object()  # (an attribute that could not be read)


def saved_rows_of_all(fns: list, resolve: Callable[[int, torch.Tensor, str], str | None] | None, *,
                      book: StorageBook) -> list[tuple]:
    """One tuple of compact rows per node of ``fns``, one row per saved attribute (as
    :func:`~graphlens._live.capture.saved_entry` reads it: ``(name, tensor id or None, shape,
    dtype, storages[, number of a 0-d one])`` for a tensor, ``(name, value[, storages])`` for
    anything else, the :class:`~graphlens.graph.SavedEntry` itself where a slot is hidden or
    cannot be read), made into the entries :func:`~graphlens._live.facts.saved_attributes`
    gives, with the same storage numbers; ``resolve(i, value, name)`` is the resolver of the
    ``i``-th node.  Each
    attribute is read in the walk's order (a hidden slot is never unpacked); the tensors are
    then summarised together (their storages numbered in the order they were read), with
    C-level maps instead of a function call per tensor: the per-node cost of a snapshot is
    mostly these reads."""
    out: list[list] = []
    pend_row: list[list] = []  # a pending tensor: the row it goes in, its place there, its node, name, value
    pend_at: list[int] = []
    pend_op: list[int] = []
    pend_short: list[str] = []
    pend_val: list[torch.Tensor] = []

    def flush() -> None:
        if pend_val:
            _summarise(pend_row, pend_at, pend_op, pend_short, pend_val, resolve, book)
            for column in (pend_row, pend_at, pend_op, pend_short, pend_val):
                column.clear()

    names_of: dict[type, tuple] = {}
    for i, fn in enumerate(fns):
        cls = type(fn)
        names = names_of.get(cls)
        if names is None:
            names = names_of[cls] = _saved_names(fn)
        rows: list = []
        out.append(rows)
        for attr, short, raw in names:
            if raw is not None:
                try:  # (the common slot read inline: one SavedTensor, no hook on it)
                    slot = getattr(fn, raw)
                    hidden = slot.unpack_hook is not None if type(slot) is _SAVED_TENSOR else _slot_state(fn, raw) is HIDDEN
                except Exception:  # noqa: BLE001 - _slot_state says what it can
                    hidden = _slot_state(fn, raw) is HIDDEN
                if hidden:
                    flush()  # (its storages are numbered now: the ones read before it first)
                    rows.append(_entry(fn, attr, short, raw, None if resolve is None else _at(resolve, i), None, book)[0])
                    continue
            try:
                value = getattr(fn, attr)
            except Exception as exc:  # noqa: BLE001 - an odd attribute must not break the walk
                rows.append(SavedEntry(short, _unreadable_saved(exc) if isinstance(exc, RuntimeError) else UNREADABLE))
                value = _UNREAD  # (no `continue` here: an interrupt landing on one would keep exc and its frames alive)
            if value is _UNREAD:
                continue
            if isinstance(value, _T):
                pend_row.append(rows)
                pend_at.append(len(rows))
                pend_op.append(i)
                pend_short.append(short)
                pend_val.append(value)
                rows.append(None)
                if len(pend_val) >= _BATCH:
                    flush()
            elif value is None or type(value) in _NUMBERS:
                rows.append((short, value))
            elif (type(value) is tuple or type(value) is list) and len(value) <= 8 and _NUMBERS.issuperset(map(type, value)):
                rows.append((short, tuple(value)))  # (sizes, strides, dims: as _plain makes them, with no tensor held)
            elif _holds_tensor(value):
                flush()
                rows.append((short, _plain(value), book.of(value)))
            else:
                rows.append((short, _plain(value)))
    flush()
    return [tuple(rows) for rows in out]


def _at(resolve: Callable, i: int) -> Callable[[torch.Tensor, str], str | None]:
    return lambda value, short: resolve(i, value, short)


def _summarise(rows_of: list, at: list, ops: list, shorts: list, values: list, resolve: Callable | None, book: StorageBook) -> None:
    """Put the row of each tensor of ``values`` in its place (``rows_of[k][at[k]]``)."""
    storages = book.of_many(values)
    n = len(values)
    tids: list = [None] * n
    if resolve is not None:
        # (a Python number torch wrapped, x * 0.5, is no tensor of the graph: not looked for)
        for k in compress(range(n), [not (s and s[0][2] == "number") for s in storages]):
            tids[k] = resolve(ops[k], values[k], shorts[k])
    try:
        shapes = list(map(tuple, map(_SHAPE, values)))
    except RuntimeError:  # (a strided nested tensor among them: one by one)
        shapes = list(map(shape_of, values))
    if not set(map(type, chain.from_iterable(shapes))) <= _INT:
        shapes = list(map(plain_shape, shapes))
    made = list(zip(shorts, tids, shapes, map(_DTYPE, values), storages))
    zero = list(compress(count(), map(not_, shapes)))
    if zero:  # (a 0-d one shows its number, as tensor_summary reads it)
        for k, number in zip(zero, _numbers([values[k] for k in zero])):
            if number is not _NO_NUMBER:
                made[k] += (number,)
    for rows, place, row in zip(rows_of, at, made):
        rows[place] = row


_INT = frozenset({int})
_NO_NUMBER = object()
_PLAIN_TYPES = frozenset({torch.Tensor, torch.nn.Parameter})


def _numbers(values: list) -> list:
    """The number each 0-d tensor of ``values`` holds, or ``_NO_NUMBER`` (complex, unreadable,
    or holding no data), as :func:`~graphlens._live.facts.tensor_summary` reads it."""
    if set(map(type, values)) <= _PLAIN_TYPES and not any(map(_IS_COMPLEX, values)) and not any(map(_is_wrapped, values)):
        try:
            return list(map(_ITEM, values))
        except Exception:  # noqa: BLE001 - meta, fake or freed data holds no number: one by one
            pass
    out = []
    for value in values:
        number = _NO_NUMBER
        if not _IS_COMPLEX(value) and unreadable_why(value) is None:
            try:
                number = _ITEM(value)
            except Exception:  # noqa: BLE001 - meta, fake or freed data holds no number
                pass
        out.append(number)
    return out
