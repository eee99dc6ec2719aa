"""loss1.backward(retain_graph=True); loss2.backward() leaves the sum of both gradients in the shared .grad.

Address: https://discuss.pytorch.org/t/multi-task-learning-whats-the-difference-between-jointly-backward-and-backward-with-retain-graph-true/28162
Title: Multi-task learning: what's the difference between jointly backward and backward with retain_graph=True

What went wrong: the poster had two task losses on a shared body and asked whether
(loss1 + loss2).backward() differs from loss1.backward(retain_graph=True); loss2.backward(). They do
the same: without zero_grad in between, the second backward adds into the shared weights' .grad,
so .grad holds the sum of both tasks' gradients (easy to misread as loss2's alone).

Accepted answer: identical results (the chain rule is linear); separate backwards only add an
implicit accumulation; prefer the joint backward for memory.
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


def multitask_retain_graph_sum():
    torch.manual_seed(0)
    body = nn.Linear(3, 3)
    task1, task2 = nn.Linear(3, 1), nn.Linear(3, 1)
    c = body(torch.randn(4, 3))
    loss1 = task1(c).pow(2).mean()
    loss2 = task2(c).pow(2).mean()
    loss1.backward(retain_graph=True)
    g1 = body.weight.grad.clone()
    loss2.backward()
    return body, loss1, loss2, g1


def test_grad_is_the_sum_of_both_backwards():
    """explain(body.weight) says .grad is the sum of every backward pass since it was cleared."""
    body, loss1, loss2, g1 = multitask_retain_graph_sum()
    assert not torch.equal(body.weight.grad, g1)  # the program itself: loss2 added to loss1's gradient
    expect(gl.explain(body.weight), reason="grad_ok", tensor="body.weight", says=("sum",), fix=("zero_grad()",))


def test_grad_with_loss2_as_root_is_set():
    """explain(body.weight, loss2) says the gradient is set and loss2 reaches body.weight."""
    body, loss1, loss2, g1 = multitask_retain_graph_sum()
    expect(gl.explain(body.weight, loss2), reason="grad_ok", tensor="body.weight",
           not_reasons=("feeds_other_root", "not_reachable"))
