"""What a trace records of the program's writes: in-place targets first seen by the write, and tensors changed through a ``.data`` or ``detach()`` alias."""

from __future__ import annotations

import torch

from .capture import _IS_LEAF
from .facts import same_data
from .guard import quiet

#: The most elements of a tensor assigned into whose written positions a trace works out (on a
#: mask of its shape), and the most positions it keeps.
ASSIGN_LIMIT, POSITIONS_LIMIT = 1 << 16, 4096

__all__ = ["WriteNotes"]


class WriteNotes:
    """The writes part of :class:`graphlens._live.recorder.Recorder` (a mixin: it uses the
    recorder's ``tensors``, ``refs``, ``by_id``, ``data_of``, ``detach_of``, ``alias_writes``,
    ``pending_writes``, ``assigned``, ``frame``, ``input``, ``settle`` and ``new_tensor``)."""

    def before_inplace(self, targets: list) -> None:
        """Record, before an in-place call, each target the trace has not seen: otherwise the
        first record would be made after the call, of the changed tensor, and the call would
        look like one that hands its input back unchanged (the op lost, its result taken for
        the input data)."""
        by_id, refs = self.by_id, self.refs
        for t in targets:
            i = by_id.get(id(t))
            if i is None or refs[i]() is not t:
                if self.frame is not None:
                    lasti = self.frame.f_lasti
                    if lasti != self.last_lasti:
                        self.look_back(self.frame, lasti)
                self.settle((self.input(t),))  # (checked now: the call is about to change it)

    def note_assigned(self, op: int, args: tuple) -> None:
        """Op ``op`` is an assignment ``target[index] = value``: note the flat positions of
        ``target`` it wrote (``assigned``), so that an answer can tell an element the value gave
        from one the target held before.  They are what the same index selects of the flat
        positions ``0 .. n-1`` laid out in the target's shape (one ``arange`` per trace, reused;
        no autograd node, no change to the program), for targets of up to ``ASSIGN_LIMIT``
        elements and up to ``POSITIONS_LIMIT`` positions; an index torch would warn about (a
        uint8 mask) is not read."""
        if len(args) < 2 or not isinstance(args[0], torch.Tensor):
            return
        target, index = args[0], args[1]
        parts = index if type(index) is tuple else (index,)
        if any(isinstance(p, torch.Tensor) and p.dtype is torch.uint8 for p in parts):
            return
        try:
            with quiet():
                shape = tuple(target.shape)
                n = target.numel()
                if not all(type(k) is int for k in shape) or n > ASSIGN_LIMIT:
                    return
                positions = self.__dict__.get("_positions")
                if positions is None or positions.numel() < n:
                    positions = self._positions = torch.arange(max(n, 256), dtype=torch.int64)
                chosen = positions[:n].view(shape)[index].reshape(-1)
                if chosen.numel() <= POSITIONS_LIMIT:
                    # (ints, slices, None and ... select each position once, in order; tensors and lists may repeat)
                    plain = all(p is None or p is Ellipsis or type(p) in (int, slice) for p in parts)
                    self.assigned[op] = tuple((chosen if plain else torch.unique(chosen)).tolist())
        except Exception:  # noqa: BLE001 - an index the positions do not take: they stay unknown
            pass

    def note_alias_write(self, op: int, made: list) -> None:
        """Op ``op`` changed in place the tensors of records ``made``: where one of them is a
        ``detach()`` alias (``d = y.detach(); d.add_(1)``), the tensor it shares memory and the
        version counter with changed too.  Noted, for the diagram to say so at the op and at
        the record of that tensor the next op that reads it makes (see ``input``): that record
        keeps the op that made the tensor, whose backward node is still the one a gradient
        reaches it through."""
        refs, by_id = self.refs, self.by_id
        for i in made:
            src = self.detach_of.get(i)
            if src is None:
                continue
            t, a = refs[src](), refs[i]()
            if t is None or a is None or t._version != a._version:
                continue  # (not the same counter any more: nothing to say for sure)
            latest = by_id.get(id(t))
            if latest is None or refs[latest]() is not t:
                latest = src
            self.alias_writes.append((op, latest, i))
            self.pending_writes[latest] = len(self.alias_writes) - 1

    def written_through(self, op: int, made: list, region: str | None) -> None:
        """Op ``op`` changed in place the tensors of records ``made``: where one of them is a
        ``.data`` alias (``w.data -= lr * w.grad``), the tensor it shares memory with changed
        too, though its version counter did not move (``.data`` shares none): that tensor gets
        a new record now, made by this op, holding the value the next ops will read (without it
        they would be shown the value from before the write)."""
        recs, refs = self.tensors, self.refs
        for i in made:
            src = self.data_of.get(i)
            if src is None:
                continue
            t, a = refs[src](), refs[i]()
            if t is None or a is None or not same_data(t, a):
                continue
            latest = self.by_id.get(id(t))
            base = recs[latest if latest is not None and refs[latest]() is t else src]
            self.new_tensor(t, op, 0, None, region, leaf=base[_IS_LEAF])
