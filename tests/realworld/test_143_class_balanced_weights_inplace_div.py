"""Class-balanced loss weights (1 - beta) / (1 - beta^n) computed in place with class_w.div_(effective), for a class with no training sample: 1 - beta^0 = 0 and the weight is inf.

Address: https://github.com/fcakyon/balanced-loss/pull/12
Title: Avoid nan loss when there are labels with no samples in the training data.

What went wrong: the class-balanced loss weights each class by (1 - beta) / (1 - beta^n_c), n_c the
number of training samples of class c. A test run on data that lacked one label gave n_c = 0, an
effective number 1 - beta^0 = 0, an infinite weight, and after the weights are normalised by their sum
a NaN loss. Here the weight vector and the effective numbers are made before the training step and the
division is done in place, class_w.div_(effective), as the first use of class_w inside the trace.

Accepted answer: the pull request (merged) adds safe=True: a class without samples gets an effective
number of inf, so its weight is 0, and the weights are normalised over the classes that have samples
(its comment: "Avoid division by 0 error for test cases without all labels present").

The old answer missed the in-place division on a tensor the trace had not seen yet and said class_w
"already held inf when the trace first saw it", a tensor made before the block; the answer must name
div_ on its line, the 0 in effective, and a division by zero.
"""

import contextlib
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import graphlens as gl
from _helpers import expect


def class_balanced_weights_inplace_div(traced=True):
    torch.manual_seed(0)
    head = nn.Linear(8, 5)
    counts = torch.tensor([120.0, 40.0, 0.0, 15.0, 300.0])  # class 2 has no sample in this split
    beta = 0.999
    effective = 1.0 - beta ** counts  # the effective number of samples: 0 for class 2
    class_w = torch.full((5,), 1.0 - beta)
    x, y = torch.randn(6, 8), torch.tensor([0, 1, 4, 3, 0, 4])
    with gl.trace() if traced else contextlib.nullcontext() as tr:
        class_w.div_(effective)
        weights = class_w / class_w.sum() * 5
        loss = F.cross_entropy(head(x), y, weight=weights)
        loss.backward()
    return head, class_w, loss, tr


def _lineno(code):
    """The number of the first line of this file that begins with ``code`` (the program's line)."""
    lines = Path(__file__).read_text(encoding="utf-8").splitlines()
    return next(i for i, text in enumerate(lines, 1) if text.strip().startswith(code))


def _bits(t):
    """The bytes of a tensor: equal bits, NaN included."""
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def test_nan_loss_names_the_inplace_division_by_zero():
    """explain(loss, tr): div_ on class_w.div_(effective) divided 0.001 by effective[2] = 0; never "already held"."""
    head, class_w, loss, tr = class_balanced_weights_inplace_div()
    assert torch.isnan(loss) and torch.isinf(class_w[2])
    e = gl.explain(loss, tr)
    assert e.lineno == _lineno("class_w.div_(effective)")
    expect(e, reason="nonfinite_forward", reasons=("division_by_zero",),
           not_reasons=("nonfinite_input", "overflow"), tensor="loss", op="div_", line="class_w.div_(effective)",
           says=("inf at class_w[2]", "the denominator effective[2] = 0", "dividing by 0 gives an infinity"),
           never=("already held", "when the trace first saw it", "made before the block"))


def test_the_weights_gradient_gets_the_same_answer():
    """explain(head.weight, tr): its NaN gradient comes from the NaN loss, whose first inf is the same div_."""
    head, class_w, loss, tr = class_balanced_weights_inplace_div()
    expect(gl.explain(head.weight, tr), reason="nonfinite_forward", reasons=("division_by_zero",),
           not_reasons=("nonfinite_input",), tensor="head.weight", op="div_", line="class_w.div_(effective)",
           never=("already held",))


def test_fix_keeps_the_denominator_away_from_zero():
    """The fix keeps effective away from 0 (an eps, a clamp, or a where for the empty class); never "check the data before the model"."""
    head, class_w, loss, tr = class_balanced_weights_inplace_div()
    expect(gl.explain(loss, tr), fix=("(effective + eps)", "effective.clamp(min=eps)", "torch.where(effective == 0"),
           never_fix=("Check the data before the model", "nan_to_num"))


def test_without_a_trace_it_says_it_cannot_tell():
    """Without a trace the leaves that need grad are finite, class_w is not one of them, and graphlens says it cannot tell; no op is named."""
    head, class_w, loss, _ = class_balanced_weights_inplace_div(traced=False)
    e = gl.explain(loss)
    assert e.op is None and e.line is None
    expect(e, reason="nonfinite_forward", tensor="loss", says=("Without a trace",), never=("already held", "div_"))


def test_tracing_changed_no_number():
    """The traced run gives the plain run's class weights, loss and gradients bit for bit (inf and NaN included)."""
    plain_head, plain_w, plain_loss, _ = class_balanced_weights_inplace_div(traced=False)
    head, class_w, loss, _ = class_balanced_weights_inplace_div()
    assert torch.equal(_bits(class_w), _bits(plain_w))
    assert torch.equal(_bits(loss), _bits(plain_loss))
    for (name, p), q in zip(head.named_parameters(), plain_head.parameters()):
        assert torch.equal(_bits(p.grad), _bits(q.grad)), name
