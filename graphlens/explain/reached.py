"""A tensor the root's backward graph reaches: its gradient is there (and may be zero), will come, or was cleared."""

from __future__ import annotations

from .answer import Asked, Draft
from .kinds import ZERO_DERIVATIVE, Cut
from .evidence import changed_untracked, data_alias_sentence, hook_fix, hook_sentence, hooks_of, in_optimizer
from .facts import grad_text, gradient_flowed

__all__ = ["reached_answer", "zero_paths", "unreached_roots"]


def zero_paths(a: Asked) -> list[str]:
    """The zero-derivative ops (round, floor, ceil, trunc, sign) of the reach path, when every
    path from the roots to the tensor passes one of them (an empty list otherwise): the
    gradient that reaches the tensor is then zero, whatever the values."""
    view = a.view
    zero = [p for p in a.reach_path if p.startswith("op") and (view.o(p).name or "").rstrip("0123456789") in ZERO_DERIVATIVE]
    if not zero or a.tid is None:
        return []
    # Does a path avoid every zero-derivative op?  Walk backward without entering them.
    blocked = {o.id for o in view.g.ops if (o.name or "").rstrip("0123456789") in ZERO_DERIVATIVE}
    seen, stack = set(a.roots), list(a.roots)
    acc = view.adj.accumulate_grad.get(a.tid)
    while stack:
        n = stack.pop()
        if n == a.tid or n == acc:
            return []
        for c in view.backward_children(n):
            if c not in seen and c not in blocked:
                seen.add(c)
                stack.append(c)
    return zero


def reached_answer(a: Asked, d: Draft) -> None:
    """A leaf that requires grad, or a non-leaf that retains its grad, that the roots reach."""
    view, node, tid, name, who, root_name = a.view, a.node, a.tid, a.name, a.who, a.root_name
    apart = unreached_roots(a)
    if apart:  # (several roots, and some do not reach the tensor: only those that do are said to)
        flows = [r for r in a.roots if r not in apart]
        root_name = _names(view, flows)
    chain = view.chain(a.reach_path)
    d.path, d.edges = a.reach_path, view.highlight_edges(a.reach_path)
    what = "a leaf that requires grad" if a.is_leaf else "a non-leaf that retains its grad"
    d.fact(tid, "reached", True)
    d.fact(tid, "is_leaf", a.is_leaf)
    if a.is_leaf:
        d.fact(tid, "requires_grad", True)
    shown = grad_text(node, a.precision) if node is not None else None
    zero = zero_paths(a)
    if a.has_grad:
        d.reasons.append("grad_ok")
        d.fact(tid, "has_grad", True)
        value = f" ({shown})" if shown else ""
        verb = "reach" if " and " in (root_name or "") else "reaches"
        d.sentences.append(f"{a.grad_of} is set{value}: {who} is {what}, and {root_name} {verb} it through {chain}"
                           + (f" ({_names(view, apart)} {'does' if len(apart) == 1 else 'do'} not)." if apart else "."))
        if zero and node is not None and _all_zero(node, a.live):
            op = view.o(zero[0]).name
            d.reasons.append("zero_derivative")
            d.fact(zero[0], "op", op)
            d.sentences.append(
                f"It is zero because {op}{_at(view.o(zero[0]))} is on every path: that operation's derivative is zero almost everywhere "
                f"(a step function), so no gradient passes it."
            )
            d.fix = (
                f"Give the loss the values from before {view.o(zero[0]).forward or op} (round, threshold or quantise only "
                f"for metrics such as accuracy); if training must see the stepped values, use a differentiable stand-in "
                f"(a straight-through estimator: y = x + (x.round() - x).detach(), or a smooth approximation)."
            )
            d.cut = Cut("zero_derivative", op, zero[0], None, view.o(zero[0]).line, view.o(zero[0]).code, d.sentences[-1])
        if node is not None and node.dtype.startswith("complex"):
            d.sentences.append(
                "For a complex tensor PyTorch gives the conjugate Wirtinger derivative (the conjugate of df/dz for a "
                "holomorphic f), the convention under which gradient descent works; it is not a bug."
            )
        changed = changed_untracked(view, a.reach_path, a.hints.get("moved_after", frozenset())) if a.traced else None
        if changed is None and a.hints.get("data_alias"):
            text, alias_fix = data_alias_sentence(a.hints["data_alias"])
            changed = (text, alias_fix, [])
        if changed is not None:
            d.reasons.append("modified_through_data")
            d.sentences.append(changed[0])
            d.fix = changed[1]
            d.path = list(d.path) + [p for p in changed[2] if p not in d.path]
            if len(changed) > 3 and d.fault_op is None:  # (the call that wrote through .data, as the trace saw it)
                d.fault_op, d.fault_node = changed[3]
        hooks = hooks_of(a.live) if a.live is not None else []
        if hooks:
            d.reasons.append("hook_changed_grad")
            d.sentences.append(hook_sentence(name, hooks))
            d.fix = hook_fix(name, hooks)
        tied = a.hints.get("tied")
        if tied:
            users = _users_of(a)
            d.reasons.append("tied_parameter")
            d.sentences.append(
                f"{who} is one Parameter registered under {len(tied)} names ({', '.join(tied)}: tied weights), so "
                f"{root_name} reaches it {_ways(len(users)) if len(users) > 1 else 'through each use'}"
                + (f", through {' and through '.join(users)}" if len(users) > 1 else "")
                + f": {a.grad_of} is the sum of the gradients of every use."
            )
        summed = a.hints.get("accumulated")
        outside = a.optimizer is not None and a.is_leaf and not in_optimizer(a.optimizer, a.live, node)
        if summed:
            passes, first_before = summed
            d.sentences.append(
                f"It holds a sum: the trace saw {len(passes)} backward pass{'es' if len(passes) != 1 else ''} add to {a.grad_of} "
                f"(pass{'es' if len(passes) != 1 else ''} {', '.join(str(p + 1) for p in passes)})"
                + (f", and it already held {first_before} when {'the first of them' if len(passes) != 1 else 'it'} began "
                   f"(added by earlier passes or kept from before)" if first_before else "")
                + ", with nothing clearing it in between: PyTorch adds each new gradient to .grad, it does not replace it."
            )
            d.fix = (f"If {a.grad_of} is larger than you expect (doubled, say), clear it before each backward: "
                     f"optimizer.zero_grad() (or {name}.grad = None).") if not outside else None
        _discarded(a, d, who)
        clip = a.hints.get("clip")
        if clip and a.is_leaf:  # (read from code: clipping out of order leaves the step's gradient unclipped)
            where, ln, code, other, other_code = clip
            d.reasons.append("clip_misplaced")
            d.sentences.append(
                f"graphlens read your code: line {ln} ({code}) clips the gradients "
                + (f"before line {other} ({other_code}) computes them: it clips what .grad held then (nothing, right after "
                   f"zero_grad())" if where == "before" else f"after line {other} ({other_code}) already used them")
                + f", so the step uses the gradient unclipped (if {who} is among the parameters it clips).")
            d.fix = ("Clip between backward and the step: loss.backward(), then torch.nn.utils.clip_grad_norm_(...), "
                     "then optimizer.step().")
        if a.ran is None:
            d.sentences.append(
                f"It holds the sum of every backward pass that reached {who} since its gradient was last cleared; "
                f"graphlens cannot tell from the graph whether {a.backward} already ran (saved tensors are still "
                f"there before a backward and after one with retain_graph=True). If it has not, {a.backward} will "
                f"add to this value."
            )
    elif a.ran and a.is_leaf and a.hints.get("stopped"):
        p, last, k = a.hints["stopped"]
        d.reasons.append("backward_stopped")
        d.sentences.append(
            f"{a.grad_of} is None: {root_name} reaches {who} through {chain}, but backward pass {p + 1} stopped with an "
            f"error after {last} (step {k + 1} of tr.replay()), before it reached {who}'s AccumulateGrad: the gradient "
            f"was never written, and nothing reset it."
        )
        d.fix = ("Fix the error that stopped backward (graphlens.explain(err, tr) says what it was), then run backward "
                 "again.")
    elif a.ran:
        node_flowed = node is not None and gradient_flowed(node)
        if a.is_leaf:
            d.reasons.append("zero_grad_set_none")
            d.sentences.append(
                f"{a.grad_of} is None although {who} is {what}, {root_name} reaches it through {chain}, "
                f"and backward already ran ("
                + ("a gradient flowed into it" if node_flowed else "its graph's saved tensors are freed")
                + ")."
            )
            if a.optimizer is not None and in_optimizer(a.optimizer, a.live, node):
                d.sentences.append(
                    f"{who} is a parameter of the optimizer, whose zero_grad() sets .grad to None by default (set_to_none=True)."
                )
            else:
                d.sentences.append(
                    "Either something reset it afterwards (most often optimizer.zero_grad() or model.zero_grad(), which "
                    "set .grad to None by default, or an explicit .grad = None), or the gradient reached it through "
                    "torch.autograd.grad() (or a backward(inputs=...) without it), which hands gradients back and never "
                    "writes .grad."
                )
            d.fix = (f"Read {name}.grad after backward and before zero_grad() clears it (with set_to_none=False it would hold "
                     f"zeros, not the gradient); if the gradient came from torch.autograd.grad(), read it from what grad() returns.")
            _discarded(a, d, who)
        else:
            d.reasons.append("retain_grad_too_late")
            d.sentences.append(
                f"{who} retains its grad but has none although backward already ran: retain_grad() was called "
                f"after the backward, or its .grad was set to None."
            )
            d.fix = f"Call {name}.retain_grad() before {a.backward}."
    else:
        d.reasons.append("backward_not_run")
        if a.ran is False:
            d.sentences.append(
                f"{a.grad_of} is None for now because {a.backward} has not run yet; {who} is {what} and will get "
                f"its gradient through {chain}."
            )
        else:
            d.sentences.append(
                f"{who} is {what} and {root_name} reaches it through {chain}, so {a.backward} gives it a gradient. "
                f"Its .grad is None now: either backward has not run yet, or it ran and something (zero_grad(), "
                f"which sets None by default) cleared the gradient since; graphlens cannot tell which from the graph."
            )
        d.fix = f"Call {a.backward}, then read {name}.grad."
        if zero:
            op = view.o(zero[0]).name
            d.reasons.append("zero_derivative")
            d.fact(zero[0], "op", op)
            d.sentences.append(
                f"That gradient will be zero: every path from {root_name} to {who} passes {op}{_at(view.o(zero[0]))}, whose derivative is zero "
                f"almost everywhere (a step function)."
            )
            d.fix = (
                f"Call {a.backward}; if {who} should learn through {op}, use a differentiable stand-in there (a "
                f"straight-through estimator: y = x + (x.round() - x).detach(), or a smooth approximation)."
            )
            d.cut = Cut("zero_derivative", op, zero[0], None, view.o(zero[0]).line, view.o(zero[0]).code, d.sentences[-1])


def _at(op) -> str:
    """`` (line 12: y = x.round())`` where a trace saw the call, else nothing."""
    return f" (line {op.line}: {op.code})" if op.line is not None and op.code else ""


def _all_zero(node, live) -> bool:
    """Whether the recorded ``.grad`` of ``node`` is all zeros: from its record where that holds
    the smallest and largest values, else (a record of a large tensor keeps only a head) from
    the live tensor's ``.grad`` while its head is still the one recorded."""
    g = node.grad
    if g is None:
        return False
    if g.min is not None and g.max is not None:
        return g.min == 0 and g.max == 0
    if not g.head or any(v != 0 for v in g.head) or live is None:
        return False
    from .._live.guard import quiet

    try:
        with quiet():  # (a read of graphlens's own: no mode or trace of the user's sees it)
            grad = live.grad
            if grad is None or tuple(grad.shape) != tuple(g.shape) or grad.is_sparse:
                return False
            flat = grad.detach().reshape(-1)
            if tuple(flat[:len(g.head)].tolist()) != tuple(g.head):
                return False
            return not bool(flat.any())
    except Exception:  # noqa: BLE001 - a tensor that cannot be read: not known to be zero
        return False


def _discarded(a: Asked, d: Draft, who: str) -> None:
    """Add what a trace saw of a gradient cleared between two backward passes with no update of the
    tensor between them (``a.hints["discarded"]``): thrown away before any step used it."""
    lost = a.hints.get("discarded")
    if not lost:
        return
    gone, last = lost
    many = len(gone) > 1
    d.reasons.append("grad_discarded")
    d.sentences.append(
        f"The trace saw {a.grad_of} cleared after backward pass{'es' if many else ''} "
        f"{', '.join(str(p + 1) for p in gone)} and before the next one added to it, with no update of {who} in "
        f"between: what it held {'each time' if many else 'then'} was thrown away before any step used it "
        f"(the last pass that wrote it is pass {last + 1})."
    )
    d.fix = ("If those passes were meant to add up to one update (gradient accumulation), clear the gradients once "
             "per update: call zero_grad() right after optimizer.step() (or before the first backward of each "
             "accumulation), not before every backward; a zero_grad() anywhere else in the loop (at the start of an "
             "epoch, say) throws away the passes since the last step.")


def unreached_roots(a: Asked) -> list[str]:
    """The roots, among several, that do not reach the asked tensor at all: said only of a tensor with one
    record (:func:`_one_version`), none otherwise."""
    if len(a.roots) < 2 or a.tid is None or not _one_version(a.view, a.node):
        return []
    return [r for r in a.roots if not a.view.bfs([r], a.tid)[1]]


def _one_version(view, node) -> bool:
    """Whether ``node`` is the only record of its tensor (no other record of the same name: an optimizer's
    step makes one): only then does a root that does not reach this record not depend on the tensor at all (a root
    of an earlier step reaches the version that step used, an optimizer's step makes a new one)."""
    if node is None or not node.name:
        return False  # (an unnamed record: its other versions cannot be told)
    return sum(t.name == node.name for t in view.g.tensors) == 1


def _names(view, ids: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``: the labels of ``ids``."""
    labels = [view.label(i) for i in ids]
    return labels[0] if len(labels) == 1 else ", ".join(labels[:-1]) + " and " + labels[-1]


def _ways(n: int) -> str:
    return {2: "two ways", 3: "three ways"}.get(n, f"{n} ways")


def _users_of(a: Asked) -> list[str]:
    """The backward nodes, reached from the roots, that send a gradient into the leaf's
    AccumulateGrad node (each use of the tensor), by name."""
    view = a.view
    acc = view.adj.accumulate_grad.get(a.tid) if a.tid is not None else None
    if acc is None:
        return []
    parents, _ = view.bfs(a.roots)
    return [view.o(o).label for o in parents if o.startswith("op") and acc in view.adj.next.get(o, ())]
