"""The first module gets no gradient because torch.max(...)[1] (argmax indices) sits between it and the loss.

Address: https://github.com/pytorch/pytorch/issues/1339
Title: Backprop through argmax

What went wrong: the output of a first module is argmax'ed (torch.max(y_p, 1)[1]) and fed into a
second module; after loss.backward() the second module's parameters have gradients, but the first
module's param.grad is None (the user hit AttributeError on param.grad.data).

Accepted answer (apaszke): argmax is not differentiable (its derivative would be zero anyway). The
usual way out (not from the thread): a soft relaxation such as softmax or Gumbel-softmax.

Which op cut the path is known from a trace; without one graphlens sees only that the loss does not
reach the weight, and must not assert which kind of cut it was.
"""

import pytest
import torch
from torch import nn

import graphlens as gl
from _helpers import expect


def argmax_between_modules():
    torch.manual_seed(0)
    first_model = nn.Linear(4, 3)
    second_model = nn.Embedding(3, 2)
    x = torch.randn(5, 4)
    y_p = first_model(x)
    y_p = torch.max(y_p, 1)[1]              # argmax indices (int64)
    loss = second_model(y_p).sum()
    loss.backward()
    return first_model, second_model, loss


def test_plain_answer_says_the_loss_does_not_reach_the_weight():
    """explain(first_model.weight, loss) says loss does not depend on first_model.weight (the program: second_model learns)."""
    first_model, second_model, loss = argmax_between_modules()
    assert second_model.weight.grad is not None and first_model.weight.grad is None
    expect(gl.explain(first_model.weight, loss), reason="not_reachable", tensor="first_model.weight",
           not_reasons=("feeds_other_root",))


def test_plain_answer_does_not_assert_a_detach_or_no_grad_cut():
    """Without a trace, a list of possible cuts includes an integer result such as argmax, or names no kind at all."""
    first_model, second_model, loss = argmax_between_modules()
    e = gl.explain(first_model.weight, loss)
    if "detach" in str(e) or "no_grad" in str(e):
        expect(e, says=("integer",))


def test_traced_answer_names_the_max_indices_as_the_cut():
    """With a trace, the answer is not_reachable + cut_by_integer_op at max, not 'feeds another output'."""
    with gl.trace() as tr:
        first_model, second_model, loss = argmax_between_modules()
    expect(gl.explain(first_model.weight, tr), reason="not_reachable", reasons=("cut_by_integer_op",),
           op=("max", "argmax"), says=("max",), not_reasons=("feeds_other_root",),
           never_fix=("(loss1 + loss2).backward()",))


def test_traced_line_is_the_max_line():
    """With a trace, e.line is the torch.max(y_p, 1)[1] line where the cut happens."""
    with gl.trace() as tr:
        first_model, second_model, loss = argmax_between_modules()
    expect(gl.explain(first_model.weight, tr), line="torch.max(y_p, 1)[1]")
