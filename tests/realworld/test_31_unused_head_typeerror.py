"""Scaling param.grad crashes with TypeError on heads the loss never used (their .grad is None).

Address: https://github.com/MichiganCOG/ViP/issues/21
Title: Fails on zero grad

What went wrong: with one loss term disabled, the weights of the unused regression heads never take
part in the loss, so their .grad stays None; the loop's gradient scaling param.grad *= 1./float(...)
then crashes with "unsupported operand type(s) for *=: 'NoneType' and 'float'". The weights are not
frozen; they are just not reachable from the loss.

Accepted answer (reporter's workaround): guard with `if param.grad is not None:` (or do not build
the unused heads).
"""

import pytest
import torch
from torch import nn

import graphlens as gl
from _helpers import expect, raised


class Heads(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Linear(3, 4)
        self.yaw = nn.Linear(4, 1)
        self.pitch = nn.Linear(4, 1)
        self.roll = nn.Linear(4, 1)

    def forward(self, x):
        h = self.trunk(x)
        return self.yaw(h), self.pitch(h), self.roll(h)


def unused_head_typeerror():
    torch.manual_seed(0)
    model = Heads()
    yaw, pitch, roll = model(torch.randn(2, 3))
    loss = yaw.pow(2).mean()          # only yaw is regressed in this experiment
    loss.backward()
    return model, yaw, pitch, roll, loss


def scale_grads(model):
    for param in model.parameters():
        param.grad *= 1.0 / float(2 * 4)


def test_explain_on_the_unused_head_says_it_feeds_another_output():
    """explain(model.pitch.weight, loss) says loss does not reach it: it only feeds pitch."""
    model, yaw, pitch, roll, loss = unused_head_typeerror()
    expect(gl.explain(model.pitch.weight, loss), reason="not_reachable", reasons=("feeds_other_root",),
           tensor="model.pitch.weight", says=("pitch",), not_reasons=("requires_grad_false",))


def test_typeerror_names_the_unused_parameter():
    """explain_error(exc) says the .grad of model.pitch.weight is None because loss never used it; guard with is not None."""
    model, yaw, pitch, roll, loss = unused_head_typeerror()
    expect(gl.explain_error(raised(scale_grads, model)), reason="grad_is_none", tensor=("model.pitch.weight", "param"),
           says=("model.pitch.weight",), line="param.grad *= 1.0 / float(2 * 4)", fix=("is not None",),
           never=("frozen",), not_reasons=("requires_grad_false",))
