"""The mean of logit(p) over windows whose probability p is a sigmoid saturated to exactly 1.0: logit's backward sends NaN to the weights.

Address: https://github.com/salzberg-lab/Balrog/issues/7
Title: predprob = float(expit(torch.mean(logit(subseq))))

What went wrong: a gene score averaged the logits of per-window probabilities and took a sigmoid of
the mean. One window's probability is exactly 1.0 (a sigmoid saturated in float32), so logit gives inf,
the mean is inf and the final sigmoid 1.0: the loss is finite, but logit's backward divides by
p·(1 − p) = 0 and the weights' gradient is NaN.

Accepted answer: the reporter's (the issue has no reply): a single 0.0 or 1.0 makes logit ±inf and the
mean useless; torch.logit has an eps argument that clamps the probabilities. Where the probabilities are
a sigmoid's output, the sigmoid's input already is the logit.

The loss is finite, so the question is the weights' gradient: the answer names LogitBackward0 at
p = 1, never an overflow.
"""

import torch
import torch.nn.functional as F
from torch import nn

import graphlens as gl
from _helpers import expect


class GeneScorer(nn.Module):
    def __init__(self):
        super().__init__()
        self.window = nn.Linear(5, 1)

    def forward(self, windows):
        probs = torch.sigmoid(self.window(windows)).squeeze(-1)
        window_logits = torch.logit(probs)
        return torch.sigmoid(window_logits.mean(-1))


def logit_of_saturated_sigmoid():
    torch.manual_seed(0)
    model = GeneScorer()
    with torch.no_grad():
        model.window.weight.fill_(1.5)
        model.window.bias.zero_()
    windows = torch.randn(2, 4, 5)
    windows[0, 2] = 4.0  # a strongly coding window: logit 30, sigmoid -> 1.0
    label = torch.tensor([1.0, 0.0])
    with gl.trace() as tr:
        pred = model(windows)
        loss = F.binary_cross_entropy(pred, label)
        loss.backward()
    return model, loss, tr


def test_nan_gradient_names_logit_at_one():
    """explain(model.window.weight, tr): LogitBackward0 sent NaN where probs[0, 2] = 1 (0 from the saturated mean times 1 / (x·(1 − x)))."""
    model, loss, tr = logit_of_saturated_sigmoid()
    assert torch.isfinite(loss) and torch.isnan(model.window.weight.grad).any()
    expect(gl.explain(model.window.weight, tr), reason="nonfinite_backward",
           reasons=("infinite_derivative", "zero_times_inf"), not_reasons=("overflow",),
           tensor="model.window.weight", op="logit", line="window_logits = torch.logit(probs)",
           says=("LogitBackward0", "probs[0, 2] = 1", "1 / (x·(1 − x))"),
           never=("larger than float32", "derivative of logit is not finite at that input"))


def test_fix_is_logit_eps_or_the_sigmoid_input():
    """The fix is torch.logit(probs, eps=...) or the sigmoid's input itself, never a bare "keep the input away" rule."""
    model, loss, tr = logit_of_saturated_sigmoid()
    expect(gl.explain(model.window.weight, tr), fix=("torch.logit(probs, eps=", "logit(sigmoid(z))"),
           never_fix=("away from the values where its derivative is not finite",))
