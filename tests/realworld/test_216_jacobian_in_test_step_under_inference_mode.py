"""A jacobian built with autograd.grad inside a trainer's test step fails: the trainer runs the step under torch.inference_mode(), which enable_grad() does not undo.

Address: https://github.com/Lightning-AI/pytorch-lightning/issues/19910
Title: element 0 of tensors does not require grad and does not have a grad_fn in "test_step" and "validation_step"

What went wrong: test_step opens torch.enable_grad(), makes x with requires_grad=True, y = f(x), and
asks torch.autograd.grad(y, x, ...) row by row; it raises "element 0 of tensors does not require
grad". The evaluation loop (here a small stand-in for Lightning's) runs every step inside
torch.inference_mode(), where nothing is recorded whatever the grad mode.

Accepted answer: (the reporter's finding, confirmed as intended by the maintainers) evaluation runs
in inference mode; pass Trainer(inference_mode=False), which uses no_grad instead, and enable_grad()
does switch that off.

A trace saw the ops run inside inference mode (the grad mode was on: enable_grad): it must say
inference mode, not that requires_grad was set too late (it said so before).
"""

import pytest
import torch
from torch import nn

from _helpers import HOW, expect, explained_in


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(5, 1)

    def test_step(self, batch):
        with torch.enable_grad():
            f = lambda x: x ** 2  # noqa: E731 - (the user's lambda)
            x = torch.randn(5, requires_grad=True)
            y = f(x)
            rows = [torch.autograd.grad(y, x, v, retain_graph=True, allow_unused=True)[0] for v in torch.eye(5).unbind()]
        return self.layer(batch).mean() + torch.stack(rows).sum()


class Trainer:
    def __init__(self, inference_mode=True):
        self.inference_mode = inference_mode

    def test(self, model, loader):
        mode = torch.inference_mode if self.inference_mode else torch.no_grad
        with mode():
            return [model.test_step(b) for b in loader]


def program(ctx):
    torch.manual_seed(0)
    model, loader = Model(), [torch.randn(4, 5) for _ in range(2)]
    trainer = Trainer()
    with ctx:
        trainer.test(model, loader)


@pytest.mark.parametrize("how", HOW)
def test_the_answer_is_inference_mode_with_the_trainer_switch_as_fix(how):
    """Both ways: created under inference mode (enable_grad inside it does not help), fix Trainer(inference_mode=False)."""
    e = explained_in(program, how)
    expect(e, reason="no_grad_fn", reasons=("created_in_no_grad",), not_reasons=("requires_grad_set_late",),
           says=("inference",), fix=("inference_mode=False",), never_fix=("requires_grad_()",))
    if how == "traced":
        expect(e, op="pow", says=("enable_grad",))


def test_the_fix_works():
    """With Trainer(inference_mode=False) the step computes its jacobian."""
    torch.manual_seed(0)
    out = Trainer(inference_mode=False).test(Model(), [torch.randn(4, 5)])
    assert torch.isfinite(out[0])
