"""A small ResNet in torchvision's layout, written here (torchvision does not import on the CPU torch): one traced step."""

from __future__ import annotations

import torch
from torch import nn

from _step import main

__all__ = ["BasicBlock", "ResNet", "build"]


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with batch norm and a skip connection (torchvision's ``BasicBlock``)."""

    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class ResNet(nn.Module):
    """torchvision's ResNet layout: a stem, four stages of ``BasicBlock`` (``blocks`` per stage),
    global average pooling and a linear classifier; ``width`` is the first stage's channels."""

    def __init__(self, blocks: tuple[int, int, int, int] = (2, 2, 2, 2), *, width: int = 16, classes: int = 10) -> None:
        super().__init__()
        self.inplanes = width
        self.conv1 = nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        self.layer1 = self._stage(width, blocks[0])
        self.layer2 = self._stage(2 * width, blocks[1], stride=2)
        self.layer3 = self._stage(4 * width, blocks[2], stride=2)
        self.layer4 = self._stage(8 * width, blocks[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(8 * width, classes)

    def _stage(self, planes: int, count: int, stride: int = 1) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes:
            downsample = nn.Sequential(nn.Conv2d(self.inplanes, planes, 1, stride=stride, bias=False), nn.BatchNorm2d(planes))
        layers = [BasicBlock(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes
        layers += [BasicBlock(planes, planes) for _ in range(1, count)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def build(*, blocks: tuple[int, int, int, int] = (2, 2, 2, 2), width: int = 16, size: int = 64, classes: int = 10):
    """A ResNet-18 layout (``blocks=(2, 2, 2, 2)``) of base width ``width`` and a step: the
    cross-entropy of a batch of 2 random ``size`` x ``size`` images (batch norm in training mode). Returns ``(model, step, inputs)``, the inputs by name for the diagram."""
    model = ResNet(blocks, width=width, classes=classes)
    images = torch.randn(2, 3, size, size)
    labels = torch.tensor([1, classes - 1])

    def step(model):
        return nn.functional.cross_entropy(model(images), labels)

    return model, step, {"images": images, "labels": labels}


if __name__ == "__main__":
    main("resnet", build)
