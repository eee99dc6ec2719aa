"""A pair-consistency loss in bfloat16 clamps probabilities to 1 - 1e-6 before log1p(-p): in bfloat16 the bound rounds to 1, a saturated sigmoid stays 1, and the backward of log1p at -1 sends NaN.

Address: https://github.com/fastino-ai/GLiNER2/pull/155
Title: Fix NaN gradients from marginal_pair_consistency_loss in half precision

What went wrong: `torch.log1p(-probabilities.clamp(max=1.0 - 1e-6))` in bfloat16 gives NaN gradients
although the loss is finite.

Accepted answer (the pull request's): 1 - 1e-6 is not representable in bfloat16 and rounds to 1.0,
so the clamp does nothing; a probability of exactly 1 makes log1p(-1) = -inf, and its backward 0 times
infinity is NaN. Use a bound the dtype holds, or compute in float32.

The answer must name log1p's backward at -1 and say that the clamp's bound rounds to 1 in bfloat16,
with a fix that uses a representable bound or float32.
"""

import torch

import graphlens as gl
from _helpers import expect


def pair_loss_step():
    torch.manual_seed(0)
    logits = torch.tensor([9.0, 0.5, -1.0, 0.3, 2.0, -0.5], dtype=torch.bfloat16, requires_grad=True)
    span_to_pair = torch.tensor([0, 0, 1, 1, 2, 2])
    target = torch.tensor([1.0, 0.0, 1.0], dtype=torch.bfloat16)
    with gl.trace() as tr:
        probabilities = torch.sigmoid(logits)
        log_survival = torch.log1p(-probabilities.clamp(max=1.0 - 1e-6))
        summed = torch.zeros(3, dtype=torch.bfloat16).scatter_add_(0, span_to_pair, log_survival)
        pair_prob = 1 - torch.exp(summed)
        loss = ((pair_prob - target) ** 2).mean()
        loss.backward()
    return logits, loss, tr


def test_the_clamp_bound_rounds_to_one_in_bfloat16():
    """explain(logits, tr): Log1PBackward0 at -1, and the clamp's 0.999999 rounds to 1 in bfloat16; fix: a bound the dtype holds."""
    logits, loss, tr = pair_loss_step()
    assert torch.isfinite(loss) and torch.isnan(logits.grad).any()
    expect(gl.explain(logits, tr), reason="nonfinite_backward", reasons=("infinite_derivative", "clamp_rounded"), op="log1p",
           line="torch.log1p(-probabilities.clamp(max=1.0 - 1e-6))", says=("Log1PBackward0", "rounds to 1", "bfloat16"),
           fix=("finfo", "float32"))
