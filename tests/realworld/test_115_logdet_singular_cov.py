"""A Gaussian NLL with torch.logdet of a covariance L @ L.T built from a rank-deficient factor: logdet is -inf.

Address: https://github.com/stepankonev/waymo-motion-prediction-challenge-2022-multipath-plus-plus/issues/9
Title: General Loss function discussion

What went wrong: the repository's negative log-likelihood with covariances calls torch.logdet on a
predicted covariance; weihuaLi1 pointed out that logdet produces nan or inf and breaks the following
code. Here the predicted factor has a zero column, so the covariance is singular: its determinant is
0, and its log is -inf.

Accepted answer: the thread has no maintainer answer; KayARS replaced a non-positive determinant by a
small positive value. The standard fix is to keep the matrix positive definite: add a small multiple of
the identity (cov + eps * I), or build it from a factor with a positive diagonal.

The -inf comes from finite entries and is exact: the answer must not call it an overflow.
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


def logdet_singular_cov():
    torch.manual_seed(0)
    head = nn.Linear(3, 4)
    with torch.no_grad():
        head.weight[2:].zero_()
        head.bias[2:].zero_()  # the second column of the factor is always 0: rank 1
    feat = torch.randn(1, 3)
    err = torch.tensor([0.3, -0.2])
    with gl.trace() as tr:
        L = head(feat).view(2, 2)
        cov = L @ L.T
        loss = 0.5 * torch.logdet(cov) + 0.5 * err @ torch.linalg.pinv(cov) @ err
        loss.backward()
    return head, loss, tr


def test_inf_loss_names_logdet_of_a_singular_matrix():
    """explain(loss, tr): logdet on the loss line; the matrix is singular (determinant 0), not an overflow."""
    head, loss, tr = logdet_singular_cov()
    assert torch.isinf(loss)
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("singular_matrix",), not_reasons=("overflow",),
           tensor="loss", op="logdet", line="loss = 0.5 * torch.logdet(cov)",
           says=("singular", "determinant is 0", "not an overflow"), never=("larger than float32 can hold",))


def test_fix_adds_a_multiple_of_the_identity():
    """The fix: cov + eps * I (a jitter) or a positive-definite construction; never 'scale the values down'."""
    head, loss, tr = logdet_singular_cov()
    expect(gl.explain(loss, tr), fix=("torch.eye(n)", "jitter"), never_fix=("Scale the values down",))
