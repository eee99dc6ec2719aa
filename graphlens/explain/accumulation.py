"""What a trace saw happen to a tensor's ``.grad`` across backward passes: gradients summed, and gradients cleared before any update used them."""

from __future__ import annotations

from typing import Any

__all__ = ["accumulated", "discarded"]


def _writes(trace: Any, tid: str) -> list:
    """``[(pass, Write)]``: the ``.grad`` writes the trace's backward passes made into record ``tid``."""
    rec = getattr(trace, "_rec", None)
    if rec is None or not rec.grads or rec.passes < 1:
        return []
    try:
        steps = trace.replay().steps
    except Exception:  # noqa: BLE001 - a trace that cannot replay: nothing to add
        return []
    return [(s.backward, w) for s in steps for w in s.writes if w.tensor == tid]


def accumulated(trace: Any, tid: str) -> tuple[list[int], str | None] | None:
    """When the trace saw more than one backward pass write into ``tid``'s ``.grad`` without it
    being cleared in between (or a pass add to a gradient held before it): the passes, and
    the value held before the first of them (None: it was empty).  None otherwise."""
    writes = _writes(trace, tid)
    if not writes:
        return None
    passes = list(dict.fromkeys(p for p, _ in writes))
    held = [w.before is not None and not (w.before.min == 0 and w.before.max == 0) for _, w in writes]
    if not any(held):
        return None
    if len(passes) < 2 and not held[0]:
        return None
    first_before = writes[0][1].before.format() if held[0] else None
    if len(passes) > 1 and not all(held[1:]):
        return None  # (cleared between two passes: each pass wrote its own gradient)
    return passes, first_before


def _empty(s: Any) -> bool:
    """Whether a ``.grad`` record says it was empty: None, or all zeros (its smallest and largest 0)."""
    return s is None or (s.min == 0 and s.max == 0)


def discarded(trace: Any, tid: str) -> tuple[list[int], int] | None:
    """``(thrown away, last)``: the backward passes whose gradient in ``tid``'s ``.grad`` was cleared
    before the next pass added to it, with no update of the tensor between them (the writes of
    both passes went to the same record: an in-place update, an optimizer's step, makes a new
    one), and the last pass, whose gradient is the one left.  None when no pass was thrown away."""
    writes = _writes(trace, tid)
    by_pass: dict[int, list] = {}
    for p, w in writes:
        by_pass.setdefault(p, []).append(w)
    passes = sorted(by_pass)
    lost = [a for a, b in zip(passes, passes[1:])
            if not _empty(by_pass[a][-1].after) and _empty(by_pass[b][0].before)]
    return (lost, passes[-1]) if lost else None
