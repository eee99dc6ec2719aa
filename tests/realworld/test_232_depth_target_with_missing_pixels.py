"""A depth model normalises its targets as maxDepth / depth: the data stores missing depth pixels as 0, and the target is inf there.

Address: https://github.com/ialhashim/DenseDepth/issues/65
Title: loss nan

What went wrong: DepthNorm(x) = maxDepth / x; in the user's own data set sensor holes are stored as 0, so the
normalised target is inf at those pixels and the loss is inf from the first batch.

Accepted answer: (the author) check the data for zero depth; fill the missing pixels with a value above 0
(or leave them out of the loss).

The zero is 85 elements into a 128-element tensor, past what a record's head keeps: graphlens reads it from
the live tensor (still the version it recorded), calls it a division by zero of an input of the block,
and offers filling or masking the missing values (it once had "no rule for __rdiv__").
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


def depth_norm(x, max_depth=1000.0):
    return max_depth / x


def test_traced_names_the_zero_depth_of_the_data():
    """Traced: division_by_zero at maxDepth / x, the denominator depth an input of the block, a fix that fills or masks."""
    torch.manual_seed(0)
    image, depth = torch.rand(2, 3, 8, 8), torch.rand(2, 1, 8, 8) * 900 + 100
    depth[1, 0, 2:4, 5:7] = 0.0  # (sensor holes stored as 0 by the loader)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 1, 3, padding=1))
    with gl.trace() as tr:
        loss = nn.functional.l1_loss(model(image), depth_norm(depth))
        loss.backward()
    assert torch.isinf(loss)
    expect(gl.explain(loss, tr), reasons=("division_by_zero",), line="return max_depth / x",
           says=("denominator is 0", "input of the block"), fix=("missing value",), never=("no rule for",))
