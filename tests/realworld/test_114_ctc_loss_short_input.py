"""CTC loss where one utterance has 2 frames for a 3-label target: no alignment exists and the loss is inf.

Address: https://github.com/pytorch/pytorch/issues/31557
Title: [docs] F.ctc_loss docs to warn clearly about invalid inf-causing inputs; zero_infinity to become enabled by default

What went wrong: ctc_loss returned inf for a batch in which one sample's input sequence was too short
to be aligned to its target (a length-2 input cannot spell two repeated labels, which need a blank
between them); with the default mean reduction the whole batch's loss is inf.

Accepted answer: t-vi: the infinite loss is mathematically right, since no alignment exists; pass
zero_infinity=True (which zeroes such losses and their gradients), or drop the impossible samples;
vadimkantorov asked for the docs to say so and for zero_infinity to be the default.

The inf is exact, not an overflow: the answer must not say the result was too large for float32.
"""

import torch
import torch.nn.functional as F
from torch import nn

import graphlens as gl
from _helpers import expect


def ctc_loss_short_input():
    torch.manual_seed(0)
    acoustic = nn.Linear(5, 4)  # 3 labels + blank
    frames = torch.randn(6, 2, 5)  # T=6, batch of 2
    targets = torch.tensor([[1, 2, 3], [2, 2, 1]])
    in_lens = torch.tensor([6, 2])  # the 2nd utterance has only 2 frames
    tgt_lens = torch.tensor([3, 3])
    with gl.trace() as tr:
        log_probs = acoustic(frames).log_softmax(-1)
        loss = F.ctc_loss(log_probs, targets, in_lens, tgt_lens)
        loss.backward()
    return acoustic, loss, tr


def test_inf_loss_is_an_impossible_alignment_not_an_overflow():
    """explain(loss, tr): ctc_loss on its line; item 1 has 2 frames for 3 labels: too short, no alignment; never an overflow."""
    acoustic, loss, tr = ctc_loss_short_input()
    assert torch.isinf(loss)
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("impossible_alignment",),
           not_reasons=("overflow",), tensor="loss", op="ctc_loss",
           line="loss = F.ctc_loss(log_probs, targets, in_lens, tgt_lens)",
           says=("too short", "no alignment exists", "Item 1", "2 input frames"),
           never=("larger than float32 can hold",))


def test_fix_is_zero_infinity_or_dropping_the_item():
    """The fix: zero_infinity=True, and input lengths checked against target lengths; never 'scale the values down'."""
    acoustic, loss, tr = ctc_loss_short_input()
    expect(gl.explain(loss, tr), fix=("zero_infinity=True", "input_lengths >= target_lengths"),
           never_fix=("Scale the values down",))
