"""A CSP residual block whose last convolution ends in nn.ReLU(inplace=True), then out += residual: the add changes the ReLU's saved output.

Address: https://github.com/argusswift/YOLOv4-pytorch/issues/247
Title: When I set the activate='relu', I met the RuntimeError. (Solved)

What went wrong: with activate='relu', training the CSPDarknet53 backbone raised "one of the variables
needed for gradient computation has been modified by an inplace operation: [...], which is output 0
of ReluBackward0, is at version 2; expected version 1". The convolution block's activation is
nn.ReLU(inplace=True), whose backward needs its output, and the residual block adds the shortcut
with out += residual, in place, to that very output.

Accepted answer (the reporter's, which the author acknowledged): write out = out + residual in
CSPBlock.forward.

Without a trace the block's frame is gone when backward fails: the live tensor is the model's output
p (the same tensor object as the last block's out). Its own grad_fn tells what changed it: an
AddBackward0 node on top of the ReluBackward0 that saved it.
"""

import torch
from torch import nn

from _helpers import expect, explained_in


class Convolutional(nn.Module):
    def __init__(self, filters_in, filters_out, kernel_size, stride=1):
        super().__init__()
        self.conv = nn.Conv2d(filters_in, filters_out, kernel_size, stride, kernel_size // 2, bias=False)
        self.norm = nn.BatchNorm2d(filters_out)
        self.activate = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.activate(self.norm(self.conv(x)))


class CSPBlock(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.block = nn.Sequential(Convolutional(channels, channels, 1), Convolutional(channels, channels, 3))

    def forward(self, x):
        residual = x
        out = self.block(x)
        out += residual
        return out


class CSPStage(nn.Module):
    def __init__(self, in_channels=3, out_channels=8, num_blocks=2):
        super().__init__()
        self.downsample_conv = Convolutional(in_channels, out_channels, 3, stride=2)
        self.blocks_conv = nn.Sequential(*[CSPBlock(out_channels) for _ in range(num_blocks)])

    def forward(self, x):
        return self.blocks_conv(self.downsample_conv(x))


def csp_step(ctx):
    torch.manual_seed(0)
    model = CSPStage()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    imgs = torch.randn(2, 3, 8, 8)
    with ctx:
        p = model(imgs)
        loss = p.pow(2).mean()
        optimizer.zero_grad()
        loss.backward()


def test_plain_answer_reads_the_add_from_the_live_node():
    """explain_error(exc): p, saved by ReluBackward0, its own grad_fn an AddBackward0 on top (an add: +=), and an out-of-place add as the fix."""
    expect(explained_in(csp_step, "plain"), reason="inplace_saved", tensor="p", op="ReluBackward0",
           says=("AddBackward0", "+="), fix=("p = p + ...",), never_fix=("set_detect_anomaly",))


def test_traced_answer_names_the_line_of_the_add():
    """explain_error(exc, tr): the out += residual line in CSPBlock.forward."""
    expect(explained_in(csp_step, "traced"), reason="inplace_saved", line="out += residual")
