"""A register_backward_hook on BatchNorm returns one gradient, but the hook sees (and must return) three.

Address: https://github.com/csdongxian/skip-connections-matter/issues/3
Title: RuntimeError: hook 'backward_hook_norm' has returned an incorrect number of values (got 1, but expected 3)

What went wrong: the attack code normalises gradients with a module backward hook,
backward_hook_norm(module, grad_in, grad_out), which returns (grad_in[0] / std,). Registered with
register_backward_hook on a BatchNorm layer, the hook is given the grad_input of BatchNorm's backward
node, three gradients (input, weight, bias), so returning one raises "has returned an incorrect number of
values (got 1, but expected 3)".

Accepted answer (csdongxian): the hook was meant for the block; for this use it can be dropped. The
standard fix for the error itself: return as many values as grad_in holds (the normalised first one and
the others unchanged), or use register_full_backward_hook, whose grad_input has one entry per input.

The module and its hook are among the program's variables: graphlens names both and reads the hook's
return line.
"""

import pytest
import torch
from torch import nn

from _helpers import HOW, expect, explained

#: register_backward_hook is deprecated: torch warns when it is registered and when the module runs.
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore:.*register_backward_hook.*")


def backward_hook_norm(module, grad_in, grad_out):
    # normalize the gradient to avoid gradient explosion or vanish
    std = torch.std(grad_in[0])
    return (grad_in[0] / std,)


def backward_hook_returns_one_of_three():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(16, 2))
    model[1].register_backward_hook(backward_hook_norm)
    inputs = torch.rand(2, 3, 4, 4, requires_grad=True)
    loss = nn.functional.cross_entropy(model(inputs), torch.tensor([0, 1]))
    loss.backward()


@pytest.mark.parametrize("how", HOW)
def test_names_the_hook_the_module_and_the_counts(how):
    """explain_error is hook_wrong_count on backward_hook_norm, registered on model.1, with 1 of 3 values."""
    expect(explained(backward_hook_returns_one_of_three, how), reason="hook_wrong_count", op="backward_hook_norm",
           says=("model.1", "register_backward_hook", "returned 1", "3"))


def test_line_is_the_return_of_the_hook():
    """e.line is the hook's return statement, read from its source."""
    expect(explained(backward_hook_returns_one_of_three), line="return (grad_in[0] / std,)")


@pytest.mark.parametrize("how", HOW)
def test_fix_returns_every_value_or_uses_a_full_hook(how):
    """The fix returns all 3 values (grad_in[1:] unchanged) or uses register_full_backward_hook."""
    expect(explained(backward_hook_returns_one_of_three, how), fix=("grad_in[1:]", "register_full_backward_hook"),
           never_fix=("anomaly", "retain_graph"))
