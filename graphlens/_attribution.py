"""Calling torch at the user's line, so a warning torch raises in C++ names that line."""

from __future__ import annotations

from types import FrameType, FunctionType
from typing import Any, Callable

from .names import CALLER_NAME, user_frame

__all__ = ["as_user"]

_CALLERS: dict[tuple[str, int], Any] = {}


def _caller_at(frame: FrameType) -> Callable:
    """A function whose frame stands at ``frame``'s file and line, in its globals: a
    warning torch raises from C++ (attributed to the innermost Python frame) then names
    the user's line and lands in the user's warning registry, exactly as without
    graphlens.  Nothing global changes: no filter, no ``catch_warnings``.  Only the
    compiled one-liner is cached, never the user's globals (they would stay alive)."""
    code = frame.f_code
    key = (code.co_filename, frame.f_lineno)
    caller_code = _CALLERS.get(key)
    if caller_code is None:
        source = "\n" * max(frame.f_lineno - 1, 0) + f"def {CALLER_NAME}(f, a, k): return f(*a, **k)\n"
        scratch: dict = {}
        exec(compile(source, code.co_filename, "exec", dont_inherit=True), scratch)  # noqa: S102 - a fixed one-liner
        caller_code = scratch[CALLER_NAME].__code__
        if len(_CALLERS) >= 1024:
            _CALLERS.clear()
        _CALLERS[key] = caller_code
    return FunctionType(caller_code, frame.f_globals, code.co_name)


def as_user(func: Callable, args: tuple, kwargs: dict) -> Any:
    """Call ``func`` so that a warning torch raises in C++ points at the user's line,
    as it would without graphlens, rather than at the line of graphlens that made the call."""
    frame = user_frame(1)
    if frame is None:
        return func(*args, **kwargs)
    try:
        caller = _caller_at(frame)
    finally:
        del frame
    return caller(func, args, kwargs)
