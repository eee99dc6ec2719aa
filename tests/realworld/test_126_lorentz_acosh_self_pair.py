"""Lorentz-model (hyperbolic) embeddings with a self-loop edge: acosh of a point's distance to itself is acosh(0.99999952) in float32, NaN.

Address: https://github.com/CUAI/Differentiable-Frechet-Mean/issues/2
Title: Using Lorentz model returns nan

What went wrong: the Lorentz model returned NaN most of the time in float32 and worked in float64.
The distance acosh(-<u, v>_L) needs an argument >= 1; for a point and itself it is exactly 1 in exact
arithmetic, but float32 rounding of the Lorentz inner product can land just below 1, and acosh of that
is NaN.

Accepted answer: none in the thread (the reporter found it was a precision problem and switched to
float64); the standard fix is to clamp the argument to at least 1 + eps before acosh, as hyperbolic
libraries do: at exactly 1 the forward is finite, but acosh's derivative, 1 / sqrt(x² - 1), is infinite.

The value is printed with its digits (0.99999952, a rounding error), never "the input 1 is outside the
domain", which contradicts the domain it names.
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


class LorentzEmbedding(nn.Module):
    def __init__(self, n, d):
        super().__init__()
        self.space = nn.Parameter(torch.randn(n, d) * 1.7)

    def points(self):
        time = torch.sqrt(1.0 + (self.space ** 2).sum(-1, keepdim=True))
        return torch.cat([time, self.space], dim=-1)

    def distance(self, u, v):
        inner = -u[:, 0] * v[:, 0] + (u[:, 1:] * v[:, 1:]).sum(-1)
        dist = torch.acosh(-inner)
        return dist


def lorentz_acosh_self_pair():
    torch.manual_seed(2)
    model = LorentzEmbedding(6, 3)
    edges = torch.tensor([[0, 1], [2, 3], [4, 4], [1, 5]])  # [4, 4]: a self-loop in the data
    with gl.trace() as tr:
        pts = model.points()
        d = model.distance(pts[edges[:, 0]], pts[edges[:, 1]])
        loss = (d ** 2).mean()
        loss.backward()
    return model, loss, tr


def test_nan_loss_names_acosh_just_below_one():
    """explain(loss, tr): acosh in distance took 0.99999952, a rounding error just outside its domain; never "the input 1"."""
    model, loss, tr = lorentz_acosh_self_pair()
    assert torch.isnan(loss)
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("invalid_domain",),
           not_reasons=("overflow", "division_by_zero"), tensor="loss", op="acosh", line="dist = torch.acosh(-inner)",
           says=("0.9999995", "rounding error", "outside acosh's domain"),
           never=("The input 1 is outside",))


def test_fix_clamps_to_one_plus_eps():
    """The fix clamps the argument to 1 + eps, not to 1, where acosh's derivative is infinite."""
    model, loss, tr = lorentz_acosh_self_pair()
    expect(gl.explain(loss, tr), fix=(("1 + eps", "min=1 + "),), never_fix=("x.clamp(1))",))
