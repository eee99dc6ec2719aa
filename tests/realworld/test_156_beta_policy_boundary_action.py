"""Behaviour cloning of a Beta policy from expert actions clipped to the bound: an action of exactly 1.0 has density 0 when b > 1, and Beta.log_prob's xlogy(b − 1, 1 − x) is -inf.

Address: https://github.com/rlworkgroup/garage/pull/2129
Title: Make TanhNormal.log_prob(1.0) != -inf

What went wrong: the pull request notes that an action can land exactly on the edge of the action
space (sampled there after very many steps, or an expert's action clipped into it), and that its log
probability was then -inf. Here the policy is a Beta distribution over [0, 1] with both concentrations
above 1 (softplus + 1), and one recorded expert action is exactly 1.0: log_prob computes
xlogy(b − 1, 1 − 1) = (b − 1) · log(0) = -inf, and the negative log-likelihood is inf.

Accepted answer: krzentner's change (merged) keeps boundary actions finite for the TanhNormal by
inverting a slightly wider squashing function (by epsilon = 1e-6), so they are only very unlikely
(about −13.5 per dimension) instead of impossible. For a Beta policy the same idea is to keep the
value inside the support: clamp the actions to [eps, 1 − eps] before log_prob.

The -inf is made inside torch.distributions (xlogy), reached from the user's log_prob line: the answer
names xlogy on that line, the value on the boundary, and a clamp into the support.
"""

import contextlib

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import Beta

import graphlens as gl
from _helpers import expect


class BetaActor(nn.Module):
    def __init__(self, obs_dim=4):
        super().__init__()
        self.concentrations = nn.Linear(obs_dim, 2)

    def forward(self, obs):
        ab = F.softplus(self.concentrations(obs)) + 1.0  # both above 1: a unimodal Beta
        return Beta(ab[:, 0], ab[:, 1])


def beta_policy_boundary_action(traced=True):
    torch.manual_seed(0)
    actor = BetaActor()
    states = torch.randn(4, 4)
    actions = torch.tensor([0.3, 0.8, 1.0, 0.55])  # the expert's third action was clipped to the bound
    with (gl.trace() if traced else contextlib.nullcontext()) as tr:
        dist = actor(states)
        logp = dist.log_prob(actions)
        loss = -logp.mean()
        loss.backward()
    return actor, loss, tr


def _bits(t):
    return t.detach().reshape(-1).view(torch.uint8)


def test_inf_loss_names_xlogy_at_the_boundary_action():
    """explain(loss, tr): xlogy on the log_prob line took y = 0 with x = b − 1 > 0 (log_of_zero), a value on the boundary of the support; never an overflow."""
    actor, loss, tr = beta_policy_boundary_action()
    assert torch.isinf(loss)
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("log_of_zero",), not_reasons=("overflow",),
           tensor="loss", op="xlogy", line="logp = dist.log_prob(actions)",
           says=("xlogy's result[2, 1]", "stack's result[2, 1] = 0", "xlogy(b - 1, 1 - value)",
                 "on the boundary of the support"),
           never=("overflow",))


def test_fix_clamps_the_action_into_the_support():
    """The fix keeps the value inside the support: value.clamp(eps, 1 - eps) before log_prob."""
    actor, loss, tr = beta_policy_boundary_action()
    expect(gl.explain(loss, tr), fix=("value.clamp(eps, 1 - eps)", "before log_prob"))


def test_tracing_changes_no_number():
    """The loss and the actor's gradients of the traced run are bitwise those of the plain run (inf and NaN included)."""
    plain, plain_loss, _ = beta_policy_boundary_action(traced=False)
    traced, traced_loss, _ = beta_policy_boundary_action(traced=True)
    assert torch.equal(_bits(plain_loss), _bits(traced_loss))
    for p, q in zip(plain.parameters(), traced.parameters()):
        assert torch.equal(_bits(p.grad), _bits(q.grad))
