"""b[1] = 2 after b = a.sigmoid() overwrites the output sigmoid's backward saved.

Address: https://github.com/pytorch/pytorch/issues/9391
Title: backward pass different behaviors with inplace operation

What went wrong: b = a.sigmoid(); b[1] = 2; b.sum().backward() raises the in-place error, while a
hand-written 1/(exp(-a)+1) with the same assignment runs. sigmoid's backward uses its own output b,
which the index assignment overwrote; the hand-written chain's last op saves its input instead.

Accepted answer (explanation; the stored copy shows only the report): expected behaviour, ops that
save their output are invalidated by writing into it; clone before assigning
(b = a.sigmoid().clone()) or build a new tensor.
"""

import pytest
import torch

from _helpers import HOW, expect, explained


def sigmoid_index_assign():
    a = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    b = a.sigmoid()
    b[1] = 2
    b.sum().backward()


def test_plain_answer_names_b_and_sigmoids_backward():
    """Without a trace, the answer names b, saved by SigmoidBackward0, and proposes clone()."""
    expect(explained(sigmoid_index_assign), reason="inplace_saved", tensor="b", says=("SigmoidBackward0",),
           fix=("clone()",))


def test_traced_answer_is_inplace_saved():
    """With a trace, the error is still recognised as a saved tensor changed in place."""
    expect(explained(sigmoid_index_assign, "traced"), reason="inplace_saved")


def test_traced_answer_names_b_and_the_assignment():
    """With a trace, the answer names b, SigmoidBackward0 and the b[1] = 2 line."""
    expect(explained(sigmoid_index_assign, "traced"), tensor="b", op="SigmoidBackward0", line="b[1] = 2",
           says=("SigmoidBackward0",))


def test_plain_op_is_the_saver():
    """Without a trace, e.op is SigmoidBackward0."""
    expect(explained(sigmoid_index_assign), op="SigmoidBackward0")
