"""z = y.item() is a Python float, so z.backward() fails with AttributeError.

Address: https://deepinout.com/pytorch/pytorch-questions/75_pytorch_runtime_error_element_0_of_tensors_does_not_require_grad_and_does_not_have_a_grad_fn.html
Title: Pytorch 运行时错误 – 张量的第0个元素既不需要梯度也没有梯度函数 (element 0 of tensors does not require grad ...)

What went wrong: the article's first example takes y = torch.sin(x), converts it with
z = y.item() and calls z.backward(). .item() returns a Python float, which has no graph and no
backward method, so the call fails with AttributeError: 'float' object has no attribute
'backward' (the article files it under the "element 0" error).

Accepted answer: call backward on the tensor (y.backward()); use .item() only for logging.

The .item() call is seen by a trace (e.op "item", its line); without one graphlens sees a float in
the failing line, and y (with z's value) in the raising frame.
"""

import pytest
import torch

from _helpers import HOW, expect, explained, note


def item_then_backward():
    x = torch.tensor([1.0], requires_grad=True)
    y = torch.sin(x)
    z = y.item()
    z.backward()


@pytest.mark.parametrize("how", HOW)
def test_says_backward_was_called_on_a_float(how):
    """explain_error says z is a Python float (as .item() gives) on the failing line, and to call backward on a tensor."""
    expect(explained(item_then_backward, how), reason="float_has_no_backward",
           says=("z", "float", ".item()"), line=("z.backward()", "z = y.item()"), fix=("backward",))


@pytest.mark.parametrize("how", HOW)
def test_fix_names_the_tensor_z_came_from(how):
    """The fix is y.backward(): z = y.item() is in the raising frame."""
    expect(explained(item_then_backward, how), fix=("y.backward()",))


def test_traced_answer_names_item():
    """With a trace, e.op is item and e.line the z = y.item() line."""
    expect(explained(item_then_backward, "traced"), reason="float_has_no_backward", op="item", line="z = y.item()")


def test_note_is_attached_to_the_attribute_error():
    """trace(explain_errors=True) attaches a note to the AttributeError."""
    expect(note(item_then_backward), says=("float", "item()"))
