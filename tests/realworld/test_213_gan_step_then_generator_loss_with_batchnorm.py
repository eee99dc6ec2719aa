"""An SRGAN step: the generator's loss goes through the discriminator's output computed before optimizerD.step(); the discriminator has batch norm.

Address: https://github.com/leftthomas/SRGAN/issues/74
Title: Runtimeerror when running train.py

What went wrong: the discriminator step ran d_loss.backward(retain_graph=True) and optimizerD.step(),
then the generator's loss was built from fake_out, the discriminator's output computed before that
step: backward needs the discriminator's old weights, which the step changed in place.

Accepted answer: (the comment that closed it) recompute fake_img and fake_out after the discriminator's
step, so the generator's loss goes through the discriminator as it is now.

The message's tensor is the last 1x1 convolution's weight; the batch norm's node saved another weight
the step also changed, and must not be named as what saved this one.
"""

import torch
import torch.nn as nn

from _helpers import HOW, expect, explained

import pytest


def srgan_step():
    torch.manual_seed(0)
    netG = nn.Sequential(nn.Conv2d(3, 3, 3, padding=1), nn.Tanh())
    netD = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.LeakyReLU(0.2), nn.Conv2d(8, 1, 1))
    optimizerD = torch.optim.Adam(netD.parameters(), lr=1e-3)
    real_img, z = torch.rand(2, 3, 8, 8), torch.rand(2, 3, 8, 8)
    fake_img = netG(z)
    real_out = netD(real_img).mean()
    fake_out = netD(fake_img).mean()
    d_loss = 1 - real_out + fake_out
    d_loss.backward(retain_graph=True)
    optimizerD.step()
    g_loss = (1 - fake_out) + (fake_img - real_img).pow(2).mean()
    g_loss.backward()


@pytest.mark.parametrize("how", HOW)
def test_names_the_conv_weight_and_the_recompute_never_the_batchnorm_as_saver(how):
    """Both ways: inplace_saved on netD's last conv weight, saved by ConvolutionBackward0 alone; recompute after the step."""
    e = explained(srgan_step, how)
    expect(e, reason="inplace_saved", reasons=("optimizer_step_inplace",), tensor="netD.3.weight", op="ConvolutionBackward0",
           fix=("Recompute the forward",), never=("NativeBatchNormBackward0",))
