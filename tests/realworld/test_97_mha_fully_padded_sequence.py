"""nn.MultiheadAttention with a key_padding_mask that hides every key of one sequence: NaN outputs and gradients.

Address: https://github.com/pytorch/pytorch/issues/41508
Title: nn.MultiheadAttention causes gradients to become NaN under some use cases

What went wrong: with a padding mask that covers a whole sequence (or an attention mask that leaves a
query no key), the attention output for that sequence is NaN, and the NaN spreads through backward into
the shared projection weights of the whole batch.

Accepted answer: the scores of a fully masked row are all -inf, and softmax of such a row is 0 / 0 = NaN
(the fix proposed in the thread's pull requests zeroes those rows); leave every query at least one key, or
use the fused path (need_weights=False), which gives 0 for such rows.

The trace sees the mask's -inf written on purpose and the attention call that made NaN of it; the -inf
is not an overflow, and the fix is never to scale values down.
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


def fully_padded_sequence():
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(4, 1, batch_first=True)
    x = torch.randn(2, 3, 4)
    key_padding_mask = torch.tensor([[False, False, True], [True, True, True]])  # the second sequence is all padding
    with gl.trace() as tr:
        out, _ = mha(x, x, x, key_padding_mask=key_padding_mask)
        loss = out.sum()
        loss.backward()
    return mha, loss, tr


def test_nan_loss_names_the_attention_and_the_masked_row():
    """explain(loss, tr) is nonfinite_forward + masked_softmax at the attention call, never an overflow."""
    mha, loss, tr = fully_padded_sequence()
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("masked_softmax",), tensor="loss",
           op="multi_head_attention_forward", line="mha(x, x, x, key_padding_mask=key_padding_mask)",
           says=("every element is -inf", "0 / 0 = NaN", "every key of a query"),
           never=("overflow", "larger than float32"), not_reasons=("overflow",))


def test_fix_keeps_a_key_visible_or_uses_the_fused_path():
    """The fix is the thread's: leave each query a key, or need_weights=False; never scaling the values down."""
    mha, loss, tr = fully_padded_sequence()
    expect(gl.explain(mha.in_proj_weight, tr), reasons=("masked_softmax",), fix=("need_weights=False", "at least one key"),
           never_fix=("Scale the values down", "learning rate"))
