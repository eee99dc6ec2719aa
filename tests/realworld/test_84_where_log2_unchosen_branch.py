"""torch.where picks 2 * x at x = 0, yet log2's backward still runs there: 0 times its infinite derivative is NaN.

Address: https://github.com/pytorch/pytorch/issues/108618
Title: Backward bypassing for torch.where

What went wrong: y1 = torch.where(x1 > 2, torch.log2(x1), 2 * x1) with x1 = [0, 2, 3] has a finite
forward value, but x1.grad[0] is NaN, while the same function written with a loop and indexing gives 2.
The branch torch.where did not choose, log2(0) = -inf, still runs its backward with a zero gradient.

Accepted answer: the standard one (pytorch/pytorch#23395, #52248): autograd does not tell "no gradient"
from "zero gradient"; make the input of log2 safe where the other branch is chosen (the double where),
so the unchosen branch is finite too.

The forward pass is finite where it matters; only the replay shows Log2Backward0 sending NaN.
"""

import torch

import graphlens as gl
from _helpers import expect


def where_log2_unchosen_branch():
    x1 = torch.tensor([0.0, 2.0, 3.0], requires_grad=True)
    with gl.trace() as tr:
        y1 = torch.where(x1 > 2, torch.log2(x1), 2 * x1)
        z1 = y1.sum()
        z1.backward()
    return x1, tr


def test_names_log2_and_the_unchosen_branch():
    """explain(x1, tr) is nonfinite_backward + where_unchosen_branch at log2, on the torch.where line."""
    x1, tr = where_log2_unchosen_branch()
    expect(gl.explain(x1, tr), reason="nonfinite_backward", reasons=("infinite_derivative", "where_unchosen_branch"),
           tensor="x1", op=("log2", "Log2Backward0"), line="torch.where(x1 > 2, torch.log2(x1), 2 * x1)")


def test_says_the_position_and_the_zero_times_inf():
    """The answer reads x1[0] = 0, says where chose the other branch there, and that 0 times inf is NaN."""
    x1, tr = where_log2_unchosen_branch()
    expect(gl.explain(x1, tr), says=("x1[0] = 0", "chose the other branch at [0]", "0 times an infinite derivative"),
           never=("overflow", "already held"))


def test_fix_is_the_double_where():
    """The fix makes log2's input safe before the op (torch.log2(torch.where(..., x1, ...))), never a mask after it."""
    x1, tr = where_log2_unchosen_branch()
    expect(gl.explain(x1, tr), fix=("torch.log2(torch.where(", "x1, torch.ones_like(x1)", "masking after the op cannot help"),
           never_fix=("retain_graph", "clip_grad"))
