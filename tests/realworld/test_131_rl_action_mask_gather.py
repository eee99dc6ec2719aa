"""Invalid-action masking with -inf before log_softmax, and a replayed action the mask now forbids: gather picks log π(a) = -inf and the loss is inf.

Address: https://github.com/hill-a/stable-baselines/pull/453
Title: Invalid Action Mask [WIP]

What went wrong: with a hard action mask (logits of invalid actions set to -inf), a user saw the
agent's neglogp become -inf for an action the mask excludes. Here a policy-gradient batch replays an
action stored before the mask changed: log_softmax gives -inf at that masked action, gather picks it,
and the REINFORCE loss -(log_prob · advantage) is inf.

Accepted answer: none in the (unmerged) pull request; Jeppe-T-K noted that a hard mask misbehaves
when the chosen action is one it forbids and fed the mask to the policy as an observation instead. The
standard fix is to keep every replayed action valid under the mask it is scored with (store the mask
with the action), or to mask with a large finite negative number.

The -inf is the mask's, written on purpose: the answer names masked_fill, then the gather that
picked a masked action, and never calls it an overflow or a log of 0.
"""

import torch
import torch.nn.functional as F
from torch import nn

import graphlens as gl
from _helpers import expect


class MaskedPolicy(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 3)

    def forward(self, obs, valid):
        logits = self.net(obs)
        logits = logits.masked_fill(~valid, float("-inf"))
        return F.log_softmax(logits, dim=-1)


def rl_action_mask_gather():
    torch.manual_seed(0)
    policy = MaskedPolicy()
    obs = torch.randn(4, 4)
    valid = torch.tensor([[True, True, False], [True, False, True], [True, True, True], [False, True, True]])
    actions = torch.tensor([1, 2, 0, 0])  # the last one was stored before action 0 became invalid
    advantages = torch.tensor([0.5, -0.2, 1.0, 0.3])
    with gl.trace() as tr:
        log_probs = policy(obs, valid)
        log_prob_a = log_probs.gather(1, actions.unsqueeze(1)).squeeze(1)
        loss = -(log_prob_a * advantages).mean()
        loss.backward()
    return policy, loss, tr


def test_inf_loss_names_the_mask_and_the_gather_of_a_masked_action():
    """explain(loss, tr): masked_fill wrote -inf on purpose, and gather picked it at row 3: an action the mask forbids."""
    policy, loss, tr = rl_action_mask_gather()
    assert torch.isinf(loss)
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("masked_infinity",),
           not_reasons=("overflow", "log_of_zero"), tensor="loss", op="masked_fill",
           line='logits = logits.masked_fill(~valid, float("-inf"))',
           says=("log_probs.gather(1, actions.unsqueeze(1))", "result[3, 0] is -inf", "the mask forbids"),
           never=("overflow", "log of 0"))


def test_fix_keeps_the_replayed_action_valid():
    """The fix makes index and mask agree (store the mask with the action) and shows how to find such rows (torch.isinf)."""
    policy, loss, tr = rl_action_mask_gather()
    expect(gl.explain(loss, tr), fix=("store it with the action", "torch.isinf(picked)"))
