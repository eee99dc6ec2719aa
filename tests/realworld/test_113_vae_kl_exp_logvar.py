"""A VAE's KL term with logvar.exp(): a diverged log-variance of about 150 overflows exp and the loss is inf.

Address: https://github.com/vanderschaarlab/synthcity/issues/331
Title: Numerical instability in VAE

What went wrong: the VAE gave NaN losses for some datasets and hyperparameters: the encoder's
log-variance is unbounded, and exponentiating a large one (in the reparameterisation and the KL
term) overflows.

Accepted answer: the reporter's proposal, after diffusers' VAE: clamp the log-variance to a
reasonable range ([-30, 20]) before exponentiating it.

The overflow is exp of a log-variance: the fix clamps logvar (or predicts it through softplus), not
"subtract the maximum".
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(6, 4)

    def forward(self, x):
        mu, logvar = self.body(x).chunk(2, dim=1)
        return mu, logvar


def vae_kl_exp_logvar():
    torch.manual_seed(0)
    enc = Encoder()
    with torch.no_grad():
        enc.body.bias[2:] = 150.0  # a diverged log-variance head
    x = torch.randn(3, 6)
    with gl.trace() as tr:
        mu, logvar = enc(x)
        kl = -0.5 * torch.sum(1 + logvar - mu ** 2 - logvar.exp(), dim=1)
        loss = kl.mean()
        loss.backward()
    return enc, loss, tr


def test_inf_loss_names_exp_of_logvar():
    """explain(loss, tr): exp on the kl line overflowed float32 at logvar[0, 0] = 149.65."""
    enc, loss, tr = vae_kl_exp_logvar()
    assert torch.isinf(loss)
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("overflow",), tensor="loss", op="exp",
           line="kl = -0.5 * torch.sum(1 + logvar - mu ** 2 - logvar.exp(), dim=1)",
           says=("logvar[0, 0] = 149.6", "88.7"))


def test_fix_clamps_the_log_variance():
    """The fix clamps the input of exp (a log-variance) or predicts it through softplus; never 'subtract the maximum'."""
    enc, loss, tr = vae_kl_exp_logvar()
    expect(gl.explain(loss, tr), fix=("clamp(max=", ("log-variance", "logvar")), never_fix=("Subtract the maximum",))
