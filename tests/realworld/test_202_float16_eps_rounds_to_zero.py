"""Box targets encoded in float16 add an eps of 1e-8 before log(w / wa): in float16 the eps rounds to 0, and a zero-width box gives -inf.

Address: https://github.com/rwightman/efficientdet-pytorch/issues/291
Title: [BUG] Float16 Training Stability Fix

What went wrong: the box coder adds EPS = 1e-8 to the box sizes to keep the division and the log
finite, then takes log(w / wa). Under mixed precision the boxes are float16, where 1e-8 is below the
smallest number it holds and rounds to 0: a degenerate ground-truth box (zero width) still gives
log(0) = -inf, and the box loss is infinite.

Accepted answer: (the issue's fix, adopted) an eps float16 can hold (1e-7).

The program already adds an eps: "add eps" alone describes the code as it is; the answer must say
that in float16 such an eps is 0.
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect

EPS = 1e-8


def encode(boxes, anchors, eps=EPS):
    ha, wa = anchors[:, 2] - anchors[:, 0], anchors[:, 3] - anchors[:, 1]
    h, w = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
    ha, wa, h, w = ha + eps, wa + eps, h + eps, w + eps
    tw = torch.log(w / wa)
    th = torch.log(h / ha)
    return torch.stack([th, tw]).t()


def box_step():
    torch.manual_seed(0)
    head = nn.Linear(8, 2)
    features = torch.randn(3, 8)
    anchors = torch.tensor([[0., 0., 10., 10.], [5., 5., 15., 25.], [20., 20., 40., 40.]]).half()
    boxes = torch.tensor([[1., 1., 9., 11.], [6., 12., 14., 12.], [22., 18., 41., 39.]]).half()  # (the second: zero width)
    with gl.trace() as tr:
        targets = encode(boxes, anchors)
        loss = (head(features) - targets.float()).abs().sum()
        loss.backward()
    return loss, tr


def test_names_the_log_of_zero_and_that_the_float16_eps_is_zero():
    """log_of_zero at the log line, and the fix says an eps of 1e-8 rounds to 0 in float16: use one it holds, or float32."""
    loss, tr = box_step()
    assert torch.isinf(loss)
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("log_of_zero",), op="log", line="torch.log(w / wa)",
           fix=("float16", "rounds to 0", ("1e-4", "x.float() + 1e-8")))
