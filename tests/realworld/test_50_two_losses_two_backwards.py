"""Two losses on a shared trunk, two backward calls: the second finds the trunk's saved tensors freed.

Address: https://programmerah.com/solved-runtimeerror-trying-to-backward-through-the-graph-a-second-time-28387/
Title: [Solved] RuntimeError: Trying to backward through the graph a second time…

What went wrong: a network with two outputs and losses calls loss1.backward() and then
loss2.backward(). Both losses share the trunk of the graph; the first backward frees the trunk's
saved tensors, so the second one raises "Trying to backward through the graph a second time".

Accepted answer (the post): pass retain_graph=True to the first backward (better: backward once on
loss1 + loss2).
"""

import pytest
import torch
from torch import nn

from _helpers import HOW, expect, explained


def two_losses_two_backwards():
    torch.manual_seed(0)
    trunk = nn.Sequential(nn.Linear(3, 4), nn.Tanh())
    head1, head2 = nn.Linear(4, 1), nn.Linear(4, 1)
    optimizer = torch.optim.SGD(list(trunk.parameters()) + list(head1.parameters()) + list(head2.parameters()), lr=0.1)
    feat = trunk(torch.randn(2, 3))
    loss1 = head1(feat).pow(2).mean()
    loss2 = head2(feat).pow(2).mean()
    optimizer.zero_grad()
    loss1.backward()
    loss2.backward()
    optimizer.step()


@pytest.mark.parametrize("how", HOW)
def test_recognised_with_the_joint_backward_fix(how):
    """explain_error says loss2.backward() met freed tensors and proposes one backward of the sum or retain_graph=True."""
    expect(explained(two_losses_two_backwards, how), reason="graph_freed", says=("loss2.backward()",),
           fix=("backward once", "retain_graph=True"), not_reasons=("carried_state",))


def test_plain_answer_names_the_shared_trunk():
    """Without a trace, the answer names the trunk node TanhBackward0 that made feat."""
    expect(explained(two_losses_two_backwards), says=("TanhBackward0", "feat"))


def test_plain_answer_singles_out_feat():
    """Without a trace, the answer is about feat, shared by both losses, and lists none of loss2's own nodes."""
    expect(explained(two_losses_two_backwards), tensor="feat", never=("PowBackward0",))


def test_traced_answer_names_feat():
    """With a trace, the answer still names feat as the shared part."""
    expect(explained(two_losses_two_backwards, "traced"), says=("feat",))
