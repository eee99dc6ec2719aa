"""Optical-flow warping with grid_sample, x normalised as 2 · x / (W − 1) − 1, on a feature map one pixel wide: W − 1 = 0 and the coordinate is 0 / 0 = NaN.

Address: https://github.com/ucbdrive/hd3/issues/11
Title: Question on the flow normalization

What went wrong: the issue asks about hd3's warping line, which normalises the sampling coordinates by
2 · x / max(W − 1, 1) − 1. The max(·, 1) is the guard this case leaves out: at the coarsest level of a
pyramid a narrow image can be 1 pixel wide, W − 1 is the Python number 0, the x coordinate is 0 / 0 =
NaN, and grid_sample returns NaN.

Accepted answer: yzcjtr (an author) explained that the line maps pixel coordinates from [0, W − 1] to
grid_sample's [−1, 1], and that coordinates outside it are read as border padding; the thread does not
discuss the max(W − 1, 1) guard itself, which is in the code it quotes. The fix here is that guard (or
another way to keep the denominator from being 0).

The denominator is a Python number, not a tensor: the answer names the div on warp's line and a
division by zero, not an overflow.
"""

import contextlib

import torch
import torch.nn.functional as F
from torch import nn

import graphlens as gl
from _helpers import expect


def warp(features, flow):
    batch, channels, height, width = features.shape
    rows, cols = torch.meshgrid(torch.arange(height).float(), torch.arange(width).float(), indexing="ij")
    px = cols[None] + flow[:, 0]
    py = rows[None] + flow[:, 1]
    gx = 2.0 * px / (width - 1) - 1.0
    gy = 2.0 * py / (height - 1) - 1.0
    return F.grid_sample(features, torch.stack((gx, gy), -1), align_corners=True)


class FlowRefiner(nn.Module):
    def __init__(self, channels=4):
        super().__init__()
        self.predict = nn.Conv2d(2 * channels, 2, 3, padding=1)
        nn.init.zeros_(self.predict.weight)
        nn.init.zeros_(self.predict.bias)

    def forward(self, first, second):
        flow = self.predict(torch.cat([first, second], 1))
        return warp(second, flow)


def flow_warp_width_one(traced=True):
    torch.manual_seed(0)
    refiner = FlowRefiner()
    first, second = torch.randn(2, 4, 5, 1), torch.randn(2, 4, 5, 1)  # the coarsest level is 1 pixel wide
    with (gl.trace() if traced else contextlib.nullcontext()) as tr:
        warped = refiner(first, second)
        loss = (warped - first).abs().mean()
        loss.backward()
    return refiner, loss, tr


def _bits(t):
    return t.detach().reshape(-1).view(torch.uint8)


def test_nan_loss_names_the_division_by_width_minus_one():
    """explain(loss, tr): div on warp's gx line divided 0 by the denominator 0 (division_by_zero); never an overflow."""
    refiner, loss, tr = flow_warp_width_one()
    assert torch.isnan(loss)
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("division_by_zero",), not_reasons=("overflow",),
           tensor="loss", op="div", line="gx = 2.0 * px / (width - 1) - 1.0",
           says=("The denominator is the number 0", "0 / 0 is NaN"), never=("overflow",))


def test_fix_keeps_the_number_at_least_one():
    """The divisor is a plain number: the fix keeps it at least 1 (max(n, 1)), not an eps that would make a huge factor."""
    refiner, loss, tr = flow_warp_width_one()
    expect(gl.explain(loss, tr), fix=("max(n, 1)", "huge factor"))


def test_tracing_changes_no_number():
    """The loss and the refiner's gradients of the traced run are bitwise those of the plain run (NaN included)."""
    plain, plain_loss, _ = flow_warp_width_one(traced=False)
    traced, traced_loss, _ = flow_warp_width_one(traced=True)
    assert torch.equal(_bits(plain_loss), _bits(traced_loss))
    for p, q in zip(plain.parameters(), traced.parameters()):
        assert torch.equal(_bits(p.grad), _bits(q.grad))
