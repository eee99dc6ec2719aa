"""Coordinates taken with torch.argmax have no graph, so the loss built from them cannot backward.

Address: https://github.com/LZGMatrix/BOP19_CDPN_2019ICCV/issues/4
Title: A question about training

What went wrong: the user turned per-bin coordinate logits into coordinates with torch.argmax(...)
stacked along a new axis, rescaled with .float() and arithmetic, and computed the loss from that.
loss.backward() raised "element 0 of tensors does not require grad and does not have a grad_fn";
using the tensors from before the argmax worked.

Accepted answer (maintainer): argmax is not differentiable; take the loss before the argmax.

That argmax made the cut is seen by a trace; without one it can only be read from the user's
code, as a lead.
"""

import pytest
import torch
from torch import nn

from _helpers import HOW, expect, explained


def argmax_coordinates():
    torch.manual_seed(0)
    head = nn.Conv2d(1, 3 * 8, 1)                 # 3 coordinates x 8 bins
    img = torch.randn(1, 1, 2, 2)
    out = head(img).view(3, 8, 2, 2)
    output_coor_x_, output_coor_y_, output_coor_z_ = out[0], out[1], out[2]
    output_coor_ = torch.stack([torch.argmax(output_coor_x_, axis=0),
                                torch.argmax(output_coor_y_, axis=0),
                                torch.argmax(output_coor_z_, axis=0)], axis=2)
    output_coor_ = 2.0 * output_coor_.float() / (8.0 - 1.0) - 1.0
    target = torch.zeros(2, 2, 3)
    loss = ((output_coor_ - target) ** 2).mean()
    loss.backward()


@pytest.mark.parametrize("how", HOW)
def test_says_nothing_false_about_the_cut(how):
    """explain_error says no_grad_fn on loss, blames no detach()/no_grad, and does not deny that the network requires grad."""
    expect(explained(argmax_coordinates, how), reason="no_grad_fn", tensor="loss", says=("integer",),
           not_reasons=("made_by_detach", "cut_by_detach", "created_in_no_grad", "cut_by_no_grad"),
           never=("None of the tensors it was computed from required grad",))


def test_traced_answer_names_the_argmax():
    """With a trace, the answer is no_grad_fn + cut_by_integer_op at argmax, on an argmax line."""
    expect(explained(argmax_coordinates, "traced"), reason="no_grad_fn", reasons=("cut_by_integer_op",), op="argmax",
           line="torch.argmax(output_coor_", says=("argmax",))


@pytest.mark.parametrize("how", HOW)
def test_fix_does_not_ask_for_requires_grad_again(how):
    """The fix does not tell the user to set requires_grad=True on parameters that have it."""
    expect(explained(argmax_coordinates, how), never_fix=("requires_grad=True",))
