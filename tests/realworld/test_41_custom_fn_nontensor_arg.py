"""A custom Function with a non-tensor argument must return None for it from backward.

Address: https://github.com/1zb/pytorch-image-comp-rnn/issues/4
Title: RuntimeError: function SignBackward returned an incorrect number of gradients

What went wrong: the binarizer's custom Function Sign takes the input and a non-tensor flag
(is_training); its backward returned only grad_output, one value for two forward arguments, which
raises "function SignBackward returned an incorrect number of gradients (expected 2, got 1)".

Accepted answer (author): return a gradient for every forward argument, None for the flag:
return grad_output, None.
"""

import pytest
import torch

from _helpers import HOW, expect, explained


class Sign(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, is_training=True):
        return input.sign()

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output                                  # should be: grad_output, None


def custom_fn_nontensor_arg():
    x = torch.randn(4, requires_grad=True)
    loss = Sign.apply(x, True).sum()
    loss.backward()


@pytest.mark.parametrize("how", HOW)
def test_says_to_return_none_for_the_flag(how):
    """explain_error names Sign's backward and asks for one value per forward argument, None for a non-tensor."""
    expect(explained(custom_fn_nontensor_arg, how), reason="wrong_number_of_grads",
           op=("SignBackward", "Sign", "Sign.backward"), says=("Sign",), fix=("None",))


def test_line_is_the_return_of_backward():
    """e.line is Sign.backward's return statement."""
    expect(explained(custom_fn_nontensor_arg), line="return grad_output")
