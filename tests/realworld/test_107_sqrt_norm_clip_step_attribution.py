"""Distance to a learnable center, clipped, then SGD: a point on the center gives a NaN gradient, opt.step() writes it into center.

Address: https://github.com/pytorch/pytorch/pull/53843
Title: Raise error in clip_grad_norm_ if norm is non-finite

What went wrong: (the problem the pull request fixes) a non-finite gradient went through
clip_grad_norm_ without an error and the optimizer wrote it into the weights. Here the first batch
has a point exactly on the center: sqrt of a zero sum of squares sends inf, the square's backward
makes it NaN, clipping leaves a NaN a NaN, and step 2's loss is NaN.

Accepted answer: kurtamohler's pull request makes clip_grad_norm_ raise on a non-finite total norm
(error_if_nonfinite); the cause itself is fixed by eps inside the root, or a norm whose gradient at a
zero vector is finite.

The NaN reaches center through SGD's add_ in opt.step(); the clipping only read and scaled the
gradient, and the answer must not name it as the update.
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


def sqrt_norm_clip_step_attribution():
    torch.manual_seed(0)
    center = nn.Parameter(torch.tensor([1.0, 2.0]))
    opt = torch.optim.SGD([center], lr=0.1)
    batches = [torch.tensor([[1.0, 2.0], [1.0, 2.0]]), torch.tensor([[0.5, 1.0], [2.0, 2.0]])]
    with gl.trace() as tr:
        for pts in batches:
            opt.zero_grad()
            dist = torch.sqrt(((pts - center) ** 2).sum(-1))
            loss = dist.mean()
            loss.backward()
            torch.nn.utils.clip_grad_norm_([center], max_norm=1.0)
            opt.step()
    return center, loss, tr


def test_nan_loss_names_the_step_and_the_parameter():
    """explain(loss, tr): center.grad held NaN after backward pass 1, opt.step()'s add_ wrote it into center; never the clip line."""
    center, loss, tr = sqrt_norm_clip_step_attribution()
    assert torch.isnan(loss)
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("nonfinite_parameter", "infinite_derivative"),
           tensor="loss", op="add_", line="opt.step()",
           says=("center.grad held NaN", "after backward pass 1", "wrote NaN into center[0]"),
           never=("max_norm=1.0) at line",))


def test_follows_the_gradient_to_the_root_of_a_zero_sum_of_squares():
    """The gradient came from SqrtBackward0 on the dist line, at a zero sum of squares (the norm of a zero vector)."""
    center, loss, tr = sqrt_norm_clip_step_attribution()
    expect(gl.explain(loss, tr), says=("SqrtBackward0", "dist = torch.sqrt(((pts - center) ** 2).sum(-1))",
                                       "sum's result[0] = 0", "norm"),
           fix=("eps", "vector_norm", "skip optimizer.step()"))
