"""A textbook custom layer computes with self.weight.data: the layer's parameters never get a gradient.

Address: https://github.com/d2l-ai/d2l-en/pull/2600
Title: Fix pytorch version of custom-layer to allow auto grad

What went wrong: the book's MyLinear.forward used `self.weight.data` and `self.bias.data`, values autograd
does not track; stacked under a trainable head, the custom layer's weights got no gradient.

Accepted answer: (the pull request) use the Parameters themselves in forward.

The trace saw `.data` taken (not `detach()`): the answer says so.
"""

import torch
import torch.nn.functional as F
from torch import nn

import graphlens as gl
from _helpers import expect


class MyLinear(nn.Module):
    def __init__(self, in_units, units):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(in_units, units))
        self.bias = nn.Parameter(torch.randn(units))

    def forward(self, X):
        return F.relu(torch.matmul(X, self.weight.data) + self.bias.data)


def test_traced_answer_names_data_not_detach():
    """cut_by_detach told as net.0.weight.data, never as a detach() the program does not call."""
    torch.manual_seed(0)
    net = nn.Sequential(MyLinear(6, 4), nn.Linear(4, 1))
    X, y = torch.randn(5, 6), torch.randn(5, 1)
    with gl.trace() as tr:
        loss = F.mse_loss(net(X), y)
        loss.backward()
    assert net[0].weight.grad is None and net[1].weight.grad is not None
    expect(gl.explain(net[0].weight, tr), reason="not_reachable", reasons=("cut_by_detach",), op="data",
           says=("net.0.weight.data",), never=("net.0.weight.detach()",))
