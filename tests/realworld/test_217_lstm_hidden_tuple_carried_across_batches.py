"""An fMRI LSTM classifier feeds the (h, c) state the previous batch left in self.hidden into the next batch: backward goes into the freed graph.

Address: https://github.com/sgadgil6/cnslab_fmri/issues/4
Title: Trying to backward through the graph a second time, but the saved intermediate results have already been freed. Specify retain_graph=True when calling backward the first time.

What went wrong: forward runs lstm_out, self.hidden = self.lstm(x, self.hidden) and keeps the new state
for the next call; the second batch's backward reaches the first batch's graph through it. The
reporter found retain_graph=True runs out of memory.

Accepted answer: (the reporter's fix, merged by the maintainer) batches are independent subjects:
do not carry the state (self.lstm(x) starts from zeros); detaching the carried state also ends the
error.

The state is a tuple: the fix must cut it as one (model.hidden = tuple(h.detach() for h in
model.hidden)); it once added "model.hidden[1] = ..." after it, which raises TypeError.
"""

import pytest
import torch
from torch import nn

from _helpers import HOW, expect, explained_in


class FmriLSTM(nn.Module):
    def __init__(self, hidden_dim=8, input_dim=10, batch_size=4):
        super().__init__()
        self.lstm = nn.LSTM(input_dim, hidden_dim, batch_first=True)
        self.linear = nn.Linear(hidden_dim, 1)
        self.hidden = (torch.randn(1, batch_size, hidden_dim), torch.randn(1, batch_size, hidden_dim))

    def forward(self, x):
        lstm_out, self.hidden = self.lstm(x, self.hidden)
        return torch.sigmoid(self.linear(lstm_out[:, -1, :]))


def program(ctx):
    torch.manual_seed(0)
    model = FmriLSTM()
    loss_fn = nn.BCELoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    batches = [(torch.randn(4, 6, 10), torch.randint(0, 2, (4, 1)).float()) for _ in range(3)]
    with ctx:
        for x, y in batches:
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()


@pytest.mark.parametrize("how", HOW)
def test_the_carried_tuple_is_cut_as_one(how):
    """The carried state is model.hidden; the fix detaches the tuple as a whole and assigns into none of its items."""
    e = explained_in(program, how)
    expect(e, reason="graph_freed", reasons=("carried_state",), says=("model.hidden",),
           fix=("tuple(h.detach() for h in model.hidden)",), never_fix=("model.hidden[1] =", "model.hidden[0] ="))


def test_the_fix_as_written_runs():
    """The fix's code, run at the start of every step, trains without the error."""
    torch.manual_seed(0)
    model = FmriLSTM()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(3):
        model.hidden = tuple(h.detach() for h in model.hidden)
        optimizer.zero_grad()
        nn.functional.binary_cross_entropy(model(torch.randn(4, 6, 10)), torch.ones(4, 1)).backward()
        optimizer.step()
