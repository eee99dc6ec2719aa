"""A head's parameter group is built but never handed to the optimizer: its weights get gradients and never change.

Address: https://github.com/zjunlp/HVPNeT/issues/5
Title: Not putting parameters into optimizer but still trainable

What went wrong: the training setup built one parameter group for the encoder and another for the
CRF and classifier head, but appended only the first to the list given to AdamW. The head's
weights received gradients every step, and kept their initial values.

Accepted answer: (the maintainers) the second group was never appended; add it to the parameters
the optimizer is built from.

graphlens finds the optimizer among the caller's variables (no optimizer= needed) and checks that
it holds the weight; with a trace it must not read the uncleared gradient as a missing zero_grad():
zero_grad() never clears a tensor the optimizer does not hold.
"""

import torch
import torch.nn as nn

import graphlens as gl
from _helpers import expect


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(6, 8)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(torch.tanh(self.encoder(x)))


def build_optimizer(model):
    groups = [{"params": model.encoder.parameters(), "lr": 1e-3}]
    head = {"params": model.fc.parameters(), "lr": 1e-2}  # (built, never appended)
    del head
    return torch.optim.AdamW(groups)


def train(model, optimizer, x, y, steps=2):
    for _ in range(steps):
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return loss


def test_plain_answer_finds_the_optimizer_and_says_it_does_not_hold_the_weight():
    """explain(model.fc.weight, loss), with the optimizer only among the caller's variables: not_in_optimizer, add it to the optimizer."""
    torch.manual_seed(0)
    model, x, y = Tagger(), torch.randn(5, 6), torch.tensor([0, 1, 2, 3, 0])
    optimizer = build_optimizer(model)
    before = model.fc.weight.detach().clone()
    loss = train(model, optimizer, x, y)
    assert torch.equal(before, model.fc.weight) and model.fc.weight.grad is not None  # (torch: never updated)
    e = gl.explain(model.fc.weight, loss)
    expect(e, reasons=("not_in_optimizer",), tensor="model.fc.weight", says=("not among the optimizer's parameters",),
           fix=("add_param_group", "parameters it is built from"), never=("no module among your variables",))


def test_traced_answer_never_tells_to_call_zero_grad_for_a_tensor_the_optimizer_does_not_hold():
    """Under a trace the uncleared gradient is explained by the optimizer not holding the weight, never by a missing zero_grad()."""
    torch.manual_seed(0)
    model, x, y = Tagger(), torch.randn(5, 6), torch.tensor([0, 1, 2, 3, 0])
    with gl.trace() as tr:
        optimizer = build_optimizer(model)
        train(model, optimizer, x, y)
    e = gl.explain(model.fc.weight, tr)
    expect(e, reasons=("not_in_optimizer",), says=("zero_grad() clear",), fix=("add_param_group",), never_fix=("zero_grad",))


def test_a_weight_the_optimizer_holds_gets_no_optimizer_note():
    """The encoder's weight, which the optimizer holds, is answered without a word about the optimizer."""
    torch.manual_seed(0)
    model, x, y = Tagger(), torch.randn(5, 6), torch.tensor([0, 1, 2, 3, 0])
    optimizer = build_optimizer(model)
    loss = train(model, optimizer, x, y)
    expect(gl.explain(model.encoder.weight, loss), not_reasons=("not_in_optimizer",), never=("optimizer's parameters",))
