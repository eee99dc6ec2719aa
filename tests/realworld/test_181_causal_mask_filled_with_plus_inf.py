"""A causal attention mask filled with -float('-inf'), which is +inf: every query with a masked key turns NaN.

Address: https://github.com/lucidrains/memory-compressed-attention/issues/2
Title: The order of masking and softmax operation

What went wrong: after the masking was moved before the softmax (the issue's first point), the causal
attention read dots.masked_fill_(mask, -float('-inf')); attn = dots.softmax(dim=-1), and every causal
model built on it gave NaN outputs.

Accepted answer (the maintainer's, with a fix): -float('-inf') is +inf, not -inf. The masked positions
get +inf, and a softmax over a row holding +inf is NaN. Fill with float('-inf').

The mask's rows are not "every element -inf": an answer built on that picture, with its fix (leave a
position unmasked, use finfo.min), would miss the sign.
"""

import torch
import torch.nn.functional as F
from torch import nn

import graphlens as gl
from _helpers import expect


class CausalAttention(nn.Module):
    def __init__(self, dim, heads=2):
        super().__init__()
        self.heads = heads
        self.to_qkv = nn.Linear(dim, dim * 3, bias=False)
        self.to_out = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, d, h = *x.shape, self.heads
        q, k, v = self.to_qkv(x).chunk(3, dim=-1)
        q, k, v = map(lambda z: z.reshape(b, t, h, -1).transpose(1, 2), (q, k, v))
        dots = torch.einsum('bhid,bhjd->bhij', q, k) * d ** -0.5
        mask = torch.arange(t)[:, None] < torch.arange(t)[None, :]
        dots.masked_fill_(mask[None, None, ...], -float('-inf'))
        attn = dots.softmax(dim=-1)
        out = torch.einsum('bhij,bhjd->bhid', attn, v).transpose(1, 2).reshape(b, t, d)
        return self.to_out(out)


def causal_plus_inf():
    torch.manual_seed(0)
    attn_layer = CausalAttention(dim=8)
    x, target = torch.randn(1, 5, 8), torch.randn(1, 5, 8)
    with gl.trace() as tr:
        out = attn_layer(x)
        loss = F.mse_loss(out, target)
        loss.backward()
    return out, loss, tr


def test_says_the_mask_wrote_plus_inf():
    """explain(loss, tr): softmax at its line, the mask's +inf (the sign of -float('-inf')), never 'every element is -inf'."""
    out, loss, tr = causal_plus_inf()
    assert torch.isnan(loss)
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("masked_softmax",), op="softmax",
           line="attn = dots.softmax(dim=-1)", says=("+inf", "-float('-inf') is +inf"),
           never=("every element is -inf",), fix=("float('-inf')", "sign"), never_fix=("Leave at least one unmasked",))
