"""loss.requires_grad = True before backward silences the error, but nothing trains: the parameters are frozen.

Address: https://github.com/mazurowski-lab/finetune-SAM/issues/26
Title: RuntimeError: element 0 of tensors does not require grad and does not have a grad_fn

What went wrong: fine-tuning with the model's parameters frozen, loss.backward() failed with
"element 0 of tensors does not require grad"; the poster "solved" it by adding
loss.requires_grad = True before loss.backward(). Backward then runs, but it starts at a leaf: no
parameter gets a gradient.

Accepted answer (haoyudong-97): check that the parameters you want to optimize are enabled for
gradient (requires_grad) rather than forcing the flag on the loss.

The answer for a frozen parameter is that it does not require grad; that the loss is a leaf whose
backward reaches nothing is a fact of the graph, said with or without a trace. It must not tell the
user that parameters require grad.
"""

import pytest
import torch
from torch import nn

import graphlens as gl
from _helpers import expect


def frozen_then_flag():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 1))
    for p in model.parameters():
        p.requires_grad = False
    x, y = torch.randn(5, 4), torch.randn(5, 1)
    loss = nn.functional.mse_loss(model(x), y)
    loss.requires_grad = True
    loss.backward()
    return model, loss


@pytest.mark.parametrize("traced", [False, True])
def test_weight_is_frozen_and_loss_is_a_leaf(traced):
    """explain(model[2].weight, ...): requires_grad_false (frozen parameter) + leaf_root."""
    if traced:
        with gl.trace() as tr:
            model, loss = frozen_then_flag()
        e = gl.explain(model[2].weight, tr)
    else:
        model, loss = frozen_then_flag()
        e = gl.explain(model[2].weight, loss)
    expect(e, reason="requires_grad_false", tensor=("model.2.weight", "model[2].weight"), reasons=("leaf_root",),
           says=("frozen", "loss is a leaf"), never=("(parameters do)",))


def test_plain_answer_reads_the_flag_line():
    """Without a trace, the answer reads loss.requires_grad = True as what made the loss a leaf."""
    model, loss = frozen_then_flag()
    expect(gl.explain(model[2].weight, loss), says=("loss.requires_grad = True",))


def test_fix_unfreezes_the_parameter():
    """The fix turns requires_grad on for the parameter before the forward pass."""
    model, loss = frozen_then_flag()
    expect(gl.explain(model[2].weight, loss), fix=("requires_grad_(True)",))
