"""A hand-written step s_batch = s_batch - lr * s_batch.grad, outside no_grad, rebinds s_batch to a non-leaf: its .grad is None.

Address: https://github.com/BaiTheBest/SparseLLM/issues/13
Title: How to fix this problem?

What went wrong: the reporter's loop updated a tensor in place (s_batch -= s_learning_rate *
s_batch.grad, then s_batch.grad.zero_()) and got "a leaf Variable that requires grad is being
used in an in-place operation". The fix suggested in the thread replaces the in-place update
with s_batch = s_batch - s_learning_rate * s_batch.grad. Outside torch.no_grad() that binds
s_batch to a new tensor computed from the leaf (SubBackward0), not a leaf: its .grad stays None,
so the reporter's next line s_batch.grad.zero_() fails with AttributeError, and without it the
update itself fails on the next iteration with "unsupported operand type(s) for *: 'float' and
'NoneType'"; the gradient lands on the old leaf, which no variable names any more.

Accepted answer (the standard fix; the thread has none): keep the in-place update, inside
torch.no_grad() (with torch.no_grad(): s_batch -= s_learning_rate * s_batch.grad, then
s_batch.grad.zero_()), or let an optimizer do the step.

The evidence is the same with or without a trace: the raising frame's s_batch is a non-leaf whose
grad_fn is the update's own operation, and the code shows the line that rebound it.
"""

import pytest
import torch

import graphlens as gl
from _helpers import HOW, expect, explained, note, raised

pytestmark = pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf")

UPDATE = "s_batch = s_batch - s_learning_rate * s_batch.grad"


def rebind_update_outside_no_grad():
    torch.manual_seed(0)
    target = torch.randn(4, 3)
    s_batch = torch.zeros(4, 3, requires_grad=True)
    s_learning_rate = 0.1
    for step in range(2):
        loss_s = ((s_batch - target) ** 2).sum()
        loss_s.backward()
        s_batch = s_batch - s_learning_rate * s_batch.grad   # the thread's suggested replacement
    return s_batch


def rebind_update_then_zero_grad():
    torch.manual_seed(0)
    target = torch.randn(4, 3)
    s_batch = torch.zeros(4, 3, requires_grad=True)
    s_learning_rate = 0.1
    for step in range(2):
        loss_s = ((s_batch - target) ** 2).sum()
        loss_s.backward()
        s_batch = s_batch - s_learning_rate * s_batch.grad   # the thread's suggested replacement
        s_batch.grad.zero_()                                 # the reporter's next line
    return s_batch


@pytest.mark.parametrize("how", HOW)
def test_the_rebinding_is_named_with_its_line(how):
    """explain_error says s_batch.grad is None because the update on its line rebound s_batch (rebound_leaf), naming s_batch and that line."""
    e = explained(rebind_update_outside_no_grad, how)
    expect(e, reason="grad_is_none", reasons=("rebound_leaf", "nonleaf_not_retained"), tensor="s_batch", line=UPDATE,
           says=("not a leaf", ("earlier iteration", "previous iteration")),
           not_reasons=("requires_grad_false", "not_reachable", "unknown_error"), never=("frozen", "does not recognise"))
    assert e.lineno is not None and UPDATE in e.line


@pytest.mark.parametrize("how", HOW)
def test_the_fix_updates_in_place_under_no_grad(how):
    """The fix is the in-place update under torch.no_grad() and clearing the grad, or an optimizer; never requires_grad=True or retain_grad()."""
    expect(explained(rebind_update_outside_no_grad, how), fix=("with torch.no_grad()", "-=", ("zero_()", "= None"), "optim"),
           never_fix=("requires_grad=True", "retain_grad", "is not None"))


def test_gl_explain_of_the_error_is_the_same_answer():
    """gl.explain(err) of the second iteration's TypeError (None * float) gives the same reasons, tensor and line as explain_error."""
    err = raised(rebind_update_outside_no_grad)
    assert isinstance(err, TypeError) and "'NoneType'" in str(err)  # the program fails as the thread leads to
    expect(gl.explain(err), reason="grad_is_none", reasons=("rebound_leaf",), tensor="s_batch", line=UPDATE)


@pytest.mark.parametrize("how", HOW)
def test_with_the_reporters_zero_grad_line_the_update_line_is_named(how):
    """With s_batch.grad.zero_() right after the update, the AttributeError is explained by the update line above it, not by the failing line."""
    assert isinstance(raised(rebind_update_then_zero_grad), AttributeError)  # 'NoneType' object has no attribute 'zero_'
    e = explained(rebind_update_then_zero_grad, how)
    expect(e, reason="grad_is_none", reasons=("rebound_leaf",), tensor="s_batch", line=UPDATE,
           says=("s_batch.grad.zero_()",), fix=("with torch.no_grad()", "-="), never=("earlier iteration",))


def test_note_names_s_batch_and_the_in_place_update():
    """The note of trace(explain_errors=True) names s_batch and the in-place update."""
    expect(note(rebind_update_outside_no_grad), says=("s_batch", "-=", "torch.no_grad()"), never=("does not recognise",))
