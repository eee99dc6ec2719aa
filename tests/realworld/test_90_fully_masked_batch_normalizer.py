"""A token-level loss divided by mask.sum(): a fully masked batch makes it 0 / 0, a NaN loss and NaN gradients.

Address: https://github.com/unslothai/unsloth-zoo/pull/1286
Title: Floor the DAPO normalizer so an empty batch is not a nan

What went wrong: with some loss types the per-token loss was summed under the loss mask and divided by
the number of unmasked tokens, not floored. When every completion of a batch was masked out the count was
0, the numerator 0 too, and 0 / 0 = NaN reached the loss and every gradient.

Accepted answer: clamp the count at 1 (as the other loss types and TRL do), so an empty batch contributes
a zero loss.
"""

import torch

import graphlens as gl
from _helpers import expect


def fully_masked_batch():
    per_token_loss = torch.tensor([[0.5, 0.7, 0.2], [0.1, 0.3, 0.4]], requires_grad=True)
    mask = torch.zeros(2, 3)  # every completion masked out
    with gl.trace() as tr:
        normalizer = mask.sum()
        loss = (per_token_loss * mask).sum() / normalizer
        loss.backward()
    return per_token_loss, loss, tr


def test_nan_loss_names_the_division_by_the_count():
    """explain(loss, tr) is nonfinite_forward + division_by_zero at div: the numerator and normalizer are both 0."""
    per_token_loss, loss, tr = fully_masked_batch()
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("division_by_zero",), tensor="loss",
           op=("div", "DivBackward0"), line="/ normalizer", says=("loss is NaN", "the denominator normalizer = 0", "0 / 0"))


def test_fix_floors_the_normalizer():
    """The fix clamps the normalizer (normalizer.clamp(min=...)), as the PR does, for the gradient answer too."""
    per_token_loss, loss, tr = fully_masked_batch()
    expect(gl.explain(per_token_loss, tr), reason="nonfinite_forward", fix=("normalizer.clamp(min=",),
           never_fix=("log_softmax", "float32"))
