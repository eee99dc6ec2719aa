"""y2 = torch.tensor([cosa, cosb]) copies the values into a new tensor without history.

Address: https://discuss.pytorch.org/t/gradient-is-lost-when-use-torch-tensor-t1-t2/23261
Title: Gradient is lost when use torch.tensor([t1, t2])

What went wrong: y1 = cosa + cosb keeps the graph, but y2 = torch.tensor([cosa, cosb]) builds a new
tensor from the values only; y2.sum().backward() fails with "element 0 of tensors does not require
grad and does not have a grad_fn".

Accepted answer (standard; the stored copy shows only the question): torch.tensor copies data and
drops history; use torch.stack([cosa, cosb]) (or torch.cat) to build the vector inside the graph.

The re-wrap is seen by a trace; without one it can only be read from the user's code, as a lead.
"""

import pytest
import torch

from _helpers import HOW, expect, explained

# torch itself warns about the user's torch.tensor([cosa, cosb]); the warning is part of the case.
pytestmark = pytest.mark.filterwarnings("ignore:Converting a tensor with requires_grad=True to a scalar")


def torch_tensor_rewrap():
    a = torch.tensor(0.0)
    b = torch.tensor(0.0)
    a.requires_grad = True
    b.requires_grad = True
    cosa = torch.cos(a)
    cosb = torch.cos(b)
    y1 = cosa + cosb
    y2 = torch.tensor([cosa, cosb])
    y2.sum().backward()


@pytest.mark.parametrize("how", HOW)
def test_says_nothing_false_about_the_cut(how):
    """explain_error says no_grad_fn, that the values lost their history, and blames no detach() or no_grad."""
    expect(explained(torch_tensor_rewrap, how), reason="no_grad_fn", says=("without history",),
           not_reasons=("made_by_detach", "cut_by_detach", "created_in_no_grad", "cut_by_no_grad"))


def test_plain_answer_gives_the_rewrap_as_a_lead():
    """Without a trace, the torch.tensor re-wrap read from the user's code is given as a lead, said conditionally."""
    expect(explained(torch_tensor_rewrap), reasons=("cut_by_python_value",), op=("tensor", "torch.tensor"),
           line="y2 = torch.tensor([cosa, cosb])", says=("If ",), fix=("torch.stack",))


def test_traced_answer_names_the_rewrap():
    """With a trace, the answer is no_grad_fn + cut_by_python_value at torch.tensor, with torch.stack as fix."""
    expect(explained(torch_tensor_rewrap, "traced"), reason="no_grad_fn", reasons=("cut_by_python_value",),
           op=("tensor", "torch.tensor"), line="y2 = torch.tensor([cosa, cosb])", fix=("torch.stack",))


def test_root_is_described_by_the_users_expression():
    """The answer names the root after y2 (y2.sum()), not 'output 0'."""
    expect(explained(torch_tensor_rewrap), says=("y2",), never=("output 0",))


@pytest.mark.parametrize("how", HOW)
def test_fix_does_not_ask_for_requires_grad_again(how):
    """The fix does not tell the user to set requires_grad=True on a and b, which have it."""
    expect(explained(torch_tensor_rewrap, how), never_fix=("requires_grad=True",))
