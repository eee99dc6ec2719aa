"""An edge-attention loss, per_pixel[edge_mask].mean(), on an image with no edge: the mean of an empty selection is NaN.

Address: https://github.com/Deci-AI/super-gradients/issues/912
Title: MaskAttentionLoss in DiceCEEdgeLoss doesn't handle images without any edges

What went wrong: training with DiceCEEdgeLoss gave NaN on images with a single semantic class: they
have no edges, the edge mask is all zero, MaskAttentionLoss selects no element, and the mean of an
empty tensor is NaN.

Accepted answer: the reporter's diagnosis; the maintainers' fix (pull request 982) makes the masked
loss handle an empty mask instead of averaging nothing (return 0 / skip it).

The mean is 0 / 0 of no elements, from finite inputs: the answer must say the selection was empty.
"""

import torch
import torch.nn.functional as F
from torch import nn

import graphlens as gl
from _helpers import expect


def masked_mean_empty():
    torch.manual_seed(0)
    seg = nn.Conv2d(3, 2, 1)
    img = torch.randn(1, 3, 4, 4)
    target = torch.zeros(1, 4, 4, dtype=torch.long)  # one class only: no edges
    edge_mask = torch.zeros(1, 4, 4, dtype=torch.bool)
    with gl.trace() as tr:
        logits = seg(img)
        per_pixel = F.cross_entropy(logits, target, reduction="none")
        edge_loss = per_pixel[edge_mask].mean()
        loss = per_pixel.mean() + edge_loss
        loss.backward()
    return seg, loss, tr


def test_nan_loss_names_the_mean_of_an_empty_selection():
    """explain(loss, tr): mean on the edge_loss line; the selection held no element, and the mean of none is 0 / 0."""
    seg, loss, tr = masked_mean_empty()
    assert torch.isnan(loss)
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("empty_reduction",), not_reasons=("overflow",),
           tensor="loss", op="mean", line="edge_loss = per_pixel[edge_mask].mean()",
           says=("empty", "mean of no elements", "0 / 0"), never=("made it from finite inputs",))


def test_fix_guards_the_empty_mask():
    """The fix checks that the selection is not empty, or divides by the count clamped to 1; never an isfinite check."""
    seg, loss, tr = masked_mean_empty()
    expect(gl.explain(loss, tr), fix=("numel() > 0", "clamp(min=1)"), never_fix=("(torch.isfinite)",))
