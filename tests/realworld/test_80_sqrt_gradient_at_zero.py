"""The gradient of sqrt at 0 is inf (not NaN): SqrtBackward0 sends it straight to the leaf.

Address: https://discuss.pytorch.org/t/how-to-fix-gradient-at-0-for-sqrt-function/23390
Title: How to fix gradient at 0 for sqrt function

What went wrong: b = torch.sqrt(a) with a = [0, 1] gives a.grad = [inf, 0.5]. The poster added 1e-4 to a
and found a gradient of 50 at that point, which looked wrong to them.

Accepted answer: (Daniel_Dagnino) 50 is correct: 1 / (2 sqrt(1e-4)) = 50. The derivative of sqrt is
infinite at 0; keeping the input away from 0 (a small eps) gives a large but finite gradient.

The infinity is a gradient: the forward values are finite, so only a trace (the replay) shows the node
that sent it.
"""

import torch

import graphlens as gl
from _helpers import expect


def sqrt_gradient_at_zero():
    a = torch.FloatTensor([0.0, 1.0])
    a.requires_grad = True
    with gl.trace() as tr:
        b = torch.sqrt(a)
        b.sum().backward()
    return a, tr


def test_names_sqrt_and_says_inf_not_nan():
    """explain(a, tr) is nonfinite_backward + infinite_derivative at sqrt: it sent inf to a[0], where a[0] = 0."""
    a, tr = sqrt_gradient_at_zero()
    expect(gl.explain(a, tr), reason="nonfinite_backward", reasons=("infinite_derivative",), tensor="a",
           op=("sqrt", "SqrtBackward0"), line="b = torch.sqrt(a)", says=("sent inf to a[0]", "a[0] = 0", "infinite at x = 0"),
           never=("NaN", "torch.where", "0 times"))


def test_fix_keeps_the_input_away_from_zero():
    """The fix adds eps (or clamps) inside the root, as the thread did."""
    a, tr = sqrt_gradient_at_zero()
    expect(gl.explain(a, tr), fix=("torch.sqrt(a + eps)",), never_fix=("log_softmax", "float32"))


def test_without_a_trace_it_says_inf_and_no_op():
    """Without a trace: a.grad is inf at a.grad[0], graphlens cannot tell which op made it, and names no op."""
    a, _ = sqrt_gradient_at_zero()
    expect(gl.explain(a), reason="nonfinite_backward", says=("a.grad is inf at a.grad[0]", "cannot tell"), never=("sqrt",))
