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


def traced_data_alias():
    """The case's program inside a trace."""
    with gl.trace() as tr:
        a = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
        out = a.sigmoid()
        c = out.data
        c.zero_()
        loss = out.sum()
        loss.backward()
    return a, tr


@pytest.mark.parametrize("ask", ["name", "tensor"])
def test_traced_answer_says_sigmoid_saved_out_and_c_zero_changed_it(ask):
    """With a trace, the answer says SigmoidBackward0 saved out, c.zero_() changed it through c = out.data: silently wrong."""
    a, tr = traced_data_alias()
    assert torch.equal(a.grad, torch.zeros(3))  # (torch's own wrong gradient: sigmoid's backward read the zeroed out)
    e = gl.explain("a" if ask == "name" else a, tr)
    expect(e, reasons=("modified_through_data",), tensor="a", op="zero_",
           says=("SigmoidBackward0 saved out", "c = out.data", "c.zero_()", "silently wrong"), fix=("clone()", "detach()"))


def test_traced_answer_claims_no_wrong_gradient_when_no_op_saved_the_changed_tensor():
    """Where no op on the path saved out (sum saves no tensor), the .data write leaves the gradient right, and the answer says nothing is wrong."""
    with gl.trace() as tr2:
        b = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
        out = b * 2  # (MulBackward0 by a number saves no tensor of b's)
        c = out.data
        c.zero_()
        out.sum().backward()
    assert torch.equal(b.grad, torch.full((3,), 2.0))  # torch: right
    expect(gl.explain("b", tr2), reasons=("grad_ok",), not_reasons=("modified_through_data",), never=("silently wrong",))
