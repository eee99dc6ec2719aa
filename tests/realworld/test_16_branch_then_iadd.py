"""x += some_layer changes x after a second branch conv1_p saved it.

Address: https://discuss.pytorch.org/t/when-would-the-error-one-of-the-variables-needed-for-gradient-computation-has-been-modified-occur/11976/2
Title: When would the error "one of the variables needed for gradient computation has been modified" occur?

What went wrong: x = conv1(input) feeds a second branch conv1_p(x) and is then updated with
x += some_layer. conv1_p saved x for its weight gradient, so the in-place += invalidates it and
backward raises; with x = x + some_layer it works.

Accepted answer: x += ... modifies the tensor the other branch saved; use x = x + ... (ResNet's
out += residual is fine only because batchnorm does not need its output).

The saver can be read from the graph; the in-place line is seen by a trace (without one it can be
read from the user's code, as a lead).
"""

import pytest
import torch
from torch import nn

from _helpers import HOW, expect, explained


def branch_then_iadd():
    torch.manual_seed(0)
    conv1 = nn.Conv2d(1, 2, 1)
    conv1_p = nn.Conv2d(2, 2, 1)
    inp = torch.randn(1, 1, 3, 3)
    some_layer = torch.randn(1, 2, 3, 3)
    x = conv1(inp)          # main branch
    x_p = conv1_p(x)        # another branch: saves x
    x += some_layer         # main branch, in place
    loss = x.sum() + x_p.sum()
    loss.backward()


@pytest.mark.parametrize("how", HOW)
def test_recognised_as_inplace_saved(how):
    """explain_error recognises that x, saved by another branch, was changed in place."""
    expect(explained(branch_then_iadd, how), reason="inplace_saved")


def test_plain_answer_names_x():
    """Without a trace, the answer names x (found in the raising frame)."""
    expect(explained(branch_then_iadd), tensor="x")


def test_plain_answer_names_conv1_p_as_saver():
    """Without a trace, the answer names ConvolutionBackward0 (conv1_p) as the saver, not Add."""
    expect(explained(branch_then_iadd), op="ConvolutionBackward0", says=("ConvolutionBackward0",), never=("Add's backward",))


def test_traced_answer_names_x_the_saver_and_the_line():
    """With a trace, the answer names x, ConvolutionBackward0 as saver and the x += some_layer line."""
    expect(explained(branch_then_iadd, "traced"), tensor="x", op="ConvolutionBackward0", line="x += some_layer",
           says=("ConvolutionBackward0",), never=("Add's backward",))
