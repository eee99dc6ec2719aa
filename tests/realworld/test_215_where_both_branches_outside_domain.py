"""An NFW lens profile picks between two closed forms with torch.where; each form is NaN on the other side of x = 1, and the mass parameter's gradient is NaN.

Address: https://github.com/Ciela-Institute/caustics/pull/83
Title: Fix nan gradients in NFW and TNFW

What went wrong: h(x) = where(x > 1, arccos(1/x) / sqrt(x**2 - 1), where(x < 1, arccosh(1/x) / sqrt(1 - x**2), 1))
evaluates both forms at every radius; the forward value is right, but backward sends each unchosen
branch a gradient of 0, and 0 times the NaN computed there (arccosh of 0.8, the sqrt of a negative) is NaN.

Accepted answer: (the pull request) compute each form only on its own elements (index with x > 1 and
x < 1 before applying it).

Clamping the one op graphlens names is not enough: the branch's other ops are NaN there too.
"""

import math

import torch

import graphlens as gl
from _helpers import expect


def h(x):
    return (x / 2).log() + torch.where(
        x > 1,
        (1 / x).arccos() * 1 / (x**2 - 1).sqrt(),
        torch.where(x < 1, (1 / x).arccosh() * 1 / (1 - x**2).sqrt(), torch.ones_like(x)),
    )


def test_names_the_unchosen_branch_and_every_branch_safe():
    """nonfinite_backward + where_unchosen_branch, arccosh's domain named, and the fix keeps every branch finite (or indexes)."""
    theta = torch.tensor([0.2, 0.5, 1.5, 3.0])
    log_m = torch.tensor(math.log(125 * 0.4**3), requires_grad=True)
    with gl.trace() as tr:
        scale = log_m.exp() ** (1 / 3) / 5.0
        pred = h(theta / scale) / theta
        loss = (pred ** 2).mean()
        loss.backward()
    assert torch.isfinite(loss) and torch.isnan(log_m.grad)
    expect(gl.explain(log_m, tr), reason="nonfinite_backward", reasons=("where_unchosen_branch",), op="arccosh",
           says=("domain", "did not choose"), fix=(("x[mask]", "double-where"), "every branch"), never=("no rule for arccosh",))
