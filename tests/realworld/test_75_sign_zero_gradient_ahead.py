"""The gradient through torch.sign is zero: graphlens says so before backward runs, not only after.

Address: https://github.com/pytorch/pytorch/issues/7940
Title: Some confusion about the grad of torch.sign()

What went wrong: the poster (and the forum thread it links) expected a useful gradient through
torch.sign and was confused by what came back; sign is a step function, and autograd gives it a
derivative of zero everywhere (SignBackward0), so anything before it learns nothing through it.

Accepted answer (SsnL / soumith, and the forum): the gradient of sign is zero almost everywhere; to
train through it use a straight-through estimator or a smooth stand-in (tanh).

Before backward, an explanation that says only "x will get its gradient through SignBackward0" is
true but leaves out what the graph already shows: every path passes a zero-derivative op.
"""

import pytest
import torch

import graphlens as gl
from _helpers import expect


def sign_before_backward():
    torch.manual_seed(0)
    w = torch.randn(3, requires_grad=True)
    x = torch.tensor([0.5, -1.0, 2.0])
    out = torch.sign(w * x).sum()
    return w, out


def test_before_backward_says_the_gradient_will_be_zero():
    """explain(w, out) before backward: backward_not_run + zero_derivative at SignBackward0."""
    w, out = sign_before_backward()
    expect(gl.explain(w, out), reason="backward_not_run", reasons=("zero_derivative",), op=("SignBackward0", "sign"),
           says=("zero",), fix=("straight-through",))


def test_after_backward_says_it_is_zero():
    """After backward, w.grad is all zeros and the answer says why (zero_derivative, the same op)."""
    w, out = sign_before_backward()
    out.backward()
    assert w.grad.abs().sum() == 0
    expect(gl.explain(w, out), reason="grad_ok", reasons=("zero_derivative",), op=("SignBackward0", "sign"))


def test_a_path_around_sign_is_not_called_zero():
    """When another path reaches w without passing sign, the answer does not say its gradient is zero."""
    w, out = sign_before_backward()
    total = out + (w * 2).sum()
    expect(gl.explain(w, total), reason="backward_not_run", not_reasons=("zero_derivative",))
