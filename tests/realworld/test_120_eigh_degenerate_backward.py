"""ZCA whitening through torch.linalg.eigh of an identity covariance: repeated eigenvalues make eigh's backward NaN.

Address: https://github.com/pytorch/pytorch/issues/23133
Title: torch.symeig() get NAN gradient when loss backpropagation

What went wrong: backpropagating through torch.symeig of a matrix with pairs of equal eigenvalues
gave NaN gradients although the forward was finite: the eigenvectors' derivative divides by the
differences of eigenvalues, which are 0 for a repeated pair. Here a whitening helper takes eigh of a
feature covariance that is the identity (eigenvalues 1 and 1).

Accepted answer: a maintainer (soumith) closed it as not a bug, the derivative being undefined at
repeated eigenvalues; adding a small perturbation was discussed (the reporter found a constant shift
does not separate equal eigenvalues, and thought of normalising the matrix first); later comments asked
for a backward that stays finite. The standard workaround is a small random jitter on the diagonal,
or using only the eigenvalues (eigvalsh).

The eigendecomposition is taken inside the helper zca: the answer names that line, not the block's
line that called it.
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


def zca(feats):
    cov = feats.T @ feats / feats.shape[0]
    evals, evecs = torch.linalg.eigh(cov)
    w = evecs @ torch.diag(evals.rsqrt()) @ evecs.T
    return feats @ w


def eigh_degenerate_backward():
    torch.manual_seed(0)
    enc = nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        enc.weight.copy_(torch.eye(2))
    x = torch.tensor([[1.0, 1.0], [1.0, -1.0], [-1.0, 1.0], [-1.0, -1.0]])  # covariance = identity
    with gl.trace() as tr:
        z = zca(enc(x))
        loss = (z[:, 0] * torch.tensor([1.0, 2.0, 3.0, 4.0])).sum()
        loss.backward()
    return enc, loss, tr


def test_names_eigh_and_its_repeated_eigenvalues():
    """explain(enc.weight, tr): LinalgEighBackward0 on the eigh line in zca sent NaN; the eigenvalues it made are [1, 1]."""
    enc, loss, tr = eigh_degenerate_backward()
    assert torch.isfinite(loss) and not torch.isfinite(enc.weight.grad).all()
    expect(gl.explain(enc.weight, tr), reason="nonfinite_backward", tensor="enc.weight", op="linalg_eigh",
           line="evals, evecs = torch.linalg.eigh(cov)",
           says=("LinalgEighBackward0", "1 / (λi − λj)", "repeated", "[1, 1]"),
           never=("not finite at that input", "(z = zca(enc(x)))"))


def test_fix_separates_the_eigenvalues():
    """The fix: a small random jitter on the diagonal, or eigvalsh; never the generic 'keep the input away'."""
    enc, loss, tr = eigh_degenerate_backward()
    expect(gl.explain(enc.weight, tr), fix=("jitter", "eigvalsh"), never_fix=("away from the values where",))
