"""nn.CosineEmbeddingLoss on float16 sentence vectors with an empty text (a zero vector): its eps of 1e-12 rounds to 0 in float16, and the cosine is 0 / 0 = NaN.

Address: https://github.com/pytorch/pytorch/pull/5447
Title: implement CosineEmbeddingLoss as a native function and add reduce arg

What went wrong: the pull request moved CosineEmbeddingLoss to ATen, where the squared magnitudes get
EPSILON = 1e-12 added before the division; a reviewer (zou3519) asked why the epsilon is needed. It is
there for a zero vector, whose magnitude is 0. In float16, though, 1e-12 is below the smallest number
the dtype holds (about 6e-8) and rounds to 0. Here a siamese bag-of-words encoder made .half() embeds
an all-padding text as a zero vector, and CosineEmbeddingLoss on it is NaN.

Accepted answer: the thread itself is a code review; the reviewer's question and the reply are not
fully stored, what can be verified is the code under review (EPSILON 1e-12 added to both squared
magnitudes, the pull request merged, later reverted and re-landed as #5646). The standard fix for the
float16 case is to compute the loss in float32, or to drop empty texts before the loss.

The 0 / 0 happens inside cosine_embedding_loss (one call at the torch level), on the user's loss line.
The zero vector is the second input, b (the empty right-hand text).
"""

import contextlib

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


class MeanOfEmbeddings(nn.Module):
    def __init__(self, vocab=30, width=8):
        super().__init__()
        self.table = nn.Embedding(vocab, width, padding_idx=0)

    def forward(self, tokens):
        return self.table(tokens).mean(1)


def cosine_embedding_half_zero_vec(traced=True):
    torch.manual_seed(0)
    encoder = MeanOfEmbeddings().half()
    criterion = nn.CosineEmbeddingLoss(margin=0.2)
    left_texts = torch.tensor([[4, 5, 6], [7, 8, 0], [9, 3, 2]])
    right_texts = torch.tensor([[4, 5, 1], [0, 0, 0], [11, 12, 13]])  # the second right text is empty
    labels = torch.tensor([1, -1, -1])
    with (gl.trace() if traced else contextlib.nullcontext()) as tr:
        a, b = encoder(left_texts), encoder(right_texts)
        loss = criterion(a, b, labels)
        loss.float().backward()
    return encoder, a, b, loss, tr


def _bits(t):
    return t.detach().reshape(-1).view(torch.uint8)


def test_nan_loss_names_cosine_embedding_loss_and_the_lost_eps():
    """explain(loss, tr): cosine_embedding_loss on the loss line divided 0 by 0 because its eps rounds to 0 in float16 (eps_too_small); never an overflow."""
    encoder, a, b, loss, tr = cosine_embedding_half_zero_vec()
    assert torch.isnan(loss) and not b[1].any()
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("eps_too_small",), not_reasons=("overflow",),
           tensor="loss", op="cosine_embedding_loss", line="loss = criterion(a, b, labels)",
           says=("a vector of zeros", "its norm is 0", "1e-12", "rounds to 0 in float16", "0 / 0 = NaN"),
           never=("overflow",))


def test_names_b_as_the_zero_vector():
    """The zero vector is b, the empty right-hand text: the answer names b, never a, as the vector of zeros."""
    encoder, a, b, loss, tr = cosine_embedding_half_zero_vec()
    assert a[1].any() and not b[1].any()
    expect(gl.explain(loss, tr), says=("b is a vector of zeros",), never=("a is a vector of zeros",))


def test_fix_is_float32():
    """The fix computes the loss in float32 (.float() on the inputs)."""
    encoder, a, b, loss, tr = cosine_embedding_half_zero_vec()
    expect(gl.explain(loss, tr), fix=("float32", ".float()"))


def test_fix_offers_no_eps_argument_cosine_embedding_loss_lacks():
    """cosine_embedding_loss takes no eps (margin and reduction only): the fix never tells the user to pass one."""
    encoder, a, b, loss, tr = cosine_embedding_half_zero_vec()
    expect(gl.explain(loss, tr), fix=("float32",), never_fix=("pass eps=",))


def test_tracing_changes_no_number():
    """The loss and the embedding table's gradient of the traced run are bitwise those of the plain run (NaN included)."""
    plain, _, _, plain_loss, _ = cosine_embedding_half_zero_vec(traced=False)
    traced, _, _, traced_loss, _ = cosine_embedding_half_zero_vec(traced=True)
    assert torch.equal(_bits(plain_loss), _bits(traced_loss))
    assert torch.equal(_bits(plain.table.weight.grad), _bits(traced.table.weight.grad))
