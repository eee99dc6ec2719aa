"""A Gumbel-softmax temperature annealed linearly to 0: at tau = 0, F.gumbel_softmax divides by zero and the step writes NaN into the encoder.

Address: https://github.com/pytorch/pytorch/issues/184031
Title: torch.nn.functional.gumbel_softmax returns NaN when tau=0 (division by zero)

What went wrong: gumbel_softmax computes softmax((logits + g) / tau); with tau = 0 the scores are
±inf and the softmax of them is inf − inf = NaN, silently, although its docstring called tau
"non-negative". Here a discrete VAE anneals tau from 1 to 0: the third step's loss is NaN, its backward
sends NaN everywhere, and SGD writes it into the weights.

Accepted answer: no maintainer reply; two contributors' pull requests propose that gumbel_softmax
raise a ValueError for tau <= 0 and that the docstring call tau "positive" (a temperature of 0 has no
sample, only its argmax limit). In the training loop: keep the annealed temperature above a floor
(tau = max(tau, 0.1)).

The NaN in the weights was written by opt.step() from a backward pass that started at a NaN loss: the
answer names the forward op (gumbel_softmax, in its 3rd run), not the derivative of mse_loss.
"""

import torch
import torch.nn.functional as F
from torch import nn

import graphlens as gl
from _helpers import expect


class DiscreteVAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(6, 4)
        self.dec = nn.Linear(4, 6)

    def forward(self, x, tau):
        logits = self.enc(x)
        z = F.gumbel_softmax(logits, tau=tau, hard=False)
        return self.dec(z)


def gumbel_tau_annealed_zero():
    torch.manual_seed(0)
    model = DiscreteVAE()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(5, 6)
    with gl.trace() as tr:
        for step in range(4):
            tau = max(0.0, 1.0 - 0.5 * step)  # 1.0, 0.5, 0.0, 0.0
            opt.zero_grad()
            loss = F.mse_loss(model(x, tau), x)
            loss.backward()
            opt.step()
    return model, loss, tr


def test_nan_loss_names_gumbel_softmax_at_tau_zero():
    """explain(loss, tr): the step's NaN came from a backward that started at a NaN loss, made by gumbel_softmax with tau = 0 (3rd of 4 runs)."""
    model, loss, tr = gumbel_tau_annealed_zero()
    assert torch.isnan(loss) and torch.isnan(model.enc.weight).any()
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("nonfinite_parameter", "division_by_zero"),
           not_reasons=("infinite_derivative",), tensor="loss", op="gumbel_softmax",
           line="z = F.gumbel_softmax(logits, tau=tau, hard=False)",
           says=("model.enc.weight", "already NaN", "3rd of 4", "tau = 0"),
           never=("derivative of mse_loss", "MseLossBackward0"))


def test_fix_keeps_tau_above_a_floor():
    """The fix keeps the temperature above a floor (max(tau, ...)), never keeping mse_loss's input in range."""
    model, loss, tr = gumbel_tau_annealed_zero()
    expect(gl.explain(loss, tr), fix=("max(tau,", "annealing"), never_fix=("input of mse_loss",))
