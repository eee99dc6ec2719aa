"""A hidden state kept on the module (self.hidden) carries the previous batch's freed graph into the next.

Address: https://github.com/sgadgil6/cnslab_fmri/issues/4
Title: Trying to backward through the graph a second time, but the saved intermediate results have already been freed. Specify retain_graph=True when calling backward the first time.

What went wrong: the model keeps self.hidden and its forward does
lstm_out, self.hidden = self.lstm(x, self.hidden). The new hidden state carries the graph of the
previous batch into the next one, so the second loss.backward() walks into the already freed
graph. retain_graph=True "fixed" it but ran out of memory.

Accepted answer (in the thread): do not feed the stored hidden state back (call self.lstm(x)). The
usual alternative: detach it every iteration (self.hidden = tuple(h.detach() for h in ...)).

The carried tensor is a module attribute that links to a freed graph: graphlens can find it with or
without a trace.
"""

import pytest
import torch
from torch import nn

from _helpers import HOW, expect, explained


class fMRI_LSTM(nn.Module):
    def __init__(self, hidden_dim, input_dim):
        super().__init__()
        self.hidden_dim = hidden_dim
        self.lstm = nn.LSTM(input_dim, hidden_dim, num_layers=1, batch_first=True)
        self.linear = nn.Linear(hidden_dim, 1)
        self.hidden = (torch.zeros(1, 2, hidden_dim), torch.zeros(1, 2, hidden_dim))

    def forward(self, x):
        lstm_out, self.hidden = self.lstm(x, self.hidden)
        return self.linear(lstm_out[:, -1, :])


def lstm_hidden_on_self():
    torch.manual_seed(0)
    model = fMRI_LSTM(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(2):
        x = torch.randn(2, 4, 2)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


@pytest.mark.parametrize("how", HOW)
def test_names_model_hidden_as_the_carried_state(how):
    """explain_error is graph_freed + carried_state on model.hidden, with a .detach() fix and not retain_graph=True."""
    expect(explained(lstm_hidden_on_self, how), reason="graph_freed", reasons=("carried_state",), tensor="model.hidden",
           says=("loss.backward()",), fix=(".detach()",), never_fix=("retain_graph=True",))


def test_plain_answer_does_not_blame_the_new_graph():
    """Without a trace, the answer does not list loss's own new nodes as freed by the earlier backward."""
    expect(explained(lstm_hidden_on_self), never=("PowBackward0",))


def test_traced_line_is_where_the_state_is_carried():
    """With a trace, e.line is the forward line that feeds self.hidden back into the LSTM."""
    expect(explained(lstm_hidden_on_self, "traced"), line="self.lstm(x, self.hidden)")
