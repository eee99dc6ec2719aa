"""SAM's second pass adds its task losses to the loss of the first pass, whose backward already freed its graph.

Address: https://github.com/davda54/sam/issues/10
Title: RuntimeError: Trying to backward through the graph a second time, but the saved intermediate results have already been freed. Specify retain_graph=True when calling backward the first time.

What went wrong: with the SAM optimizer each batch needs two forward-backward passes (first_step, then
second_step). A commenter's multi-task loop summed the task losses into loss (loss = 0; loss += loss_t)
for the first pass, called loss.backward(), and in the second pass went on adding to the same loss
without starting it again, so the second loss.backward() went back through the first pass's graph.

Accepted answer (the commenter's own finding, confirmed by the maintainer's reply on two separate
forward-backward passes): start the running total afresh for the second pass (loss = 0 before its loop),
so each backward sees only its own pass's losses; retain_graph=True would only hide it.

The running total is read from the code (loss += loss_t after an earlier loss.backward(), with no fresh
start between) and checked on the live root, whose grad_fn is the addition.
"""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from _helpers import HOW, expect, explained, note


class SAM(torch.optim.Optimizer):
    """Sharpness-aware minimisation, the two steps of davda54/sam (shortened)."""

    def __init__(self, params, base_optimizer, rho=0.05, **kwargs):
        super().__init__(params, dict(rho=rho, **kwargs))
        self.base_optimizer = base_optimizer(self.param_groups, **kwargs)

    @torch.no_grad()
    def first_step(self, zero_grad=False):
        grad_norm = torch.norm(torch.stack([p.grad.norm(p=2) for g in self.param_groups for p in g["params"] if p.grad is not None]), p=2)
        for group in self.param_groups:
            scale = group["rho"] / (grad_norm + 1e-12)
            for p in group["params"]:
                if p.grad is not None:
                    e_w = p.grad * scale
                    p.add_(e_w)
                    self.state[p]["e_w"] = e_w
        if zero_grad:
            self.zero_grad()

    @torch.no_grad()
    def second_step(self, zero_grad=False):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.sub_(self.state[p]["e_w"])
        self.base_optimizer.step()
        if zero_grad:
            self.zero_grad()


def sam_running_loss_not_reset():
    torch.manual_seed(0)
    num_tasks = 2
    model = nn.Linear(3, num_tasks)
    optimizer = SAM(model.parameters(), torch.optim.SGD, lr=0.1)
    image, target = torch.randn(4, 3), torch.rand(4, num_tasks)
    output = model(image)
    loss = 0
    for t in range(num_tasks):
        loss_t = F.binary_cross_entropy_with_logits(output[:, t], target[:, t])
        loss += loss_t
    optimizer.zero_grad()
    loss.backward()
    optimizer.first_step(zero_grad=True)
    output = model(image)
    for t in range(num_tasks):
        loss_t = F.binary_cross_entropy_with_logits(output[:, t], target[:, t])
        loss += loss_t
    loss.backward()
    optimizer.second_step(zero_grad=True)


@pytest.mark.parametrize("how", HOW)
def test_names_loss_as_the_carried_running_total(how):
    """explain_error is graph_freed + carried_state on loss, at the line loss += loss_t."""
    expect(explained(sam_running_loss_not_reset, how), reason="graph_freed", reasons=("carried_state",), tensor="loss",
           line="loss += loss_t", says=("running total", "loss.backward()"))


@pytest.mark.parametrize("how", HOW)
def test_fix_starts_the_total_afresh(how):
    """The fix starts loss afresh for the second pass (or adds numbers), never retain_graph=True."""
    expect(explained(sam_running_loss_not_reset, how), fix=("loss = 0", ".item()"), never_fix=("retain_graph=True",))


def test_plain_answer_does_not_list_the_second_pass_as_freed_before():
    """Without a trace, the answer does not list the second pass's own nodes as freed by the earlier backward."""
    expect(explained(sam_running_loss_not_reset), never=("BinaryCrossEntropyWithLogitsBackward0", "made loss"))


def test_note_names_the_running_total():
    """The note of trace(explain_errors=True) names loss as a running total, without retain_graph=True."""
    expect(note(sam_running_loss_not_reset), says=("loss += loss_t", "running total"), never=("retain_graph=True",))
