"""Sinkhorn iterations with a small regularisation, K = exp(-C / reg): a far target's column of K underflows to 0 and v = b / (K.t() @ u) divides by 0.

Address: https://github.com/PythonOT/POT/issues/54
Title: Getting Error while computing sinkhorn distance

What went wrong: ot.sinkhorn with reg=0.01 warned "numerical errors at iteration 0" and returned
nonsense. The Gibbs kernel exp(-C / reg) of costs much larger than reg is exactly 0 in floating
point; a column of K that is all 0 makes K^T u = 0 and the scaling v = b / 0 infinite on the first
iteration, and inf × 0 then gives NaN. Here a point-set loss computes Sinkhorn by hand and one target
is far from every decoded point.

Accepted answer: a commenter (patricieni) traced it to zeros in the marginals and a small regulariser
and suggested adding a small number or clean_zeros; POT's maintainers answered the same warning in
related issues: the regularisation is too small for the costs, so K underflows; use a larger reg, or a
log-domain (stabilised) Sinkhorn.

The 0 denominator is (K.t() @ u), not b (b is the numerator, 0.2): the fix never tells the user to clamp
b, and names the exp that underflowed.
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


def sinkhorn(a, b, C, reg, n_iter=10):
    K = torch.exp(-C / reg)
    u = torch.ones_like(a)
    for _ in range(n_iter):
        v = b / (K.t() @ u)
        u = a / (K @ v)
    plan = u[:, None] * K * v[None, :]
    return (plan * C).sum()


class PointDecoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, z):
        return self.fc(z)


def sinkhorn_small_reg():
    torch.manual_seed(0)
    decoder = PointDecoder()
    z = torch.randn(5, 4)
    targets = torch.randn(5, 2)
    targets[3] += 3.0  # one target far from every decoded point
    a = torch.full((5,), 0.2)
    b = torch.full((5,), 0.2)
    with gl.trace() as tr:
        pts = decoder(z)
        C = torch.cdist(pts, targets) ** 2
        loss = sinkhorn(a, b, C, reg=0.01)
        loss.backward()
    return decoder, loss, tr


def test_nan_loss_names_the_division_by_an_underflowed_kernel():
    """explain(loss, tr): div on the v line (1st of 10 runs) divided b[2] = 0.2 by a matmul of exp values that underflowed to 0."""
    decoder, loss, tr = sinkhorn_small_reg()
    assert torch.isnan(loss)
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("division_by_zero", "underflow"),
           not_reasons=("overflow",), tensor="loss", op="div", line="v = b / (K.t() @ u)",
           says=("1st of 10", "b[2] = 0.2", "underflowed to exactly 0", "K = torch.exp(-C / reg)"),
           never=("(b + eps)", "b.clamp(", "overflow"))


def test_fix_is_log_domain_or_a_larger_reg():
    """The fix is a log-domain Sinkhorn (logsumexp) or a larger regularisation, never an eps added to b."""
    decoder, loss, tr = sinkhorn_small_reg()
    expect(gl.explain(loss, tr), fix=("torch.logsumexp", "log-domain Sinkhorn", "regularisation"),
           never_fix=("(b + eps)", "b.clamp("))
