"""KLDivLoss with a target that requires grad and holds a probability of 0: the target's gradient is NaN from kl_div's xlogy at (0, 0).

Address: https://github.com/pytorch/pytorch/issues/89558
Title: KLDivLoss backward computation error

What went wrong: nn.KLDivLoss(reduction="batchmean")(p1=[0, -700], p2=[1, 0]) with p2 requiring grad
gives a finite loss and a NaN gradient for p2 (in XlogyBackward0).

Accepted answer (the maintainer's): kl_div computes target·log(target) with torch.xlogy, and
t·log t has no derivative at t = 0, so the gradient is asked for where the function has none;
clamp the target probability or add an eps to it.

The answer must name XlogyBackward0 inside kl_div at the element p2[1] = 0, say why (x / y is 0 / 0
there), and give the clamp/eps fix (not "keep the input away from where its derivative is not finite").
"""

import torch
import torch.nn as nn

import graphlens as gl
from _helpers import expect


def kl_step():
    p1 = torch.tensor([0., -700.], dtype=torch.float64).requires_grad_(True)
    p2 = torch.tensor([1., 0.], dtype=torch.float64).requires_grad_(True)
    kl_loss = nn.KLDivLoss(reduction="batchmean")
    with gl.trace() as tr:
        output = kl_loss(p1, p2)
        output.backward()
    return p1, p2, output, tr


def test_the_targets_gradient_is_xlogy_at_zero():
    """explain(p2, tr): XlogyBackward0 inside kl_div sent NaN to p2[1] = 0 (0 / 0); the fix clamps the target or adds eps."""
    p1, p2, output, tr = kl_step()
    assert torch.isfinite(output) and torch.isnan(p2.grad[1])
    expect(gl.explain(p2, tr), reason="nonfinite_backward", reasons=("infinite_derivative",), tensor="p2", op="kl_div",
           line="output = kl_loss(p1, p2)", says=("XlogyBackward0", "p2[1] = 0", "0 / 0"), fix=("clamp(min=eps)", "detach"),
           never_fix=("away from the values where its derivative is not finite",))
