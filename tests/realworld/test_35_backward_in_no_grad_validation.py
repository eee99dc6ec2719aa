"""backward inside the validation block fails: everything there was computed under torch.no_grad().

Address: https://github.com/nianticlabs/monodepth2/issues/24
Title: Element 0 of tensors does not require grad and does not have a grad_fn

What went wrong: after edits, the user's code computed losses inside the validation function, which
runs under `with torch.no_grad():`, and called backward there. Everything computed in that block
has no graph, so backward fails with "element 0 of tensors does not require grad".

Accepted answer (maintainers): no_grad is there on purpose for validation (it saves memory and
catches exactly this bug); do not backprop on the validation set, or move the training step out.

That losses was made inside no_grad is seen by a trace; the plain answer lists it among the
possible causes.
"""

import pytest
import torch
from torch import nn

from _helpers import HOW, expect, explained, note


def val(model, inputs, target):
    model.eval()
    with torch.no_grad():
        outputs = model(inputs)
        losses = ((outputs - target) ** 2).mean()
        losses.backward()
    model.train()


def backward_in_no_grad_validation():
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    val(model, torch.randn(2, 3), torch.randn(2, 1))


def test_plain_answer_reads_the_no_grad_block_from_the_code():
    """Without a trace, explain_error names losses and, reading the code (a lead), the torch.no_grad() block that made it."""
    expect(explained(backward_in_no_grad_validation), reason="no_grad_fn", reasons=("cut_by_no_grad",), tensor="losses",
           says=("read your code", "with torch.no_grad():"), line="losses = ((outputs - target) ** 2).mean()",
           not_reasons=("made_by_detach", "cut_by_detach"))


def test_traced_answer_says_losses_was_made_inside_no_grad():
    """With a trace, the answer is no_grad_fn + created_in_no_grad on losses, with an outside-no_grad fix."""
    expect(explained(backward_in_no_grad_validation, "traced"), reason="no_grad_fn", reasons=("created_in_no_grad",), tensor="losses",
           says=("inside torch.no_grad()",), fix=("outside torch.no_grad()",))


def test_note_says_it_was_made_inside_no_grad():
    """The note of trace(explain_errors=True) says losses was made inside torch.no_grad()."""
    expect(note(backward_in_no_grad_validation), says=("losses", "inside torch.no_grad()"))


def test_traced_line_is_in_the_no_grad_block():
    """With a trace, e.line is a line of the no_grad block that made losses."""
    expect(explained(backward_in_no_grad_validation, "traced"), line=("losses = ((outputs - target) ** 2).mean()", "outputs = model(inputs)",
                                           "with torch.no_grad()"))


def test_traced_fix_is_about_the_no_grad_block_and_names_the_line():
    """With a trace, the fix is the no_grad one (never the generic "(parameters do)"), and the answer gives losses' line."""
    expect(explained(backward_in_no_grad_validation, "traced"), says=("losses is made at line",),
           line="losses = ((outputs - target) ** 2).mean()", never_fix=("(parameters do)", "require grad"))
