"""A noise scale sigma = sqrt(var) with var at 0: inf gradient, clip_grad_norm_ makes it NaN, opt.step() writes it, step 2's loss is NaN.

Address: https://github.com/pytorch/pytorch/pull/53843
Title: Raise error in clip_grad_norm_ if norm is non-finite

What went wrong: (the problem the pull request fixes) clip_grad_norm_ passed silently when the
total norm was not finite, scaling the gradients by max_norm / inf = 0, so an infinite gradient became
NaN and the optimizer wrote it into the weights. Here a regression head learns its noise scale as
sqrt(var) with var initialised at 0.

Accepted answer: kurtamohler's pull request makes clip_grad_norm_ raise on a non-finite total norm
(error_if_nonfinite; its default was later set back to False); the cause itself is fixed by keeping the
root's input away from 0.

The NaN in var is written by SGD's add_ in opt.step(), not by the clipping (which changed the
gradient): the update is the step's line.
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


class NoiseHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.mu = nn.Linear(3, 1)
        self.var = nn.Parameter(torch.zeros(1))

    def forward(self, x):
        sigma = torch.sqrt(self.var)
        return self.mu(x), sigma


def clip_then_step_nan_weights():
    torch.manual_seed(0)
    head = NoiseHead()
    opt = torch.optim.SGD(head.parameters(), lr=0.05)
    data = [(torch.randn(4, 3), torch.randn(4, 1)) for _ in range(2)]
    with gl.trace() as tr:
        for x, y in data:
            opt.zero_grad()
            mu, sigma = head(x)
            loss = ((mu - y) ** 2).mean() + sigma.mean()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(head.parameters(), max_norm=1.0)
            opt.step()
    return head, loss, tr


def test_nan_loss_names_the_step_that_wrote_it():
    """explain(loss, tr): opt.step()'s add_ wrote NaN into head.var, never the clipping line as the update."""
    head, loss, tr = clip_then_step_nan_weights()
    assert torch.isnan(loss)
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("nonfinite_parameter", "infinite_derivative"),
           tensor="loss", op="add_", line="opt.step()",
           says=("head.var.grad held inf", "wrote NaN into head.var[0]"),
           never=("max_norm=1.0) at line",))


def test_follows_the_gradient_to_sqrt_in_the_forward_and_the_clipping():
    """It follows the gradient to SqrtBackward0 at sigma = torch.sqrt(self.var) and says clip_grad_norm_ made inf × 0 = NaN."""
    head, loss, tr = clip_then_step_nan_weights()
    expect(gl.explain(loss, tr), says=("SqrtBackward0", "sigma = torch.sqrt(self.var)", "head.var = 0",
                                       "clip_grad_norm_", "inf × 0"),
           never=("(mu, sigma = head(x))",))


def test_fix_adds_eps_and_guards_the_step():
    """The fix: eps in the root, skip the step on a non-finite gradient, error_if_nonfinite=True for the clipping."""
    head, loss, tr = clip_then_step_nan_weights()
    expect(gl.explain(loss, tr), fix=("eps", "skip optimizer.step()", "error_if_nonfinite=True"))
