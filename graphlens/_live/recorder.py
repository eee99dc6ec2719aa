"""The record store behind a trace: what each forward op made, and what backward did."""

from __future__ import annotations

import weakref
from functools import partial
from types import FrameType
from typing import Any

import torch

from .backward import BackwardRecord
from .capture import (
    _FUNC_NAMES, _FORWARD, _HEAD, _INS, _IS_LEAF, _LASTI, _NAME, _OP, _OREGION, _OSCOPE, _OUTPUT_NR, _OUTS, _REQUIRES_GRAD, _SHAPE,
    _TENSOR_PROPERTIES, _VERSION, _next_sequence_nr, func_name, grad_fn_of, head, readable, saved_entry, sequence_now,
)
from .facts import _NUMBERS, StorageBook, read_saved, same_data, saved_plan, saved_value, shape_of, version_of
from .finite import KEEPS_FINITE, current, finite_record, keeps_finite, made_finite
from .finite import head_not_finite as _not_finite
from .frames import FrameNotes
from .regions import RegionNotes
from .writes import WriteNotes
from .guard import unreadable_why
from .safety import KEEP_MIN_NODES, keep_behind, keep_children
from .._util import tensors_in

__all__ = [
    "Recorder", "PLAIN", "DETACH", "EXITS", "func_name", "grad_fn_of", "readable", "sequence_now",
    "_DETACHES", "_TENSOR_PROPERTIES",
]

_Tensor = torch.Tensor
_Parameter = torch.nn.Parameter
_Size = torch.Size
_CUSTOM_NODE = torch.autograd.function.BackwardCFunction
_HALF = frozenset({torch.float16, torch.bfloat16})
_grad_enabled = torch.is_grad_enabled
_default_hooks = torch._C._autograd._top_saved_tensors_default_hooks
_ref = weakref.ref
_STRIDED = torch.strided
_tolist = _Tensor.tolist

#: What a recorded call is, by the function torch hands the mode (cached per function).
PLAIN, DETACH = 0, 1
_DATA_GET = _Tensor.data.__get__  # type: ignore[attr-defined]
_SETITEM = _Tensor.__setitem__
_DETACHES = {_Tensor.detach, _Tensor.detach_, _DATA_GET}

#: Calls that hand a tensor's value out of the graph as Python or NumPy numbers.
EXITS = frozenset({"item", "tolist", "numpy", "__float__", "__int__", "__bool__", "__index__", "__array__"})


class Recorder(FrameNotes, RegionNotes, WriteNotes, BackwardRecord):
    """Records of every tensor and op a trace saw, as tuples and lists of plain values.

    Tensors are numbered by record (``t{i}`` in the graph), ops likewise (``op{j}``).
    The store keeps weak references to tensors and no backward node at all: a node is
    found again by its autograd sequence number (AccumulateGrad nodes by their leaf).
    """

    def __init__(self, *, grads: bool, saved: bool, max_elements: int, first_seq: int) -> None:
        self.grads = grads
        self.saved = saved
        self.max_elements = max_elements
        self.first_seq = first_seq  # nodes made before the block are boundaries
        self.tensors: list[tuple] = []  # tensor records (see _SHAPE ... _HEAD)
        self.refs: list[weakref.ref] = []  # a weak reference to each record's tensor
        self.tnames: dict[int, str] = {}  # record -> the variable name it was first bound to
        self.stale: set[int] = set()  # records replaced by a newer version of their tensor
        self.by_id: dict[int, int] = {}  # id(tensor) -> latest record index (checked by weakref)
        self.roots: list[int] = []
        self.ops: list = []  # op records, tuples or lists (see _NAME ... _INS; thaw() to change one)
        self.by_seq: dict[int, int] = {}  # a backward node's sequence number -> its op record
        self.acc: dict[int, int] = {}  # leaf record index -> its AccumulateGrad op index
        self.calls: list[int] = []  # ops in the order they were called (forward)
        self.made: dict[int, tuple[str, int]] = {}  # factory-made record -> (function, lasti)
        self.data_of: dict[int, int] = {}  # a .data alias's record -> the record of the tensor it shares memory with
        self.detach_of: dict[int, int] = {}  # a detach() alias's record -> the record of the tensor it shares memory with
        self.alias_writes: list[tuple[int, int, int]] = []  # writes through a detach() alias: (op, source, alias)
        self.written_by: dict[int, int] = {}  # the source's record made for the value an alias write gave it -> the write
        self.pending_writes: dict[int, int] = {}  # (the source's latest record when written -> the write)
        self.autocast: dict[int, str] = {}  # op -> the dtype autocast ran it in (see note_autocast)
        self.assigned: dict[int, tuple] = {}  # an assignment t[i] = v -> the flat positions of t it wrote (note_assigned)
        self.where: dict[int, tuple[int, str | None]] = {}  # op -> (line, code) in the innermost user frame
        self.inner_names: dict[int, str] = {}  # record -> its name in that frame
        self.inner_codes: dict[str, Any] = {}  # an inner name -> the code of the function that gave it first
        self.model_names: dict[tuple, tuple] = {}  # (id(model), name, code) -> (weakref to it, name, code, records it may name)
        self.factory_where: dict[int, tuple] = {}  # factory record holding NaN/inf -> (line, code) in the innermost user frame
        self.hook_lines: dict[int, list] = {}  # record -> [(line, code)] where a gradient hook was registered on it
        self.origins: dict[int, tuple[str, int]] = {}  # external record without history -> (file, line) of its first use
        self.osaved: dict[int, tuple] = {}  # op -> its SavedEntry tuple, as last read
        self.rows: dict[int, tuple] = {}  # op -> what the forward pass read, as compact rows
        self.volatile: dict[int, tuple[int, ...]] = {}  # op -> saved positions backward may free
        self.storages = StorageBook()  # numbers the storages saved tensors keep (SavedEntry.storages)
        self.onext: dict[int, tuple] = {}  # op -> ((input_nr, op index, output_nr), ...)
        self.expanded: set[int] = set()
        # What backward did: gradients that flowed, (record, pass, head); ops as they ran,
        # with where each pass starts; per pass, whether it kept the graph and finished.
        self.flowed: list[tuple[int, int, Any]] = []
        self.order: list[int] = []
        # The engine's steps, as they ran: (op, pass, heads arrived, heads sent); the .grad writes they made:
        # (step, tensor record, head after); and each watched tensor's .grad as a pass began: {(pass, record): head}.
        self.steps: list[tuple] = []
        self.writes: list[tuple] = []
        self.grad_before: dict[tuple[int, int], Any] = {}
        self.sent_heads: dict[int, tuple] = {}  # id(gradient) -> (weakref, version, head), this pass
        self.first_hooked: set = set()  # ops whose node had no Python post-hook before graphlens's (see note_first_hook)
        # per backward call: the position in order it began at, whether it kept the graph, passed create_graph=True, ended,
        self.pass_starts, self.pass_kept, self.pass_created, self.pass_done = [], [], [], []  # (int, bool, bool, bool)
        self.pass_seqs: list[int | None] = []  # and the next sequence number as it began
        self.grad_created: dict[int, bool] = {}  # a gradient autograd.grad handed back -> its call's create_graph
        self.ended = False  # the block has ended: what happens since is not the trace's to record
        self.end_versions: dict[int, int] = {}  # record -> its tensor's version at the block's end, where it moved
        self.passes, self.region = 0, None  # (the backward calls so far; the no_grad region now, str | None)
        self.region_key: Any = None  # a weak reference to the pack hook of the checkpoint region now
        self.regions = 0
        self.scopes: list[str] = []
        self.frame: FrameType | None = None
        self.code: Any = None  # the block frame's code object (for the lines of the calls)
        self.last_lasti = -1
        self.targets: dict[int, tuple[str, ...]] | None = None  # the block's store targets (names.store_targets)
        self.calls_seen = 0  # len(calls) when the block's frame last moved on
        self.direct: tuple[int, int] | None = None  # (lasti, record) of the tensor the block's own code got from its last call (see look_back)

    # -- tensors -------------------------------------------------------------------------
    def begin_pass(self, roots: list, *, kept: bool, created: bool = False) -> None:
        """Note a backward call from ``roots`` (``kept``: with ``retain_graph``; ``created``: with
        ``create_graph=True``)."""
        self.pass_created.append(bool(created))
        self.pass_seqs.append(_next_sequence_nr() if _next_sequence_nr is not None else None)  # (nodes made before: lower)
        super().begin_pass(roots, kept=kept)

    def note_end(self) -> None:
        """The block has ended: note the version of each recorded tensor whose version moved
        since its record (an answer asked later can then tell a change made after the block,
        which the trace cannot know, from one it saw), and record nothing more of the tensors."""
        if self.ended:
            return
        self.ended = True
        recs, refs, stale, moved = self.tensors, self.refs, self.stale, self.end_versions
        for i, (ref, r) in enumerate(zip(refs, recs)):  # (an interrupt may have left a reference without its record)
            t = ref()
            if t is not None and i not in stale:
                v = version_of(t)
                if v != r[_VERSION]:
                    moved[i] = v

    def index_of(self, t: _Tensor) -> int | None:
        """The latest record of the live tensor ``t``, or None."""
        i = self.by_id.get(id(t))
        if i is not None and self.refs[i]() is t:
            return i
        return None

    def name_of(self, i: int) -> str | None:
        return self.tnames.get(i)

    def new_tensor(
        self, t: _Tensor, op, output_nr: int, detached_from, region, *, external: bool = False, leaf: bool | None = None,
        finite: bool = False,
    ) -> int:
        """A new record of ``t`` (a new tensor, or a new version of a recorded one); ``finite``:
        its value is known to hold no NaN or infinity (see :mod:`graphlens._live.finite`)."""
        recs = self.tensors
        i = len(recs)
        key = id(t)
        old = self.by_id.get(key)
        if old is not None and self.refs[old]() is t:
            self.stale.add(old)
            name = self.tnames.get(old)
            if name is not None:
                self.tnames[i] = name
            src = self.data_of.get(old)
            if src is not None:
                self.data_of[i] = src
            src = self.detach_of.get(old)
            if src is not None:
                self.detach_of[i] = src
        try:
            is_leaf = t.is_leaf if leaf is None else leaf  # (is_leaf reads grad_fn: see record_any)
        except RuntimeError:  # a view torch will not describe (see grad_fn_of): no graph of its own
            is_leaf = True
        try:
            shape = tuple(t.shape)  # (sizes a nested tensor makes symbolic are spelled out later)
        except RuntimeError:  # a strided nested tensor
            shape = shape_of(t)
        cls = type(t)
        scopes = self.scopes
        # A tensor keeps the head of its value as made: the record outlives the tensor,
        # and an older version (before an in-place op) shows what it held then.
        self.refs.append(_ref(t))
        recs.append((
            shape, t.dtype, t.device, is_leaf, t.requires_grad, version_of(t), t._is_view(),
            cls is _Parameter or (cls is not _Tensor and isinstance(t, _Parameter)), op, output_nr,
            detached_from, region, None if external or not scopes else scopes[-1],
            head(t, shape, self.max_elements, check=not external, finite=finite),  # (see settle)
        ))
        self.by_id[key] = i
        return i

    def settle(self, inputs) -> None:
        """Check the inputs (record numbers) of a call whose output is not finite: a tensor
        made before the block (a parameter, the data) is not checked for NaN and inf when it
        is first used, only when a value made from it is not finite (now, while it is the
        version the call used) or when a graph is built and it still is (see freeze).
        Finite parameters cost nothing; a NaN that reached an output is found exactly."""
        recs, refs, limit = self.tensors, self.refs, self.max_elements
        for i in inputs:
            r = recs[i]
            h = r[_HEAD]
            if h is None or len(h) != 4 or h[3] is None or len(h[3]) >= h[2]:
                continue  # (checked already, or every element is in the head)
            t = refs[i]()
            if t is not None and version_of(t) == r[_VERSION]:
                recs[i] = (*r[:_HEAD], head(t, r[_SHAPE], limit))

    def input(self, t: _Tensor, *, versions: bool = True) -> int:
        """The record of an input tensor, made now if the tensor came from outside.  With
        ``versions``, a tensor changed since its record (through an alias) gets a new one;
        not for the inputs a call changed itself (its in-place output)."""
        i = self.by_id.get(id(t))
        if i is not None:
            rec = self.tensors[i]
            if self.refs[i]() is t:
                op = rec[_OP]
                if versions and rec[_VERSION] != version_of(t) and rec[_REQUIRES_GRAD] and rec[_VERSION] >= 0:
                    # Changed in place through an alias since it was recorded (d = t.detach();
                    # d += 1 shares t's version counter): a new version, with the value used now.
                    # A view changed so, used with grad off, keeps its stale backward node until
                    # torch needs it: reading grad_fn or is_leaf now would rebuild that node
                    # earlier than torch does, with an earlier sequence number, and change the
                    # order the engine runs the nodes in (and so the rounding of the sums).
                    stale = not _grad_enabled() and t._is_view()
                    k = self.new_tensor(t, op, rec[_OUTPUT_NR], None, None, leaf=rec[_IS_LEAF] if stale else None)
                    if i in self.pending_writes:  # (a write through a detach() alias made this version)
                        self.written_by[k] = self.pending_writes.pop(i)
                    return k
                if rec[_REQUIRES_GRAD] or (op is not None and self.ops[op][_NAME] is not None):
                    return i
                if version_of(t) == rec[_VERSION]:
                    return self.adopted(t, i)
                if versions and rec[_VERSION] >= 0:
                    # Changed in place by code the trace did not see since it was recorded (the
                    # .grad a backward accumulated into, a buffer a C++ kernel updated): a new
                    # version, with the value used now, made by nothing the trace saw.
                    # (a view changed so keeps a stale node torch rebuilds later: is_leaf would rebuild it now, as above)
                    return self.new_tensor(t, None, 0, None, None, external=True, leaf=not t.requires_grad if t._is_view() else None)
                return i
        if t.requires_grad and not _grad_enabled() and t._is_view():
            # A view from outside, used with grad off: its backward node may be stale (its base
            # changed in place) and is left for torch to rebuild when it needs it (see above).
            return self.new_tensor(t, None, 0, None, None, external=True, leaf=False)
        fn = grad_fn_of(t)
        if fn is None:
            i = self.new_tensor(t, None, 0, None, None, external=True)
            if not t.requires_grad and self.frame is not None:
                self.note_origin(i)
            return i
        op = self.op_of(fn, None)
        nr = t.output_nr
        i = self.new_tensor(t, op, nr, None, None, external=True)
        self.thaw(op)[_OUTS].setdefault(nr, i)
        return i

    def adopted(self, t: _Tensor, i: int) -> int:
        """The record of ``t``, recorded without grad (record ``i``) and given a backward
        node since, as autograd does to what a custom ``Function.forward`` returns (its
        body runs without grad; ``Function.apply`` is not seen by the mode): a new version
        of the tensor, produced by that node."""
        fn = grad_fn_of(t)
        if fn is None:
            return i
        op = self.op_of(fn, None)
        orec = self.ops[op]
        if orec[_FORWARD] is None and isinstance(fn, _CUSTOM_NODE):
            orec = self.thaw(op)
            orec[_FORWARD] = (orec[_NAME] or "").removesuffix("Backward") + ".apply"
            orec[_OREGION], orec[_OSCOPE] = self.region_now(), self.scope()
        nr = t.output_nr
        j = self.new_tensor(t, op, nr, None, None)  # it has a grad_fn: made with grad on
        self.thaw(op)[_OUTS][nr] = j
        return j

    def thaw(self, j: int) -> list:
        """Op record ``j`` as a list that can be changed (its outputs as a dict).  The common
        call's record is made as a tuple of plain values, its one output as ``(output_nr,
        record)`` (see :mod:`graphlens._live.capture`: the collector stops tracking it before
        it reaches the oldest generation)."""
        orec = self.ops[j]
        if type(orec) is tuple:
            orec = self.ops[j] = list(orec)
            nr, i = orec[_OUTS]
            orec[_OUTS] = {nr: i}
        return orec

    def scope(self) -> str | None:
        """The innermost submodule running now (traced with ``module=``)."""
        return self.scopes[-1] if self.scopes else None

    # -- ops -----------------------------------------------------------------------------
    def new_op(self, name, forward, region, variable=None, scope=None) -> int:
        j = len(self.ops)
        self.ops.append([name, variable, forward, region, scope, {}, None, -1])
        return j

    def op_of(self, fn: Any, forward: str | None, region: str | None = None) -> int:
        """The op record of a backward node, found by the node's autograd sequence number
        (and class), so the store holds no reference to the node and writes nothing into it."""
        name = type(fn).__name__
        if name == "AccumulateGrad":
            # All AccumulateGrad nodes share one sequence number, and torch rebuilds a
            # leaf's node when the old one died: key it by the leaf.
            vi = self.input(fn.variable, versions=not self.ended)  # (after the block: a change it did not see)
            j = self.acc.get(vi)
            if j is None:
                j = self.acc[vi] = self.new_op("AccumulateGrad", None, None, variable=vi)
            return j
        seq = fn._sequence_nr()
        j = self.by_seq.get(seq)
        if j is not None and self.ops[j][_NAME] == name:
            return j
        j = self.new_op(name, forward, region if forward else None, scope=self.scopes[-1] if self.scopes else None)
        self.by_seq[seq] = j
        if j >= KEEP_MIN_NODES:  # freeing a deep graph must stay safe (see graphlens._live.safety)
            keep_behind(fn) if j == KEEP_MIN_NODES else keep_children(fn)
        return j

    def read_saved_now(self, fn: Any, j: int, outputs: tuple) -> None:
        """Read what op ``j``'s node ``fn`` saved, right after the forward call made it.

        No saved-tensor hook can be on a slot yet unless default hooks are active (then
        the careful reader, which never unpacks a hooked slot, is used); a saved input
        comes back as the very tensor object, a saved output as a new object holding the
        output's data."""
        if _default_hooks(False) is not None:
            self.osaved[j], self.volatile[j] = read_saved(fn, resolve=partial(self.saved_tensor, j), book=self.storages)
            return
        # Compact rows, made into SavedEntry records only when they are needed (saved_of):
        # (name, tensor record or -1, shape, dtype, storages[, number of a 0-d one]) for a tensor,
        # (name, value[, storages]) otherwise.
        rows = []
        moving = []
        k = -1
        for attr, short, _raw in saved_plan(fn):
            k += 1
            try:
                value = getattr(fn, attr)
            except Exception:  # noqa: BLE001 - an odd attribute must not break the program
                rows.append((short,))
                moving.append(k)
                continue
            cls = type(value)
            if cls is _Tensor or isinstance(value, _Tensor):
                rows.append(self._saved_tensor_row(short, value, outputs))
                moving.append(k)
            elif value is None or cls in _NUMBERS:
                rows.append((short, value))
            else:
                plain, holds = saved_value(value)
                if holds:
                    rows.append((short, plain, self.storages.of(value)))
                    moving.append(k)
                else:
                    rows.append((short, plain))
        self.rows[j] = tuple(rows)
        if moving:
            self.volatile[j] = tuple(moving)

    def _saved_tensor_row(self, short: str, value: _Tensor, outputs: tuple) -> tuple:
        """The compact row of one saved tensor (see :meth:`read_saved_now`)."""
        refs = self.refs
        i = self.by_id.get(id(value))
        if i is None or refs[i]() is not value:
            i = -1
            for o in outputs:
                t = refs[o]()
                if t is not None and same_data(t, value):
                    i = o
                    break
        try:
            shape = tuple(value.shape)
        except RuntimeError:  # a strided nested tensor
            shape = shape_of(value)
        storages = self.storages.of(value)
        if i < 0 and shape == () and not _Tensor.is_complex(value) and unreadable_why(value) is None:  # a wrapped number (w * 3 saves 3)
            try:
                return (short, i, shape, value.dtype, storages, _Tensor.item(value))
            except Exception:  # noqa: BLE001 - meta or fake data holds no number
                pass
        return (short, i, shape, value.dtype, storages)

    def saved_of(self, j: int) -> tuple | None:
        """Op ``j``'s saved entries as :class:`SavedEntry` records (None: never read)."""
        rows = self.rows.pop(j, None)
        if rows is not None:
            self.osaved[j] = tuple(saved_entry(r) for r in rows)
        return self.osaved.get(j)

    # -- the forward pass ----------------------------------------------------------------
    def record(self, func, kind: int, args: tuple, kwargs: dict, out: Any, caller: FrameType | None = None) -> None:
        """Record one call the mode saw: its input tensors, its outputs, its backward node
        (``caller``: the frame that made the call, when known; see :meth:`note_inner`).

        The common call (plain tensors in, one new tensor out, grad on) is recorded inline;
        everything else by :meth:`record_any`."""
        if kind or type(out) is not _Tensor or self.region is not None or not _grad_enabled() or _default_hooks(False) is not None:
            return self.record_any(func, kind, args, kwargs, out, caller)
        frame = self.frame
        lasti = -1
        if frame is not None:
            lasti = frame.f_lasti
            if lasti != self.last_lasti:
                self.look_back(frame, lasti)
        by_id, recs, refs = self.by_id, self.tensors, self.refs
        ins = []
        for a in args if not kwargs else (*args, *kwargs.values()):  # (keywords last, as record_any reads them)
            cls = type(a)
            if cls is _Tensor or cls is _Parameter:  # (a Parameter runs torch's own code: no override of its own)
                i = by_id.get(id(a))
                if i is None:
                    i = self.input(a)  # (first seen: a parameter, the data; recorded as record_any would)
                r = recs[i]
                # (a record that does not require grad stays right while the tensor does not either; record_any
                # handles the rest, e.g. requires_grad_() since, or a new version made through an alias: d += 1)
                if refs[i]() is not a or not (r[_REQUIRES_GRAD] or not a.requires_grad) or r[_VERSION] < 0 or a._version != r[_VERSION]:
                    return self.record_any(func, kind, args, kwargs, out, caller)
                ins.append(i)
            elif cls is tuple or cls is list or cls is _Size:
                for x in a:  # (a shape or a list of dims: plain numbers only)
                    if type(x) is not int:
                        return self.record_any(func, kind, args, kwargs, out, caller)
            elif isinstance(a, (_Tensor, dict)):
                return self.record_any(func, kind, args, kwargs, out, caller)
        key = id(out)
        i = by_id.get(key)
        if i is not None and refs[i]() is out:  # in place, or handed back: see record_any
            return self.record_any(func, kind, args, kwargs, out, caller)
        try:
            fn = out.grad_fn
        except RuntimeError:
            fn = None
        if fn is None:
            return self.record_any(func, kind, args, kwargs, out, caller)
        seq = fn._sequence_nr()
        if seq in self.by_seq or out.is_nested:
            return self.record_any(func, kind, args, kwargs, out, caller)
        # A new backward node and its one output.
        ops = self.ops
        j = len(ops)
        scopes = self.scopes
        scope = scopes[-1] if scopes else None
        nr = out.output_nr
        i = len(recs)
        ins_t = tuple(ins)
        name = type(fn).__name__
        ops.append((name, None, _FUNC_NAMES.get(func) or func_name(func), None, scope, (nr, i), ins_t, lasti))
        self.by_seq[seq] = j
        self.calls.append(j)
        if j >= KEEP_MIN_NODES:  # freeing a deep graph must stay safe (see graphlens._live.safety)
            keep_behind(fn) if j == KEEP_MIN_NODES else keep_children(fn)
        shape = tuple(out.shape)
        refs.append(_ref(out))
        limit = self.max_elements  # (a value the head holds whole is read, not reduced: nothing to know)
        dtype = out.dtype
        h = None
        if len(shape) == 1 and 0 < shape[0] <= limit and out.is_cpu and out.layout is _STRIDED:
            try:  # (head's first case, inline: a plain strided tensor, not nested, read whole)
                h = (shape, dtype, shape[0], tuple(_tolist(out)))
            except Exception:  # noqa: BLE001 - quantized or storage-less data: head says what it can
                h = None
        if h is None:
            h = head(out, shape, limit, finite=func in KEEPS_FINITE and out.numel() > limit and keeps_finite(recs, ins, args, kwargs))
        recs.append((
            shape, dtype, out.device, False, True, out._version, out._is_view(), False, j, nr,
            None, None, scope, h,
        ))
        by_id[key] = i
        if dtype in _HALF:
            self.note_autocast(j, out)
        if h is not None and _not_finite(h):
            self.note_where(j, args)  # (rare: where a NaN or inf was made, inside the user's functions too)
            self.settle(ins)
        if caller is frame:
            self.direct = (lasti, i)  # (what a store right after this call puts in a variable)
        else:
            self.direct = None
            if caller is not None:
                self.note_inner(j, name, args, caller)
        if self.saved:
            self.read_saved_now(fn, j, (i,))

    def record_any(self, func, kind: int, args: tuple, kwargs: dict, out: Any, caller: FrameType | None = None) -> None:
        """Record any call: several outputs, containers, in-place ops, no_grad regions,
        detach, tensors from outside the block."""
        self.direct = None
        if isinstance(out, _Tensor):
            outs: list = [out]
        else:
            outs = tensors_in(out, [])
            if not outs and func is _SETITEM and args and type(args[0]) in (_Tensor, _Parameter):
                outs = [args[0]]  # (x[i] = v hands back None: x is what it changed)
            if not outs:
                if args and isinstance(args[0], _Tensor) and (_FUNC_NAMES.get(func) or func_name(func)) in EXITS:
                    self.record_exit(func, args[0])
                return
        frame = self.frame
        lasti = -1
        if frame is not None:
            lasti = frame.f_lasti
            if lasti != self.last_lasti:
                self.look_back(frame, lasti)
        ins: list = []
        for a in args:
            if isinstance(a, _Tensor):
                ins.append(a)
            elif isinstance(a, (list, tuple)):
                tensors_in(a, ins)
        if kwargs:
            for a in kwargs.values():
                tensors_in(a, ins)
        region = self.region_now()
        if kind == DETACH:
            src = self.input(ins[0]) if ins else None
            how = ("data" if func == _DATA_GET else "detach", lasti)
            # (the same memory as its source, at the same version: finite when that is)
            finite = src is not None and current(self, src, ins[0]) and finite_record(self.tensors[src])
            for t in outs:
                i = self.new_tensor(t, None, 0, src, region, finite=finite and type(t) is _Tensor)
                self.made[i] = how
                if how[0] == "data" and src is not None:
                    self.data_of[i] = src  # (it shares no version counter with src: see written_through)
                elif src is not None:
                    self.detach_of[i] = src  # (it shares src's version counter: see note_alias_write)
            return
        out_ids = {id(t) for t in outs}
        in_ids = tuple([self.input(t, versions=id(t) not in out_ids) for t in ins])
        # An op that hands back one of its inputs unchanged (requires_grad_(), .to() of the
        # same dtype, ...) makes no new tensor; an in-place op makes a new version.
        fresh = []
        recs, refs = self.tensors, self.refs
        inplace = False
        for t in outs:
            i = self.by_id.get(id(t))
            if i is not None and i in in_ids and refs[i]() is t:
                rec = recs[i]
                if rec[_VERSION] == version_of(t) and (rec[_OP] is None) == (grad_fn_of(t) is None):
                    continue
                inplace = True  # a new version of an input: the op changed it in place
            fresh.append(t)
        if not fresh:
            return
        # A view changed in place without grad gets its backward node rebuilt by torch when
        # its grad_fn is next read: reading it here would make that node now, with an earlier
        # sequence number, and change the order the engine runs the nodes in.  Leave it to
        # torch (the next op that uses the view reads it, as without graphlens).
        lazy = inplace and not _grad_enabled() and fresh[0]._is_view() and fresh[0].requires_grad
        fn = None if lazy else grad_fn_of(fresh[0])
        if fn is None and not in_ids:  # a factory (torch.tensor, randn, ...): a plain leaf
            made_by = (_FUNC_NAMES.get(func) or func_name(func), lasti)
            for t in fresh:
                i = self.new_tensor(t, None, 0, None, region)
                self.made[i] = made_by
                h = recs[i][_HEAD]
                if (h is not None and _not_finite(h)) or recs[i][_REQUIRES_GRAD]:
                    self.note_factory(i)  # (rare: a fill with NaN or inf, or a new leaf that requires grad: the user's own line)
            return
        forward = _FUNC_NAMES.get(func) or func_name(func)
        new_node = False
        if fn is not None:
            seq = fn._sequence_nr() if type(fn).__name__ != "AccumulateGrad" else None
            new_node = seq is not None and seq not in self.by_seq
            op = self.op_of(fn, forward, region)
            orec = self.thaw(op)
            if orec[_FORWARD] is None:
                orec[_FORWARD], orec[_OREGION], orec[_OSCOPE] = forward, region, self.scope()
        else:
            op = self.new_op(None, forward, region, scope=self.scope())
            orec = self.ops[op]
            if not lazy and any(self.tensors[i][_REQUIRES_GRAD] for i in in_ids):
                self.note_where(op, ins)  # the gradient path stops here: say exactly where
        orec[_INS] = in_ids
        orec[_LASTI] = lasti
        if inplace:
            self.note_where(op, ins)  # where a tensor changed in place, for the error that may follow
        self.calls.append(op)
        outputs = orec[_OUTS]
        made = []
        finite = not inplace and all(type(t) is _Tensor for t in fresh) and made_finite(self, func, in_ids, ins, args, kwargs)
        for k, t in enumerate(fresh):
            nr = t.output_nr if fn is not None and grad_fn_of(t) is fn else k
            outputs[nr] = i = self.new_tensor(t, op, nr, None, region, leaf=False if lazy else None, finite=finite)
            made.append(i)
        if inplace and self.data_of:
            self.written_through(op, made, region)
        if inplace and self.detach_of:
            self.note_alias_write(op, made)
        if inplace and func is _SETITEM:
            self.note_assigned(op, args)
        if fresh[0].dtype in _HALF and not inplace:
            self.note_autocast(op, fresh[0])
        if fn is not None and op not in self.where and any(not recs[i][_REQUIRES_GRAD] for i in made):
            self.note_where(op, ins)  # an output the gradient cannot pass (the indices of max)
        if any(recs[i][_HEAD] is not None and _not_finite(recs[i][_HEAD]) for i in made):
            if op not in self.where:
                self.note_where(op, ins)  # where a NaN or inf was made
            self.settle(in_ids)
        if new_node and caller is not None:
            self.note_inner(op, type(fn).__name__, ins, caller)
        if new_node and self.saved:
            self.read_saved_now(fn, op, tuple(made))

    def note_grad_outputs(self, outs: Any, caller: FrameType | None = None) -> None:
        """What ``torch.autograd.grad`` handed back: a gradient made with a graph is recorded through its backward node,
        as a use of it would; one made without (``create_graph=False``), as made by that call at the user's line."""
        frame = self.frame
        lasti = frame.f_lasti if frame is not None else -1
        region = self.region_now()
        where = None
        if caller is not None and not caller.f_code.co_filename.startswith("<eval_with_key"):
            where = (caller.f_code.co_filename, caller.f_lineno)  # (the call's own line, in a helper too)
        created = self.pass_created[-1] if self.pass_created else None
        for t in tensors_in(outs, []):
            if self.index_of(t) is None and grad_fn_of(t) is not None:
                self.input(t)  # (made with a graph: recorded through its backward node now, as a use would)
            elif self.index_of(t) is None:
                i = self.new_tensor(t, None, 0, None, region)
                self.made[i] = ("autograd.grad", lasti)
                if created is not None:
                    self.grad_created[i] = created
                if where is not None:
                    self.origins[i] = where

    def record_exit(self, func, t: _Tensor) -> None:
        """A call that handed the value of ``t`` out as Python or NumPy numbers (``.item()``,
        ``.numpy()``, ...): an op with that input and no tensor output, when ``t`` requires
        grad (the value leaves the graph there: whatever is made from it has no history)."""
        self.direct = None
        if not t.requires_grad or not _grad_enabled():
            return
        frame = self.frame
        lasti = frame.f_lasti if frame is not None else -1
        if frame is not None and lasti != self.last_lasti:
            self.look_back(frame, lasti)
        i = self.input(t)
        j = self.new_op(None, _FUNC_NAMES.get(func) or func_name(func), None, scope=self.scope())
        self.ops[j][_INS] = (i,)
        self.ops[j][_LASTI] = lasti
        self.calls.append(j)
        self.note_where(j, [t])
