"""nn.LayerNorm(d, eps=0) on all-zero padding embeddings: the variance of a constant row is 0, and 0 / sqrt(0) is NaN.

Address: https://github.com/VeriSilicon/TIM-VX/pull/589
Title: Fixed LayerNormalization eps bug

What went wrong: (the pull request's bug) LayerNormalization's eps was passed with the wrong type and
was always 0; its output was NaN for an input row whose values are all equal, since the variance is 0
and the layer divides by sqrt(variance + eps) = 0. Here padding tokens embed to zero rows and the
LayerNorm has eps=0.

Accepted answer: the pull request's fix passes eps correctly, so it is the configured positive value
again; from user code: keep eps > 0 (nn.LayerNorm's default is 1e-5).

layer_norm's inputs are finite; the cause is a zero variance with eps = 0, inside the encoder's
forward: the answer names that line.
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


class Encoder(nn.Module):
    def __init__(self, vocab, d):
        super().__init__()
        self.embed = nn.Embedding(vocab, d, padding_idx=0)
        self.norm = nn.LayerNorm(d, eps=0.0)
        self.out = nn.Linear(d, 2)

    def forward(self, ids):
        h = self.norm(self.embed(ids))
        return self.out(h)


def layernorm_eps0_padding():
    torch.manual_seed(0)
    enc = Encoder(6, 4)
    ids = torch.tensor([[3, 5, 0, 0]])  # two padding tokens
    target = torch.tensor([[1, 0, 0, 0]])
    with gl.trace() as tr:
        logits = enc(ids)
        loss = nn.functional.cross_entropy(logits.view(-1, 2), target.view(-1))
        loss.backward()
    return enc, loss, tr


def test_nan_loss_names_layer_norm_of_a_constant_row():
    """explain(loss, tr): layer_norm in the encoder's forward made NaN at h[0, 2, 0]: a row with variance 0 and eps = 0."""
    enc, loss, tr = layernorm_eps0_padding()
    assert torch.isnan(loss)
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("zero_variance",), tensor="loss",
           op="layer_norm", line="h = self.norm(self.embed(ids))",
           says=("h[0, 2, 0]", "variance is 0", "eps = 0", "0 / 0"), never=("made it from finite inputs",))


def test_fix_keeps_eps_positive():
    """The fix keeps eps > 0 (the default 1e-5); never an isfinite check on the inputs."""
    enc, loss, tr = layernorm_eps0_padding()
    expect(gl.explain(loss, tr), fix=("eps > 0", "1e-5"), never_fix=("(torch.isfinite)",))
