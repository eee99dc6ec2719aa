"""torch.where guards exp against overflow in the forward pass, but exp's backward at 1e10 is 0 * inf = NaN.

Address: https://github.com/pytorch/pytorch/issues/156212
Title: torch.where() can produce nan values for unselected branch during backward

What went wrong: x_out = torch.where(x <= x_th, torch.exp(x), b) was meant to protect against overflow:
for x = 1e10 the branch b is chosen and the forward value is finite, yet x.grad is NaN there. The
reporter's x also held a NaN "just for this experiment", which makes x.grad NaN at that element too.

Accepted answer: the standard one (closed as expected behaviour, see pytorch/pytorch#23395): the
unchosen branch's backward still runs; feed exp a safe input where the other branch is chosen.

With the reporter's NaN in x, the honest answer names both causes: the NaN x already held, and the
overflow of exp at an element where x was finite.
"""

import torch

import graphlens as gl
from _helpers import expect


def where_exp_overflow(values):
    x_th = torch.tensor(10)
    x = torch.tensor(values, requires_grad=True)
    b = torch.tensor(1)
    with gl.trace() as tr:
        x_out = torch.where(x <= x_th, torch.exp(x), b)
        l = x_out.sum()
        l.backward()
    return x, tr


def test_names_exp_and_the_unchosen_branch():
    """For x = [1, 1e10]: nonfinite_backward + where_unchosen_branch at exp, reading x[1] = 1e+10 and exp's hidden inf."""
    x, tr = where_exp_overflow([1.0, 1e10])
    expect(gl.explain(x, tr), reason="nonfinite_backward", reasons=("infinite_derivative", "where_unchosen_branch"),
           tensor="x", op=("exp", "ExpBackward0"), line="torch.where(x <= x_th, torch.exp(x), b)",
           says=("x[1] = 1e+10", "its forward value there, inf", "chose the other branch"))


def test_fix_feeds_exp_a_safe_input():
    """The fix is the double where with a safe input for exp (zeros), not clamping the result after it."""
    x, tr = where_exp_overflow([1.0, 1e10])
    expect(gl.explain(x, tr), fix=("torch.exp(torch.where(", "torch.zeros_like(x)"), never_fix=("clip_grad",))


def test_with_the_reporters_nan_both_causes_are_named():
    """For x = [1, nan, 1e10]: x already held NaN at x[1] (the input), and exp's unchosen branch made x.grad[2] NaN."""
    x, tr = where_exp_overflow([1.0, float("nan"), 1e10])
    expect(gl.explain(x, tr), reason="nonfinite_forward", reasons=("nonfinite_input", "where_unchosen_branch"),
           says=("already held NaN at x[1]", "second cause", "x[2] = 1e+10"), never=("x[1] = 1e+10",))
