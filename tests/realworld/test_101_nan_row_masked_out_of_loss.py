"""A NaN row of the input that the loss masks out still makes the weight's gradient NaN.

Address: https://github.com/pytorch/pytorch/issues/23156
Title: Pruning off NaN values in the gradient graph still produces NaN gradients.

What went wrong: one row of the input to an nn.Linear held NaN; its outputs were masked out of the loss,
so the loss was finite, yet linear.weight.grad was NaN.

Accepted answer: the mask only stops the forward value: the weight's gradient is a sum over all rows of
input × incoming gradient, and the masked row contributes NaN × 0 = NaN. Remove the NaN from the input
(or the row from the batch) before the layer; masking afterwards cannot help.
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


def nan_row_masked_out():
    torch.manual_seed(0)
    x = torch.ones(3, 4)
    x[2].fill_(float("nan"))
    linear = nn.Linear(4, 2)
    keep = torch.tensor([True, True, False])
    with gl.trace() as tr:
        out = linear(x)
        loss = out[keep].sum()
        loss.backward()
    return linear, loss, tr


def test_weight_gradient_names_the_nan_input_row():
    """explain(linear.weight, tr): the loss was finite; AddmmBackward0's input x was already NaN at x[2, 0]: the data."""
    linear, loss, tr = nan_row_masked_out()
    assert torch.isfinite(loss) and not torch.isfinite(linear.weight.grad).all()
    expect(gl.explain(linear.weight, tr), reason="nonfinite_backward", reasons=("nonfinite_input",),
           tensor="linear.weight", says=("x was already NaN at x[2, 0]", "loss was finite", "0 gradient"),
           never=("derivative of linear is not finite", "infinite derivative", "overflow"),
           not_reasons=("infinite_derivative",))


def test_fix_cleans_the_data_before_the_layer():
    """The fix is the thread's: clean the data before the model; never a clamp of linear's input or a smaller learning rate."""
    linear, loss, tr = nan_row_masked_out()
    expect(gl.explain(linear.weight, tr), fix=("isfinite(x)", "nan_to_num"), never_fix=("learning rate", "away from"))
