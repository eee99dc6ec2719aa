"""Frozen later layers get no .grad, but the gradient still flows through them to the first layer.

Address: https://discuss.pytorch.org/t/freezing-the-updates-without-freezing-the-gradients/7358
Title: Freezing the updates without freezing the gradients

What went wrong: the poster wanted to train only a new first layer while the rest of the network
still back-propagates to it, and asked what requires_grad = False does. After freezing the later
layers their parameters get no .grad (None), but the gradient still reaches the first layer
through them.

Accepted answer: requires_grad = False only stops storing gradients for those parameters; the error
still flows through the layers; give the optimizer only the first layer's parameters.
"""

import pytest
import torch
from torch import nn

import graphlens as gl
from _helpers import expect


def frozen_requires_grad_false():
    torch.manual_seed(0)
    first = nn.Linear(3, 3)
    rest = nn.Sequential(nn.ReLU(), nn.Linear(3, 1))
    for p in rest.parameters():
        p.requires_grad = False
    loss = rest(first(torch.randn(4, 3))).pow(2).mean()
    loss.backward()
    return first, rest, loss


def test_frozen_weight_gets_no_grad():
    """explain(rest[1].weight, loss) says the weight is frozen (requires_grad False)."""
    first, rest, loss = frozen_requires_grad_false()
    expect(gl.explain(rest[1].weight, loss), reason="requires_grad_false", tensor=("rest.1.weight", "rest[1].weight"),
           says=("frozen",))


def test_gradient_flows_through_the_frozen_layer():
    """explain(first.weight, loss) says first.weight got its gradient through the frozen layers' nodes."""
    first, rest, loss = frozen_requires_grad_false()
    expect(gl.explain(first.weight, loss), reason="grad_ok", tensor="first.weight", says=("ReluBackward0",))
