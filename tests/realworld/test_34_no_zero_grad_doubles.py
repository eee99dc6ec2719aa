"""Without zero_grad, two backward passes on the same batch leave twice the gradient in .grad.

Address: https://github.com/jcjohnson/pytorch-examples/issues/31
Title: Why making gradients zero before backward pass?

What went wrong: the asker did not see why the example calls model.zero_grad() before backward.
Without it each backward adds into .grad, so after two passes on the same batch the gradient is
exactly twice the true one and the update uses the running sum of all iterations.

Accepted answer (jcjohnson): backward accumulates into .grad; zero it (optimizer.zero_grad()) every
iteration, or SGD is implemented incorrectly.
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


def no_zero_grad_doubles():
    torch.manual_seed(0)
    model = nn.Linear(2, 1)
    x = torch.randn(3, 2)
    y = torch.randn(3, 1)
    grads = []
    for it in range(2):                       # no model.zero_grad() in the loop
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        grads.append(model.weight.grad.clone())
    return model, loss, grads


def test_grad_is_the_sum_of_the_backward_passes():
    """explain(model.weight) says .grad holds the sum of every backward pass and proposes zero_grad()."""
    model, loss, grads = no_zero_grad_doubles()
    assert torch.allclose(grads[1], 2 * grads[0])  # the program itself: doubled
    expect(gl.explain(model.weight), reason="grad_ok", tensor="model.weight", says=("sum",),
           fix=("zero_grad()",))


def test_grad_with_the_loss_as_root_is_set():
    """explain(model.weight, loss) says the gradient is set and reaches model.weight from loss."""
    model, loss, grads = no_zero_grad_doubles()
    expect(gl.explain(model.weight, loss), reason="grad_ok", tensor="model.weight", says=("AccumulateGrad",),
           not_reasons=("zero_grad_set_none", "backward_not_run"))
