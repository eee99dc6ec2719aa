"""self.w = nn.Parameter(...).cuda() stores a non-leaf copy on the module, not a registered parameter.

Address: https://github.com/pytorch/pytorch/issues/20089
Title: [Undesirable behaviour] Allocating a nn.Parameter on gpu inside a nn.Module makes it not to be enlisted as network parameter

What went wrong: in __init__ the reporter wrote self.w = nn.Parameter(torch.ones(10)).cuda(). The
attribute holds the .cuda() copy, a plain non-leaf tensor, so the module has no registered
parameters, the optimizer never sees the real Parameter, and self.w.grad stays None.

Accepted answer: move first and wrap afterwards, nn.Parameter(torch.ones(10).cuda()), or register
on CPU and call module.cuda() (the reporter concluded to allocate on CPU and move later).

Note: CPU only, so .cuda() is replaced by .double() (the same kind of copy node).
"""

import pytest
import torch
from torch import nn

import graphlens as gl
from _helpers import expect


class Gpu(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(10)).double()   # stands in for .cuda()

    def forward(self, x):
        return (self.w * x).sum()


def parameter_copy_in_module():
    gpu = Gpu()
    loss = gpu(torch.arange(10.0, dtype=torch.float64))
    loss.backward()
    return gpu, loss


def test_module_attribute_is_a_copy_of_the_parameter():
    """explain(gpu.w, loss) says the attribute is a copy made by .cuda()/.double() of an unnamed leaf."""
    gpu, loss = parameter_copy_in_module()
    assert list(gpu.parameters()) == []  # the program itself: nothing was registered
    expect(gl.explain(gpu.w, loss), reason="is_a_copy", says=(".cuda()", "unnamed leaf"))


def test_optimizer_does_not_change_the_diagnosis():
    """With an optimizer given, the answer is still that gpu.w is a copy."""
    gpu, loss = parameter_copy_in_module()
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)  # gpu.parameters() is empty
    expect(gl.explain(gpu.w, loss, optimizer=opt), reason="is_a_copy")


def test_names_the_module_attribute():
    """The answer names gpu.w (not 'the tensor t1') and its fix reads as code."""
    gpu, loss = parameter_copy_in_module()
    expect(gl.explain(gpu.w, loss), tensor="gpu.w", says=("gpu.w",), never=("the tensor t1",),
           never_fix=("the tensor =",))


def test_says_the_parameter_is_not_registered():
    """The answer says gpu.w is not registered (gpu.parameters() is empty) and proposes nn.Parameter(...) around the moved tensor."""
    gpu, loss = parameter_copy_in_module()
    expect(gl.explain(gpu.w, loss), says=("registered",), fix=("nn.Parameter",))


def test_names_the_copy_op():
    """The explanation names the copy node ToCopyBackward0 as e.op."""
    gpu, loss = parameter_copy_in_module()
    expect(gl.explain(gpu.w, loss), op=("ToCopyBackward0", "double", "to"))
