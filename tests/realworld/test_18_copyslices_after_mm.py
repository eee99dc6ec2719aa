"""b[i] = b[i] + 1 in a loop overwrites the b that torch.mm(param, b) saved.

Address: https://www.yongfengli.tk/2018/04/13/inplace-operation-in-pytorch.html
Title: Inplace operation in pytorch

What went wrong: in a forward loop, b = torch.mm(param, a) is updated element by element with
b[i] = b[i] + 1 while y = y + torch.mm(param, b) uses b at every step. Each mm saves b for the
gradient of param, and the next assignment overwrites it, so backward fails. PyTorch's message
names the producer as torch::autograd::CopySlices.

Accepted answer (the post's own): avoid the in-place assignment (b = b + one_hot(i)), or clone b
before writing into it.

The in-place line is seen by a trace (without one it can be read from the user's code, as a lead).
"""

import pytest
import torch

from _helpers import HOW, expect, explained


def copyslices_after_mm():
    torch.manual_seed(0)
    param = torch.randn(3, 3, requires_grad=True)
    a = torch.randn(3, 1)
    y = 0
    b = torch.mm(param, a)
    for i in range(3):
        b[i] = b[i] + 1              # in-place (CopySlices) on b, which mm saved
        y = y + torch.mm(param, b)
    y.sum().backward()


@pytest.mark.parametrize("how", HOW)
def test_names_b_and_mms_backward(how):
    """explain_error names b and MmBackward0, which saved it."""
    expect(explained(copyslices_after_mm, how), reason="inplace_saved", tensor="b", op="MmBackward0", says=("MmBackward0",))


def test_traced_line_is_the_assignment():
    """With a trace, e.line is the b[i] = b[i] + 1 line."""
    expect(explained(copyslices_after_mm, "traced"), reason="inplace_saved", line="b[i] = b[i] + 1")
