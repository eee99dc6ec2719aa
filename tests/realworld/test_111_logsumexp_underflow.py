"""A soft minimum written as -log(sum(exp(-d))): with every distance large, exp underflows to 0 and the loss is inf.

Address: https://meijun.github.io/page2/
Title: Log Sum Exp Issue

What went wrong: (the post's problem, here on the other side of the range) log(sum(exp(x))) computed
directly leaves the float range: the post meets exp of a large number overflowing to inf; here every
exp(-d) of a distance d of several hundred underflows to exactly 0 in float32, the sum is 0 and its log
is -inf.

Accepted answer: the post's own: factor out the largest term before the exponential (its LogSumExp
with log1p); in PyTorch that is torch.logsumexp, which stays finite at both ends.

A clamp before the log would remove the inf but give a wrong value and no gradient: the fix is
logsumexp, not eps.
"""

import torch

import graphlens as gl
from _helpers import expect


def logsumexp_underflow():
    torch.manual_seed(0)
    protos = torch.randn(3, 2, requires_grad=True)
    pts = torch.randn(4, 2) * 12 + 30  # far from every prototype
    with gl.trace() as tr:
        d = ((pts[:, None, :] - protos[None]) ** 2).sum(-1)
        soft_min = -torch.log(torch.exp(-d).sum(-1))
        loss = soft_min.mean()
        loss.backward()
    return protos, loss, tr


def test_inf_loss_names_log_and_the_underflowed_exps():
    """explain(loss, tr): log on the soft_min line took a sum of 0 because every exp in it underflowed to 0."""
    protos, loss, tr = logsumexp_underflow()
    assert torch.isinf(loss)
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("log_of_zero", "underflow"), tensor="loss",
           op="log", line="soft_min = -torch.log(torch.exp(-d).sum(-1))",
           says=("sum's result[0] = 0", "underflowed", "log of 0 is -inf"), never=("overflow",))


def test_fix_is_logsumexp_not_a_clamp():
    """The fix is torch.logsumexp; never clamping the sum before the log (x.clamp(min=eps))."""
    protos, loss, tr = logsumexp_underflow()
    expect(gl.explain(loss, tr), fix=("torch.logsumexp",), never_fix=("x.clamp(min=eps)", "log(x + eps)"))
