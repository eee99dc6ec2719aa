"""A generalised KL loss pred * log(pred / gt) cleaned with nan_to_num: the loss is finite, the gradient NaN, where pred is 0 past the first values graphlens keeps.

Address: https://github.com/pytorch/pytorch/issues/94700
Title: get NaN during backward of "nan_to_num"

What went wrong: a density network's output is masked to 0 outside a region of interest; the loss
pred * torch.log(pred / gt) + gt - pred is NaN there (0 · -inf), and loss.nan_to_num(0).mean() makes
the loss finite, but the weights' gradients are NaN.

Accepted answer (a maintainer: expected behaviour): nan_to_num's backward sends 0 to the replaced
elements, and mul's backward multiplies that 0 by the saved log(pred / gt) = -inf: NaN. Replacing the
NaN after the fact cannot help the backward; avoid making it (keep pred away from 0 before the log,
or use torch.xlogy).

The first zero of pred lies past the six values a record keeps of each tensor: the record's first
non-finite element (log's -inf at that position) is what tells the story, and log is -inf only at 0.
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


def nan_to_num_after_loss():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 6), nn.Softplus())
    x = torch.randn(8, 4)
    gt = torch.rand(8, 6) + 0.1
    roi_mask = (torch.rand(8, 6) > 0.2).float()
    with gl.trace() as tr:
        pred = net(x) * roi_mask
        loss = pred * torch.log(pred / gt) + gt - pred
        loss = (loss.nan_to_num(0)).mean()
        loss.backward()
    return net, pred, loss, tr


def test_names_the_forward_log_of_zero_behind_the_nan_gradient():
    """explain(net[2].weight, tr): mul's backward met log's -inf (kept in the forward pass), log of 0 at its line; never 'the derivative of mul'."""
    net, pred, loss, tr = nan_to_num_after_loss()
    zero = (pred.detach().reshape(-1) == 0).nonzero()
    assert torch.isfinite(loss) and torch.isnan(net[2].weight.grad).any() and int(zero[0]) >= 6
    expect(gl.explain(net[2].weight, tr), reason="nonfinite_backward", op="log",
           line="loss = pred * torch.log(pred / gt) + gt - pred",
           says=("already -inf", "The log of 0 is -inf"), never=("The derivative of mul is not finite",),
           fix=("clamp(min=eps)", "+ eps"))
