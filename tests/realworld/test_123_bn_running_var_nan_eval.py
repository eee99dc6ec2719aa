"""A BatchNorm whose running_var already holds NaN from a diverged epoch, evaluated in eval mode: the output is NaN.

Address: https://github.com/facebookresearch/maskrcnn-benchmark/issues/295
Title: Losses appear as nan in the middle of training

What went wrong: the losses turned NaN in the middle of training. A diverging step leaves NaN not
only in the weights but in batch norm's running statistics; in eval mode the layer then normalises
with them, and every output that touches the bad channel is NaN although the inputs and the
parameters are finite.

Accepted answer: fmassa: the learning rate was too large for training on a single GPU (the default
0.02 was kept with a batch of 2), so training diverged; scale the learning rate to the batch size.

The NaN was put into the buffer before the trace: the answer names the buffer (net.1.running_var), says
it already held NaN, and never claims that batch_norm made it from finite inputs.
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


def bn_running_var_nan_eval():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.ReLU(), nn.Linear(3, 1))
    net[1].running_var[1] = float("nan")  # left over from an earlier, diverged epoch
    net.eval()
    x = torch.randn(5, 4)
    y = torch.randn(5, 1)
    with gl.trace() as tr:
        loss = ((net(x) - y) ** 2).mean()
        loss.backward()
    return net, loss, tr


def test_nan_loss_names_the_running_statistic():
    """explain(loss, tr): net.1.running_var already held NaN at [1] when the trace first saw it; eval mode uses it."""
    net, loss, tr = bn_running_var_nan_eval()
    assert torch.isnan(loss)
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("nonfinite_input",), not_reasons=("overflow",),
           tensor="loss", says=("net.1.running_var", "already held NaN", "eval mode"),
           never=("from finite inputs", "overflow", "t5"))


def test_fix_resets_the_statistics():
    """The fix resets the running statistics (reset_running_stats) and traces training to find the bad batch; never isfinite(t5)."""
    net, loss, tr = bn_running_var_nan_eval()
    expect(gl.explain(loss, tr), fix=("reset_running_stats()", "trace the training steps"), never_fix=("t5",))
