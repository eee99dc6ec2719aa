"""The gradient through torch.round is silently zero.

Address: https://discuss.pytorch.org/t/torch-round-gradient/28628/4
Title: Torch.round() gradient

What went wrong: the poster asked what backward does through torch.round; b = torch.round(a);
b.backward() gives a.grad = 0. The gradient is zero everywhere, so nothing before a rounding step
can learn; later posters wanted to round network outputs and still train.

Accepted answer (colesbury): round is a step function with derivative 0 almost everywhere; use a
straight-through estimator (x + (x.round() - x).detach()) or a custom Function to get a signal.
"""

import pytest
import torch

import graphlens as gl
from _helpers import expect


def round_zero_grad():
    a = torch.tensor(1.5)
    a.requires_grad_()
    b = torch.round(a)
    b.backward()
    return a, b


def test_gradient_is_set_through_round():
    """explain(a, b) says a.grad is set, through RoundBackward0 (the program itself: it is 0)."""
    a, b = round_zero_grad()
    assert a.grad.item() == 0.0
    expect(gl.explain(a, b), reason="grad_ok", tensor="a", says=("RoundBackward0",),
           not_reasons=("zero_grad_set_none",))


def test_says_round_has_zero_derivative():
    """The answer says round's derivative is zero almost everywhere and proposes a straight-through estimator."""
    a, b = round_zero_grad()
    expect(gl.explain(a, b), op=("RoundBackward0", "round"), says=("zero",), fix=("straight-through",))
