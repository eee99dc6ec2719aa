"""An RMSE loss, sqrt(mse), with a zero error on the first batch: its NaN gradient, then opt.step(), leave NaN weights.

Address: https://github.com/NVIDIA/apex/issues/240
Title: Nan Loss with O3 opt_level setting

What went wrong: the loss became NaN after the first iterations. mcarilli explained that the parameters
most likely started to contain NaN after the first step(), because the first backward() created
gradients containing NaN; he suggested checking the gradients after backward, before step().

Accepted answer: check the gradients after backward (and skip the step when one is not finite); find
what makes the first non-finite gradient.

Here the first batch is fitted exactly, so the root of the mean squared error takes 0 and its derivative is
infinite: the first gradient is NaN, SGD's step writes it into the weights, the second loss is NaN. A
trace of both steps names the step and the gradient's origin; a trace of the second step only can say
that the weight was already NaN, never which step made it.
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


def _model():
    model = nn.Linear(2, 1)
    with torch.no_grad():
        model.weight.zero_()
        model.bias.zero_()  # (fits the first batch exactly)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


BATCHES = [(torch.tensor([[1.0, 2.0], [3.0, 4.0]]), torch.zeros(2, 1)),
           (torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.ones(2, 1))]


def train_two_steps_traced():
    model, opt = _model()
    with gl.trace() as tr:
        for x, y in BATCHES:
            opt.zero_grad()
            pred = model(x)
            loss = torch.sqrt(nn.functional.mse_loss(pred, y))
            loss.backward()
            opt.step()
    return model, loss, tr


def train_second_step_traced():
    model, opt = _model()
    x, y = BATCHES[0]
    opt.zero_grad()
    torch.sqrt(nn.functional.mse_loss(model(x), y)).backward()
    opt.step()
    x, y = BATCHES[1]
    with gl.trace() as tr:
        opt.zero_grad()
        pred = model(x)
        loss = torch.sqrt(nn.functional.mse_loss(pred, y))
        loss.backward()
        opt.step()
    return model, loss, tr


def test_traced_steps_name_the_step_that_wrote_the_nan():
    """explain(model.weight, tr) is nonfinite_parameter at the step's add_, on the opt.step() line, after backward pass 1."""
    model, loss, tr = train_two_steps_traced()
    expect(gl.explain(model.weight, tr), reason="nonfinite_forward", reasons=("nonfinite_parameter", "infinite_derivative"),
           tensor="model.weight", op="add_", line="opt.step()",
           says=("model.weight.grad held NaN", "after backward pass 1", "wrote NaN into model.weight[0, 0]"))


def test_traced_steps_follow_the_gradient_to_the_root():
    """The answer follows that gradient to SqrtBackward0 at the loss line, where mse_loss's result = 0."""
    model, loss, tr = train_two_steps_traced()
    expect(gl.explain(loss, tr), reasons=("nonfinite_parameter", "infinite_derivative"),
           says=("SqrtBackward0", "torch.sqrt(nn.functional.mse_loss(pred, y))", "mse_loss's result = 0"),
           fix=("torch.sqrt(x + eps)", "skip optimizer.step()"), never=("already held", "input data"),
           never_fix=("clip the gradients",))


def test_untraced_step_is_not_guessed():
    """With only the second step traced: the weight already held NaN when the trace saw it; no step, no sqrt is named."""
    model, loss, tr = train_second_step_traced()
    expect(gl.explain(model.weight, tr), reason="nonfinite_forward", reasons=("nonfinite_parameter",),
           says=("already held NaN", "when the trace first saw it", "cannot name it"),
           never=("SqrtBackward0", "backward pass 1", "input data", "It comes from a gradient"),
           fix=("Trace the training steps from the first one",))


def test_without_a_trace_it_names_the_leaf_only():
    """Without a trace: model.weight is NaN, it is a leaf (something before put it there), no op is named."""
    model, loss, _ = train_two_steps_traced()
    expect(gl.explain(model.weight), reason="nonfinite_forward", says=("model.weight is NaN at model.weight[0, 0]",
           "It is a leaf", "cannot tell"), never=("sqrt", "opt.step", "add_"))
