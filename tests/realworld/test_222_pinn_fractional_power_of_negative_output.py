"""A physics-informed net for non-linear diffusion writes D = k * u ** 1.2 of the raw network output: where u < 0 the power is NaN, and the residual's second derivative carries it into the loss.

Address: https://github.com/prateekbhustali/Physics-Informed-Neural-Networks/issues/1
Title: Solving non-linear diffusion equation

What went wrong: nothing keeps the network's output u non-negative; a negative number to the power 1.2
is NaN. The loss uses u_xx, computed with torch.autograd.grad(..., create_graph=True) from D, so the
loss's NaN is made by backward nodes: the backward of D's multiplication carries the NaN of the
power into the gradient.

Accepted answer: (the repository's owner) the fractional power of negative outputs is the NaN: keep the
base non-negative (a positive map such as softplus, or a clamp) before the power.

The answer once blamed the multiplication's "derivative that is not finite"; the multiplication only
multiplied by a factor that was already NaN in the forward pass: the power made it.
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


def gradients(outputs, inputs):
    return torch.autograd.grad(outputs, inputs, grad_outputs=torch.ones_like(outputs), create_graph=True)


class PINN(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 1))

    def forward(self, xt):
        return self.net(xt)

    def loss_internal(self, x_train):
        g = x_train.clone()
        g.requires_grad = True
        u = self.forward(g)
        u_g = gradients(u, g)[0]
        u_x, u_t = u_g[:, [0]], u_g[:, [1]]
        D = 1.1e-9 * self.forward(g) ** 1.2 * u_x
        u_xx = gradients(D, g)[0][:, [0]]
        return (u_t - u_xx).pow(2).mean()


def test_traced_names_the_power_of_a_negative_base():
    """Traced: the first NaN of the loss traces back to pow (invalid_domain), at its line, with a base kept >= 0 as the fix."""
    torch.manual_seed(0)
    model, x = PINN(), torch.rand(32, 2)
    with gl.trace() as tr:
        loss = model.loss_internal(x)
        loss.backward()
    assert torch.isnan(loss)
    e = gl.explain(loss, tr)
    expect(e, reasons=("invalid_domain",), op="pow", line="** 1.2", says=("negative base",), fix=(("clamp", ">= 0"),),
           not_reasons=("infinite_derivative",), never=("derivative of mul is not finite",))


def test_a_non_negative_base_ends_the_nan():
    """With softplus on the base (the fix the owner points to) the loss is finite."""
    torch.manual_seed(0)
    model, x = PINN(), torch.rand(32, 2)
    forward = model.forward
    model.forward = lambda xt: nn.functional.softplus(forward(xt))
    assert torch.isfinite(model.loss_internal(x))
