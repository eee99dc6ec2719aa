"""A set-transformer attention over padded graphs whose mask hides whole padded query rows: the forward drops those rows, the backward still sends NaN into proj_v's and proj_o's gradients.

Address: https://github.com/dmlc/dgl/issues/2657
Title: The paddings in multihead attention model

What went wrong: node features of graphs of different sizes are padded, scores are an einsum, the mask
is 1 on the valid query and key block of each graph and -inf elsewhere, and the padded rows of the
output are dropped; "the model outputs NaN just after one training epoch".

Accepted answer (the reporter's analysis, fixed upstream): the padded query rows are masked entirely,
so those rows of the scores are all -inf and their softmax is NaN; the output drops them, but the
backward multiplies their zero gradient by the NaN, and the NaN lands in the weights that multiplied
them. Mask only the keys, or fill with a large finite negative number.

Two parameters get NaN gradients through two different matmuls: each answer must name the step that
sent the NaN toward that parameter (proj_v's: the einsum at out = einsum(alpha, values), whose
backward is a bmm under views), never the other's, and never an overflow said of inputs it did not read.
"""

import numpy as np
import torch as th
import torch.nn as nn

import graphlens as gl
from _helpers import expect


def pad_packed_tensor(x, lengths, value):
    out = x.new_full((len(lengths), max(lengths)) + x.shape[1:], value)
    start = 0
    for i, n in enumerate(lengths):
        out[i, :n] = x[start:start + n]
        start += n
    return out


def pack_padded_tensor(x, lengths):
    return th.cat([x[i, :n] for i, n in enumerate(lengths)], 0)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, d_head, d_ff):
        super(MultiHeadAttention, self).__init__()
        self.d_model, self.num_heads, self.d_head, self.d_ff = d_model, num_heads, d_head, d_ff
        self.proj_q = nn.Linear(d_model, num_heads * d_head, bias=False)
        self.proj_k = nn.Linear(d_model, num_heads * d_head, bias=False)
        self.proj_v = nn.Linear(d_model, num_heads * d_head, bias=False)
        self.proj_o = nn.Linear(num_heads * d_head, d_model, bias=False)
        self.ffn = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))
        self.norm_in = nn.LayerNorm(d_model)
        self.norm_inter = nn.LayerNorm(d_model)

    def forward(self, x, mem, lengths_x, lengths_mem):
        batch_size = len(lengths_x)
        max_len_x, max_len_mem = max(lengths_x), max(lengths_mem)
        queries = self.proj_q(x).view(-1, self.num_heads, self.d_head)
        keys = self.proj_k(mem).view(-1, self.num_heads, self.d_head)
        values = self.proj_v(mem).view(-1, self.num_heads, self.d_head)
        # padding to (B, max_len_x/mem, num_heads, d_head)
        queries = pad_packed_tensor(queries, lengths_x, 0)
        keys = pad_packed_tensor(keys, lengths_mem, 0)
        values = pad_packed_tensor(values, lengths_mem, 0)
        # attention score with shape (B, num_heads, max_len_x, max_len_mem)
        e = th.einsum('bxhd,byhd->bhxy', queries, keys)
        # normalize
        e = e / np.sqrt(self.d_head)
        # generate mask
        mask = th.zeros(batch_size, max_len_x, max_len_mem)
        for i in range(batch_size):
            mask[i, :lengths_x[i], :lengths_mem[i]].fill_(1)
        mask = mask.unsqueeze(1)
        e.masked_fill_(mask == 0, -float('inf'))
        # apply softmax
        alpha = th.softmax(e, dim=-1)
        # sum of value weighted by alpha
        out = th.einsum('bhxy,byhd->bxhd', alpha, values)
        # project to output
        out = self.proj_o(out.contiguous().view(batch_size, max_len_x, self.num_heads * self.d_head))
        # pack tensor
        out = pack_padded_tensor(out, lengths_x)
        # intra norm
        x = self.norm_in(x + out)
        # inter norm
        x = self.norm_inter(x + self.ffn(x))
        return x


def set_attention_step():
    th.manual_seed(0)
    mha = MultiHeadAttention(d_model=4, num_heads=2, d_head=2, d_ff=8)
    lengths = [3, 1]
    feat, target = th.randn(sum(lengths), 4), th.randn(sum(lengths), 4)
    with gl.trace() as tr:
        out = mha(feat, feat, lengths, lengths)
        loss = ((out - target) ** 2).mean()
        loss.backward()
    return mha, loss, tr


def test_proj_v_goes_back_to_the_einsum_over_alpha():
    """explain(mha.proj_v.weight, tr): the einsum at out = einsum(alpha, values) met alpha's NaN rows (softmax of all -inf), never proj_o's line, never an overflow."""
    mha, loss, tr = set_attention_step()
    assert th.isfinite(loss) and th.isnan(mha.proj_v.weight.grad).any()
    expect(gl.explain(mha.proj_v.weight, tr), reason="nonfinite_backward", reasons=("masked_softmax",), op="softmax",
           says=("einsum", "alpha", "every element is -inf"), never=("overflowed", "self.proj_o("))


def test_proj_o_goes_back_to_the_same_softmax():
    """explain(mha.proj_o.weight, tr): the same all -inf rows of the softmax, through proj_o's matmul."""
    mha, loss, tr = set_attention_step()
    expect(gl.explain(mha.proj_o.weight, tr), reasons=("masked_softmax",), op="softmax", never=("overflowed",))
