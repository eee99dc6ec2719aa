"""GeM pooling with a learnable exponent p under Adam: p runs negative, eps ** p overflows in the forward, and the step writes NaN into p.

Address: https://github.com/keras-team/keras/issues/15600
Title: EfficietNet + Generalized Mean Pooling causes NaN loss!

What went wrong: a generalised-mean (GeM) pooling layer whose exponent p is a trainable weight made
the loss NaN after a few steps; with p frozen it trained fine. Here Adam moves p by about its learning
rate per step (3, -3, -7): at the third step the clamped zeros of the ReLU features give
1e-6 ** -7 = 1e42, which float32 cannot hold. That step's loss is still finite, but p's gradient is
NaN, Adam writes it into p, and the next loss is NaN.

Accepted answer: none from the maintainers (the reporter found that freezing p removes the NaN, and
the issue went stale); the standard fix is to keep p in a safe range: clamp it after each step (p >= 1)
or make it positive by construction (p = 1 + softplus(q)), with a small learning rate for p.

The NaN in the loss is written by opt.step(), from a gradient of a backward pass whose forward already
held inf: the answer follows it back to that forward pow (the 3rd of its runs), not to the derivative
of the pooling's second power.
"""

import torch
import torch.nn.functional as F
from torch import nn

import graphlens as gl
from _helpers import expect


class GeM(nn.Module):
    def __init__(self, p=3.0, eps=1e-6):
        super().__init__()
        self.p = nn.Parameter(torch.ones(1) * p)
        self.eps = eps

    def forward(self, x):
        pooled = x.clamp(min=self.eps).pow(self.p).mean(dim=(-2, -1))
        return pooled.pow(1.0 / self.p)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.pool = GeM()
        self.fc = nn.Linear(4, 1)

    def forward(self, x):
        return self.fc(self.pool(F.relu(self.conv(x))))


def gem_learnable_p_adam():
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.Adam([{"params": [model.pool.p], "lr": 6.0},
                            {"params": [*model.conv.parameters(), *model.fc.parameters()], "lr": 1e-3}])
    images = torch.rand(2, 3, 6, 6) * 255.0  # forgot to normalise the pixels
    target = torch.full((2, 1), 500.0)
    with gl.trace() as tr:
        for step in range(5):
            opt.zero_grad()
            loss = F.mse_loss(model(images), target)
            loss.backward()
            opt.step()
    return model, loss, tr


def test_nan_loss_is_followed_back_to_the_forward_pow():
    """explain(loss, tr): the step wrote NaN from a backward whose forward pow overflowed (3rd run, p negative), never PowBackward1's derivative."""
    model, loss, tr = gem_learnable_p_adam()
    assert torch.isnan(loss) and torch.isnan(model.pool.p).all()
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("nonfinite_parameter", "overflow"),
           not_reasons=("infinite_derivative",), tensor="loss", op="pow",
           line="pooled = x.clamp(min=self.eps).pow(self.p)",
           says=("model.pool.p.grad", "opt.step()", "3rd of 5", "negative power", "larger than float32"),
           never=("derivative of a power is infinite", "PowBackward1"))


def test_fix_bounds_the_learnable_exponent():
    """The fix keeps p from going negative (clamp it after each step, or 1 + softplus), never (pooled + eps) ** p."""
    model, loss, tr = gem_learnable_p_adam()
    expect(gl.explain(loss, tr), fix=("exponent from going negative", "F.softplus", "skip optimizer.step()"),
           never_fix=("(pooled + eps) ** p",))
