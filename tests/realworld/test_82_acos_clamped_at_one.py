"""The angle between two parallel vectors: clamp(-1, 1).acos() still has an infinite derivative at exactly 1.

Address: https://discuss.pytorch.org/t/numerically-stable-acos-dot-product-derivative/12851
Title: Numerically stable acos dot product derivative?

What went wrong: the cost used angle_between(v0, v1) = dot(unit(v0), unit(v1)).clamp(-1, 1).acos(). When
the vectors are parallel the dot product is exactly 1, and the derivative of acos, -1 / sqrt(1 - x²), is
infinite there: training produced NaN.

Accepted answer: (hbredin) clamp to (-1 + eps, 1 - eps) instead of (-1, 1).

The forward value is a plain 0; the replay shows AcosBackward0 sending -inf.
"""

import pytest
import torch

import graphlens as gl
from _helpers import expect


def unit_vector(v):
    return v / v.norm()


def acos_clamped_at_one():
    vector0 = torch.tensor([1.0, 2.0, 2.0], requires_grad=True)
    vector1 = torch.tensor([2.0, 4.0, 4.0])
    with gl.trace() as tr:
        angle = unit_vector(vector0).dot(unit_vector(vector1)).clamp(-1.0, 1.0).acos()
        angle.backward()
    if torch.isfinite(vector0.grad).all():  # (torch 2.14's CPU kernels give a gradient of 0 here: the thread's NaN needs 2.13)
        pytest.skip(f"the dot product of parallel unit vectors gives no NaN gradient on torch {torch.__version__}")
    return vector0, tr


def test_names_acos_and_the_value_one():
    """explain(vector0, tr) is nonfinite_backward + infinite_derivative at acos, on the angle line, reading the 1 it got."""
    vector0, tr = acos_clamped_at_one()
    expect(gl.explain(vector0, tr), reason="nonfinite_backward", reasons=("infinite_derivative",), tensor="vector0",
           op=("acos", "AcosBackward0"), line=".clamp(-1.0, 1.0).acos()", says=("sent -inf", "= 1", "x = ±1"))


def test_fix_clamps_inside_the_domain():
    """The fix is the thread's: clamp to (-1 + eps, 1 - eps) instead of (-1, 1); no where-mask, no overflow."""
    vector0, tr = acos_clamped_at_one()
    expect(gl.explain(vector0, tr), fix=("-1 + eps, 1 - eps",), never=("torch.where", "overflow"),
           never_fix=("retain_graph",))
