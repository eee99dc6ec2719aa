"""A leaf that a graph used is overwritten in place from a tensor that requires grad, so it stops being a leaf.

Address: https://github.com/facebookresearch/DeepSDF/issues/79
Title: RuntimeError: leaf variable has been moved into the graph interior

What went wrong: chunk_loss.backward() in DeepSDF's training loop raised "leaf variable has been
moved into the graph interior" (the issue shows only the traceback). The message means a tensor
that was a leaf when the graph used it later got a grad_fn through an in-place write. The program
is ours, reproducing the same message on torch 2.13: a latent vector is used, its requires_grad is
switched off, and it is overwritten in place from a tensor that requires grad.

Accepted answer: none in the thread; the standard fix is to update latent codes only inside
torch.no_grad() (or through an optimizer) and not to toggle requires_grad in between.

lat_vec is in the raising frame (now a non-leaf with a copy grad_fn), so the plain call can name
it; the in-place line is known only to a trace.
"""

import pytest
import torch

from _helpers import HOW, expect, explained, note


def leaf_moved_interior():
    lat_vec = torch.zeros(3, requires_grad=True)
    decoder_w = torch.ones(3, requires_grad=True)
    chunk_loss = (lat_vec + decoder_w).sum()
    lat_vec.requires_grad_(False)
    lat_vec.copy_(decoder_w * 2)            # lat_vec now has a grad_fn (CopyBackwards)
    chunk_loss.backward()


@pytest.mark.parametrize("how", HOW)
def test_recognised_with_a_no_grad_fix(how):
    """explain_error recognises a leaf moved into the graph interior and proposes updating it under torch.no_grad()."""
    expect(explained(leaf_moved_interior, how), reason="leaf_moved_interior", says=("leaf", "grad_fn"),
           fix=("torch.no_grad()",))


@pytest.mark.parametrize("how", HOW)
def test_names_the_leaf_that_got_a_grad_fn(how):
    """explain_error names lat_vec, changed in place by copy_ after the graph used it, with a no_grad fix."""
    expect(explained(leaf_moved_interior, how), reason="leaf_moved_interior", tensor="lat_vec", op=("copy_", "CopyBackwards"),
           fix=("torch.no_grad()",))


def test_traced_line_is_the_copy():
    """With a trace, e.line is the lat_vec.copy_(...) line."""
    expect(explained(leaf_moved_interior, "traced"), line="lat_vec.copy_(decoder_w * 2)")


def test_note_explains_the_message():
    """The note of trace(explain_errors=True) explains the message instead of quoting it."""
    expect(note(leaf_moved_interior), says=("leaf", "grad_fn", "torch.no_grad()"), never=("does not recognise",))


def test_note_names_lat_vec():
    """The note of trace(explain_errors=True) names lat_vec."""
    expect(note(leaf_moved_interior), says=("lat_vec",))
