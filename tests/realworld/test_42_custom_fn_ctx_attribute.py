"""A custom Function that keeps its input as a ctx attribute computes a silently wrong gradient after an in-place change.

Address: https://github.com/pytorch/pytorch/issues/37751
Title: Documentation of _CtxMethodMixin: must be tensors?

What went wrong: the issue asks whether ctx.save_for_backward must be given tensors, since a
tutorial said arbitrary objects could be cached. The answer explains what matters: tensors given to
save_for_backward are checked for later in-place changes, a tensor kept as a plain ctx attribute is
not. Here a square Function keeps its input as ctx.x, the input is changed in place, and backward
silently returns a gradient computed from the new values.

Accepted answer (ngimel): use save_for_backward for tensors (in-place changes are then detected);
keep only non-tensor objects as ctx attributes.
"""

import pytest
import torch

import graphlens as gl
from _helpers import expect


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.x = x                          # should be ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        return 2 * ctx.x * grad_output


def custom_fn_ctx_attribute():
    w = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    h = w * 1.0
    y = Square.apply(h)
    h.add_(10.0)                               # changes the tensor the backward will read
    loss = y.sum()
    loss.backward()
    return w, h, loss


def test_gradient_path_goes_through_the_custom_function():
    """explain(w, loss) follows the path through SquareBackward (the program itself: w.grad is wrong)."""
    w, h, loss = custom_fn_ctx_attribute()
    assert torch.equal(w.grad, torch.tensor([22.0, 24.0, 26.0]))  # 2 * (w + 10), not 2 * w
    expect(gl.explain(w, loss), tensor="w", says=("SquareBackward",))


def test_says_the_ctx_attribute_was_changed_in_place():
    """The answer says Square kept h as a ctx attribute, h was changed in place, and save_for_backward would catch it."""
    w, h, loss = custom_fn_ctx_attribute()
    e = gl.explain(w, loss)
    expect(e, reasons=("modified_through_data", "ctx_attribute_changed"), op=("SquareBackward", "Square"),
           says=("ctx.x", "h", "in place"), fix=("save_for_backward",))
    assert e.graph.node(e.cause).name == "SquareBackward"  # the diagram's note sits on the Function's node


def test_a_trace_gives_the_same_answer():
    """Explained from a trace of the program, the answer names the same Function, attribute and tensor."""
    with gl.trace() as tr:
        w, h, loss = custom_fn_ctx_attribute()
    expect(gl.explain(w, tr), reasons=("ctx_attribute_changed",), op=("SquareBackward", "Square"),
           says=("ctx.x", "h"), fix=("save_for_backward",))


def test_no_change_means_no_warning():
    """Without the in-place change (or with it made before the call) the same Function is not blamed."""
    w = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    h = w * 1.0
    loss = Square.apply(h).sum()
    loss.backward()
    expect(gl.explain(w, loss), reason="grad_ok", not_reasons=("ctx_attribute_changed", "modified_through_data"))
    w.grad = None
    h = w * 1.0
    h.add_(10.0)                               # before the call: the Function used the changed value
    loss = Square.apply(h).sum()
    loss.backward()
    assert torch.equal(w.grad, 2 * (w.detach() + 10))  # the gradient is right
    expect(gl.explain(w, loss), reason="grad_ok", not_reasons=("ctx_attribute_changed",))
