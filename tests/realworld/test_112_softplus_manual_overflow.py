"""A positive scale written as softplus by hand, log(1 + exp(raw)): exp(100) overflows and the scale is inf.

Address: https://github.com/rushter/MLAlgorithms/pull/30
Title: Fix for Numeric Overflow of `softplus` implementation

What went wrong: softplus implemented as log(1 + exp(z)) returns inf for a large z, because exp(z)
overflows, although softplus(z) is simply about z there. Here a Gaussian head's scale is made that way
from a raw output near 100, and the negative log-likelihood is inf.

Accepted answer: yiransheng's pull request rewrote it as z + log(1 + 1 / exp(z)); the follow-up
(pull request 31) settled on logaddexp(0, z). In PyTorch the same stable function is F.softplus.

The overflow is exp's, inside a softplus written by hand: the fix is F.softplus, not "subtract the
maximum".
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


def softplus_manual_overflow():
    torch.manual_seed(0)
    head = nn.Linear(3, 2)
    with torch.no_grad():
        head.bias[1] = 100.0
    x = torch.randn(4, 3)
    y = torch.randn(4)
    with gl.trace() as tr:
        loc, raw = head(x).unbind(1)
        scale = torch.log(1 + torch.exp(raw))
        nll = torch.log(scale) + 0.5 * ((y - loc) / scale) ** 2
        loss = nll.mean()
        loss.backward()
    return head, loss, tr


def test_inf_loss_names_exp_in_the_hand_written_softplus():
    """explain(loss, tr): exp on the scale line overflowed float32 at raw[0] = 100.8, inside log(1 + exp(x))."""
    head, loss, tr = softplus_manual_overflow()
    assert torch.isinf(loss)
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("overflow",), tensor="loss", op="exp",
           line="scale = torch.log(1 + torch.exp(raw))", says=("raw[0] = 100.8", "88.7", "softplus"))


def test_fix_is_f_softplus():
    """The fix is F.softplus; never the generic 'subtract the maximum before exp'."""
    head, loss, tr = softplus_manual_overflow()
    expect(gl.explain(loss, tr), fix=("F.softplus",), never_fix=("Subtract the maximum",))
