"""InfoNCE masks padded negatives with -inf and only then divides the logits by a learned temperature: the temperature's gradient is NaN.

Address: https://github.com/NVIDIA-NeMo/Automodel/pull/3850
Title: fix(loss): scale InfoNCE logits before masking padded negatives

What went wrong: the padded hard-negative logits were set to -inf, then the whole row was divided by
the learned temperature. The loss stays finite, but the division's gradient for its divisor is
-grad * a / b**2: for a masked logit a = -inf and cross_entropy sends it a gradient of 0, so the
temperature gets 0 * inf = NaN.

Accepted answer: (the pull request) divide by the temperature first, then apply the -inf mask.

A finite fill of torch.finfo(x.dtype).min does not help: divided by a temperature below 1 it
overflows back to -inf.
"""

import torch
import torch.nn.functional as F
from torch import nn

import graphlens as gl
from _helpers import expect


def infonce_step():
    torch.manual_seed(0)
    proj = nn.Linear(8, 8)
    log_temp = nn.Parameter(torch.tensor(-2.0))
    queries, docs, negs = torch.randn(3, 8), torch.randn(3, 8), torch.randn(3, 4, 8)
    valid = torch.tensor([[True, True, True, True], [True, True, False, False], [True, True, True, False]])
    with gl.trace() as tr:
        q, d, dn = F.normalize(proj(queries), dim=-1), F.normalize(proj(docs), dim=-1), F.normalize(proj(negs), dim=-1)
        temperature = log_temp.exp()
        pos = (q * d).sum(-1, keepdim=True)
        neg = torch.einsum("bd,bkd->bk", q, dn).masked_fill(~valid, float("-inf"))
        logits = torch.cat([pos, neg], dim=1) / temperature
        loss = F.cross_entropy(logits, torch.zeros(3, dtype=torch.long))
        loss.backward()
    return log_temp, loss, tr


def test_the_temperature_gradient_is_named_with_the_division_and_divide_first():
    """NaN in log_temp.grad: the division's gradient for the divisor, 0 × inf where a masked logit is -inf; divide before masking."""
    log_temp, loss, tr = infonce_step()
    assert torch.isfinite(loss) and torch.isnan(log_temp.grad)
    expect(gl.explain(log_temp, tr), reason="nonfinite_backward", reasons=("masked_infinity",), op="masked_fill",
           says=("divisor", "0 × inf"), fix=("Divide before masking",), never_fix=("instead of -inf (torch.finfo(x.dtype).min).",))
