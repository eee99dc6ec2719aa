"""Without h_state = h_state.data, the RNN's hidden state links each step to the previous, freed graph.

Address: https://github.com/MorvanZhou/PyTorch-Tutorial/issues/57
Title: 403: question about h_state = h_state.data

What went wrong: in the RNN regression tutorial the loop does prediction, h_state = rnn(x, h_state)
and then h_state = h_state.data. With that line commented out, the second loss.backward() raises
"Trying to backward through the graph a second time": h_state still belongs to the previous step's
graph, which the previous backward freed.

Accepted answer: no answer beyond a version question in the thread; the standard fix is to keep
cutting the hidden state every step (h_state = h_state.detach(), what .data did); the reporter's
retain_graph=True only hides the problem and keeps every old graph alive.

h_state is in the raising frame and links to the previous step's freed graph: graphlens can find it
with or without a trace.
"""

import pytest
import torch
from torch import nn

from _helpers import HOW, expect, explained, note


class RNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.RNN(input_size=1, hidden_size=4, num_layers=1, batch_first=True)
        self.out = nn.Linear(4, 1)

    def forward(self, x, h_state):
        r_out, h_state = self.rnn(x, h_state)
        return self.out(r_out), h_state


def rnn_h_state_carried():
    torch.manual_seed(0)
    rnn = RNN()
    optimizer = torch.optim.Adam(rnn.parameters(), lr=0.02)
    loss_func = nn.MSELoss()
    h_state = None
    for step in range(2):
        x = torch.randn(1, 5, 1)
        y = torch.randn(1, 5, 1)
        prediction, h_state = rnn(x, h_state)
        # h_state = h_state.data        # the line the reporter commented out
        loss = loss_func(prediction, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


@pytest.mark.parametrize("how", HOW)
def test_names_h_state_as_the_carried_state(how):
    """explain_error is graph_freed + carried_state on h_state, with h_state.detach() and not retain_graph=True."""
    expect(explained(rnn_h_state_carried, how), reason="graph_freed", reasons=("carried_state",), tensor="h_state",
           fix=("h_state.detach()",), never_fix=("retain_graph=True",))


def test_plain_answer_does_not_blame_the_new_loss():
    """Without a trace, the answer does not list the new loss's own node as freed by the earlier backward."""
    expect(explained(rnn_h_state_carried), never=("made loss",))


def test_traced_line_is_where_the_state_is_carried():
    """With a trace, e.line is the line that feeds h_state back into the RNN."""
    expect(explained(rnn_h_state_carried, "traced"), line="rnn(x, h_state)")


def test_note_says_part_of_the_graph_was_carried_over():
    """The note of trace(explain_errors=True) says part of the graph was carried over; its fix is not retain_graph=True."""
    expect(note(rnn_h_state_carried), says=("carried", "detach()"), never=("retain_graph=True",))
