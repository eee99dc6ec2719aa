"""A hand-written NT-Xent loss, -log(exp(pos / T) / sum(exp(sim / T))), at temperature 0.01: exp(1 / 0.01) overflows float32.

Address: https://github.com/Lightning-Universe/lightning-bolts/issues/320
Title: nt_xent_loss numerical instability

What went wrong: bolts' SimCLR loss took the exponential of the similarities and divided the
positive by the sum of the negatives; the reporter's loss became NaN. With L2-normalised embeddings
each self-similarity is 1, and at temperature 0.01 exp(100) is larger than float32 holds; masking the
diagonal by multiplication turns inf × 0 into NaN (the positive's own exp(~99) overflows too).

Accepted answer: the reporter's workaround, used by other implementations, is to compute the loss with
torch.nn.CrossEntropyLoss on the similarities divided by the temperature (log space);
ananyahjha93 (maintainer) held that normalised vectors keep exp bounded, which is true only for a
temperature near 1, and added an eps to the division.

The inf comes from the temperature (an input of 100 by construction), not from a diverged layer: the
answer names exp on the sim line and never blames a learning rate.
"""

import torch
import torch.nn.functional as F
from torch import nn

import graphlens as gl
from _helpers import expect


def nt_xent_loss(out_1, out_2, temperature):
    out = torch.cat([out_1, out_2], dim=0)
    n = out.shape[0]
    cov = out @ out.t()
    sim = torch.exp(cov / temperature)
    neg = (sim * (1 - torch.eye(n))).sum(dim=-1)
    pos = torch.exp((out_1 * out_2).sum(dim=-1) / temperature)
    pos = torch.cat([pos, pos], dim=0)
    return -torch.log(pos / neg).mean()


class ProjectionHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4))

    def forward(self, h):
        return F.normalize(self.proj(h), dim=1)


def ntxent_hand_exp_low_temperature():
    torch.manual_seed(0)
    head = ProjectionHead()
    h1 = torch.randn(4, 8)
    h2 = h1 + 0.1 * torch.randn(4, 8)  # two augmented views
    with gl.trace() as tr:
        loss = nt_xent_loss(head(h1), head(h2), temperature=0.01)
        loss.backward()
    return head, loss, tr


def test_nan_loss_names_exp_of_similarity_over_temperature():
    """explain(loss, tr): exp on the sim line took 100 (similarity / 0.01) and overflowed float32; never a diverged layer."""
    head, loss, tr = ntxent_hand_exp_low_temperature()
    assert torch.isnan(loss)
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("overflow",),
           not_reasons=("division_by_zero", "log_of_zero"), tensor="loss", op="exp",
           line="sim = torch.exp(cov / temperature)",
           says=("div's result[0, 0] = 100", "larger than float32", "88.7"),
           never=("has diverged", "learning rate"))


def test_fix_is_log_space():
    """The fix computes the loss in log space (F.cross_entropy or logsumexp on similarity / temperature), as the thread did."""
    head, loss, tr = ntxent_hand_exp_low_temperature()
    expect(gl.explain(loss, tr), fix=(("cross_entropy", "logsumexp", "log_softmax"),), never_fix=("torch.softmax(x, dim)",))
