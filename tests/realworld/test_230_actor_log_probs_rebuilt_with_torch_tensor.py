"""An actor-critic agent batches its stored log-probs with torch.tensor(...): a new tensor of the numbers, without history, so the actor never learns (only the critic does).

Address: https://github.com/kengz/SLM-Lab/pull/133
Title: Fix ActorCritic family

What went wrong: act() appends each step's log_prob to a list; train() turns the list into a batch with
torch.tensor(self.log_probs), which copies the numbers into a tensor with no graph; the policy loss
reaches no actor weight. The critic's loss still trains the critic.

Accepted answer: (the merged PR) build the batch with torch.stack(...) instead.

The agent is a plain object holding the two networks: the weight is named by that path
(agent.actor.0.weight), and without a trace graphlens follows the code from loss = episode(agent) into
agent.train() to the torch.tensor line (it once stopped at the first call and said nothing).
"""

import torch
from torch import nn
from torch.distributions import Categorical

import graphlens as gl
from _helpers import expect


class Agent:
    def __init__(self):
        self.actor = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 2))
        self.critic = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))
        self.optim = torch.optim.Adam(list(self.actor.parameters()) + list(self.critic.parameters()), lr=1e-2)
        self.log_probs, self.values, self.rewards = [], [], []

    def act(self, state):
        pd = Categorical(logits=self.actor(state))
        action = pd.sample()
        self.log_probs.append(pd.log_prob(action))
        self.values.append(self.critic(state).squeeze())
        return action

    def train(self, gamma=0.99):
        rets, r_sum = [], 0.0
        for r in reversed(self.rewards):
            r_sum = r + gamma * r_sum
            rets.insert(0, r_sum)
        rets = torch.tensor(rets)
        log_probs = torch.tensor(self.log_probs)
        v_preds = torch.stack(self.values)
        advs = rets - v_preds.detach()
        policy_loss = -(log_probs * advs).mean()
        val_loss = nn.functional.mse_loss(v_preds, rets)
        loss = policy_loss + val_loss
        self.optim.zero_grad()
        loss.backward()
        self.optim.step()
        return loss


def episode(agent):
    for _ in range(5):
        a = agent.act(torch.randn(4))
        agent.rewards.append(1.0 if a.item() == 0 else 0.0)
    return agent.train()


def test_plain_follows_the_code_into_the_method_and_names_torch_tensor():
    """Plain: the weight is agent.actor.0.weight; the lead is torch.tensor on the log-probs line; the fix is torch.stack."""
    torch.manual_seed(0)
    agent = Agent()
    loss = episode(agent)
    assert agent.actor[0].weight.grad is None and agent.critic[0].weight.grad is not None
    e = gl.explain(agent.actor[0].weight, loss)
    expect(e, reason="not_reachable", reasons=("cut_by_python_value",), tensor="agent.actor.0.weight", op="tensor",
           line="torch.tensor(self.log_probs)", says=("train()",), fix=("torch.stack",))


def test_traced_names_the_line():
    """Traced: the same cut, at the line the trace saw."""
    torch.manual_seed(0)
    agent = Agent()
    with gl.trace() as tr:
        episode(agent)
    expect(gl.explain(agent.actor[0].weight, tr), reasons=("cut_by_python_value",), line="torch.tensor(self.log_probs)")


def test_stacking_keeps_the_actor_in_the_graph():
    """torch.stack of the stored log-probs (the PR's fix) keeps their graph: the actor's weights get a gradient."""
    torch.manual_seed(0)
    agent = Agent()
    for _ in range(5):
        agent.act(torch.randn(4))
    (-torch.stack(agent.log_probs).sum()).backward()
    assert agent.actor[0].weight.grad is not None
