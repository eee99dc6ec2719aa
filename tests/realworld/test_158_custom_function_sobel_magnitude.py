"""An edge loss through a custom autograd.Function for the Sobel gradient magnitude, whose hand-written backward divides by the magnitude: on a flat prediction it is 0, and the backward returns 0 / 0 = NaN.

Address: https://github.com/chaddy1004/sobel-operator-pytorch/issues/1
Title: Add epsilon

What went wrong: the repository's Sobel layer takes sqrt(gx² + gy²); the issue points out that without
a small epsilon under the square root the backward pass gives NaN (the derivative of the magnitude,
gx / |g|, is 0 / 0 where the image is flat). Here the magnitude is a custom torch.autograd.Function
with its own backward, grad · gx / mag. The restoration network's last conv is zero-initialised, so
its first prediction is constant, every Sobel response is 0, and the network's weights get NaN
gradients although the loss is finite (the forward, sqrt(0) = 0, is fine).

Accepted answer: the issue (open, no reply) gives the fix itself: add a small epsilon inside the square
root. For a hand-written backward that is mag = sqrt(gx² + gy² + eps), or a torch.where that returns 0
where the magnitude is 0.

The NaN is made by the program's own backward, code graphlens runs but does not see into: the answer
names GradMagnitude.backward and its node, not a line (it has none to give).
"""

import contextlib

import torch
import torch.nn.functional as F
from torch import nn

import graphlens as gl
from _helpers import expect


class GradMagnitude(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gx, gy):
        mag = torch.sqrt(gx * gx + gy * gy)
        ctx.save_for_backward(gx, gy, mag)
        return mag

    @staticmethod
    def backward(ctx, grad):
        gx, gy, mag = ctx.saved_tensors
        return grad * gx / mag, grad * gy / mag  # 0 / 0 where the image is flat


SOBEL = torch.tensor([[-1.0, 0.0, 1.0], [-2.0, 0.0, 2.0], [-1.0, 0.0, 1.0]]).view(1, 1, 3, 3)


def edge_strength(img):
    gx = F.conv2d(img, SOBEL, padding=1)
    gy = F.conv2d(img, SOBEL.transpose(2, 3), padding=1)
    return GradMagnitude.apply(gx, gy)


def custom_function_sobel_magnitude(traced=True):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 1, 3, padding=1))
    nn.init.zeros_(net[2].weight)  # a zero-initialised output layer: the first prediction is constant
    noisy = torch.rand(1, 1, 8, 8)
    clean = torch.zeros(1, 1, 8, 8)
    clean[..., 2:6, 2:6] = 1.0
    with (gl.trace() if traced else contextlib.nullcontext()) as tr:
        out = net(noisy)
        loss = F.l1_loss(out, clean) + F.l1_loss(edge_strength(out), edge_strength(clean))
        loss.backward()
    return net, loss, tr


def _bits(t):
    return t.detach().reshape(-1).view(torch.uint8)


def test_nan_gradient_names_the_custom_backward():
    """explain(net[0].weight, tr): GradMagnitude's own backward sent NaN from finite gradients, the loss being finite; never an overflow."""
    net, loss, tr = custom_function_sobel_magnitude()
    assert torch.isfinite(loss) and torch.isnan(net[0].weight.grad).any()
    e = gl.explain(net[0].weight, tr)
    expect(e, reason="nonfinite_backward", not_reasons=("overflow",), tensor="net.0.weight", op="GradMagnitude.apply",
           says=("though loss was finite", "GradMagnitudeBackward", "GradMagnitude.backward",
                 "an autograd.Function of the program's own", "received finite gradients and sent NaN"),
           never=("overflow",))


def test_says_a_zero_magnitude_in_the_backward_is_the_usual_cause():
    """The answer points at a division or root in that backward whose denominator is 0 there (a magnitude or a norm that is 0)."""
    net, loss, tr = custom_function_sobel_magnitude()
    expect(gl.explain(net[0].weight, tr), says=("denominator is 0", "a magnitude or a norm that is 0"))


def test_fix_adds_eps_or_a_where_in_gradmagnitude_backward():
    """The fix looks at the divisions in GradMagnitude.backward: eps in the denominator or torch.where where it is 0; gradcheck to check it."""
    net, loss, tr = custom_function_sobel_magnitude()
    expect(gl.explain(net[0].weight, tr),
           fix=("GradMagnitude.backward", "add eps to the denominator", "torch.where(denominator > 0", "gradcheck"))


def test_tracing_changes_no_number():
    """The loss and every gradient of the traced run are bitwise those of the plain run (NaN included)."""
    plain, plain_loss, _ = custom_function_sobel_magnitude(traced=False)
    traced, traced_loss, _ = custom_function_sobel_magnitude(traced=True)
    assert torch.equal(_bits(plain_loss), _bits(traced_loss))
    for p, q in zip(plain.parameters(), traced.parameters()):
        assert torch.equal(_bits(p.grad), _bits(q.grad))
