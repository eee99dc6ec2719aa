"""What happens to a tensor's ``.grad`` across backward passes and steps: gradients summed or cleared before any update used them (a trace saw it), clipping out of order (read from code)."""

from __future__ import annotations

import ast
from types import FrameType
from typing import Any

from ..names import parsed

__all__ = ["accumulated", "discarded", "clip_order"]


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


_CLIPS = frozenset({"clip_grad_norm_", "clip_grad_value_", "clip_grad_norm", "clip_grad_value"})


def clip_order(frame: FrameType | None) -> tuple[str, int, str, int, str] | None:
    """``(where, clip line, its code, other line, its code)`` for a gradient clipping call that a function of
    the caller's file makes out of order: ``"before"`` the ``.backward(`` call after it (it clips what .grad
    held before), or ``"after"`` the ``.step(`` call before it, a backward before both (the step used the
    unclipped gradient).  Only where the file makes one clipping call (which of several ran, the code does not
    say); None otherwise.  Read from code."""
    if frame is None:
        return None
    tree, lines = parsed(frame.f_code.co_filename)
    if tree is None:
        return None
    text = lambda n: lines[n.lineno - 1].strip() if 0 < n.lineno <= len(lines) else ast.unparse(n)  # noqa: E731
    every = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and (getattr(n.func, "attr", None) or getattr(n.func, "id", None)) in _CLIPS]
    if len(every) != 1:
        return None  # (which of several clipping calls ran is not known from the code: none is named)
    for fn in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
        calls = sorted((n for n in ast.walk(fn) if isinstance(n, ast.Call)), key=lambda n: (n.lineno, n.col_offset))
        name = lambda c: c.func.attr if isinstance(c.func, ast.Attribute) else c.func.id if isinstance(c.func, ast.Name) else ""  # noqa: E731
        clips = [c for c in calls if name(c) in _CLIPS]
        backs = [c for c in calls if name(c) == "backward"]
        steps = [c for c in calls if name(c) == "step" and isinstance(c.func, ast.Attribute)
                 and "sched" not in ast.unparse(c.func.value).lower()]
        for clip in clips:
            if backs and all(b.lineno > clip.lineno for b in backs):
                after = min(backs, key=lambda b: b.lineno)
                if not any(clip.lineno < s.lineno < after.lineno for s in steps):  # (clip, step, ..., backward: a loop's order)
                    return "before", clip.lineno, text(clip), after.lineno, text(after)
                continue
            done = [s for s in steps if s.lineno < clip.lineno]
            if done and backs and min(b.lineno for b in backs) < done[0].lineno and not [s for s in steps if s.lineno > clip.lineno]:
                return "after", clip.lineno, text(clip), done[-1].lineno, text(done[-1])
    return None
