"""c = out.data; c.zero_() silently overwrites sigmoid's saved output: the gradient is wrong, no error.

Address: https://github.com/pytorch/pytorch/issues/6990
Title: Differences between .data and .detach

What went wrong: the same program as case 19 with c = out.data. Changes through .data are not
reported to autograd, so c.zero_() silently overwrites sigmoid's saved output and backward
"succeeds" with a.grad computed at the zeroed out: all zeros, a wrong gradient.

Accepted answer (zou3519 and the 0.4 migration guide quoted in the issue): .data is unsafe,
gradients can be silently wrong; use detach() (which raises) or clone().

The alias c is in the caller's variables (same memory as out, a version counter of its own), so
the plain call can know it as well as a trace.
"""

import pytest
import torch

import graphlens as gl
from _helpers import expect


def data_alias_silent_wrong():
    a = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    out = a.sigmoid()
    c = out.data
    c.zero_()
    loss = out.sum()
    loss.backward()
    return a, out, c, loss


def test_gradient_path_goes_through_sigmoid():
    """explain(a, loss) says a got its gradient through SigmoidBackward0 (the program itself: it is all zeros)."""
    a, out, c, loss = data_alias_silent_wrong()
    assert torch.equal(a.grad, torch.zeros(3))  # the silently wrong gradient
    expect(gl.explain(a, loss), tensor="a", says=("SigmoidBackward0",))


@pytest.mark.parametrize("with_root", [True, False], ids=["explain(a, loss)", "explain(a)"])
def test_says_the_saved_output_was_changed_through_data(with_root):
    """The answer says out was changed through c = out.data, so the gradient is wrong; use detach() or clone()."""
    a, out, c, loss = data_alias_silent_wrong()
    e = gl.explain(a, loss) if with_root else gl.explain(a)
    expect(e, reasons=("modified_through_data",), says=(".data", "out"), fix=("clone()",),
           never=("zero_grad",))
