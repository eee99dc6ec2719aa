"""PyTorch's complex gradients are conjugate Wirtinger derivatives, by design.

Address: https://discuss.pytorch.org/t/autograd-on-complex-numbers/144687
Title: Autograd on complex numbers

What went wrong: for y = 2 * x**2 on a complex leaf x, the poster expected x.grad = 4 * x, but
PyTorch 1.8 and later return its complex conjugate. Nothing is broken: complex autograd returns the
conjugate Wirtinger derivative, the direction a real-valued loss should step in; the real loss
|z|^2 = (z * z.conj()).real.sum() gives z.grad = 2 * z under the same rule.

Accepted answer (replies, albanD): by design, gradients are conjugate Wirtinger derivatives so that
p = p - lr * grad works for complex parameters; conjugate if you want the holomorphic derivative.
"""

import numpy as np
import pytest
import torch

import graphlens as gl
from _helpers import expect


def holomorphic():
    dat = np.array([[1.0 + 2.0j, 3.0 + 4.0j], [5.0 + 6.0j, 7.0 + 8.0j]], dtype=np.complex128)
    x = torch.tensor(dat, requires_grad=True)
    y = 2.0 * x ** 2
    y.backward(gradient=torch.tensor(np.ones_like(dat)))
    return dat, x, y


def real_loss():
    z = torch.tensor([1.0 + 2.0j, -0.5 + 1.0j], requires_grad=True)
    loss = (z * z.conj()).real.sum()
    loss.backward()
    return z, loss


def test_complex_gradient_is_reported_as_set():
    """explain(x, y) says x.grad is set (the program: it is conj(4x)) and calls nothing wrong."""
    dat, x, y = holomorphic()
    assert torch.allclose(x.grad, torch.tensor(4 * dat).conj())
    expect(gl.explain(x, y), reason="grad_ok", tensor="x", never=("wrong",))


def test_real_loss_gradient_is_set():
    """explain(z, loss) says z.grad is set (the program: it is 2z)."""
    z, loss = real_loss()
    assert torch.allclose(z.grad, 2 * z.detach())
    expect(gl.explain(z, loss), reason="grad_ok", tensor="z")


def test_mentions_the_conjugate_convention():
    """The answer for a complex leaf says PyTorch gives the conjugate (Wirtinger) derivative."""
    dat, x, y = holomorphic()
    expect(gl.explain(x, y), says=("conjugate",))
