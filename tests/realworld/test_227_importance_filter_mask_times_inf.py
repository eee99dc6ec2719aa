"""A PPO policy loss filters tokens by multiplying an importance weight with a boolean filter: a stale token's exp overflows to inf, the filter rejects it, and inf × 0 is NaN.

Address: https://github.com/OpenRLHF/OpenRLHF/pull/1314
Title: fix(ppo): avoid NaNs when ICEPOP filters overflow ratios

What went wrong: w = exp(old_log_probs - rollout_log_probs) per token, then w = w * ((w >= low) & (w <= high)).
One stale token's log-prob gap is about 1000: exp overflows to inf, the filter is False there, and
inf * 0 = NaN poisons the loss.

Accepted answer: (the merged fix) select with torch.where(filter, w, 0) instead of multiplying.

The first non-finite value is exp's inf (said, with its clamp); the answer must also say that the
multiplication by the mask made the NaN, and give the selection as the way to drop masked values.
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


def policy_loss(log_probs, old_log_probs, advantages, rollout_log_probs, select=False):
    ratio = (log_probs - old_log_probs).exp()
    loss = -torch.min(ratio * advantages, ratio.clamp(0.8, 1.2) * advantages)
    vllm_is = torch.exp(old_log_probs - rollout_log_probs).detach()
    keep = (vllm_is >= 0.5) & (vllm_is <= 5.0)
    vllm_is = torch.where(keep, vllm_is, 0.0) if select else vllm_is * keep
    return (vllm_is * loss).mean()


def batch():
    torch.manual_seed(0)
    head = nn.Linear(4, 6)
    logp = torch.log_softmax(head(torch.randn(1, 3, 4)), -1).gather(-1, torch.tensor([[[2], [0], [5]]])).squeeze(-1)
    return head, logp, torch.tensor([[-1.2, -0.7, -2.0]]), torch.tensor([[0.5, -0.3, 1.0]]), torch.tensor([[-1.1, -1000.0, -2.1]])


def test_traced_says_the_mask_product_made_the_nan():
    """Traced: exp's overflow first, then the multiplication by the mask named as where the NaN was made, torch.where as the fix."""
    head, logp, old, adv, rollout = batch()
    with gl.trace() as tr:
        loss = policy_loss(logp, old, adv, rollout)
        loss.backward()
    assert torch.isnan(loss)
    e = gl.explain(loss, tr)
    expect(e, reasons=("overflow",), op="exp", says=("0 × inf", "keep"), fix=("torch.where(keep, vllm_is, 0)",))


def test_selecting_keeps_the_loss_finite():
    """torch.where instead of the product: the loss is finite."""
    head, logp, old, adv, rollout = batch()
    assert torch.isfinite(policy_loss(logp, old, adv, rollout, select=True))
