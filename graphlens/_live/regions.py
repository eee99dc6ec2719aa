"""Where a recorded call ran: a no_grad, checkpoint or custom-Function region, and under autocast."""

from __future__ import annotations

import sys
import weakref
from types import FrameType
from typing import Any

import torch

from ..graph import REENTRANT_TAG
from ..names import frame_values

__all__ = ["RegionNotes"]

_REENTRANT = "\x00reentrant checkpoint"

_APPLY = getattr(torch.autograd.function.Function.apply, "__func__", torch.autograd.function.Function.apply)
#: The code of ``Function.apply``, when it is Python (a custom Function's forward runs below it);
#: None where torch implements it in C (2.14): then the forward's own frame is recognised.
_APPLY_CODE = getattr(_APPLY, "__code__", None)
_FUNCTION_CTX = torch.autograd.function.FunctionCtx
_grad_enabled = torch.is_grad_enabled
_inference_mode = torch.is_inference_mode_enabled
_default_hooks = torch._C._autograd._top_saved_tensors_default_hooks
_ref = weakref.ref
_Tensor = torch.Tensor
try:
    torch.is_autocast_enabled("cpu")
    _autocast_on, _autocast_dtype = torch.is_autocast_enabled, torch.get_autocast_dtype
except (TypeError, AttributeError):  # (torch before 2.4: one function per device kind)
    def _autocast_on(device: str) -> bool:
        return torch.is_autocast_cpu_enabled() if device == "cpu" else device == "cuda" and torch.is_autocast_enabled()

    def _autocast_dtype(device: str) -> Any:
        return torch.get_autocast_cpu_dtype() if device == "cpu" else torch.get_autocast_gpu_dtype()


def _forward_name(frame: FrameType) -> str:
    """``"Scale.forward"`` for the frame of a custom Function's forward: from its ctx (the
    backward node's class knows the Function: ``_forward_cls``), else the code's qualified
    name (Python 3.10 has none: then just ``forward``)."""
    code = frame.f_code
    ctx = frame_values(frame, (code.co_varnames[0],))[0] if code.co_argcount else None
    cls = getattr(type(ctx), "_forward_cls", None)
    del ctx
    if isinstance(cls, type):
        return f"{cls.__qualname__}.forward"
    return getattr(code, "co_qualname", code.co_name)


class RegionNotes:
    """The part of :class:`~graphlens._live.recorder.Recorder` that says in what state each call
    ran (a mixin: it uses the recorder's ``region``, ``region_key``, ``regions``, ``frame`` and
    ``autocast``)."""

    def region_now(self) -> str | None:
        """The no_grad region ops run in now (``"no_grad#0"``), or None with grad on; a
        non-reentrant ``torch.utils.checkpoint`` call is a region too (``"checkpoint#2"``).  The
        forward of a custom ``autograd.Function`` (which PyTorch runs with grad off) is a
        region of its own, named after it (``"Scale.forward#1"``): not a no_grad block of the
        user's (the reentrant checkpoint's, which computes under no_grad, stays ``no_grad``,
        tagged as the checkpoint's: ``"no_grad#4:checkpoint"``)."""
        if _grad_enabled() and not _inference_mode():  # (torch.enable_grad() inside inference_mode records nothing either)
            hooks = _default_hooks(False)
            if hooks is None or getattr(hooks[0], "__module__", None) != "torch.utils.checkpoint":
                self.region = None
                return None
            # Inside a non-reentrant torch.utils.checkpoint: grad is on, the saved tensors are
            # dropped and recomputed in backward.  One region per checkpoint call (its hooks).
            key = self.region_key
            if self.region is None or key is None or key() is not hooks[0]:
                self.region = f"checkpoint#{self.regions}"
                self.regions += 1
                self.region_key = _ref(hooks[0])
            return self.region
        tag = ""
        if _inference_mode():
            kind = "inference_mode"
        else:
            kind = self.custom_forward() or "no_grad"
            if kind == _REENTRANT:  # (torch's own no_grad: "no_grad#3:checkpoint", see reentrant_checkpoint)
                kind, tag = "no_grad", REENTRANT_TAG
        region = self.region
        if region is None or region[:len(kind) + 1] != kind + "#" or region.endswith(REENTRANT_TAG) != bool(tag):
            self.region = f"{kind}#{self.regions}{tag}"
            self.regions += 1
        return self.region

    def custom_forward(self) -> str | None:
        """``"Name.forward"`` when the call being recorded runs inside a custom
        ``autograd.Function``'s forward (below ``Function.apply`` on the stack, above the
        block's frame), ``_REENTRANT`` inside the reentrant ``torch.utils.checkpoint``'s own
        Function, else None."""
        frame = below = found = None
        block = self.frame
        try:
            frame = sys._getframe(2)
            while frame is not None and frame is not block:
                if _APPLY_CODE is not None:
                    found = below if frame.f_code is _APPLY_CODE else None
                    if frame.f_code is _APPLY_CODE and below is None:
                        return None
                else:  # (apply in C: the forward is the frame whose first argument is its ctx)
                    code = frame.f_code
                    found = frame if (code.co_name == "forward" and code.co_argcount
                                      and isinstance(frame_values(frame, (code.co_varnames[0],))[0], _FUNCTION_CTX)) else None
                if found is not None:
                    name = _forward_name(found)
                    return _REENTRANT if name.startswith("CheckpointFunction.") else name
                below, frame = frame, frame.f_back
            return None
        finally:
            del frame, below, block, found

    def note_autocast(self, j: int, out: _Tensor) -> None:
        """Op ``j`` made ``out`` in float16 or bfloat16: when autocast is on for its device
        and set to that dtype, note that autocast ran the op (its inputs may well have been
        float32: a fix that casts them to float32 is undone by autocast)."""
        try:
            device = out.device.type
            if _autocast_on(device) and _autocast_dtype(device) == out.dtype:
                self.autocast[j] = str(out.dtype).removeprefix("torch.")
        except Exception:  # noqa: BLE001 - a device autocast does not know
            pass
