"""A multi-stage restoration loss summed by copying the stage losses into torch.tensor([...], requires_grad=True): the network's parameters get no gradient.

Address: https://github.com/MC-E/Deep-Generalized-Unfolding-Networks-for-Image-Restoration/issues/6
Title: About Loss

What went wrong: the training script summed the per-stage losses with np.sum([...]), which failed
for the reporter. They replaced it with torch.tensor([loss of each stage], requires_grad=True).sum();
training then ran, but the PSNR never changed: every parameter's .grad stayed None and the optimizer
never moved them.

Accepted answer: the maintainer only suggested updating numpy (which fixes the np.sum error). The
standard fix for the reporter's version: torch.tensor(...) copies the loss *values* into a new leaf
with no history, and requires_grad=True only makes that copy a leaf of its own; add the loss tensors
themselves (sum(...) or torch.stack([...]).sum()).

Only a trace sees the torch.tensor call: the snapshot of the loss starts at that copy.
"""

import warnings

import torch
import torch.nn.functional as F
from torch import nn

import graphlens as gl
from _helpers import expect


class CharbonnierLoss(nn.Module):
    def __init__(self, eps=1e-3):
        super().__init__()
        self.eps = eps

    def forward(self, x, y):
        diff = x - y
        return torch.mean(torch.sqrt((diff * diff) + (self.eps * self.eps)))


class TwoStageNet(nn.Module):
    """Two unfolding stages, each returning a restored image (the real network has seven)."""

    def __init__(self):
        super().__init__()
        self.stage1 = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.PReLU(), nn.Conv2d(8, 3, 3, padding=1))
        self.stage2 = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.PReLU(), nn.Conv2d(8, 3, 3, padding=1))

    def forward(self, img):
        x1 = img + self.stage1(img)
        x2 = x1 + self.stage2(x1)
        return [x2, x1]


def stage_losses_rewrapped():
    torch.manual_seed(0)
    model_restoration = TwoStageNet()
    criterion_char = CharbonnierLoss()
    target, input_ = torch.rand(2, 3, 8, 8), torch.rand(2, 3, 8, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (torch warns about converting tensors that require grad)
        with gl.trace() as tr:
            restored = model_restoration(input_)
            loss_char = torch.tensor([criterion_char(restored[j], target) for j in range(len(restored))], requires_grad=True).sum()
            loss = loss_char
            loss.backward()
    return model_restoration, loss, tr


def test_names_the_torch_tensor_copy_as_the_cut():
    """explain(weight, tr): cut_by_python_value at the torch.tensor(..., requires_grad=True) line, never a no_grad block or a detach."""
    model_restoration, loss, tr = stage_losses_rewrapped()
    assert model_restoration.stage1[0].weight.grad is None and loss.requires_grad
    expect(gl.explain(model_restoration.stage1[0].weight, tr), reason="not_reachable", reasons=("cut_by_python_value",),
           not_reasons=("cut_by_no_grad", "cut_by_detach"), tensor="model_restoration.stage1.0.weight", op="tensor",
           line="torch.tensor([criterion_char(restored[j], target)",
           says=("new leaf", "requires_grad=True"), never=("no_grad()",))


def test_fix_keeps_the_loss_tensors():
    """The fix adds the loss tensors themselves (stack or sum), and says the copy's requires_grad does not link it back."""
    model_restoration, loss, tr = stage_losses_rewrapped()
    expect(gl.explain(model_restoration.stage1[0].weight, tr), fix=(("torch.stack", "sum(["), "requires_grad on the copy"),
           never_fix=("retain_grad", "requires_grad_()"))


def test_the_same_copy_without_the_flag_is_still_named():
    """Without requires_grad=True the copy is named the same way (the rule does not depend on the flag)."""
    torch.manual_seed(0)
    w = torch.randn(3, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with gl.trace() as tr:
            parts = [(w * 2).sum(), (w * 3).sum()]
            total = torch.tensor(parts).sum()
    expect(gl.explain(w, tr), reasons=("cut_by_python_value",), op="tensor", line="torch.tensor(parts)")
