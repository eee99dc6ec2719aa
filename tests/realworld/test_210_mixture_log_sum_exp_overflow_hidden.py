"""A capsule decoder's mixture likelihood normalises its mixing logits as logits - log(sum(exp(logits))): an exp overflows, and a second log(sum(exp(.))) hides the infinity as a 0.

Address: https://github.com/mlberkeley/scae-pytorch/pull/4
Title: fix loss nan bug by using logsumexp()

What went wrong: when the presence logits grew past ~88, exp overflowed float32 in the mixing
normalisation; the normalised log-probabilities became -inf, and the mixture's own
log(sum(exp(...))) then took exp(-inf) = 0 and the log of 0: the loss is infinite.

Accepted answer: (the pull request) torch.logsumexp for both reductions.

The log of 0 at the mixture line is no underflow of finite numbers: the exps there received -inf,
made by the overflowing exp of the normalisation.
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


def mixture_step():
    torch.manual_seed(0)
    templates = nn.Parameter(torch.rand(3, 4))
    presence = nn.Linear(2, 3)
    with torch.no_grad():
        presence.weight.mul_(80.0)  # (presence logits after some epochs: up to ~96, past the ~88.7 where exp overflows float32)
    pose, image = torch.tensor([[2.0, 1.5], [-0.5, 0.3]]), torch.rand(2, 4)
    with gl.trace() as tr:
        mixing_logits = presence(pose)[:, :, None].expand(2, 3, 4)
        mixing_log_prob = mixing_logits - mixing_logits.exp().sum(dim=1, keepdim=True).log()
        logits = torch.distributions.Normal(templates, 0.1).log_prob(image[:, None, :]) + mixing_log_prob
        rec_ll = logits.exp().sum(dim=1).log()
        loss = -rec_ll.sum(dim=1).mean()
        loss.backward()
    return loss, tr


def test_names_the_overflowing_exp_not_an_underflow():
    """overflow at the exp of the mixing normalisation (its line), fixed with logsumexp; never an underflow of finite logits."""
    loss, tr = mixture_step()
    assert torch.isinf(loss)
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("overflow",), not_reasons=("underflow",), op="exp",
           line="mixing_logits.exp().sum(dim=1, keepdim=True).log()", says=("received -inf",), fix=("logsumexp",),
           never=("far below 0, where",))
