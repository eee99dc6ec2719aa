"""x.pow(p).pow(1 / p) with an odd p: NaN wherever x is negative.

Address: https://discuss.pytorch.org/t/incorrect-pow-function/62735
Title: Incorrect pow function

What went wrong: my_tensor.pow(p).pow(1 / p) gave back my_tensor for p = 2, 4, 6, but for p = 3 or 5
the result held NaN exactly where my_tensor was negative.

Accepted answer (two replies, in our words): a fractional power of a negative real number is not
defined, so pow gives NaN; a negative number to an odd power stays negative. PyTorch does not pick
the real odd root: compute it by hand as sign(x) * |x| ** (1 / p).

Clamping the base to >= 0 (the general answer for a fractional power) would change the values the
user wants; the real root keeps them.
"""

import torch

import graphlens as gl
from _helpers import expect


def odd_root():
    torch.manual_seed(0)
    my_tensor = torch.randn(2, 3, requires_grad=True)
    p = 3
    with gl.trace() as tr:
        result = my_tensor.pow(p).pow(1 / p)
        loss = result.sum()
        loss.backward()
    return my_tensor, result, tr


def test_names_the_second_pow_and_a_negative_base():
    """explain(result, tr): pow at its line, the negative base as the cause (invalid_domain)."""
    my_tensor, result, tr = odd_root()
    assert torch.isnan(result).any() and (my_tensor < 0).any()
    expect(gl.explain(result, tr), reason="nonfinite_forward", reasons=("invalid_domain",), op="pow",
           line="my_tensor.pow(p).pow(1 / p)", says=("negative base to a fractional power",))


def test_fix_offers_the_real_odd_root():
    """The fix gives the real root, sign(x) * |x| ** p, before clamping the base."""
    my_tensor, result, tr = odd_root()
    expect(gl.explain(result, tr), fix=("torch.sign(x) * x.abs() ** e", "1 / 3 for a cube root", "real root"))
