"""A loss computed from argmax labels has no graph: argmax cut it from the logits.

Address: https://php.bkmy88.com/faq/1835025.html
Title: PyTorch训练中no grad错误的诊断与修复 (diagnosing the "element 0 of tensors does not require grad" error)

What went wrong: the training loop turned logits into hard labels with
torch.softmax(logits, dim=1).argmax(dim=1).type(torch.float32) and fed them to the loss. argmax
returns integer indices with no grad_fn, the float cast cannot bring the graph back, and
loss.backward() fails with "element 0 of tensors does not require grad and does not have a grad_fn".

Accepted answer: give the loss the logits (e.g. CrossEntropyLoss on train_logits) and use argmax
only for accuracy.

That argmax made the cut is seen by a trace; without one it can only be read from the user's
code, as a lead (and said as one).
"""

import pytest
import torch
from torch import nn

from _helpers import HOW, expect, explained, note


def argmax_then_loss():
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    X_train = torch.randn(5, 4)
    y_train = torch.tensor([0.0, 1.0, 2.0, 1.0, 0.0])
    loss_fn = nn.MSELoss()
    train_logits = model(X_train)
    train_preds_probs = torch.softmax(train_logits, dim=1).argmax(dim=1).type(torch.float32)
    loss = loss_fn(train_preds_probs, y_train)
    loss.backward()


@pytest.mark.parametrize("how", HOW)
def test_says_nothing_false_about_the_cut(how):
    """explain_error says backward met a loss without grad_fn, names integer results, blames no detach() or no_grad."""
    expect(explained(argmax_then_loss, how), reason="no_grad_fn", tensor="loss", says=("integer",),
           not_reasons=("made_by_detach", "cut_by_detach", "created_in_no_grad", "cut_by_no_grad"))


def test_plain_answer_gives_the_argmax_as_a_lead():
    """Without a trace, the argmax read from the user's code is given as a lead, said conditionally."""
    expect(explained(argmax_then_loss), reasons=("cut_by_integer_op",), op="argmax", line="argmax(dim=1)", says=("If ",),
           fix=("logits",))


def test_traced_answer_names_the_argmax():
    """With a trace, the answer is no_grad_fn + cut_by_integer_op at argmax, on the argmax line."""
    expect(explained(argmax_then_loss, "traced"), reason="no_grad_fn", reasons=("cut_by_integer_op",), op="argmax",
           line="argmax(dim=1)", says=("argmax",))


@pytest.mark.parametrize("how", HOW)
def test_fix_does_not_ask_for_requires_grad_again(how):
    """The fix does not tell the user to set requires_grad=True on parameters that have it."""
    expect(explained(argmax_then_loss, how), never_fix=("requires_grad=True",))


def test_note_names_the_argmax():
    """The note of trace(explain_errors=True) names argmax as the cut."""
    expect(note(argmax_then_loss), says=("argmax",))


def test_traced_answer_calls_the_tensors_by_what_made_them():
    """With a trace, the tensors around argmax are the softmax result and the variables computed from it, not bare ids."""
    expect(explained(argmax_then_loss, "traced"), says=("the result of softmax", "(train_preds_probs, loss)"),
           never=("an unnamed tensor",))
