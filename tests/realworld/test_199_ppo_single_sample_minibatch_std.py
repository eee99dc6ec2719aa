"""PPO normalises each minibatch's advantages by their std; a last minibatch of one sample makes the loss NaN, and the step after its backward writes NaN into every weight.

Address: https://github.com/DLR-RM/stable-baselines3/issues/325
Title: [Bug] NaN's if a single observation is sampled from PPO's rollout_buffer

What went wrong: when the rollout buffer's size is not a multiple of the batch size, the last
minibatch can hold a single sample; the standard deviation of one number is NaN (the unbiased
estimate divides by N - 1 = 0, and the added eps does not help), the policy loss is NaN, and the
optimizer step that follows its backward fills every weight with NaN.

Accepted answer: (the maintainers, merged fix) normalise the advantages only when the minibatch holds
more than one sample.

Without a trace, the weights hold NaN when the loss is asked about, but they were finite when it was
computed: the step after its backward wrote the NaN. graphlens must not present them as the source.
"""

import warnings

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


def ppo_epoch(ctx=None):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 2))
    optimizer = torch.optim.Adam(net.parameters(), lr=3e-4)
    obs, actions, buffer_advantages = torch.randn(5, 3), torch.randint(0, 2, (5,)), torch.randn(5)
    with torch.no_grad():
        old_log_prob = torch.distributions.Categorical(logits=net(obs)).log_prob(actions)

    def epoch():
        for start in range(0, 5, 4):  # (minibatches of 4 and 1)
            idx = torch.arange(start, min(start + 4, 5))
            log_prob = torch.distributions.Categorical(logits=net(obs[idx])).log_prob(actions[idx])
            advantages = buffer_advantages[idx]
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
            ratio = torch.exp(log_prob - old_log_prob[idx])
            loss = -torch.min(advantages * ratio, advantages * torch.clamp(ratio, 0.8, 1.2)).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        return loss

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (torch warns that std's degrees of freedom are <= 0)
        if ctx is None:
            return net, epoch(), None
        with ctx as tr:
            loss = epoch()
    return net, loss, tr


def test_traced_answer_names_the_std_of_one_sample():
    """With a trace: the NaN is made by std at the normalisation line, over a single element."""
    net, loss, tr = ppo_epoch(gl.trace())
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("std_of_one",), op="std", line="advantages.std()",
           fix=("correction=0", "at least two"))


def test_plain_answer_does_not_blame_the_weights_a_later_step_made_nan():
    """Without a trace: the weights hold NaN now, but whether they did when the loss was computed is left open."""
    net, loss, _ = ppo_epoch()
    assert not torch.isfinite(net[0].weight).all()  # (torch: the step after the NaN backward wrote NaN into them)
    expect(gl.explain(loss), reason="nonfinite_forward", not_reasons=("nonfinite_input",), tensor="loss",
           says=("NaN or inf now", "not known without a trace"), never=("already hold",))
