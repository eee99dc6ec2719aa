"""An audio front-end clamps its Gabor filter parameters inside torch.no_grad(); the training loop's target is torch.ones_like(b): the filters never learn.

Address: https://github.com/denfed/leaf-audio-pytorch/issues/3
Title: Backpropagation doesn't change weights of the convolutional layer

What went wrong: the Gabor constraint clipped the centre frequencies and bandwidths inside
`with torch.no_grad()`, so the filters built from the clipped values had no graph back to the
learnable kernel; the other learnable parts (a pooling width, an offset) still trained. The reporter's
loop compared the output b with `b_gt = torch.ones_like(b)`.

Accepted answer: (the maintainer's fix) remove the no_grad block around the clamps.

Without a trace graphlens cannot see the no_grad block inside the module; it must not blame the
constant target instead: the loss uses b itself, whose graph reaches the other parameters.
"""

import torch
import torch.nn as nn

import graphlens as gl
from _helpers import expect


class Front(nn.Module):
    def __init__(self):
        super().__init__()
        self.kernel = nn.Parameter(torch.rand(4, 2) + 0.5)
        self.offset = nn.Parameter(torch.zeros(4))

    def forward(self, x):
        with torch.no_grad():
            mu = torch.clamp(self.kernel[:, 0], 0.0, 3.0)
            sigma = torch.clamp(self.kernel[:, 1], 0.1, 2.0)
        filters = torch.exp(-(torch.arange(5.0)[None, :] - mu[:, None]) ** 2 / sigma[:, None])
        return x @ filters.t() + self.offset


def test_plain_answer_never_blames_the_constant_target():
    """Without a trace: not_reachable, and no lead on ones_like (the loss uses b itself, which reaches the offset)."""
    torch.manual_seed(0)
    model = Front()
    x = torch.randn(3, 5)
    b = model(x)
    b_gt = torch.ones_like(b)
    loss = torch.norm((b - b_gt).view(1, -1), p=2, dim=-1)
    loss.backward()
    assert model.kernel.grad is None and model.offset.grad is not None
    expect(gl.explain(model.kernel, loss), reason="not_reachable", not_reasons=("cut_by_nondifferentiable_op",),
           never=("ones_like",), never_fix=("ones_like",))


def test_traced_answer_names_the_clamp_inside_no_grad():
    """With a trace: cut_by_no_grad at the clamp inside the module's no_grad block."""
    torch.manual_seed(0)
    model = Front()
    x = torch.randn(3, 5)
    with gl.trace() as tr:
        b = model(x)
        b_gt = torch.ones_like(b)
        loss = torch.norm((b - b_gt).view(1, -1), p=2, dim=-1)
        loss.backward()
    expect(gl.explain(model.kernel, tr), reason="not_reachable", reasons=("cut_by_no_grad",), op="clamp",
           fix=("no_grad",), never=("ones_like",))
