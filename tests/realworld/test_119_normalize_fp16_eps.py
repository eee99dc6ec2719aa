"""F.normalize on float16 embeddings: its eps=1e-12 rounds to 0 in float16, so an all-zero row is divided by 0.

Address: https://github.com/pytorch/pytorch/pull/33596
Title: change epsilon in torch.nn.functional.normalize to avoid division by 0 with half precision

What went wrong: F.normalize divides by max(norm, eps) with eps=1e-12, which is 0 in float16; for a
zero vector in half precision that is 0 / 0 = NaN (issue 32137). The pull request proposed a larger
default eps.

Accepted answer: albanD declined changing the global default (it would cost float32 users precision)
and suggested passing a larger eps in half precision; vadimkantorov found 1e-5 still too small for the
gradient and 1e-4 enough. Normalising in float32 also avoids it.

normalize's inputs are finite: the answer must name float16 and eps, not an overflow or "from finite
inputs".
"""

import torch
import torch.nn.functional as F
from torch import nn

import graphlens as gl
from _helpers import expect


def normalize_fp16_eps():
    torch.manual_seed(0)
    table = nn.Embedding(5, 4).half()
    with torch.no_grad():
        table.weight[0] = 0.0  # the padding row
    ids = torch.tensor([1, 0, 3])
    with gl.trace() as tr:
        emb = table(ids)
        z = F.normalize(emb, dim=-1)
        loss = z.float().sum()
        loss.backward()
    return table, loss, tr


def test_nan_loss_names_normalize_and_its_eps_in_float16():
    """explain(loss, tr): normalize on its line made NaN at z[1, 0] from a zero vector; eps rounds to 0 in float16."""
    table, loss, tr = normalize_fp16_eps()
    assert torch.isnan(loss)
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("eps_too_small",), not_reasons=("overflow",),
           tensor="loss", op="normalize", line="z = F.normalize(emb, dim=-1)",
           says=("z[1, 0]", "emb[1, 0] = 0", "rounds to 0 in float16", "0 / 0"),
           never=("overflow", "made it from finite inputs"))


def test_fix_passes_a_larger_eps_or_normalises_in_float32():
    """The fix: an eps float16 can hold, or normalize in float32; never an isfinite check on the inputs."""
    table, loss, tr = normalize_fp16_eps()
    expect(gl.explain(loss, tr), fix=("eps=1e-4", "float32"), never_fix=("(torch.isfinite)", "eps=1e-6"))
