"""-torch.log(sigmoid(x)) is inf once sigmoid saturates to 0: the loss of a skip-gram-like model goes inf.

Address: https://raberrytv.wordpress.com/page/2/
Title: PyTorch: Kludges To Ensure Numerical Stability

What went wrong: a sigmoid + log loss, -log(sigmoid(dot_p)) for a positive pair and -log(1 - sigmoid(dot_n))
for a negative one, hit log(0) when a dot product was large: sigmoid(x) is exactly 0 for a very
negative x (and exactly 1 for a very positive one), log gives -inf, the loss is inf and the gradients NaN.

Accepted answer: the post's: bound sigmoid's value to [eps, 1 - eps] before the log. (Today's standard:
F.logsigmoid, or binary_cross_entropy_with_logits, which never form log(0).)

The loss is inf in the forward pass, so the trace names the first log and the 0 it took.
"""

import torch

import graphlens as gl
from _helpers import expect


def log_of_saturated_sigmoid():
    sigmoid = torch.nn.functional.sigmoid
    anchor = torch.tensor([3.0, 4.0], requires_grad=True)
    tag_p = torch.tensor([-20.0, -20.0])
    tag_n = torch.tensor([20.0, 20.0])
    with gl.trace() as tr:
        dot_p = torch.dot(anchor, tag_p)
        loss_pos = -torch.log(sigmoid(dot_p))  # (1)
        dot_n = torch.dot(anchor, tag_n)
        loss_neg = -torch.log(1 - sigmoid(dot_n))  # (2)
        loss = loss_pos + loss_neg
        loss.backward()
    return anchor, loss, tr


def test_inf_loss_names_the_first_log():
    """explain(loss, tr) is nonfinite_forward + log_of_zero at the log of line (1), where sigmoid's result = 0."""
    anchor, loss, tr = log_of_saturated_sigmoid()
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("log_of_zero",), tensor="loss", op="log",
           line="loss_pos = -torch.log(sigmoid(dot_p))", says=("loss is inf", "sigmoid's result = 0", "saturated"))


def test_fix_is_logsigmoid_or_a_clamp():
    """The fix replaces log(sigmoid(z)) by F.logsigmoid(z) and covers log(1 - sigmoid(z)) too; no float32 or where advice."""
    anchor, loss, tr = log_of_saturated_sigmoid()
    expect(gl.explain(anchor, tr), reason="nonfinite_forward", says=("the loss it comes from, loss, is inf",),
           fix=("F.logsigmoid(z)", "F.logsigmoid(-z)"), never_fix=("float32", "torch.where"))
