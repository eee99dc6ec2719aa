"""torch.autograd.grad over all parameters fails when one of them is not used in forward.

Address: https://github.com/ShiYunyi/Meta-Weight-Net_Code-Optimization/issues/5
Title: RuntimeError: One of the differentiated Tensors appears to not have been used in the graph. Set allow_unused=True if this is the desired behavior.

What went wrong: with their own model, the meta step torch.autograd.grad(pseudo_loss,
pseudo_net.parameters(), create_graph=True) failed. The usual cause, assumed here (the issue does
not show the model): the model has parameters its forward never uses, and autograd.grad refuses to
return a gradient for an input the output does not depend on.

Accepted answer (standard, see the torch.autograd.grad docs): pass allow_unused=True (and treat the
None results as zero) or remove / skip the unused parameters.
"""

import pytest
import torch
from torch import nn

from _helpers import HOW, expect, explained, note


class PseudoNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)
        self.aux = nn.Linear(3, 2)          # defined but never used in forward

    def forward(self, x):
        return self.fc(x)


def autograd_grad_unused_param():
    torch.manual_seed(0)
    pseudo_net = PseudoNet()
    pseudo_loss = pseudo_net(torch.randn(4, 3)).pow(2).mean()
    pseudo_grads = torch.autograd.grad(pseudo_loss, pseudo_net.parameters(), create_graph=True)
    return pseudo_grads


@pytest.mark.parametrize("how", HOW)
def test_unused_input_and_allow_unused(how):
    """explain_error says input 2 is not used by the output and proposes allow_unused=True."""
    expect(explained(autograd_grad_unused_param, how), reason="unused_input", says=("input 2",), fix=("allow_unused=True",))


def test_note_proposes_allow_unused():
    """The note of trace(explain_errors=True) proposes allow_unused=True."""
    expect(note(autograd_grad_unused_param), says=("allow_unused=True",))


@pytest.mark.parametrize("how", HOW)
def test_names_the_unused_parameter(how):
    """The answer names pseudo_net.aux.weight, parameter 2 of pseudo_net.parameters()."""
    expect(explained(autograd_grad_unused_param, how), tensor=("pseudo_net.aux.weight", "aux.weight"), says=("aux.weight",))
