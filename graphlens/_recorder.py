"""The record store behind a trace: what each forward op made, and what backward did."""

from __future__ import annotations

import weakref
from functools import partial
from types import FrameType
from typing import Any, Callable

import torch

from ._facts import read_head, read_saved, same_data, shape_of, version_of
from ._safety import guard_teardown
from ._util import paused_gc, tensors_in
from .names import frame_candidates

__all__ = ["Recorder"]

_Tensor = torch.Tensor
_Parameter = torch.nn.Parameter
_STRIDED = torch.strided
_CUSTOM_NODE = torch.autograd.function.BackwardCFunction
_grad_enabled = torch.is_grad_enabled
_ref = weakref.ref

#: What a recorded call is, by the function torch hands the mode (cached per function).
PLAIN, DETACH = 0, 1
_DETACHES = {_Tensor.detach, _Tensor.detach_, _Tensor.data.__get__}  # type: ignore[attr-defined]

# A tensor record ("facts") is one immutable tuple of plain values (indexes below), so
# the garbage collector stops tracking it at its first pass: a trace of many small ops
# must not fill the oldest generation with objects that each full collection walks again.
_SHAPE, _DTYPE, _DEVICE, _IS_LEAF, _REQUIRES_GRAD, _VERSION, _IS_VIEW, _IS_PARAM = range(8)
_OP, _OUTPUT_NR, _DETACHED_FROM, _REGION, _SCOPE = range(8, 13)

_FUNC_NAMES: dict[Any, str] = {}


def func_name(func: Callable) -> str:
    """The name a forward call is shown by (``mul``, ``linear``, ``Tensor.data.__get__``)."""
    name = _FUNC_NAMES.get(func)
    if name is not None:
        return name
    name = getattr(func, "__name__", None) or repr(func)
    if name in ("__get__", "__set__"):
        owner = getattr(getattr(func, "__self__", None), "__name__", "")
        name = f"{owner}.{name}" if owner else name
    if len(_FUNC_NAMES) < 4096 and not isinstance(getattr(func, "__self__", None), _Tensor):
        try:
            _FUNC_NAMES[func] = name  # torch functions and Tensor methods: a small fixed set
        except TypeError:
            pass
    return name


def grad_fn_of(t: _Tensor) -> Any:
    """``t.grad_fn``, or None where PyTorch refuses to give it (a view made in no_grad
    whose base was changed in place since): graphlens must not fail where torch works."""
    try:
        return t.grad_fn
    except RuntimeError:
        return None


def readable(t: _Tensor) -> bool:
    """Whether torch still describes ``t`` (see :func:`grad_fn_of`)."""
    try:
        t.grad_fn
    except RuntimeError:
        return False
    return True


def sequence_now() -> int:
    """The autograd sequence number the next backward node made on this thread will get."""
    with torch.enable_grad(), torch._C.DisableTorchFunction():  # an enclosing trace must not see it
        probe = torch.zeros((), requires_grad=True).mul(1)
    return probe.grad_fn._sequence_nr() + 1


def _flow(rec: "Recorder", j: int, targets: tuple, grad_outputs: tuple) -> None:
    """The pre-hook body: note what flows into each recorded output of op ``j``.  It reads
    only a few numbers (made into a Summary later) and returns None: grads are untouched."""
    flowed, pass_nr, limit = rec.flowed, rec.passes, rec.max_elements
    n = len(grad_outputs)
    for nr, i in targets:
        if nr < n:
            g = grad_outputs[nr]
            flowed.append((i, pass_nr, None if g is None else read_head(g, limit)))
    return None


class Recorder:
    """Records of every tensor and op a trace saw, as parallel lists of plain values.

    Tensors are numbered by record (``t{i}`` in the graph), ops likewise (``op{j}``).
    The store keeps weak references to tensors and no backward node at all: a node is
    found again by its autograd sequence number (AccumulateGrad nodes by their leaf).
    """

    def __init__(self, *, grads: bool, saved: bool, max_elements: int, first_seq: int) -> None:
        self.grads = grads
        self.saved = saved
        self.max_elements = max_elements
        self.first_seq = first_seq  # nodes made before the block are boundaries
        # Tensor records, by index: a weak reference, the facts tuple, the name.
        self.refs: list[weakref.ref] = []
        self.facts: list[tuple] = []
        self.tnames: list[str | None] = []
        self.values: dict[int, tuple] = {}  # record -> head of its value when made (CPU tensors)
        self.stale: set[int] = set()  # records replaced by a newer version of their tensor
        self.flowed: list[tuple[int, int, Any]] = []  # (record, backward pass, what flowed)
        self.by_id: dict[int, int] = {}  # id(tensor) -> latest record index (checked by weakref)
        self.roots: list[int] = []
        # Op records, by index.
        self.oname: list[str | None] = []
        self.ovar: list[int | None] = []  # an AccumulateGrad's leaf record
        self.owhere: list[tuple] = []  # (forward op name, region, scope)
        self.oout: list[dict[int, int]] = []  # output_nr -> tensor record (latest)
        self.osaved: dict[int, tuple] = {}  # read from the live node at backward / graph time
        self.volatile: dict[int, tuple[int, ...]] = {}  # op -> saved positions backward may free
        self.onext: dict[int, tuple] = {}  # op -> ((input_nr, op index, output_nr), ...)
        self.expanded: set[int] = set()
        self.by_seq: dict[int, int] = {}  # a backward node's sequence number -> its op record
        self.inputs: list[tuple[int, tuple[int, ...]]] = []  # (op index, input tensor indices)
        self.oin: dict[int, tuple[int, ...]] = {}  # op -> its latest input tensor indices
        self.acc: dict[int, int] = {}  # leaf record index -> its AccumulateGrad op index
        self.region: str | None = None
        self.regions = 0
        self.scopes: list[str] = []
        self.passes = 0
        self.frame: FrameType | None = None
        self.last_lasti = -1

    # -- tensors -------------------------------------------------------------------------
    def region_now(self) -> str | None:
        """The no_grad region ops run in now (``"no_grad#0"``), or None with grad on."""
        if _grad_enabled():
            self.region = None
        elif self.region is None:
            kind = "inference_mode" if torch.is_inference_mode_enabled() else "no_grad"
            self.region = f"{kind}#{self.regions}"
            self.regions += 1
        return self.region

    def index_of(self, t: _Tensor) -> int | None:
        """The latest record of the live tensor ``t``, or None."""
        i = self.by_id.get(id(t))
        if i is not None and self.refs[i]() is t:
            return i
        return None

    def new_tensor(self, t: _Tensor, op, output_nr: int, detached_from, region, *, external: bool = False) -> int:
        """A new record of ``t`` (a new tensor, or a new version of a recorded one)."""
        refs = self.refs
        i = len(refs)
        key = id(t)
        old = self.by_id.get(key)
        name = None
        if old is not None and refs[old]() is t:
            self.stale.add(old)
            name = self.tnames[old]
        try:
            is_leaf = t.is_leaf
        except RuntimeError:  # a view torch will not describe (see grad_fn_of): no graph of its own
            is_leaf = True
        try:
            shape = t.shape  # a torch.Size: plain ints, spelled out when the graph is built
        except RuntimeError:  # a strided nested tensor
            shape = shape_of(t)
        cls = type(t)
        scopes = self.scopes
        self.facts.append((
            shape, t.dtype, t.device, is_leaf, t.requires_grad, version_of(t), t._is_view(),
            cls is _Parameter or (cls is not _Tensor and isinstance(t, _Parameter)), op, output_nr,
            detached_from, region, None if external or not scopes else scopes[-1],
        ))
        limit = self.max_elements
        if limit and t.is_cpu:
            # A tensor keeps the head of its value as made: the record outlives the tensor,
            # and an older version (before an in-place op) shows what it held then.  (Not
            # on accelerators, where reading would wait for the device.)  Small tensors are
            # read whole here, as numbers; Summary objects are made only by graph().
            if len(shape) == 1 and 0 < shape[0] <= limit and t.layout is _STRIDED and not t.is_nested:
                self.values[i] = (shape, t.dtype, shape[0], tuple(t.tolist()))
            else:
                self.values[i] = read_head(t, limit)
        refs.append(_ref(t))
        self.tnames.append(name)
        self.by_id[key] = i
        return i

    def input(self, t: _Tensor) -> int:
        """The record of an input tensor, made now if the tensor came from outside."""
        i = self.by_id.get(id(t))
        if i is not None and self.refs[i]() is t:
            f = self.facts[i]
            if f[_REQUIRES_GRAD] or (f[_OP] is not None and self.oname[f[_OP]] is not None):
                return i
            return self.adopted(t, i) if version_of(t) == f[_VERSION] else i
        fn = grad_fn_of(t)
        if fn is None:
            return self.new_tensor(t, None, 0, None, None, external=True)
        op = self.op_of(fn, None)
        nr = t.output_nr
        i = self.new_tensor(t, op, nr, None, None, external=True)
        self.oout[op].setdefault(nr, i)
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
        if self.owhere[op][0] is None and isinstance(fn, _CUSTOM_NODE):
            name = self.oname[op] or ""
            self.owhere[op] = (name.removesuffix("Backward") + ".apply", self.region_now(), self.scope())
        nr = t.output_nr
        j = self.new_tensor(t, op, nr, None, None)  # it has a grad_fn: made with grad on
        self.oout[op][nr] = j
        return j

    def scope(self) -> str | None:
        """The innermost submodule running now (traced with ``module=``)."""
        return self.scopes[-1] if self.scopes else None

    # -- ops -----------------------------------------------------------------------------
    def new_op(self, name, forward, region, variable=None, scope=None) -> int:
        j = len(self.oname)
        self.oname.append(name)
        self.ovar.append(variable)
        self.owhere.append((forward, region, scope))
        self.oout.append({})
        return j

    def op_of(self, fn: Any, forward: str | None, region: str | None = None) -> int:
        """The op record of a backward node, found by the node's autograd sequence number
        (and class), so the store holds no reference to the node and writes nothing into it."""
        name = type(fn).__name__
        if name == "AccumulateGrad":
            # All AccumulateGrad nodes share one sequence number, and torch rebuilds a
            # leaf's node when the old one died: key it by the leaf.
            vi = self.input(fn.variable)
            j = self.acc.get(vi)
            if j is None:
                j = self.acc[vi] = self.new_op("AccumulateGrad", None, None, variable=vi)
            return j
        seq = fn._sequence_nr()
        j = self.by_seq.get(seq)
        if j is not None and self.oname[j] == name:
            return j
        j = self.new_op(name, forward, region if forward else None, scope=self.scopes[-1] if self.scopes else None)
        self.by_seq[seq] = j
        return j

    # -- the forward pass ----------------------------------------------------------------
    def record(self, func, kind: int, args: tuple, kwargs: dict, out: Any) -> None:
        """Record one call the mode saw: its input tensors, its outputs, its backward node."""
        if isinstance(out, _Tensor):
            outs: list = [out]
        else:
            outs = tensors_in(out, [])
            if not outs:
                return
        frame = self.frame
        if frame is not None and frame.f_lasti != self.last_lasti:
            self.scan_names()
        ins: list = []
        for a in args:
            if isinstance(a, _Tensor):
                ins.append(a)
            elif isinstance(a, (list, tuple)):
                tensors_in(a, ins)
        if kwargs:
            for a in kwargs.values():
                tensors_in(a, ins)
        region = None if _grad_enabled() and self.region is None else self.region_now()
        if kind == DETACH:
            src = self.input(ins[0]) if ins else None
            for t in outs:
                self.new_tensor(t, None, 0, src, region)
            return
        # The inputs' records (the common case inline: a recorded tensor that requires grad).
        by_id, refs, facts = self.by_id, self.refs, self.facts
        in_ids: list = []
        for t in ins:
            i = by_id.get(id(t))
            if i is not None and refs[i]() is t and facts[i][_REQUIRES_GRAD]:
                in_ids.append(i)
            else:
                in_ids.append(self.input(t))
        # An op that hands back one of its inputs unchanged (requires_grad_(), .to() of the
        # same dtype, ...) makes no new tensor; an in-place op makes a new version.
        fresh = []
        for t in outs:
            i = by_id.get(id(t))
            if i is not None and i in in_ids and refs[i]() is t:
                f = facts[i]
                if f[_VERSION] == version_of(t) and (f[_OP] is None) == (grad_fn_of(t) is None):
                    continue
            fresh.append(t)
        if not fresh:
            return
        fn = grad_fn_of(fresh[0])
        if fn is None and not in_ids:  # a factory (torch.tensor, randn, ...): a plain leaf
            for t in fresh:
                self.new_tensor(t, None, 0, None, region)
            return
        forward = _FUNC_NAMES.get(func) or func_name(func)
        if fn is not None:
            op = self.op_of(fn, forward, region)
            where = self.owhere[op]
            if where[0] is None:
                self.owhere[op] = (forward, region, self.scope())
        else:
            op = self.new_op(None, forward, region, scope=self.scope())
        ids = tuple(in_ids)
        self.inputs.append((op, ids))
        self.oin[op] = ids
        outputs = self.oout[op]
        if len(fresh) == 1 and fn is not None:
            t = fresh[0]
            nr = t.output_nr
            outputs[nr] = self.new_tensor(t, op, nr, None, region)
            return
        for k, t in enumerate(fresh):
            nr = t.output_nr if fn is not None and grad_fn_of(t) is fn else k
            outputs[nr] = self.new_tensor(t, op, nr, None, region)

    def scan_names(self) -> None:
        """Name recorded tensors after the variables of the block's frame that hold them
        now; a name rebound later keeps naming the tensor it held first.  The frame is
        read again only once it has moved on (a loop calling the same line is read once)."""
        frame = self.frame
        if frame is None:
            return
        lasti = frame.f_lasti
        if lasti == self.last_lasti:
            return
        self.last_lasti = lasti
        names = self.tnames
        for name, t in frame_candidates(frame, with_globals=False):
            i = self.index_of(t)
            if i is not None and names[i] is None:
                names[i] = name

    # -- the backward structure ------------------------------------------------------------
    def complete(self, fns: list, *, hook: bool = False) -> list:
        """Walk the live nodes reachable from ``fns``: record each node's ``next`` edges
        once and read its saved attributes now.  Nodes made before the block are recorded
        but not walked into.  With ``hook``, put a pre-hook recording the gradient that
        flows into each recorded output on every node visited; returns the hooks' handles
        (remove them when backward is done, also on an error)."""
        handles: list = []
        seen: set = set()
        stack = [fn for fn in fns if fn is not None]
        first = self.first_seq
        expanded, ovar, osaved, owhere, oout = self.expanded, self.ovar, self.osaved, self.owhere, self.oout
        volatile, by_seq, oname, onext = self.volatile, self.by_seq, self.oname, self.onext
        read = self.saved
        op_of = self.op_of
        try:
            with paused_gc():
                while stack:
                    fn = stack.pop()
                    if fn in seen:
                        continue
                    seen.add(fn)
                    name = type(fn).__name__
                    j = by_seq.get(fn._sequence_nr()) if name != "AccumulateGrad" else None
                    if j is None or oname[j] != name:
                        j = op_of(fn, None)
                    var = ovar[j]
                    if hook:
                        targets = ((0, var),) if var is not None else tuple(oout[j].items())
                        if targets:
                            handles.append(fn.register_prehook(partial(_flow, self, j, targets)))
                    if var is not None:
                        expanded.add(j)
                        continue
                    if read:
                        # Plain saved values never change: only tensors can be freed since.
                        osaved[j], volatile[j] = read_saved(
                            fn, osaved.get(j), volatile.get(j, ()), resolve=partial(self.saved_tensor, j)
                        )
                    if j in expanded:
                        if j in onext:  # walked before: only its hooks and saved values are new
                            stack.extend(c for c, _ in fn.next_functions if c is not None and c not in seen)
                        continue  # (else a boundary)
                    expanded.add(j)
                    if fn._sequence_nr() < first:
                        continue  # made before the block: a boundary
                    links = []
                    for input_nr, (child, output_nr) in enumerate(fn.next_functions):
                        if child is not None:
                            k = op_of(child, None)
                            forward, region, scope = owhere[k]
                            if scope is None and forward is None:
                                owhere[k] = (forward, region, owhere[j][2])  # e.g. the TBackward0 inside linear
                            links.append((input_nr, k, output_nr))
                            if child not in seen:
                                stack.append(child)
                    onext[j] = tuple(links)
        except BaseException:
            for h in handles:
                h.remove()
            raise
        finally:
            fn = child = None
        guard_teardown(len(seen))
        return handles

    def revisit(self, fns: list) -> None:
        """Walk again from ``fns`` (no hooks), for nodes a backward never reached; saved
        values already freed are not read again."""
        self.complete(fns)

    def saved_tensor(self, j: int, value: _Tensor, _name: str) -> str | None:
        """The record a tensor saved by op ``j`` is: one of the op's own recorded inputs or
        outputs holding the same data (PyTorch hands a saved tensor back as a new object)."""
        near = [*self.oin.get(j, ()), *self.oout[j].values()]
        refs = self.refs
        for i in reversed(near):  # the latest version first
            t = refs[i]()
            if t is not None and same_data(t, value):
                return f"t{i}"
        i = self.index_of(value)
        return None if i is None else f"t{i}"

    def note_roots(self, roots: list) -> None:
        for t in roots:
            if isinstance(t, _Tensor):
                i = self.input(t)
                if i not in self.roots:
                    self.roots.append(i)

    def hook_grad_inputs(self, inputs: Any) -> list:
        """torch.autograd.grad hands leaf inputs their gradient without running their
        AccumulateGrad node, so a tensor hook records what flows into each of them."""
        found = tensors_in(inputs, [])
        handles = []
        for t in found:
            i = self.index_of(t)
            if i is None or not t.is_leaf or not t.requires_grad:
                continue
            handles.append(t.register_hook(partial(_note_grad, self, i)))
        return handles


def _note_grad(rec: Recorder, i: int, grad: Any) -> None:
    rec.flowed.append((i, rec.passes, None if grad is None else read_head(grad, rec.max_elements)))
    return None
