"""A spiking CNN whose two leaky neuron layers keep their membrane potential as module state between batches: the second batch's backward reaches the first batch's freed graph.

Address: https://github.com/jeshraghian/snntorch/issues/250
Title: Basic S-CNN - RuntimeError: Trying to backward through the graph a second time; try [retain_graph=True]

What went wrong: the tutorial's spiking CNN (convolutions and leaky neurons with init_hidden=True) was
wrapped in a class whose forward runs the net for a few time steps without resetting the neurons.
Each neuron layer keeps its membrane potential mem as an attribute, so the second batch starts from
the first batch's mem, linked to its freed graph.

Accepted answer (the maintainer's suggestion, which the user confirmed): reset the hidden states at
the start of every forward (utils.reset(self.net)): the batches are independent.

Both neuron layers carry state: detaching only one of them still raises the same error.
"""

import torch
from torch import nn

from _helpers import expect, explained_in


class FastSigmoid(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input_, slope=25):
        ctx.save_for_backward(input_)
        ctx.slope = slope
        return (input_ > 0).float()

    @staticmethod
    def backward(ctx, grad_output):
        (input_,) = ctx.saved_tensors
        return grad_output / (ctx.slope * torch.abs(input_) + 1.0) ** 2, None


class Leaky(nn.Module):
    """snntorch's leaky neuron with init_hidden=True, trimmed: the membrane potential is module state."""

    def __init__(self, beta, threshold=1.0, output=False):
        super().__init__()
        self.beta, self.threshold, self.output = beta, threshold, output
        self.mem = torch.zeros(0)

    def forward(self, input_):
        if self.mem.shape != input_.shape:
            self.mem = torch.zeros_like(input_)
        reset = (self.mem - self.threshold > 0).float().detach()
        self.mem = self.beta * self.mem + input_ - reset * self.threshold
        spk = FastSigmoid.apply(self.mem - self.threshold)
        return (spk, self.mem) if self.output else spk


class SCNN(nn.Module):
    def __init__(self, num_steps=3):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(1, 4, 3), nn.MaxPool2d(2), Leaky(beta=0.5), nn.Flatten(),
                                 nn.Linear(4 * 3 * 3, 10), Leaky(beta=0.5, output=True))
        self.num_steps = num_steps

    def forward(self, x):
        spk_rec, mem_rec = [], []
        for step in range(self.num_steps):
            spk_out, mem_out = self.net(x)
            spk_rec.append(spk_out)
            mem_rec.append(mem_out)
        return torch.stack(spk_rec), torch.stack(mem_rec)


def train(ctx):
    torch.manual_seed(0)
    model = SCNN()
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-2)
    loss_fn = nn.MSELoss()
    train_loader = [(torch.rand(2, 1, 8, 8) * 3, torch.rand(2, 10)) for _ in range(2)]
    with ctx:
        for data, targets in train_loader:
            spk_rec, mem_rec = model(data)
            loss_val = loss_fn(mem_rec.sum(0), targets)
            optimizer.zero_grad()
            loss_val.backward()
            optimizer.step()


def test_names_both_carried_states():
    """explain_error(exc): carried_state naming both neuron layers' mem (model.net.2.mem and model.net.5.mem), each to be cut; no "fed back" line read from a string."""
    e = explained_in(train, "plain")
    expect(e, reason="graph_freed", reasons=("carried_state",), says=("model.net.2.mem", "model.net.5.mem"),
           never=("fed back in at line",))


def test_fix_cuts_every_state_or_resets_them():
    """The fix detaches both states (in Python syntax) or resets them at the start of each batch; never retain_graph."""
    for how in ("plain", "traced"):
        expect(explained_in(train, how), fix=("model.net[2].mem = model.net[2].mem.detach()", "model.net[5].mem = model.net[5].mem.detach()",
                                        "reset the states"), never_fix=("retain_graph=True",))
