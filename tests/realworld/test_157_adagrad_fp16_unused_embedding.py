"""A bag-of-words classifier made .half() and trained with torch.optim.Adagrad: its eps (1e-10) rounds to 0 in float16, and an embedding row a batch does not use gets 0 / 0 = NaN from opt.step().

Address: https://github.com/google-deepmind/optax/issues/1789
Title: AdaDelta, Adan, and NovoGrad produce NaN on float16 zero-gradient steps

What went wrong: the issue reports that adaptive optimizers which add their eps in the update's dtype
turn a zero-gradient step into 0 / 0 = NaN in float16, because an eps of 1e-8 is below float16's
smallest number (about 6e-8) and rounds to 0; the NaN then poisons the rest of training. Here the same
happens to torch.optim.Adagrad, whose update divides by sqrt(state_sum) + eps with eps = 1e-10: the
rows of the embedding table for tokens absent from the first batch have a zero gradient and a zero
state_sum, the first opt.step() writes NaN into them, and the second batch, which uses them, has a
NaN loss.

Accepted answer: the reporter's fix (pull request #1790) computes the denominator in at least float32,
floors a zero denominator and casts the update back; a maintainer reproduced the NaN for Adan and
NovoGrad (whose default eps, 1e-8, underflows) but not for AdaDelta (1e-6 is still a float16
subnormal). In PyTorch: keep the parameters and the optimizer's state in float32 (autocast or a float32
master copy), or give the optimizer an eps float16 holds.

The answer names Adagrad's eps as 1e-10, never 1e-8 (Adam's and RMSprop's default).
"""

import contextlib

import torch
import torch.nn.functional as F
from torch import nn

import graphlens as gl
from _helpers import expect


class BagOfWords(nn.Module):
    def __init__(self, vocab=12, width=4, classes=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, width)
        self.out = nn.Linear(width, classes)

    def forward(self, tokens):
        return self.out(self.emb(tokens).mean(1))


def adagrad_fp16_unused_embedding(traced=True):
    torch.manual_seed(0)
    model = BagOfWords().half()
    opt = torch.optim.Adagrad(model.parameters(), lr=0.05)
    batches = [(torch.tensor([[1, 2, 3], [2, 3, 4]]), torch.tensor([0, 1])),
               (torch.tensor([[5, 6, 7], [1, 5, 9]]), torch.tensor([1, 0]))]  # 5, 6, 7, 9 unused by batch 1
    losses = []
    with (gl.trace() if traced else contextlib.nullcontext()) as tr:
        for tokens, labels in batches:
            opt.zero_grad()
            loss = F.cross_entropy(model(tokens).float(), labels)
            loss.backward()
            opt.step()
            losses.append(loss.detach())
    return model, opt, losses, loss, tr


def _bits(t):
    return t.detach().reshape(-1).view(torch.uint8)


def test_nan_loss_names_the_adagrad_step_and_its_zero_denominator():
    """explain(loss, tr): addcdiv_ in opt.step() wrote NaN into model.emb.weight where its denominator was 0 (division_by_zero, nonfinite_parameter); never a log or an overflow."""
    model, opt, losses, loss, tr = adagrad_fp16_unused_embedding()
    assert torch.isfinite(losses[0]) and torch.isnan(loss)
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("division_by_zero", "nonfinite_parameter"),
           not_reasons=("log_of_zero", "overflow"), tensor="loss", op="addcdiv_", line="opt.step()",
           says=("model.emb.weight", ("its third input was 0 there", "addcdiv_ divides by its third input, which is 0 there"),
                 ("0 / 0 is NaN", "t1 / t2 is 0 / 0")),
           never=("log of", "overflow", "learning rate too"))


def test_says_adagrads_eps_is_1e_10_and_rounds_to_zero_in_float16():
    """The answer gives Adagrad's default eps as 1e-10 and says it rounds to 0 in float16; never that 1e-8 is Adagrad's default."""
    model, opt, losses, loss, tr = adagrad_fp16_unused_embedding()
    assert opt.defaults["eps"] == 1e-10
    expect(gl.explain(loss, tr), says=("1e-10 for Adagrad", "rounds to 0", "float16"),
           never=("1e-8 for Adagrad", "1e-8 (the default)", "Adagrad's default eps (1e-8)", "Adagrad (1e-8"))


def test_names_a_row_the_second_batch_reads():
    """The NaN the second loss read is in a row the second batch looks up (5, 6, 7 or 9), never row 0, which no batch uses."""
    model, opt, losses, loss, tr = adagrad_fp16_unused_embedding()
    assert torch.isnan(model.emb.weight[0]).all()  # row 0 is NaN too, but the loss never read it
    expect(gl.explain(loss, tr), says=(("model.emb.weight[5, ", "model.emb.weight[6, ", "model.emb.weight[7, ",
                                        "model.emb.weight[9, "),), never=("model.emb.weight[0, 0]",))


def test_fix_is_float32_state_or_an_eps_float16_holds():
    """The fix keeps the parameters and the optimizer state in float32, or gives an eps float16 holds (eps=1e-4)."""
    model, opt, losses, loss, tr = adagrad_fp16_unused_embedding()
    expect(gl.explain(loss, tr), fix=("float32", "eps=1e-4"))


def test_tracing_changes_no_number():
    """Both losses, the weights, their gradients and Adagrad's state_sum of the traced run are bitwise those of the plain run (NaN included)."""
    plain, plain_opt, plain_losses, _, _ = adagrad_fp16_unused_embedding(traced=False)
    traced, traced_opt, traced_losses, _, _ = adagrad_fp16_unused_embedding(traced=True)
    assert all(torch.equal(_bits(a), _bits(b)) for a, b in zip(plain_losses, traced_losses))
    for p, q in zip(plain.parameters(), traced.parameters()):
        assert torch.equal(_bits(p), _bits(q)) and torch.equal(_bits(p.grad), _bits(q.grad))
        assert torch.equal(_bits(plain_opt.state[p]["sum"]), _bits(traced_opt.state[q]["sum"]))
