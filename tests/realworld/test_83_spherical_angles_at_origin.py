"""Spherical angles of a zero relative position: atan2(0, 0) is harmless in torch 2.13, z / r = 0 / 0 is not.

Address: https://github.com/e3nn/e3nn/issues/112
Title: NaN value appears when I calculate a derivative of kernel with respect to relative position

What went wrong: a kernel built from the spherical angles of relative positions gave NaN derivatives
when a relative position was the zero vector (an atom paired with itself). The maintainers pointed at
atan2 evaluated at (0, 0), which has no derivative there, and added an epsilon.

Accepted answer: keep the angle computations away from the origin with a small epsilon.

On torch 2.13 atan2's backward gives 0 at (0, 0) (pytorch PR #166787); the NaN of this kernel comes from
the polar angle, acos(z / r) with r = 0: a 0 / 0 in the forward pass. graphlens must name that division
and must not blame atan2.
"""

import torch

import graphlens as gl
from _helpers import expect


def spherical_kernel():
    pos = torch.tensor([[0.0, 0.0, 0.0], [1.0, 2.0, 2.0]], requires_grad=True)
    with gl.trace() as tr:
        r = pos.norm(dim=1)
        theta = torch.acos(pos[:, 2] / r)
        phi = torch.atan2(pos[:, 1], pos[:, 0])
        kernel = (torch.cos(theta) * torch.sin(phi) * r).sum()
        kernel.backward()
    return pos, kernel, tr


def azimuth_only():
    pos = torch.tensor([[0.0, 0.0, 0.0], [1.0, 2.0, 2.0]], requires_grad=True)
    with gl.trace() as tr:
        phi = torch.atan2(pos[:, 1], pos[:, 0])
        kernel = torch.sin(phi).sum()
        kernel.backward()
    return pos, tr


def test_nan_kernel_names_the_zero_over_zero_division():
    """explain(kernel, tr) is nonfinite_forward + division_by_zero at div, on the theta line: z / r with r[0] = 0."""
    pos, kernel, tr = spherical_kernel()
    expect(gl.explain(kernel, tr), reason="nonfinite_forward", reasons=("division_by_zero",), tensor="kernel",
           op=("div", "DivBackward0"), line="theta = torch.acos(pos[:, 2] / r)", says=("r[0] = 0", "0 / 0 is NaN"))


def test_gradient_answer_does_not_blame_atan2():
    """explain(pos, tr) gives the same division as the cause of pos.grad and never names atan2's backward."""
    pos, kernel, tr = spherical_kernel()
    expect(gl.explain(pos, tr), reason="nonfinite_forward", reasons=("division_by_zero",), op=("div", "DivBackward0"),
           says=("the loss it comes from, kernel, is NaN",), never=("Atan2Backward0", "atan2(y, x) has no derivative"),
           fix=("r.clamp(min=eps)", "r + eps"))


def test_atan2_at_the_origin_is_finite_and_said_so():
    """atan2 alone at (0, 0) gives pos.grad finite (0) on torch 2.13: graphlens answers grad_ok, not NaN."""
    pos, tr = azimuth_only()
    assert torch.isfinite(pos.grad).all()
    expect(gl.explain(pos, tr), reason="grad_ok", never=("NaN", "not finite", "infinite"))
