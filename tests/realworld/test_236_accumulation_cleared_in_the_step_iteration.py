"""A gradient-accumulation example clears the gradients at the top of the iteration that steps: the step uses one batch's scaled-down gradient, the others are thrown away.

Address: https://github.com/pytorch/ignite/issues/583
Title: Fix Gradients accumulation example

What went wrong: update_fn runs `if iteration % accumulation_steps == 0: optimizer.zero_grad()` first, then
(loss / accumulation_steps).backward(), then steps on the same condition: on a step iteration the
zero_grad wipes what the previous iterations accumulated.

Accepted answer: (the maintainer) step, then zero_grad, together at the end of the iteration on the
accumulation boundary.

With a trace: the weight's .grad was cleared between two backward passes with no update of the weight
between them (the passes wrote the same record), so what it held was thrown away before any step used
it. Without a trace nothing can show it (the answer stays grad_ok, without that claim).
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


def train(model, optimizer, batches, accumulation_steps=4, fixed=False):
    for iteration, (x, y) in enumerate(batches, start=1):
        if not fixed and iteration % accumulation_steps == 0:
            optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y) / accumulation_steps
        loss.backward()
        if iteration % accumulation_steps == 0:
            optimizer.step()
            if fixed:
                optimizer.zero_grad()
    return loss


def setup():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 3))
    batches = [(torch.randn(4, 5), torch.randint(0, 3, (4,))) for _ in range(4)]
    return model, torch.optim.SGD(model.parameters(), lr=0.1), batches


def test_traced_says_the_accumulated_gradient_was_thrown_away():
    """Traced: grad_discarded after pass 3, the fix clears once per update after the step."""
    model, optimizer, batches = setup()
    with gl.trace() as tr:
        train(model, optimizer, batches)
    expect(gl.explain(model[2].weight, tr), reasons=("grad_discarded",), says=("backward pass 3", "thrown away"),
           fix=("after optimizer.step()",))


def test_the_fixed_loop_is_not_said_to_throw_anything_away():
    """Stepping then clearing at the boundary: every pass adds up, and no grad_discarded is claimed."""
    model, optimizer, batches = setup()
    with gl.trace() as tr:
        train(model, optimizer, batches, fixed=True)
    expect(gl.explain(model[2].weight, tr), not_reasons=("grad_discarded",))


def test_plain_makes_no_such_claim():
    """Without a trace the passes are not seen: no grad_discarded."""
    model, optimizer, batches = setup()
    loss = train(model, optimizer, batches)
    expect(gl.explain(model[2].weight, loss), not_reasons=("grad_discarded",))
