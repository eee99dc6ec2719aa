"""A reentrant checkpoint whose input needs no grad gives the parameters inside it no gradient.

Address: https://github.com/mlfoundations/open_clip/issues/573
Title: None of the inputs have requires_grad=True. Gradients will be None

What went wrong: fine-tuning with gradient checkpointing, the poster got the warning "None of the
inputs have requires_grad=True. Gradients will be None" at the start of training. The reentrant
torch.utils.checkpoint (use_reentrant=True) runs its function under torch.no_grad() and gives its
output a graph only when one of the tensors passed to it requires grad; the input batch does not, so
the checkpointed blocks got no gradient.

Accepted answer (the poster's own fix): pass use_reentrant=False to checkpoint; the warning went away
and the loss and retrieval metrics improved.

A trace sees the block's ops run inside a no_grad region on the checkpoint line; the user's code has
no torch.no_grad() block, so "move it out of the no_grad block" would be a fix for code they do not
have. Without a trace, the checkpoint call is read from the code (a lead).
"""

import warnings

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import graphlens as gl
from _helpers import expect


def checkpointed_training():
    torch.manual_seed(0)
    block = nn.Linear(4, 4)
    head = nn.Linear(4, 1)
    x = torch.randn(3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the warning the poster saw)
        h = checkpoint(block, x, use_reentrant=True)
    loss = head(h).sum()
    loss.backward()
    return block, head, loss


def test_program_leaves_the_block_without_gradient():
    """The program itself: head learns, the checkpointed block gets no gradient."""
    block, head, loss = checkpointed_training()
    assert head.weight.grad is not None and block.weight.grad is None


def test_traced_answer_names_the_reentrant_checkpoint():
    """With a trace, explain(block.weight, tr) is not_reachable + cut_by_checkpoint, on the checkpoint line."""
    with gl.trace() as tr:
        block, head, loss = checkpointed_training()
    expect(gl.explain(block.weight, tr), reason="not_reachable", tensor="block.weight", reasons=("cut_by_checkpoint",),
           op="checkpoint", says=("use_reentrant=True", "x does not require grad"))


def test_fix_is_use_reentrant_false_not_leaving_a_no_grad_block():
    """The fix is use_reentrant=False (or an input that requires grad), not leaving a no_grad block the code does not have."""
    with gl.trace() as tr:
        block, head, loss = checkpointed_training()
    expect(gl.explain(block.weight, tr), fix=("use_reentrant=False",), never_fix=("no_grad() block",),
           not_reasons=("cut_by_no_grad",))


def test_plain_answer_reads_the_checkpoint_call():
    """Without a trace, the checkpoint call read from the code is a lead, said conditionally, with the same fix."""
    block, head, loss = checkpointed_training()
    expect(gl.explain(block.weight, loss), reason="not_reachable", reasons=("cut_by_checkpoint",), op="checkpoint",
           line="checkpoint(block, x, use_reentrant=True)", says=("If ",), fix=("use_reentrant=False",))
