"""A loss built from torch.histc cannot backward: histc has no gradient, although its input requires grad.

Address: https://discuss.pytorch.org/t/differentiable-torch-histc/25865
Title: Differentiable torch.histc?

What went wrong: the poster wanted a loss on the histogram of a network's output and found that
torch.histc has no derivative. On today's PyTorch the histogram simply comes back without a
grad_fn although its input requires grad, so a loss computed from it fails with "element 0 of
tensors does not require grad and does not have a grad_fn".

Accepted answer: histc is not differentiable; build a soft histogram instead (a Gaussian or
triangular kernel around each bin centre), which has a gradient.

graphlens used to say that the tensors the loss was computed from "do not require grad" — false:
the input of histc does. A trace shows the op that cut the path; without one, histc can only be read
from the user's code, as a lead.
"""

import pytest
import torch

import graphlens as gl
from graphlens.explain.premises import check
from _helpers import HOW, expect, explained


def histc_loss():
    torch.manual_seed(0)
    out = torch.randn(16, requires_grad=True)
    target = torch.full((4,), 4.0)
    scaled = out * 2
    hist = torch.histc(scaled, bins=4, min=-2, max=2)
    loss = ((hist - target) ** 2).mean()
    loss.backward()


def histc_traced():
    torch.manual_seed(0)
    out = torch.randn(16, requires_grad=True)
    try:
        with gl.trace() as tr:
            hist = torch.histc(out * 2, bins=4, min=-2, max=2)
            loss = ((hist - 4.0) ** 2).mean()
            loss.backward()
    except RuntimeError:
        return out, tr
    pytest.fail("backward through torch.histc raised nothing")


def test_traced_answer_names_histc_as_the_cut():
    """With a trace, the answer is no_grad_fn + cut_by_nondifferentiable_op at histc, on the histc line."""
    expect(explained(histc_loss, "traced"), reason="no_grad_fn", reasons=("cut_by_nondifferentiable_op",), op="histc",
           line="torch.histc(scaled", says=("no gradient",))


@pytest.mark.parametrize("how", HOW)
def test_never_says_the_inputs_do_not_require_grad(how):
    """Neither answer says the tensors the loss came from do not require grad, nor blames detach() or no_grad."""
    expect(explained(histc_loss, how), reason="no_grad_fn", tensor="loss",
           never=("as far as the trace saw them, do not require grad",),
           not_reasons=("cut_by_detach", "cut_by_no_grad", "created_in_no_grad", "made_by_detach"),
           never_fix=("(parameters do)", "torch.no_grad() block"))


def test_plain_answer_gives_histc_as_a_lead():
    """Without a trace, the histc call read from the code is given as a lead, said conditionally."""
    expect(explained(histc_loss), reasons=("cut_by_nondifferentiable_op",), op="histc", line="torch.histc(scaled",
           says=("If ",))


@pytest.mark.parametrize("how", HOW)
def test_fix_is_a_soft_histogram(how):
    """The fix replaces histc by a differentiable (soft) histogram, not by a requires_grad flag."""
    expect(explained(histc_loss, how), fix=(("soft", "differentiable"),), never_fix=("requires_grad=True",))


def test_explain_input_says_histc_cut_it():
    """explain(out, tr): the loss does not reach out because histc, at its line, has no gradient."""
    out, tr = histc_traced()
    expect(gl.explain(out, tr), reason="not_reachable", reasons=("cut_by_nondifferentiable_op",), op="histc",
           line="torch.histc(out * 2")


def test_traced_answers_state_no_false_premise():
    """Every premise the traced answers state (requires_grad of x and of the histogram, the op) holds in the graph."""
    out, tr = histc_traced()
    e = gl.explain(out, tr)
    assert ("requires_grad", True) in {(f[1], f[2]) for f in e.facts}
    assert check(e) == [] and check(explained(histc_loss, "traced")) == []
