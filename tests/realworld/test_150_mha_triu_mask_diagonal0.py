"""A causal mask for nn.MultiheadAttention written triu(full(-inf)) without diagonal=1: the diagonal is masked too, the first query sees no key and its softmax row is NaN.

Address: https://github.com/pbloem/former/issues/10
Title: Issue with masking

What went wrong: a tutorial's causal self-attention masked the scores with the upper triangle at
offset 0, which hides each position from itself as well as from the future. The first position then
has nothing left to attend to: its whole row of scores is -inf, and the softmax of such a row is
0 / 0 = NaN. Here the same mask, torch.triu(torch.full((T, T), -inf)), is given to
nn.MultiheadAttention as attn_mask in a tiny language model, and the loss is NaN.

Accepted answer: the reporter (mc-robinson) pointed out that the offset must be 1 (an offset of 0
makes a row of all -inf, hence a row of NaN after the softmax); pbloem, the author, agreed and fixed
the post (the repository's code already used offset 1). In PyTorch that is
torch.triu(..., diagonal=1), which is what nn.Transformer.generate_square_subsequent_mask builds.

The -inf is written on purpose by the helper causal_mask, on its own line; the NaN is made inside
MultiheadAttention, reached from the model's attention line. The answer places the fill in the
helper, not at the line in the traced block that called the model.
"""

import contextlib
import inspect

import torch
import torch.nn.functional as F
from torch import nn

import graphlens as gl
from _helpers import expect


def causal_mask(size):
    return torch.triu(torch.full((size, size), float("-inf")))  # the diagonal is masked as well


class TinyDecoder(nn.Module):
    def __init__(self, vocab=12, width=8):
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.attn = nn.MultiheadAttention(width, 2, batch_first=True)
        self.head = nn.Linear(width, vocab)

    def forward(self, ids):
        x = self.tok(ids)
        mask = causal_mask(ids.shape[1])
        h, _ = self.attn(x, x, x, attn_mask=mask)
        return self.head(x + h)


def mha_triu_mask_diagonal0(traced=True):
    torch.manual_seed(0)
    model = TinyDecoder()
    tokens = torch.randint(0, 12, (2, 5))
    with (gl.trace() if traced else contextlib.nullcontext()) as tr:
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, 12), tokens[:, 1:].reshape(-1))
        loss.backward()
    return model, loss, tr


def _lineno(fn, text):
    """The line number, in this file, of the line of ``fn`` that contains ``text``."""
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, ln in enumerate(lines) if text in ln)


def _bits(t):
    return t.detach().reshape(-1).view(torch.uint8)


def test_nan_loss_names_the_fully_masked_attention_row():
    """explain(loss, tr): the softmax inside MultiheadAttention took a row whose every score is -inf (masked_softmax), on the attention line; never an overflow."""
    model, loss, tr = mha_triu_mask_diagonal0()
    assert torch.isnan(loss)
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("masked_softmax",), not_reasons=("overflow",),
           tensor="loss", op="multi_head_attention_forward", line="h, _ = self.attn(x, x, x, attn_mask=mask)",
           says=("every element is -inf", "0 / 0", "the first query sees no key"), never=("overflow",))


def test_says_the_triu_mask_hides_the_diagonal():
    """The answer reads the mask as triu(-inf) at diagonal 0: it hides each query's own position too."""
    model, loss, tr = mha_triu_mask_diagonal0()
    expect(gl.explain(loss, tr), says=("triu(", "diagonal=0", "hides the diagonal too"))


def test_fix_is_diagonal_one_or_generate_square_subsequent_mask():
    """The fix masks only the future: triu(..., diagonal=1), as generate_square_subsequent_mask builds it; need_weights=False would only hide the NaN."""
    model, loss, tr = mha_triu_mask_diagonal0()
    expect(gl.explain(loss, tr), fix=("diagonal=1", "generate_square_subsequent_mask", "would only hide the NaN"))


def test_the_fill_is_placed_in_causal_mask_not_at_the_blocks_line():
    """The -inf fill is placed at causal_mask's own line, never at the traced block's logits = model(...) line."""
    model, loss, tr = mha_triu_mask_diagonal0()
    mask_line = _lineno(causal_mask, "torch.triu(torch.full(")
    block_line = _lineno(mha_triu_mask_diagonal0, "logits = model(tokens[:, :-1])")
    expect(gl.explain(loss, tr), says=(f"full at line {mask_line}",), never=(f"full at line {block_line}",))


def test_tracing_changes_no_number():
    """The loss and every gradient of the traced run are bitwise those of the plain run (NaN included)."""
    plain_model, plain_loss, _ = mha_triu_mask_diagonal0(traced=False)
    traced_model, traced_loss, _ = mha_triu_mask_diagonal0(traced=True)
    assert torch.equal(_bits(plain_loss), _bits(traced_loss))
    for (name, p), (_, q) in zip(plain_model.named_parameters(), traced_model.named_parameters()):
        assert torch.equal(_bits(p.grad), _bits(q.grad)), name
