"""Setting requires_grad on the indices returned by torch.max fails: they are integers.

Address: https://github.com/pytorch/pytorch/issues/95110
Title: RuntimeError: only Tensors of floating point and complex dtype can require gradients

What went wrong: the reporter took the indices returned by torch.max (a LongTensor) and tried to
set .requires_grad = True on them, hoping to make the argmax trainable; PyTorch refuses because
integer tensors cannot require gradients.

Accepted answer (ptrblck): expected behaviour, the indices from torch.max are integers and cannot
carry gradients; work with the float values (or a differentiable soft-argmax).

pred is the saved indices of values' MaxBackward0, so the plain call can know it came from max.
"""

import pytest
import torch

from _helpers import HOW, expect, explained, note


def argmax_indices_requires_grad():
    torch.manual_seed(0)
    scores = torch.randn(2, 4, requires_grad=True)
    values, pred = torch.max(scores, dim=1)
    pred.requires_grad = True
    return pred


@pytest.mark.parametrize("how", HOW)
def test_says_pred_is_an_integer_tensor(how):
    """explain_error names pred as an integer tensor that cannot require grad."""
    expect(explained(argmax_indices_requires_grad, how), reason="requires_grad_dtype", tensor="pred", says=("integer",))


def test_note_names_pred():
    """The note of trace(explain_errors=True) names pred."""
    expect(note(argmax_indices_requires_grad), says=("pred", "integer"))


@pytest.mark.parametrize("how", HOW)
def test_fix_does_not_make_a_disconnected_leaf(how):
    """The fix does not turn the indices into a float leaf; it points at the values (or a soft-argmax)."""
    expect(explained(argmax_indices_requires_grad, how), never_fix=("pred.float().requires_grad_()",), fix=("values",))


@pytest.mark.parametrize("how", HOW)
def test_names_max_as_the_integer_op(how):
    """The answer adds cut_by_integer_op: pred holds the indices of torch.max, which carry no gradient."""
    expect(explained(argmax_indices_requires_grad, how), reasons=("cut_by_integer_op",), op=("max", "argmax"),
           line=("values, pred = torch.max(scores, dim=1)", "pred.requires_grad = True"))
