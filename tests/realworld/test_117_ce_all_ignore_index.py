"""Token cross entropy on a chunk whose labels are all ignore_index (-100): the mean over no counted token is NaN.

Address: https://github.com/pytorch/pytorch/issues/70348
Title: nan return by nn.CrossEntropyLoss when all the labels are ignore_index in torch 1.11

What went wrong: since torch 1.11, CrossEntropyLoss with the default mean reduction returns NaN when
every target equals ignore_index; before, it returned 0.

Accepted answer: jbschlosser: the change was intended (pull request 64572), to match the mean of an
empty set; Lezcano: an empty mean has no value, as for an empty tensor. Users who need 0 must skip such
batches, or sum the losses and divide by the count of targets that count, clamped to at least 1.

cross_entropy's inputs are finite; the NaN is the 0 / 0 of its mean: the answer must name ignore_index,
not "from finite inputs".
"""

import torch
import torch.nn.functional as F
from torch import nn

import graphlens as gl
from _helpers import expect


def ce_all_ignore_index():
    torch.manual_seed(0)
    lm_head = nn.Linear(4, 5)
    hidden = torch.randn(1, 3, 4)
    labels = torch.full((1, 3), -100)  # a chunk made only of prompt/padding tokens
    with gl.trace() as tr:
        logits = lm_head(hidden)
        loss = F.cross_entropy(logits.view(-1, 5), labels.view(-1))
        loss.backward()
    return lm_head, loss, tr


def test_nan_loss_names_cross_entropy_and_ignore_index():
    """explain(loss, tr): cross_entropy on its line; every target is -100, the ignore_index, so its mean is 0 / 0."""
    lm_head, loss, tr = ce_all_ignore_index()
    assert torch.isnan(loss)
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("empty_reduction",), not_reasons=("overflow",),
           tensor="loss", op="cross_entropy", line="loss = F.cross_entropy(logits.view(-1, 5), labels.view(-1))",
           says=("ignore_index", "-100", "0 / 0"), never=("made it from finite inputs",))


def test_fix_skips_the_batch_or_sums_over_a_clamped_count():
    """The fix: skip a batch with no counted target, or reduction='sum' divided by the count clamped to 1."""
    lm_head, loss, tr = ce_all_ignore_index()
    expect(gl.explain(loss, tr), fix=("Skip the batch", "reduction='sum'"), never_fix=("(torch.isfinite)",))
