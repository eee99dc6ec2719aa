"""A register_hook that returns grad * 2 doubles the gradient stored on the tensor.

Address: https://docs.pytorch.org/docs/stable/generated/torch.Tensor.register_hook.html
Title: torch.Tensor.register_hook (PyTorch documentation)

What went wrong: (documentation example, no forum thread was found for this exact symptom) a hook
registered with v.register_hook(lambda grad: grad * 2) replaces the gradient, so v.grad is twice
what the graph computes; someone reading v.grad later, without knowing about the hook, sees a
"doubled" gradient.

Accepted answer (docs): a hook may return a new gradient that is used in place of grad; remove it
with handle.remove() when it is no longer wanted.

The hook is readable from the tensor itself, so no trace is needed; one backward ran, so the
answer must not blame accumulation or a missing zero_grad.
"""

import pytest
import torch

import graphlens as gl
from _helpers import expect


def hook_doubles_grad():
    v = torch.tensor([0.0, 0.0, 0.0], requires_grad=True)
    h = v.register_hook(lambda grad: grad * 2)     # double the gradient
    v.backward(torch.tensor([1.0, 2.0, 3.0]))
    return v, h


def test_reports_the_gradient_value():
    """explain(v) says v.grad is set to [2, 4, 6]."""
    v, h = hook_doubles_grad()
    expect(gl.explain(v), reason="grad_ok", tensor="v", says=("[2, 4, 6]",))


def test_blames_the_hook_not_zero_grad():
    """The answer says a hook on v changed its gradient, proposes handle.remove(), and does not mention zero_grad."""
    v, h = hook_doubles_grad()
    expect(gl.explain(v), reasons=("hook_changed_grad",), says=("hook",), fix=("remove()",),
           never=("zero_grad", "earlier backward"))
