"""A RankGauss input layer, sqrt(2) * erfinv(2u - 1) with u = (rank + 1) / n: the largest value of each column gets u = 1 and erfinv(1) = inf.

Address: https://runebook.dev/en/docs/pytorch/special/torch.special.erfinv
Title: Mastering PyTorch's torch.special.erfinv(): A Guide to Avoiding Errors

What went wrong: (the guide's most common problem, in a Gaussian-copula layer for tabular features)
erfinv maps (-1, 1) onto the real line and returns ±inf at ±1 (NaN beyond). Ranks turned into
uniforms with u = (rank + 1) / n reach exactly 1 for each column's largest value, 2u - 1 = 1, and the
normal score is inf: the model's output and the loss are NaN.

Accepted answer: the guide's: clamp the input of erfinv slightly inside its domain,
(-1 + eps, 1 - eps) with eps around 1e-6; for ranks, u = (rank + 0.5) / n stays inside (0, 1).

erfinv's inf is exact (a pole), not an overflow of a large finite number: the answer says so.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

import graphlens as gl
from _helpers import expect


class RankGauss(nn.Module):
    def forward(self, x):
        n = x.shape[0]
        ranks = x.argsort(dim=0).argsort(dim=0).to(x.dtype)
        u = (ranks + 1) / n
        z = math.sqrt(2) * torch.erfinv(2 * u - 1)
        return z


class TabularNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = RankGauss()
        self.mlp = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 1))

    def forward(self, x):
        return self.mlp(self.norm(x))


def erfinv_rank_gauss():
    torch.manual_seed(0)
    model = TabularNet()
    x = torch.randn(6, 3) * 10
    y = torch.randn(6, 1)
    with gl.trace() as tr:
        loss = F.mse_loss(model(x), y)
        loss.backward()
    return model, loss, tr


def test_nan_loss_names_erfinv_at_one():
    """explain(loss, tr): erfinv on RankGauss's line took exactly 1, where it is infinite by definition (a pole, not an overflow)."""
    model, loss, tr = erfinv_rank_gauss()
    assert torch.isnan(loss)
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("pole",), not_reasons=("overflow",),
           tensor="loss", op="erfinv", line="z = math.sqrt(2) * torch.erfinv(2 * u - 1)",
           says=("result[1, 1] = 1", "infinite at 1", "not an overflow"),
           never=("larger than float32", "no rule for erfinv", "division by zero"))


def test_fix_keeps_the_input_away_from_plus_minus_one():
    """The fix keeps erfinv's input away from ±1 (a clamp), never the old "look for a log of 0 inside it"."""
    model, loss, tr = erfinv_rank_gauss()
    expect(gl.explain(loss, tr), fix=("away from ±1", "clamp"), never_fix=("a log of 0, a division by 0 inside it",))
