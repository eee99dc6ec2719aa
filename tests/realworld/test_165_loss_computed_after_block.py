"""A trace that covers the model's forward only (up to the softmax probabilities) while the loss, -log(probs) · one-hot, is computed after the block: a probability of exactly 0 makes log -inf and 0 · inf NaN, in code the trace never saw.

Address: https://github.com/allenai/allennlp/issues/2797
Title: Softmax giving absolute 0 resulting in 'nan' loss value

What went wrong: a modified DecomposableAttention model hit "nan loss encountered": with label logits
such as -142 and -248 the softmax returned probabilities of exactly 0, -torch.log of them was inf, and
the product with the one-hot labels (0 · inf) made the summed loss NaN. Here an over-confident
classifier's softmax rounds some probabilities to 0; the user traced only the forward pass and
computes the same loss after the block.

Accepted answer: the stored copy of the thread holds only the question (the code and the printed
tensors), not the replies. The standard fix is to stay in log space: F.log_softmax, or
F.cross_entropy on the logits.

An honest answer: every value the trace saw was finite (probabilities with exact zeros). graphlens
says the trace never recorded the loss, names no op of the block as its maker, and asks for the loss
to be computed inside the block.
"""

import contextlib

import torch
import torch.nn.functional as F
from torch import nn

import graphlens as gl
from _helpers import expect


def loss_computed_after_block(traced=True):
    torch.manual_seed(0)
    clf = nn.Sequential(nn.Linear(6, 20), nn.ReLU(), nn.Linear(20, 4))
    with torch.no_grad():
        clf[2].weight *= 600.0  # a classifier that has become far too sure of itself
    feats, labels = torch.randn(5, 6), torch.randint(0, 4, (5,))
    with (gl.trace() if traced else contextlib.nullcontext()) as tr:
        scores = clf(feats)
        probs = torch.softmax(scores, dim=-1)
    # the loss is computed after the traced block
    targets = F.one_hot(labels, 4).float()
    loss = (-torch.log(probs) * targets).sum(dim=-1).mean()
    loss.backward()
    return clf, probs, loss, tr


def _bits(t):
    return t.detach().reshape(-1).view(torch.uint8)


def test_nan_loss_says_the_trace_never_recorded_it():
    """explain(loss, tr): nonfinite_unseen, the trace never recorded the loss (made outside its block); no op and no line, never the softmax of the block as the maker."""
    clf, probs, loss, tr = loss_computed_after_block()
    assert torch.isnan(loss) and torch.isfinite(probs).all() and (probs == 0).any()
    e = gl.explain(loss, tr)
    assert e.op is None and e.line is None
    expect(e, reason="nonfinite_forward", reasons=("nonfinite_unseen",), not_reasons=("overflow", "log_of_zero"),
           tensor="loss", says=("The trace given never recorded loss", "loss was made outside its block",
                                "cannot tell which one made the first non-finite value"),
           never=("made it from finite", "softmax", "overflow", "linear"))


def test_fix_moves_the_loss_inside_the_block():
    """The fix computes the loss inside the graphlens.trace() block (the forward and the loss) and asks again."""
    clf, probs, loss, tr = loss_computed_after_block()
    expect(gl.explain(loss, tr), fix=("Compute loss inside the graphlens.trace() block", "the forward, the loss"))


def test_nan_gradient_was_made_by_a_backward_the_trace_did_not_see():
    """explain(clf.0.weight, tr): every gradient the trace saw was finite, the NaN came from a backward outside the block (nonfinite_unseen); no backward node of the block is blamed."""
    clf, probs, loss, tr = loss_computed_after_block()
    assert torch.isnan(clf[0].weight.grad).any()
    e = gl.explain(clf[0].weight, tr)
    assert e.op is None and e.line is None
    expect(e, reason="nonfinite_backward", reasons=("nonfinite_unseen",), tensor="clf.0.weight",
           says=("every gradient the trace saw flow was finite", "a backward outside the block"),
           fix=("inside the graphlens.trace() block",), never=("SoftmaxBackward0", "overflow", "made it from finite"))


def test_tracing_changes_no_number():
    """The probabilities, the loss and every gradient of the traced run are bitwise those of the plain run (NaN included)."""
    plain, plain_probs, plain_loss, _ = loss_computed_after_block(traced=False)
    traced, traced_probs, traced_loss, _ = loss_computed_after_block(traced=True)
    assert torch.equal(_bits(plain_probs), _bits(traced_probs)) and torch.equal(_bits(plain_loss), _bits(traced_loss))
    for p, q in zip(plain.parameters(), traced.parameters()):
        assert torch.equal(_bits(p.grad), _bits(q.grad))
