"""A T5-like feed-forward block under torch.autocast(float16): the second Linear, wo, overflows float16's 65504.

Address: https://github.com/huggingface/transformers/issues/5651
Title: T5 fp16 overflow in forward (T5DenseReluDense)

What went wrong: fine-tuning t5-base with mixed precision gave a NaN loss after a few dozen
iterations. The reporter traced it to h = self.wo(h) in T5DenseReluDense: one value of the result,
66246 in float32, is above float16's largest number (65504), so the float16 result is inf and the loss
NaN; in full precision everything was fine.

Accepted answer: (the reporter's diagnosis, and the standard fix that followed in transformers) T5
was pretrained in bfloat16, whose range float16 lacks: keep that layer in float32 (transformers later
keeps wo out of float16) or train in bfloat16; clamping the hidden states in float16 was the stopgap.

Under autocast the cast is autocast's doing: casting the layer's input with .float() alone does not
help (autocast runs the Linear in float16 again); the answer must say autocast and float16.
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


class DenseReluDense(nn.Module):
    def __init__(self, d, ff):
        super().__init__()
        self.wi = nn.Linear(d, ff, bias=False)
        self.wo = nn.Linear(ff, d, bias=False)

    def forward(self, x):
        h = torch.relu(self.wi(x))
        h = self.wo(h)
        return h


def autocast_second_linear_fp16():
    torch.manual_seed(0)
    ff = DenseReluDense(8, 16)
    with torch.no_grad():
        ff.wi.weight.fill_(2.0)
        ff.wo.weight.fill_(50.0)
    x = torch.full((2, 8), 6.0)
    with gl.trace() as tr:
        with torch.autocast("cpu", dtype=torch.float16):
            out = ff(x)
            loss = out.float().pow(2).mean()
        loss.backward()
    return ff, loss, tr


def test_inf_loss_names_the_second_linear_and_autocast():
    """explain(loss, tr): linear at h = self.wo(h) overflowed float16 (65504) because autocast ran it in float16."""
    ff, loss, tr = autocast_second_linear_fp16()
    assert torch.isinf(loss)
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("overflow",), tensor="loss", op="linear",
           line="h = self.wo(h)", says=("float16", "65504", "autocast ran linear in float16"),
           never=("larger than float32",))


def test_fix_leaves_autocast_or_uses_bfloat16():
    """The fix: the layer in float32 with autocast disabled, or bfloat16; never casting the inputs alone (.float() is undone)."""
    ff, loss, tr = autocast_second_linear_fp16()
    expect(gl.explain(loss, tr), fix=("enabled=False", "torch.bfloat16"), never=("on .float() inputs)",))
