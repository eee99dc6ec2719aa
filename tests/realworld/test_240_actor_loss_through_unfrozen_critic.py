"""An actor-critic learner runs one backward per optimizer (critic, actor, temperature); the actor loss goes through the critic without freezing it, so its gradient adds into the critic's .grad already collected for the critic's step.

Address: https://github.com/ray-project/ray/pull/65125
Title: [RLlib] Fix TQC critic divergence: stop actor-loss gradients from leaking into the critics

What went wrong: before each backward only that optimizer's parameters are zeroed, and .grad is collected
by reference; the actor's Q-values go through the online critic, so the actor backward adds into the
critic's gradients: the critic steps on Bellman gradient + actor-loss gradient.

Accepted answer: (the merged PR) compute the actor loss's Q-values with the critic's parameters frozen
(requires_grad off), so the actor's gradient flows through the actions only.

Traced, the critic weight's answer names the two losses that reach it (critic and actor) and says the
temperature loss does not: it once listed all three as reaching it.
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


def test_traced_names_only_the_losses_that_reach_the_critic():
    """Traced: the critic and the actor losses reach qf[2].weight, the temperature loss does not; a sum of two passes."""
    torch.manual_seed(0)
    pi = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 4))
    qf = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 5))
    log_alpha = torch.zeros(1, requires_grad=True)
    optimizers = {"qf": torch.optim.Adam(qf.parameters()), "policy": torch.optim.Adam(pi.parameters()),
                  "alpha": torch.optim.Adam([log_alpha])}
    obs, actions, target_q = torch.randn(6, 3), torch.randn(6, 2), torch.randn(6, 5)
    with gl.trace() as tr:
        mu, log_std = pi(obs).chunk(2, -1)
        a = torch.tanh(mu + log_std.clamp(-5, 2).exp() * torch.randn_like(mu))
        logp = (-0.5 * ((a - mu) / log_std.exp()) ** 2 - log_std).sum(-1)
        losses = {"qf": ((qf(torch.cat([obs, actions], -1)) - target_q) ** 2).mean(),
                  "policy": (log_alpha.exp().detach() * logp - qf(torch.cat([obs, a], -1)).mean(-1)).mean(),
                  "alpha": (-log_alpha * (logp.detach() - 2)).mean()}
        for key, optimizer in optimizers.items():
            optimizer.zero_grad()
            losses[key].backward(retain_graph=True)
    expect(gl.explain(qf[2].weight, tr), reason="grad_ok", says=("losses['qf'] and losses['policy'] reach it",
                                                                  "losses['alpha'] does not", "passes 1, 2"))


def test_losses_of_earlier_steps_are_not_denied_the_updated_weight():
    """A weight stepped between the passes is a new record each time: the losses of earlier steps reached the
    versions they used, and none of them is said not to reach it."""
    torch.manual_seed(0)
    d = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(d.parameters(), lr=0.1)
    with gl.trace() as tr:
        for _ in range(3):
            loss = d(torch.randn(5, 4)).pow(2).mean()
            loss.backward()
            optimizer.step()
    expect(gl.explain(d.weight, tr), never=("do not)", "does not)"))
