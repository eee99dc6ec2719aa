"""A stochastic weight average taken by hand after the traced steps with alpha = 1 / n_averaged at n = 0: alpha is inf and the averaged weights copied back are inf.

Address: https://github.com/timgaripov/swa/issues/3
Title: Incorrect model parameter update?

What went wrong: the issue asked whether SWA's running average, param1 · (1 - alpha) + param2 · alpha
with alpha = 1 / (n + 1), is the right update. Here the average is written with an off-by-one,
alpha = 1 / n_averaged while n_averaged is still 0: alpha = inf, the averaged weights are not finite,
and they are loaded back into the model after the traced training block.

Accepted answer: izmailovpavel (an author) showed that with alpha = 1 / (n + 1) the update is
(n · param1 + param2) / (n + 1), the running mean, so the code is right; the reporter agreed. The
off-by-one here is the mistake that update avoids.

An honest answer: every value the trace saw was finite and the weights were changed after the block:
graphlens says the write came later, by code it did not see, and blames no op or step inside the
block.
"""

import copy

import torch
import torch.nn.functional as F
from torch import nn

import graphlens as gl
from _helpers import expect


def moving_average(net1, net2, alpha):
    for p1, p2 in zip(net1.parameters(), net2.parameters()):
        p1.data *= (1.0 - alpha)
        p1.data += p2.data * alpha


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 3)

    def forward(self, x):
        return self.fc(x)


def swa_average_after_block():
    torch.manual_seed(0)
    model = Classifier()
    swa_model = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 5), torch.randint(0, 3, (8,))
    with gl.trace() as tr:
        for _ in range(2):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
    n_averaged = torch.tensor(0.0)
    moving_average(swa_model, model, 1.0 / n_averaged)  # off by one: should be 1 / (n + 1)
    model.load_state_dict(swa_model.state_dict())  # evaluate with the averaged weights
    return model, loss, tr


def test_nonfinite_weight_was_written_after_the_block():
    """explain(model.fc.weight, tr): nonfinite_unseen, written in place after the block ended (its version moved), by code the trace did not see."""
    model, loss, tr = swa_average_after_block()
    assert torch.isfinite(loss) and not torch.isfinite(model.fc.weight).all()
    e = gl.explain(model.fc.weight, tr)
    assert e.op is None and e.line is None
    expect(e, reason="nonfinite_forward", reasons=("nonfinite_unseen",), not_reasons=("nonfinite_parameter",),
           tensor="model.fc.weight", says=("after the trace's block ended", "graphlens did not see", "version counter"),
           never=("made it from finite", "overflow", "division by zero", "opt.step()", "cross_entropy"))


def test_fix_traces_the_code_that_changes_the_weight():
    """The fix runs the code that changes model.fc.weight inside the trace and checks it with isfinite after each step."""
    model, loss, tr = swa_average_after_block()
    expect(gl.explain(model.fc.weight, tr), fix=("inside the graphlens.trace() block", "torch.isfinite(model.fc.weight)"))


def test_without_a_trace_it_says_only_that_a_leaf_holds_inf():
    """Without a trace: model.fc.weight is a leaf no op computed, something before put the inf there, and no op is named."""
    model, loss, _ = swa_average_after_block()
    expect(gl.explain(model.fc.weight), reason="nonfinite_forward", tensor="model.fc.weight",
           says=("It is a leaf", "Without a trace"), never=("cross_entropy", "made it from finite"))
