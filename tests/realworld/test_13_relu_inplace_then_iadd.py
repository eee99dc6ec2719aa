"""out += residual after an in-place ReLU overwrites the output ReLU's backward saved.

Address: https://github.com/pytorch/pytorch/issues/5687
Title: ReLU(inplace=True) seems something wrong internal

What went wrong: the reporter applied an in-place ReLU and then added to its output in place
(out += residual). ReLU's backward needs its own output, which the += overwrote, so backward fails
with "one of the variables needed for gradient computation has been modified by an inplace
operation ... output 0 of ReluBackward0".

Accepted answer (colesbury): an in-place addition after an in-place relu cannot work; write
out = out + residual (or use inplace=False).

The error is raised at backward: a trace sees the in-place call; without one graphlens can only read
it from the user's code, as a lead.
"""

import pytest
import torch
from torch import nn

from _helpers import HOW, expect, explained, note


def relu_inplace_then_iadd():
    torch.manual_seed(0)
    lin = nn.Linear(4, 4)
    relu = nn.ReLU(inplace=True)
    x = torch.randn(2, 4)
    residual = torch.randn(2, 4)
    out = relu(lin(x))
    out += residual
    out.sum().backward()


@pytest.mark.parametrize("how", HOW)
def test_names_out_and_relus_backward(how):
    """explain_error names out, saved by ReluBackward0 at version 1 and now at version 2."""
    expect(explained(relu_inplace_then_iadd, how), reason="inplace_saved", tensor="out",
           says=("ReluBackward0", "version 1", "version 2"), fix=(("out = out +", "out-of-place"), "clone()"))


def test_traced_answer_names_the_inplace_add():
    """With a trace, the answer names add_ as the in-place operation."""
    expect(explained(relu_inplace_then_iadd, "traced"), reason="inplace_saved", says=("add_",))


def test_note_names_out():
    """The note of trace(explain_errors=True) names out and ReluBackward0."""
    expect(note(relu_inplace_then_iadd), says=("out", "ReluBackward0", "add_"))


@pytest.mark.parametrize("how", HOW)
def test_op_is_the_saver(how):
    """e.op is ReluBackward0, whose saved output was overwritten."""
    expect(explained(relu_inplace_then_iadd, how), op="ReluBackward0")


def test_traced_line_is_the_inplace_add():
    """With a trace, e.line is the out += residual line."""
    expect(explained(relu_inplace_then_iadd, "traced"), line="out += residual")
