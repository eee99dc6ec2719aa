"""torch.where(False, a / 0, 1): the gradient torch.autograd.grad hands back for a is NaN, though the a / 0 branch was never chosen.

Address: https://github.com/pytorch/pytorch/issues/52248
Title: torch.where leads to unexpected gradients

What went wrong: `torch.autograd.grad(torch.where(b, a / 0, c), a)` is NaN with b False.

Accepted answer (the maintainers'): the branch where does not choose still runs its backward: it gets
a zero gradient, and the division's derivative at b = 0 is infinite, so 0 times it is NaN; make the
unused branch's input safe (the double-where pattern).

The user asks about the tensor autograd.grad returned (never "bad input data": the call computed
it) and about a, whose .grad was never set (only autograd.grad ran): never "a.grad is not finite".
"""

import torch

import graphlens as gl
from _helpers import expect


def where_step():
    torch.manual_seed(0)
    a = torch.randn(()).requires_grad_()
    b = torch.tensor(False)
    c = torch.ones(())
    with gl.trace() as tr:
        out = torch.where(b, a / 0, c)
        g, = torch.autograd.grad(out, a)
    return a, g, tr


def test_the_returned_gradient_goes_back_to_the_unchosen_division():
    """explain(g, tr): handed back by the autograd.grad call, whose first NaN came from DivBackward0 under where's unchosen branch."""
    a, g, tr = where_step()
    assert torch.isnan(g) and a.grad is None
    expect(gl.explain(g, tr), reason="nonfinite_backward", reasons=("where_unchosen_branch",), tensor="g", op="div",
           line="out = torch.where(b, a / 0, c)", says=("torch.autograd.grad", "DivBackward0"),
           not_reasons=("nonfinite_input",), never=("Check the data",))


def test_the_leaf_is_not_said_to_hold_a_grad():
    """explain(a, tr): the gradient that reached a is NaN; a.grad was never set, so it is never called non-finite."""
    a, g, tr = where_step()
    expect(gl.explain(a, tr), reason="nonfinite_backward", reasons=("where_unchosen_branch",), op="div",
           says=("gradient that reached a",), never=("a.grad is not finite",))
