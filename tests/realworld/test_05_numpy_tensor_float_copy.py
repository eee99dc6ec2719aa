"""torch.tensor(numpy_array, requires_grad=True).float() is a non-leaf copy when the array is float64.

Address: https://whosebug.com/question/5700140/Lack-of-gradient-when-creating-tensor-from-numpy
Title: Lack of gradient when creating tensor from numpy

What went wrong: z = torch.tensor(np.array([1., 1.]), requires_grad=True).float() has z.grad None
after backward, while the same line from a Python list works. The numpy array is float64, so
.float() really casts and returns a non-leaf copy; from a list the tensor is already float32 and
.float() returns the leaf itself.

Accepted answer: the cast made z a non-leaf; create the tensor with its final dtype (a float32
array or dtype=torch.float32) and set requires_grad on that.
"""

import numpy as np
import pytest
import torch

import graphlens as gl
from _helpers import expect


def numpy_tensor_float_copy():
    z = torch.tensor(np.array([1.0, 1.0]), requires_grad=True).float()

    def pre_main(z):
        return z * 3.0

    x = pre_main(z)
    x.backward(torch.tensor([1.0, 1.0]))
    return z, x


def test_float_cast_is_a_copy_of_the_float64_leaf():
    """explain(z, x) says z is a copy made by .float() of an unnamed leaf."""
    z, x = numpy_tensor_float_copy()
    expect(gl.explain(z, x), reason="is_a_copy", tensor="z", says=(".float()", "not a leaf", "unnamed leaf"),
           not_reasons=("requires_grad_false",))


def test_names_the_copy_op():
    """The explanation names the cast node ToCopyBackward0 as e.op."""
    z, x = numpy_tensor_float_copy()
    expect(gl.explain(z, x), op=("ToCopyBackward0", "float"))
