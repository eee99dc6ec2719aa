"""A gradient magnitude written as (gx ** 2 + gy ** 2) ** 0.5 is NaN in backward where the image is flat.

Address: https://openillumi.com/en/en-fix-pytorch-cpu-nan-powbackward0
Title: Addressing Numerical Instability and NaN Errors in PyTorch (PowBackward0)

What went wrong: an edge loss computed the magnitude of an image's finite differences with a square root
(here the fractional power 0.5). Where the image is flat both differences are 0, the root's derivative
is infinite there, and backward fails under anomaly mode with "Function 'PowBackward0' returned nan
values" (or, without it, leaves NaN in the gradient).

Accepted answer: the article's: add a small eps to the root's argument (or clamp it to a minimum) so the
derivative stays finite.

The forward pass is finite; a trace's replay shows the power's backward sending inf first.
"""

import torch

import graphlens as gl
from _helpers import expect


def pow_half_gradient_magnitude():
    image = torch.zeros(1, 1, 4, 4)
    image[..., 2:, 2:] = 1.0
    image.requires_grad_(True)
    with gl.trace() as tr:
        grad_x = image[..., :, 1:] - image[..., :, :-1]
        grad_y = image[..., 1:, :] - image[..., :-1, :]
        grad_mag = (grad_x[..., 1:, :] ** 2 + grad_y[..., :, 1:] ** 2) ** 0.5
        loss = grad_mag.mean()
        loss.backward()
    return image, tr


def test_names_the_fractional_power_and_its_line():
    """explain(image, tr) is nonfinite_backward + infinite_derivative at pow (PowBackward0), on the grad_mag line."""
    image, tr = pow_half_gradient_magnitude()
    expect(gl.explain(image, tr), reason="nonfinite_backward", reasons=("infinite_derivative",), tensor="image",
           op=("pow", "PowBackward0"), line="grad_mag = (grad_x", says=("PowBackward0", "= 0", "sum of squares"))


def test_fix_adds_eps_inside_the_root():
    """The fix adds eps inside the root (the article's fix); it names no where-mask or overflow."""
    image, tr = pow_half_gradient_magnitude()
    expect(gl.explain(image, tr), fix=("+ eps) ** 0.5",), never=("torch.where", "overflow"), never_fix=("log_softmax",))
