"""Weight-standardised convolutions (torch.nn.utils.parametrize) trained inside one parametrize.cached() block around the whole loop: the second backward goes into the weights' freed graph.

Address: https://github.com/pytorch/pytorch/issues/71062
Title: RuntimeError: Trying to backward through the graph a second time (or directly access saved tensors after they have already been freed). ...

What went wrong: each convolution's weight is parametrized (standardised from the raw weight); the
training loop runs inside `with parametrize.cached():`, so the standardised weights are computed
once, at their first use, with that step's graph, and reused by every later step; the first
backward frees that graph and the second one raises.

Accepted answer: (a PyTorch maintainer) cached() computes the parametrized tensor once, differentiably,
and reuses it: open it around one forward and backward, not around several backward passes (the
reporter then found his cache block misplaced).

The answer once called it a tensor computed once before the loop "(a dataset passed through a
layer)" and told the user to detach the prediction, which would stop every gradient.
"""

import pytest
import torch
import torch.nn.functional as F
import torch.nn.utils.parametrize as TP
from torch import nn

from _helpers import HOW, expect, explained_in


class Standardize(nn.Module):
    def forward(self, weight):
        mean = weight.mean(dim=(1, 2, 3), keepdim=True)
        var = weight.var(dim=(1, 2, 3), keepdim=True, unbiased=False)
        return (weight - mean) / torch.sqrt(var + 1e-6)


class WSConv2d(nn.Conv2d):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        TP.register_parametrization(self, "weight", Standardize())


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.c2 = WSConv2d(2, 4, 3, padding=1), WSConv2d(4, 4, 3, padding=1)
        self.head = nn.Linear(4, 1)

    def forward(self, a):
        return self.head(F.leaky_relu(self.c2(F.leaky_relu(self.c1(a), 0.1)), 0.1).mean(dim=(2, 3)))


def program(ctx):
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = [(torch.randn(2, 2, 4, 4), torch.randn(2, 1)) for _ in range(3)]
    with ctx:
        with TP.cached():
            for img, target in batches:
                loss = F.mse_loss(model(img), target)
                opt.zero_grad()
                loss.backward()
                opt.step()


@pytest.mark.parametrize("how", HOW)
def test_names_the_cached_block_around_the_loop(how):
    """Both ways: the with parametrize.cached() line, and the fix that opens it per step; nothing is told to detach."""
    e = explained_in(program, how)
    expect(e, reason="graph_freed", reasons=("graph_built_once",), says=("TP.cached()",), fix=("inside the loop",),
           never=("dataset",), never_fix=("detach",))


def test_one_cached_block_per_step_trains():
    """The fix: the cache opened around one step's forward and backward."""
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(3):
        with TP.cached():
            loss = F.mse_loss(model(torch.randn(2, 2, 4, 4)), torch.randn(2, 1))
            opt.zero_grad()
            loss.backward()
            opt.step()
