"""Hand-written attention: masked_fill(pad, -inf) then softmax, with one query allowed no key: NaN.

Address: https://github.com/pytorch/pytorch/pull/196170
Title: [nn] Fix NaN gradients in multi_head_attention_forward for fully-masked rows

What went wrong: a row of attention scores masked at every position is all -inf; softmax of it is
0 / 0 = NaN, and although the caller never uses that row, backward multiplies its NaN by 0 and the NaN
reaches the projection weights of the whole batch.

Accepted answer: (the pull request's summary) the NaN is the plain softmax of an all -inf row; the fix
zeroes such rows (as torch's safe softmax does); from user code: keep a position unmasked in every row,
or mask with a large finite negative number.

The -inf the mask writes is on purpose: the answer names the softmax that made NaN of it, and the row,
read from the live scores.
"""

import torch

import graphlens as gl
from _helpers import expect


def masked_row_attention():
    torch.manual_seed(0)
    q = torch.randn(3, 4, requires_grad=True)
    k = torch.randn(3, 4)
    v = torch.randn(3, 4, requires_grad=True)
    allowed = torch.tensor([[True, False, False], [True, True, False], [False, False, False]])  # query 2 sees nothing
    with gl.trace() as tr:
        scores = (q @ k.T) / 2.0
        scores = scores.masked_fill(~allowed, float("-inf"))
        attn = torch.softmax(scores, dim=-1)
        loss = (attn @ v)[:2].sum()  # (the caller drops the empty query's row)
        loss.backward()
    return q, v, scores, loss, tr


def test_nan_gradient_names_the_softmax_and_the_row():
    """explain(v, tr): the first NaN was made by softmax, on its line, row [2, :] of scores masked everywhere."""
    q, v, scores, loss, tr = masked_row_attention()
    assert torch.isfinite(loss) and not torch.isfinite(v.grad).all()  # (attn.T @ grad: the dropped row's 0 × NaN)
    expect(gl.explain(v, tr), reasons=("masked_softmax",), tensor="v", op="softmax", line="torch.softmax(scores, dim=-1)",
           says=("row [2, :]", "-inf", "0 / 0 = NaN", "masked_fill"), never=("overflow", "larger than float32"))


def test_fix_keeps_a_position_unmasked_or_uses_a_finite_mask():
    """The fix: leave a position unmasked in each row, or a large finite number (finfo.min) instead of -inf."""
    q, v, scores, loss, tr = masked_row_attention()
    expect(gl.explain(v, tr), fix=("at least one unmasked position", "torch.finfo"), never_fix=("Scale the values down",))


def test_the_query_gradient_is_finite_and_said_so():
    """q's gradient is finite (masked_fill sends 0 to every masked score): graphlens says grad_ok, no NaN story."""
    q, v, scores, loss, tr = masked_row_attention()
    assert torch.isfinite(q.grad).all()
    expect(gl.explain(q, tr), reason="grad_ok", never=("NaN", ".data"))
