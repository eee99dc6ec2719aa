"""A basis layer fills its learnable frequencies with torch.arange(out=self.freq) in reset_parameters, with gradients on: torch refuses the out= into a Parameter.

Address: https://github.com/pyg-team/pytorch_geometric/pull/4424
Title: Updates to dimenet model

What went wrong: DimeNet's Bessel basis layer made `self.freq` an nn.Parameter and initialised it in
reset_parameters() with `torch.arange(1, n + 1, out=self.freq).mul_(PI)`; with gradients on, torch
refuses to write into a tensor that requires grad (an out= argument, or an in-place op on a leaf).

Accepted answer: (the pull request, and the library's code since) fill the parameter with gradients
off: the same line inside `with torch.no_grad():`.

"Drop out= and use the result" does not work here: the module must keep its Parameter, and a plain
tensor cannot be assigned in its place.
"""

import math

import torch

from _helpers import HOW, expect, explained

import pytest


class BesselBasis(torch.nn.Module):
    def __init__(self, num_radial):
        super().__init__()
        self.freq = torch.nn.Parameter(torch.empty(num_radial))
        self.reset_parameters()

    def reset_parameters(self):
        torch.arange(1, self.freq.numel() + 1, out=self.freq).mul_(math.pi)


def build():
    return BesselBasis(6)


@pytest.mark.parametrize("how", HOW)
def test_fix_fills_the_parameter_under_no_grad(how):
    """Both ways: out_argument on self.freq at the arange line, fixed by the same line under torch.no_grad(), never by dropping out=."""
    e = explained(build, how)
    expect(e, reason="out_argument", tensor="self.freq", line="out=self.freq", says=("Parameter",),
           fix=("torch.no_grad()",), never_fix=("Drop out=",))
