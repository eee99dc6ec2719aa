"""An input moved with .cuda() after setting requires_grad is a non-leaf copy, so its .grad stays None.

Address: https://github.com/pytorch/pytorch/issues/12627
Title: using pytorch 0.4 using cuda show grad was None

What went wrong: the user set inputs.requires_grad = True and then rebound inputs =
inputs.cuda(); inputs.grad printed None in every iteration. The device copy is a new non-leaf (a
ToCopy node) and the gradient lands on the CPU original, which no variable names any more.

Accepted answer (albanD): .cuda() returns a new, non-leaf tensor; move first and set
requires_grad afterwards, or create the tensor on the device with requires_grad=True.

Note: CPU only here, so the device move is replaced by a dtype move (.to(torch.float64)), which
builds the same kind of copy node (ToCopyBackward0).
"""

import pytest
import torch
from torch import nn

import graphlens as gl
from _helpers import expect


def to_copy_of_input():
    torch.manual_seed(0)
    inputs = torch.randn(3, 5)
    targets = torch.tensor([1, 2, 3])
    inputs.requires_grad = True
    inputs = inputs.to(torch.float64)          # stands in for inputs.cuda()
    net = nn.Sequential(nn.Linear(5, 5), nn.LogSoftmax(dim=-1)).double()
    out = net(inputs[0])
    loss = nn.NLLLoss()(out.view(1, 5), targets[0].view(1))
    loss.backward()
    return inputs, loss


def test_moved_input_is_a_copy_of_an_unnamed_leaf():
    """explain(inputs, loss) says inputs is a copy made by .to()/.cuda() and the leaf is unnamed."""
    inputs, loss = to_copy_of_input()
    expect(gl.explain(inputs, loss), reason="is_a_copy", tensor="inputs",
           says=(".cuda()", "not a leaf", "unnamed leaf"), fix=("requires_grad_()",),
           not_reasons=("requires_grad_false", "not_reachable"))


def test_names_the_copy_op():
    """The explanation names the copy node ToCopyBackward0 as e.op."""
    inputs, loss = to_copy_of_input()
    expect(gl.explain(inputs, loss), op=("ToCopyBackward0", "to"))
