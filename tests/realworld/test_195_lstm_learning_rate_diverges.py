"""An LSTM regression stops with "Loss was NaN": the learning rate is too high, the loss grows step after step until the squared error overflows, and the step after writes NaN into the weights.

Address: https://github.com/neuralhydrology/neuralhydrology/issues/101
Title: RuntimeError: Loss was NaN for 1 times in a row. Stopped training.

What went wrong: training an LSTM on many basins stops after an epoch with a NaN loss.

Accepted answer (the maintainer's advice, as the reporter's closing comment records it): lower the
learning rate ("Lowering the learning rate solved the problem, 350+ epochs with no error").

The answer must follow the NaN to the overflow of the squared error and say that the loss grew step
after step before it (the sign of a learning rate too high), with lowering the learning rate first in the fix.
"""

import torch
import torch.nn as nn

import graphlens as gl
from _helpers import expect


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(3, 8, batch_first=True)
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.head(out[:, -1])


def train_until_nan():
    torch.manual_seed(0)
    model = Model()
    opt = torch.optim.SGD(model.parameters(), lr=5.0)
    x, y = torch.randn(16, 10, 3), torch.randn(16, 1) * 3
    with gl.trace() as tr:
        for step in range(60):
            opt.zero_grad()
            pred = model(x)
            loss = ((pred - y) ** 2).mean()
            if torch.isnan(loss):
                break
            loss.backward()
            opt.step()
    return model, loss, tr


def test_the_loss_grew_before_the_overflow():
    """explain(loss, tr): the squared error overflowed after the loss grew step after step; fix: lower the learning rate."""
    model, loss, tr = train_until_nan()
    assert torch.isnan(loss)
    e = gl.explain(loss, tr)
    expect(e, reasons=("overflow", "diverged", "nonfinite_parameter"), op="pow", line="loss = ((pred - y) ** 2).mean()",
           says=("grew step after step", "learning rate too high"))
    assert e.fix.startswith("Lower the learning rate"), e.fix
