"""An entropy bonus written torch.special.entr(softmax(logits)) on a collapsed policy: softmax rounds some probabilities to exactly 0, entr(0) = 0 keeps the loss finite, but entr's derivative -log(p) - 1 is infinite there and the step writes NaN into the policy.

Address: https://github.com/huggingface/trl/issues/7221
Title: entropy_from_logits returns NaN for zero-probability tokens

What went wrong: TRL's entropy helper computed exp(logps) * logps, which is 0 · (-inf) = NaN for a
token of probability 0, while torch.distributions.Categorical(logits=...).entropy() is finite on the
same logits. Here the entropy is computed with torch.special.entr on the softmax probabilities, which
is finite in the forward (entr(0) = 0) but not in the backward: with logit gaps above 100 softmax
returns exact zeros, entr's derivative is +inf there, softmax's backward turns it into NaN
(0 · inf), and RMSprop's step writes NaN into the weights.

Accepted answer: the report names Categorical(logits=...).entropy() as the finite reference. The
fixes proposed in the linked pull requests (xlogy(p, p); nan_to_num on the product, which a review
noted still leaves NaN gradients; replacing -inf log-probabilities by 0) are all shown closed in the
stored threads, so which one landed could not be verified. All of them compute the entropy from the
log-probabilities, or the logits, rather than from probabilities that may be 0.

The value of the asked weight was written by opt.step() (op and line name that write); the answer
follows the NaN gradient to its origin, SpecialEntrBackward0 at the entropy line, and gives the
entropy from the logits as the fix. It gives no second cause "at an element where the weight was
finite": the element is NaN in the value too.
"""

import contextlib

import torch
import torch.nn.functional as F
from torch import nn

import graphlens as gl
from _helpers import expect


def entropy_bonus_entr_backward(traced=True):
    torch.manual_seed(0)
    actor = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 6))
    with torch.no_grad():
        actor[2].weight *= 500.0  # a policy that has collapsed onto one action per state
    opt = torch.optim.RMSprop(actor.parameters(), lr=1e-3)
    obs = torch.randn(6, 4)
    acts = torch.randint(0, 6, (6,))
    returns = torch.randn(6)
    with (gl.trace() if traced else contextlib.nullcontext()) as tr:
        logits = actor(obs)
        chosen = F.log_softmax(logits, dim=-1)[torch.arange(6), acts]
        pi = logits.softmax(dim=-1)
        bonus = torch.special.entr(pi).sum(dim=-1).mean()
        loss = -(chosen * returns).mean() - 0.02 * bonus
        loss.backward()
        opt.step()
    return actor, opt, loss, tr


def _bits(t):
    return t.detach().reshape(-1).view(torch.uint8)


def test_nan_weight_follows_the_gradient_to_special_entr_backward():
    """explain(actor.2.weight, tr): opt.step() wrote the NaN; its gradient's origin is SpecialEntrBackward0 at the entropy line, infinite at pi = 0 (infinite_derivative); never an overflow."""
    actor, opt, loss, tr = entropy_bonus_entr_backward()
    assert torch.isfinite(loss) and torch.isnan(actor[2].weight).any()
    expect(gl.explain(actor[2].weight, tr), reason="nonfinite_forward",
           reasons=("nonfinite_parameter", "infinite_derivative"), not_reasons=("overflow",),
           tensor="actor.2.weight", op="addcdiv_", line="opt.step()",
           says=("It comes from a gradient", "SpecialEntrBackward0", "the backward of special_entr at line",
                 "bonus = torch.special.entr(pi).sum(dim=-1).mean()", "where pi[0, 0] = 0",
                 "-log(p) - 1, infinite at p = 0", "SoftmaxBackward0"),
           never=("overflow",))


def test_no_false_second_cause_at_a_finite_element():
    """The answer gives one cause: no "second cause, at an element where actor.2.weight was finite" (the element is NaN in the value as well)."""
    actor, opt, loss, tr = entropy_bonus_entr_backward()
    expect(gl.explain(actor[2].weight, tr), never=("has a second cause", "at an element where actor.2.weight was finite"))


def test_fix_computes_the_entropy_from_the_logits():
    """The fix computes the entropy from the logits (log_softmax, or Categorical(logits=logits).entropy()) and guards the step; never nan_to_num, which keeps the NaN gradient."""
    actor, opt, loss, tr = entropy_bonus_entr_backward()
    expect(gl.explain(actor[2].weight, tr),
           fix=("Compute the entropy from the logits", "F.log_softmax(logits, -1)",
                "Categorical(logits=logits).entropy()", "skip optimizer.step()"),
           never_fix=("nan_to_num",))


def test_tracing_changes_no_number():
    """The loss, every weight, gradient and RMSprop state of the traced run are bitwise those of the plain run (NaN included)."""
    plain, plain_opt, plain_loss, _ = entropy_bonus_entr_backward(traced=False)
    traced, traced_opt, traced_loss, _ = entropy_bonus_entr_backward(traced=True)
    assert torch.equal(_bits(plain_loss), _bits(traced_loss))
    for p, q in zip(plain.parameters(), traced.parameters()):
        assert torch.equal(_bits(p), _bits(q)) and torch.equal(_bits(p.grad), _bits(q.grad))
        for key, value in plain_opt.state[p].items():
            assert torch.equal(_bits(value), _bits(traced_opt.state[q][key])), key
