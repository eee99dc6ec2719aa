"""A Hessian through torch.linalg.norm at its minimum (x = x0) is NaN: the second autograd.grad call divides by the norm, which is 0.

Address: https://github.com/pytorch/functorch/issues/1097
Title: Hessian produces wrong results, but works if I add a perturbation

What went wrong: the Hessian of ||x - x0|| at x = x0 is NaN; a tiny perturbation of x gives numbers.

Accepted answer (the maintainers'): the norm is not differentiable at 0; PyTorch returns a subgradient
for the first derivative, but the second derivative divides by the norm, 0, and is NaN; avoid
evaluating it at 0 (perturb, or use a smooth form).

The answer for the second derivative names the backward call that computed it and the DivBackward0
of the norm's first derivative dividing by 0, never bad input data; x.grad was never set.
"""

import torch

import graphlens as gl
from _helpers import expect


def hessian_row_at_the_minimum():
    x0 = torch.tensor([0.5, -1.0, 2.0], dtype=torch.double)
    x = x0.clone().requires_grad_(True)
    with gl.trace() as tr:
        o = torch.linalg.norm(x - x0)
        gx = torch.autograd.grad(o, x, retain_graph=True, create_graph=True)[0]
        gxx = torch.autograd.grad(gx, x, grad_outputs=torch.ones_like(gx))[0]
    return x, gx, gxx, tr


def test_the_second_derivative_is_the_division_by_the_zero_norm():
    """explain(gxx, tr): the second autograd.grad call's first NaN came from DivBackward0 at b = 0, never the data."""
    x, gx, gxx, tr = hessian_row_at_the_minimum()
    assert torch.isfinite(gx).all() and torch.isnan(gxx).all()
    expect(gl.explain(gxx, tr), reason="nonfinite_backward", reasons=("infinite_derivative",), tensor="gxx",
           op=("DivBackward0", "div"), says=("torch.autograd.grad", "backward call 2", "b = 0"),
           not_reasons=("nonfinite_input",), never=("Check the data",))


def test_x_grad_is_never_said_to_be_non_finite():
    """explain(x, tr): what reached x is NaN; x.grad is None (only autograd.grad ran)."""
    x, gx, gxx, tr = hessian_row_at_the_minimum()
    assert x.grad is None
    expect(gl.explain(x, tr), reason="nonfinite_backward", says=("gradient that reached x",), never=("x.grad is not finite",))
