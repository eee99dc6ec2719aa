"""A multi-label target whose unknown entry is marked with labels[2, 2] = float("nan") inside the training step: binary_cross_entropy_with_logits is NaN.

Address: https://github.com/open-mmlab/mmpretrain/issues/631
Title: How to deal with 'NAN' in multi label task ?

What went wrong: in a multi-label task some images were not fully annotated (class 1 and 2 known, class
3 unknown), so the reporter labelled the unknown class NaN, [0, 1, nan], and asked how to keep that
label from back-propagating; a NaN target makes the loss NaN. Here the labels are made before the step
and the unknown entry is marked in place, as the first use of labels inside the trace.

Accepted answer: Ezra-Yu (a maintainer): class_weight does not fit (a class weighted 0 can never be
learned); write your own loss and set the NaN entries to 0 (leave them out) before averaging. The
reporter closed the issue.

The old answer missed the in-place write on a tensor the trace had not seen yet and said labels "already
held NaN when the trace first saw it", a tensor made before the block; the answer must name
__setitem__ on the marking line, say the program wrote the NaN itself, and keep such entries out of the
loss.
"""

import contextlib
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import graphlens as gl
from _helpers import expect


def missing_label_marked_nan(traced=True):
    torch.manual_seed(0)
    head = nn.Linear(6, 3)
    feats = torch.randn(4, 6)
    labels = torch.tensor([[0.0, 1.0, 1.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
    with gl.trace() if traced else contextlib.nullcontext() as tr:
        labels[2, 2] = float("nan")  # image 2 was never annotated for class 3
        loss = F.binary_cross_entropy_with_logits(head(feats), labels)
        loss.backward()
    return head, labels, loss, tr


def _lineno(code):
    """The number of the first line of this file that begins with ``code`` (the program's line)."""
    lines = Path(__file__).read_text(encoding="utf-8").splitlines()
    return next(i for i, text in enumerate(lines, 1) if text.strip().startswith(code))


def _bits(t):
    """The bytes of a tensor: equal bits, NaN included."""
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def test_nan_loss_names_the_setitem_that_wrote_nan():
    """explain(loss, tr): __setitem__ on labels[2, 2] = float("nan") wrote the NaN, a value the program gave it; never "already held"."""
    head, labels, loss, tr = missing_label_marked_nan()
    assert torch.isnan(loss)
    e = gl.explain(loss, tr)
    assert e.lineno == _lineno('labels[2, 2] = float("nan")')
    expect(e, reason="nonfinite_forward", not_reasons=("nonfinite_input", "division_by_zero", "overflow"),
           tensor="loss", op="__setitem__", line='labels[2, 2] = float("nan")',
           says=("NaN at labels[2, 2]", "a value the program gave it", "not a result of arithmetic"),
           never=("already held", "when the trace first saw it", "made before the block"))


def test_the_weights_gradient_gets_the_same_answer():
    """explain(head.weight, tr): its NaN gradient comes from the NaN loss, whose first NaN is the same __setitem__."""
    head, labels, loss, tr = missing_label_marked_nan()
    expect(gl.explain(head.weight, tr), reason="nonfinite_forward", not_reasons=("nonfinite_input",),
           tensor="head.weight", op="__setitem__", line='labels[2, 2] = float("nan")', never=("already held",))


def test_fix_keeps_the_marked_entries_out_of_the_loss():
    """The fix writes a finite value there or drops those entries before the loss (the thread: set them to 0 before averaging)."""
    head, labels, loss, tr = missing_label_marked_nan()
    expect(gl.explain(loss, tr), fix=("Write a finite value there", "drop the positions that hold it"),
           never_fix=("Check the data before the model",))


def test_without_a_trace_it_says_it_cannot_tell():
    """Without a trace the leaves that need grad are finite, labels is not one of them, and graphlens says it cannot tell; no op is named."""
    head, labels, loss, _ = missing_label_marked_nan(traced=False)
    e = gl.explain(loss)
    assert e.op is None and e.line is None
    expect(e, reason="nonfinite_forward", tensor="loss", says=("Without a trace",), never=("already held", "__setitem__"))


def test_tracing_changed_no_number():
    """The traced run gives the plain run's labels, loss and gradients bit for bit (NaN included)."""
    plain_head, plain_labels, plain_loss, _ = missing_label_marked_nan(traced=False)
    head, labels, loss, _ = missing_label_marked_nan()
    assert torch.equal(_bits(labels), _bits(plain_labels))
    assert torch.equal(_bits(loss), _bits(plain_loss))
    for (name, p), q in zip(head.named_parameters(), plain_head.parameters()):
        assert torch.equal(_bits(p.grad), _bits(q.grad)), name
