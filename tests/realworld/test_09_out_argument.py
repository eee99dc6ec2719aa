"""torch.add(c, 1, out=c) on a tensor that requires grad is refused: out= is not differentiable.

Address: https://discuss.pytorch.org/t/inplace-operation-changes-is-leaf-attribute/120297
Title: Inplace operation changes is_leaf attribute

What went wrong: among several ways of writing into a leaf c that requires grad, the poster tried
torch.add(c, 1, out=c), which raises "add(): functions with out=... arguments don't support
automatic differentiation, but one of the arguments requires grad."

Accepted answer (standard; the stored copy shows only the question): out= is never
differentiable; use the out-of-place op (c2 = c + 1), or do the write under torch.no_grad() when it
is not meant to be differentiated.
"""

import pytest
import torch

from _helpers import HOW, expect, explained, note


def out_argument():
    c = torch.randn(2, 3, requires_grad=True)
    torch.add(c, 1, out=c)
    return c


@pytest.mark.parametrize("how", HOW)
def test_out_argument_is_recognised(how):
    """explain_error says out= was given a tensor that requires grad, names c and the line, and drops out=."""
    expect(explained(out_argument, how), reason="out_argument", tensor="c", line="torch.add(c, 1, out=c)",
           says=("out=",), fix=(("Drop out=", "without out=", "torch.no_grad()"),))


@pytest.mark.parametrize("how", HOW)
def test_op_is_add(how):
    """e.op is the operation given out=, add."""
    expect(explained(out_argument, how), op=("add", "torch.add"))


def test_note_explains_out_argument():
    """The note of trace(explain_errors=True) explains out= instead of quoting an unknown message."""
    expect(note(out_argument), says=("out=", "c"), never=("does not recognise",))
