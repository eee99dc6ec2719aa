"""c = out.detach(); c.zero_() also zeroes out, which sigmoid's backward saved.

Address: https://github.com/pytorch/pytorch/issues/6990
Title: Differences between .data and .detach

What went wrong: the reporter asked what "in-place changes reported by autograd" means. The
answer's example: out = a.sigmoid(); c = out.detach(); c.zero_() also zeroes out (shared
storage), and out.sum().backward() then fails because sigmoid's backward needs the original out.
(The .data variant of the same program is case 20.)

Accepted answer (zou3519): detach() shares storage and the version counter, so autograd notices
the in-place change and raises instead of computing a wrong gradient; clone() if you need an
independent copy to change.
"""

import pytest
import torch

from _helpers import HOW, expect, explained


def detach_alias_zeroed():
    a = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    out = a.sigmoid()
    c = out.detach()
    c.zero_()
    out.sum().backward()


@pytest.mark.parametrize("how", HOW)
def test_names_out_and_sigmoids_backward(how):
    """explain_error names out, saved by SigmoidBackward0, changed through a detach() alias; fix clone()."""
    expect(explained(detach_alias_zeroed, how), reason="inplace_saved", tensor="out", says=("SigmoidBackward0", "detach()"),
           fix=("clone()",))


def test_plain_answer_names_the_alias_c():
    """Without a trace, the answer says out was changed through c = out.detach()."""
    expect(explained(detach_alias_zeroed), says=("through c", "c = out.detach()"))


def test_traced_answer_names_zero_():
    """With a trace, the answer names zero_ as the in-place operation."""
    expect(explained(detach_alias_zeroed, "traced"), says=("zero_",))


def test_traced_answer_names_the_alias_c():
    """With a trace, the answer still names c and out instead of unnamed tensors."""
    expect(explained(detach_alias_zeroed, "traced"), says=("through c",), never=("unnamed tensor",))


def test_traced_op_and_line():
    """With a trace, e.op is SigmoidBackward0 and e.line the c.zero_() line."""
    expect(explained(detach_alias_zeroed, "traced"), op="SigmoidBackward0", line="c.zero_()")
