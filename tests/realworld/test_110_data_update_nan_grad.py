"""A hand-written update w.data -= lr * w.grad after an RMSE loss with a zero error: w becomes NaN through .data.

Address: https://www.tensorweaver.ai/chapters/07-first-training.html
Title: Your First Training Loop (tensorweaver)

What went wrong: the tutorial's three-line gradient descent (loss.backward(), then
w.data -= lr * w.grad and b.data -= lr * b.grad) is used here with a root-mean-square loss. The first
batch is already fitted exactly, so the root is taken at 0, w.grad is NaN, the update writes it into w
through w.data, and the next loss is NaN.

Accepted answer: the page has no answer for this (it teaches the update); the standard fix is eps
inside the root (or the plain mean squared error), and checking the gradient before updating.

A write through .data does not change w's version counter: the trace must still see that w changed,
and must not claim that the next product made NaN from finite inputs.
"""

import torch

import graphlens as gl
from _helpers import expect


def data_update_nan_grad():
    torch.manual_seed(0)
    w = torch.tensor([2.0, -1.0], requires_grad=True)
    b = torch.tensor([0.5], requires_grad=True)
    xs = [torch.tensor([[1.0, 1.0], [2.0, 0.0]]), torch.tensor([[0.0, 1.0], [1.0, 3.0]])]
    ys = [xs[0] @ torch.tensor([2.0, -1.0]) + 0.5, torch.tensor([1.0, 2.0])]  # batch 1: already exact
    lr = 0.1
    with gl.trace() as tr:
        for x, y in zip(xs, ys):
            pred = x @ w + b
            loss = torch.sqrt(((pred - y) ** 2).mean())
            loss.backward()
            w.data -= lr * w.grad
            b.data -= lr * b.grad
            w.grad = None
            b.grad = None
    return w, loss, tr


def test_nan_loss_names_the_data_update_and_w():
    """explain(loss, tr): w.grad held NaN after backward pass 1 and w.data -= lr * w.grad computed an update from it."""
    w, loss, tr = data_update_nan_grad()
    assert torch.isnan(loss) and torch.isnan(w).any()
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("nonfinite_parameter", "infinite_derivative"),
           tensor="loss", line="w.data -= lr * w.grad", says=("w.grad held NaN", "after backward pass 1"),
           never=("from finite inputs", "no variable for"))


def test_follows_the_gradient_to_the_root():
    """The NaN gradient came from SqrtBackward0 on the loss line, where the mean squared error was 0; eps in the root as the fix."""
    w, loss, tr = data_update_nan_grad()
    expect(gl.explain(loss, tr), says=("SqrtBackward0", "loss = torch.sqrt(((pred - y) ** 2).mean())",
                                       "mean's result = 0"),
           fix=("eps",), never_fix=("torch.isfinite).", "Check the inputs of matmul"))
