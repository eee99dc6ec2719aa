"""A tiny ViT trained with AdamW(weight_decay=1000) and OneCycleLR: the weights diverge and layer_norm's squares overflow float32.

Address: https://github.com/fastai/fastai/issues/1806
Title: Huge weight decay rate makes no difference

What went wrong: the reporter raised the weight decay by orders of magnitude to fight over-fitting and
saw little change. With decoupled weight decay (AdamW) each step multiplies every weight by
1 - lr · weight_decay; once OneCycleLR ramps the learning rate up, that factor is below -1 and the
weights grow geometrically, with alternating sign, until what feeds the encoder's LayerNorm is about
1e25: the squares it sums for the variance pass float32's largest number, the variance is inf and the
result NaN.

Accepted answer: sgugger (a maintainer): "Try 1000, it will go nan in one epoch"; the reporter tried it
and confirmed that it made a difference. A weight decay that large drives training to NaN.

The old answer took layer_norm's NaN for a constant row (variance 0, eps = 0) and advised keeping
eps > 0; the input it printed was 7e23. graphlens must say overflow of the squares, diverged values,
and point at the learning rate and the weight decay.
"""

import contextlib

import torch
import torch.nn.functional as F
from torch import nn

import graphlens as gl
from _helpers import expect


class PatchViT(nn.Module):
    def __init__(self, dim=16, classes=3):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, kernel_size=4, stride=4)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, 5, dim) * 0.02)
        self.enc = nn.TransformerEncoderLayer(dim, 2, 32, dropout=0.0, batch_first=True, norm_first=True)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, img):
        x = self.patch(img).flatten(2).transpose(1, 2)  # 4 patches of 4x4
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        x = self.enc(x)
        return self.head(self.norm(x[:, 0]))


def vit_adamw_huge_weight_decay(traced=True):
    torch.manual_seed(0)
    model = PatchViT()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1000.0, amsgrad=True)  # "against over-fitting"
    steps = 24
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=steps)
    imgs, labels = torch.randn(4, 3, 8, 8), torch.tensor([0, 1, 2, 1])
    with gl.trace() if traced else contextlib.nullcontext() as tr:
        for _ in range(steps):
            opt.zero_grad()
            loss = F.cross_entropy(model(imgs), labels)
            loss.backward()
            opt.step()
            sched.step()
    return model, loss, tr


def _bits(t):
    """The bytes of a tensor: equal bits, NaN included."""
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def test_nan_loss_names_layer_norms_overflowing_squares():
    """explain(loss, tr): layer_norm in self.enc got values near 1e25 whose squares overflow float32; never a constant row or eps = 0."""
    model, loss, tr = vit_adamw_huge_weight_decay()
    assert torch.isnan(loss)
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("overflow", "nonfinite_parameter"),
           not_reasons=("zero_variance", "division_by_zero"), tensor="loss", op="layer_norm", line="x = self.enc(x)",
           says=("the squares layer_norm sums", "float32's largest number", "has diverged"),
           never=("every value the same", "variance is 0", "eps = 0", "log of"))


def test_fix_lowers_the_learning_rate_and_the_weight_decay():
    """The fix looks for where the values grew: the learning rate and the weight decay; never a larger eps."""
    model, loss, tr = vit_adamw_huge_weight_decay()
    expect(gl.explain(loss, tr), fix=("learning rate", "weight decay", "p.abs().max()"), never_fix=("eps > 0",))


def test_tracing_changed_no_number():
    """The traced 24 steps end with the plain run's loss, weights and gradients, bit for bit (NaN included)."""
    plain_model, plain_loss, _ = vit_adamw_huge_weight_decay(traced=False)
    model, loss, _ = vit_adamw_huge_weight_decay()
    assert torch.equal(_bits(loss), _bits(plain_loss))
    for (name, p), q in zip(model.named_parameters(), plain_model.parameters()):
        assert torch.equal(_bits(p), _bits(q)), name
        assert torch.equal(_bits(p.grad), _bits(q.grad)), name
