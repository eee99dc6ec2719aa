"""A backward hook wrapper registered with register_full_backward_hook returns a bare tensor instead of a tuple.

Address: https://github.com/TransformerLensOrg/TransformerLens/issues/1160
Title: [Bug Report] Backward hooks and "modifying gradients"

What went wrong: TransformerLens puts an identity HookPoint module at each activation and registers the
user's backward hooks through register_full_backward_hook, with a wrapper that passed the user's return
value through. A user hook that returned the gradient unchanged (return grad) made backward fail with
"hook 'hook' has changed the size of value": a module's backward hook must return a tuple (one entry
per grad_input), and the bare tensor was read as a sequence of its rows.

Accepted answer (the fix merged in TransformerLensOrg/TransformerLens#1175): the wrapper wraps a bare
tensor in a tuple, (result,), before returning it to PyTorch.

The HookPoint and its hook are among the program's variables; graphlens names the module hook and reads
the wrapper's return line.
"""

import pytest
import torch
from torch import nn

from _helpers import HOW, expect, explained


class HookPoint(nn.Module):
    """An identity module at an activation, as TransformerLens puts one to hook (shortened)."""

    def forward(self, x):
        return x

    def add_hook(self, fn):
        def hook(module, module_input, module_output):  # the wrapper registered with PyTorch
            return fn(module_output[0], hook=self)
        return self.register_full_backward_hook(hook)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = nn.Linear(4, 4)
        self.hook_resid_post = HookPoint()

    def forward(self, x):
        return self.hook_resid_post(x + self.mlp(x))


def module_hook_returns_bare_tensor():
    torch.manual_seed(0)
    model = Block()

    def simple_hook(grad, hook):
        return grad

    model.hook_resid_post.add_hook(simple_hook)
    tokens = torch.randn(1, 3, 4, requires_grad=True)
    logits = model(tokens)
    loss = logits[0, -1, 0]
    loss.backward()


@pytest.mark.parametrize("how", HOW)
def test_names_the_module_hook(how):
    """explain_error is hook_changed_gradient on the full backward hook 'hook' of model.hook_resid_post."""
    expect(explained(module_hook_returns_bare_tensor, how), reason="hook_changed_gradient", op="hook",
           says=("model.hook_resid_post", "register_full_backward_hook", "tuple"))


def test_line_is_the_wrapper_return():
    """e.line is the return statement of the registered wrapper, read from its source."""
    expect(explained(module_hook_returns_bare_tensor), line="return fn(module_output[0], hook=self)")


@pytest.mark.parametrize("how", HOW)
def test_fix_returns_a_tuple(how):
    """The fix returns a tuple, (new_grad,) + ..., from the module hook, not a hint about anomaly mode."""
    expect(explained(module_hook_returns_bare_tensor, how), fix=("(new_grad,)",), never_fix=("anomaly", "retain_graph"))
