"""Elements of a NaN-filled tensor assigned one by one: the NaN at z[0] is the assigned 0 / 0, not the fill the assignment replaced.

Address: https://whosebug.com/question/5957504/PyTorch-backward-on-a-tensor-element-affected-by-nan-in-other-elements
Title: PyTorch backward() on a tensor element affected by nan in other elements

What went wrong: z = torch.full((2,), nan), then z[0] = x * y / y and z[1] = x + y with y = 0; the
reporter wants z[0] to stay NaN, but z[1].backward() leaves x.grad NaN, although z[1] does not use
the division.

Accepted answer: an assignment into a tensor keeps every element differentiable through one node
(CopySlices), so the backward of z[1] passes a zero gradient into the division's backward, and
0 times the infinite derivative of x * y / y at y = 0 is NaN; keep the two results in separate
tensors, or mask the NaN before it reaches the graph.

Two questions: why z is NaN at z[0] (the division wrote it; the fill's NaN there was overwritten,
so naming torch.full is wrong), and why x.grad is NaN (the division's backward, 0 times infinity).
"""

import torch

import graphlens as gl
from _helpers import expect


def assign_into_nan_fill():
    x = torch.tensor(1., requires_grad=True)
    y = torch.tensor(0., requires_grad=True)
    with gl.trace() as tr:
        z = torch.full((2, ), float("nan"))
        z[0] = x * y / y
        z[1] = x + y
        z[1].backward()
    return x, z, tr


def test_z0_is_the_division_that_was_assigned():
    """explain(z, tr): the NaN at z[0] was made by the division assigned there (0 / 0), never by the fill it replaced."""
    x, z, tr = assign_into_nan_fill()
    assert torch.isnan(z[0]) and not torch.isnan(z[1])
    expect(gl.explain(z, tr), reason="nonfinite_forward", reasons=("division_by_zero",), tensor="z", op="div",
           line="z[0] = x * y / y", says=("z[0]", "0 / 0"), never=("full",))


def test_x_grad_is_zero_times_the_infinite_derivative():
    """explain(x, tr): x.grad is NaN from the division's backward: the zero gradient z[1] sent it, times an infinite derivative."""
    x, z, tr = assign_into_nan_fill()
    assert torch.isnan(x.grad)
    expect(gl.explain(x, tr), reason="nonfinite_backward", reasons=("zero_times_inf",), op="div", line="z[0] = x * y / y")


def test_an_element_no_assignment_wrote_keeps_the_fill():
    """Where no assignment wrote the NaN element, the fill that made it is named, at that element."""
    x = torch.tensor([0.0, 1.0], requires_grad=True)
    with gl.trace() as tr:
        z = torch.full((2,), float("nan"))
        z[0] = x[0] * 2
    expect(gl.explain(z, tr), reason="nonfinite_forward", tensor="z", says=("z[1]", "full"), never=("z[0]",))
