"""Unpacking a loss function's results in the wrong order leaves a Python float in the variable loss.

Address: https://github.com/bnu-wangxun/Deep_Metric/issues/26
Title: AttributeError: 'float' object has no attribute 'backward'

What went wrong: the Weight loss returns (mean_pos_sim, mean_neg_sim, prec, loss), the first three
Python floats from .item(), but trainer.py unpacks it as loss, inter_, dist_ap, dist_an =
criterion(...). The variable loss therefore holds a float and loss.backward() raises
"AttributeError: 'float' object has no attribute 'backward'".

Accepted answer (commenter, confirmed by the author): unpack in the order the loss returns (the
real loss tensor is the last value).

The unpacked values are in the raising frame (dist_an is the only tensor with a graph), so the plain
call can point at it.
"""

import pytest
import torch
from torch import nn

from _helpers import HOW, expect, explained, note


def weight_loss(inputs, targets):
    sim = inputs @ inputs.t()
    pos = sim[targets.unsqueeze(0) == targets.unsqueeze(1)]
    neg = sim[targets.unsqueeze(0) != targets.unsqueeze(1)]
    loss = neg.clamp(min=0).mean() - pos.mean()
    prec = float((pos.mean() > neg.mean()).item())
    return pos.mean().item(), neg.mean().item(), prec, loss


def loss_is_float():
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    inputs = model(torch.randn(4, 3))
    targets = torch.tensor([0, 0, 1, 1])
    loss, inter_, dist_ap, dist_an = weight_loss(inputs, targets)
    loss.backward()


@pytest.mark.parametrize("how", HOW)
def test_says_loss_is_a_python_float(how):
    """explain_error says loss is a Python float, not a tensor, on the loss.backward() line."""
    expect(explained(loss_is_float, how), reason="float_has_no_backward", says=("loss", "float"),
           line=("loss.backward()", "loss, inter_, dist_ap, dist_an = weight_loss(inputs, targets)"))


def test_points_at_the_tensor_among_the_unpacked_values():
    """The answer points at dist_an, the one unpacked value that is a tensor with a graph."""
    expect(explained(loss_is_float), reason="float_has_no_backward", says=("dist_an",))


def test_note_is_attached_to_the_attribute_error():
    """trace(explain_errors=True) attaches a note to the AttributeError."""
    expect(note(loss_is_float), says=("float",))
