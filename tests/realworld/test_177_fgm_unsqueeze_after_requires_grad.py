"""A fast-gradient attack that switches requires_grad on for the image, then rebinds x = x.unsqueeze(0): x.grad is None after backward.

Address: https://github.com/iArunava/scratchai/pull/39
Title: Couple of fixes

What went wrong: fgm() set x.requires_grad = True on a 3-D image and then, for a single image, rebound
x = x.unsqueeze(0); after loss.backward(), x.grad was None and the attack step failed on it.

Accepted answer (the author's fix in this pull request): unsqueeze first, then switch requires_grad
on: the unsqueezed x is a view computed from the leaf, a non-leaf whose gradient PyTorch does not
keep; the gradient goes to the original 3-D tensor.

The answer must say that x is a view of the leaf and where its gradient is, not call the view a copy.
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


def fgm(x, net):
    x.requires_grad = True
    if len(x.shape) == 3:
        x = x.unsqueeze(0)
    _, y = torch.max(net(x), dim=1)
    loss = nn.CrossEntropyLoss()(net(x), y)
    loss.backward()
    return x, loss, gl.explain(x, loss)


def attack():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 10))
    for p in net.parameters():
        p.requires_grad_(False)
    img = torch.rand(3, 8, 8)
    x, loss, e = fgm(img, net)
    return img, x, e


def test_says_x_is_a_view_of_the_leaf_that_holds_the_gradient():
    """explain(x, loss) inside fgm: x is a view (UnsqueezeBackward0) of the leaf, whose .grad holds the gradient; never a copy."""
    img, x, e = attack()
    assert x.grad is None and img.grad is not None
    expect(e, reason="nonleaf_not_retained", not_reasons=("is_a_copy",), tensor="x", op=("UnsqueezeBackward0", "unsqueeze"),
           says=("a view of", "the leaf that requires grad"), never=("a copy",))


def test_fix_makes_the_leaf_after_the_reshape():
    """The fix makes the leaf once it has its final shape (or reads the leaf's grad), never a randn example."""
    img, x, e = attack()
    expect(e, fix=("requires_grad_()", "final shape"), never_fix=("randn",))
