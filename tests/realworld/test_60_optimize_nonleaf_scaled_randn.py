"""torch.randn(..., requires_grad=True) * 0.01 is not a leaf, so an optimizer refuses it.

Address: https://github.com/pytorch/pytorch/issues/140469
Title: ValueError: can't optimize a non-leaf Tensor

What went wrong: a dataset-distillation script made its synthetic images with
image_syn = torch.randn(size=(...), dtype=torch.float, requires_grad=True, ...) * 0.01 and passed them to
torch.optim.SGD([image_syn, ], ...), which raised "ValueError: can't optimize a non-leaf Tensor".

Accepted answer (janeyx99): the product of the leaf and 0.01 is a new tensor computed from the leaf, no
longer a leaf; give the optimizer the leaf (create it, then scale), and it works.

The optimizer's frame holds the refused tensor, so graphlens names it and reads where it was made.
"""

import pytest
import torch

from _helpers import HOW, expect, explained


def optimize_nonleaf_scaled_randn():
    num_classes, ipc, channel, im_size = 2, 1, 3, (4, 4)
    image_syn = torch.randn(size=(num_classes * ipc, channel, im_size[0], im_size[1]), dtype=torch.float, requires_grad=True) * 0.01
    optimizer_img = torch.optim.SGD([image_syn, ], lr=0.1, momentum=0.5)
    return optimizer_img


@pytest.mark.parametrize("how", HOW)
def test_names_image_syn_and_the_multiplication(how):
    """explain_error is optimizer_nonleaf on image_syn, made by MulBackward0 at the line that scales it."""
    expect(explained(optimize_nonleaf_scaled_randn, how), reason="optimizer_nonleaf", tensor="image_syn",
           op=("MulBackward0", "mul"), line="image_syn = torch.randn(", says=("not a leaf",))


@pytest.mark.parametrize("how", HOW)
def test_fix_makes_the_scaled_tensor_the_leaf(how):
    """The fix makes the scaled tensor the leaf (requires_grad after the arithmetic), not retain_grad or detach of a wrong tensor."""
    expect(explained(optimize_nonleaf_scaled_randn, how), fix=(".requires_grad_()", "* 0.01"),
           never_fix=("retain_grad", "no_grad"))
