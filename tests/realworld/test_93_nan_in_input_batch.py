"""A batch that holds NaN makes a NaN loss at once: the answer is the data, not a layer, a learning rate or an op.

Address: https://github.com/prs-eth/Marigold/issues/111
Title: loss=nan occurs during training

What went wrong: training on a custom dataset gave loss = nan whatever the learning rate. GaParmar found it
happens when the input batch contains NaN values; the maintainer asked to check the data (the input
image or the ground truth).

Accepted answer: check the data for NaN before training (and fix or drop those samples).

The trace sees the batch first as an input already holding NaN; without a trace graphlens cannot read
the data (it is not in the backward graph) and says so.
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


def nan_in_input_batch():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    batch = torch.tensor([[0.1, 0.2, 0.3], [float("nan"), 0.5, 0.6]])
    depth = torch.tensor([[1.0], [0.0]])
    with gl.trace() as tr:
        pred = model(batch)
        loss = nn.functional.mse_loss(pred, depth)
        loss.backward()
    return model, loss, tr


def test_nan_loss_names_the_batch():
    """explain(loss, tr) is nonfinite_forward + nonfinite_input: batch held NaN at batch[1, 0] when the trace first saw it."""
    model, loss, tr = nan_in_input_batch()
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("nonfinite_input",), tensor="loss",
           says=("batch already held NaN at batch[1, 0]", "when the trace first saw it"),
           never=("overflow", "learning rate", "made by linear", "infinite"))


def test_gradient_answer_and_fix_point_at_the_data():
    """explain(model[0].weight, tr) gives the same cause; the fix checks the data with torch.isfinite(batch)."""
    model, loss, tr = nan_in_input_batch()
    expect(gl.explain(model[0].weight, tr), reason="nonfinite_forward", reasons=("nonfinite_input",),
           says=("the loss it comes from, loss, is NaN",), fix=("torch.isfinite(batch)",),
           never_fix=("learning rate", "clip_grad"))


def test_without_a_trace_it_says_the_data_was_not_read():
    """Without a trace: loss is NaN, every leaf of its backward graph is finite, the data was not read, no op is named."""
    model, loss, _ = nan_in_input_batch()
    expect(gl.explain(loss), reason="nonfinite_forward", says=("loss is NaN", "Every leaf", "did not read them", "cannot tell"),
           never=("batch already held", "linear", "mse_loss"))
