"""torch.where(x > 0, sqrt(x), x) with negative x: the branch not taken is NaN, and so is the gradient.

Address: https://github.com/pytorch/pytorch/issues/187297
Title: torch.where backward propagates NaN gradient from inactive sqrt branch

What went wrong: every input was negative, so where chose x itself and the expected gradient was 1;
autograd gave NaN, from the sqrt branch that was never chosen.

Accepted answer: where's backward sends 0 to the branch not chosen, and sqrt's backward multiplies it by a
derivative that is NaN for a negative input (its value is NaN there too): 0 × NaN = NaN. Make the input of
sqrt safe before the op (the double where), not after it.

The cause is the domain (a negative number), not sqrt's infinite derivative at 0: the answer reads the
input value.
"""

import torch

import graphlens as gl
from _helpers import expect


def where_sqrt_of_negative():
    xt = torch.tensor([-1.0, -4.0], requires_grad=True)
    with gl.trace() as tr:
        y = torch.where(xt > 0, torch.sqrt(xt), xt).sum()
        y.backward()
    return xt, y, tr


def test_names_sqrt_the_negative_input_and_the_unchosen_branch():
    """explain(xt, tr): SqrtBackward0 at xt[0] = -1, outside sqrt's domain, 0 times a NaN derivative; never 'infinite at x = 0'."""
    xt, y, tr = where_sqrt_of_negative()
    expect(gl.explain(xt, tr), reason="nonfinite_backward", reasons=("invalid_domain", "where_unchosen_branch"), tensor="xt",
           op=("sqrt", "SqrtBackward0"), line="torch.where(xt > 0, torch.sqrt(xt), xt)",
           says=("xt[0] = -1", "outside the domain of sqrt", "0 times a NaN derivative"),
           never=("infinite at x = 0", "an infinite derivative"))


def test_fix_is_the_double_where():
    """The fix makes sqrt's input safe before the op (the double where)."""
    xt, y, tr = where_sqrt_of_negative()
    expect(gl.explain(xt, tr), fix=("double-where", "before sqrt"), never_fix=("learning rate",))
