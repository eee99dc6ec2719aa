"""A PGD attack run inside the caller's torch.no_grad() evaluation loop: loss.backward() inside the attack fails, its loss has no grad_fn.

Address: https://github.com/BorealisAI/advertorch/issues/79
Title: Adversarial training works well but Attacking the Network throws errors

What went wrong: evaluating a trained network on adversarial examples, the user wrapped the test loop,
including adversary.perturb(inputs, targets), in with torch.no_grad():, and the attack's
loss.backward() raised "element 0 of tensors does not require grad and does not have a grad_fn".

Accepted answer (the maintainer's, confirmed by the user): a gradient attack needs autograd; take
adversary.perturb out of the no_grad block and keep no_grad for the evaluation forward only.

The attack's code has two branches the answer must not blame: delta = torch.zeros_like(xvar) (the
else branch: a delta was given) and loss = -loss (the if minimize branch: not targeted). The delta
it used requires grad, so its making is not the cut; the trace saw cross_entropy make the loss.
"""

import torch
from torch import nn

from _helpers import expect, explained_in


def perturb_iterative(xvar, yvar, predict, nb_iter, eps_iter, loss_fn, delta_init=None, minimize=False):
    if delta_init is not None:
        delta = delta_init
    else:
        delta = torch.zeros_like(xvar)
    delta.requires_grad_()
    for ii in range(nb_iter):
        outputs = predict(xvar + delta)
        loss = loss_fn(outputs, yvar)
        if minimize:
            loss = -loss
        loss.backward()
        delta.data = delta.data + eps_iter * delta.grad.data.sign()
        delta.grad.data.zero_()
    return (xvar + delta).clamp(0.0, 1.0)


class LinfPGDAttack:
    def __init__(self, predict, nb_iter=2, eps_iter=0.01, targeted=False):
        self.predict, self.nb_iter, self.eps_iter, self.targeted = predict, nb_iter, eps_iter, targeted
        self.loss_fn = nn.CrossEntropyLoss(reduction="sum")

    def perturb(self, x, y=None):
        x = x.detach().clone()
        delta = nn.Parameter(torch.zeros_like(x))
        return perturb_iterative(x, y, self.predict, self.nb_iter, self.eps_iter, self.loss_fn,
                                 delta_init=delta, minimize=self.targeted).data


def evaluate(ctx):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 4 * 4, 10))
    net.eval()
    adversary = LinfPGDAttack(net)
    testloader = [(torch.rand(2, 1, 6, 6), torch.tensor([3, 7]))]
    with ctx:
        with torch.no_grad():
            for inputs, targets in testloader:
                adv_untargeted = adversary.perturb(inputs, targets)
                outputs = net(adv_untargeted)


def test_traced_answer_is_no_grad_at_the_line_that_made_the_loss():
    """explain_error(exc, tr): created_in_no_grad, cross_entropy, at loss = loss_fn(outputs, yvar); never loss = -loss."""
    expect(explained_in(evaluate, "traced"), reason="no_grad_fn", reasons=("created_in_no_grad",), op="cross_entropy",
           line="loss = loss_fn(outputs, yvar)", never=("loss = -loss",), fix=("torch.no_grad()",))


def test_plain_answer_blames_no_branch_that_did_not_run():
    """explain_error(exc): no lead from zeros_like (the else branch; the delta used requires grad), never loss = -loss."""
    expect(explained_in(evaluate, "plain"), reason="no_grad_fn", not_reasons=("cut_by_nondifferentiable_op",),
           never=("zeros_like", "loss = -loss"), never_fix=("zeros_like",))
