"""Pruning replaces layers with smaller ones after the optimizer was built: fine-tuning never changes them.

Address: https://github.com/microsoft/nni/issues/4521
Title: The parameters are not updated when the pruned model is finetuned

What went wrong: after channel pruning, the speed-up step swapped the pruned convolution and batch
norm for new, smaller modules (copying the kept channels through .data), and fine-tuning went on
with the optimizer built before. The new layers got gradients and never changed.

Accepted answer: (the maintainer) the speed-up makes new modules, so the old optimizer holds the old
parameters; build a new optimizer after the speed-up.

graphlens sees that the optimizer holds Parameters no module among the caller's variables has any
more, and says under which condition that is the cause. The trace saw the new weight only after its
initialisation, so it must not claim that backward used values changed through .data.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

import graphlens as gl
from _helpers import expect


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 4, 3, padding=1)
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(F.relu(self.conv2(F.relu(self.conv1(x)))).mean((2, 3)))


def speedup(model, keep):
    new1 = nn.Conv2d(1, len(keep), 3, padding=1)
    new1.weight.data = model.conv1.weight.data[keep].clone()
    new1.bias.data = model.conv1.bias.data[keep].clone()
    new2 = nn.Conv2d(len(keep), 4, 3, padding=1)
    new2.weight.data = model.conv2.weight.data[:, keep].clone()
    new2.bias.data = model.conv2.bias.data.clone()
    model.conv1, model.conv2 = new1, new2


def finetune(model, optimizer, x, y, epochs=2):
    for _ in range(epochs):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
    return loss


def test_plain_answer_says_the_optimizer_holds_parameters_the_model_no_longer_has():
    """not_in_optimizer, with the optimizer's stale Parameters counted and the fix to build it after the change."""
    torch.manual_seed(0)
    model, x, y = Net(), torch.randn(4, 1, 6, 6), torch.tensor([0, 1, 2, 0])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    speedup(model, keep=[0, 2, 3, 5])
    loss = finetune(model, optimizer, x, y)
    e = gl.explain(model.conv1.weight, loss)
    expect(e, reasons=("not_in_optimizer",), tensor="model.conv1.weight", says=("no module among your variables has", "replaced"),
           fix=("Build the optimizer after",))


def test_traced_answer_does_not_claim_a_silently_wrong_gradient():
    """Under a trace: no zero_grad() fix, and the .data copy made at construction is told with its condition, not as a wrong gradient."""
    torch.manual_seed(0)
    model, x, y = Net(), torch.randn(4, 1, 6, 6), torch.tensor([0, 1, 2, 0])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with gl.trace() as tr:
        finetune(model, optimizer, x, y, epochs=1)
        speedup(model, keep=[0, 2, 3, 5])
        finetune(model, optimizer, x, y)
    e = gl.explain(model.conv1.weight, tr)
    expect(e, reasons=("not_in_optimizer",), fix=("Build the optimizer after",), never_fix=("zero_grad",),
           never=("where the graph computed", "the gradient is computed from them and is silently wrong"))
