"""A pairwise rank loss picks class probabilities with softmax(scores)[:, target]: with a batch it is a [B, B] block, and backward asks for a scalar.

Address: https://github.com/dillondavis/RecurrentAttentionConvolutionalNeuralNetwork/issues/4
Title: RuntimeError: grad can be implicitly created only for scalar outputs

What went wrong: the rank loss took F.softmax(scores)[:, target], indexing the columns with the whole
batch's labels, and returned the unreduced hinge: with a batch of one it is one number; with a batch
of B it pairs every row with every label, a [B, B] block, and backward() refuses it.

Accepted answer: (the reporter's rewrite) pick each row's own label with gather(1, target.view(-1, 1))
and reduce the hinge to a scalar.

".mean()" alone silences the error and averages every row with every other row's label.
"""

import torch
import torch.nn.functional as F

import graphlens as gl
from _helpers import HOW, expect, explained

import pytest


def rank_step():
    torch.manual_seed(0)
    head1, head2 = torch.nn.Linear(6, 5), torch.nn.Linear(6, 5)
    x, target = torch.randn(4, 6), torch.tensor([0, 3, 1, 4])
    p1 = F.softmax(head1(x), dim=1)[:, target]
    p2 = F.softmax(head2(x), dim=1)[:, target]
    loss = (p1 - p2 + 0.05).clamp(min=0)
    loss.backward()


@pytest.mark.parametrize("how", HOW)
def test_names_the_all_pairs_indexing_and_the_per_row_pick(how):
    """Both ways: nonscalar_backward, the [4, 4] block of x[:, idx], fixed by x[arange, idx] or gather."""
    e = explained(rank_step, how)
    expect(e, reason="nonscalar_backward", says=("x[:, idx]", "[4, 4]"), fix=(("gather", "torch.arange(4)"),))


def test_a_hooked_index_is_not_read():
    """Where a saved-tensor hook packed the indices, graphlens does not unpack them: the general answer, no all-pairs claim."""
    unpacked = []

    def run():
        torch.manual_seed(0)
        head = torch.nn.Linear(6, 5)
        x, target = torch.randn(4, 6), torch.tensor([0, 3, 1, 4])
        with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: unpacked.append(1) or t):
            p = F.softmax(head(x), dim=1)[:, target]
        (p + 0.05).clamp(min=0).backward()

    e = explained(run, "plain")
    assert not unpacked
    expect(e, reason="nonscalar_backward", never=("x[:, idx]",))
