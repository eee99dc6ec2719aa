"""A character language model with nn.RNN(nonlinearity="relu") and a recurrent weight of 1.3 · I: over 400 steps the hidden state overflows float32.

Address: https://github.com/chenxie95/deeplearning_course_sjtu/issues/31
Title: 语言模型codebase出错 (the language-model codebase fails)

What went wrong: training the course's language model with the RNN_RELU cell made the loss explode to
NaN. A ReLU does not saturate: with a recurrent weight that multiplies the state by more than 1 per
step (here an IRNN-style identity init scaled to 1.3), the hidden state grows about 1.3× per time step,
1.3^335 passes float32's largest number inside the RNN kernel, and the output layer turns the inf into
NaN.

Accepted answer: chenxie95 (the repository's owner): try sigmoid instead; relu may make the gradients too
large; or adjust the learning rate.

Here the state explodes in the very first forward, before any step, so no learning rate is involved: the
answer must say overflow of the growing hidden state in rnn_relu (the old one said "not an overflow ...
a log of 0, a division by 0 inside it") and give a bounded nonlinearity (tanh, LSTM, GRU) as the fix.
"""

import contextlib

import torch
import torch.nn.functional as F
from torch import nn

import graphlens as gl
from _helpers import expect


class CharRNN(nn.Module):
    def __init__(self, vocab=10, dim=8):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.rnn = nn.RNN(dim, dim, nonlinearity="relu", batch_first=True)
        with torch.no_grad():
            self.rnn.weight_hh_l0.copy_(1.3 * torch.eye(dim))  # identity init, scaled "to keep long memory"
        self.out = nn.Linear(dim, vocab)

    def forward(self, ids):
        out, _ = self.rnn(self.emb(ids))
        return self.out(out)


def rnn_relu_exploding_state(traced=True):
    torch.manual_seed(0)
    model = CharRNN()
    ids = torch.randint(0, 10, (2, 400))  # one long sequence per row, no truncation
    with gl.trace() if traced else contextlib.nullcontext() as tr:
        logits = model(ids[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, 10), ids[:, 1:].reshape(-1))
        loss.backward()
    return model, loss, tr


def _bits(t):
    """The bytes of a tensor: equal bits, NaN included."""
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def test_nan_loss_names_the_overflowing_hidden_state():
    """explain(loss, tr): rnn_relu's result passed float32's range at out[0, 335, 7] because the hidden state grew every step."""
    model, loss, tr = rnn_relu_exploding_state()
    assert torch.isnan(loss)
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("overflow",),
           not_reasons=("division_by_zero", "log_of_zero"), tensor="loss", op="rnn_relu",
           line="out, _ = self.rnn(self.emb(ids))",
           says=("out[0, 335, 7]", "larger than float32 can hold", "hidden state grew at every time step"),
           never=("not an overflow", "no rule for rnn_relu", "a log of 0", "learning rate"))


def test_the_weights_gradient_gets_the_same_answer():
    """explain(model.rnn.weight_hh_l0, tr): its gradient is NaN because the loss is, and the loss's first inf is the same rnn_relu overflow."""
    model, loss, tr = rnn_relu_exploding_state()
    expect(gl.explain(model.rnn.weight_hh_l0, tr), reason="nonfinite_forward", reasons=("overflow",),
           tensor="model.rnn.weight_hh_l0", op="rnn_relu", line="out, _ = self.rnn(self.emb(ids))",
           says=("the loss it comes from, loss, is NaN",))


def test_fix_bounds_the_state():
    """The fix: tanh (or an LSTM / GRU), a recurrent weight of spectral radius at most 1, or a shorter sequence; clipping gradients does not help."""
    model, loss, tr = rnn_relu_exploding_state()
    expect(gl.explain(loss, tr), fix=("tanh", ("LSTM or GRU", "GRU"), "spectral radius at most 1", "truncate"),
           never_fix=("learning rate", "keep the input away"))


def test_tracing_changed_no_number():
    """The traced run gives the plain run's loss and gradients bit for bit (NaN included)."""
    plain_model, plain_loss, _ = rnn_relu_exploding_state(traced=False)
    model, loss, _ = rnn_relu_exploding_state()
    assert torch.equal(_bits(loss), _bits(plain_loss))
    for (name, p), q in zip(model.named_parameters(), plain_model.parameters()):
        assert torch.equal(_bits(p.grad), _bits(q.grad)), name
