"""A VGAE's log-std drifts to about 60: exp(logstd) is 1e26, finite, and the decoder's products of such latents overflow to inf; the loss is NaN.

Address: https://github.com/pyg-team/pytorch_geometric/issues/500
Title: Reparametrization in VGAE model can cause NAN's

What went wrong: z = mu + randn * exp(logstd) with nothing bounding logstd; once the encoder drifts up,
z holds values around 1e26, the inner-product decoder multiplies two of them (1e52: past float32's
3.4e38) and the loss turns NaN.

Accepted answer: (the reporter and the maintainer; PyG then added MAX_LOGSTD = 10) clamp logstd before
exp: logstd = logstd.clamp(max=MAX_LOGSTD).

The first non-finite value is the decoder's product (that is where it overflowed); the answer must
also say where its huge inputs came from, exp of logstd, and put the clamp there (it once said only
"normalise the inputs", which leaves the loss NaN).
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin, self.lin_mu, self.lin_logstd = nn.Linear(5, 8), nn.Linear(8, 4), nn.Linear(8, 4)

    def forward(self, x, adj):
        h = torch.relu(adj @ self.lin(x))
        return adj @ self.lin_mu(h), adj @ self.lin_logstd(h)


class VGAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = Encoder()

    def encode(self, x, adj):
        self.mu, self.logstd = self.encoder(x, adj)
        return self.mu + torch.randn_like(self.logstd) * torch.exp(self.logstd)

    def recon_loss(self, z, pos, neg):
        p = torch.sigmoid((z[pos[0]] * z[pos[1]]).sum(-1))
        n = torch.sigmoid((z[neg[0]] * z[neg[1]]).sum(-1))
        return -torch.log(p + 1e-15).mean() - torch.log(1 - n + 1e-15).mean()


def step(model, x, adj, pos, neg):
    z = model.encode(x, adj)
    loss = model.recon_loss(z, pos, neg)
    loss.backward()
    return loss


def setup():
    torch.manual_seed(0)
    model = VGAE()
    with torch.no_grad():
        model.encoder.lin_logstd.bias.fill_(60.0)  # (the log-std after some unstable steps)
    a = (torch.rand(6, 6) > 0.5).float() + torch.eye(6)
    adj = a / a.sum(1, keepdim=True)
    return model, torch.rand(6, 5), adj, torch.tensor([[0, 1, 2], [1, 2, 3]]), torch.tensor([[0, 1, 5], [4, 5, 2]])


def test_traced_names_the_overflowing_product_and_the_exp_behind_it():
    """Traced: overflow at the decoder's mul, whose inputs exp made from logstd ≈ 60; the fix clamps exp's input."""
    model, x, adj, pos, neg = setup()
    with gl.trace() as tr:
        loss = step(model, x, adj, pos, neg)
    assert not torch.isfinite(loss)
    e = gl.explain(loss, tr)
    expect(e, reasons=("overflow",), op="mul", says=("exp", "torch.exp(self.logstd)"), fix=("clamp",),
           never_fix=("normalise the inputs",))


def test_the_clamp_ends_the_nan():
    """With logstd clamped at 10 before exp (PyG's MAX_LOGSTD) the loss is finite."""
    model, x, adj, pos, neg = setup()
    model.encode = lambda x, adj: (lambda mu, ls: mu + torch.randn_like(ls) * torch.exp(ls.clamp(max=10)))(*model.encoder(x, adj))
    assert torch.isfinite(step(model, x, adj, pos, neg))
