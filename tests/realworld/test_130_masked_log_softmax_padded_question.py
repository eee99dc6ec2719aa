"""AllenNLP's old masked_log_softmax, vector + mask.log(), on a passage that is all padding: the row is all -inf and log_softmax of it is NaN.

Address: https://github.com/allenai/allennlp/issues/890
Title: util.masked_log_softmax() Returning Nan's

What went wrong: masked_log_softmax masked by adding log(mask), 0 for kept and -inf for masked
positions. For a row whose mask is all zeros every element is -inf, and log_softmax of such a row is
NaN; multiplying the row's loss by 0 afterwards does not help (NaN × 0 is NaN).

Accepted answer: matt-gardner (AllenNLP) called it a bug and fixed it (pull request 893) by adding a
tiny constant before the log, (mask + 1e-45).log(), so that a fully masked row stays finite; a large
finite negative instead of -inf, or skipping fully masked rows, does the same.

The -inf of log(mask) is written on purpose (a mask): the answer names log_softmax of the fully masked
row, in the helper, as what made the NaN, not the log as an accident.
"""

import torch
import torch.nn.functional as F
from torch import nn

import graphlens as gl
from _helpers import expect


def masked_log_softmax(vector, mask):
    vector = vector + mask.log()
    return F.log_softmax(vector, dim=1)


class SpanStartHead(nn.Module):
    def __init__(self, dim=6):
        super().__init__()
        self.score = nn.Linear(dim, 1)

    def forward(self, passage, passage_mask):
        logits = self.score(passage).squeeze(-1)
        return masked_log_softmax(logits, passage_mask)


def masked_log_softmax_padded_question():
    torch.manual_seed(0)
    head = SpanStartHead()
    passage = torch.randn(3, 5, 6)
    passage_mask = torch.tensor([[1., 1., 1., 1., 0.], [1., 1., 1., 0., 0.], [0., 0., 0., 0., 0.]])
    span_start = torch.tensor([2, 1, 0])
    row_mask = (passage_mask.sum(1) > 0).float()  # the third question has an empty passage
    with gl.trace() as tr:
        log_probs = head(passage, passage_mask)
        nll = -log_probs.gather(1, span_start.unsqueeze(1)).squeeze(1)
        loss = (nll * row_mask).sum() / row_mask.sum()
        loss.backward()
    return head, loss, tr


def test_nan_loss_names_log_softmax_of_the_fully_masked_row():
    """explain(loss, tr): log_softmax in the helper made NaN of a row whose every element is the mask's -inf (log wrote it on purpose)."""
    head, loss, tr = masked_log_softmax_padded_question()
    assert torch.isnan(loss)
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("masked_softmax",),
           not_reasons=("log_of_zero", "overflow"), tensor="loss", op="log_softmax",
           line="return F.log_softmax(vector, dim=1)",
           says=("every element is -inf", "0 / 0", "on purpose"), never=("overflow", "log of 0 is -inf"))


def test_fix_keeps_a_position_or_a_finite_mask():
    """The fix leaves a position unmasked in every row or masks with a finite number (finfo.min) instead of -inf."""
    head, loss, tr = masked_log_softmax_padded_question()
    expect(gl.explain(loss, tr), fix=("at least one unmasked position", "torch.finfo(x.dtype).min"))
