"""A probit log-likelihood written log(ndtr(z)): for a linear predictor far below 0 the normal CDF underflows to exactly 0 in float32 and its log is -inf.

Address: https://github.com/stan-dev/stan/issues/1424
Title: normal_cdf_log underflow

What went wrong: Stan's normal_cdf_log(0 | 40, 1) returned -inf, because the log CDF was computed as
the log of the CDF, and the CDF 40 standard deviations below the mean underflows to 0. Here a probit
model's log-likelihood y · log(Φ(z)) + (1 − y) · log(1 − Φ(z)) with Φ = torch.special.ndtr meets an
observation whose z is about −40: Φ(z) is 0 in float32 and the loss is inf.

Accepted answer: two Stan developers first called log(0) reasonable that far in the tail; Bob Carpenter
(Stan) then showed that R's pnorm(0, 40, 1, log.p=TRUE) is about −804.6, nowhere near −inf, that
Stan's log CDFs naively take log(cdf(...)), and that they should use algorithms designed to work on the
log scale, as R does. In PyTorch that algorithm is torch.special.log_ndtr.

The -inf is made by the first log on the user's line (of two): the answer names ndtr's underflow to 0
and log_ndtr as the fix, not an overflow.
"""

import contextlib

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


def probit_log_ndtr_underflow(traced=True):
    torch.manual_seed(0)
    probit = nn.Linear(3, 1)
    with torch.no_grad():
        probit.weight.copy_(torch.tensor([[4.0, -2.0, 1.0]]))
    covariates = torch.tensor([[0.1, 0.2, 0.3], [-9.0, 2.0, -1.0], [1.0, 0.5, -0.2]])  # row 1: z is about -40
    outcome = torch.tensor([1.0, 1.0, 0.0])
    with (gl.trace() if traced else contextlib.nullcontext()) as tr:
        z = probit(covariates).squeeze(-1)
        ll = outcome * torch.log(torch.special.ndtr(z)) + (1 - outcome) * torch.log(1 - torch.special.ndtr(z))
        loss = -ll.mean()
        loss.backward()
    return probit, loss, tr


def _bits(t):
    return t.detach().reshape(-1).view(torch.uint8)


def test_inf_loss_names_the_log_of_an_underflowed_cdf():
    """explain(loss, tr): the first log on the ll line took ndtr(z) = 0 (log_of_zero, underflow); never an overflow."""
    probit, loss, tr = probit_log_ndtr_underflow()
    assert torch.isinf(loss)
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("log_of_zero", "underflow"),
           not_reasons=("overflow",), tensor="loss", op="log", line="torch.log(torch.special.ndtr(z))",
           says=("the 1st of 2 log calls", "special_ndtr's result[1] = 0", "underflowed to exactly 0", "the log of 0 is -inf"),
           never=("overflow",))


def test_fix_is_log_ndtr():
    """The fix is torch.special.log_ndtr(z), and log_ndtr(-z) for log(1 - ndtr(z))."""
    probit, loss, tr = probit_log_ndtr_underflow()
    expect(gl.explain(loss, tr), fix=("torch.special.log_ndtr(z)", "log_ndtr(-z)"))


def test_tracing_changes_no_number():
    """The loss and the probit layer's gradients of the traced run are bitwise those of the plain run (inf and NaN included)."""
    plain, plain_loss, _ = probit_log_ndtr_underflow(traced=False)
    traced, traced_loss, _ = probit_log_ndtr_underflow(traced=True)
    assert torch.equal(_bits(plain_loss), _bits(traced_loss))
    for p, q in zip(plain.parameters(), traced.parameters()):
        assert torch.equal(_bits(p.grad), _bits(q.grad))
