"""Rebinding a leaf's name to a view of it (x = x.view(2, 2)) loses the leaf that gets the gradient.

Address: https://www.codetd.com/en/article/15951456
Title: param.grad, requires_grad, grad_fn, grad/gradient are None?

What went wrong: the article makes a leaf x with requires_grad=True, rebinds x = x.view(2, 2)
and, after backward, finds x.grad None. The name x now points at a view made by ViewBackward0,
a non-leaf; the leaf that receives the gradient has no variable any more. A second variant keeps
both names and reads X_view.grad, which is None for the same reason.

Accepted answer: non-leaf tensors do not store .grad; keep a name for the leaf (do not rebind)
and read leaf.grad, or call retain_grad() on the view before backward.
"""

import pytest
import torch

import graphlens as gl
from _helpers import expect


def rebound():
    x = torch.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    x = x.view(2, 2)               # rebinding: the leaf is lost
    out = x.sum()
    out.backward()
    return x, out


def kept():
    X = torch.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    X_view = X.view(2, 2)
    out2 = (X_view * 3).sum()
    out2.backward()
    return X, X_view, out2


def test_rebound_name_is_a_view_of_an_unnamed_leaf():
    """explain(x, out) says x is a view made by ViewBackward0 (never a copy) and the gradient went to an unnamed leaf."""
    x, out = rebound()
    expect(gl.explain(x, out), reason="nonleaf_not_retained", not_reasons=("is_a_copy",), tensor="x",
           says=("ViewBackward0", "not a leaf", "a view of an unnamed leaf"), fix=("retain_grad()",))


def test_view_next_to_its_leaf_is_a_nonleaf():
    """explain(X_view, out2) says X_view is a non-leaf made by ViewBackward0 (its leaf X has the gradient)."""
    X, X_view, out2 = kept()
    e = gl.explain(X_view, out2)
    expect(e, reason="nonleaf_not_retained", tensor="X_view", says=("ViewBackward0",),
           fix=("X_view.retain_grad()",), not_reasons=("is_a_copy",))
    assert X.grad is not None  # the program itself: the named leaf got it


def test_names_the_view_op():
    """The explanation of x names ViewBackward0 as e.op."""
    x, out = rebound()
    expect(gl.explain(x, out), op=("ViewBackward0", "view"))
