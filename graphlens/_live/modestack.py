"""Where graphlens's mode sits on torch's TorchFunctionMode stack, and where it steps off it."""

from __future__ import annotations

import threading
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

__all__ = ["on_stack", "put_at_bottom", "take_off_stack", "fast_paths_kept"]

_stack_len = torch._C._len_torch_function_stack
_stack_at = torch._C._get_function_stack_at
_stack_pop = torch._C._pop_torch_function_stack
_stack_push = torch._C._push_on_torch_function_stack


def on_stack(mode: TorchFunctionMode) -> bool:
    return any(_stack_at(i) is mode for i in range(_stack_len()))


def _restore(above: list) -> None:
    while above:
        _stack_push(above[-1]); above.pop()  # noqa: E702 - one line: an interrupt comes before both or after both


def put_at_bottom(mode: TorchFunctionMode) -> None:
    """Put ``mode`` at the bottom of this thread's TorchFunctionMode stack, under the modes
    the user entered before: they keep seeing the program's calls first, and the mode each
    of them pops on leaving is its own (``TorchFunctionMode.__exit__`` pops the top one),
    wherever the trace's block begins and ends.  Interrupted at any line, the user's modes
    are all back in their order."""
    above: list = []
    try:
        try:
            while _stack_len():
                above.append(_stack_pop())
            _stack_push(mode)
        finally:
            _restore(above)
    finally:
        _restore(above)


def take_off_stack(mode: TorchFunctionMode) -> None:
    """Remove ``mode`` from this thread's TorchFunctionMode stack wherever it is, the modes
    above it (a user's mode entered inside the trace) staying in their order.  Interrupted
    at any line, the stack is left whole (with or without ``mode``)."""
    if not on_stack(mode):
        return
    above: list = []
    try:
        try:
            while _stack_len():
                above.append(_stack_pop())
                if above[-1] is mode:
                    above.pop()
                    break
        finally:
            _restore(above)
    finally:
        _restore(above)




# -- torch's fused inference paths ----------------------------------------------------------
# MultiheadAttention, TransformerEncoderLayer and TransformerEncoder take a fused "fast
# path" in inference only when no TorchFunctionMode is on the stack (has_torch_function):
# with graphlens's mode there they would run their slow path, whose numbers differ (to the
# rounding, and, with a padding mask, at the padded positions).  While a trace is open, a
# global forward pre-hook takes graphlens's mode off the stack for such a module's call
# when that path may be taken (eval mode, no gradient to record), and the matching forward
# hook puts it back: the module then runs exactly as without graphlens, and the trace sees
# it as one call whose result enters it like a tensor made outside.
_FAST_PATH_MODULES = (torch.nn.MultiheadAttention, torch.nn.TransformerEncoderLayer, torch.nn.TransformerEncoder)
_lock = threading.Lock()
_holders: set = set()
_handles: list = []
_local = threading.local()
_mode_of_thread: Any = None  # set by the trace module: () -> this thread's graphlens mode or None


def _may_take_fast_path(module: torch.nn.Module, args: tuple) -> bool:
    if module.training or not isinstance(module, _FAST_PATH_MODULES):
        return False
    if not torch.is_grad_enabled():
        return True
    return not any(p.requires_grad for p in module.parameters()) and not any(
        isinstance(a, torch.Tensor) and a.requires_grad for a in args
    )


def _before(module: torch.nn.Module, args: tuple) -> None:
    if not isinstance(module, _FAST_PATH_MODULES) or _mode_of_thread is None:
        return None
    mode = _mode_of_thread()
    if mode is None or not on_stack(mode) or not _may_take_fast_path(module, args):
        return None
    stack = getattr(_local, "stepped_off", None)
    if stack is None:
        stack = _local.stepped_off = []
    stack.append((module, mode))
    take_off_stack(mode)
    return None


def _after(module: torch.nn.Module, args: tuple, out: Any) -> None:
    stack = getattr(_local, "stepped_off", None)
    if stack and stack[-1][0] is module:
        mode = stack[-1][1]
        if mode.traces and not on_stack(mode):
            put_at_bottom(mode)
        stack.pop()
    return None


def fast_paths_kept(holder: Any, keep: bool) -> None:
    """While any ``holder`` (an open trace) keeps them, the global hooks above are on every
    module call of the process (idempotent per holder: safe to repeat after an interrupt)."""
    from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

    with _lock:
        if keep:
            _holders.add(id(holder))
            if not _handles:
                _handles.append(register_module_forward_pre_hook(_before))
                _handles.append(register_module_forward_hook(_after, always_call=True))
        else:
            _holders.discard(id(holder))
            if not _holders:
                while _handles:
                    _handles[-1].remove(); _handles.pop()  # noqa: E702 - (removing twice is harmless)
