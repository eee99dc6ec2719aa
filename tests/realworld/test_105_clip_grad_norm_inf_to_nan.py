"""sqrt of a learnable scale initialised at 0 sends -inf to its gradient, and clip_grad_norm_ turns it into NaN (inf × 0).

Address: https://github.com/pytorch/pytorch/issues/46849
Title: clip_grad_norm_ silently passes when not finite

What went wrong: clip_grad_norm_ returned a total norm of inf without complaint and scaled every
gradient by max_norm / inf = 0: finite gradients became 0, and an infinite one became inf × 0 = NaN.
Here the infinite gradient comes from sqrt(t) at t = 0, a learnable scale initialised at 0.

Accepted answer: the reporter asked for an error instead of a silent pass; the maintainers added
error_if_nonfinite to clip_grad_norm_ (pull request 53843), so a non-finite total norm can raise
instead of being scaled by 0.

The trace sees both steps: SqrtBackward0 wrote -inf into t.grad, and the traced in-place multiply of
clip_grad_norm_ changed it afterwards into NaN.
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


def clip_grad_norm_inf_to_nan():
    torch.manual_seed(0)
    enc = nn.Linear(4, 2)
    t = nn.Parameter(torch.zeros(()))  # a learnable scale, initialised at 0
    x = torch.randn(5, 4)
    with gl.trace() as tr:
        scale = torch.sqrt(t)
        loss = enc(x).pow(2).mean() + scale * enc(x).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_([t, *enc.parameters()], max_norm=1.0)
    return t, loss, tr


def test_names_sqrt_at_zero_as_the_origin():
    """explain(t, tr): SqrtBackward0 on the scale = torch.sqrt(t) line sent -inf to t, where t = 0."""
    t, loss, tr = clip_grad_norm_inf_to_nan()
    assert torch.isnan(t.grad)
    expect(gl.explain(t, tr), reason="nonfinite_backward", reasons=("infinite_derivative",), tensor="t", op="sqrt",
           line="scale = torch.sqrt(t)", says=("SqrtBackward0", "sent -inf to t", "t = 0"))


def test_says_clip_grad_norm_made_the_nan():
    """The answer adds that clip_grad_norm_ multiplied that -inf by a clip coefficient of 0: inf × 0 is NaN."""
    t, loss, tr = clip_grad_norm_inf_to_nan()
    expect(gl.explain(t, tr), says=("clip_grad_norm_", "inf × 0", "left NaN"))


def test_fix_adds_eps_and_guards_the_clipping():
    """The fix: eps in the root, and error_if_nonfinite=True (or skipping the step) for the clipping."""
    t, loss, tr = clip_grad_norm_inf_to_nan()
    expect(gl.explain(t, tr), fix=("eps", "error_if_nonfinite=True"))
