"""requires_grad switched on after the forward pass: the graph was built before the flag was set.

Address: https://github.com/facebookresearch/CrypTen/pull/156
Title: Disable tracking of computations on CrypTensors for which requires_grad is False

What went wrong: the pull request shows the PyTorch behaviour CrypTen adopted: a = torch.randn(5);
b = a.exp().sum(); a.requires_grad = True; b.requires_grad = True; b.backward() leaves a.grad None.
Setting the flag after b was computed does not reach back into the computation that already ran;
without b.requires_grad = True, b.backward() fails with "element 0 of tensors does not require grad".

Accepted answer (the PR's description): PyTorch records an operation only if an input requires grad
when it runs, so requires_grad must be set before the forward computation.

The right answer is about the order, not that a "does not require grad" (it does, now): a trace sees
that exp recorded no graph although a requires grad now; without one, the code shows the flag set on
a later line than the one that used a (a lead). b.requires_grad = True also makes b a leaf: its
backward reaches nothing but b.
"""

import pytest
import torch

import graphlens as gl
from _helpers import HOW, expect, explained


def flag_after_forward():
    a = torch.randn(5)
    b = a.exp().sum()
    a.requires_grad = True
    b.backward()


def flag_after_forward_and_leaf_b():
    a = torch.randn(5)
    b = a.exp().sum()
    a.requires_grad = True
    b.requires_grad = True
    b.backward()
    return a, b


@pytest.mark.parametrize("how", HOW)
def test_error_says_the_flag_came_too_late(how):
    """explain_error says no_grad_fn + requires_grad_set_late, and never that a does not require grad."""
    expect(explained(flag_after_forward, how), reason="no_grad_fn", tensor="b", reasons=("requires_grad_set_late",),
           says=(("before the flag was set", "after"),), never=("a does not require grad", "do not require grad"),
           never_fix=("(parameters do)",))


def test_plain_error_names_the_late_flag_line():
    """Without a trace, the lead is the line that sets a.requires_grad after the line that used a."""
    expect(explained(flag_after_forward), line="a.requires_grad = True", says=("b = a.exp().sum()",))


def test_traced_error_names_the_op_that_ran_before_the_flag():
    """With a trace, the answer names exp, the op that used a before its flag was set."""
    expect(explained(flag_after_forward, "traced"), op="exp", says=("exp",))


@pytest.mark.parametrize("how", HOW)
def test_fix_moves_the_flag_before_the_forward(how):
    """The fix sets requires_grad before the forward pass and recomputes, it does not blame a detach()."""
    expect(explained(flag_after_forward, how), fix=("before the forward",), never_fix=("detach",))


def test_explain_a_says_b_is_a_leaf_and_the_flag_came_late():
    """explain(a, b): b does not reach a; b is a leaf (b.requires_grad = True); a's flag came after b was computed."""
    a, b = flag_after_forward_and_leaf_b()
    assert a.grad is None and b.grad is not None
    expect(gl.explain(a, b), reason="not_reachable", tensor="a", reasons=("leaf_root", "requires_grad_set_late"),
           line="a.requires_grad = True", says=("leaf",), never=("a does not require grad",))


def test_traced_explain_a_names_exp():
    """With a trace, explain(a, tr) names exp at the line that ran before the flag was set."""
    with gl.trace() as tr:
        a, b = flag_after_forward_and_leaf_b()
    expect(gl.explain(a, tr), reason="not_reachable", reasons=("leaf_root", "requires_grad_set_late"), op="exp",
           says=("requires grad now",))


def detached_input_flag_after_forward():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    data = torch.randn(2, 3)
    x = data.detach()  # a fresh leaf to take the gradient of: correct
    loss = model(x).sum()
    x.requires_grad_()
    loss.backward()
    return x, loss


def test_correct_detach_is_not_blamed():
    """Our variant with x = data.detach() (correct) and x.requires_grad_() after the forward: the order is blamed, not detach()."""
    x, loss = detached_input_flag_after_forward()
    expect(gl.explain(x, loss), reason="not_reachable", tensor="x", reasons=("requires_grad_set_late",),
           line="x.requires_grad_()", not_reasons=("cut_by_detach",), never_fix=("detach",))
    with gl.trace() as tr:
        x, loss = detached_input_flag_after_forward()
    expect(gl.explain(x, tr), reason="not_reachable", reasons=("requires_grad_set_late",), op="linear",
           not_reasons=("cut_by_detach", "zero_grad_set_none"), never_fix=("detach",))
