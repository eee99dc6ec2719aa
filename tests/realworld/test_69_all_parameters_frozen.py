"""Every parameter was frozen for fine-tuning, so the loss has no graph: "(parameters do)" would be a false premise.

Address: https://github.com/cfzd/Ultra-Fast-Lane-Detection/issues/282
Title: 模型冻结 (freezing the model)

What went wrong: to fine-tune, the poster loaded a checkpoint and set requires_grad = False on every
parameter of the model (for param in model.parameters()), then trained: loss.backward() failed with
"element 0 of tensors does not require grad and does not have a grad_fn".

Accepted answer (cfzd): freeze only the part that should stay fixed and give the optimizer only the
parameters that still require grad (filter(lambda p: p.requires_grad, net.parameters())); the poster
then froze net.model only and trained the rest.

graphlens used to add "make sure the leaves require grad (parameters do)" — here no parameter does.
A trace sees that every parameter the loss was computed from is frozen; without one, that every
parameter among the caller's variables is (a live fact, said conditionally for the loss).
"""

import pytest
import torch
from torch import nn

from _helpers import HOW, expect, explained


def freeze_everything():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    for param in net.parameters():
        param.requires_grad = False
    x, y = torch.randn(5, 4), torch.randint(0, 2, (5,))
    loss = nn.functional.cross_entropy(net(x), y)
    loss.backward()


@pytest.mark.parametrize("how", HOW)
def test_says_every_parameter_is_frozen(how):
    """explain_error says no_grad_fn + frozen_parameters, naming a frozen parameter."""
    expect(explained(freeze_everything, how), reason="no_grad_fn", tensor="loss", reasons=("frozen_parameters",),
           says=("frozen", "weight"))


@pytest.mark.parametrize("how", HOW)
def test_does_not_claim_parameters_require_grad(how):
    """Neither the answer nor its fix claims the parameters require grad, or blames detach/no_grad."""
    expect(explained(freeze_everything, how), never=("(parameters do)",),
           not_reasons=("cut_by_detach", "cut_by_no_grad", "created_in_no_grad"))


@pytest.mark.parametrize("how", HOW)
def test_fix_unfreezes_and_filters_the_optimizer(how):
    """The fix unfreezes what should learn and filters the optimizer, and warns off loss.requires_grad = True."""
    expect(explained(freeze_everything, how), fix=("requires_grad_(True)", "filter"),
           never_fix=("(parameters do)",))


def test_traced_answer_names_the_loss_parameters():
    """With a trace, the frozen parameters named are the ones the loss was computed from (its graph's)."""
    expect(explained(freeze_everything, "traced"), says=("computed from the parameters",))


def test_traced_answer_names_parameters_by_module_path():
    """With a trace, the last parameter is named net.2.bias, not param (the loop variable that last held it)."""
    expect(explained(freeze_everything, "traced"), says=("net.2.bias",), never=(", param,", "param, and"))
