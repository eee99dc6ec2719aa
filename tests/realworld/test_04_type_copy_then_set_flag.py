"""Setting requires_grad on the .type() copy of a leaf fails because the copy is not a leaf.

Address: https://github.com/hhsecond/HandsOnDeepLearningWithPytorch/issues/2
Title: Code in section 2 does not work

What went wrong: the book created weights with torch.randn(..., requires_grad=True).type(dtype).
The cast is recorded, so the stored weight is a non-leaf copy; setting y.requires_grad = True on
it raises "you can only change requires_grad flags of leaf variables".

Accepted answer: pass dtype/device to the factory (or cast first) and ask for gradients last,
torch.zeros(1, 2, dtype=...).requires_grad_().
"""

import pytest
import torch

from _helpers import HOW, expect, explained, note


def type_copy_then_set_flag():
    dtype = torch.float64                       # the book used torch.cuda.FloatTensor
    y = torch.zeros(1, 2, requires_grad=True).type(dtype)
    y.requires_grad = True                      # the reporter set the flag on the copy
    return y


@pytest.mark.parametrize("how", HOW)
def test_flag_set_on_a_nonleaf_copy(how):
    """explain_error names y as the non-leaf whose flag was changed."""
    expect(explained(type_copy_then_set_flag, how), reason="requires_grad_nonleaf", tensor="y", says=("not a leaf",),
           not_reasons=("requires_grad_dtype",))


def test_note_names_y():
    """The note of trace(explain_errors=True) says y is not a leaf."""
    expect(note(type_copy_then_set_flag), says=("y", "not a leaf"))


@pytest.mark.parametrize("how", HOW)
def test_names_the_cast_and_the_line(how):
    """e.op is the copy node that made y a non-leaf and e.line the line that set the flag."""
    expect(explained(type_copy_then_set_flag, how), op=("ToCopyBackward0", "type", "to"), line="y.requires_grad = True")
