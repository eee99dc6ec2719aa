"""What a live tensor shows beyond its graph: a ``.grad`` already there, changes through ``.data``, hooks."""

from __future__ import annotations

from typing import Callable, Mapping, NamedTuple

import torch

from .._live.facts import summarize
from ..values import same_head
from .._live.safety import KEEP_MIN_NODES, keep_children
from ..graph import PRECISION
from ..snapshot import snapshot
from .live import reaches, shares_memory
from .paths import PathView
from .types import Explanation

__all__ = [
    "name_among", "CtxChange", "ctx_changes", "ctx_change_sentence", "add_ctx_change", "grad_already_there", "changed_untracked", "saved_then_written", "node_version", "data_aliases", "data_alias_sentence",
    "hooks_of", "hook_sentence", "hook_fix", "producer", "rebound", "in_optimizer", "unrecorded_sentence",
]

def name_among(t: torch.Tensor, candidates: list, names: Mapping | None) -> str | None:
    """The name the user gives ``t``: in ``names=`` first, else among the caller's variables."""
    if names:
        found = next((str(n) for n, v in names.items() if v is t), None)
        if found is not None:
            return found
    return next((n for n, v in candidates if v is t), None)


def unrecorded_sentence(where: str, who: str) -> str:
    """What an answer says first about a tensor the given trace or graph never recorded
    (``where``: ``"trace"``, ``"traced graph"`` or ``"graph"``)."""
    if where in ("trace", "traced graph"):
        given = "The trace given never recorded" if where == "trace" else "The graph given (from a trace) holds no record of"
        return (f"{given} {who}: the trace saw no operation make or use it ({who} was made outside its "
                f"block or in another trace, or by a legacy constructor such as torch.FloatTensor, which a trace cannot "
                f"see), so what follows is read from the live tensor itself.")
    return (f"The graph given does not hold {who} (a snapshot records the leaves its roots reach and the tensors it "
            f"could name), so what follows is read from the live tensors: {who} and the graph's roots.")


def grad_already_there(
    tensor: torch.Tensor, candidates: list, names, precision: int = PRECISION, *, unrecorded: str | None = None
) -> Explanation | None:
    """With no root given (or none alive), a tensor that holds a ``.grad`` right now is
    answered as such: its value, and that it is the sum of every backward pass since it was
    last cleared.  ``unrecorded`` (``"trace"`` or ``"graph"``): the one given never recorded
    the tensor, which the answer says first."""
    try:
        keeps = tensor.is_leaf or tensor.retains_grad
    except RuntimeError:
        return None
    grad = tensor.grad if keeps else None
    if grad is None:
        return None
    name = name_among(tensor, candidates, names)
    value = summarize(grad)
    del grad
    g = snapshot(tensor, names={name: tensor}) if name else snapshot(tensor)  # (else named after the caller's variable)
    tid = g.roots[0].id
    name = name or g.roots[0].name
    who = name or "the tensor"
    sentences = [
        f"{who + '.grad' if name else 'Its .grad'} is set: {value.format(precision)}.",
        f"It holds the sum of the gradients of every backward pass that reached {who} since its "
        "gradient was last cleared: PyTorch adds each new gradient to .grad, it does not replace it.",
    ]
    fix = (
        f"If {who + '.grad' if name else 'the gradient'} is larger than you expect (doubled, say), an earlier backward "
        f"added to it: call optimizer.zero_grad() (or set .grad = None) before each backward. Pass the loss as root, "
        f"explain({who}, loss), to see the path the gradient takes."
    )
    reasons = ["grad_ok"]
    aliases = data_aliases(candidates, lambda t: reaches([t.grad_fn], tensor))
    if aliases:
        reasons.append("modified_through_data")
        text, fix = data_alias_sentence(aliases)
        sentences[1:] = [text]
    hooks = hooks_of(tensor)
    if hooks:
        reasons.append("hook_changed_grad")
        sentences[1:] = [hook_sentence(who, hooks)]
        fix = hook_fix(who, hooks)
    if unrecorded:
        reasons.append("not_recorded")
        sentences.insert(0, unrecorded_sentence(unrecorded, who))
    return Explanation(reasons, sentences, fix=fix, tensor_name=name, tensor_id=tid, graph=g, path=(tid,))


_INPLACE_DUNDERS = frozenset({"__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__"})


def saved_then_written(view: PathView, path: list[str], skip: frozenset | set = frozenset()) -> tuple | None:
    """What a trace saw: an op on the gradient's path saved a tensor for backward, and the
    block then changed that tensor in place through a ``.data`` alias of it (``c = out.data;
    c.zero_()``), which moves no version counter.  ``(sentence, fix, node ids, (the writing
    call's name, its op id))`` or None."""
    g = view.g
    aliases = {t.id: t for t in g.tensors if t.made_by == "data" and t.detached_from is not None}
    if not aliases:
        return None
    writers: dict[str, tuple] = {}  # tensor id -> (its .data alias, the op that wrote through it)
    for e in g.edges:
        if e.kind == "input" and e.src in aliases:
            op, alias = view.o(e.dst), aliases[e.src]
            f = op.forward or ""
            later = [view.t(x) for x in view.adj.outputs.get(op.id, ())]
            if (f.endswith("_") and not f.startswith("__") or f in _INPLACE_DUNDERS
                    or any(o.name == alias.name and o.version > alias.version for o in later)):
                writers.setdefault(alias.detached_from, (alias, op, later))
    if not writers:
        return None
    for oid in path:
        if not oid.startswith("op"):
            continue
        saver = view.o(oid)
        for entry in saver.saved:
            if entry.tensor not in writers or entry.tensor in skip:
                continue
            tid = entry.tensor
            alias, op, later = writers[tid]
            node = view.t(tid)
            name, via = node.name or view.label(tid), alias.name or view.label(alias.id)
            where = f" ({op.code}, line {op.line})" if op.code and op.line else f" ({op.forward})" if op.forward else ""
            now = next((o.value for o in later if o.value is not None), None)
            values = (f": it held {node.value.format()} when it was saved and holds {now.format()} after"
                      if node.value is not None and now is not None and not same_head(now.head, node.value.head) else "")
            text = (
                f"{saver.label} saved {name} for backward, and the block then changed {name} in place through "
                f"{via} = {name}.data{where}{values}. A change through .data does not move the version counter, so a "
                f"backward run after it raises no error and computes with the changed values: the gradient is silently wrong."
            )
            fix = (
                f"Do not change {name} through .data while its graph is needed: use {name}.detach() (backward then "
                f"raises instead of computing a wrong gradient) or clone() it, and change the copy."
            )
            return text, fix, [alias.id, tid, oid, op.id], (op.forward, op.id)
    return None


def changed_untracked(view: PathView, path: list[str], skip: frozenset | set = frozenset()) -> tuple | None:
    """A tensor on the gradient's path whose values changed since it was made while its
    version did not: a change through ``.data`` (or another alias autograd does not track).
    Backward then computes with the changed values, silently.  ``skip``: tensors whose
    version moved after the trace ended (a tracked change the trace did not see: not this).
    What the trace itself saw (:func:`saved_then_written`) is told first."""
    seen = saved_then_written(view, path, skip)
    if seen is not None:
        return seen
    for tid in path:
        if not tid.startswith("t") or tid in skip:
            continue
        node = view.t(tid)
        live = view.g.tensor(tid)
        if live is None or node.value is None or not node.value.head:
            continue
        now = summarize(live)
        if now is None or same_head(now.head, node.value.head) or node.version != node_version(live):
            continue
        alias = [t for t in view.g.tensors if t.detached_from == tid and t.made_by == "data"]
        via = f" through {view.label(alias[0].id)} = {view.label(tid)}.data" if alias else " through an alias autograd does not track (.data)"
        if node.is_leaf and not alias:
            # (a leaf's value is read when the trace first sees it, perhaps at its initialisation: no call the
            # trace saw tells whether the unseen change came before or after the forward pass used it)
            text = (
                f"{view.label(tid)} was changed{via} after the trace first saw it: its values are now {now.format()} where "
                f"they were {node.value.format()}, and its version did not change. If that change came after the forward "
                f"pass used it, backward used the changed values without an error and the gradient is silently wrong; "
                f"if it came before (an initialisation through .data), the forward pass used the new values too."
            )
        else:
            text = (
                f"{view.label(tid)} was changed{via} after it was made: its values are now {now.format()} where the graph "
                f"computed {node.value.format()}, but its version did not change, so backward used the changed values "
                f"without an error: the gradient is computed from them and is silently wrong."
            )
        fix = (
            f"Do not change {view.label(tid)} through .data while its graph is needed: use .detach() (backward then "
            f"raises instead of computing a wrong gradient) or clone() it, and change the copy."
        )
        return text, fix, [a.id for a in alias] + [tid]
    return None


def node_version(t: torch.Tensor) -> int:
    try:
        return int(t._version)
    except RuntimeError:
        return -1


def data_aliases(candidates: list, reaching: Callable[[torch.Tensor], bool]) -> list[tuple[str, str]]:
    """``(alias, target)`` names of the caller's variables that share a tensor's memory without
    sharing its version counter (as ``c = out.data`` does) and were changed in place since
    (their own version moved), where ``reaching(target)``: autograd cannot see such a change."""
    out = []
    grads = [(n, t) for n, t in candidates if t.requires_grad and t.grad_fn is not None]
    for an, a in candidates:
        try:
            if a.requires_grad or node_version(a) <= 0:
                continue
            for tn, t in grads:
                if t is not a and node_version(a) != node_version(t) and shares_memory(a, t) and reaching(t):
                    out.append((an, tn))
                    break
        except RuntimeError:
            continue
    return out


def data_alias_sentence(found: list[tuple[str, str]]) -> tuple[str, str]:
    alias, target = found[0]
    return (
        f"{alias} shares the memory of {target} without sharing its version counter (as {alias} = {target}.data does), "
        f"and it was changed in place: autograd cannot see that change, so a backward run after it computes with the "
        f"changed values of {target} (if an operation saved them) and gives a silently wrong gradient.",
        f"Do not change {target} through .data while its graph is needed: use {target}.detach() (backward then "
        f"raises instead of computing a wrong gradient) or clone() it and change the copy.",
    )


def hooks_of(t: torch.Tensor) -> list[str]:
    """The names of the hooks registered on ``t`` with ``register_hook`` (read, never run)."""
    hooks = getattr(t, "_backward_hooks", None) or {}
    return [getattr(h, "__qualname__", None) or getattr(h, "__name__", None) or type(h).__name__ for h in hooks.values()]


def hook_sentence(who: str, hooks: list[str]) -> str:
    return (
        f"{who} has {len(hooks)} hook(s) registered with register_hook ({', '.join(hooks[:3])}): a hook that returns a "
        f"tensor replaces the gradient, so {who}.grad may be what the hook made of it rather than what backward computed."
    )


def hook_fix(who: str, hooks: list[str]) -> str:
    return (
        f"Check what {hooks[0]} returns: return None (or the gradient unchanged) to leave it alone; remove the hook "
        f"with the handle register_hook gave back (handle.remove()) when it is no longer wanted."
    )


def producer(view: PathView, node) -> str | None:
    """The backward name of the op that made ``node`` (its forward name when it has none)."""
    if node is None or node.op is None or node.op not in view.g:
        return None
    return view.o(node.op).label


def rebound(view: PathView, tid: str | None, node, hints) -> tuple[int | None, str | None] | None:
    """``(line, code)`` when the tensor's name was rebound to a value computed from the tensor
    it named before (``w = w - lr * w.grad``): seen in a trace (the producing call's input
    has the same name), or read from the caller's code (``hints["rebind"]``)."""
    found = hints.get("rebind")
    if found and not found[2]:
        return found[0], found[1]
    if node is None or node.name is None or node.op is None or view.g.source != "trace":
        return None
    op = view.o(node.op)
    if any(view.t(i).name == node.name and view.t(i).is_leaf for i in view.adj.inputs.get(node.op, ())):
        return op.line, op.code
    return None


def in_optimizer(optimizer, live, node) -> bool:
    if live is None:
        return False
    return any(p is live for group in optimizer.param_groups for p in group["params"])


_CUSTOM_NODE = torch.autograd.function.BackwardCFunction


class CtxChange(NamedTuple):
    """A tensor a custom ``autograd.Function`` kept as a plain ``ctx`` attribute, changed in place after the call."""

    function: str  # the Function's name (``Square``)
    node: str  # its backward node (``SquareBackward``)
    attribute: str  # ``ctx.<attribute>``
    name: str | None  # the caller's name for the tensor
    changed_by: str  # the backward node of the first in-place change (``AddBackward0``)
    changes: int  # in-place changes since the call


def ctx_changes(roots: list, target: torch.Tensor, names: Callable[[torch.Tensor], str | None], *, limit: int = 200_000) -> list[CtxChange]:
    """The tensors kept as ``ctx`` attributes by custom Functions between ``roots`` and
    ``target`` and changed in place since the call.  autograd checks the version of what
    ``save_for_backward`` saved, not of a ``ctx`` attribute, so such a change silently
    changes the gradient.  Known only from evidence: the tensor's version moved, and its
    history since leads, one in-place op per step, back to the very node the Function's
    input edge points to (so it is the input the call used, changed after it).  A tensor
    with no history (a leaf changed under no_grad) is not judged: its edge cannot tell
    before from after."""
    out: list[CtxChange] = []
    seen: set = set()
    stack = [r.grad_fn for r in roots if isinstance(r, torch.Tensor) and r.grad_fn is not None]
    while stack and len(seen) < limit:
        fn = stack.pop()
        if fn in seen:
            continue
        seen.add(fn)
        nexts = fn.next_functions if len(seen) < KEEP_MIN_NODES else keep_children(fn)
        stack.extend(c for c, _ in nexts if c is not None and c not in seen)
        if not isinstance(fn, _CUSTOM_NODE):
            continue
        try:
            attrs = dict(vars(fn))
        except TypeError:
            continue
        inputs = [c for c, _ in nexts if c is not None]
        for attr, value in sorted(attrs.items()):
            if attr.startswith("_") or not isinstance(value, torch.Tensor):
                continue
            found = _changed_since(value, inputs)
            if found is None or not reaches([fn], target):
                continue
            first, steps = found
            node = type(fn).__name__
            out.append(CtxChange(node.removesuffix("Backward"), node, attr, names(value), first, steps))
    return out


def _changed_since(value: torch.Tensor, inputs: list) -> tuple[str, int] | None:
    """``(first in-place node, count)`` when ``value`` is one of ``inputs`` (as the call saw
    it) changed in place since, else None."""
    try:
        version = int(value._version)
        current = value.grad_fn
    except RuntimeError:
        return None
    if current is None or version <= 0 or any(current is c for c in inputs):
        return None
    node, steps = current, 0
    while node is not None and steps < version:
        nexts = node.next_functions
        if not nexts:
            return None
        node = nexts[0][0]
        steps += 1
        if any(node is c for c in inputs):
            return type(current).__name__, steps
    return None


def ctx_change_sentence(found: CtxChange) -> tuple[str, str]:
    """``(sentence, fix)`` for a :class:`CtxChange`."""
    who = found.name or "the tensor"
    times = "once" if found.changes == 1 else f"{found.changes} times"
    return (
        f"{found.function} kept {who} as a ctx attribute (ctx.{found.attribute}) instead of saving it with "
        f"ctx.save_for_backward, and {who} was changed in place after {found.function} used it ({times} since; "
        f"{who}.grad_fn is now {found.changed_by}): autograd checks only what save_for_backward saved, so {found.node} computes "
        f"with the changed values and the gradient is silently wrong.",
        f"In {found.function}.forward save the tensor with ctx.save_for_backward({found.attribute}) and read it in "
        f"backward as ctx.saved_tensors (PyTorch then raises when it was changed in place); keep only non-tensor values "
        f"as ctx attributes. Or leave {who} unchanged until backward has run (change a clone()).",
    )


def add_ctx_change(g, found: CtxChange, reasons: list, sentences: list) -> tuple[str, str | None, str]:
    """Add a :class:`CtxChange` to an answer: its reasons and sentence.  Returns ``(op at
    fault, the graph's node for it or None, fix)``."""
    text, fix = ctx_change_sentence(found)
    reasons += [r for r in ("modified_through_data", "ctx_attribute_changed") if r not in reasons]
    sentences.append(text)
    at = [o.id for o in g.ops if o.name == found.node]
    return found.node, (at[0] if len(at) == 1 else None), fix
