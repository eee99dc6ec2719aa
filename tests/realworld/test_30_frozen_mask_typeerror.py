"""A hand-written update crashes with TypeError on a frozen mask Parameter whose .grad is None.

Address: https://github.com/uchida-takumi/CustomizedLinear/issues/2
Title: error in test

What went wrong: the example's hand-written update loops over model.parameters() and does
param -= learning_rate * param.grad. The layer also registers its connectivity mask as a
Parameter with requires_grad=False, whose .grad is None, so the update crashes with
"TypeError: unsupported operand type(s) for *: 'float' and 'NoneType'".

Accepted answer (author): skip parameters that do not require grad (if param.requires_grad:).
"""

import pytest
import torch
from torch import nn

import graphlens as gl
from _helpers import expect, raised


class CustomizedLinear(nn.Module):
    def __init__(self, mask):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(mask.shape))
        self.mask = nn.Parameter(mask, requires_grad=False)

    def forward(self, x):
        return x @ (self.weight * self.mask).t()


def frozen_mask_typeerror():
    torch.manual_seed(0)
    model = CustomizedLinear(torch.tensor([[1.0, 0.0], [0.0, 1.0]]))
    loss = model(torch.randn(4, 2)).pow(2).sum()
    loss.backward()
    return model, loss


def update(model, learning_rate=0.1):
    with torch.no_grad():
        for param in model.parameters():
            param -= learning_rate * param.grad


def test_explain_on_the_mask_says_it_is_frozen():
    """explain(model.mask, loss) says the mask does not require grad (a frozen parameter)."""
    model, loss = frozen_mask_typeerror()
    expect(gl.explain(model.mask, loss), reason="requires_grad_false", tensor="model.mask", says=("frozen",))


def test_typeerror_names_the_parameter_without_grad():
    """explain_error(exc) says the update used a .grad that is None, names the frozen mask and proposes skipping it."""
    model, loss = frozen_mask_typeerror()
    expect(gl.explain_error(raised(update, model)), reason="grad_is_none", tensor=("model.mask", "param"),
           says=("model.mask", ("requires_grad", "require grad")), line="param -= learning_rate * param.grad",
           fix=(("requires_grad", "require grad", "is None"),), not_reasons=("not_reachable",))
