"""A hand-written RMSNorm, rsqrt(mean(x²) + 1e-12), in a model made .half(): the eps rounds to 0 in float16 and a zero padding row gives rsqrt(0) = inf.

Address: https://github.com/deepspeedai/DeepSpeed/issues/581
Title: Possible bug with layernorm kernel

What went wrong: DeepSpeed's layer-norm kernel added epsilon = 1e-12 to the variance and then
converted it to float16, where 1e-12 is 0: for a row padded with zeros (or a constant) the variance
is 0, the inverse square root infinite, and the forward pass NaN. Here the same happens in a
hand-written RMSNorm of a model converted with .half(): the padding token's embedding row is all
zeros.

Accepted answer: RezaYazdaniAminabadi (DeepSpeed) agreed and proposed doing that part of the
computation in float32 (adding eps and dividing before converting back to float16, and keeping the
variance in float32); in user code, an eps float16 can hold (1e-5) or the norm in float32.

The eps is added on RMSNorm's own line, inside the model: the add that lost it is that line, not the
block's logits = model(tokens).
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-12):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        var = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(var + self.eps) * self.weight


class TinyLM(nn.Module):
    def __init__(self, vocab=10, dim=8):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim, padding_idx=0)
        self.norm = RMSNorm(dim)
        self.proj = nn.Linear(dim, vocab)

    def forward(self, tokens):
        return self.proj(self.norm(self.embed(tokens)))


def rmsnorm_half_eps_underflow():
    torch.manual_seed(0)
    model = TinyLM().half()
    tokens = torch.tensor([[3, 5, 7, 0, 0], [2, 4, 0, 0, 0]])  # 0 = padding
    targets = torch.tensor([[5, 7, 1, 0, 0], [4, 9, 0, 0, 0]])
    with gl.trace() as tr:
        logits = model(tokens)
        loss = nn.functional.cross_entropy(logits.float().reshape(-1, 10), targets.reshape(-1))
        loss.backward()
    return model, loss, tr


def test_nan_loss_names_rsqrt_and_the_lost_eps():
    """explain(loss, tr): rsqrt on RMSNorm's line divided by 0 because the eps added to the zero row rounds to 0 in float16."""
    model, loss, tr = rmsnorm_half_eps_underflow()
    assert torch.isnan(loss)
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("division_by_zero",), not_reasons=("overflow",),
           tensor="loss", op="rsqrt", line="torch.rsqrt(var + self.eps)",
           says=("add's result[0, 3, 0] = 0", "float16", "the eps is lost"),
           never=("divide by (b + eps)", "overflow"))


def test_fix_is_an_eps_float16_holds_or_float32():
    """The fix is an eps float16 can hold (1e-5) or the norm in float32, never "add eps" to a denominator that already has one."""
    model, loss, tr = rmsnorm_half_eps_underflow()
    expect(gl.explain(loss, tr), fix=("1e-5", "float32"), never_fix=("(b + eps)", "b.clamp(min=eps)"))


def test_reason_codes_name_the_eps_too_small():
    """The reasons hold eps_too_small, the code of an eps that rounds to 0 in the dtype."""
    model, loss, tr = rmsnorm_half_eps_underflow()
    expect(gl.explain(loss, tr), reasons=("division_by_zero", "eps_too_small"))


def test_the_add_is_placed_on_rmsnorms_line():
    """The add that lost the eps is placed on RMSNorm's line, never at the block's logits = model(tokens)."""
    model, loss, tr = rmsnorm_half_eps_underflow()
    expect(gl.explain(loss, tr), says=("adding a number",), never=("(logits = model(tokens))",))
