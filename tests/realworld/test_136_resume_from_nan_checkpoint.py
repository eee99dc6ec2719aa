"""Training resumed from the last checkpoint of a diverged run whose state_dict holds a NaN in the head's bias: the first traced loss is already NaN.

Address: https://github.com/Rikorose/DeepFilterNet/issues/30
Title: Occurrence of NaN during training

What went wrong: the loss became NaN after a few epochs, and the reporter asked whether training can
resume from a chosen checkpoint, since the last saved one might already hold NaN. Here the checkpoint
is loaded before the traced step and its head.bias[3] is NaN: nothing inside the traced step made it.

Accepted answer: Rikorose (the author): NaNs occur in rare cases; restarting from the last checkpoint
works because the weights are checked for NaN before a checkpoint is written. The reporter confirmed
that resuming from an earlier checkpoint helped.

An honest answer: the trace saw the parameter already holding NaN, so graphlens says so, names
model.head.bias and its position, and names no op inside the block; it cannot know whether a step or a
load put the NaN there, and says both.
"""

import torch
import torch.nn.functional as F
from torch import nn

import graphlens as gl
from _helpers import expect


class Denoiser(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(6, 6)
        self.head = nn.Linear(6, 6)

    def forward(self, x):
        return self.head(torch.tanh(self.body(x)))


def resume_from_nan_checkpoint():
    torch.manual_seed(0)
    model = Denoiser()
    ckpt = {k: v.clone() for k, v in Denoiser().state_dict().items()}
    ckpt["head.bias"][3] = float("nan")  # the diverged run saved this
    model.load_state_dict(ckpt)
    noisy, clean = torch.randn(4, 6), torch.randn(4, 6)
    with gl.trace() as tr:
        loss = F.l1_loss(model(noisy), clean)
        loss.backward()
    return model, loss, tr


def test_nan_loss_names_the_parameter_that_already_held_nan():
    """explain(loss, tr): model.head.bias already held NaN at [3] when the trace first saw it; no op is named, nothing is guessed."""
    model, loss, tr = resume_from_nan_checkpoint()
    assert torch.isnan(loss)
    e = gl.explain(loss, tr)
    assert e.op is None and e.line is None
    expect(e, reason="nonfinite_forward", reasons=("nonfinite_parameter",), not_reasons=("overflow", "division_by_zero"),
           tensor="loss", says=("model.head.bias[3]", "already held NaN", "values loaded into it", "cannot name it"),
           never=("made it from finite", "overflow", "learning rate", "l1_loss", "tanh"))


def test_fix_traces_from_the_first_step_and_guards_it():
    """The fix asks to trace from the first step (graphlens cannot see before the trace) and to check for NaN with isfinite."""
    model, loss, tr = resume_from_nan_checkpoint()
    expect(gl.explain(loss, tr), fix=("Trace the training steps", "isfinite"), never_fix=("learning rate",))


def test_without_a_trace_it_names_the_leaf_that_holds_nan():
    """Without a trace: model.head.bias is named among the leaves that hold NaN now, no op is blamed, and, the
    bias having been written in place and the graph freed by backward, whether it held NaN when the loss was
    computed is left open (a step after that backward would look the same)."""
    model, loss, _ = resume_from_nan_checkpoint()
    expect(gl.explain(loss), reason="nonfinite_forward", tensor="loss", not_reasons=("nonfinite_input",),
           says=("model.head.bias", "NaN or inf now", "not known without a trace"), never=("l1_loss", "tanh", "made it from finite"))
