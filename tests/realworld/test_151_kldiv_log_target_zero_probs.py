"""Distillation with nn.KLDivLoss(log_target=True) fed teacher_probs.log() of top-k filtered probabilities: log(0) = -inf, and kl_div's exp(t) · (t − input) is 0 · (−inf) = NaN.

Address: https://github.com/google-deepmind/optax/pull/1786
Title: Keep kl_divergence finite when target probabilities are zero

What went wrong: the pull request lists the ways a KL divergence with zero target probabilities turns
NaN; one of them is the log-target form, where a target of log(0) = -inf makes
exp(-inf) · (-inf − log_prediction) = 0 · (−inf). Here a student is distilled from a teacher whose
distribution keeps only its two most likely classes (the others set to exactly 0 and the rest
renormalised), and the log-target handed to nn.KLDivLoss(log_target=True) is teacher_probs.log().

Accepted answer: the pull request (open, by its author; no maintainer verdict in the thread) says zero
targets are common (one-hot targets, masked vocabularies) and the loss should treat their terms as 0
rather than NaN. In PyTorch the same is reached from the user's side: pass the probabilities with
log_target=False (kl_div gives 0 where the target is 0), or build a finite log-target with
log_softmax.

The -inf comes from the log on the user's line; the NaN is made by kl_div. The answer names the log
of 0 and says how kl_div's log-target form turns it into NaN.
"""

import contextlib

import torch
import torch.nn.functional as F
from torch import nn

import graphlens as gl
from _helpers import expect


def keep_top_k(scores, k=2):
    probs = scores.softmax(-1)
    threshold = probs.topk(k, dim=-1).values[..., -1:]
    probs = torch.where(probs >= threshold, probs, torch.zeros_like(probs))
    return probs / probs.sum(-1, keepdim=True)


def kldiv_log_target_zero_probs(traced=True):
    torch.manual_seed(0)
    teacher = nn.Linear(6, 5)
    student = nn.Linear(6, 5)
    criterion = nn.KLDivLoss(reduction="batchmean", log_target=True)
    x = torch.randn(4, 6)
    with torch.no_grad():
        teacher_probs = keep_top_k(teacher(x))
    with (gl.trace() if traced else contextlib.nullcontext()) as tr:
        log_t = teacher_probs.log()
        loss = criterion(F.log_softmax(student(x), -1), log_t)
        loss.backward()
    return student, loss, tr


def _bits(t):
    return t.detach().reshape(-1).view(torch.uint8)


def test_nan_loss_names_the_log_of_zero_probabilities():
    """explain(loss, tr): log on the log_t line made -inf where teacher_probs is 0 (log_of_zero); never an overflow."""
    student, loss, tr = kldiv_log_target_zero_probs()
    assert torch.isnan(loss)
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("log_of_zero",), not_reasons=("overflow",),
           tensor="loss", op="log", line="log_t = teacher_probs.log()",
           says=("teacher_probs[0, 0] = 0", "The log of 0 is -inf"), never=("overflow",))


def test_says_kl_div_with_log_target_makes_the_nan():
    """The answer says kl_div was given the -inf as a log-target (log_target=True) and computes exp(t) · (t − input) = 0 · (−inf)."""
    student, loss, tr = kldiv_log_target_zero_probs()
    expect(gl.explain(loss, tr), says=("kl_div", "log_target=True", "exp(t)", "0 · (−inf) = NaN"))


def test_fix_passes_probabilities_or_a_log_softmax_target():
    """The fix passes the probabilities with log_target=False, or makes the log-target with F.log_softmax."""
    student, loss, tr = kldiv_log_target_zero_probs()
    expect(gl.explain(loss, tr), fix=("log_target=False", "F.log_softmax"))


def test_tracing_changes_no_number():
    """The loss and the student's gradients of the traced run are bitwise those of the plain run (NaN included)."""
    plain, plain_loss, _ = kldiv_log_target_zero_probs(traced=False)
    traced, traced_loss, _ = kldiv_log_target_zero_probs(traced=True)
    assert torch.equal(_bits(plain_loss), _bits(traced_loss))
    for p, q in zip(plain.parameters(), traced.parameters()):
        assert torch.equal(_bits(p.grad), _bits(q.grad))
