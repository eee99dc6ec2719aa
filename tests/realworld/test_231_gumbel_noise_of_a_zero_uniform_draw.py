"""A seed sampler draws Gumbel noise -log(-log(u)) from torch.rand: a draw of exactly 0 gives -inf noise, a sigmoid of it is exactly 0, and the loss's log of it is -inf.

Address: https://github.com/HKUDS/SSLRec/issues/26
Title: Gumbel噪声的计算会出现-inf  (computing the Gumbel noise can give -inf)

What went wrong: torch.rand samples from [0, 1), so u can be exactly 0; log(0) = -inf makes the noise -inf,
sigmoid((score + noise) / tau) is then exactly 0, and -log(mask) is inf.

Accepted answer: (the maintainer) keep the uniform draw away from 0 (clamp it, or replace zeros with a
small number) before the logs.

The first non-finite value on the loss's own path is the last log (its input, the sigmoid's 0, is
finite); the answer must see that the sigmoid only hid an earlier -inf and name the noise line and the
0 in the draw (it once blamed a saturated sigmoid and proposed logsigmoid, which leaves the loss inf).
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


class SeedSampler(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.scorer = nn.Embedding(10, 4), nn.Linear(4, 1)

    def forward(self, uniform, tau=0.5):
        scores = self.scorer(self.emb.weight).squeeze(-1)
        noise = -torch.log(-torch.log(uniform))
        mask = torch.sigmoid((scores + noise) / tau)
        return -torch.log(mask).mean()


def draw():
    torch.manual_seed(0)
    uniform = torch.rand(10)
    uniform[3] = 0.0  # (a draw of exactly 0: torch.rand's range includes it)
    return uniform


def test_traced_follows_the_hidden_infinity_to_the_noise_line():
    """Traced: the log of the noise line, at the 0 of the draw, with a clamp of the draw as the fix; not logsigmoid."""
    model, uniform = SeedSampler(), draw()
    with gl.trace() as tr:
        loss = model(uniform)
        loss.backward()
    assert torch.isinf(loss)
    expect(gl.explain(loss, tr), reasons=("log_of_zero",), op="log", line="noise = -torch.log(-torch.log(uniform))",
           says=("sigmoid(-inf) = 0", "uniform[3] = 0"), fix=("uniform.clamp",), never_fix=("logsigmoid",))


def test_a_draw_kept_above_zero_gives_a_finite_loss():
    """The maintainer's fix: the draw clamped away from 0."""
    assert torch.isfinite(SeedSampler()(draw().clamp(min=1e-10)))
