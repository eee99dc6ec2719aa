"""Gradient clipping out of order, read from the code: a multi-task weighting clips before loss.backward() computes the gradients; a transcription model clips after optimizer.step() used them.

Address: https://github.com/Cranial-XIX/FAMO/issues/4
Title: Question

What went wrong: in the first program clip_grad_norm_ comes before loss.backward(): at that moment .grad is None
(the loop zeroed it), so nothing is clipped and the step uses the new gradients unclipped. The second
program (Onsets and Frames, https://github.com/jongwook/onsets-and-frames/issues/24, "Gradient clipping in the
wrong place?") clips after optimizer.step(): the step used the unclipped gradient.

Accepted answer: clip between backward and the step.

graphlens reads the order from the program's file, plain and traced, and says it conditionally (whether the
parameter is among the clipped ones it does not check). It says nothing where the file clips in the right
place, or clips in several places (which one ran, the code does not say). Each program is its own file here.
"""

import importlib.util

import pytest
import torch

import graphlens as gl
from _helpers import expect

PROGRAM = """
import torch
from torch import nn


def train_step(model, optimizer, x, y):
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
{body}
    return loss


def run(traced):
    import graphlens as gl
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 4) * 5, torch.randn(8, 1) * 10
    if not traced:
        loss = train_step(model, optimizer, x, y)
        return gl.explain(model.weight, loss)
    with gl.trace() as tr:
        train_step(model, optimizer, x, y)
    return gl.explain(model.weight, tr)
"""

ORDERS = {
    "before": ["torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)", "loss.backward()", "optimizer.step()"],
    "after": ["loss.backward()", "optimizer.step()", "torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)"],
    "right": ["loss.backward()", "torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)", "optimizer.step()"],
    "twice": ["torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)", "loss.backward()",
              "torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)", "optimizer.step()"],
}


def explained(tmp_path, order, traced):
    path = tmp_path / f"program_{order}.py"
    path.write_text(PROGRAM.format(body="\n".join("    " + line for line in ORDERS[order])))
    spec = importlib.util.spec_from_file_location(f"program_{order}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.run(traced)


@pytest.mark.parametrize("traced", (False, True))
@pytest.mark.parametrize("order, says", [("before", "computes them"), ("after", "already used them")])
def test_clipping_out_of_order_is_read_from_the_program(tmp_path, order, says, traced):
    """Both orders, plain and traced: clip_misplaced with the clip line, and clipping between backward and step as the fix."""
    expect(explained(tmp_path, order, traced), reasons=("clip_misplaced",), says=(says, "clip_grad_norm_(model.parameters(), 0.01)"),
           fix=("loss.backward(), then torch.nn.utils.clip_grad_norm_",))


@pytest.mark.parametrize("order", ["right", "twice"])
def test_no_claim_where_the_order_is_right_or_not_known(tmp_path, order):
    """Clipping between backward and step, or clipping in two places: no clip_misplaced."""
    expect(explained(tmp_path, order, False), not_reasons=("clip_misplaced",))
