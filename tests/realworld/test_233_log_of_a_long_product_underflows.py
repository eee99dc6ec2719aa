"""A normalising flow's coupling layer takes the log-determinant as log(prod(jacobian)) over 64 dimensions: the product of positive slopes underflows to 0 and the log is -inf.

Address: https://github.com/ndeutschmann/zunis/issues/28
Title: log determinant calculation numerically unstable

What went wrong: a peaked piecewise-linear coupling gives most bins tiny slopes; 64 of them multiplied
underflow float32 to exactly 0, though none is 0, and log(0) = -inf.

Accepted answer: (the maintainer) sum the logs of the slopes instead of taking the log of their product.

The slopes live only inside forward (gone when graphlens is asked): it cannot tell a 0 factor from an
underflow, so it says both and gives the sum of logs for positive factors; a clamp before the log (what
it once proposed alone) gives a wrong value and no gradient.
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


class PiecewiseLinearCoupling(nn.Module):
    def __init__(self, d=64, k=8):
        super().__init__()
        self.d, self.k = d, k
        self.net = nn.Linear(2, d * k)

    def forward(self, x_cond, x):
        q = torch.softmax(self.net(x_cond).view(-1, self.d, self.k), dim=-1)
        bins = (x * self.k).long().clamp(max=self.k - 1)
        jac = q.gather(-1, bins.unsqueeze(-1)).squeeze(-1) * self.k
        return torch.log(torch.prod(jac, dim=-1))


def test_traced_says_zero_factor_or_underflow_and_sums_the_logs():
    """Traced: log_of_zero at the log of the product, both possible reasons said, the sum of logs as the fix."""
    torch.manual_seed(0)
    layer = PiecewiseLinearCoupling()
    with torch.no_grad():
        layer.net.weight.mul_(40.0)  # (a trained, peaked cell: most bins get a tiny mass)
    with gl.trace() as tr:
        loss = -layer(torch.rand(4, 2), torch.rand(4, 64)).mean()
        loss.backward()
    assert torch.isinf(loss)
    expect(gl.explain(loss, tr), reasons=("log_of_zero",), op="log", line="torch.log(torch.prod(jac, dim=-1))",
           says=("underflow", "64 factors"), fix=("torch.log(x).sum(dim)",))


def test_summing_the_logs_is_finite():
    """The maintainer's fix: log then sum."""
    torch.manual_seed(0)
    layer = PiecewiseLinearCoupling()
    with torch.no_grad():
        layer.net.weight.mul_(40.0)
    q = torch.softmax(layer.net(torch.rand(4, 2)).view(-1, 64, 8), dim=-1)
    assert torch.isfinite((q.max(-1).values * 8).log().sum(-1)).all()
