"""Law 11: the replay is what PyTorch's engine did: its order, and what each node sent."""

from __future__ import annotations

import math
from typing import Any

import torch

from ..programs import _subject, backward_nodes
from ._base import _fail

__all__ = ["law_replay_is_the_engine", "engine_steps"]


def engine_steps(ex) -> list[tuple[str, list]]:
    """The reference: plain post-hooks registered directly on every node behind ``ex``'s losses
    record, as backward runs, each node's class and what it sent along its ``next_functions``
    (as lists of numbers, None where nothing flowed).  The hooks are removed afterwards."""
    nodes, _ = backward_nodes(ex.losses)
    seen: list[tuple[str, list]] = []
    handles = []

    def hook(fn, grad_inputs, grad_outputs):
        seen.append((type(fn).__name__, [None if g is None else g.detach().reshape(-1).tolist() for g in grad_inputs]))

    try:
        for fn in nodes:
            handles.append(fn.register_hook(lambda gi, go, fn=fn: hook(fn, gi, go)))
        ex.backward()
    finally:
        for h in handles:
            h.remove()
    return seen


def _same(head: tuple | None, values: list | None, numel: int) -> bool:
    if head is None or values is None:
        return head is None and values is None
    return all(
        (a == b) or (a != a and b != b) or (isinstance(a, float) and math.isclose(a, b, rel_tol=0, abs_tol=0))
        for a, b in zip(head, values[: len(head)])
    )


def law_replay_is_the_engine(subject: Any, **_: Any) -> None:
    """Law 11: for the same program, the replay's steps are the nodes PyTorch's engine ran, in
    the order plain hooks on the nodes see them run, and each step's ``grads_out`` is exactly
    what the node sent along each edge (bitwise, as far as the summary holds numbers)."""
    from ..trace import trace

    subject = _subject(subject)
    want = engine_steps(subject.run())
    try:
        with trace() as tr:
            ex = subject.run()
            ex.backward()
        got = tr.replay().steps
    except Exception as exc:  # noqa: BLE001 - a crash of the recorder is a broken law
        raise _fail(11, subject, f"graphlens.trace() / replay() raised {type(exc).__name__}: {exc}") from exc
    names = [s.name for s in got]
    if names != [n for n, _ in want]:
        raise _fail(11, subject, f"the replay ran {names}, the engine {[n for n, _ in want]}")
    for step, (name, sent) in zip(got, want):
        if len(step.grads_out) != len(sent):
            raise _fail(11, subject, f"step {step.index} ({name}) sends {len(step.grads_out)} gradients, the engine {len(sent)}")
        for k, (summary, values) in enumerate(zip(step.grads_out, sent)):
            head = None if summary is None else summary.head
            if not _same(head, values, 0):
                raise _fail(11, subject, f"step {step.index} ({name}) sent {head} along edge {k}, the engine {values}")
