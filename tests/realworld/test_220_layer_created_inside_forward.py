"""A Mobile-UNet block builds its 1x1 shortcut convolution inside forward: a new, untrained layer at every call.

Address: https://github.com/lafith/Mobile-UNet/issues/1
Title: A dangling layer in forward call?

What went wrong: InvertedResidualBlock.forward runs x = nn.Conv2d(in_c, out_c, 1, 1, 0, bias=False)(x)
when the skip connection changes the channel count. That layer is made anew at each call: it is no
registered submodule, not in model.parameters(), never in the optimizer, and its random weights
are thrown away after every step (they still get a gradient).

Accepted answer: (the author's fix) create the projection once in __init__ and call it in forward.

The weight asked about is the one the loss reaches that no module of the program registers (what a
user finds comparing the graph's leaves with model.parameters()); its answer once said only "add it
to the optimizer" (add_param_group), which trains nothing: the next call makes another layer.
"""

import pytest
import torch
from torch import nn

import graphlens as gl
from _helpers import expect


class InvertedResidualBlock(nn.Module):
    def __init__(self, in_c, out_c, stride):
        super().__init__()
        self.in_c, self.out_c, self.skip = in_c, out_c, stride == 1
        self.conv = nn.Sequential(nn.Conv2d(in_c, 2 * in_c, 1, bias=False), nn.BatchNorm2d(2 * in_c), nn.ReLU6(),
                                  nn.Conv2d(2 * in_c, out_c, 3, stride, 1, bias=False), nn.BatchNorm2d(out_c))

    def forward(self, x):
        if self.skip:
            out = self.conv(x)
            if self.in_c != self.out_c:
                x = nn.Conv2d(self.in_c, self.out_c, 1, 1, 0, bias=False)(x)
            return x + out
        return self.conv(x)


class TinyUNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, 2, 1)
        self.irb1 = InvertedResidualBlock(8, 12, 1)
        self.head = nn.Conv2d(12, 1, 1)

    def forward(self, x):
        return self.head(self.irb1(self.stem(x)))


def train_step(model, optimizer, img, mask):
    optimizer.zero_grad()
    loss = nn.functional.binary_cross_entropy_with_logits(model(img), mask)
    loss.backward()
    optimizer.step()
    return loss


def foreign_leaves(loss, model):
    """The leaves the loss reaches that are not parameters of the model."""
    known = {id(p) for p in model.parameters()}
    return [t for t in (n.variable for n in _nodes(loss.grad_fn) if hasattr(n, "variable")) if id(t) not in known]


def _nodes(fn):
    seen, stack = set(), [fn]
    while stack:
        f = stack.pop()
        if f is None or f in seen:
            continue
        seen.add(f)
        yield f
        stack.extend(c for c, _ in f.next_functions)


@pytest.mark.parametrize("how", ("plain", "traced"))
def test_names_the_layer_made_in_forward_and_moves_it_to_init(how):
    """Both ways: the Parameter no module registers, the forward line that makes the layer, and the __init__ fix."""
    torch.manual_seed(0)
    model = TinyUNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    img, mask = torch.rand(2, 3, 16, 16), (torch.rand(2, 1, 8, 8) > 0.5).float()
    if how == "plain":
        loss = train_step(model, optimizer, img, mask)
        (w,) = foreign_leaves(loss, model)
        e = gl.explain(w, loss)
    else:
        with gl.trace() as tr:
            loss = train_step(model, optimizer, img, mask)
        (w,) = foreign_leaves(loss, model)
        e = gl.explain(w, tr)
    expect(e, reasons=("unregistered_module",), line="nn.Conv2d(self.in_c, self.out_c",
           says=("InvertedResidualBlock.forward", "nn.Conv2d(self.in_c, self.out_c"),
           fix=("__init__",), never_fix=("add_param_group",))


def test_a_registered_parameter_is_not_said_to_be_made_in_forward():
    """A weight the model registers gets no such claim, though the same forward makes a layer."""
    torch.manual_seed(0)
    model = TinyUNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    loss = train_step(model, optimizer, torch.rand(2, 3, 16, 16), torch.ones(2, 1, 8, 8))
    expect(gl.explain(model.irb1.conv[0].weight, loss), reason="grad_ok", not_reasons=("unregistered_module",))
