"""A PPO update whose behaviour log-probabilities come from the sampler: one rare action's log-ratio is about 95, exp overflows float32 to inf, and inf × an advantage of 0 makes the surrogate loss NaN.

Address: https://github.com/radixark/miles/pull/1363
Title: Clamp PPO ratio exponentials to fix NaN logits

What went wrong: in long-context agentic RL runs a few tokens had extreme log-ratios between the
current and the rollout policy; the importance ratio exp(log-ratio) overflowed to inf and ordinary PPO
arithmetic turned it into NaN, for example inf × 0 where the advantage is 0, which the clipped branch
does not prevent because the unclipped branch is still computed. Here the sampler logged -97 as the
log-probability of an exploratory action the current policy gives about -1.7: exp(95.3) is inf and
ratio × advantage is inf × 0 = NaN.

Accepted answer: the pull request (merged) computes the ratio in float32, maps non-finite log-ratios to
bounded values and clamps the exponent to [-20, 20] before exp, and guards the low-variance KL
estimator's exp the same way.

The only optimizer step traced ran after the overflow, so no learning rate can have made the
log-ratio large: the answer names exp and its input, clamping as the fix, and never a learning rate.
"""

import contextlib

import torch
from torch import nn
from torch.distributions import Categorical

import graphlens as gl
from _helpers import expect


def ppo_ratio_exp_overflow(traced=True):
    torch.manual_seed(0)
    actor = nn.Sequential(nn.Linear(4, 24), nn.Tanh(), nn.Linear(24, 3))
    opt = torch.optim.Adam(actor.parameters(), lr=2.5e-4)
    obs = torch.randn(10, 4)
    acts = torch.randint(0, 3, (10,))
    with torch.no_grad():
        behaviour_logp = Categorical(logits=actor(obs)).log_prob(acts)
    behaviour_logp[2] = -97.0  # the sampler's log-probability of a rare exploratory action
    advantages = torch.randn(10)
    advantages[2] = 0.0
    with (gl.trace() if traced else contextlib.nullcontext()) as tr:
        logp = Categorical(logits=actor(obs)).log_prob(acts)
        ratio = (logp - behaviour_logp).exp()
        unclipped = ratio * advantages
        clipped = ratio.clamp(0.8, 1.2) * advantages
        loss = -torch.min(unclipped, clipped).mean()
        loss.backward()
        opt.step()
    return actor, opt, loss, tr


def _bits(t):
    return t.detach().reshape(-1).view(torch.uint8)


def test_nan_loss_names_the_overflowing_exp_of_the_log_ratio():
    """explain(loss, tr): exp on the ratio line overflowed float32 at ratio[2], from a log-ratio of about 95 (> 88.7); never a division or a log."""
    actor, opt, loss, tr = ppo_ratio_exp_overflow()
    assert torch.isnan(loss)
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("overflow",),
           not_reasons=("division_by_zero", "log_of_zero"), tensor="loss", op="exp",
           line="ratio = (logp - behaviour_logp).exp()",
           says=("inf at ratio[2]", "sub's result[2] = 95.3", "larger than float32 can hold", "inputs above about 88.7"),
           never=("division by", "log of"))


def test_fix_clamps_the_input_of_exp_and_blames_no_learning_rate():
    """The fix clamps the input of exp; no traced step ran before the overflow, so the answer never blames a learning rate."""
    actor, opt, loss, tr = ppo_ratio_exp_overflow()
    expect(gl.explain(loss, tr), fix=("Keep the input of exp in range", ".clamp(max="),
           never=("learning rate",), never_fix=("learning rate",))


def test_nan_weight_is_followed_back_to_exp_without_a_learning_rate():
    """explain(actor.0.weight, tr): the step wrote the NaN from the NaN loss's gradient, made by the exp; the step came after, so no learning rate is blamed."""
    actor, opt, loss, tr = ppo_ratio_exp_overflow()
    assert torch.isnan(actor[0].weight).any()
    expect(gl.explain(actor[0].weight, tr), reason="nonfinite_forward", reasons=("nonfinite_parameter", "overflow"),
           tensor="actor.0.weight", op="exp", line="ratio = (logp - behaviour_logp).exp()",
           says=("It comes from a gradient", "started from loss, which was already NaN", "inf at ratio[2]"),
           fix=(".clamp(max=", "skip optimizer.step()"), never=("learning rate",))


def test_tracing_changes_no_number():
    """The loss, every weight, gradient and Adam state of the traced run are bitwise those of the plain run (inf and NaN included)."""
    plain, plain_opt, plain_loss, _ = ppo_ratio_exp_overflow(traced=False)
    traced, traced_opt, traced_loss, _ = ppo_ratio_exp_overflow(traced=True)
    assert torch.equal(_bits(plain_loss), _bits(traced_loss))
    for p, q in zip(plain.parameters(), traced.parameters()):
        assert torch.equal(_bits(p), _bits(q)) and torch.equal(_bits(p.grad), _bits(q.grad))
        for key, value in plain_opt.state[p].items():
            assert torch.equal(_bits(value), _bits(traced_opt.state[q][key])), key
