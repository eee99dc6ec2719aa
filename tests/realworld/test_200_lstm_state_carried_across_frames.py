"""A video detector's LSTM keeps its state as module attributes and detaches it once per video, while every frame runs backward(retain_graph=True) and a step: the second frame's backward finds weights changed in place.

Address: https://github.com/vikrant7/mobile-vod-bottleneck-lstm/issues/5
Title: RuntimeError: one of the variables needed for gradient computation has been modified by an inplace operation

What went wrong: the bottleneck LSTM stores its hidden and cell state on the module and feeds them to
the next call; the training loop runs zero_grad, forward, backward(retain_graph=True) and
optimizer.step() for every frame, and detaches the state only after the whole video. The second
frame's backward goes through the first frame's graph (through the carried state), whose saved
weights the step had changed: the in-place error, not "graph freed", because retain_graph kept them.

Accepted answer: (the thread) detach the hidden state after every frame (net.detach_hidden() inside
the frame loop); retain_graph is then not needed.

The failing graph also saved the same weights at their current version (the forward after the step
ran): reordering the step or recomputing the forward, the usual fixes of this error, change nothing.
"""

import torch
import torch.nn.functional as F
from torch import nn

from _helpers import HOW, expect, explained_in

import pytest


class ConvLSTM(nn.Module):
    def __init__(self, channels=4, size=4):
        super().__init__()
        self.gate = nn.Conv2d(2 * channels, channels, 1, bias=False)
        self.cand = nn.Conv2d(2 * channels, channels, 1, bias=False)
        self.hidden_state = torch.zeros(1, channels, size, size)
        self.cell_state = torch.zeros(1, channels, size, size)

    def forward(self, x):
        y = torch.cat((x, self.hidden_state), 1)
        c = torch.sigmoid(self.gate(y)) * self.cell_state + F.relu6(self.cand(y))
        self.hidden_state, self.cell_state = torch.tanh(c), c
        return self.hidden_state


class Detector(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Conv2d(3, 4, 3, 2, 1)
        self.lstm = ConvLSTM()
        self.head = nn.Conv2d(4, 3, 1)

    def forward(self, x):
        return self.head(self.lstm(self.encoder(x)))

    def detach_hidden(self):
        self.lstm.hidden_state.detach_()
        self.lstm.cell_state.detach_()


def train_on_video(ctx, make_optimizer=lambda params: torch.optim.RMSprop(params, lr=3e-3, momentum=0.9)):  # (the project's)
    torch.manual_seed(0)
    net = Detector()
    optimizer = make_optimizer(net.parameters())
    frames, labels = torch.randn(3, 1, 3, 8, 8), torch.randint(0, 3, (3, 1, 4, 4))
    with ctx:
        for image, label in zip(frames, labels):
            optimizer.zero_grad()
            loss = F.cross_entropy(net(image), label)
            loss.backward(retain_graph=True)
            optimizer.step()
        net.detach_hidden()


@pytest.mark.parametrize("how", HOW)
def test_names_the_carried_state_and_detaching_it_every_frame(how):
    """Both ways: carried_state through net.lstm's state attribute; the fix detaches it each iteration, never a reorder of the step."""
    e = explained_in(train_on_video, how)
    expect(e, reason="inplace_saved", reasons=("carried_state",), says=("net.lstm.", "current version", "earlier iteration"),
           fix=("net.lstm.hidden_state.detach()", "net.lstm.cell_state.detach()"),  # (both carry it: one alone leaves the link)
           never_fix=("before optimizer.step()", "Recompute the forward"))


def train_with_plain_sgd(ctx):
    # (no momentum: no optimizer state says which of the two same-shaped weights it stepped)
    train_on_video(ctx, lambda params: torch.optim.SGD(params, lr=0.1))


def test_an_update_the_trace_saw_is_never_answered_with_out_of_place_arithmetic():
    """When two weights fit the message and the trace saw an update under no_grad change the saved one, the fix is the order or a detach, never 'w = w + ...'."""
    e = explained_in(train_with_plain_sgd, "traced")
    expect(e, reason="inplace_saved", tensor="net.lstm.gate.weight", fix=("optimizer.step()", "detach"),
           never_fix=("(a new tensor) instead of changing",))
