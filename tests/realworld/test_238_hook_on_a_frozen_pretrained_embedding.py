"""A debugging tool registers a gradient hook on every parameter; a pretrained embedding loaded with from_pretrained is frozen, and register_hook raises.

Address: https://github.com/awslabs/sagemaker-debugger/pull/193
Title: Register If Tensor Requires Gradients

What went wrong: the hook loop calls param.register_hook(...) for all of model.named_parameters();
nn.Embedding.from_pretrained freezes its weight (requires_grad=False), and register_hook on it raises
"cannot register a hook on a tensor that doesn't require gradient".

Accepted answer: (the merged PR) register the hook only if param.requires_grad.

The weight is a Parameter: the answer once said it "was computed inside torch.no_grad(), or from tensors
none of which requires grad", which a parameter never is.
"""

import pytest
import torch
from torch import nn

import graphlens as gl
from _helpers import expect


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding.from_pretrained(torch.randn(20, 8))
        self.head = nn.Linear(8, 2)

    def forward(self, ids):
        return self.head(self.embedding(ids).mean(1))


def register_all(model, seen):
    for name, param in model.named_parameters():
        param.register_hook(lambda g, name=name: seen.append(name))


def test_says_the_parameter_is_frozen_and_registers_only_trainable_ones():
    """hook_no_requires_grad + requires_grad_false: a frozen Parameter (from_pretrained), the requires_grad guard as the fix."""
    model = Classifier()
    with pytest.raises(RuntimeError) as info:
        register_all(model, [])
    expect(gl.explain_error(info.value), reason="hook_no_requires_grad", reasons=("requires_grad_false",),
           tensor="model.embedding.weight", says=("frozen",), fix=(".requires_grad:",), never=("computed inside",))
