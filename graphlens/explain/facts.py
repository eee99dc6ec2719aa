"""What a graph's records say about gradients and saved tensors: the only reader of their display values."""

from __future__ import annotations

from typing import Sequence

from ..flowed import flowed_items
from ..graph import FREED, LIVE, PRECISION, REENTRANT_TAG, OpNode, SavedEntry, Summary, TensorNode

__all__ = [
    "grad_is_value", "gradient_flowed", "grad_text",
    "saved_entries", "saved_names", "saved_is_freed", "saved_is_tensor", "saved_is_tensor_of",
    "saves_result", "saves_anything", "region_kind", "reentrant_checkpoint", "grad_off", "custom_forward_of", "backward_ran",
]

# TensorNode.grad, TensorNode.flowed and OpNode.saved hold numbers (Summary) and saved
# entries with a state; explanations read them through these functions.


# -- gradients (TensorNode.grad, TensorNode.flowed) ----------------------------------------


def grad_is_value(summary: Summary | None) -> bool:
    """Whether a gradient summary (``TensorNode.grad`` or an entry of ``flowed``) stands
    for a gradient, rather than for none (``None``: nothing flowed in that pass).

    >>> grad_is_value(Summary((2,), "float32", 2, (6.0, 16.0))), grad_is_value(None)
    (True, False)
    """
    return summary is not None


def gradient_flowed(node: TensorNode) -> bool:
    """Whether a gradient flowed into the tensor in some backward pass that a trace saw."""
    return any(grad_is_value(f) for _, f in flowed_items(node.flowed))


def grad_text(node: TensorNode, precision: int = PRECISION) -> str | None:
    """The recorded ``.grad`` as text to quote in a sentence, or ``None`` when there is none."""
    return None if node.grad is None else node.grad.format(precision)


# -- saved tensors (OpNode.saved: SavedEntry records) ---------------------------------------


def saved_entries(op: OpNode) -> Sequence[SavedEntry]:
    """The op's saved-for-backward entries, in order."""
    return op.saved


def saved_names(op: OpNode) -> list[str]:
    """The attribute names of what the op saved for backward (``self``, ``other``, ``result``...)."""
    return [e.name for e in op.saved]


def saved_is_freed(entry: SavedEntry) -> bool:
    """Whether a saved entry was released by a backward (``retain_graph=False``)."""
    return entry.state is FREED


def saved_is_tensor(entry: SavedEntry) -> bool:
    """Whether a saved entry is a tensor still held for backward.

    >>> saved_is_tensor(SavedEntry("self", LIVE, None, Summary((2, 3), "float32", 6, None)))
    True
    >>> saved_is_tensor(SavedEntry("self", FREED))
    False
    """
    return entry.state is LIVE and entry.summary is not None


def saved_is_tensor_of(entry: SavedEntry, dtype: str, shape: Sequence[int]) -> bool:
    """Whether a saved entry is a held tensor of this dtype and shape."""
    return saved_is_tensor(entry) and entry.summary.dtype == dtype and entry.summary.shape == tuple(shape)


def saves_result(op: OpNode) -> bool:
    """Whether the op saved its own output (``result``: exp, sigmoid, tanh, ...)."""
    return any(e.name == "result" for e in op.saved)


def saves_anything(op: OpNode) -> bool:
    """Whether the op saved anything for backward."""
    return bool(op.saved)


# -- regions -------------------------------------------------------------------------------


def custom_forward_of(region: str | None) -> str | None:
    """The custom ``autograd.Function`` whose forward a region is (``"Scale.forward#1"`` ->
    ``"Scale"``), else None (a no_grad or inference_mode block)."""
    if not region:
        return None
    kind = region.split("#")[0]
    return kind[: -len(".forward")] if kind.endswith(".forward") else None


def grad_off(region: str | None) -> bool:
    """Whether a region record is one where PyTorch records no graph (``no_grad``,
    ``inference_mode``, a custom Function's forward), not a non-reentrant checkpoint's
    (``"checkpoint#2"``: grad is on there, the saved tensors are recomputed in backward)."""
    return bool(region) and region.split("#")[0] != "checkpoint"


def reentrant_checkpoint(region: str | None) -> bool:
    """Whether a no_grad region is the reentrant ``torch.utils.checkpoint``'s own (``"no_grad#4:checkpoint"``)."""
    return bool(region) and region.endswith(REENTRANT_TAG)


def region_kind(region: str) -> str:
    """The kind of a ``no_grad`` region record: ``"no_grad#0"`` -> ``"no_grad"``."""
    return region.split("#")[0]


# -- whether backward ran ------------------------------------------------------------------


def backward_ran(view, roots: Sequence[str], trace=None) -> bool | None:
    """True when backward evidently ran through the roots (ids in ``view``'s graph; a
    gradient flowed into one, ``trace`` saw a backward pass, or a saved tensor below them
    is freed), else None (unknown).

    Never False: saved tensors still there fit "backward has not run" and "backward ran
    with retain_graph=True" alike, a graph that saved nothing looks the same before and
    after, and a trace's graph may be read after a backward outside its block."""
    if any(gradient_flowed(view.t(r)) for r in roots):
        return True
    if trace is not None and trace.backward_passes:
        return True
    reach, _ = view.bfs(list(roots))
    saved = [e for o in reach if o.startswith("op") for e in saved_entries(view.o(o))]
    if any(saved_is_freed(e) for e in saved):
        return True
    return None
