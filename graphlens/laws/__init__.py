"""Ten laws of autograd as checks that run a program (a generated one or your own function).

A *subject* is a :class:`Program` (a list of Python statements, as drawn by
:mod:`graphlens.strategies`), an :class:`Executed` run of one, or any zero-argument
function of yours that builds its tensors and returns a scalar loss (or a tuple of
them).  Every law re-runs the subject as often as it needs, so the subject must be
deterministic: a function's random numbers are made repeatable by seeding torch's
generator before each call.  A broken law raises :class:`LawViolation` (an
``AssertionError``) naming the law, the tensor (by its variable name) and the values.

Check your own function with two lines:

>>> import torch
>>> from graphlens.laws import check_all
>>> def my_loss():
...     w = torch.tensor([1.0, -2.0], requires_grad=True)
...     h = torch.tanh(w) * 3
...     h.retain_grad()
...     return h.sum()
>>> check_all(my_loss)  # returns the laws that were checked, raises LawViolation if one breaks
(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11)

Or run every law over random programs with hypothesis (``pip install graphlens[test]``):

>>> from hypothesis import given, settings
>>> from graphlens.strategies import programs
>>> @settings(max_examples=5, database=None, deadline=None)
... @given(programs(max_ops=4))
... def test_autograd_laws(program):
...     try:
...         check_all(program)
...     except TorchIssue:  # a known PyTorch defect (TORCH_ISSUES), not a broken law
...         pass
>>> test_autograd_laws()

A failing example prints as a standalone script (``repr(program)`` is its source).
To check your own layer on random inputs, wrap each call in a function of no arguments:

>>> from graphlens.strategies import shapes
>>> layer = torch.nn.Linear(3, 2)
>>> @settings(max_examples=5, database=None, deadline=None)
... @given(shapes(max_dims=1))
... def test_my_layer(batch):
...     check_all(lambda: layer(torch.ones(*batch, 3)).relu().sum())
>>> test_my_layer()
>>> layer.weight.grad is None  # the checks put back the grads they made
True

Where torch is subtler than a law's one-line statement, the law states the refinement
in its docstring: law 1 (a view made inside ``no_grad`` still requires grad), law 4
("reachable" means a next edge enters that very output), law 10 (saved Python numbers
and ``CopySlices`` count as saved).  A violation caused by a known PyTorch defect is a
:class:`TorchIssue` (see :data:`TORCH_ISSUES`).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

# (LEAF_KINDS, NOT_DIFFERENTIABLE and the law_* functions stay importable from here, as before the split)
from ..programs import LEAF_KINDS, Executed, FunctionProgram, Program, Step, _subject, backward_nodes
from ._base import NOT_DIFFERENTIABLE, TORCH_ISSUES, Law, LawViolation, TorchIssue
from .flags import law_detach_cuts, law_leaf_definition, law_requires_grad_propagates
from .grads import law_backward_accumulates, law_leaf_grad_iff_reachable, law_nonleaf_grad_iff_retained, law_zero_grad
from .recording import law_snapshot_is_next_functions, law_transparent, match_snapshot
from .replay import law_replay_is_the_engine
from .saved import law_saved_freed

__all__ = [
    "Law",
    "LAWS",
    "LawViolation",
    "TorchIssue",
    "TORCH_ISSUES",
    "Step",
    "Program",
    "Executed",
    "FunctionProgram",
    "check",
    "check_all",
    "match_snapshot",
    "backward_nodes",
]


#: The laws of the design brief, in order (law 11: the backward replay).
LAWS: tuple[Law, ...] = (
    Law(1, "requires-grad-propagates", "An op's output requires grad iff grad mode is on and an input requires grad.", law_requires_grad_propagates),
    Law(2, "leaf-definition", "t.is_leaf == (not t.requires_grad) or (t.grad_fn is None).", law_leaf_definition),
    Law(3, "leaf-grad-iff-reachable", "After backward a leaf has .grad iff it requires grad and the snapshot reaches it.", law_leaf_grad_iff_reachable),
    Law(4, "nonleaf-grad-iff-retained", "After backward a non-leaf has .grad iff it retains grad and is reachable.", law_nonleaf_grad_iff_retained),
    Law(5, "backward-accumulates", "Two backward passes accumulate: grads equal one backward of the sum.", law_backward_accumulates),
    Law(6, "detach-cuts", "detach() gives a leaf with no path to the original and the same storage.", law_detach_cuts),
    Law(7, "snapshot-is-next-functions", "The snapshot's ops and edges are exactly what next_functions exposes.", law_snapshot_is_next_functions),
    Law(8, "transparent", "Grads and values are bitwise identical with and without trace/snapshot.", law_transparent),
    Law(9, "zero-grad", "zero_grad() leaves registered params' grads None (set_to_none=False: zeros).", law_zero_grad),
    Law(10, "saved-freed", "A second backward raises iff something was saved (or a CopySlices ran), unless retain_graph=True.", law_saved_freed),
    Law(11, "replay-is-the-engine", "A trace's replay is the engine's own order, and each step sent exactly what the node sent.", law_replay_is_the_engine),
)


def _law(law: int | str | Law) -> Law:
    if isinstance(law, Law):
        return law
    for entry in LAWS:
        if law == entry.number or law == entry.name:
            return entry
    raise ValueError(f"unknown law: {law!r} (must be a number 1-{len(LAWS)} or one of {[x.name for x in LAWS]})")


def check(law: int | str | Law, subject: Any, *, snapshot: Callable | None = None) -> None:
    """Check one law (by number, name or :class:`Law`) on ``subject``; raise
    :class:`LawViolation` if it breaks.  ``snapshot`` replaces :func:`graphlens.snapshot`
    for laws 3, 4 and 7 (to test a wrapper of your own)."""
    entry = _law(law)
    subj = _subject(subject)
    try:
        entry.check(subj, snapshot=snapshot)
    finally:
        if isinstance(subj, FunctionProgram):
            subj.restore()


def check_all(subject: Any, *, laws: Iterable[int | str | Law] | None = None, snapshot: Callable | None = None) -> tuple[int, ...]:
    """Check every law (or those in ``laws``) on ``subject`` in order; raise the first
    :class:`LawViolation`, else return the numbers of the laws checked."""
    chosen = [_law(x) for x in (laws if laws is not None else LAWS)]
    subj = _subject(subject)
    try:
        for entry in chosen:
            entry.check(subj, snapshot=snapshot)
    finally:
        if isinstance(subj, FunctionProgram):
            subj.restore()
    return tuple(x.number for x in chosen)
