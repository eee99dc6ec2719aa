"""Optimising a diffusion model's initial noise fails with "element 0 of tensors does not require grad": another part of the host program had switched gradient recording off for the whole thread.

Address: https://github.com/ubc-vision/sonic/issues/2
Title: got element 0 of tensors does not require grad and does not have a grad_fn

What went wrong: the noise epsilon requires grad and is optimised through a frozen denoiser; backward
fails with "element 0 of tensors does not require grad and does not have a grad_fn".

Accepted answer (the reporter's, after the maintainer's reply): a node of the host application
(ComfyUI) had switched gradients off globally; switching them back on around the optimisation
(enable_grad / inference_mode(False)) fixed it.

The frozen denoiser is intended (epsilon requires grad): never "unfreeze the parameters". The answer
says gradient recording is off for the whole thread and the fix switches it back on.
"""

import pytest
import torch
import torch.nn as nn

from _helpers import HOW, expect, explained


def sonic_inpaint():
    torch.manual_seed(0)
    unet = nn.Sequential(nn.Linear(8, 16), nn.SiLU(), nn.Linear(16, 8))
    for p in unet.parameters():
        p.requires_grad_(False)
    known, mask = torch.randn(1, 8), (torch.rand(1, 8) > 0.5).float()
    epsilon_optim_target = torch.randn(1, 8, requires_grad=True)
    opt = torch.optim.Adam([epsilon_optim_target], lr=0.05)
    x = epsilon_optim_target
    for t in range(3):
        x = x - 0.3 * unet(x)
    loss = ((x - known) * mask).pow(2).mean()
    opt.zero_grad()
    loss.backward()


@pytest.fixture
def grad_switched_off():
    torch.set_grad_enabled(False)  # (what another part of the host program did, for the whole thread)
    try:
        yield
    finally:
        torch.set_grad_enabled(True)


@pytest.mark.parametrize("how", HOW)
def test_says_recording_is_off_for_the_thread(how, grad_switched_off):
    """explain(err): gradient recording is off (never the frozen denoiser); the fix switches it back on."""
    e = explained(sonic_inpaint, how)
    expect(e, reason="no_grad_fn", tensor="loss", fix=("set_grad_enabled(True)",), never_fix=("Unfreeze",),
           never=("Every parameter among your variables",))
    if how == "plain":
        expect(e, reasons=("grad_disabled",), says=("torch.is_grad_enabled() is False",))
