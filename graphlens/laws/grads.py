"""Laws 3, 4, 5 and 9: which tensors get .grad, how backward passes add up, what zero_grad() clears."""

from __future__ import annotations

from typing import Any, Callable

import torch

from ..programs import Executed, _source_of, _subject, _unique
from ._base import TorchIssue, _bitwise_equal, _close_where_finite, _fail, _grad, _law_entry, _show, _snapshot_fn, _take
from .recording import match_snapshot

__all__ = ["law_leaf_grad_iff_reachable", "law_nonleaf_grad_iff_retained", "law_backward_accumulates", "law_zero_grad"]


def _reachability(graph: Any, node_of: dict[str, Any]) -> tuple[list, set]:
    """Leaves with an AccumulateGrad op, and the (node, output_nr) pairs some next edge enters."""
    leaves = [graph.tensor(o.variable) for o in graph.ops if o.name == "AccumulateGrad" and o.variable is not None]
    entered = {(id(node_of[e.dst]), e.output_nr) for e in graph.edges if e.kind == "next"}
    return leaves, entered


def law_leaf_grad_iff_reachable(subject: Any, *, snapshot: Callable | None = None, **_: Any) -> None:
    """Law 3: after backward a leaf has ``.grad`` iff it requires grad and the snapshot reaches it."""
    subject = _subject(subject)
    ex = subject.run()
    g = _take(_snapshot_fn(snapshot), ex)
    node_of = match_snapshot(g, ex.losses, subject=ex)
    reached, _ = _reachability(g, node_of)
    del node_of
    ex.backward()
    for name, t in ex.tensors.items():
        if not t.is_leaf:
            continue
        reachable = any(r is t for r in reached)
        expected = t.requires_grad and reachable
        if (t.grad is not None) != expected:
            raise _fail(
                3, subject,
                f"requires_grad={t.requires_grad}, reachable in the snapshot={reachable}, but .grad is {_show(t.grad)}",
                tensor=name,
            )


def law_nonleaf_grad_iff_retained(subject: Any, *, snapshot: Callable | None = None, **_: Any) -> None:
    """Law 4: after backward a non-leaf has ``.grad`` iff it retains grad and is reachable
    (a root, or the output a next edge of the snapshot enters)."""
    subject = _subject(subject)
    ex = subject.run()
    g = _take(_snapshot_fn(snapshot), ex)
    node_of = match_snapshot(g, ex.losses, subject=ex)
    _, entered = _reachability(g, node_of)
    facts = {}
    for name, t in ex.tensors.items():
        if not t.is_leaf:
            fn = t.grad_fn
            reachable = any(t is r for r in ex.losses) or (id(fn), t.output_nr) in entered
            facts[name] = reachable
    del node_of
    ex.backward()
    for name, reachable in facts.items():
        t = ex.tensors[name]
        expected = bool(t.retains_grad) and reachable
        grad = _grad(t)
        if (grad is not None) != expected:
            raise _fail(
                4, subject,
                f"retains_grad={t.retains_grad}, reachable in the snapshot={reachable}, but .grad is {_show(grad)}",
                tensor=name,
            )


def _check_no_aliased_grads(number: int, subject: Any, ex: Executed) -> None:
    """Raise :class:`TorchIssue` if two different tensors' ``.grad`` share memory."""
    seen: dict[int, str] = {}
    for name, g in ex.grads().items():
        if g is None or g.numel() == 0:
            continue
        ptr = g.untyped_storage().data_ptr()
        other = seen.get(ptr)
        if other is not None and ex.tensors[other] is not ex.tensors[name]:
            raise TorchIssue(
                _law_entry(number),
                f"after the first backward {other}.grad and {name}.grad share storage",
                issue="aliased-grads", tensor=name, source=_source_of(subject),
            )
        seen[ptr] = name


def law_backward_accumulates(subject: Any, **_: Any) -> None:
    """Law 5: backward once per loss (or twice for one loss) accumulates the same grads as
    one backward of the sum of those losses (allclose where finite; where a derivative is
    infinite, both sides are non-finite, though ``nan`` on one may be ``inf`` on the other)."""
    subject = _subject(subject)
    a = subject.run()
    passes = list(a.losses) if len(a.losses) > 1 else [a.losses[0], a.losses[0]]
    for k, loss in enumerate(passes):
        loss.backward(retain_graph=k < len(passes) - 1)
        if k == 0:
            _check_no_aliased_grads(5, subject, a)
    ga = a.grads()
    b = subject.run()
    parts = list(b.losses) if len(b.losses) > 1 else [b.losses[0], b.losses[0]]
    total = parts[0]
    for p in parts[1:]:
        total = total + p
    total.backward()
    gb = b.grads()
    how = "two backward passes" if len(a.losses) > 1 else "backward twice"
    for name in ga.keys() | gb.keys():
        if not _close_where_finite(ga.get(name), gb.get(name)):
            raise _fail(
                5, subject,
                f"{how} gave .grad {_show(ga.get(name))}, one backward of the sum gave {_show(gb.get(name))}",
                tensor=name,
            )


def law_zero_grad(subject: Any, **_: Any) -> None:
    """Law 9: ``optimizer.zero_grad()`` sets every registered parameter's grad to None
    (zeros with ``set_to_none=False``) and touches no other tensor's grad."""
    subject = _subject(subject)
    ex = subject.run()
    rg_leaves = _unique(t for t in ex.leaves.values() if t.is_leaf and t.requires_grad)  # in-place may make a leaf a non-leaf
    params = [p for p in ex.parameters if p.is_leaf] or rg_leaves
    if not params:
        return
    others = [t for t in rg_leaves if not any(t is p for p in params)]
    opt = torch.optim.SGD(params, lr=0.1)
    ex.backward(retain_graph=True)
    first = [None if p.grad is None else p.grad.clone() for p in params]
    kept = [None if t.grad is None else t.grad.clone() for t in others]
    opt.zero_grad()
    for p in params:
        if p.grad is not None:
            raise _fail(9, subject, f"after zero_grad() .grad is {_show(p.grad)}, expected None", ex.name_of(p))
    for t, g in zip(others, kept):
        if not _bitwise_equal(t.grad, g):
            raise _fail(9, subject, f"zero_grad() changed the grad of a tensor not registered with the optimizer: {_show(g)} -> {_show(t.grad)}", ex.name_of(t))
    ex.backward(retain_graph=True)
    for p, g in zip(params, first):
        if not _bitwise_equal(p.grad, g):
            raise _fail(9, subject, f"backward after zero_grad() gave .grad {_show(p.grad)}, the first backward {_show(g)}", ex.name_of(p))
    had = [p.grad is not None for p in params]
    opt.zero_grad(set_to_none=False)
    for p, h in zip(params, had):
        g = p.grad
        if h and (g is None or g.shape != p.shape or bool((g != 0).any())):
            raise _fail(9, subject, f"after zero_grad(set_to_none=False) .grad is {_show(g)}, expected zeros", ex.name_of(p))
        if not h and g is not None:
            raise _fail(9, subject, f"zero_grad(set_to_none=False) made a grad {_show(g)} where there was none", ex.name_of(p))
