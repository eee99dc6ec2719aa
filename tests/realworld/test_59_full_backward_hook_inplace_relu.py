"""A full backward hook on a layer whose output an in-place ReLU then overwrites: the forward is refused.

Address: https://github.com/f-dangel/singd/issues/56
Title: Bug: Full backward hook incompatible with in-place activations

What went wrong: the SINGD optimizer installs register_full_backward_hook on the model's Conv2d and
Linear layers; on a model Sequential(Conv2d, ReLU(inplace=True)) the forward then fails with "Output 0
of BackwardHookFunctionBackward is a view and is being modified inplace": the full hook passes the
layer's output through an autograd Function, and the in-place ReLU writes into that Function's output
(the upstream report is pytorch/pytorch#61519).

Accepted answer (the maintainer's fix, following the workaround given in pytorch/pytorch#61519): use the
activation out of place, or hook the gradient differently: a forward hook that registers a tensor hook
on the layer's output.

The traceback shows who changed the tensor (ReLU(inplace=True), through F.relu's inplace flag) and the
model's modules show which one holds the full backward hook: no trace is needed.
"""

import pytest
import torch
from torch.nn import Conv2d, ReLU, Sequential

from _helpers import HOW, expect, explained, note


def full_backward_hook_inplace_relu():
    torch.manual_seed(0)
    model = Sequential(Conv2d(1, 1, 3), ReLU(inplace=True))
    grads = []
    model[0].register_full_backward_hook(lambda module, grad_input, grad_output: grads.append(grad_output))  # as SINGD does
    X = torch.rand(2, 1, 5, 5)
    output = model(X)
    output.sum().backward()


@pytest.mark.parametrize("how", HOW)
def test_recognised_as_an_inplace_change_under_a_full_backward_hook(how):
    """explain_error is backward_hook_inplace + inplace_activation, op relu_, naming the ReLU and the hooked layer."""
    expect(explained(full_backward_hook_inplace_relu, how), reason="backward_hook_inplace", reasons=("inplace_activation",),
           op=("relu_", "relu"), says=("model.1", "model.0", "ReLU(inplace=True)", "register_full_backward_hook"))


@pytest.mark.parametrize("how", HOW)
def test_fix_is_an_out_of_place_activation_or_a_tensor_hook(how):
    """The fix is inplace=False for model.1 or a tensor hook from a forward hook, not an anomaly-mode hint."""
    expect(explained(full_backward_hook_inplace_relu, how), fix=("inplace=False", "register_hook"), never_fix=("anomaly",))


def test_note_explains_it():
    """The note of trace(explain_errors=True) names the in-place ReLU instead of quoting an unknown message."""
    expect(note(full_backward_hook_inplace_relu), says=("ReLU(inplace=True)",), never=("does not recognise",))
