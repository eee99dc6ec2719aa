"""A hand-written softmax exp(x) / exp(x).sum() under bfloat16 autocast: exp of 576 is inf, inf / inf is NaN.

Address: https://github.com/pytorch/executorch/pull/18407
Title: [ET-VK][sdpa] Use numerically-stable softmax in attention weights

What went wrong: the attention weights were computed as exp(x) / sum(exp(x)); when the attention scores
were large (151 for Phi-4-mini), exp overflowed float32 (threshold about 88.7) to inf, and the
normalisation gave NaN.

Accepted answer: the numerically stable softmax: subtract the row's maximum before exp (as torch.softmax
does).

Reproduced under CPU autocast with bfloat16 (the scores come from bfloat16 matmuls): bfloat16 has
float32's range, so "compute it in float32" would not help, and graphlens must not suggest it.
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


def bfloat16_naive_softmax():
    q_proj = nn.Linear(4, 4, bias=False)
    k_proj = nn.Linear(4, 4, bias=False)
    with torch.no_grad():
        q_proj.weight.fill_(3.0)
        k_proj.weight.fill_(3.0)
    h = torch.ones(1, 3, 4)
    with gl.trace() as tr:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            q, k = q_proj(h), k_proj(h)
            scores = q @ k.transpose(-1, -2)
            weights = torch.exp(scores) / torch.exp(scores).sum(-1, keepdim=True)
            out = (weights @ h).sum()
        out.backward()
    return q_proj, out, tr


def test_names_exp_overflow_in_bfloat16():
    """explain(out, tr) is nonfinite_forward + overflow at exp, on the weights line, reading scores = 576 in bfloat16."""
    q_proj, out, tr = bfloat16_naive_softmax()
    expect(gl.explain(out, tr), reason="nonfinite_forward", reasons=("overflow",), tensor="out", op="exp",
           line="weights = torch.exp(scores) / torch.exp(scores).sum(-1, keepdim=True)",
           says=("scores[0, 0, 0] = 576", "bfloat16", "88.7"), never=("0 / 0", "log("))


def test_fix_subtracts_the_maximum_and_not_float32():
    """The fix subtracts the maximum (torch.softmax); it says float32 would overflow too, never to compute in float32."""
    q_proj, out, tr = bfloat16_naive_softmax()
    expect(gl.explain(q_proj.weight, tr), reason="nonfinite_forward", fix=("Subtract the maximum", "torch.softmax",
           "float32 would overflow too"), never_fix=("compute exp in float32", ".float() inputs"))
