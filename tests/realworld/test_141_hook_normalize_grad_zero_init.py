"""A tensor hook that rescales a gradient to unit norm, g / g.norm(), behind a zero-initialised output layer: 0 / 0 in the hook makes every earlier gradient NaN.

Address: https://github.com/microsoft/dion/pull/24
Title: Fix NaN in NorMuon when gradients are zero

What went wrong: NorMuon divided an update by its own norm; when a weight matrix gets an all-zero
gradient, which is common with zero-initialised output projections (nn.init.zeros_), the ratio is
0 / 0 = NaN and the loss becomes NaN. Here the same division sits in a gradient hook on the hidden
activation: the output layer is zero-initialised, so the gradient reaching h at the first step is
exactly 0, and the hook returns NaN to every layer before it.

Accepted answer: the pull request (merged) clamps the norm, norm_U_new.clamp(min=1e-8), before dividing,
so a zero gradient no longer gives 0 / 0.

The forward is finite and no autograd node makes the NaN: the hook does, between two nodes. The old
answer said every gradient the trace saw was finite and the NaN was put into .grad "afterwards", by code
after the block; the answer must name the hook and its register_hook line.
"""

import contextlib
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import graphlens as gl
from _helpers import expect


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(6, 16)
        self.out = nn.Linear(16, 3)
        nn.init.zeros_(self.out.weight)  # zero-initialised output projection

    def forward(self, x):
        h = torch.relu(self.inp(x))
        if h.requires_grad:
            h.register_hook(lambda g: g / g.norm())  # gradient of unit norm, "to stabilise training"
        return self.out(h)


def hook_normalize_grad_zero_init(traced=True):
    torch.manual_seed(0)
    model = MLP()
    x, y = torch.randn(5, 6), torch.tensor([0, 1, 2, 0, 1])
    with gl.trace() if traced else contextlib.nullcontext() as tr:
        loss = F.cross_entropy(model(x), y)
        loss.backward()
    return model, loss, tr


def _lineno(code):
    """The number of the first line of this file that begins with ``code`` (the program's line)."""
    lines = Path(__file__).read_text(encoding="utf-8").splitlines()
    return next(i for i, text in enumerate(lines, 1) if text.strip().startswith(code))


def _bits(t):
    """The bytes of a tensor: equal bits, NaN included."""
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def test_nan_gradient_names_the_hook_and_its_line():
    """explain(model.inp.weight, tr): the hook registered on relu's result returned NaN although every node sent it a finite gradient."""
    model, loss, tr = hook_normalize_grad_zero_init()
    assert torch.isfinite(loss) and torch.isnan(model.inp.weight.grad).any()
    e = gl.explain(model.inp.weight, tr)
    assert e.lineno == _lineno("h.register_hook(lambda g: g / g.norm())")
    expect(e, reason="nonfinite_backward", reasons=("nonfinite_hook",), not_reasons=("nonfinite_unseen",),
           tensor="model.inp.weight", op="hook", line="h.register_hook(lambda g: g / g.norm())",
           says=("a gradient hook on relu's result", "every node upstream sent relu's result a finite gradient",
                 "0 / 0 = NaN", "initialised to 0"),
           never=("afterwards", "code after the block", "overflow"))


def test_fix_guards_the_hooks_division():
    """The fix divides by g.norm() + eps or a clamped norm (the pull request's clamp(min=1e-8)); never "run the hooks inside the block"."""
    model, loss, tr = hook_normalize_grad_zero_init()
    expect(gl.explain(model.inp.weight, tr), fix=("g / (g.norm() + eps)", "clamp(min=eps)"),
           never_fix=("inside the graphlens.trace() block",))


def test_without_a_trace_it_names_no_cause():
    """Without a trace the leaves are finite and graphlens says it cannot tell what made the NaN; no hook or op is guessed."""
    model, loss, _ = hook_normalize_grad_zero_init(traced=False)
    e = gl.explain(model.inp.weight)
    assert e.op is None and e.line is None
    expect(e, reason="nonfinite_backward", tensor="model.inp.weight", says=("Without a trace",),
           never=("afterwards", "overflow"))


def test_tracing_changed_no_number():
    """The traced run gives the plain run's loss and gradients bit for bit (NaN included)."""
    plain_model, plain_loss, _ = hook_normalize_grad_zero_init(traced=False)
    model, loss, _ = hook_normalize_grad_zero_init()
    assert torch.equal(_bits(loss), _bits(plain_loss))
    for (name, p), q in zip(model.named_parameters(), plain_model.parameters()):
        assert torch.equal(_bits(p.grad), _bits(q.grad)), name
