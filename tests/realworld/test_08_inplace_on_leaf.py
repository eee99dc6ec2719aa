"""x += 1 on a leaf that requires grad is refused.

Address: https://discuss.pytorch.org/t/leaf-variable-was-used-in-an-inplace-operation/308/2
Title: Leaf variable was used in an inplace operation

What went wrong: x is created with requires_grad=True and then changed with x += 1. PyTorch
refuses in-place changes to leaves that require grad and raises "a leaf Variable that requires
grad is being used in an in-place operation".

Accepted answer: clone the leaf (x2 = x.clone(); x2 += 1) or use the out-of-place form when the
change must be differentiable; wrap it in torch.no_grad() when it is a parameter update.
"""

import pytest
import torch

from _helpers import HOW, expect, explained, note


def inplace_on_leaf():
    w = torch.tensor([1.0, 2.0, 3.0])                       # leaf, no grad
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)   # leaf that requires grad
    y = x + 1                                               # non-leaf
    x += 1
    return w, y


@pytest.mark.parametrize("how", HOW)
def test_names_the_leaf_and_the_failing_line(how):
    """explain_error names x (not w or y), quotes x += 1 and proposes no_grad or clone()."""
    expect(explained(inplace_on_leaf, how), reason="inplace_leaf", tensor="x", says=("x += 1",),
           fix=("torch.no_grad()", "clone()"), never=("view of",))


def test_note_names_the_leaf():
    """The note of trace(explain_errors=True) names x and the failing line."""
    expect(note(inplace_on_leaf), says=("x, a leaf", "x += 1"))


@pytest.mark.parametrize("how", HOW)
def test_line_and_op_as_fields(how):
    """e.line is the in-place line and e.op the in-place add."""
    expect(explained(inplace_on_leaf, how), line="x += 1", op=("add_", "__iadd__", "iadd"))
