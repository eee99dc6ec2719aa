"""A loss's .grad is None after backward because the loss is not a leaf.

Address: https://discuss.pytorch.org/t/loss-grad-is-constant-1/130964
Title: Loss.grad is constant 1?

What went wrong: the poster printed loss.grad after loss.backward() and got None, although
backward starts from a gradient of 1 at the loss. The loss is computed by an operation
(out ** 2), so it is a non-leaf: PyTorch uses that gradient on the way down and drops it. The
input x never asked for gradients, so x.grad is None too.

Accepted answer: only leaves that require grad keep .grad; call loss.retain_grad() before
backward to keep the non-leaf's gradient (it is then 1).
"""

import pytest
import torch
from torch import nn

import graphlens as gl
from _helpers import expect


def nonleaf_loss_grad():
    torch.manual_seed(0)
    model = nn.Linear(1, 1)
    x = torch.randn(1, 1)          # input: a leaf, but requires_grad is False
    out = model(x)
    loss = out ** 2
    loss.backward()
    return model, x, loss


def test_loss_grad_is_none_because_loss_is_not_a_leaf():
    """explain(loss, loss) says loss is a non-leaf made by PowBackward0 and proposes retain_grad()."""
    model, x, loss = nonleaf_loss_grad()
    expect(gl.explain(loss, loss), reason="nonleaf_not_retained", tensor="loss",
           says=("PowBackward0", "not a leaf"), fix=("loss.retain_grad()",),
           never=("zero_grad",), not_reasons=("requires_grad_false",))


def test_input_grad_is_none_because_it_does_not_require_grad():
    """explain(x, loss) says the input x does not require grad (and not that it is a non-leaf)."""
    model, x, loss = nonleaf_loss_grad()
    expect(gl.explain(x, loss), reason="requires_grad_false", tensor="x",
           says=("does not require grad",), never=("not a leaf",), not_reasons=("nonleaf_not_retained",))


def test_names_the_op_that_made_the_loss():
    """The explanation names PowBackward0, the node that made loss, as e.op."""
    model, x, loss = nonleaf_loss_grad()
    expect(gl.explain(loss, loss), op=("PowBackward0", "pow"))
