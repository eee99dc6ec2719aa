"""A hand-written step w = w - lr * w.grad inside no_grad rebinds w to a tensor without grad.

Address: https://hao-yiwen.github.io/yiwen-blog-website/en/docs/ai/frameworks/pytorch/common-errors
Title: PyTorch 常见错误与陷阱 (PyTorch common errors and pitfalls) (gradient update: in-place vs reassignment)

What went wrong: the update w = w - lr * w.grad inside torch.no_grad() binds w to a brand-new
tensor made under no_grad, which does not require grad. The first step works; on the next
iteration the loss depends on nothing that requires grad, and backward fails with "element 0 of
tensors does not require grad and does not have a grad_fn".

Accepted answer: update in place inside no_grad (w -= lr * w.grad, then w.grad.zero_()), or use an
optimizer.

A trace sees w made under no_grad on the update line; without one, graphlens can read the rebinding
from the user's code (and must say that it read it there).
"""

import pytest
import torch

from _helpers import HOW, expect, explained, note


def rebind_update_in_no_grad():
    x = torch.tensor([1.0, 2.0, 3.0])
    y = torch.tensor([2.0, 4.0, 6.0])
    w = torch.tensor(0.5, requires_grad=True)
    lr = 0.01
    for step in range(2):
        loss = ((w * x - y) ** 2).mean()
        loss.backward()
        with torch.no_grad():
            w = w - lr * w.grad          # rebinding: w becomes a new tensor without grad
    return w


def test_plain_answer_says_nothing_false():
    """Without a trace, explain_error says no_grad_fn, blames no detach(), and qualifies what it could not see."""
    expect(explained(rebind_update_in_no_grad), reason="no_grad_fn", says=(("Either", "read your code"),),
           not_reasons=("made_by_detach", "cut_by_detach"))


@pytest.mark.parametrize("how", HOW)
def test_rebinding_is_found_with_an_in_place_fix(how):
    """explain_error adds rebound_leaf on the update line and proposes w -= ... under torch.no_grad()."""
    expect(explained(rebind_update_in_no_grad, how), reason="no_grad_fn", reasons=("rebound_leaf",),
           line="w = w - lr * w.grad", says=("w",), fix=("with torch.no_grad()", "-="),
           never_fix=("requires_grad=True",))


@pytest.mark.parametrize("how", HOW)
def test_names_w_as_the_tensor(how):
    """The answer's tensor is w, the rebound variable."""
    expect(explained(rebind_update_in_no_grad, how), tensor="w")


def test_note_says_w_was_rebound():
    """The note of trace(explain_errors=True) names w and the in-place update."""
    expect(note(rebind_update_in_no_grad), says=("w", "-="))
