"""Aggregation cross-entropy takes torch.log of softmax scores summed over time: 0 for an absent class, so -inf.

Address: https://github.com/summerlvsong/Aggregation-Cross-Entropy/issues/2
Title: Need Help! Loss nan

What went wrong: the ACE loss sums each class's softmax score over all time steps and takes
torch.log(input). For a class that shows in no time step the summed score is (numerically) 0, log gives
-inf, and -inf times the zero label is NaN: the loss is NaN.

Accepted answer: (the author, and TangDL) make sure input > 0 before the log (the fixed code adds a small
constant).

The loss is NaN in the forward pass, so the trace names the log and the 0 it took; without a trace
graphlens only says the loss is NaN.
"""

import torch

import graphlens as gl
from _helpers import expect


def aggregation_cross_entropy():
    logits = torch.tensor([[[2.0, 1.0, -1e4]], [[1.0, 3.0, -1e4]]], requires_grad=True)  # T=2, B=1, C=3
    label = torch.tensor([[1.0, 1.0, 0.0]])  # class 2 appears in no time step
    T = logits.shape[0]
    with gl.trace() as tr:
        probs = logits.softmax(2)
        input = probs.sum(0) / T
        loss = (-torch.sum(torch.log(input) * label)) / 1
        loss.backward()
    return loss, logits, tr


def test_nan_loss_names_the_log_of_zero():
    """explain(loss, tr) is nonfinite_forward + log_of_zero at log, on the loss line, reading input[0, 2] = 0."""
    loss, logits, tr = aggregation_cross_entropy()
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("log_of_zero",), tensor="loss", op="log",
           line="torch.log(input) * label", says=("loss is NaN", "-inf at log's result[0, 2]", "input[0, 2] = 0"))


def test_gradient_answer_points_at_the_loss():
    """explain(logits, tr) says logits.grad is not finite because the loss is NaN, and names the same log."""
    loss, logits, tr = aggregation_cross_entropy()
    expect(gl.explain(logits, tr), reason="nonfinite_forward", reasons=("log_of_zero",), op="log",
           says=("the loss it comes from, loss, is NaN",), fix=("input.clamp(min=eps)", "input + eps"))


def test_without_a_trace_it_says_only_that_the_loss_is_nan():
    """Without a trace: the loss is NaN, graphlens cannot tell which op made it, and it names no op."""
    loss, logits, _ = aggregation_cross_entropy()
    expect(gl.explain(loss), reason="nonfinite_forward", says=("loss is NaN", "cannot tell"), never=("log", "softmax"))
