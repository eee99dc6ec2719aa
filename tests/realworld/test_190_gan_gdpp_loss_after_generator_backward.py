"""PGAN with the GDPP loss: the generator's loss is backpropagated, then the GDPP loss built from the same fake features is, and backward fails (the graph below the features was freed).

Address: https://github.com/facebookresearch/pytorch_GAN_zoo/issues/83
Title: I can't using GDPP config train any model

What went wrong: with --GDPP True, base_GAN.py calls lossGFake.backward() (no retain_graph), then
computes the GDPP loss from the discriminator's features of the fake batch (phiGFake) and the real
batch, and backpropagates it: "Trying to backward through the graph a second time".

Accepted answer (the reporter's diagnosis, fixed upstream in PR #85): both losses go back through
the fake features' graph, which the first backward freed; backpropagate once (sum the losses) or
keep the graph for the first backward.

The answer names the shared tensor (phiFake inside GDPPLoss, the caller's phiGFake) and lists only
the freed nodes below it: never the real batch's nodes, which were built after the first backward.
"""

import pytest
import torch
import torch.nn as nn

from _helpers import HOW, expect, explained


class D(nn.Module):
    def __init__(self):
        super().__init__()
        self.feat = nn.Linear(4, 3)
        self.out = nn.Linear(3, 1)

    def forward(self, x, getFeature=False):
        phi = torch.tanh(self.feat(x))
        y = self.out(phi)
        return (y, phi) if getFeature else y


def GDPPLoss(phiReal, phiFake, backward=True):
    a = (phiFake.t() @ phiFake) / phiFake.shape[0]
    b = (phiReal.t() @ phiReal) / phiReal.shape[0]
    loss = ((a - b) ** 2).sum()
    if backward:
        loss.backward()
    return loss.item()


def generator_step():
    torch.manual_seed(0)
    netG, netD = nn.Linear(2, 4), D()
    real_input = torch.randn(5, 4)
    crit = nn.BCEWithLogitsLoss()
    inputNoise = torch.randn(5, 2)
    predFakeG = netG(inputNoise)
    predFakeD, phiGFake = netD(predFakeG, True)
    lossGFake = crit(predFakeD, torch.ones_like(predFakeD))
    lossGFake.backward()
    _, phiDReal = netD.forward(real_input, True)
    return GDPPLoss(phiDReal, phiGFake, backward=True)


@pytest.mark.parametrize("how", HOW)
def test_names_the_fake_features_and_only_their_freed_nodes(how):
    """explain(err): phiFake is used by two backward passes; the freed nodes listed are its history alone (one tanh)."""
    e = explained(generator_step, how)
    expect(e, reason="graph_freed", tensor="phiFake", says=("phiFake is used by two backward passes",),
           fix=("retain_graph=True", "call backward once"))
    assert str(e).count("TanhBackward0") == 1, str(e)
