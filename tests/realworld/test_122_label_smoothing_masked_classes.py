"""Logits of invalid classes masked with -inf, then cross_entropy(label_smoothing=0.1): the loss is inf.

Address: https://github.com/facebookresearch/pytext/pull/1698
Title: Loss changes ("Label smoothing loss is -inf if any of the logits are -inf")

What went wrong: (from the pull request's summary) the label-smoothing loss is infinite as soon as
one logit is -inf: the smoothing term averages the log-probabilities of every class, and a class
masked with -inf has log-probability -inf; setting the smoothing weight to 0 does not help (0 × inf).

Accepted answer: the pull request (AkshatSh) skips the smoothing term explicitly in that case; in
general, smooth only over the allowed classes, or mask with a large finite number (finfo.min).

The -inf is written on purpose by masked_fill and is harmless without smoothing: the answer names the
fill and the cross_entropy with label_smoothing that made the loss infinite of it.
"""

import torch
import torch.nn.functional as F
from torch import nn

import graphlens as gl
from _helpers import expect


def label_smoothing_masked_classes():
    torch.manual_seed(0)
    head = nn.Linear(8, 5)
    feats = torch.randn(3, 8)
    target = torch.tensor([0, 2, 1])
    invalid = torch.tensor([[False, False, False, True, True]] * 3)  # classes 3, 4 not allowed here
    with gl.trace() as tr:
        logits = head(feats)
        logits = logits.masked_fill(invalid, float("-inf"))
        loss = F.cross_entropy(logits, target, label_smoothing=0.1)
        loss.backward()
    return head, loss, tr


def test_inf_loss_names_the_mask_and_label_smoothing():
    """explain(loss, tr): masked_fill wrote -inf on purpose; cross_entropy made the loss inf of it through label_smoothing."""
    head, loss, tr = label_smoothing_masked_classes()
    assert torch.isinf(loss)
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("masked_infinity",), not_reasons=("overflow",),
           tensor="loss", op=("masked_fill", "cross_entropy"), line=("masked_fill(invalid", "label_smoothing=0.1"),
           says=("logits[0, 3]", "cross_entropy", "label_smoothing"),
           never=("overflow", "a sum, a mean or a product over masked values"))


def test_fix_uses_a_finite_mask_and_smooths_over_allowed_classes():
    """The fix: mask with torch.finfo(...).min and smooth only over the allowed classes."""
    head, loss, tr = label_smoothing_masked_classes()
    expect(gl.explain(loss, tr), fix=("torch.finfo", "allowed classes"), never_fix=("Scale the values down",))
