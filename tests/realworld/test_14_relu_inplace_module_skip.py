"""An nn.ReLU(inplace=True) inside a module overwrites a tensor that a skip convolution saved.

Address: https://github.com/osmr/imgclsmob/issues/13
Title: Inplace ReLU's are unnecessary and wrong

What went wrong: the model zoo's blocks use self.activ = nn.ReLU(inplace=True); x = self.activ(x),
and with Xception loss.backward() raised the "modified by an inplace operation" error. The program
below is a minimal reconstruction: a skip convolution consumes (and saves) x before the in-place
ReLU overwrites it.

Accepted answer: the issue (labelled bug, closed) proposes removing inplace=True from those ReLUs.

The saver (the skip conv's ConvolutionBackward0) can be read from the graph without a trace; the
name x and the in-place line live inside forward, which has returned when backward fails, so they
are checked on the traced answer only.
"""

import pytest
import torch
from torch import nn

from _helpers import HOW, expect, explained


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(2, 2, 1)
        self.skip = nn.Conv2d(2, 2, 1)
        self.conv2 = nn.Conv2d(2, 2, 1)
        self.activ = nn.ReLU(inplace=True)

    def forward(self, inp):
        x = self.conv1(inp)
        identity = self.skip(x)        # the skip conv saves x for its backward
        x = self.activ(x)              # in-place: overwrites the saved x
        x = self.conv2(x)
        return x + identity


def relu_inplace_module_skip():
    torch.manual_seed(0)
    model = Block()
    loss = model(torch.randn(1, 2, 3, 3)).sum()
    loss.backward()


@pytest.mark.parametrize("how", HOW)
def test_recognised_as_inplace_saved(how):
    """explain_error recognises a saved tensor changed in place."""
    expect(explained(relu_inplace_module_skip, how), reason="inplace_saved")


def test_plain_answer_names_the_skip_conv_as_saver():
    """Without a trace, the answer says the skip conv's ConvolutionBackward0 saved the tensor, not ReluBackward0."""
    expect(explained(relu_inplace_module_skip), op="ConvolutionBackward0", says=("ConvolutionBackward0",),
           never=("saved by ReluBackward0",))


def test_traced_answer_names_x_and_the_skip_conv():
    """With a trace, the answer names x, the skip conv's ConvolutionBackward0 as saver, and an out-of-place fix."""
    expect(explained(relu_inplace_module_skip, "traced"), tensor="x", op="ConvolutionBackward0",
           says=("ConvolutionBackward0",), fix=("out-of-place",), never=("saved by ReluBackward0",))


def test_traced_line_is_the_inplace_relu():
    """With a trace, e.line is the x = self.activ(x) line inside forward."""
    expect(explained(relu_inplace_module_skip, "traced"), line="x = self.activ(x)")
