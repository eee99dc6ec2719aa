"""A residual block with the sum and the in-place ReLU swapped: out = self.relu(out); out += identity overwrites the ReLU output its backward needs.

Address: https://github.com/pytorch/vision/issues/807
Title: Why in-place operation for ReLU is used in models/examples?

What went wrong: BasicBlock applies nn.ReLU(inplace=True) and then adds the identity in place; backward
raises "one of the variables needed for gradient computation has been modified by an inplace
operation ... output 0 of Relu".

Accepted answer: (a maintainer) ReLU's backward uses its output, and out += identity changes it after the
ReLU: keep the order add-then-ReLU, write out = out + identity, or use a ReLU that is not in place.

Without a trace the tensor is gone (it lived inside forward): graphlens reads the model's forward and
names the in-place line after the ReLU as a lead, with an out-of-place fix for it.
"""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from _helpers import HOW, expect, explained_in


class BasicBlock(nn.Module):
    def __init__(self, planes):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(planes, planes, 3, padding=1, bias=False), nn.BatchNorm2d(planes)
        self.conv2, self.bn2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False), nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out = self.relu(out)
        out += identity
        return out


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 3, padding=1)
        self.layer1 = nn.Sequential(BasicBlock(4), BasicBlock(4))
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(F.adaptive_avg_pool2d(self.layer1(self.stem(x)), 1).flatten(1))


def program(ctx):
    torch.manual_seed(0)
    model = Net()
    images, labels = torch.randn(2, 3, 6, 6), torch.tensor([0, 2])
    with ctx:
        F.cross_entropy(model(images), labels).backward()


@pytest.mark.parametrize("how", HOW)
def test_names_the_in_place_add_after_the_relu(how):
    """Both ways: inplace_saved on ReLU's output, the line out += identity, and an out-of-place fix."""
    e = explained_in(program, how)
    expect(e, reason="inplace_saved", line="out += identity", fix=(("out = out +", "inplace=False", "out-of-place"),))


def test_adding_out_of_place_trains():
    """out = out + identity: backward runs."""
    class OutOfPlace(BasicBlock):
        def forward(self, x):
            return self.relu(self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))) + x

    torch.manual_seed(0)
    model = Net()
    model.layer1 = nn.Sequential(OutOfPlace(4), OutOfPlace(4))
    F.cross_entropy(model(torch.randn(2, 3, 6, 6)), torch.tensor([0, 2])).backward()
