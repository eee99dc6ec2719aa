"""A spiking LIF cell's state, returned by a first step whose loss was backpropagated, fed into a second step: the second backward reaches the first step's freed graph.

Address: https://github.com/norse/norse/issues/130
Title: Reused state crashes subsequent backward passes

What went wrong: out, s = model(data); out.sum().backward(); then out, _ = model(data, s);
out.sum().backward() raised "Trying to backward through the graph a second time". The state s (a
named tuple of the membrane voltage and the synaptic current) was computed by the first step,
whose backward freed its graph; the second step computes from s, so its backward goes into that
graph again.

Accepted answer (the maintainer's; the issue was closed on it): not a bug. Detach the state before
reusing it (truncated backpropagation through time), or add the losses and call backward once, or
pass retain_graph=True to the first backward if both passes are wanted.

The link is the state s, never out (out is the second step's own result). There is no loop: no
"previous iteration" to speak of.
"""

from typing import NamedTuple

import torch
from torch import nn

from _helpers import expect, explained_in


class LIFState(NamedTuple):
    v: torch.Tensor
    i: torch.Tensor


class SuperSpike(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return (x > 0).to(x.dtype)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output / (100.0 * x.abs() + 1.0).pow(2)


class LIFCell(nn.Module):
    def __init__(self, input_size, hidden_size, dt=0.001, tau_syn_inv=200.0, tau_mem_inv=100.0, v_th=1.0):
        super().__init__()
        self.input_weights = nn.Parameter(torch.randn(hidden_size, input_size) * 2 / input_size ** 0.5)
        self.hidden_size, self.dt, self.tau_syn_inv, self.tau_mem_inv, self.v_th = hidden_size, dt, tau_syn_inv, tau_mem_inv, v_th

    def forward(self, input_tensor, state=None):
        if state is None:  # (the default state's voltage required grad, as the issue says)
            state = LIFState(v=torch.zeros(input_tensor.shape[0], self.hidden_size, requires_grad=True),
                             i=torch.zeros(input_tensor.shape[0], self.hidden_size))
        dv = self.dt * self.tau_mem_inv * ((0.0 - state.v) + state.i)
        v_decayed = state.v + dv
        i_decayed = state.i - self.dt * self.tau_syn_inv * state.i
        z_new = SuperSpike.apply(v_decayed - self.v_th)
        v_new = (1 - z_new) * v_decayed
        i_new = i_decayed + torch.nn.functional.linear(input_tensor, self.input_weights)
        return z_new + v_new, LIFState(v_new, i_new)


def state_reused(ctx):
    torch.manual_seed(0)
    model = LIFCell(12, 1)
    data = torch.ones(100, 12)
    with ctx:
        out, s = model(data)
        loss = out.sum()
        loss.backward()
        out, _ = model(data, s)
        loss = out.sum()
        loss.backward()


def test_traced_answer_names_the_state_as_the_link():
    """With a trace: graph_freed through the state s (one of its tensors), used by both backward passes; never out."""
    expect(explained_in(state_reused, "traced"), reason="graph_freed", tensor=("s[0]", "s[1]", "s.v", "s.i"),
           says=("used by two backward passes",), never=("reached through out", "previous iteration"))


def test_plain_answer_names_the_state_too():
    """Without a trace, the state the frame still holds is the link read from the live graph; never out, never a docstring line."""
    expect(explained_in(state_reused, "plain"), reason="graph_freed", tensor=("s[0]", "s[1]", "s.v", "s.i"),
           never=("reached through out", "previous iteration", "fed back in at line"))


def test_fix_detaches_the_whole_state():
    """The fix detaches every tensor of s before the second step (or one backward, or retain_graph), never out.detach()."""
    expect(explained_in(state_reused, "traced"), fix=("t.detach() for t in s", "retain_graph=True"), never_fix=("out = out.detach()",))
