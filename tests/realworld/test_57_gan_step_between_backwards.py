"""opt_D.step() between D_loss.backward() and G_loss.backward() changes D's weights that G_loss's backward needs.

Address: https://github.com/pytorch/pytorch/issues/39141
Title: RuntimeError: one of the variables needed for gradient computation has been modified by an inplace operation?

What went wrong: a small GAN (MorvanZhou's 406_GAN tutorial, fitting sin(x)) computes D_loss and G_loss
from the same forward through D, then calls D_loss.backward(retain_graph=True), opt_D.step() and only
then G_loss.backward(). Since PyTorch 1.5 the optimizers' in-place updates are checked: opt_D.step()
changed D's weights, which the graph of G_loss saved, so the second backward fails with "modified by
an inplace operation: [torch.FloatTensor [8, 1]] ... is at version 2; expected version 1".

Accepted answer (albanD, applied to the tutorial in MorvanZhou/PyTorch-Tutorial#91): the problem is the
order, not an in-place op of the user's: run G_loss.backward() before opt_D.step() (or compute the
generator's loss from a new forward through D after the step).

Without a trace graphlens finds the parameter from the failed graph (its version, the view addmm saved)
and reads the opt_D.step() line from the code; a trace saw the step's in-place update itself.
"""

import pytest
import torch
from torch import nn

from _helpers import HOW, expect, explained, note


def gan_step_between_backwards():
    torch.manual_seed(0)
    BATCH_SIZE, N_IDEAS, ART_COMPONENTS = 4, 5, 15
    G = nn.Sequential(nn.Linear(N_IDEAS, 8), nn.ReLU(), nn.Linear(8, ART_COMPONENTS))
    D = nn.Sequential(nn.Linear(ART_COMPONENTS, 8), nn.ReLU(), nn.Linear(8, 1), nn.Sigmoid())
    opt_D = torch.optim.Adam(D.parameters(), lr=0.0001)
    opt_G = torch.optim.Adam(G.parameters(), lr=0.0001)
    artist_paintings = torch.sin(torch.linspace(-1, 1, ART_COMPONENTS) * 3.14).repeat(BATCH_SIZE, 1)
    G_ideas = torch.randn(BATCH_SIZE, N_IDEAS)
    G_paintings = G(G_ideas)
    prob_artist0 = D(artist_paintings)
    prob_artist1 = D(G_paintings)
    D_loss = - torch.mean(torch.log(prob_artist0) + torch.log(1. - prob_artist1))
    G_loss = torch.mean(torch.log(1. - prob_artist1))
    opt_D.zero_grad()
    D_loss.backward(retain_graph=True)
    opt_D.step()
    opt_G.zero_grad()
    G_loss.backward()
    opt_G.step()


@pytest.mark.parametrize("how", HOW)
def test_names_the_parameter_and_the_step(how):
    """explain_error names D.2.weight, changed by opt_D.step() (the step's line), not an in-place op of the user's."""
    expect(explained(gan_step_between_backwards, how), reason="inplace_saved", reasons=("optimizer_step_inplace",),
           tensor="D.2.weight", line="opt_D.step()", says=("version 1", "version 2"))


@pytest.mark.parametrize("how", HOW)
def test_fix_is_the_order_of_the_steps(how):
    """The fix is to call G_loss.backward() before opt_D.step() (or a new forward), never an out-of-place op or retain_graph."""
    expect(explained(gan_step_between_backwards, how), fix=("G_loss.backward() before opt_D.step()", "Recompute"),
           never_fix=("out-of-place", "clone()", "retain_graph=True"))


@pytest.mark.parametrize("how", HOW)
def test_op_is_the_saver(how):
    """e.op is AddmmBackward0, the node of D's last Linear that saved its weight (transposed)."""
    expect(explained(gan_step_between_backwards, how), op="AddmmBackward0")


def test_note_names_the_step():
    """The note of trace(explain_errors=True) names D.2.weight and opt_D.step(), and proposes no out-of-place op."""
    expect(note(gan_step_between_backwards), says=("D.2.weight", "opt_D.step()"), never=("out-of-place",))
