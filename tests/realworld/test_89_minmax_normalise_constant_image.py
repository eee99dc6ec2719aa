"""(img - min) / (max - min) of a constant image is 0 / 0: NaN goes into the network before any layer.

Address: https://github.com/avalonstrel/GatedConvolution_pytorch/issues/27
Title: gan and other losses are nan

What went wrong: training an inpainting network on a custom dataset gave NaN losses sooner or later,
whatever the learning rate. The reporter found that the input was normalised as (img - min) / (max - min)
- 1, and some images were constant: max = min, so 0 / 0 = NaN.

Accepted answer: the reporter's own: check the dataset (guard the normalisation where max == min).

The NaN is made in the forward pass, inside the traced block, by the division; the conv only carries it.
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


def minmax_normalise_constant_image():
    torch.manual_seed(0)
    img = torch.full((1, 2, 2), 0.5)  # a constant image
    conv = nn.Conv2d(1, 1, 1)
    with gl.trace() as tr:
        x = (img - img.min()) / (img.max() - img.min()) - 1
        out = conv(x.unsqueeze(0))
        loss = out.mean()
        loss.backward()
    return conv, loss, tr


def test_nan_loss_names_the_division():
    """explain(loss, tr) is nonfinite_forward + division_by_zero at div, on the normalisation line, 0 / 0."""
    conv, loss, tr = minmax_normalise_constant_image()
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("division_by_zero",), tensor="loss",
           op=("div", "DivBackward0"), line="(img - img.min()) / (img.max() - img.min())",
           says=("the numerator = 0", "the denominator = 0", "0 / 0 is NaN"), never=("learning rate", "overflow"))


def test_weight_gradient_names_the_same_division():
    """explain(conv.weight, tr) says the loss it comes from is NaN and names the same division, not the conv."""
    conv, loss, tr = minmax_normalise_constant_image()
    expect(gl.explain(conv.weight, tr), reason="nonfinite_forward", reasons=("division_by_zero",),
           op=("div", "DivBackward0"), tensor="conv.weight", never=("ConvolutionBackward0",), fix=("eps",))


def test_without_a_trace_it_names_no_op():
    """Without a trace: conv.weight.grad is NaN, every leaf is finite, the data was not read, and no op is named."""
    conv, loss, _ = minmax_normalise_constant_image()
    expect(gl.explain(conv.weight), reason="nonfinite_backward",
           says=("conv.weight.grad is NaN at conv.weight.grad[0, 0, 0, 0]", "did not read them", "cannot tell"),
           never=("div", "normalis"))
