"""A layer frozen with requires_grad = False still moves: its zero .grad and momentum stay in the optimizer.

Address: https://discuss.pytorch.org/t/why-there-is-still-a-small-change-in-frozen-layer-parameters/153740
Title: Why there is still a small change in frozen layer parameters?

What went wrong: the poster froze fc1 by setting requires_grad = False on its parameters, yet its
weights still changed slightly during training. The parameters kept a .grad tensor from earlier
passes (zeroed, not None) and stayed in the optimizer, whose momentum and weight decay kept moving
them at every step.

Accepted answer (the poster's own, from a linked thread): when freezing, also set param.grad = None
and/or leave frozen parameters out of the optimizer.
"""

import pytest
import torch
from torch import nn

import graphlens as gl
from _helpers import expect


def frozen_layer_still_moves():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 1))
    fc1 = model[0]
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-2)
    x = torch.randn(4, 3)
    opt.zero_grad(set_to_none=False)           # one normal step before freezing
    model(x).pow(2).mean().backward()
    opt.step()
    for p in fc1.parameters():                 # freeze
        p.requires_grad = False
    before = fc1.weight.detach().clone()
    opt.zero_grad(set_to_none=False)           # zeros, not None: the frozen grads stay as zero tensors
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()                                 # momentum buffer + weight decay still move fc1
    return model, fc1, opt, loss, before


def test_frozen_weight_does_not_require_grad():
    """explain(fc1.weight, loss, optimizer=opt) says the weight does not require grad (the program: it still moved)."""
    model, fc1, opt, loss, before = frozen_layer_still_moves()
    assert not torch.equal(fc1.weight.detach(), before)
    expect(gl.explain(fc1.weight, loss, optimizer=opt), reasons=("requires_grad_false",),
           tensor=("fc1.weight", "model.0.weight"))


def test_says_the_optimizer_still_moves_the_frozen_weight():
    """The answer is frozen_in_optimizer: .grad is a zero tensor and momentum / weight decay still move it."""
    model, fc1, opt, loss, before = frozen_layer_still_moves()
    expect(gl.explain(fc1.weight, loss, optimizer=opt), reasons=("frozen_in_optimizer",),
           says=("momentum",), fix=("None",), never=("grad is None",))
