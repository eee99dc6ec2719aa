"""torch.tensor([1], requires_grad=True) fails: [1] makes an integer tensor.

Address: https://github.com/pytorch/pytorch/issues/53466
Title: RuntimeError: Only Tensors of floating point and complex dtype can require gradients

What went wrong: the example at the top of the torch.enable_grad documentation,
x = torch.tensor([1], requires_grad=True), fails: [1] makes an int64 tensor, and integer tensors
cannot require gradients. This message starts with a capital O (the requires_grad_ variant says
"only").

Accepted answer (gchanan): make it floating point, torch.tensor([1.], requires_grad=True); the docs
example was then fixed.
"""

import pytest
import torch

from _helpers import HOW, expect, explained, note


def int_requires_grad():
    x = torch.tensor([1], requires_grad=True)
    with torch.no_grad():
        with torch.enable_grad():
            y = x * 2
    return y


@pytest.mark.parametrize("how", HOW)
def test_says_the_tensor_is_integer(how):
    """explain_error says an integer tensor cannot require grad and proposes a float dtype."""
    expect(explained(int_requires_grad, how), reason="requires_grad_dtype", says=("integer",), fix=("float",))


@pytest.mark.parametrize("how", HOW)
def test_line_is_the_creation(how):
    """e.line is the torch.tensor([1], requires_grad=True) line."""
    expect(explained(int_requires_grad, how), line="torch.tensor([1], requires_grad=True)")


def test_note_says_it_is_integer():
    """The note of trace(explain_errors=True) says the tensor is an integer one."""
    expect(note(int_requires_grad), says=("integer",), never=("does not recognise",))
