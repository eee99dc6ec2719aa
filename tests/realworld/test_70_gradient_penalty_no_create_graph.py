"""A gradient penalty computed from torch.autograd.grad without create_graph=True cannot be differentiated again.

Address: https://github.com/igul222/improved_wgan_training/issues/18
Title: About the graph of the gradients respect to inputs

What went wrong: porting WGAN-GP to PyTorch, the poster found that the gradients with respect to the
interpolates "don't connect to the graph of the net": adding the gradient penalty to the loss did not
back-propagate into the critic. torch.autograd.grad returns a plain tensor unless it is asked to
build a graph for the gradient itself; a penalty computed from it alone fails with "element 0 of
tensors does not require grad", and added to the critic's loss it silently contributes nothing.

Accepted answer (the standard fix, as in every PyTorch WGAN-GP): call
torch.autograd.grad(outputs=d_out, inputs=interpolates, grad_outputs=ones, create_graph=True).

The penalty is computed in a helper function: a trace sees the gradient arrive in the block as a
tensor without history, holding exactly the gradient that flowed into the interpolates, and the
helper's code names the call and its variables (grads, interpolates), not t16 and t7.
"""

import pytest
import torch
from torch import nn

import graphlens as gl
from _helpers import HOW, expect, explained


def gradient_penalty(critic, real, fake):
    alpha = torch.rand(real.size(0), 1)
    interpolates = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
    d_out = critic(interpolates)
    grads = torch.autograd.grad(outputs=d_out, inputs=interpolates, grad_outputs=torch.ones_like(d_out))[0]
    return ((grads.norm(2, dim=1) - 1) ** 2).mean()


def setup():
    torch.manual_seed(0)
    critic = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    return critic, torch.randn(4, 3), torch.randn(4, 3)


def penalty_alone():
    critic, real, fake = setup()
    gp = gradient_penalty(critic, real, fake)
    gp.backward()


@pytest.mark.parametrize("how", HOW)
def test_error_says_the_gradient_has_no_graph(how):
    """explain_error on gp.backward(): no_grad_fn + a gradient without graph, the fix passes create_graph=True."""
    e = explained(penalty_alone, how)
    expect(e, reason="no_grad_fn", tensor="gp", says=("create_graph=True",), fix=("create_graph=True",),
           never=("do not require grad",), never_fix=("(parameters do)", "requires_grad=True"))
    assert {"grad_without_create_graph", "gradient_without_graph"} & set(e.reasons), e.reasons


def test_plain_error_knows_the_call_lacks_create_graph():
    """Without a trace, the helper's code shows the call lacks create_graph=True: grad_without_create_graph."""
    expect(explained(penalty_alone), reasons=("grad_without_create_graph",))


def test_plain_error_reads_the_helper_code():
    """Without a trace, the lead is the torch.autograd.grad line inside the helper, said conditionally."""
    expect(explained(penalty_alone), op="grad", line="torch.autograd.grad(outputs=d_out", says=("If ", "gradient_penalty()"))


def test_traced_error_reads_the_call_inside_the_helper():
    """With a trace whose block is in another file, explain_error still reads the helper's call: grads, interpolates, no create_graph."""
    expect(explained(penalty_alone, "traced"), reasons=("grad_without_create_graph",), line="torch.autograd.grad(outputs=d_out",
           says=("grads", "interpolates"))


def test_silent_penalty_names_grads_and_interpolates():
    """Added to the critic's loss, the penalty has no graph: explain(gp, tr) names grads and interpolates, and the call."""
    critic, real, fake = setup()
    with gl.trace() as tr:
        gp = gradient_penalty(critic, real, fake)
        d_loss = critic(fake).mean() - critic(real).mean() + 10 * gp
        d_loss.backward()
    e = gl.explain(gp, tr)
    expect(e, reason="requires_grad_false", tensor="gp", reasons=("grad_without_create_graph",), op="grad",
           line="torch.autograd.grad(outputs=d_out", says=("grads", "interpolates"), fix=("create_graph=True",),
           never=("unnamed tensor",))
