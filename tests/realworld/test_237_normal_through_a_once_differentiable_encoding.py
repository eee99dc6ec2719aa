"""A neural SDF puts its surface normal (the gradient of the SDF, taken with create_graph=True) into the loss; the encoding is a custom Function whose backward is @once_differentiable, so the second derivative is refused.

Address: https://github.com/NVlabs/tiny-cuda-nn/issues/50
Title: RuntimeError: trying to differentiate twice a function that was markedwith @once_differentiable

What went wrong: normal = torch.autograd.grad(sdf, x, create_graph=True) goes through the encoding's
backward; the loss uses the normal, so loss.backward() must differentiate that backward again, which a
@once_differentiable backward does not allow.

Accepted answer: (the maintainer) the encoding has no second derivative: keep the normal out of the loss,
approximate it with finite differences, or use a differentiable encoding.

The Function is a private class of the program's module (_EncodingFunction), reached from no node of the
loss's graph: graphlens finds it among the frames' classes whose backward torch's once_differentiable wraps.
"""

import pytest
import torch
from torch import nn
from torch.autograd.function import once_differentiable

from _helpers import HOW, expect, explained_in


class _EncodingFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, params):
        z = x @ params
        ctx.save_for_backward(x, params, z)
        return torch.sin(z)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        x, params, z = ctx.saved_tensors
        g = grad * torch.cos(z)
        return g @ params.t(), x.t() @ g


class SDFNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.params = nn.Parameter(torch.randn(3, 8))
        self.sdf_mlp = nn.Sequential(nn.Linear(8, 16), nn.Softplus(), nn.Linear(16, 1))
        self.color_mlp = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))

    def forward(self, x):
        x = x.requires_grad_(True)
        sdf = self.sdf_mlp(_EncodingFunction.apply(x, self.params))
        normal = torch.autograd.grad(sdf, x, torch.ones_like(sdf), create_graph=True)[0]
        return sdf, normal, self.color_mlp(torch.cat([x, normal], dim=-1))


def program(ctx):
    torch.manual_seed(0)
    net = SDFNet()
    pts, target = torch.rand(16, 3), torch.rand(16, 3)
    with ctx:
        sdf, normal, color = net(pts)
        loss = ((color - target) ** 2).mean() + 0.1 * ((normal.norm(dim=-1) - 1) ** 2).mean()
        loss.backward()


@pytest.mark.parametrize("how", HOW)
def test_names_the_once_differentiable_function(how):
    """Both ways: custom_fn_once_differentiable, _EncodingFunction named, the normal kept out of the loss as the fix."""
    e = explained_in(program, how)
    expect(e, reason="custom_fn_once_differentiable", op="_EncodingFunction", says=("@once_differentiable", "create_graph=True"),
           fix=("finite differences", "without create_graph=True"))
