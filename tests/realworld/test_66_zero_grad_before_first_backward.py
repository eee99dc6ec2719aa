"""w1.grad.data.zero_() before the first loss.backward(): w1.grad is still None.

Address: https://github.com/jcjohnson/pytorch-examples/issues/7
Title: PyTorch: Variables and autograd - NoneType error

What went wrong: the two-layer network example zeroed the gradients by hand at the top of each
iteration, w1.grad.data.zero_() before loss.backward(). On the first iteration no backward had run, so
w1.grad was None and the line raised "AttributeError: 'NoneType' object has no attribute 'data'".

Accepted answer (tschoy, and the maintainer's fix): move the two zeroing lines to the end of the loop,
after the update, as the README had it: .grad exists only after the first backward.

graphlens reads from the code that the failing line comes before the loop's only backward call.
"""

import pytest
import torch

from _helpers import expect, explained


def zero_grad_before_first_backward():
    torch.manual_seed(0)
    N, D_in, H, D_out = 4, 3, 5, 2
    x = torch.randn(N, D_in)
    y = torch.randn(N, D_out)
    w1 = torch.randn(D_in, H, requires_grad=True)
    w2 = torch.randn(H, D_out, requires_grad=True)
    learning_rate = 1e-6
    for t in range(2):
        y_pred = x.mm(w1).clamp(min=0).mm(w2)
        loss = (y_pred - y).pow(2).sum()
        # Manually zero the gradients before running the backward pass
        w1.grad.data.zero_()
        w2.grad.data.zero_()
        loss.backward()
        w1.data -= learning_rate * w1.grad.data
        w2.data -= learning_rate * w2.grad.data


def test_names_w1_and_the_backward_it_comes_before():
    """explain_error is grad_is_none + backward_not_run on w1, at the zeroing line, naming loss.backward() after it."""
    expect(explained(zero_grad_before_first_backward), reason="grad_is_none", reasons=("backward_not_run",), tensor="w1",
           line="w1.grad.data.zero_()", says=("loss.backward()", "first"), not_reasons=("not_reachable", "requires_grad_false"))


def test_fix_moves_the_zeroing_after_backward():
    """The fix moves the zeroing after the backward (or guards it), not a check of why w1 gets no gradient."""
    expect(explained(zero_grad_before_first_backward), fix=(("after loss.backward()", "end of the iteration"), "is not None"),
           never_fix=("graphlens.explain(",))
