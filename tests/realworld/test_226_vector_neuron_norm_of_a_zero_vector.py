"""A Vector Neurons batch norm divides each 3-vector feature by its length sqrt((x*x).sum(2)): a point at the origin has length 0, and 0/0 is NaN.

Address: https://github.com/FlyingGiraffe/vnn/pull/4
Title: avoiding nan

What went wrong: norm = torch.sqrt((x * x).sum(2)); x = x / norm * bn(norm). A point exactly at the origin
of a centred cloud has all-zero vector features, so the division is 0/0.

Accepted answer: (the merged fix) add an eps to the norm before dividing, and compute the norm with
torch.norm instead of the explicit sqrt, whose derivative at 0 is infinite.

An eps in the division alone leaves every gradient NaN (sqrt's backward at 0): the answer must name the
root as the denominator's maker and put the eps inside it, or use vector_norm.
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


class VNBatchNorm(nn.Module):
    def __init__(self, num_features, safe=False):
        super().__init__()
        self.bn, self.safe = nn.BatchNorm1d(num_features), safe

    def forward(self, x):  # x: (B, C, 3, N)
        if self.safe:
            norm = torch.linalg.vector_norm(x, dim=2) + 1e-6
        else:
            norm = torch.sqrt((x * x).sum(2))
        norm_bn = self.bn(norm)
        return x / norm.unsqueeze(2) * norm_bn.unsqueeze(2)


class VNClassifier(nn.Module):
    def __init__(self, safe=False):
        super().__init__()
        self.lin = nn.Linear(1, 4, bias=False)
        self.bn = VNBatchNorm(4, safe)
        self.head = nn.Linear(4, 2)

    def forward(self, pts):  # pts: (B, 3, N)
        x = self.lin(pts.unsqueeze(1).transpose(1, -1)).transpose(1, -1)
        x = self.bn(x)
        return self.head((x * x).sum(2).mean(-1))


def points():
    torch.manual_seed(0)
    pts = torch.randn(2, 3, 6)
    pts[0, :, 2] = 0.0  # (a point exactly at the origin)
    return pts, torch.tensor([0, 1])


def test_traced_names_the_root_behind_the_zero_denominator():
    """Traced: division_by_zero at the division, the denominator made by sqrt at its line, and a fix that makes the root safe too."""
    pts, y = points()
    model = VNClassifier()
    with gl.trace() as tr:
        loss = nn.functional.cross_entropy(model(pts), y)
        loss.backward()
    e = gl.explain(loss, tr)
    expect(e, reasons=("division_by_zero",), op=("div", "truediv"), says=("square root", "torch.sqrt((x * x).sum(2))"),
           fix=("vector_norm", "eps inside"))


def test_the_fix_gives_finite_gradients():
    """vector_norm plus eps: the loss and every gradient are finite."""
    pts, y = points()
    model = VNClassifier(safe=True)
    nn.functional.cross_entropy(model(pts), y).backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())
