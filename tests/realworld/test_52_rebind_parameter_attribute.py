"""Assigning weight - lr * grad to a module's parameter attribute is refused: it is not a Parameter.

Address: https://hao-yiwen.github.io/yiwen-blog-website/en/docs/ai/frameworks/pytorch/common-errors
Title: PyTorch 常见错误与陷阱 (PyTorch common errors and pitfalls) (the "more serious trap" of reassigning a parameter)

What went wrong: the page's second pitfall, a hand-written step that reassigns a module's
parameter, model.linear.weight = model.linear.weight - lr * model.linear.weight.grad. The right
side is a plain non-leaf tensor (SubBackward0), not an nn.Parameter, so nn.Module refuses the
assignment (TypeError: cannot assign ... as parameter 'weight'); had it been accepted, the
optimizer and model.parameters() would no longer see the weight.

Accepted answer (the page): update in place under torch.no_grad() (p -= lr * p.grad), or use an
optimizer.
"""

import pytest
import torch
from torch import nn

import graphlens as gl
from _helpers import expect, note, raised


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(2, 1)

    def forward(self, x):
        return self.linear(x)


def rebind_parameter_attribute():
    torch.manual_seed(0)
    model = Model()
    loss = model(torch.randn(3, 2)).pow(2).mean()
    loss.backward()
    return model, loss


def step(model, lr=0.1):
    model.linear.weight = model.linear.weight - lr * model.linear.weight.grad


def test_says_a_plain_tensor_was_assigned_to_a_parameter():
    """explain_error names model.linear.weight, quotes the line and proposes an in-place update under no_grad."""
    model, loss = rebind_parameter_attribute()
    expect(gl.explain_error(raised(step, model)), reason="parameter_assignment", tensor="model.linear.weight",
           line="model.linear.weight = model.linear.weight - lr", fix=("torch.no_grad()", "-="))


def test_note_is_attached_to_the_type_error():
    """trace(explain_errors=True) attaches a note to the TypeError."""
    model, loss = rebind_parameter_attribute()
    expect(note(step, model), says=("Parameter",))
