"""A T5-style block run in .half(): the feed-forward wi overflows float16, while T5's relative-position bucketing computes a harmless log(0) that torch.where discards.

Address: https://github.com/huggingface/transformers/issues/4586
Title: T5Model in fp16 still yield nan with more complex examples

What went wrong: after a first fix for T5 in float16 (pull request 4436), t5-base in .half() still gave
NaN encoder outputs on longer, more complex inputs. Later threads (transformers 5651, 9295) found the
overflow in T5's feed-forward (DenseReluDense): values above float16's largest number (65504). Here
wi's result is ±inf, ReLU keeps +inf, and wo sums +inf and -inf products into NaN; wi's weights are
scaled up as in a checkpoint trained in bfloat16.

Accepted answer: the stored copy of this thread holds only the report. Where it is linked
(google-research/text-to-text-transfer-transformer#539), craffel (a T5 author) answered that all their
experiments used bfloat16 activations, and the reporter concluded that this is why float16 fails: run T5
in bfloat16 or float32. transformers later clamped inf hidden states in float16 as a stopgap (pull
request 9487).

T5's bucketing takes log(distance / max_exact) for every query-key pair, -inf at distance 0 on
purpose; the integer cast and torch.where keep the exact bucket there, so that -inf reaches nothing.
graphlens must follow the NaN the loss came through (the linear wi overflowing float16), never blame
that log(0).
"""

import contextlib
import math

import torch
import torch.nn.functional as F
from torch import nn

import graphlens as gl
from _helpers import expect


def position_buckets(q_len, k_len, num_buckets=8, max_distance=16):
    """T5's bidirectional relative-position buckets: one per distance nearby, log-spaced beyond."""
    rel = torch.arange(k_len)[None, :] - torch.arange(q_len)[:, None]
    half = num_buckets // 2
    buckets = (rel > 0).long() * half
    dist = rel.abs()
    exact = half // 2
    # log(0) = -inf at distance 0, on purpose: the where below keeps the exact bucket there
    far = exact + (torch.log(dist.float() / exact) / math.log(max_distance / exact) * (half - exact)).long()
    far = far.clamp(max=half - 1)
    return buckets + torch.where(dist < exact, dist, far)


class T5Block(nn.Module):
    def __init__(self, d=16, heads=2, ff=32, buckets=8):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d, elementwise_affine=False)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.rel_bias = nn.Embedding(buckets, heads)
        self.ln2 = nn.LayerNorm(d, elementwise_affine=False)
        self.wi = nn.Linear(d, ff, bias=False)
        self.wo = nn.Linear(ff, d, bias=False)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, n, 3, self.heads, d // self.heads).unbind(2)
        bias = self.rel_bias(position_buckets(n, n)).permute(2, 0, 1)
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) + bias
        att = scores.softmax(-1)
        x = x + self.o(torch.einsum("bhqk,bkhd->bqhd", att, v).reshape(b, n, d))
        h = F.relu(self.wi(self.ln2(x)))
        x = x + self.wo(h)
        return x


class TinyT5(nn.Module):
    def __init__(self, vocab=40, d=16):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.block = T5Block(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, ids):
        return self.head(self.block(self.emb(ids)))


def t5_fp16_ff_overflow(traced=True):
    torch.manual_seed(0)
    model = TinyT5()
    with torch.no_grad():
        model.block.wi.weight.mul_(1e5)  # large feed-forward weights, as in a bfloat16-trained checkpoint
    model = model.half()
    src = torch.randint(0, 40, (2, 6))
    tgt = torch.randint(0, 40, (2, 6))
    with gl.trace() if traced else contextlib.nullcontext() as tr:
        logits = model(src)
        loss = F.cross_entropy(logits.float().view(-1, 40), tgt.view(-1))
        loss.backward()
    return model, loss, tr


def _bits(t):
    """The bytes of a tensor: equal bits, NaN included."""
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def test_nan_loss_names_the_float16_overflow_of_wi():
    """explain(loss, tr): linear at h = F.relu(self.wi(...)) overflowed float16 (65504); never the log(0) the bucketing's where discards."""
    model, loss, tr = t5_fp16_ff_overflow()
    assert torch.isnan(loss)
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("overflow",),
           not_reasons=("log_of_zero", "division_by_zero"), tensor="loss", op="linear",
           line="h = F.relu(self.wi(self.ln2(x)))", says=("larger than float16 can hold", "65504"),
           never=("The log of 0", "made by log", "torch.log(dist.float()", "division"))


def test_fix_computes_in_float32():
    """The fix runs the overflowing linear in float32 (the thread: bfloat16 or float32); never a clamp of log's input."""
    model, loss, tr = t5_fp16_ff_overflow()
    expect(gl.explain(loss, tr), fix=(("float32", "bfloat16"),),
           never_fix=("torch.log(x.clamp(min=eps))", "away from 0"))


def test_tracing_changed_no_number():
    """The traced run gives the plain run's loss and gradients bit for bit (NaN included)."""
    plain_model, plain_loss, _ = t5_fp16_ff_overflow(traced=False)
    model, loss, _ = t5_fp16_ff_overflow()
    assert torch.equal(_bits(loss), _bits(plain_loss))
    for (name, p), q in zip(model.named_parameters(), plain_model.parameters()):
        assert torch.equal(_bits(p), _bits(q)), name
        assert torch.equal(_bits(p.grad), _bits(q.grad)), name
