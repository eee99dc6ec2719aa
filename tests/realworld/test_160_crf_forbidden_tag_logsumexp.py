"""A linear-chain CRF whose forbidden transitions are -inf in a constraint mask: no tag may enter PAD, so PAD's forward variable is a logsumexp over an all -inf row, finite in value but NaN in its backward.

Address: https://github.com/pytorch/pytorch/issues/31829
Title: Improve gradient stability of logsumexp, softmax, log_softmax, logsigmoid at -inf (replace nan by zero)

What went wrong: in a hand-written CTC (a log-space dynamic program), torch.logsumexp returned NaN
gradients when every input of a reduced slice was -inf, although -inf is the natural "log of 0" there
and the forward value (-inf) was harmless. Here a BIO tagger's CRF adds a constraint mask of -inf
(O -> I-LOC, and every transition into PAD) to its learned transitions: PAD can never be reached, its
forward variable is logsumexp(-inf, ..., -inf) = -inf at every step, the log-partition stays finite,
and the backward exp(x - result) = exp(-inf - (-inf)) makes every transition's gradient NaN.

Accepted answer: the reporter (vadimkantorov) notes the problems are gone when float('-inf') is
replaced by torch.finfo(torch.float).min, and traces the NaN to the subtraction of two -inf in
logsumexp's backward formula; a contributor (speedcell4) posted a logsumexp that shifts by 0 when the
maximum is -inf and so gives zero gradients there. The stored thread does not show how the issue was
closed; torch 2.13's logsumexp still sends NaN here.

The forward is finite: the answer needs a trace to name the backward node (LogsumexpBackward0), the
logsumexp line and the all -inf slice, and to give a large finite negative number (finfo.min, -1e4)
as the fix, never an input-data problem or nan_to_num.
"""

import contextlib

import torch
from torch import nn

import graphlens as gl
from _helpers import expect

def transition_mask():
    """0 where a BIO tagging allows the step from one tag to the next, -inf where it forbids it (tags O, B-LOC, I-LOC, PAD)."""
    forbidden = torch.zeros(4, 4, dtype=torch.bool)  # forbidden[from, to]
    forbidden[0, 2] = True  # O -> I-LOC
    forbidden[:, 3] = True  # nothing may step into PAD
    return torch.zeros(4, 4).masked_fill(forbidden, float("-inf"))


class LinearChainCRF(nn.Module):
    def __init__(self):
        super().__init__()
        self.transitions = nn.Parameter(0.1 * torch.randn(4, 4))
        self.register_buffer("mask", transition_mask())

    def log_partition(self, scores):  # scores: (T, B, 4)
        allowed = self.transitions + self.mask
        alpha = scores[0]
        for t in range(1, scores.shape[0]):
            alpha = torch.logsumexp(alpha[:, :, None] + allowed[None], dim=1) + scores[t]
        return torch.logsumexp(alpha, dim=1)

    def path_score(self, scores, tags):
        cols = torch.arange(scores.shape[1])
        total = scores[0, cols, tags[0]]
        for t in range(1, scores.shape[0]):
            total = total + self.transitions[tags[t - 1], tags[t]] + scores[t, cols, tags[t]]
        return total


def crf_forbidden_tag_logsumexp(traced=True):
    torch.manual_seed(0)
    tagger = nn.Linear(5, 4)
    crf = LinearChainCRF()
    tokens = torch.randn(6, 3, 5)
    gold = torch.tensor([[1, 0, 0], [2, 0, 1], [2, 1, 2], [0, 2, 0], [0, 0, 1], [1, 0, 2]])
    with (gl.trace() if traced else contextlib.nullcontext()) as tr:
        scores = tagger(tokens)
        nll = (crf.log_partition(scores) - crf.path_score(scores, gold)).mean()
        nll.backward()
    return tagger, crf, nll, tr


def _bits(t):
    return t.detach().reshape(-1).view(torch.uint8)


def test_nan_gradient_names_logsumexp_over_an_all_forbidden_slice():
    """explain(crf.transitions, tr): LogsumexpBackward0 on the recursion's line sent NaN because its input was -inf on a whole reduced slice (masked_softmax); the loss was finite; never an overflow or bad input data."""
    tagger, crf, nll, tr = crf_forbidden_tag_logsumexp()
    assert torch.isfinite(nll) and torch.isnan(crf.transitions.grad).all()
    expect(gl.explain(crf.transitions, tr), reason="nonfinite_backward", reasons=("masked_softmax",),
           not_reasons=("overflow", "nonfinite_input"), tensor="crf.transitions", op="logsumexp",
           line="alpha = torch.logsumexp(alpha[:, :, None] + allowed[None], dim=1) + scores[t]",
           says=("though nll was finite", "LogsumexpBackward0", "received finite gradients and sent NaN",
                 "-inf at every position of a slice it reduced", "exp(-inf - (-inf)) = NaN"),
           never=("overflow", "input data", "nan_to_num"))


def test_fix_writes_forbidden_transitions_as_a_large_finite_negative_number():
    """The fix writes the forbidden entries as torch.finfo(dtype).min or -1e4 instead of -inf, or drops the unreachable PAD tag; never nan_to_num."""
    tagger, crf, nll, tr = crf_forbidden_tag_logsumexp()
    expect(gl.explain(crf.transitions, tr),
           fix=("large finite negative number instead of -inf", "torch.finfo(x.dtype).min", "-1e4", "padding tag"),
           never_fix=("nan_to_num", "input data"))


def test_without_a_trace_it_names_no_op():
    """Without a trace: the gradient is NaN, every leaf is finite, and no op is guessed (the forward was finite)."""
    tagger, crf, nll, _ = crf_forbidden_tag_logsumexp(traced=False)
    e = gl.explain(crf.transitions)
    assert e.op is None and e.line is None
    expect(e, reason="nonfinite_backward", tensor="crf.transitions", says=("Without a trace",),
           never=("logsumexp", "overflow", "input data", "nan_to_num"))


def test_tracing_changes_no_number():
    """The loss and every gradient of the traced run are bitwise those of the plain run (NaN included)."""
    plain_tagger, plain_crf, plain_nll, _ = crf_forbidden_tag_logsumexp(traced=False)
    traced_tagger, traced_crf, traced_nll, _ = crf_forbidden_tag_logsumexp(traced=True)
    assert torch.equal(_bits(plain_nll), _bits(traced_nll))
    for p, q in zip([*plain_tagger.parameters(), *plain_crf.parameters()],
                    [*traced_tagger.parameters(), *traced_crf.parameters()]):
        assert torch.equal(_bits(p), _bits(q)) and torch.equal(_bits(p.grad), _bits(q.grad))
