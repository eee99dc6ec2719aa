"""Hidden layers kept in a plain Python list are not registered: the optimizer built from model.parameters() never sees them.

Address: https://github.com/pytorch/pytorch/issues/715
Title: Module: parameters are not included if the module is initialized in a list

What went wrong: the poster built the hidden layers of a module in a loop and stored them in
self.hids = [] (a plain list); printing the module and model.parameters() showed only the
classifier. The hidden layers still compute and even get gradients, but an optimizer built from
model.parameters() never updates them.

Accepted answer (apaszke): expected behaviour; build the list and wrap it in nn.ModuleList (assigned
as self.hids), which registers the layers.

The evidence: the parameter the loss reaches is not among the model's (or the optimizer's)
parameters, and a list attribute of the model holds the layer that owns it. The answer names the
parameter by that path, not as an unnamed tensor.
"""

import pytest
import torch
from torch import nn

import graphlens as gl
from _helpers import expect


class SNLINet(nn.Module):
    def __init__(self, n_layers=2, n_hid=4):
        super().__init__()
        self.hids = []
        for _ in range(n_layers):
            self.hids.append([nn.Linear(n_hid, n_hid), nn.Tanh()])
        self.classifier = nn.Linear(n_hid, 3)

    def forward(self, x):
        for linear, act in self.hids:
            x = act(linear(x))
        return self.classifier(x)


def train_step():
    torch.manual_seed(0)
    net = SNLINet()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    loss = nn.functional.cross_entropy(net(torch.randn(5, 4)), torch.tensor([0, 1, 2, 1, 0]))
    loss.backward()
    return net, optimizer, loss


def test_program_hidden_layer_has_grad_but_is_not_a_parameter():
    """The program itself: the hidden layer gets a gradient but is not among net.parameters()."""
    net, optimizer, loss = train_step()
    w = net.hids[0][0].weight
    assert w.grad is not None and not any(p is w for p in net.parameters())


def test_says_plain_list_use_modulelist():
    """explain(w, loss, optimizer=...): unregistered_module + not_in_optimizer, fix nn.ModuleList, w named by its path."""
    net, optimizer, loss = train_step()
    expect(gl.explain(net.hids[0][0].weight, loss, optimizer=optimizer), reason="grad_ok",
           reasons=("unregistered_module", "not_in_optimizer"), tensor="net.hids[0][0].weight",
           says=("plain Python list", "net.parameters()"), fix=("nn.ModuleList",), never=("unnamed tensor",))


def test_without_optimizer_it_still_says_so():
    """Without optimizer=, the unregistered layer is still found from the model the caller holds."""
    net, optimizer, loss = train_step()
    expect(gl.explain(net.hids[1][0].bias, loss), reasons=("unregistered_module",), tensor="net.hids[1][0].bias",
           fix=("nn.ModuleList",))


def test_registered_classifier_is_not_blamed():
    """The classifier, registered as an attribute, gets a plain grad_ok answer without the list diagnosis."""
    net, optimizer, loss = train_step()
    expect(gl.explain(net.classifier.weight, loss, optimizer=optimizer), reason="grad_ok",
           not_reasons=("unregistered_module", "not_in_optimizer"))
