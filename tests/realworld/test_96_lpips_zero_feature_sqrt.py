"""LPIPS's normalize_tensor takes sqrt of a sum of squares: at a zero feature vector anomaly mode stops at SqrtBackward0's NaN.

Address: https://github.com/richzhang/PerceptualSimilarity/issues/121
Title: RuntimeError: Function 'SqrtBackward0' returned nan values in its 0th output

What went wrong: lpips.normalize_tensor divides each feature vector by
norm_factor = torch.sqrt(torch.sum(in_feat**2, dim=1, keepdim=True)); where a feature vector is all
zero (here a black pixel through a 1x1 convolution without bias) the root is taken at 0, and its
backward computes 0 / 0 = NaN there. With anomaly mode on, loss.backward() raises "Function
'SqrtBackward0' returned nan values in its 0th output"; without it the convolution's weight gets a
NaN gradient.

Accepted answer (the reporter's, confirmed in the thread): add eps inside the root,
norm_factor = torch.sqrt(torch.sum(in_feat**2, dim=1, keepdim=True) + eps).

Without a trace graphlens reads the node and, from anomaly mode's own forward traceback, the line in
normalize_tensor; with a trace it reads the backward records as for the NaN gradient itself: the
node that first sent a non-finite gradient, the zero sum of squares it took, the norm of a zero
vector as the cause, vector_norm or eps inside the root as the fix, the same answer
gl.explain(weight, tr) gives when the program runs without anomaly mode.
"""

import warnings

import pytest
import torch
from torch import nn

import graphlens as gl
from _helpers import HOW, expect, explained


def normalize_tensor(in_feat, eps=1e-10):
    norm_factor = torch.sqrt(torch.sum(in_feat**2, dim=1, keepdim=True))
    return in_feat / (norm_factor + eps)


def lpips_zero_feature_sqrt(anomaly=True):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 4, 1, bias=False))
    lin = nn.Conv2d(4, 1, 1, bias=False)
    img0, img1 = torch.rand(1, 3, 2, 2), torch.rand(1, 3, 2, 2)
    img0[..., 0, 0] = 0.0
    img1[..., 0, 0] = 0.0  # a black pixel in both images: its feature vector is all zero
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (anomaly mode warns with the forward's traceback)
        with torch.autograd.set_detect_anomaly(anomaly):
            feats0, feats1 = normalize_tensor(net(img0)), normalize_tensor(net(img1))
            diff = (feats0 - feats1) ** 2
            loss = lin(diff).mean()
            loss.backward()
    return net, loss


@pytest.mark.parametrize("how", HOW)
def test_names_the_root_node_and_its_line_in_the_helper(how):
    """explain_error is anomaly_nan on SqrtBackward0, at normalize_tensor's norm_factor line (read from anomaly mode's traceback)."""
    expect(explained(lpips_zero_feature_sqrt, how), reason="anomaly_nan", op="SqrtBackward0",
           line="torch.sqrt(torch.sum(in_feat**2", fix=("eps",), never_fix=("out-of-place", "inplace", "retain_graph"))


def test_traced_answer_reads_the_backward_records():
    """With a trace: the zero sum of squares the root took, the norm of a zero vector, 0 times an infinite derivative."""
    expect(explained(lpips_zero_feature_sqrt, "traced"), reason="anomaly_nan",
           reasons=("nonfinite_backward", "infinite_derivative", "zero_times_inf"),
           says=("sum of squares", "= 0", "norm"), fix=("vector_norm", "eps"),
           never=("add did not use",))


def test_traced_answer_is_the_one_for_the_nan_gradient():
    """The error's traced answer gives the cause codes and the fix explain(weight, tr) gives when anomaly mode is off."""
    with gl.trace() as tr:
        net, loss = lpips_zero_feature_sqrt(anomaly=False)
    weight = net[0].weight
    assert not torch.isfinite(weight.grad).all()  # the program itself: a NaN gradient
    plain = gl.explain(weight, tr)
    expect(plain, reason="nonfinite_backward", reasons=("infinite_derivative", "zero_times_inf"), op="sqrt")
    error = explained(lpips_zero_feature_sqrt, "traced")
    assert set(plain.reasons) <= set(error.reasons), (plain.reasons, error.reasons)
    assert error.fix == plain.fix
