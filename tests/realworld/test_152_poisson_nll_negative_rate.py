"""nn.PoissonNLLLoss(log_input=False) on a raw linear output: some predicted rates are negative, and input − target · log(input + eps) takes the log of a negative number.

Address: https://github.com/pytorch/pytorch/issues/184030
Title: torch.nn.PoissonNLLLoss returns NaN for negative input when log_input=False

What went wrong: with log_input=False the loss treats its input as the Poisson rate itself and computes
input − target · log(input + eps). Nothing checks that the rate is positive, so a negative entry (the
output of a Linear layer with no positive activation) gives the log of a negative number, NaN, and the
reduction spreads it to the whole loss. Here a count regressor's linear output is used as the rate.

Accepted answer: the issue is open (labelled "needs reproduction"); a contributor reproduced it and
proposed clamping or raising an error in the Python front end, and the linked pull requests describe
the input as a rate that must be non-negative and recommend softplus (or a clamp) on raw model
outputs, or log_input=True, where the loss exp(input) − target · input is finite for any input.

The log is inside poisson_nll_loss (one call at the torch level): the answer names that call on the
user's line and the negative rate, not an overflow or a division by zero.
"""

import contextlib

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


def poisson_nll_negative_rate(traced=True):
    torch.manual_seed(0)
    regressor = nn.Linear(5, 3)
    criterion = nn.PoissonNLLLoss(log_input=False)
    features = torch.randn(8, 5)
    counts = torch.poisson(torch.full((8, 3), 2.0))
    with (gl.trace() if traced else contextlib.nullcontext()) as tr:
        rate = regressor(features)
        loss = criterion(rate, counts)
        loss.backward()
    return regressor, loss, tr


def _bits(t):
    return t.detach().reshape(-1).view(torch.uint8)


def test_nan_loss_names_poisson_nll_loss_and_the_negative_rate():
    """explain(loss, tr): poisson_nll_loss on the loss line took the log of a negative rate (invalid_domain); never an overflow or a division by zero."""
    regressor, loss, tr = poisson_nll_negative_rate()
    assert torch.isnan(loss)
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("invalid_domain",),
           not_reasons=("overflow", "division_by_zero"), tensor="loss", op="poisson_nll_loss",
           line="loss = criterion(rate, counts)",
           says=("log_input=False", "input − target · log(input + eps)", "negative", "the log of a negative number is NaN"),
           never=("overflow", "division by zero", "by 0"))


def test_fix_keeps_the_rate_positive():
    """The fix keeps the rate positive: log-rates with log_input=True, or F.softplus / torch.exp of the output."""
    regressor, loss, tr = poisson_nll_negative_rate()
    expect(gl.explain(loss, tr), fix=("log_input=True", "F.softplus", "torch.exp"))


def test_tracing_changes_no_number():
    """The loss and the regressor's gradients of the traced run are bitwise those of the plain run (NaN included)."""
    plain, plain_loss, _ = poisson_nll_negative_rate(traced=False)
    traced, traced_loss, _ = poisson_nll_negative_rate(traced=True)
    assert torch.equal(_bits(plain_loss), _bits(traced_loss))
    for p, q in zip(plain.parameters(), traced.parameters()):
        assert torch.equal(_bits(p.grad), _bits(q.grad))
