"""Assigning into cconv.weight[:, :, :, :] is an in-place copy into a leaf Parameter.

Address: https://github.com/PingoLH/FCHarDNet/issues/61
Title: RuntimeError: a view of a leaf Variable that requires grad is being used in an in-place operation- Using own dataset

What went wrong: test.py folds a convolution's weights with cconv.weight[:,:,:,:] = W. The weight
is a Parameter (a leaf that requires grad), so the slice assignment is an in-place copy into it
and raises at once.

Accepted answer (standard): do parameter surgery under torch.no_grad() (or through weight.copy_
inside no_grad).
"""

import pytest
import torch
from torch import nn

from _helpers import HOW, expect, explained, note


def view_of_leaf_weight_copy():
    cconv = nn.Conv2d(2, 2, 1, bias=False)
    W = torch.randn(2, 2, 1, 1)
    cconv.weight[:, :, :, :] = W[:, :, :, :]
    return cconv


@pytest.mark.parametrize("how", HOW)
def test_names_the_parameter_and_proposes_no_grad(how):
    """explain_error names cconv.weight, quotes the assignment and proposes torch.no_grad()."""
    expect(explained(view_of_leaf_weight_copy, how), reason="inplace_leaf", tensor="cconv.weight",
           says=("cconv.weight[:, :, :, :] = W",), fix=("torch.no_grad()",))


def test_note_names_the_parameter():
    """The note of trace(explain_errors=True) names cconv.weight."""
    expect(note(view_of_leaf_weight_copy), says=("cconv.weight", "torch.no_grad()"))


@pytest.mark.parametrize("how", HOW)
def test_line_and_op_as_fields(how):
    """e.line is the slice assignment and e.op the in-place copy."""
    expect(explained(view_of_leaf_weight_copy, how), line="cconv.weight[:, :, :, :] = W", op=("copy_", "__setitem__", "setitem"))
