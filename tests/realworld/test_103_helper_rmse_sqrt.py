"""An RMSE loss written as a helper, sqrt(mse), on a batch the model already fits: NaN weight gradients from the root's backward.

Address: https://github.com/keras-team/keras/issues/1172
Title: root_mean_squared_error gives nan

What went wrong: a regression network trained fine with mean absolute error and with MSE, but with
root mean squared error the loss turned NaN after a few epochs, whatever the optimizer. Once the
squared error reaches exactly 0, the derivative of the root, 1 / (2·sqrt(x)), is infinite there, and
the backward turns it into NaN in the weights' gradients.

Accepted answer: fchollet advised training on MSE instead and suspected a backend bug, since sqrt
itself accepts 0; the standard fix is to keep the root's input away from 0 (sqrt(mse + eps)).

The root is taken inside the helper rmse, not on the line of the training block: the answer names the
helper's line, where the trace recorded the op, not the block line that called it.
"""

import torch
import torch.nn.functional as F
from torch import nn

import graphlens as gl
from _helpers import expect


def rmse(pred, target):
    return torch.sqrt(F.mse_loss(pred, target))


def helper_rmse_sqrt():
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    x = torch.randn(4, 3)
    with torch.no_grad():
        y = model(x)  # the targets the model already predicts exactly
    with gl.trace() as tr:
        pred = model(x)
        loss = rmse(pred, y)
        loss.backward()
    return model, loss, tr


def test_names_sqrt_on_the_helpers_line():
    """explain(model.weight, tr): SqrtBackward0 sent inf from the line inside rmse, never the block's loss = rmse(pred, y)."""
    model, loss, tr = helper_rmse_sqrt()
    assert torch.isfinite(loss) and not torch.isfinite(model.weight.grad).all()
    expect(gl.explain(model.weight, tr), reason="nonfinite_backward", reasons=("infinite_derivative",),
           tensor="model.weight", op="sqrt", line="return torch.sqrt(F.mse_loss(pred, target))",
           says=("SqrtBackward0", "mse_loss's result = 0", "infinite at x = 0"),
           never=("(loss = rmse(pred, y))",))


def test_fix_adds_eps_inside_the_root():
    """The fix keeps the root's input away from 0 (eps inside sqrt), never a smaller learning rate."""
    model, loss, tr = helper_rmse_sqrt()
    expect(gl.explain(model.weight, tr), fix=("eps", "torch.sqrt("), never_fix=("learning rate",))
