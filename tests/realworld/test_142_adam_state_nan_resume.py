"""Training resumed with an Adam state_dict whose exp_avg_sq holds a NaN: the first traced step writes it into the weights and the second loss is NaN.

Address: https://github.com/NVIDIA-NeMo/RL/issues/3544
Title: [Bug] Restoring Optimizer state causes NaN loss values after resuming Gemma 4 SFT from checkpoint

What went wrong: resuming a supervised fine-tuning run from its checkpoint gave NaN losses once the
optimizer state was restored. Here the model's weights in the checkpoint are fine, but the saved Adam
state of the first layer's weight holds a NaN in exp_avg_sq (the run diverged after the weights were
saved); the first traced step divides by sqrt(exp_avg_sq) and writes NaN into model.0.weight.

Accepted answer: the stored copy of the thread holds only its title (the issue is closed, labelled bug)
and a fragment of a later comment, not its conclusion. The standard fix: do not resume from a
non-finite optimizer state: check it with torch.isfinite where it is loaded, and reset it (a fresh
optimizer state) or load an earlier checkpoint.

The NaN was put into the optimizer's state before the block; Adam's in-place updates first touch it
inside. The old answer said addcmul_ inside opt.step() "made NaN from finite inputs"; the answer must
name opt.state[model.0.weight]['exp_avg_sq'] and its position, say it already held NaN (loaded with
load_state_dict, or left by an earlier step), and name no op.
"""

import contextlib

import torch
import torch.nn.functional as F
from torch import nn

import graphlens as gl
from _helpers import expect


def adam_state_nan_resume(traced=True):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    # the run that wrote the checkpoint: one step, after which its optimizer state went bad
    F.mse_loss(model(torch.randn(4, 4)), torch.randn(4, 1)).backward()
    opt.step()
    opt.zero_grad()
    ckpt = opt.state_dict()
    ckpt["state"][0]["exp_avg_sq"][2, 1] = float("nan")
    opt.load_state_dict(ckpt)  # resume
    x, y = torch.randn(6, 4), torch.randn(6, 1)
    with gl.trace() if traced else contextlib.nullcontext() as tr:
        for _ in range(2):
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
    return model, opt, loss, tr


def _bits(t):
    """The bytes of a tensor: equal bits, NaN included."""
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def test_nan_loss_names_the_loaded_optimizer_state():
    """explain(loss, tr): opt.state[model.0.weight]['exp_avg_sq'] already held NaN at [2, 1] when the trace first saw it; no op is blamed."""
    model, opt, loss, tr = adam_state_nan_resume()
    assert torch.isnan(loss)
    e = gl.explain(loss, tr)
    assert e.op is None and e.line is None
    expect(e, reason="nonfinite_forward", reasons=("nonfinite_input",), not_reasons=("overflow", "division_by_zero"),
           tensor="loss", says=("opt.state[model.0.weight]['exp_avg_sq']", "already held NaN at [2, 1]",
                                "opt.load_state_dict", "each step computes the update from it"),
           never=("made it from finite", "from finite inputs", "addcmul", "overflow", "learning rate too"))


def test_the_nan_weight_is_followed_to_the_same_state():
    """explain(model[0].weight, tr): the weight is NaN because the step computed it from that optimizer state."""
    model, opt, loss, tr = adam_state_nan_resume()
    assert torch.isnan(model[0].weight).any()
    expect(gl.explain(model[0].weight, tr), reason="nonfinite_forward", reasons=("nonfinite_input",),
           tensor="model.0.weight", says=("opt.state[model.0.weight]['exp_avg_sq']", "already held NaN"),
           never=("from finite inputs", "addcmul"))


def test_fix_checks_and_resets_the_optimizer_state():
    """The fix checks the optimizer's state where it is loaded (isfinite) and resets it or loads an earlier checkpoint."""
    model, opt, loss, tr = adam_state_nan_resume()
    expect(gl.explain(loss, tr), fix=("where it is loaded", "torch.isfinite(v)", "opt.state.clear()", "earlier checkpoint"),
           never_fix=("learning rate", "keep the input away"))


def test_without_a_trace_it_names_the_leaves_that_hold_nan():
    """Without a trace: the weights hold NaN now and graphlens cannot tell what put it there, nor whether it was
    there when the loss was computed (the step after the backward writes into them too); no op is blamed."""
    model, opt, loss, _ = adam_state_nan_resume(traced=False)
    expect(gl.explain(loss), reason="nonfinite_forward", tensor="loss", not_reasons=("nonfinite_input",),
           says=("model.0.weight", "NaN or inf now", "not known without a trace"),
           never=("from finite inputs", "addcmul", "mse_loss"))


def test_tracing_changed_no_number():
    """Both traced steps end with the plain run's loss, weights, gradients and Adam state, bit for bit (NaN included)."""
    plain_model, plain_opt, plain_loss, _ = adam_state_nan_resume(traced=False)
    model, opt, loss, _ = adam_state_nan_resume()
    assert torch.equal(_bits(loss), _bits(plain_loss))
    for (name, p), q in zip(model.named_parameters(), plain_model.parameters()):
        assert torch.equal(_bits(p), _bits(q)), name
        assert torch.equal(_bits(p.grad), _bits(q.grad)), name
        for key, value in opt.state[p].items():
            assert torch.equal(_bits(value), _bits(plain_opt.state[q][key])), (name, key)
