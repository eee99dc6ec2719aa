"""b = (a > 0.1) is a bool tensor without grad_fn, so a loss built from it cannot backward.

Address: https://github.com/pytorch/pytorch/issues/52250
Title: Keep the requires_grad true after comparison of a matrix with a value

What went wrong: b = (a > 0.1) on a tensor a that requires grad gives b.requires_grad False;
anything computed from b (here a count of the entries above the threshold, used as a loss) has no
graph and backward fails.

Accepted answer (ngimel): comparisons return bool tensors, which are not differentiable; use the
mask to select from a (a[b]) when a differentiable output is needed.

That the comparison made the cut is seen by a trace; without one it can only be read from the
user's code, as a lead.
"""

import pytest
import torch

from _helpers import HOW, expect, explained


def comparison_mask():
    a = torch.randn(3, 3, requires_grad=True)
    b = (a > 0.1)
    loss = b.float().sum()
    loss.backward()


@pytest.mark.parametrize("how", HOW)
def test_says_nothing_false_about_the_cut(how):
    """explain_error says no_grad_fn on loss, blames no detach()/no_grad, and does not deny that a requires grad."""
    expect(explained(comparison_mask, how), reason="no_grad_fn", tensor="loss", says=("integer or bool",),
           not_reasons=("made_by_detach", "cut_by_detach", "created_in_no_grad", "cut_by_no_grad"),
           never=("None of the tensors it was computed from required grad",))


def test_plain_answer_gives_the_comparison_as_a_lead():
    """Without a trace, the comparison read from the user's code is given as a lead, said conditionally."""
    expect(explained(comparison_mask), reasons=("cut_by_integer_op",), line="b = (a > 0.1)", says=("If ",))


def test_plain_lead_names_the_op():
    """Without a trace, e.op of the lead is the forward op's name, as with a trace."""
    expect(explained(comparison_mask), op=("gt", "__gt__", ">"))


def test_traced_answer_names_the_comparison():
    """With a trace, the answer is no_grad_fn + cut_by_integer_op at gt, on the a > 0.1 line."""
    expect(explained(comparison_mask, "traced"), reason="no_grad_fn", reasons=("cut_by_integer_op",),
           op=("gt", "__gt__", ">"), line="b = (a > 0.1)")


@pytest.mark.parametrize("how", HOW)
def test_fix_does_not_ask_for_requires_grad_again(how):
    """The fix does not tell the user to set requires_grad=True on a, which has it."""
    expect(explained(comparison_mask, how), never_fix=("requires_grad=True",))
