"""sqrt((x - 1) ** 2) at x = 1 has a NaN gradient where |x - 1| has none: the root's infinite derivative meets 0.

Address: https://github.com/pytorch/pytorch/issues/6394
Title: chain rule will lead to Nan, sqrt() example

What went wrong: the reporter wrote |x - 1| as torch.sqrt(torch.pow(x - 1, 2)) and, at x = 1, got x.grad =
nan, while the same function written as x - 1 (or abs) gives a number. The forward value is a plain 0.

Accepted answer: (vishwakftw, fmassa) the derivative of sqrt is infinite at 0, and the chain rule multiplies
it by the square's derivative, 0 there: 0 * inf = NaN. Nothing to fix in autograd; write the function
as (x - 1).abs(), whose gradient at 0 is 0.

Only a trace shows which backward node first sent a non-finite gradient (SqrtBackward0 sends inf, the
square's backward turns it into NaN); without one graphlens says where the NaN is and no more.
"""

import torch

import graphlens as gl
from _helpers import expect


def sqrt_of_square_at_zero():
    x = torch.tensor([1.0], requires_grad=True)
    with gl.trace() as tr:
        y = torch.sqrt(torch.pow(x - 1, 2))
        y.backward()
    return x, tr


def test_names_the_square_root_and_its_line():
    """explain(x, tr) is nonfinite_backward + infinite_derivative at sqrt, on the sqrt line, about x."""
    x, tr = sqrt_of_square_at_zero()
    expect(gl.explain(x, tr), reason="nonfinite_backward", reasons=("infinite_derivative",), tensor="x",
           op=("sqrt", "SqrtBackward0"), line="torch.sqrt(torch.pow(x - 1, 2))")


def test_says_the_root_met_zero_and_the_square_made_nan():
    """The answer reads the 0 under the root, says SqrtBackward0 sent inf and the square's backward turned it into NaN."""
    x, tr = sqrt_of_square_at_zero()
    expect(gl.explain(x, tr), says=("SqrtBackward0", "sent inf", "= 0", "PowBackward0", "turned that inf into NaN", "|v|"),
           never=("torch.where", "overflow", "already held"))


def test_fix_is_the_absolute_value():
    """The fix is the thread's: take abs() instead of the root of a square, never a learning rate or clipping."""
    x, tr = sqrt_of_square_at_zero()
    expect(gl.explain(x, tr), fix=("abs()",), never_fix=("learning rate", "clip_grad", "retain_graph"))


def test_without_a_trace_it_only_says_where_the_nan_is():
    """Without a trace the answer says x.grad is NaN at x.grad[0] and that it cannot tell which op made it, naming no op."""
    x, _ = sqrt_of_square_at_zero()
    expect(gl.explain(x), reason="nonfinite_backward", says=("x.grad is NaN at x.grad[0]", "cannot tell"),
           never=("sqrt", "Sqrt", "pow"))
