"""Calling torch from the caller's line, so a warning torch raises names that line, not graphlens's."""

from __future__ import annotations

import sys
from types import CodeType, FrameType, FunctionType
from typing import Any, Callable

import torch

from .names import CALLER_NAME, user_frame

__all__ = ["as_user", "call_from", "caller_of_mode", "forget_callers"]

_CODES: dict[tuple[str, int], CodeType] = {}
#: ``(code, line)`` of a calling frame -> a one-liner bound to that frame's globals.  It
#: holds the user's globals, so it lives only while a trace is open (:func:`forget_callers`).
_CALLERS: dict[tuple[Any, int], Callable] = {}
_HANDLE_TORCH_FUNCTION = torch.overrides.handle_torch_function.__code__


def _one_liner(filename: str, lineno: int) -> CodeType:
    """The code of ``def _graphlens_call(f, a, k): return f(*a, **k)`` placed at ``filename``
    line ``lineno`` (compiled once per place; it holds no globals)."""
    key = (filename, lineno)
    code = _CODES.get(key)
    if code is None:
        source = "\n" * max(lineno - 1, 0) + f"def {CALLER_NAME}(f, a, k): return f(*a, **k)\n"
        scratch: dict = {}
        exec(compile(source, filename, "exec", dont_inherit=True), scratch)  # noqa: S102 - a fixed one-liner
        code = scratch[CALLER_NAME].__code__
        if len(_CODES) >= 4096:
            _CODES.clear()
        _CODES[key] = code
    return code


def call_from(frame: FrameType, func: Callable, args: tuple, kwargs: dict) -> Any:
    """Call ``func`` from a frame that stands at ``frame``'s file and line, in its globals:
    a warning torch raises (from C++, or from Python with ``stacklevel=2``) then names that
    line and lands in that module's warning registry, exactly as without graphlens.
    Nothing global changes: no filter, no ``catch_warnings``."""
    code = frame.f_code
    lineno = frame.f_lineno or code.co_firstlineno
    key = (code, lineno)
    caller = _CALLERS.get(key)
    if caller is None or caller.__globals__ is not frame.f_globals:
        caller = FunctionType(_one_liner(code.co_filename, lineno), frame.f_globals, code.co_name)
        if len(_CALLERS) >= 1024:
            _CALLERS.clear()
        _CALLERS[key] = caller
    return caller(func, args, kwargs)


def caller_of_mode(frame: FrameType) -> FrameType:
    """The frame that made the call a TorchFunctionMode's ``__torch_function__`` (whose
    caller is ``frame``) is handling: ``frame`` itself for a function written in C; for one
    written in Python (``Tensor.backward``, ``F.softmax``), which handed itself over with
    ``handle_torch_function``, the frame that called that function."""
    if frame.f_code is _HANDLE_TORCH_FUNCTION:
        outer = frame.f_back
        if outer is not None and outer.f_back is not None:
            return outer.f_back
    return frame


def forget_callers() -> None:
    """Drop the cached one-liners (they hold the user's globals): when no trace is open."""
    _CALLERS.clear()


def as_user(func: Callable, args: tuple, kwargs: dict) -> Any:
    """Call ``func`` so that a warning it raises points at the innermost user line
    (outside torch and graphlens), as it would without graphlens."""
    frame = user_frame(1)
    if frame is None:
        return func(*args, **kwargs)
    try:
        return call_from(frame, func, args, kwargs)
    finally:
        del frame
