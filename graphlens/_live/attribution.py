"""Calling torch from the caller's line, so a warning torch raises names that line, not graphlens's."""

from __future__ import annotations

import sys
from types import CodeType, FrameType, FunctionType
from typing import Any, Callable

import torch

from ..names import CALLER_NAME, user_frame

__all__ = ["as_user", "call_from", "caller_of_mode", "clean_traceback", "forget_callers", "watched", "is_attribution_frame"]

_CODES: dict[tuple[str, int], CodeType] = {}
#: ``(code, line)`` of a calling frame -> a one-liner bound to that frame's globals.  It
#: holds the user's globals, so it lives only while a trace is open (:func:`forget_callers`).
_CALLERS: dict[tuple[Any, int], Callable] = {}
_HANDLE_TORCH_FUNCTION = torch.overrides.handle_torch_function.__code__


_TEMPLATE = next(
    c for c in compile(f"def {CALLER_NAME}(f, a, k): return f(*a, **k)\n", "<graphlens>", "exec", dont_inherit=True).co_consts
    if hasattr(c, "co_code")
)


def _one_liner(filename: str, lineno: int) -> CodeType:
    """The code of ``def _graphlens_call(f, a, k): return f(*a, **k)`` placed at ``filename``
    line ``lineno``: the one compiled template, moved there (no code is run to make it, and
    the cost does not grow with the line number); it holds no globals."""
    key = (filename, lineno)
    code = _CODES.get(key)
    if code is None:
        code = _TEMPLATE.replace(co_filename=filename, co_firstlineno=max(lineno, 1))
        if len(_CODES) >= 4096:
            _CODES.clear()
        _CODES[key] = code
    return code


def watched() -> bool:
    """Whether a debugger, tracer, coverage tool or profiler watches this thread: then no
    frame is made at the user's line (a breakpoint there would stop in it, a tracer would
    see calls the program never made), and a warning torch raises names graphlens's line
    instead."""
    if _gettrace() is not None or _getprofile() is not None:
        return True
    if _monitoring is not None:
        for tool in (0, 1, 2):  # (debugger, coverage, profiler)
            if _monitoring.get_tool(tool) is not None:
                return True
    return False


_gettrace, _getprofile = sys.gettrace, sys.getprofile
_monitoring = getattr(sys, "monitoring", None)


def call_from(frame: FrameType, func: Callable, args: tuple, kwargs: dict) -> Any:
    """Call ``func`` from a frame that stands at ``frame``'s file and line, in its globals:
    a warning torch raises (from C++, or from Python with ``stacklevel=2``) then names that
    line and lands in that module's warning registry, exactly as without graphlens.
    Nothing global changes: no filter, no ``catch_warnings``."""
    if watched():
        return func(*args, **kwargs)
    code = frame.f_code
    key = (code, frame.f_lasti)  # (f_lineno would read the code's line table at every call)
    caller = _CALLERS.get(key)
    if caller is None or caller.__globals__ is not frame.f_globals:
        lineno = frame.f_lineno or code.co_firstlineno
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


def is_attribution_frame(code: CodeType) -> bool:
    """Whether ``code`` is one of the frames graphlens puts between the user's line and torch
    (the mode's handler, :func:`call_from`, the one-liner at the user's line)."""
    return code.co_name == CALLER_NAME or code is call_from.__code__ or code is as_user.__code__


def clean_traceback(exc: BaseException | None, handler: CodeType, *more: CodeType) -> None:
    """Take graphlens's own frames out of the traceback of ``exc`` (and of the exceptions it
    was raised from): the mode's ``handler`` and the ones after it (``more``, :func:`call_from`,
    the one-liner at the user's line), and, for a torch function written in Python, the
    extra call of it that handed itself to the mode (``handle_torch_function``).  What is
    left is the traceback the program has without graphlens: its last frame, where a
    post-mortem debugger lands, is the user's or torch's own."""
    ours = {handler, *more, call_from.__code__, as_user.__code__}
    for _ in range(8):
        if exc is None:
            return
        entries = []
        tb = exc.__traceback__
        while tb is not None and len(entries) < 10_000:
            entries.append(tb)
            tb = tb.tb_next
        keep = [True] * len(entries)
        for k, tb in enumerate(entries):
            if tb.tb_frame.f_code is not handler:
                continue
            j = k
            while j < len(entries) and (entries[j].tb_frame.f_code in ours or entries[j].tb_frame.f_code.co_name == CALLER_NAME):
                keep[j] = False
                j += 1
            if k >= 2 and entries[k - 1].tb_frame.f_code is _HANDLE_TORCH_FUNCTION and (
                j < len(entries) and entries[k - 2].tb_frame.f_code is entries[j].tb_frame.f_code
            ):
                keep[k - 1] = keep[k - 2] = False  # (the outer call of the same torch function)
        if not all(keep):
            kept = [tb for tb, ok in zip(entries, keep) if ok]
            for a, b in zip(kept, kept[1:]):
                a.tb_next = b
            if kept:
                kept[-1].tb_next = None
            exc.__traceback__ = kept[0] if kept else None
        exc = exc.__cause__ or exc.__context__
