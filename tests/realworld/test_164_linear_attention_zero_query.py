"""Linear attention with a ReLU feature map and the renormaliser 1 / einsum(phi(q), sum phi(k)) written without eps: a padding token embeds to the zero vector, its query features are all 0, the normaliser is 1 / 0 = inf and the loss is NaN.

Address: https://github.com/lucidrains/performer-pytorch/issues/9
Title: Suggestion: Renormalization step for linear attention

What went wrong: the issue proposed renormalising linear attention by D^-1 = 1 / (q · sum_j k_j),
computed as 1.0 / torch.einsum(...), and its author added he had no idea how to compute it if the
attention matrix contains negative values. With a ReLU feature map the features are not negative but
can be all 0: here a padding token (padding_idx=0 embeds it to zeros, the projections have no bias)
gets phi(q) = 0, so its normaliser is 1 / 0 = inf and 0 · inf in the output makes the loss NaN.

Accepted answer: lucidrains turned the renormalisation on by default and said the kernel functions
passed in must be assumed to give positive matrices. The thread does not discuss a zero denominator;
the standard fixes are a strictly positive feature map (elu(x) + 1, as in "Transformers are RNNs"),
an eps in the denominator, or masking the padding.

The answer names the reciprocal on the normaliser's line and its denominator as einsum's result,
never as "(norm + eps)": norm is the quotient, not the denominator.
"""

import contextlib

import torch
import torch.nn.functional as F
from torch import nn

import graphlens as gl
from _helpers import expect


class ReluLinearAttention(nn.Module):
    """phi(q) (sum_j phi(k_j) v_j^T) / (phi(q) . sum_j phi(k_j)), with phi = ReLU."""

    def __init__(self, width):
        super().__init__()
        self.to_q = nn.Linear(width, width, bias=False)
        self.to_k = nn.Linear(width, width, bias=False)
        self.to_v = nn.Linear(width, width, bias=False)

    def forward(self, h):
        q = F.relu(self.to_q(h))
        k = F.relu(self.to_k(h))
        v = self.to_v(h)
        memory = torch.einsum("bsd,bse->bde", k, v)
        norm = 1.0 / torch.einsum("bsd,bd->bs", q, k.sum(dim=1))  # no eps: a zero feature vector gives 1 / 0
        return torch.einsum("bsd,bde,bs->bse", q, memory, norm)


class TinyLM(nn.Module):
    def __init__(self, vocab=16, width=6):
        super().__init__()
        self.embed = nn.Embedding(vocab, width, padding_idx=0)
        self.mix = ReluLinearAttention(width)
        self.head = nn.Linear(width, vocab)

    def forward(self, ids):
        h = self.embed(ids)
        return self.head(h + self.mix(h))


def linear_attention_zero_query(traced=True):
    torch.manual_seed(0)
    lm = TinyLM()
    ids = torch.tensor([[5, 2, 9, 0, 0], [7, 3, 11, 4, 1]])  # the first sentence is padded with id 0
    nxt = torch.tensor([[2, 9, 1, 0, 0], [3, 11, 4, 1, 6]])
    with (gl.trace() if traced else contextlib.nullcontext()) as tr:
        logits = lm(ids)
        loss = F.cross_entropy(logits.flatten(0, 1), nxt.flatten())
        loss.backward()
    return lm, loss, tr


def _bits(t):
    return t.detach().reshape(-1).view(torch.uint8)


def test_nan_loss_names_the_reciprocal_of_a_zero_normaliser():
    """explain(loss, tr): 1.0 / einsum(...) on the normaliser's line divided by 0 at the padded position norm[0, 3] (division_by_zero); never an overflow."""
    lm, loss, tr = linear_attention_zero_query()
    assert torch.isnan(loss)
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("division_by_zero",), not_reasons=("overflow",),
           tensor="loss", op="__rdiv__", line='norm = 1.0 / torch.einsum("bsd,bd->bs", q, k.sum(dim=1))',
           says=("inf at norm[0, 3]", "The denominator (einsum's result) is 0", "dividing by 0 gives an infinity"),
           never=("overflow",))


def test_denominator_is_einsums_result_never_the_quotient_plus_eps():
    """The denominator is named as einsum's result: never "(norm + eps)", which would add eps to the quotient."""
    lm, loss, tr = linear_attention_zero_query()
    expect(gl.explain(loss, tr), never=("(norm + eps)", "norm + eps", "(z + eps)"), never_fix=("norm + eps",))


def test_fix_keeps_the_denominator_away_from_zero():
    """The fix adds eps to the denominator or clamps it before dividing."""
    lm, loss, tr = linear_attention_zero_query()
    expect(gl.explain(loss, tr), fix=("Keep the denominator away from 0", "add eps to it", ".clamp(min=eps)"))


def test_without_a_trace_it_names_no_op():
    """Without a trace: the loss is NaN, every leaf is finite, and no op is guessed."""
    lm, loss, _ = linear_attention_zero_query(traced=False)
    e = gl.explain(loss)
    assert e.op is None and e.line is None
    expect(e, reason="nonfinite_forward", tensor="loss", says=("Without a trace",),
           never=("einsum", "__rdiv__", "overflow"))


def test_tracing_changes_no_number():
    """The loss and every gradient of the traced run are bitwise those of the plain run (NaN included)."""
    plain, plain_loss, _ = linear_attention_zero_query(traced=False)
    traced, traced_loss, _ = linear_attention_zero_query(traced=True)
    assert torch.equal(_bits(plain_loss), _bits(traced_loss))
    for p, q in zip(plain.parameters(), traced.parameters()):
        assert torch.equal(_bits(p.grad), _bits(q.grad))
