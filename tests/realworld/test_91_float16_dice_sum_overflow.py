"""A dice loss summed over a float16 mask overflows: 262,144 finite elements sum to more than 65504.

Address: https://github.com/qubvel-org/segmentation_models.pytorch/issues/463
Title: Mixed Precision (float16) lead to nan loss (soft_dice_score is inf)

What went wrong: with mixed precision the model's output is float16; the dice loss cast its target to
the output's dtype and summed output * target over a 512 x 512 image. Each element is finite, but the
sum, 262,144 times a value near 1, is more than float16's largest number: inf, and inf / inf makes the
dice NaN.

Accepted answer: the standard one for fp16 reductions: accumulate the sums in float32 (autocast runs
torch.sum in float32 by itself; this loss ran outside it, on float16 tensors).

The model runs under CPU autocast with float16 here; the sum is outside autocast, as in the issue.
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


def float16_dice_sum_overflow():
    torch.manual_seed(0)
    conv = nn.Conv2d(3, 1, 1)
    images = torch.rand(1, 3, 512, 512)
    masks = torch.ones(1, 1, 512, 512)
    with gl.trace() as tr:
        with torch.autocast("cpu", dtype=torch.float16):
            output = conv(images).sigmoid()
        target = masks.type_as(output)
        intersection = torch.sum(output * target)
        cardinality = torch.sum(output + target)
        dice = (2.0 * intersection + 1.0) / (cardinality + 1.0)
        loss = 1 - dice
        loss.backward()
    return conv, loss, tr


def test_nan_loss_names_the_sum_that_overflowed():
    """explain(loss, tr) is nonfinite_forward + overflow at sum, on the intersection line, beyond float16's 65504."""
    conv, loss, tr = float16_dice_sum_overflow()
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("overflow",), tensor="loss", op="sum",
           line="intersection = torch.sum(output * target)",
           says=("inf at intersection", "262144 elements", "float16", "65504"), never=("division", "0 / 0", "log"))


def test_fix_accumulates_in_float32():
    """The fix sums in float32 (dtype=torch.float32 or .float()); for the weight's gradient too."""
    conv, loss, tr = float16_dice_sum_overflow()
    expect(gl.explain(conv.weight, tr), reason="nonfinite_forward", reasons=("overflow",),
           fix=("dtype=torch.float32",), never_fix=("learning rate", "eps"))
