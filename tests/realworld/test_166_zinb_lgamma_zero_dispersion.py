"""A count autoencoder's negative-binomial likelihood with an inverse dispersion from a ReLU head: the ReLU gives exactly 0, lgamma(count + 0) at a zero count is lgamma(0) = inf (a pole), and inf − inf makes the loss NaN.

Address: https://github.com/cellarium-ai/cellarium-ml/pull/171
Title: NegativeBinomial parametrized by `mu` and `theta`

What went wrong: a negative binomial written as in scVI's log_nb_positive, with eps inside the logs
but none in lgamma, is not defined at theta = 0: lgamma(theta) and lgamma(value + theta) are the pole
lgamma(0) = inf. Here a single-cell-style autoencoder predicts theta with a ReLU, which outputs
exactly 0 for some genes: for a zero count lgamma(count + theta) − lgamma(theta) is inf − inf = NaN.

Accepted answer: the pull request (merged, by ordabayevy) says special care is taken of the case
theta == 0: it computes lgamma(value + theta) − lgamma(theta) inside a torch.where with xlogy and notes
that theta == 0 with value == 0 has probability 1 and with value != 0 probability 0. A reviewer
(sjfleming) began discussing this limit; the stored copy of that comment is cut short. For a model
that predicts theta, the usual fix is to keep it > 0 (softplus or exp of a log-dispersion, plus eps).

The answer names lgamma on the likelihood's line, at the element where its input (counts + inv_disp)
is 0; the line holds three lgamma calls and it gives no wrong run count ("of 2 lgamma calls").
"""

import contextlib

import torch
import torch.nn.functional as F
from torch import nn

import graphlens as gl
from _helpers import expect


def nb_log_likelihood(counts, mean, inv_disp, eps=1e-8):
    """log NB(counts | mean, inverse dispersion), eps inside the logs only."""
    log_denom = torch.log(inv_disp + mean + eps)
    return (inv_disp * (torch.log(inv_disp + eps) - log_denom) + counts * (torch.log(mean + eps) - log_denom)
            + torch.lgamma(counts + inv_disp) - torch.lgamma(inv_disp) - torch.lgamma(counts + 1))


class CountAutoencoder(nn.Module):
    def __init__(self, genes=10, latent=3):
        super().__init__()
        self.encode = nn.Sequential(nn.Linear(genes, 12), nn.ReLU(), nn.Linear(12, latent))
        self.mean_out = nn.Linear(latent, genes)
        self.disp_out = nn.Linear(latent, genes)

    def forward(self, counts):
        z = self.encode(torch.log1p(counts))
        library = counts.sum(dim=-1, keepdim=True)
        mean = F.softmax(self.mean_out(z), dim=-1) * library
        inv_disp = F.relu(self.disp_out(z))  # must be > 0, but a ReLU gives exactly 0
        return mean, inv_disp


def zinb_lgamma_zero_dispersion(traced=True):
    torch.manual_seed(0)
    ae = CountAutoencoder()
    counts = torch.poisson(2.5 * torch.rand(6, 10))
    with (gl.trace() if traced else contextlib.nullcontext()) as tr:
        mean, inv_disp = ae(counts)
        loss = -nb_log_likelihood(counts, mean, inv_disp).sum(dim=-1).mean()
        loss.backward()
    return ae, loss, tr


def _bits(t):
    return t.detach().reshape(-1).view(torch.uint8)


def test_nan_loss_names_lgamma_at_its_pole():
    """explain(loss, tr): lgamma on the likelihood's line took 0 at [0, 2] (pole), not an overflow; no wrong run count of the line's lgamma calls."""
    ae, loss, tr = zinb_lgamma_zero_dispersion()
    assert torch.isnan(loss)
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("pole",), not_reasons=("overflow",),
           tensor="loss", op="lgamma", line="torch.lgamma(counts + inv_disp) - torch.lgamma(inv_disp)",
           says=("inf at lgamma's result[0, 2]", "add's result[0, 2] = 0", "lgamma is infinite at 0"),
           never=("of 2 lgamma calls", "overflowed"))


def test_fix_keeps_the_input_of_lgamma_away_from_zero():
    """The fix keeps lgamma's input away from 0 and the negative integers (a clamp, or find why it reaches 0)."""
    ae, loss, tr = zinb_lgamma_zero_dispersion()
    expect(gl.explain(loss, tr), fix=("Keep the input of lgamma away from 0", "clamp it first", "find out why it reaches"))


def test_without_a_trace_it_names_no_op():
    """Without a trace: the loss is NaN, every leaf is finite, and no op is guessed."""
    ae, loss, _ = zinb_lgamma_zero_dispersion(traced=False)
    e = gl.explain(loss)
    assert e.op is None and e.line is None
    expect(e, reason="nonfinite_forward", tensor="loss", says=("Without a trace",), never=("lgamma", "overflow"))


def test_tracing_changes_no_number():
    """The loss and every gradient of the traced run are bitwise those of the plain run (NaN included)."""
    plain, plain_loss, _ = zinb_lgamma_zero_dispersion(traced=False)
    traced, traced_loss, _ = zinb_lgamma_zero_dispersion(traced=True)
    assert torch.equal(_bits(plain_loss), _bits(traced_loss))
    for p, q in zip(plain.parameters(), traced.parameters()):
        assert torch.equal(_bits(p.grad), _bits(q.grad))
