"""Standardising features, (X - mean) / std, with a column that never varies: std is 0, and 0 / 0 is NaN.

Address: https://stats.stackexchange.com/questions/35304/how-to-standardize-an-array-if-standard-deviation-is-zero/108922
Title: How to standardize an array if standard deviation is zero?

What went wrong: standardizing the columns of a dataset failed for one column whose standard deviation
is 0: every value of that column is the same, so the division is 0 / 0.

Accepted answer: a column with zero spread carries no information: drop it (or leave it unscaled); adding
a small constant to the denominator avoids the division by zero.
"""

import torch

import graphlens as gl
from _helpers import expect


def standardize_constant_column():
    X = torch.tensor([[1.0, 5.0, 0.2], [2.0, 5.0, 0.4], [3.0, 5.0, 0.9]], requires_grad=True)  # column 1 is constant
    with gl.trace() as tr:
        Z = (X - X.mean(0)) / X.std(0)
        loss = (Z ** 2).sum()
        loss.backward()
    return X, loss, tr


def test_nan_loss_names_the_division_and_both_operands():
    """explain(loss, tr): the division on its line made NaN at Z[0, 1]; numerator 0, denominator (std) 0; 0 / 0."""
    X, loss, tr = standardize_constant_column()
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("division_by_zero",), tensor="loss",
           op=("__truediv__", "div"), line="(X - X.mean(0)) / X.std(0)",
           says=("Z[0, 1]", "the numerator = 0", "the denominator = 0", "std is 0", "0 / 0 is NaN"),
           never=("gives an infinity", "overflow"))


def test_fix_adds_eps_or_drops_the_constant_feature():
    """The fix: eps in the denominator, or drop the features that never vary (the thread's answer)."""
    X, loss, tr = standardize_constant_column()
    expect(gl.explain(X, tr), reasons=("division_by_zero",), fix=("eps",), says=("std",))
    expect(gl.explain(loss, tr), fix=("drop the features that never vary",))
