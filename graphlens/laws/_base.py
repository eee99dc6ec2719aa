"""What every law shares: the Law record, violations, value comparisons and a watch on every torch call."""

from __future__ import annotations

import contextlib
import warnings
from typing import Any, Callable, NamedTuple

import torch
from torch.overrides import TorchFunctionMode

from ..programs import Executed, _source_of, _tensors_in

__all__ = [
    "Law", "LawViolation", "TorchIssue", "TORCH_ISSUES", "NOT_DIFFERENTIABLE",
    "_law_entry", "_fail", "_bits", "_bitwise_equal", "_close", "_close_where_finite", "_show", "_quiet", "_grad",
    "_Watch", "_snapshot_fn", "_take",
]


class Law(NamedTuple):
    """One law: its number, a short name, a one-line statement and its check."""

    number: int
    name: str
    statement: str
    check: Callable[..., None]


class LawViolation(AssertionError):
    """A law broke: ``law`` (the :class:`Law`), ``tensor`` (variable name or None),
    ``detail`` (what was observed) and ``source`` (the program that broke it)."""

    def __init__(self, law: "Law", detail: str, *, tensor: str | None = None, source: str = "") -> None:
        self.law = law
        self.tensor = tensor
        self.detail = detail
        self.source = source
        where = f" on {tensor!r}" if tensor else ""
        text = f"law {law.number} ({law.name}) broke{where}: {detail}"
        if source:
            text += "\n\nprogram:\n" + source
        super().__init__(text)


class TorchIssue(LawViolation):
    """A law broke because of a known PyTorch defect, not because the law or graphlens is
    wrong; ``issue`` names it (see :data:`TORCH_ISSUES`)."""

    def __init__(self, law: "Law", detail: str, *, issue: str, tensor: str | None = None, source: str = "") -> None:
        self.issue = issue
        super().__init__(law, f"{detail} [known PyTorch issue {issue!r}: {TORCH_ISSUES[issue]}]", tensor=tensor, source=source)


#: PyTorch defects the laws recognise and report as :class:`TorchIssue`.
TORCH_ISSUES = {
    "aliased-grads": (
        "after one backward, two tensors' .grad share storage (AccumulateGrad kept two views of "
        "one incoming gradient, e.g. w1.sum() + w0.sum() with 0-d w0, w1), so a second backward "
        "adds into both and the grads are wrong; seen on torch 2.13"
    ),
}


def _law_entry(number: int) -> "Law":
    """Law ``number`` of :data:`graphlens.laws.LAWS` (looked up when a law breaks, once the package is loaded)."""
    from . import LAWS

    return LAWS[number - 1]


def _fail(number: int, subject: Any, detail: str, tensor: str | None = None) -> LawViolation:
    return LawViolation(_law_entry(number), detail, tensor=tensor, source=_source_of(subject))


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's raw bits as integers (NaN payloads and signed zeros included)."""
    t = t.detach().contiguous()
    ints = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.int8}
    if t.is_floating_point() or t.is_complex():
        return t.view(ints[t.element_size()] if not t.is_complex() else torch.int64)
    return t


def _bitwise_equal(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(_bits(a), _bits(b))


def _close(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and torch.allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=True)


def _close_where_finite(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    """Like :func:`_close`, but an element that is not finite on one side need only be
    not finite on the other: where a local derivative is infinite (``sqrt`` at 0), a pass
    that carries a zero gradient there makes ``0 * inf = nan``, while the summed pass
    carries a non-zero one and makes ``inf``."""
    if a is None or b is None or a.shape != b.shape:
        return _close(a, b)
    bad_a, bad_b = ~torch.isfinite(a), ~torch.isfinite(b)
    if not torch.equal(bad_a, bad_b):
        return False
    return torch.allclose(a[~bad_a], b[~bad_b], rtol=1e-5, atol=1e-6)


def _show(t: Any) -> str:
    if t is None:
        return "None"
    if isinstance(t, torch.Tensor):
        return str(t.detach().tolist())
    return repr(t)


@contextlib.contextmanager
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _grad(t: torch.Tensor) -> torch.Tensor | None:
    with _quiet():
        return t.grad


def _snapshot_fn(snapshot: Callable | None) -> Callable:
    if snapshot is None:
        from ..snapshot import snapshot as default

        return default
    return snapshot


def _take(snapshot: Callable, ex: Executed):
    return snapshot(*ex.losses, names=dict(ex.tensors))


# ---------------------------------------------------------------------------------------
# Watching every torch call (laws 1, 6 and 10)
# ---------------------------------------------------------------------------------------

#: Calls law 1 does not apply to: they are not differentiable functions of their tensor
#: arguments (they read only a shape or a flag, or cut the graph on purpose).
NOT_DIFFERENTIABLE = frozenset(
    {
        "__get__", "__set__", "__repr__", "__format__", "__str__", "detach", "detach_", "requires_grad_",
        "retain_grad", "backward", "zeros_like", "ones_like", "empty_like", "full_like", "rand_like",
        "randn_like", "randint_like", "new_zeros", "new_ones", "new_empty", "new_full", "new_tensor",
        "size", "dim", "numel", "item", "tolist", "register_hook", "_make_subclass",
    }
)


class _Watch(TorchFunctionMode):
    """Calls ``on_call(func, args, inputs, requires_grad_before, grad_mode, out)`` after
    every torch call made inside it."""

    def __init__(self, on_call: Callable[..., None]) -> None:
        super().__init__()
        self.on_call = on_call

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in ("__get__", "__set__", "__repr__", "__format__", "__str__"):
            return func(*args, **kwargs)
        ins: list = []
        _tensors_in(args, ins)
        _tensors_in(list(kwargs.values()), ins)
        before = [t.requires_grad for t in ins]
        grad_mode = torch.is_grad_enabled()
        out = func(*args, **kwargs)
        self.on_call(func, args, ins, before, grad_mode, out)
        return out
