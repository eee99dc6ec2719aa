"""Without fake.detach() the discriminator's backward frees the generator's graph that errG needs.

Address: https://github.com/pytorch/examples/issues/116
Title: why is detach necessary

What went wrong: in the DCGAN loop, a commenter who dropped the .detach() on fake when training D
got "Trying to backward through the graph a second time": errD_fake.backward() already went through
the generator's graph and freed it, and errG.backward() needs the same generator graph.

Accepted answer (thread): use netD(fake.detach()) for the discriminator step so its backward stops
at fake; the generator graph is then intact for errG.backward().

The shared tensor fake is among the variables of the raising frame, so the plain call can name it
as well as a trace.
"""

import pytest
import torch
from torch import nn

from _helpers import HOW, expect, explained


def gan_missing_detach():
    torch.manual_seed(0)
    netG = nn.Sequential(nn.Linear(2, 4), nn.Tanh())
    netD = nn.Sequential(nn.Linear(4, 1), nn.Sigmoid())
    criterion = nn.BCELoss()
    noise = torch.randn(3, 2)
    fake = netG(noise)
    label = torch.zeros(3, 1)
    output = netD(fake)                     # missing fake.detach()
    errD_fake = criterion(output, label)
    errD_fake.backward()
    label.fill_(1.0)
    output = netD(fake)
    errG = criterion(output, label)
    errG.backward()


@pytest.mark.parametrize("how", HOW)
def test_recognised_as_graph_freed(how):
    """explain_error says errG.backward() went through a part of the graph an earlier backward freed."""
    expect(explained(gan_missing_detach, how), reason="graph_freed", says=("errG.backward()",), not_reasons=("carried_state",))


@pytest.mark.parametrize("how", HOW)
def test_names_fake_and_proposes_detach_for_the_d_step(how):
    """The answer names fake (shared by both backwards), proposes fake.detach(), and lists none of errG's own D nodes."""
    expect(explained(gan_missing_detach, how), reason="graph_freed", tensor="fake", fix=("fake.detach()",),
           never=("made errG", "SigmoidBackward0", "BinaryCrossEntropyBackward0"), not_reasons=("carried_state",))
