"""laterals[i - 1] += F.interpolate(...) writes into a ReLU output that ReLU's backward saved.

Address: https://github.com/lyongo/NWPU-MOC/issues/4
Title: gradient computation problems

What went wrong: the FPN head builds ReLU'd lateral maps and merges them top-down with
laterals[i - 1] += F.interpolate(laterals[i], ...). The += writes into a ReLU output that ReLU's
backward saved, so backward fails with "... output 0 of ReluBackward0, is at version 1; expected
version 0". Switching inplace=False on the ReLUs did not help.

Accepted answer: write laterals[i - 1] = laterals[i - 1] + F.interpolate(...).
"""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from _helpers import HOW, expect, explained, note


def fpn_lateral_iadd():
    torch.manual_seed(0)
    convs = nn.ModuleList([nn.Conv2d(2, 2, 1) for _ in range(2)])
    feats = [torch.randn(1, 2, 4, 4), torch.randn(1, 2, 2, 2)]
    laterals = [F.relu(conv(f)) for conv, f in zip(convs, feats)]
    for i in range(len(laterals) - 1, 0, -1):
        prev_shape = laterals[i - 1].shape[2:]
        laterals[i - 1] += F.interpolate(laterals[i], size=prev_shape, mode="nearest")
    loss = sum(l.sum() for l in laterals)
    loss.backward()


@pytest.mark.parametrize("how", HOW)
def test_names_the_lateral_and_relus_backward(how):
    """explain_error names laterals[0], saved by ReluBackward0 at version 0 and changed to version 1."""
    expect(explained(fpn_lateral_iadd, how), reason="inplace_saved", tensor="laterals[0]",
           says=("ReluBackward0", "version 0", "version 1"))


def test_note_names_the_inplace_add():
    """The note of trace(explain_errors=True) names laterals[0] and add_."""
    expect(note(fpn_lateral_iadd), says=("laterals[0]", "add_"))


@pytest.mark.parametrize("how", HOW)
def test_op_is_the_saver(how):
    """e.op is ReluBackward0."""
    expect(explained(fpn_lateral_iadd, how), op="ReluBackward0")


def test_traced_line_is_the_inplace_add():
    """With a trace, e.line is the laterals[i - 1] += ... line."""
    expect(explained(fpn_lateral_iadd, "traced"), line="laterals[i - 1] += F.interpolate")
