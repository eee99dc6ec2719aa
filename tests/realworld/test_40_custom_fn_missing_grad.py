"""A custom autograd.Function whose backward returns one gradient for two inputs.

Address: https://github.com/huawei-noah/AdderNet/issues/21
Title: RuntimeError: function adderBackward returned an incorrect number of gradients (expected 2, got 1)

What went wrong: the repository's custom autograd.Function adder takes two tensors (W_col, X_col)
but its backward, as published, did not return a gradient for each of them, so loss.backward()
failed with "function adderBackward returned an incorrect number of gradients (expected 2, got 1)".

Accepted answer (commenter): return one gradient per forward input: return grad_W_col, grad_X_col.
"""

import pytest
import torch

from _helpers import HOW, expect, explained, note


class adder(torch.autograd.Function):
    @staticmethod
    def forward(ctx, W_col, X_col):
        ctx.save_for_backward(W_col, X_col)
        return -(W_col.unsqueeze(2) - X_col.unsqueeze(0)).abs().sum(1)

    @staticmethod
    def backward(ctx, grad_output):
        W_col, X_col = ctx.saved_tensors
        grad_W_col = ((X_col.unsqueeze(0) - W_col.unsqueeze(2)) * grad_output.unsqueeze(1)).sum(2)
        return grad_W_col                                   # grad for X_col missing


def custom_fn_missing_grad():
    torch.manual_seed(0)
    W_col = torch.randn(2, 3, requires_grad=True)
    X_col = torch.randn(3, 4, requires_grad=True)
    loss = adder.apply(W_col, X_col).sum()
    loss.backward()


@pytest.mark.parametrize("how", HOW)
def test_says_backward_returned_too_few_gradients(how):
    """explain_error names adder's backward, 2 inputs but 1 gradient, and asks for one gradient per input."""
    expect(explained(custom_fn_missing_grad, how), reason="wrong_number_of_grads", op=("adderBackward", "adder", "adder.backward"),
           says=("adder", "2", "1"), fix=(("per input", "for each", "each tensor input"),))


def test_line_is_the_return_of_backward():
    """e.line is backward's return statement (read from the Function's source)."""
    expect(explained(custom_fn_missing_grad), line="return grad_W_col")


def test_note_explains_it():
    """The note of trace(explain_errors=True) explains the count instead of quoting an unknown message."""
    expect(note(custom_fn_missing_grad), says=("adder",), never=("does not recognise",))
