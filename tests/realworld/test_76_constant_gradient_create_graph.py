"""A second derivative of a linear function fails although create_graph=True was passed: the first derivative is a constant.

Address: https://github.com/pytorch/pytorch/issues/32304
Title: Second derivative fails if first derivative happens to be constant

What went wrong: second_deriv(y, x) computes first = autograd.grad(y, x, create_graph=True)[0] and
then differentiates first; for y = x**2 it works, for y = x*2 it fails with "element 0 of tensors
does not require grad and does not have a grad_fn": the derivative of a linear function does not
depend on x, so PyTorch gives it no graph even with create_graph=True.

Accepted answer (the PyTorch maintainers, pytorch#32304 and #73137): by design; the missing graph means
a zero second derivative (treat None / no graph as zero, or use torch.func / allow_unused).

create_graph=True is there: an answer that tells the user to add it would state a false premise.
A trace sees only that first is a gradient without graph (it holds the gradient that flowed into x);
which of the two it is, the code says.
"""

import pytest
import torch

from _helpers import HOW, expect, explained


def second_deriv(y, x):
    first = torch.autograd.grad(y, x, create_graph=True)[0]
    second = torch.autograd.grad(first, x, create_graph=True)[0]
    return second


def linear_second_derivative():
    x = torch.tensor(1.0, requires_grad=True)
    return second_deriv(x * 2, x)


def test_program_quadratic_works_linear_fails():
    """The program itself: x**2 has a second derivative (2), x*2 raises."""
    x = torch.tensor(1.0, requires_grad=True)
    assert second_deriv(x ** 2, x).item() == 2.0
    with pytest.raises(RuntimeError):
        linear_second_derivative()


def test_plain_answer_says_the_gradient_is_a_constant():
    """explain_error reads the call with create_graph=True: no_grad_fn + constant_gradient on first."""
    expect(explained(linear_second_derivative), reason="no_grad_fn", tensor="first", reasons=("constant_gradient",),
           op="grad", line="create_graph=True", says=("constant",))


@pytest.mark.parametrize("how", HOW)
def test_never_says_create_graph_was_missing(how):
    """Neither answer says the gradient was computed without create_graph, which the code passes; both allow a constant."""
    expect(explained(linear_second_derivative, how), reason="no_grad_fn", says=("constant",),
           never=("without create_graph",), not_reasons=("grad_without_create_graph",))


@pytest.mark.parametrize("how", HOW)
def test_fix_does_not_ask_for_create_graph_again(how):
    """The fix does not tell the user to pass create_graph=True, which they pass; it says the second derivative is zero."""
    expect(explained(linear_second_derivative, how), fix=("zero",), never_fix=("Pass create_graph=True",))
