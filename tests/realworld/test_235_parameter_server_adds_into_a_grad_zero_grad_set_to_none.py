"""A parameter server sums the trainers' gradients with p.grad += g after optimizer.zero_grad(): since PyTorch 2.0 zero_grad sets .grad to None, and the sum fails on None.

Address: https://github.com/pytorch/examples/pull/1172
Title: fix zero_grad default parameter

What went wrong: the server pre-fills every p.grad with zeros, adds each trainer's gradient into it, steps, and
calls self.optimizer.zero_grad(); with set_to_none=True (the default since 2.0) the next p.grad += g raises
"unsupported operand type(s) for +=: 'NoneType' and 'Tensor'".

Accepted answer: (the merged fix) call optimizer.zero_grad(set_to_none=False).

graphlens reads the class's code: the zero_grad() call that left None there, and set_to_none=False as the fix
(it once said "no backward reached it, or one that ran does not depend on it", both false).
"""

import pytest
import torch
from torch import nn

import graphlens as gl
from _helpers import expect


class BatchUpdateParameterServer:
    def __init__(self):
        self.model = nn.Sequential(nn.Linear(4, 3))
        for p in self.model.parameters():
            p.grad = torch.zeros_like(p)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)

    def update_and_fetch_model(self, grads):
        for p, g in zip(self.model.parameters(), grads):
            p.grad += g
        self.optimizer.step()
        self.optimizer.zero_grad()
        return self.model


def test_names_the_zero_grad_that_left_none():
    """explain_error: grad_is_none + zero_grad_set_none, the zero_grad line read from the class, set_to_none=False as the fix."""
    server = BatchUpdateParameterServer()
    grads = [torch.ones_like(p) for p in server.model.parameters()]
    server.update_and_fetch_model(grads)
    with pytest.raises(TypeError) as info:
        server.update_and_fetch_model(grads)
    expect(gl.explain_error(info.value), reason="grad_is_none", reasons=("zero_grad_set_none",),
           says=("self.optimizer.zero_grad()",), fix=("zero_grad(set_to_none=False)",),
           never=("does not depend on it",))


def test_set_to_none_false_keeps_zeros_to_add_into():
    """The merged fix: zero_grad(set_to_none=False) leaves zero tensors, and the next sum works."""

    class Fixed(BatchUpdateParameterServer):
        def update_and_fetch_model(self, grads):
            for p, g in zip(self.model.parameters(), grads):
                p.grad += g
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=False)
            return self.model

    server = Fixed()
    grads = [torch.ones_like(p) for p in server.model.parameters()]
    server.update_and_fetch_model(grads)
    server.update_and_fetch_model(grads)
    assert all(p.grad is not None for p in server.model.parameters())
