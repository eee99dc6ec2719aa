"""A spiking ResNet trained without resetting its neurons: the membrane potential the last batch left (an output of the neurons' autograd.Function) starts the next batch, whose backward reaches the freed graph.

Address: https://github.com/fangwei123456/Spike-Element-Wise-ResNet/issues/19
Title: (zh) RuntimeError: Trying to backward through the graph a second time

What went wrong: each multi-step LIF neuron keeps its potential in self.v = v_seq[-1] (an output of
a custom autograd.Function that saves h_seq and spike_seq). The training loop never resets the
neurons, so batch 2's backward goes through v into batch 1's Function, whose saved tensors batch
1's backward freed; the error is raised inside the Function's own backward (ctx.saved_tensors).
retain_graph=True did not help the reporter.

Accepted answer: (the maintainer) reset the network's state after each batch
(spikingjelly's functional.reset_net(net)).

The error is raised in the Function's backward, whose frame holds none of the program's variables:
the loss and the network are in the frame that called backward (once, the answer named the loss
"t0" and found no carried state).
"""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from _helpers import HOW, expect, explained_in


class LIFFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x_seq, v_init, tau, v_threshold):
        h_seq, spike_seq, v_seq = [], [], []
        v = v_init
        for t in range(x_seq.shape[0]):
            h = v + (x_seq[t] - v) / tau
            spike = (h >= v_threshold).to(x_seq)
            v = h * (1.0 - spike)
            h_seq.append(h)
            spike_seq.append(spike)
            v_seq.append(v)
        h_seq, spike_seq, v_seq = torch.stack(h_seq), torch.stack(spike_seq), torch.stack(v_seq)
        ctx.save_for_backward(h_seq, spike_seq)
        ctx.tau, ctx.v_threshold = tau, v_threshold
        return spike_seq, v_seq

    @staticmethod
    def backward(ctx, grad_spike_seq, grad_v_seq):
        h_seq, spike_seq = ctx.saved_tensors
        sg = torch.sigmoid(4.0 * (h_seq - ctx.v_threshold))
        sg = 4.0 * sg * (1.0 - sg)
        grad_x = torch.empty_like(h_seq)
        grad_h_next = torch.zeros_like(h_seq[0])
        for t in reversed(range(h_seq.shape[0])):
            grad_v = grad_v_seq[t] + grad_h_next * (1.0 - 1.0 / ctx.tau)
            grad_h = grad_spike_seq[t] * sg[t] + grad_v * (1.0 - spike_seq[t])
            grad_x[t] = grad_h / ctx.tau
            grad_h_next = grad_h
        return grad_x, grad_h_next * (1.0 - 1.0 / ctx.tau), None, None


class LIFNode(nn.Module):
    def __init__(self):
        super().__init__()
        self.v = 0.0

    def reset(self):
        self.v = 0.0

    def forward(self, x_seq):
        if not isinstance(self.v, torch.Tensor):
            self.v = torch.zeros_like(x_seq[0])
        spike_seq, v_seq = LIFFunction.apply(x_seq, self.v, 2.0, 1.0)
        self.v = v_seq[-1]
        return spike_seq


class SEWBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.fc1, self.sn1 = nn.Linear(c, c), LIFNode()
        self.fc2, self.sn2 = nn.Linear(c, c), LIFNode()

    def forward(self, x_seq):
        return self.sn2(self.fc2(self.sn1(self.fc1(x_seq)))) + x_seq


class SEWNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem, self.sn0 = nn.Linear(6, 8), LIFNode()
        self.block = SEWBlock(8)
        self.head = nn.Linear(8, 3)

    def forward(self, x_seq):
        return self.head(self.block(self.sn0(self.stem(x_seq)))).mean(0)


def program(ctx):
    torch.manual_seed(0)
    net = SEWNet()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    batches = [(torch.rand(4, 5, 6) * 3, torch.randint(0, 3, (5,))) for _ in range(3)]
    with ctx:
        for images, targets in batches:
            optimizer.zero_grad()
            loss = F.cross_entropy(net(images), targets)
            loss.backward()
            optimizer.step()


@pytest.mark.parametrize("how", HOW)
def test_names_every_neuron_state_the_batches_carry(how):
    """Both ways: loss.backward() reaches the old graph through the neurons' v; each is named, and the fix cuts or resets them."""
    e = explained_in(program, how)
    expect(e, reason="graph_freed", reasons=("carried_state",), says=("loss.backward()", "net.sn0.v", "net.block.sn1.v",
                                                                       "net.block.sn2.v"),
           fix=(("reset", "detach()"),), never=("t0", "loss and loss"))


def test_resetting_the_neurons_ends_the_error():
    """The maintainer's fix: reset every neuron after each batch; training then runs."""
    torch.manual_seed(0)
    net = SEWNet()
    for _ in range(3):
        F.cross_entropy(net(torch.rand(4, 5, 6) * 3), torch.randint(0, 3, (5,))).backward()
        for m in net.modules():
            if isinstance(m, LIFNode):
                m.reset()
