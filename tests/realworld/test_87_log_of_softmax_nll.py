"""torch.log(softmax(x)) with NLLLoss: the loss is finite, the gradient NaN where softmax underflowed to 0.

Address: https://github.com/pytorch/pytorch/issues/1620
Title: [Feature Request] nn.Log (or improvement of torch.log)

What went wrong: for a copy mechanism the reporter computed log probabilities as torch.log(nn.Softmax()(x))
and fed them to NLLLoss; with data [[0, 50, -50]] and some random Linear layers, the gradients were
sometimes NaN, while nn.LogSoftmax gave correct ones. softmax underflows to exactly 0 for a logit far
below the largest; log(0) = -inf is not used by the loss, but log's backward there is 0 * (1/0) = NaN.

Accepted answer: use log_softmax (nn.LogSoftmax / F.log_softmax), or F.cross_entropy on the logits,
which never forms log(0).

The loss value is finite: only the replay shows LogBackward0 sending NaN.
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


def log_of_softmax_nll():
    sm = nn.Softmax(dim=1)
    crit = nn.NLLLoss()
    target = torch.LongTensor([1])
    data = torch.FloatTensor([[0, 50, -50]])
    torch.manual_seed(464)  # (one of the random layers whose softmax underflows: about 1 in 400 of them)
    model = nn.Linear(3, 3, bias=False)
    with gl.trace() as tr:
        loss_sm = crit(torch.log(sm(model(data))), target)
        loss_sm.backward()
    return model, loss_sm, tr


def test_names_log_of_softmax():
    """explain(model.weight, tr) is nonfinite_backward + log_of_softmax at log, on the loss line, though the loss is finite."""
    model, loss_sm, tr = log_of_softmax_nll()
    assert torch.isfinite(loss_sm)
    expect(gl.explain(model.weight, tr), reason="nonfinite_backward", reasons=("infinite_derivative", "log_of_softmax"),
           tensor="model.weight", op=("log", "LogBackward0"), line="torch.log(sm(model(data)))",
           says=("though loss_sm was finite", "softmax's result[0, 0] = 0", "underflowed"))


def test_says_the_loss_did_not_use_that_element_and_no_where():
    """The answer says the gradient that arrived there was 0 (nll_loss did not use it) and never invents a torch.where."""
    model, loss_sm, tr = log_of_softmax_nll()
    expect(gl.explain(model.weight, tr), reasons=("zero_times_inf",), says=("nll_loss did not use that element",),
           never=("torch.where", "where_unchosen", "overflow"))


def test_fix_is_log_softmax():
    """The fix is the thread's: log_softmax (or cross_entropy on the logits) instead of log(softmax(x))."""
    model, loss_sm, tr = log_of_softmax_nll()
    expect(gl.explain(model.weight, tr), fix=("torch.log_softmax", "F.cross_entropy"), never_fix=("clamp(min=eps)",))
