"""mul_ on one of the views returned by unbind is refused.

Address: https://github.com/pytorch/pytorch/issues/49824
Title: (not shown in the stored copy; the issue is about in-place changes on chains of views that should be refused, with an unbind example)

What went wrong: a = rand(10, requires_grad=True).clone(); b = a.unbind(0); changing one of the
views unbind returned in place is forbidden ("Output 0 of Unbind is a view and is being modified
inplace ... returns multiple views"). The issue shows that one more view_as slipped past the check.

Accepted answer: replace the in-place op on the view by an out-of-place one (c = b[0] * 2), or clone
the view before changing it.
"""

import pytest
import torch

from _helpers import HOW, expect, explained, note


def inplace_on_unbind_view():
    a = torch.rand(10, requires_grad=True).clone()
    b = a.unbind(0)
    b[0].mul_(2)
    return b


@pytest.mark.parametrize("how", HOW)
def test_recognises_an_inplace_change_of_an_unbind_view(how):
    """explain_error says output 0 of Unbind, one of several views, was changed in place."""
    expect(explained(inplace_on_unbind_view, how), reason="view_inplace_multi_output", says=("Unbind", "in place"),
           not_reasons=("inplace_leaf", "inplace_saved"))


def test_note_explains_it():
    """The note of trace(explain_errors=True) names Unbind."""
    expect(note(inplace_on_unbind_view), says=("Unbind",))


@pytest.mark.parametrize("how", HOW)
def test_fix_is_about_the_view(how):
    """The fix clones or replaces the view b[0], not the base tensor a."""
    expect(explained(inplace_on_unbind_view, how), fix=("b[0]",), never_fix=("a = a.clone()",))


@pytest.mark.parametrize("how", HOW)
def test_names_the_view(how):
    """The answer names b[0], the view that was changed."""
    expect(explained(inplace_on_unbind_view, how), tensor="b[0]")


@pytest.mark.parametrize("how", HOW)
def test_line_and_op_as_fields(how):
    """e.line is the mul_ line and e.op the in-place mul_."""
    expect(explained(inplace_on_unbind_view, how), line="b[0].mul_(2)", op="mul_")
