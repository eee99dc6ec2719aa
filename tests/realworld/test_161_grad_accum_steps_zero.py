"""A critic update with gradient accumulation whose step count is update_batch // micro_batch = 0 (the micro batch was set larger than the batch): the scaled loss value_loss / 0 is inf, and the step writes NaN into the critic.

Address: https://github.com/verl-project/verl/issues/405
Title: batch_size argument validation to avoid NaN.

What went wrong: verl's PPO critic computes its number of gradient-accumulation steps as the mini batch
size floor-divided by the per-GPU micro batch size and divides each micro batch's loss by it; the
reporter notes that a micro batch configured larger than the mini batch makes the count 0 and the loss
computation NaN. Here a
value head's MSE loss is divided by accum_steps = 6 // 16 = 0, a Python int: the loss is inf, its
backward sends non-finite gradients and AdamW's step writes NaN into every weight.

Accepted answer: the reporter (wenxueru) asks for validation of the two batch sizes; vermouth1992 (a
maintainer) agreed and pointed to pull request #382 (not in the stored thread). The fix is that check,
or a step count of at least 1 (max(n, 1)).

The answer names the div on the scaling line and the Python number 0 as its denominator, not an
overflow, and follows a weight's NaN back through opt.step() to that division.
"""

import contextlib

import torch
import torch.nn.functional as F
from torch import nn

import graphlens as gl
from _helpers import expect


def grad_accum_steps_zero(traced=True):
    torch.manual_seed(0)
    value_head = nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 1))
    opt = torch.optim.AdamW(value_head.parameters(), lr=1e-3)
    update_batch, micro_batch = 6, 16  # the micro batch was set larger than the batch it splits
    accum_steps = update_batch // micro_batch  # 0
    states, targets = torch.randn(update_batch, 5), torch.randn(update_batch, 1)
    with (gl.trace() if traced else contextlib.nullcontext()) as tr:
        opt.zero_grad()
        for s, g in zip(states.split(micro_batch), targets.split(micro_batch)):
            value_loss = F.mse_loss(value_head(s), g)
            loss = value_loss / accum_steps
            loss.backward()
        opt.step()
    return value_head, opt, loss, tr


def _bits(t):
    return t.detach().reshape(-1).view(torch.uint8)


def test_inf_loss_names_the_division_by_the_python_number_zero():
    """explain(loss, tr): div on the scaling line, whose denominator is the plain Python number 0 (division_by_zero); never an overflow."""
    value_head, opt, loss, tr = grad_accum_steps_zero()
    assert torch.isinf(loss)
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("division_by_zero",),
           not_reasons=("overflow", "nonfinite_input"), tensor="loss", op="div", line="loss = value_loss / accum_steps",
           says=("the numerator value_loss = ", "The denominator is the number 0", "a plain Python number"),
           never=("overflow",))


def test_fix_keeps_the_step_count_at_least_one():
    """The fix makes the count at least 1 (max(n, 1)) or checks the batch sizes it comes from; eps would only hide the 0."""
    value_head, opt, loss, tr = grad_accum_steps_zero()
    expect(gl.explain(loss, tr),
           fix=("max(n, 1)", "a batch size smaller than expected", "adding eps to it would turn the 0 into a huge factor"))


def test_nan_weight_is_followed_back_through_the_step_to_the_division():
    """explain(value_head.0.weight, tr): opt.step() wrote the NaN from a gradient of the inf loss, made by the div by 0."""
    value_head, opt, loss, tr = grad_accum_steps_zero()
    assert torch.isnan(value_head[0].weight).all()
    expect(gl.explain(value_head[0].weight, tr), reason="nonfinite_forward",
           reasons=("nonfinite_parameter", "division_by_zero"), tensor="value_head.0.weight", op="div",
           line="loss = value_loss / accum_steps",
           says=("It comes from a gradient", "opt.step() at line", "started from loss, which was already inf",
                 "The denominator is the number 0"),
           fix=("max(n, 1)", "skip optimizer.step()"), never=("overflow",))


def test_tracing_changes_no_number():
    """The loss, every weight, gradient and AdamW state of the traced run are bitwise those of the plain run (inf and NaN included)."""
    plain, plain_opt, plain_loss, _ = grad_accum_steps_zero(traced=False)
    traced, traced_opt, traced_loss, _ = grad_accum_steps_zero(traced=True)
    assert torch.equal(_bits(plain_loss), _bits(traced_loss))
    for p, q in zip(plain.parameters(), traced.parameters()):
        assert torch.equal(_bits(p), _bits(q)) and torch.equal(_bits(p.grad), _bits(q.grad))
        for key, value in plain_opt.state[p].items():
            assert torch.equal(_bits(value), _bits(traced_opt.state[q][key])), key
