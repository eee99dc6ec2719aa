"""A NumPy function applied to a list of tensors inside a model's forward fails: the tensors require grad.

Address: https://github.com/xiaxin1998/DHCN/issues/8
Title: Do you have any RuntimeError when you run this code?

What went wrong: the model's forward summed a list of embedding tensors with np.sum(final, 0).
NumPy converts each tensor by calling .numpy(), which PyTorch refuses for a tensor that requires
grad ("Can't call numpy() on Tensor that requires grad").

Accepted answer (the author): detach before converting (final.detach().numpy()). That silences the
error, but inside forward the result then carries no gradient: graphlens must say that, and that
the torch function (torch.sum of torch.stack) keeps the gradient.
"""

import pytest
import numpy as np
import torch

from _helpers import HOW, expect, explained


def numpy_sum_in_forward():
    torch.manual_seed(0)
    embedding = torch.nn.Embedding(10, 4)
    final = [embedding(torch.tensor([1, 2, 3])) for _ in range(2)]
    item_embeddings = np.sum(final, 0)
    return item_embeddings


@pytest.mark.parametrize("how", HOW)
def test_names_the_list_the_numpy_call_and_the_line(how):
    """The answer is numpy_requires_grad, names final and the np.sum line, and says an array has no gradient."""
    expect(explained(numpy_sum_in_forward, how), reason="numpy_requires_grad", tensor="final", op="numpy",
           line="np.sum(final, 0)", says=("NumPy", "no gradient"))


@pytest.mark.parametrize("how", HOW)
def test_fix_detaches_for_logging_and_stays_in_torch_for_the_loss(how):
    """The fix detaches only for values that are looked at, and points to torch.sum on a stack for the loss."""
    expect(explained(numpy_sum_in_forward, how), fix=("detach()", "torch.sum", "torch.stack"))


def test_explicit_numpy_call_names_the_tensor():
    """w.numpy() on a leaf that requires grad names w and proposes w.detach().numpy()."""
    def call():
        w = torch.ones(2, requires_grad=True)
        return w.numpy()

    expect(explained(call), reason="numpy_requires_grad", tensor="w", fix=("w.detach().numpy()",))
