"""The norm of a zero vector: x.norm() has gradient 0 in torch 2.13, the hand-written sqrt of a sum of squares NaN.

Address: https://github.com/pytorch/pytorch/issues/2421
Title: Gradient of zero norm is nan

What went wrong: x.norm().backward() at x = 0 gave a NaN gradient (2017). albanD explained the 2-norm holds
a square root, whose derivative is infinite at 0, multiplied by 0 in backward. PR #2775 gave the norm a
subgradient of 0 at 0, noting that .pow(2).sum().sqrt() still returns NaN there.

Accepted answer: use the built-in norm (torch.linalg.vector_norm, x.norm()), which handles a zero vector,
or add eps inside the root when writing the norm by hand.

What really happens on torch 2.13 is checked: the built-in norm's gradient is 0 (graphlens must say
nothing of NaN), the hand-written one is NaN and graphlens names its square root.
"""

import torch

import graphlens as gl
from _helpers import expect


def builtin_norm_at_zero():
    x = torch.zeros(3, requires_grad=True)
    with gl.trace() as tr:
        n = x.norm()
        n.backward()
    return x, tr


def manual_norm_at_zero():
    x = torch.zeros(3, requires_grad=True)
    with gl.trace() as tr:
        n = x.pow(2).sum().sqrt()
        n.backward()
    return x, tr


def test_builtin_norm_gradient_is_zero_and_said_so():
    """x.norm() at a zero vector gives x.grad = 0 in torch 2.13: graphlens answers grad_ok and says nothing of NaN."""
    x, tr = builtin_norm_at_zero()
    assert x.grad.eq(0).all()
    expect(gl.explain(x, tr), reason="grad_ok", never=("NaN", "inf", "not finite"))


def test_manual_norm_names_the_square_root():
    """For .pow(2).sum().sqrt() the answer is nonfinite_backward + infinite_derivative at sqrt, on its line."""
    x, tr = manual_norm_at_zero()
    expect(gl.explain(x, tr), reason="nonfinite_backward", reasons=("infinite_derivative",), tensor="x",
           op=("sqrt", "SqrtBackward0"), line="x.pow(2).sum().sqrt()")


def test_manual_norm_says_it_is_the_norm_of_a_zero_vector():
    """The answer says the root takes a sum of squares (a norm) of a zero vector, and the fix is vector_norm or eps inside."""
    x, tr = manual_norm_at_zero()
    expect(gl.explain(x, tr), says=("norm of a vector", "zero", "sum's result = 0"),
           fix=("torch.linalg.vector_norm(x", "+ eps"), never=("torch.where", "overflow"))
