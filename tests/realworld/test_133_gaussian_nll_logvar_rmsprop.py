"""A hand-written Gaussian NLL, 0.5 * (log(var) + r² / var) with var = exp(logvar), trained with RMSprop: exp underflows to 0 and log(var) = -inf.

Address: https://stats.stackexchange.com/questions/564809/using-a-neural-network-to-learn-linear-regression-variance
Title: Using a neural network to learn linear regression variance

What went wrong: the question asks how to learn a regression's variance along with its mean by
maximising the Gaussian likelihood (its first try, the variance of the outputs, did not learn). Here,
one step further, a head predicts a mean and a log-variance and the loss is written with
var = exp(logvar). The sample is fit exactly, so the loss keeps pushing the variance down; RMSprop's
normalised steps move logvar by about 20 a step until exp(logvar) is exactly 0 in float32 (below about
-103), and log(var) is -inf at the 5th step.

Accepted answer: the thread's answers are not in the stored copy (only the question); the standard
fix, as in Kendall and Gal's uncertainty losses, is to predict the log-variance and write the loss with
it, 0.5 * (logvar + r² · exp(-logvar)), so that log(exp(logvar)) is never formed (or to use
F.gaussian_nll_loss, which clamps the variance), and to keep logvar in a range.

log(var) took a 0, but the 0 is an exp that underflowed: the answer says so and points at logvar,
never only at clamping var.
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


class MeanVarHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.mu = nn.Linear(2, 1)
        self.logvar = nn.Linear(2, 1)

    def forward(self, x):
        return self.mu(x), self.logvar(x)


def gaussian_nll_logvar_rmsprop():
    torch.manual_seed(0)
    model = MeanVarHead()
    opt = torch.optim.RMSprop(model.logvar.parameters(), lr=1.5)
    x = torch.tensor([[1.0, 0.5]])
    with torch.no_grad():
        y = model.mu(x).clone()  # a (duplicated) point the mean fits exactly
    with gl.trace() as tr:
        for step in range(5):
            opt.zero_grad()
            mu, logvar = model(x)
            var = torch.exp(logvar)
            nll = 0.5 * (torch.log(var) + (y - mu) ** 2 / var)
            loss = nll.mean()
            loss.backward()
            opt.step()
    return model, loss, tr


def test_nan_loss_names_log_of_an_underflowed_exp():
    """explain(loss, tr): log on the nll line took var = 0 in the 5th run, and var = exp(logvar) underflowed to exactly 0."""
    model, loss, tr = gaussian_nll_logvar_rmsprop()
    assert torch.isnan(loss)
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("log_of_zero", "underflow"),
           not_reasons=("overflow",), tensor="loss", op="log",
           line="nll = 0.5 * (torch.log(var) + (y - mu) ** 2 / var)",
           says=("5th of 5", "var = exp(logvar) underflowed", "-103"), never=("overflow",))


def test_fix_works_with_logvar():
    """The fix writes the loss with logvar (log(exp(logvar)) is logvar) or F.gaussian_nll_loss, never only a clamp of var."""
    model, loss, tr = gaussian_nll_logvar_rmsprop()
    expect(gl.explain(loss, tr), fix=("log(exp(logvar)) is logvar", "torch.exp(-logvar)", "F.gaussian_nll_loss"),
           never_fix=("torch.log(var.clamp(min=eps))", "torch.log(var + eps)"))
