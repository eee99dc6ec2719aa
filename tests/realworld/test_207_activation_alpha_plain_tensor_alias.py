"""An adaptive activation keeps its learnable slope as a plain tensor attribute; the user asks about it under a local alias.

Address: https://github.com/shenweichen/DeepCTR-Torch/issues/93
Title: alpha should be wrappered with Parameter in Dice

What went wrong: the Dice activation made `self.alpha = torch.zeros(num_features)`, a plain tensor,
not an nn.Parameter: it needs no grad, model.parameters() does not list it, and the optimizer never
changes it.

Accepted answer: (the maintainers' fix) self.alpha = nn.Parameter(torch.zeros(...)).

The user holds it as `alpha = model.act.alpha`: whatever the name, graphlens must find the module
attribute, since "create it with requires_grad=True" alone would give it a .grad no optimizer applies.
"""

import torch
import torch.nn as nn

import graphlens as gl
from _helpers import expect


class Dice(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.bn = nn.BatchNorm1d(n)
        self.alpha = torch.zeros(n)

    def forward(self, x):
        p = torch.sigmoid(self.bn(x))
        return self.alpha * (1 - p) * x + p * x


class Tower(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 4)
        self.act = Dice(4)
        self.out = nn.Linear(4, 1)

    def forward(self, x):
        return self.out(self.act(self.lin(x)))


def test_a_local_alias_still_finds_the_plain_attribute():
    """explain(alpha, loss) with alpha = model.act.alpha: the plain tensor attribute is named, and the fix registers an nn.Parameter."""
    torch.manual_seed(0)
    model = Tower()
    alpha = model.act.alpha
    loss = nn.functional.binary_cross_entropy_with_logits(model(torch.randn(6, 8)), torch.ones(6, 1))
    loss.backward()
    expect(gl.explain(alpha, loss), reason="requires_grad_false", says=("model.act.alpha", "plain tensor attribute"),
           fix=("nn.Parameter",), never_fix=("create it with requires_grad=True",))
