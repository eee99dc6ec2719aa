"""A custom Function pads its input in forward, and its backward returns the gradient of the padded shape.

Address: https://github.com/hszhao/SAN/issues/3
Title: AggregationRefpadBackward failed

What went wrong: SAN's aggregation with reflection padding is a custom autograd.Function; for inputs
whose height differs from their width, loss.backward() failed with "Function AggregationRefpadBackward
returned an invalid gradient at index 0 - got [2, 8, 28, 44] but expected shape compatible with
[2, 8, 24, 44]": the backward returned a gradient the size of the padded input for the unpadded one.

Accepted answer (hszhao): four typos in the backward path; fixed so that backward returns the gradient
of the input's own shape.

The failed backward's graph holds the Function's node, which knows its class: graphlens reads the
return line of its backward.
"""

import pytest
import torch
import torch.nn.functional as F

from _helpers import HOW, expect, explained, note


class AggregationRefpad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, pad):
        ctx.pad = pad
        return F.pad(input, (0, 0, pad, pad), mode="reflect")

    @staticmethod
    def backward(ctx, grad_output):
        grad_input = grad_output.clone()  # the padded rows are neither folded back nor cut off
        return grad_input, None


def custom_fn_padded_grad_shape():
    torch.manual_seed(0)
    x = torch.randn(1, 2, 4, 5, requires_grad=True)
    out = AggregationRefpad.apply(x, 2)
    loss = out.pow(2).mean()
    loss.backward()


@pytest.mark.parametrize("how", HOW)
def test_names_the_function_and_the_shapes(how):
    """explain_error is custom_fn_grad_shape on AggregationRefpadBackward, with both shapes."""
    expect(explained(custom_fn_padded_grad_shape, how), reason="custom_fn_grad_shape", op="AggregationRefpadBackward",
           says=("AggregationRefpad", "[1, 2, 8, 5]", "[1, 2, 4, 5]"))


def test_line_is_the_return_of_backward():
    """e.line is the return statement of AggregationRefpad.backward, read from its source."""
    expect(explained(custom_fn_padded_grad_shape), line="return grad_input, None")


@pytest.mark.parametrize("how", HOW)
def test_fix_asks_for_the_input_shape(how):
    """The fix asks backward for a gradient of the input's shape [1, 2, 4, 5], not for anomaly mode or retain_graph."""
    expect(explained(custom_fn_padded_grad_shape, how), fix=("[1, 2, 4, 5]", "padding"),
           never_fix=("anomaly", "retain_graph"))


def test_note_explains_it():
    """The note of trace(explain_errors=True) explains the shape instead of quoting an unknown message."""
    expect(note(custom_fn_padded_grad_shape), says=("AggregationRefpad",), never=("does not recognise",))
