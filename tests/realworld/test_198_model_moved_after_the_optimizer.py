"""The model is moved after the optimizer was built, and the move makes new Parameters: training never changes the model.

Address: https://github.com/pytorch/xla/issues/1623
Title: Sending .to(device) after defining optimizer leads to subtle bug

What went wrong: the optimizer was built from model.parameters(), then the model was sent to an XLA
device. That move makes new Parameter objects; the gradients land on them while the optimizer keeps
updating the old ones, without an error.

Accepted answer: (the maintainers) move the model first, then build the optimizer from its
parameters.

Reproduced on the CPU: torch.__future__.set_overwrite_module_params_on_conversion(True) makes
Module._apply take the same "new Parameter" branch, and the move is a dtype change.
"""

import pytest
import torch
import torch.nn as nn

import graphlens as gl
from _helpers import expect


@pytest.fixture
def new_parameters_on_conversion():
    before = torch.__future__.get_overwrite_module_params_on_conversion()
    torch.__future__.set_overwrite_module_params_on_conversion(True)
    yield
    torch.__future__.set_overwrite_module_params_on_conversion(before)


def train(model, optimizer, x, y, steps=2):
    for _ in range(steps):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
    return loss


def test_plain_and_traced_answers_say_to_build_the_optimizer_after_the_move(new_parameters_on_conversion):
    """Both ways: not_in_optimizer with the stale Parameters counted; build the optimizer after .to(); never zero_grad()."""
    torch.manual_seed(0)
    x, y = torch.randn(4, 5, dtype=torch.float64), torch.tensor([0, 1, 1, 0])
    model = nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    model.to(torch.float64)
    loss = train(model, optimizer, x, y)
    expect(gl.explain(model[2].weight, loss), reasons=("not_in_optimizer",), says=("4 Parameters", "moved"),
           fix=("Build the optimizer after", ".to()"), never_fix=("zero_grad",))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 2))
    with gl.trace() as tr:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        model.to(torch.float64)
        train(model, optimizer, x, y)
    expect(gl.explain(model[2].weight, tr), reasons=("not_in_optimizer",), fix=("Build the optimizer after",), never_fix=("zero_grad",))
