"""x.grad is None for x = a * b (a non-leaf), even after x was zeroed through x.detach().

Address: https://github.com/pytorch/pytorch/issues/7860
Title: .data and .detach

What went wrong: x = a * b; x.detach().zero_() also zeroes x; then out = (x * y).sum() and
backward. The reporter was puzzled that x.grad printed None and y.grad was zeros. x is a non-leaf
(no .grad kept); y.grad is zero because x really is zero by then; no error because the zeroing
happened before x * y used x, and a * b saved a and b, not x.

Accepted answer (explanation; the stored copy shows only the report): as documented, detach()
shares memory; x.grad is None because x is not a leaf (retain_grad() keeps it).
"""

import pytest
import torch

import graphlens as gl
from _helpers import expect


def detach_zero_intermediate():
    a = torch.tensor([1.0, 2.0], requires_grad=True)
    b = torch.tensor([2.0, 3.0], requires_grad=True)
    y = torch.tensor([1.0, 1.0], requires_grad=True)
    x = a * b
    x_detach = x.detach()
    x_detach.zero_()
    out = (x * y).sum()
    out.backward()
    return a, b, y, x, x_detach, out


def test_x_grad_is_none_because_x_is_not_a_leaf():
    """explain(x, out) says x is a non-leaf made by MulBackward0 and proposes retain_grad()."""
    a, b, y, x, x_detach, out = detach_zero_intermediate()
    expect(gl.explain(x, out), reason="nonleaf_not_retained", tensor="x", says=("MulBackward0",),
           fix=("x.retain_grad()",), not_reasons=("made_by_detach", "cut_by_detach"))


def test_y_grad_is_set():
    """explain(y, out) says y got its gradient (the zeros are right: x is zero) and blames no reset."""
    a, b, y, x, x_detach, out = detach_zero_intermediate()
    expect(gl.explain(y, out), reason="grad_ok", tensor="y", never=("zero_grad",))


def test_names_the_op_that_made_x():
    """e.op is MulBackward0, the node that made x."""
    a, b, y, x, x_detach, out = detach_zero_intermediate()
    expect(gl.explain(x, out), op=("MulBackward0", "mul"))
