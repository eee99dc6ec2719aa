"""torch.std over a batch of one sample is NaN: the default correction divides by N - 1 = 0.

Address: https://github.com/pytorch/pytorch/issues/29372
Title: torch.std() returns nan for single item tensors.

What went wrong: np.std of one number is 0, torch.std of one number is NaN, and the NaN spread through the
user's computation.

Accepted answer: (SsnL, vincentqb) torch.std is the unbiased estimate by default: it divides by N - 1,
which is 0 for a single element; pass unbiased=False (correction=0) for the population value, or reduce
over more than one element.
"""

import warnings

import torch

import graphlens as gl
from _helpers import expect


def std_of_single_sample():
    w = torch.tensor([0.5, -0.3, 0.8], requires_grad=True)
    batch = torch.tensor([[1.0, 2.0, 3.0]])  # a batch of one
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (torch warns that the degrees of freedom are <= 0)
        with gl.trace() as tr:
            z = batch * w
            spread = z.std(dim=0)
            loss = (z / (spread + 1e-5)).sum()
    return w, loss, tr


def test_nan_loss_names_std_and_the_single_element():
    """explain(loss, tr) is nonfinite_forward + std_of_one at the std line, never a division by a zero the data made."""
    w, loss, tr = std_of_single_sample()
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("std_of_one",), tensor="loss", op="std",
           line="z.std(dim=0)", says=("single element", "N - 1"), never=("overflow", "Check the inputs"))


def test_fix_is_the_population_value_or_more_samples():
    """The fix is the thread's: correction=0 (unbiased=False), or more than one element per reduction."""
    w, loss, tr = std_of_single_sample()
    expect(gl.explain(loss, tr), fix=("correction=0", "unbiased=False"), never_fix=("torch.isfinite",))
