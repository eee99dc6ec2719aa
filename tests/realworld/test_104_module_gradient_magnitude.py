"""A gradient-magnitude module (piq's GMSD) takes sqrt(gx ** 2 + gy ** 2): on a flat image the input's gradient is NaN.

Address: https://github.com/photosynthesis-team/piq/issues/308
Title: GMSD produced NaN gradient

What went wrong: optimising an image y_hat (initialised at zeros, passed through a sigmoid, so every
pixel is 0.5) against GMSDLoss gave NaN gradients, which anomaly mode traced to the root of a sum of
squared image gradients in piq's gradient_map. On a flat patch both image gradients are 0, the root
is taken at 0, and its infinite derivative times the square's zero derivative is NaN.

Accepted answer: the thread has none (the issue is open); the standard fix is eps inside the root,
sqrt(gx ** 2 + gy ** 2 + eps).

The root is taken in the module's forward: the answer names that line, not the block's line that
called the module.
"""

import torch
import torch.nn.functional as F
from torch import nn

import graphlens as gl
from _helpers import expect


class GradientMagnitude(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("kx", torch.tensor([[[[-1.0, 0.0, 1.0]]]]))
        self.register_buffer("ky", torch.tensor([[[[-1.0], [0.0], [1.0]]]]))

    def forward(self, img):
        gx = F.conv2d(img, self.kx, padding=(0, 1))
        gy = F.conv2d(img, self.ky, padding=(1, 0))
        return torch.sqrt(gx ** 2 + gy ** 2)


def module_gradient_magnitude():
    torch.manual_seed(0)
    gm = GradientMagnitude()
    y = torch.rand(1, 1, 4, 4)
    y_hat = torch.zeros(1, 1, 4, 4, requires_grad=True)  # sigmoid(0) = 0.5 everywhere: a flat image
    with gl.trace() as tr:
        mag = gm(torch.sigmoid(y_hat))
        loss = (mag - gm(y)).abs().mean()
        loss.backward()
    return y_hat, loss, tr


def test_names_sqrt_in_the_modules_forward():
    """explain(y_hat, tr): SqrtBackward0 at the forward's return line, a zero sum of squares, PowBackward0 turning inf into NaN."""
    y_hat, loss, tr = module_gradient_magnitude()
    assert torch.isfinite(loss) and not torch.isfinite(y_hat.grad).all()
    expect(gl.explain(y_hat, tr), reason="nonfinite_backward", reasons=("infinite_derivative",), tensor="y_hat",
           op="sqrt", line="return torch.sqrt(gx ** 2 + gy ** 2)",
           says=("SqrtBackward0", "sum of squares", "= 0", "PowBackward0"),
           never=("(mag = gm(torch.sigmoid(y_hat)))",))


def test_fix_adds_eps_inside_the_root():
    """The fix adds eps inside the root of the sum of squares."""
    y_hat, loss, tr = module_gradient_magnitude()
    expect(gl.explain(y_hat, tr), fix=("eps", "a ** 2 + b ** 2"), never_fix=("learning rate",))
