"""A saliency model trained with an adversarial loss builds the discriminator's optimizer from the main model's parameters: the discriminator never learns.

Address: https://github.com/ZhengPeng7/MCCL/issues/5
Title: 优化器问题 (optimizer question)

What went wrong: optimizer_d = AdamW(model.parameters(), ...) holds the same parameters as the main optimizer,
instead of disc.parameters(); the discriminator step never updates (or clears) the discriminator.

Accepted answer: (the author) the discriminator needs its own optimizer over its own parameters: build
optimizer_d from disc.parameters().

No optimizer holds any of disc's parameters, and two optimizers hold the same ones: the answer says so and
builds the optimizer from disc.parameters(); it once told the user to add one weight to the main optimizer
(add_param_group), which trains the discriminator against its own goal.
"""

import pytest
import torch
from torch import nn

import graphlens as gl
from _helpers import expect


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc, self.head = nn.Conv2d(3, 4, 3, 1, 1), nn.Conv2d(4, 1, 1)

    def forward(self, x):
        return self.head(torch.relu(self.enc(x)))


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = nn.Sequential(nn.Conv2d(3, 4, 3, 2, 1), nn.LeakyReLU(0.2))
        self.adv_layer = nn.Sequential(nn.Linear(64, 1), nn.Sigmoid())

    def forward(self, img):
        return self.adv_layer(self.model(img).flatten(1))


@pytest.mark.parametrize("how", ("plain", "traced"))
def test_says_no_optimizer_holds_the_discriminator(how):
    """Both ways: not_in_optimizer, the two optimizers with the same parameters named, disc.parameters() as the fix."""
    torch.manual_seed(0)
    model, disc = Generator(), Discriminator()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    optimizer_d = torch.optim.AdamW(model.parameters(), lr=1e-4)  # (the bug: model, not disc)
    inputs, gts = torch.rand(2, 3, 8, 8), (torch.rand(2, 1, 8, 8) > 0.5).float()

    def d_step():
        optimizer_d.zero_grad()
        real = nn.functional.binary_cross_entropy(disc(gts * inputs), torch.ones(2, 1))
        fake = nn.functional.binary_cross_entropy(disc(model(inputs).detach() * inputs), torch.zeros(2, 1))
        loss_d = (real + fake) / 2
        loss_d.backward()
        optimizer_d.step()
        return loss_d

    if how == "plain":
        loss_d = d_step()
        e = gl.explain(disc.adv_layer[0].weight, loss_d)
    else:
        with gl.trace() as tr:
            d_step()
        e = gl.explain(disc.adv_layer[0].weight, tr)
    assert optimizer is not optimizer_d
    expect(e, reasons=("not_in_optimizer",), says=("No optimizer among your variables holds any parameter of disc",
                                                   "optimizer and optimizer_d"), fix=("disc.parameters()",),
           never_fix=("add_param_group",))
