"""A custom loss exp(cross_entropy / eta) on a batch the model gets confidently wrong: exp overflows to inf, the step writes NaN into the weights, and the next loss is NaN.

Address: https://whosebug.com/question/6301115/Weird-behaviour-of-loss-function-in-pytorch
Title: Weird behaviour of loss function in pytorch

What went wrong: training with loss = torch.exp(criterion(output, target) / eta), the loss fell for
a while, then became NaN. The cross-entropy of a confidently wrong prediction is large; its exp
overflows float32 to inf, backward from an inf loss sends inf and NaN gradients, and SGD's step
writes NaN into the weights.

Accepted answer (in our words): exponentiating an unbounded quantity is unstable; bound the
cross-entropy (clamp it) or keep the loss in log space.

SGD's step is param.add_(grad, alpha=-lr): it changes the parameter, never the gradient. An answer
that says the step "changed .grad in place" would state a change that did not happen.
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


def exp_of_cross_entropy():
    torch.manual_seed(0)
    client_model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    eta = 2
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(client_model.parameters(), lr=0.1)
    data = torch.tensor([[40.0, -30.0, 25.0, 60.0], [35.0, -20.0, 50.0, 45.0]])
    target = torch.tensor([2, 0])
    with gl.trace() as tr:
        for _ in range(4):
            optimizer.zero_grad()
            output = client_model(data)
            loss = torch.exp(criterion(output, target) / eta)
            loss.backward()
            optimizer.step()
    return client_model, loss, tr


def test_names_exp_and_the_step():
    """explain(weight, tr): exp's overflow at the loss line, then the step that wrote NaN into the weight."""
    client_model, loss, tr = exp_of_cross_entropy()
    assert torch.isnan(loss) and not torch.isfinite(client_model[0].weight).all()
    expect(gl.explain(client_model[0].weight, tr), reason="nonfinite_forward", reasons=("overflow", "nonfinite_parameter"),
           op="exp", line="loss = torch.exp(criterion(output, target) / eta)", says=("optimizer.step()",),
           fix=("clamp",))


def test_never_says_the_step_changed_the_gradient():
    """The step's add_ read the gradient and changed the parameter: no answer says it changed .grad in place."""
    client_model, loss, tr = exp_of_cross_entropy()
    for e in (gl.explain(client_model[0].weight, tr), gl.explain(loss, tr)):
        expect(e, never=(".grad in place", "changed client_model.0.weight.grad"),
               never_fix=("before changing the gradient in place",))
