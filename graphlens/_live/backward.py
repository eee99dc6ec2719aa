"""What a trace records of backward: the walk that hooks every node, the engine's steps, the ``.grad`` writes."""

from __future__ import annotations

import weakref
from functools import partial
from typing import Any

import torch

from .capture import _INS, _NAME, _OSCOPE, _OUTS, _VAR, _FORWARD, grad_head, kept_grad, outputs_of
from .facts import known_finite, read_saved, same_data
from .finite import SENDS_FINITE, elements_within
from .guard import _dispatch_depth, quiet
from .._util import paused_gc, tensors_in

__all__ = ["BackwardRecord"]

_Tensor = torch.Tensor
_ref = weakref.ref
_stack_len = torch._C._len_torch_function_stack


def _step(rec: Any, j: int, targets: tuple, watch: tuple, grad_inputs: tuple, grad_outputs: tuple) -> None:
    """The post-hook body: op ``j`` has just run.  Note the step (what arrived at the node,
    what it sent along each of its ``next_functions``), what flowed into each recorded
    output, and the ``.grad`` of the tensors it writes (a leaf's AccumulateGrad, a
    ``retain_grad()`` output) as it stands now.  Only a few numbers are read; it returns
    None, so the gradients are untouched, and it never raises into the user's backward.
    A user's mode is on while backward runs: where one could see a read, the reads run
    under torch's guard."""
    try:
        if _stack_len() or _dispatch_depth():
            with quiet():
                _note_step(rec, j, targets, watch, grad_inputs, grad_outputs)
        else:
            _note_step(rec, j, targets, watch, grad_inputs, grad_outputs)
    except Exception:  # noqa: BLE001 - recording must never break the user's backward
        pass
    return None


def _note_step(rec: Any, j: int, targets: tuple, watch: tuple, grad_inputs: tuple, grad_outputs: tuple) -> None:
    limit, pass_nr, heads = rec.max_elements, rec.passes, rec.sent_heads
    got = []
    for g in grad_outputs:  # (what arrives was sent by a node before: its head is known, read inline)
        if g is None:
            got.append(None)
            continue
        hit = heads.get(id(g))
        if hit is not None and hit[1] == g._version and hit[0]() is g:
            got.append(hit[2])
        else:
            got.append(_head_once(heads, g, limit))
    arrived = tuple(got)
    # (a node of SENDS_FINITE that no Python hook of the user's ran on before this one sends
    # finite gradients when every one that arrived is: nothing to reduce)
    finite = j in rec.first_hooked and all(known_finite(h) for h in arrived)
    sent = tuple([_head_once(heads, g, limit, grad_outputs, arrived, finite=finite) for g in grad_inputs])
    k = len(rec.steps)
    rec.steps.append((j, pass_nr, arrived, sent)); rec.order.append(j)  # noqa: E702 - (kept in step)
    n = len(arrived)
    for nr, i in targets:
        if nr < n:
            rec.flowed.append((i, pass_nr, arrived[nr]))
    for i in watch:
        t = rec.refs[i]()
        if t is not None:
            rec.writes.append((k, i, _written(heads, t, limit, grad_outputs, arrived)))


def _written(heads: dict, t: Any, limit: int, got: tuple, known: tuple) -> Any:
    """The head of ``t.grad`` where torch keeps one (see :func:`~graphlens._live.capture.kept_grad`):
    when it is the very memory the node just got (an AccumulateGrad that kept the gradient
    instead of copying it), the head already read of that gradient."""
    if t is None or not (t.retains_grad or t.is_leaf):
        return None
    g = t.grad
    if g is None:
        return None
    for src, h in zip(got, known):
        if src is not None and h is not None and src._version == g._version and same_data(src, g):
            return h
    return _head_once(heads, g, limit)


def _head_once(heads: dict, g: Any, limit: int, sources: tuple = (), known: tuple = (), *, finite: bool = False) -> Any:
    """The head of gradient ``g``, read once per pass: what a node sent arrives at the next
    node as the very same tensor object, so its head is reused there unless it changed in
    place since (its version moved).  ``heads`` maps ``id(g)`` to a weak reference, the
    version and the head; the weak reference checks the id still names that tensor.  A
    gradient that is a view holding only elements of one of ``sources`` (the gradients
    that arrived at the node, whose heads are ``known``) that is finite is finite too, with
    no second reduction (``TBackward0`` sends a transpose of what it got); ``finite``: the
    caller knows it is (see :data:`graphlens._live.finite.SENDS_FINITE`)."""
    if g is None:
        return None
    hit = heads.get(id(g))
    version = g._version
    if hit is not None and hit[1] == version and hit[0]() is g:
        return hit[2]
    if finite and type(g) is not _Tensor:
        finite = False
    if not finite and sources and g._is_view():
        for src, h in zip(sources, known):
            if src is not None and src._version == version and known_finite(h) and elements_within(g, src):
                finite = True
                break
    head = grad_head(g, limit, finite=finite)
    heads[id(g)] = (_ref(g), version, head)
    return head


def _note_grad(rec: Any, i: int, grad: Any) -> None:
    """A tensor hook's body: what ``torch.autograd.grad`` hands leaf record ``i``."""
    try:
        with quiet():
            rec.flowed.append((i, rec.passes, grad_head(grad, rec.max_elements)))
    except Exception:  # noqa: BLE001 - recording must never break the user's backward
        pass
    return None


class BackwardRecord:
    """The backward half of :class:`graphlens._live.recorder.Recorder` (its store is set up there)."""

    def note_first_hook(self, j: int, handle: Any) -> None:
        """Note whether the post-hook just put on op ``j``'s node (``handle``) is the first
        Python post-hook it has: then no hook of the user's can have changed what the node
        sent before graphlens reads it (torch keeps a node's Python post-hooks in one
        ordered dict and runs them in order; hooks added later run after graphlens's)."""
        try:
            hooks = handle.hooks_dict_ref()
            first = hooks is not None and next(iter(hooks), None) == handle.id
        except Exception:  # noqa: BLE001 - not known: read the gradients
            first = False
        if first:
            self.first_hooked.add(j)
        else:
            self.first_hooked.discard(j)

    def complete(self, fns: list, *, handles: list | None = None, before_backward: bool = False) -> set:
        """Walk the live nodes reachable from ``fns``: record each node's ``next`` edges
        once, and read what it saved where the forward pass did not (or again, where
        backward may have freed it since).  Nodes made before the block are recorded but
        not walked into.  Given ``handles``, put a pre-hook on every node visited, which
        notes when the node runs and the gradient flowing into each of its recorded
        outputs, and append the hooks' handles (remove them when backward is done, also on
        an error, also when this walk is cut short).  ``before_backward``: a backward is
        about to run, so what the forward pass read of a node is still true and is not read
        again.  Returns the op records visited."""
        hook = handles is not None
        visited: set = set()
        seen: set = set()
        # (each node with its op record when known: a child's is found as its parent links it)
        stack = [(fn, -1) for fn in fns if fn is not None]
        first = self.first_seq
        ops, expanded, osaved, volatile, by_seq, onext = (
            self.ops, self.expanded, self.osaved, self.volatile, self.by_seq, self.onext
        )
        read = self.saved
        op_of, rows, saved_of, refs = self.op_of, self.rows, self.saved_of, self.refs
        try:
            with paused_gc():
                while stack:
                    fn, j = stack.pop()
                    if fn in seen:
                        continue
                    seen.add(fn)
                    name = type(fn).__name__
                    if j < 0:
                        j = by_seq.get(fn._sequence_nr()) if name != "AccumulateGrad" else None
                        if j is None or ops[j][_NAME] != name:
                            j = op_of(fn, None)
                    visited.add(j)
                    orec = ops[j]
                    var = orec[_VAR]
                    if hook:
                        if var is not None:
                            targets, watch = ((0, var),), (var,)
                        else:
                            outs = orec[_OUTS]  # (one (output_nr, record) pair, or a dict)
                            targets = (outs,) if type(outs) is tuple else tuple(outs.items())
                            if len(targets) == 1:  # (one output, _retained's common case inline)
                                t = refs[targets[0][1]]()
                                watch = (targets[0][1],) if t is not None and t.retains_grad else ()
                                t = None
                            else:
                                watch = self._retained([i for _, i in targets])
                        for i in watch:
                            self.grad_before.setdefault((self.passes, i), kept_grad(self.refs[i](), self.max_elements))
                        handles.append(fn.register_hook(partial(_step, self, j, targets, watch)))  # (removed by the caller)
                        if name in SENDS_FINITE:
                            self.note_first_hook(j, handles[-1])
                    if var is not None:
                        expanded.add(j)
                        continue
                    if read and not (before_backward and (j in osaved or j in rows)):
                        # (before a backward, what the forward pass read is still true)
                        osaved[j], volatile[j] = read_saved(
                            fn, saved_of(j), volatile.get(j, ()), resolve=partial(self.saved_tensor, j), book=self.storages
                        )
                    if j in expanded:
                        if j in onext:  # walked before: only its hooks and saved values are new
                            stack.extend((c, -1) for c, _ in fn.next_functions if c is not None and c not in seen)
                        continue  # (else a boundary)
                    expanded.add(j)
                    if fn._sequence_nr() < first:
                        continue  # made before the block: a boundary
                    links = []
                    for input_nr, (child, output_nr) in enumerate(fn.next_functions):
                        if child is not None:
                            cname = type(child).__name__  # (op_of, its common case inline)
                            k = by_seq.get(child._sequence_nr()) if cname != "AccumulateGrad" else None
                            if k is None or ops[k][_NAME] != cname:
                                k = op_of(child, None)
                            crec = ops[k]
                            if crec[_OSCOPE] is None and crec[_FORWARD] is None:
                                self.thaw(k)[_OSCOPE] = orec[_OSCOPE]  # e.g. the TBackward0 inside linear
                            links.append((input_nr, k, output_nr))
                            if child not in seen:
                                stack.append((child, k))
                    onext[j] = tuple(links)
        finally:
            fn = child = None
        return visited

    def _retained(self, records) -> tuple:
        """The records among ``records`` whose live tensor keeps its grad (``retain_grad()``)."""
        out = []
        for i in records:
            t = self.refs[i]()
            # (retains_grad only, False for a leaf: reading is_leaf or grad_fn of a view changed in
            # place since it was used would rebuild its node now and move its retain_grad hook
            # off the node backward is about to run)
            if t is not None and t.retains_grad:
                out.append(i)
        return tuple(out)

    def saved_tensor(self, j: int, value: _Tensor, _name: str) -> str | None:
        """The record a tensor saved by op ``j`` is: one of the op's own recorded inputs or
        outputs holding the same data (PyTorch hands a saved tensor back as a new object)."""
        orec = self.ops[j]
        near = [*(orec[_INS] or ()), *outputs_of(orec)]
        refs = self.refs
        for i in reversed(near):  # the latest version first
            t = refs[i]()
            if t is not None and same_data(t, value):
                return f"t{i}"
        i = self.index_of(value)
        return None if i is None else f"t{i}"

    # -- a backward call ------------------------------------------------------------------
    def begin_pass(self, roots: list, *, kept: bool) -> None:
        """Note a backward call from ``roots`` (``kept``: with ``retain_graph``)."""
        for t in roots:
            if isinstance(t, _Tensor):
                i = self.input(t)
                if i not in self.roots:
                    self.roots.append(i)
        self.sent_heads.clear()
        self.pass_starts.append(len(self.order)); self.pass_kept.append(kept); self.pass_done.append(False)  # noqa: E702

    def end_pass(self, *, done: bool) -> None:
        """End the pass :meth:`begin_pass` began (nothing when none is open)."""
        self.sent_heads.clear()
        if len(self.pass_done) > self.passes:
            self.pass_done[self.passes] = done; self.passes += 1  # noqa: E702 - (one line: both or neither)

    def hook_grad_inputs(self, inputs: Any, handles: list) -> None:
        """torch.autograd.grad hands leaf inputs their gradient without running their
        AccumulateGrad node, so a tensor hook records what flows into each of them (the
        hooks' handles are appended to ``handles``, for the caller to remove)."""
        for t in tensors_in(inputs, []):
            i = self.index_of(t)
            if i is None or not t.is_leaf or not t.requires_grad:
                continue
            handles.append(t.register_hook(partial(_note_grad, self, i)))

    def released(self) -> set[int]:
        """The ops that ran in a backward pass that finished without ``retain_graph``:
        PyTorch released what they saved."""
        out: set[int] = set()
        order, starts = self.order, self.pass_starts + [len(self.order)]
        for p in range(self.passes):
            if self.pass_done[p] and not self.pass_kept[p]:
                out.update(order[starts[p]:starts[p + 1]])
        return out
