"""A CAM method takes a Hessian-vector product with respect to a ReLU network's last activations, scored on a raw logit: the product is None.

Address: https://github.com/jacobgil/pytorch-grad-cam/issues/557
Title: Questions about the implementation of Grad-CAM++: The second and third order derivatives

What went wrong: grads = autograd.grad(logit, activations, create_graph=True); after the activations only
average pooling and a linear layer follow, so grads does not depend on the activations, and
autograd.grad(grads, activations, allow_unused=True) gives None.

Accepted answer: (the method's author) with a raw logit target the Hessian is zero: use a target through a
softmax, which gives a non-zero Hessian.

Traced, the answer about the activations covers two backward calls: the logit's gradient flows through them,
but grads does not depend on them at all; it once said that the gradient "does flow through" them for both.
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.layer4 = nn.Sequential(nn.Conv2d(4, 4, 3, padding=1), nn.ReLU())
        self.fc = nn.Linear(4, 10)

    def forward(self, x):
        return self.fc(nn.functional.adaptive_avg_pool2d(self.layer4(torch.relu(self.conv(x))), 1).flatten(1))


def test_traced_says_grads_does_not_depend_on_the_activations():
    """Traced: nonleaf_not_retained for .grad, and grads named as not depending on the activations (None whatever retain_grad does)."""
    torch.manual_seed(0)
    model = M().eval()
    acts = {}
    model.layer4.register_forward_hook(lambda m, i, o: acts.__setitem__("a", o))
    x = torch.randn(1, 3, 8, 8)
    with gl.trace() as tr:
        loss = model(x)[..., 3].sum()
        activations = acts["a"]
        grads = torch.autograd.grad(loss, activations, create_graph=True)[0]
        hvp = torch.autograd.grad(grads, activations, grad_outputs=activations, retain_graph=True, allow_unused=True)[0]
    assert hvp is None
    expect(gl.explain(activations, tr), reasons=("nonleaf_not_retained",), says=("grads does not depend on", "is None"))
