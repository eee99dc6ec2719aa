"""Asked why argmax coordinates get no gradient, graphlens must point at argmax, not suggest .float().requires_grad_().

Address: https://github.com/LZGMatrix/BOP19_CDPN_2019ICCV/issues/4
Title: A question about training

What went wrong: the poster turned the network's per-bin scores into coordinates with torch.argmax,
rescaled them with .float(), and computed the loss from them; backward failed ("element 0 of tensors
does not require grad"), although "parameters's requires_grad=True in the model". (Case 23 checks
explain_error on that program; this case asks explain() about the coordinates themselves.)

Accepted answer (LZGMatrix): torch.argmax is non-differentiable; take the loss before torch.argmax.

For the integer indices, "make it a float tensor and call requires_grad_()" is the very mistake: a
new leaf with no link to the model. For the rescaled float coordinates, "create it with
requires_grad=True" is the same mistake. A trace sees argmax cut the path; without one, the code
shows it (a lead).
"""

import pytest
import torch
from torch import nn

import graphlens as gl
from _helpers import expect


def coordinates():
    torch.manual_seed(0)
    net = nn.Linear(4, 3 * 8)
    scores = net(torch.randn(5, 4)).view(5, 3, 8)
    bins = torch.argmax(scores, axis=2)
    coor = 2.0 * bins.float() / (8 - 1) - 1.0
    return net, bins, coor


@pytest.fixture
def traced():
    with gl.trace() as tr:
        net, bins, coor = coordinates()
    return tr, bins, coor


def test_traced_indices_point_at_argmax(traced):
    """explain(bins, tr): requires_grad_false + integer_dtype + cut_by_integer_op at argmax, no .float().requires_grad_() fix."""
    tr, bins, coor = traced
    expect(gl.explain(bins, tr), reason="requires_grad_false", reasons=("integer_dtype", "cut_by_integer_op"),
           op="argmax", line="torch.argmax(scores, axis=2)", never_fix=(".float().requires_grad_()", "requires_grad=True"))


def test_traced_float_coordinates_point_at_argmax(traced):
    """explain(coor, tr): requires_grad_false + cut_by_integer_op at argmax; the fix takes the loss before argmax."""
    tr, bins, coor = traced
    expect(gl.explain(coor, tr), reason="requires_grad_false", reasons=("cut_by_integer_op",), op="argmax",
           fix=("before argmax",), never_fix=("requires_grad=True",),
           never=("A tensor made directly starts with requires_grad=False",))


def test_plain_answer_reads_argmax_as_a_lead():
    """Without a trace, explain(coor) reads argmax from the code, said conditionally, with the same fix."""
    net, bins, coor = coordinates()
    expect(gl.explain(coor), reason="requires_grad_false", reasons=("cut_by_integer_op",), op="argmax",
           says=("If ",), fix=("before argmax",), never_fix=("requires_grad=True",))
