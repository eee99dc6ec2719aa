"""A model made .half() trained with Adam(eps=1e-8): eps is 0 in float16, and a row whose gradient is 0 gets 0 / 0 = NaN.

Address: https://github.com/afiaka87/glide-finetune/issues/5
Title: Training on half precision leads to nan values

What went wrong: fine-tuning in half precision gave NaN values after the first iteration, although
the inputs and gradients were normal: Adam's update divides by sqrt(v) + eps, eps = 1e-8 rounds to 0 in
float16, and where a gradient has always been 0 (v = 0) the update is 0 / 0.

Accepted answer: the reporter's (pull request 6): give Adam eps=1e-4 in half precision instead of
the default 1e-8; keeping float32 master weights (mixed precision) avoids it too.

The NaN is written by the optimizer's addcdiv_ in opt.step(): the answer names the step, eps and
float16, not "from finite inputs".
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


def adam_fp16_eps_underflow():
    torch.manual_seed(0)
    emb = nn.Embedding(4, 3).half()
    opt = torch.optim.Adam(emb.parameters(), lr=1e-3)
    batches = [torch.tensor([0, 1]), torch.tensor([2, 1])]  # row 2 unused in step 1: its gradient is 0
    with gl.trace() as tr:
        for ids in batches:
            opt.zero_grad()
            loss = emb(ids).float().pow(2).sum()
            loss.backward()
            opt.step()
    return emb, loss, tr


def test_nan_loss_names_the_adam_step_and_its_zero_denominator():
    """explain(loss, tr): addcdiv_ in opt.step() wrote NaN into emb.weight[2, 0], where the denominator was 0."""
    emb, loss, tr = adam_fp16_eps_underflow()
    assert torch.isnan(loss)
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("nonfinite_parameter", "division_by_zero"),
           tensor="loss", op="addcdiv_", line="opt.step()",
           says=("emb.weight[2, 0]", "0 / 0", "sqrt(v) + eps"), never=("made it from finite inputs",))


def test_says_eps_rounds_to_zero_in_float16():
    """The answer says the default eps 1e-8 rounds to 0 in float16; the fix is eps=1e-4 or float32 state."""
    emb, loss, tr = adam_fp16_eps_underflow()
    expect(gl.explain(loss, tr), says=("1e-8", "rounds to 0", "float16"), fix=("eps=1e-4", "float32"),
           never_fix=("(torch.isfinite)",))
