"""A value sent through numpy (.detach().numpy() then torch.from_numpy) comes back without a graph.

Address: https://github.com/utiasSTARS/liegroups/issues/4
Title: Can't call numpy() on Variable that requires grad. Use var.detach().numpy() instead.

What went wrong: liegroups validated a predicted rotation with numpy inside the loss, which raised
"Can't call numpy() on Tensor that requires grad"; the maintainer added .detach() before .numpy()
for the check. A user who "fixes" the value they differentiate the same way cuts it: the numpy
round trip detaches it, and the loss has no path back to the network.

Accepted answer: only the check may go through numpy; the differentiable value must stay a tensor
(torch ops such as torch.atan2), or use the unchecked constructor.

The round trip happens in a helper function: a trace sees it; without one it can only be read
from the user's code, as a lead.
"""

import numpy as np
import pytest
import torch
from torch import nn

from _helpers import HOW, expect, explained


def angle_from_matrix(R):
    R_np = R.detach().numpy()                        # the "fix" suggested by the error message
    theta = np.arctan2(R_np[..., 1, 0], R_np[..., 0, 0])
    return torch.from_numpy(theta)


def numpy_detach_in_loss():
    torch.manual_seed(0)
    net = nn.Linear(2, 4)
    rotation_ab_pred = net(torch.randn(3, 2)).view(3, 2, 2)
    rvec_ab_pred = angle_from_matrix(rotation_ab_pred)
    loss = (rvec_ab_pred ** 2).mean()
    loss.backward()


@pytest.mark.parametrize("how", HOW)
def test_says_nothing_false_about_the_cut(how):
    """explain_error says no_grad_fn on loss, that the value lost its history, and claims no no_grad region."""
    expect(explained(numpy_detach_in_loss, how), reason="no_grad_fn", tensor="loss", says=("without history",),
           not_reasons=("created_in_no_grad", "cut_by_no_grad"))


def test_plain_answer_gives_the_round_trip_as_a_lead():
    """Without a trace, the from_numpy read from the user's code is given as a lead, said conditionally."""
    expect(explained(numpy_detach_in_loss), reasons=("cut_by_python_value",), op=("from_numpy", "torch.from_numpy", "numpy"),
           line=("torch.from_numpy(theta)", "R.detach().numpy()"), says=("If ",))


def test_traced_answer_does_not_deny_the_network_output():
    """With a trace, the answer does not say the loss came from nothing that required grad."""
    expect(explained(numpy_detach_in_loss, "traced"), never=("None of the tensors it was computed from required grad",))


def test_traced_answer_names_the_numpy_round_trip():
    """With a trace, the answer is no_grad_fn + cut_by_python_value at .numpy()/from_numpy, in angle_from_matrix."""
    expect(explained(numpy_detach_in_loss, "traced"), reason="no_grad_fn", reasons=("cut_by_python_value",),
           op=("numpy", "from_numpy", "torch.from_numpy"),
           line=("R_np = R.detach().numpy()", "torch.from_numpy(theta)"), says=("numpy",))


@pytest.mark.parametrize("how", HOW)
def test_fix_does_not_ask_for_requires_grad_again(how):
    """The fix does not tell the user to set requires_grad=True on parameters that have it."""
    expect(explained(numpy_detach_in_loss, how), never_fix=("requires_grad=True",))
