"""Hand-written attention under torch.autocast(float16): q @ k.transpose overflows float16, and the softmax is NaN.

Address: https://github.com/huggingface/transformers/issues/25938
Title: Mask2Former HungarianMatcherMaks2Former overflow on bad initial state when using 16-bit autocast

What went wrong: with a bad initial state and 16-bit autocast, a matrix product in Mask2Former's
matcher (pair_wise_sigmoid_cross_entropy_loss) overflowed float16 and the cost matrix held inf. Here
the same thing happens to attention scores: q and k come out of Linear layers in float16 under
autocast, and their product is larger than 65504.

Accepted answer: the fix merged for the issue (pull request 26086) normalises before the matrix
product (divides by the number of elements), so the product stays in range; for attention that is the
1 / sqrt(d) scaling; otherwise compute the product in float32 (autocast disabled) or in bfloat16.

Both inputs of the product were already float16, made by autocast one op before: the answer must say
so, and not suggest casting the inputs with .float() alone.
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


class SelfAttention(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)

    def forward(self, x):
        q, k, v = self.q(x), self.k(x), self.v(x)
        scores = q @ k.transpose(-2, -1)
        return torch.softmax(scores, dim=-1) @ v


def autocast_attention_scores_fp16():
    torch.manual_seed(0)
    attn = SelfAttention(16)
    with torch.no_grad():  # a bad initial state: large projections
        attn.q.weight.mul_(40.0)
        attn.k.weight.mul_(40.0)
    x = torch.randn(1, 4, 16) * 4
    with gl.trace() as tr:
        with torch.autocast("cpu", dtype=torch.float16):
            out = attn(x)
        loss = out.float().mean()
        loss.backward()
    return attn, loss, tr


def test_nan_loss_names_the_scores_product_under_autocast():
    """explain(loss, tr): matmul on the scores line overflowed float16; its inputs were float16 already, made under autocast."""
    attn, loss, tr = autocast_attention_scores_fp16()
    assert torch.isnan(loss)
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("overflow",), tensor="loss", op="matmul",
           line="scores = q @ k.transpose(-2, -1)",
           says=("scores[0, 3, 0]", "65504", "autocast", "float16 already"),
           never=("larger than float32",))


def test_fix_scales_the_scores_or_leaves_float16():
    """The fix: scale q @ k.T by sqrt(head size), or float32 outside autocast / bfloat16; never .float() inputs alone."""
    attn, loss, tr = autocast_attention_scores_fp16()
    expect(gl.explain(loss, tr), fix=("sqrt(head size)", "enabled=False", "torch.bfloat16"),
           never=("on .float() inputs)",))
