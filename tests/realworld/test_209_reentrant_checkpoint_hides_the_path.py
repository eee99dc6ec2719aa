"""Gradient checkpointing (reentrant) with an input that requires grad: the inner layers do get gradients, but no graph shows the path before backward runs.

Address: https://github.com/huggingface/transformers/issues/21381
Title: gradient checkpointing disables requires_grad when freezing part of models (fix with use_reentrant=False)

What went wrong: with the reentrant torch.utils.checkpoint, the layers inside a checkpointed block are
reached only when backward runs the block again; the graph before that holds one
CheckpointFunctionBackward node and the block's inputs. (In the thread, frozen embeddings made no
checkpoint input require grad and the layers got nothing; with an input that requires grad they do.)

Accepted answer: (the maintainers) use_reentrant=False, whose graph holds the block's own nodes.

Without a trace graphlens reads the graph the loss has now: through a reentrant checkpoint it cannot
tell whether a layer inside is reached, and must not say that the loss does not reach it.
"""

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

import graphlens as gl
from _helpers import expect


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.query = nn.Linear(4, 4)

    def forward(self, h):
        return torch.tanh(self.query(h))


def test_plain_answer_says_the_checkpoint_hides_the_path():
    """through_checkpoint, never not_reachable or grad_set_elsewhere, for a weight inside the block that backward did reach."""
    torch.manual_seed(0)
    embed, block = nn.Linear(3, 4), Block()
    h = embed(torch.randn(2, 3))  # (requires grad: the reentrant checkpoint then gives its output a graph)
    loss = checkpoint(block, h, use_reentrant=True).pow(2).mean()
    loss.backward()
    q = block.query.weight
    assert q.grad is not None  # (torch: the recomputation reached it)
    expect(gl.explain(q, loss), reasons=("through_checkpoint",), not_reasons=("not_reachable", "grad_set_elsewhere"),
           says=("reentrant",), fix=("use_reentrant=False",), never=("does not depend",))
