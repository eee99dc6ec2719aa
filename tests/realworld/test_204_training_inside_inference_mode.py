"""A predictor fine-tunes inside a predict() decorated with @torch.inference_mode(); loss.requires_grad_(True) silences the error, and no weight ever gets a gradient.

Address: https://github.com/replicate/cog/issues/1681
Title: Unable to compute gradient in during inference

What went wrong: the serving framework's predict() carried the @torch.inference_mode() decorator, so
nothing inside it recorded a graph; backward raised, and the reporter forced
loss.requires_grad_(True), after which training ran and every weight's .grad stayed None.

Accepted answer: (the reporter's own resolution) remove the decorator; requires_grad_(True) only made
the loss a leaf with no history.

Without a trace, the live loss says it: loss.is_inference() is True.
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


class Predictor:
    def __init__(self):
        torch.manual_seed(0)
        self.model = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))

    @torch.inference_mode()
    def predict(self, x, y, steps=2):
        optimizer = torch.optim.Adam(self.model.parameters(), lr=0.05)
        for _ in range(steps):
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(self.model(x), y)
            loss.requires_grad_(True)  # (the reporter's workaround)
            loss.backward()
            optimizer.step()
        return loss


def test_plain_answer_names_inference_mode_not_the_loss_arithmetic():
    """Without a trace: the loss is an inference tensor; the fix takes training out of inference_mode, never 'compute it with torch operations'."""
    torch.manual_seed(1)
    x, y = torch.randn(16, 3), torch.randn(16, 1)
    predictor = Predictor()
    loss = predictor.predict(x, y)
    w = predictor.model[0].weight
    assert w.grad is None and loss.is_inference()
    expect(gl.explain(w, loss), reasons=("leaf_root", "created_in_no_grad"), says=("inference tensor",),
           fix=("inference_mode", "decorator"), never_fix=("Compute loss with torch operations",))


def test_the_error_without_the_workaround_names_inference_mode():
    """Without requires_grad_(True), backward raises; explain_error(err) says the loss is an inference tensor, with the decorator as the fix."""

    class Plain(Predictor):
        @torch.inference_mode()
        def predict(self, x, y):
            loss = nn.functional.mse_loss(self.model(x), y)
            loss.backward()

    torch.manual_seed(1)
    x, y = torch.randn(16, 3), torch.randn(16, 1)
    try:
        Plain().predict(x, y)
    except RuntimeError as err:
        e = gl.explain_error(err)
    else:
        raise AssertionError("backward inside inference_mode no longer raises")
    expect(e, reason="no_grad_fn", reasons=("created_in_no_grad",), says=("inference tensor",), fix=("inference_mode",),
           never=("Either none of the tensors",))
