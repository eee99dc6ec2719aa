"""PCGrad divides by g_j.norm() ** 2 and assigns the result to .grad: a zero task gradient makes it 0 / 0 = NaN.

Address: https://github.com/WeiChengTseng/Pytorch-PCGrad/issues/7
Title: g_j.norm() is equal to zero?

What went wrong: PCGrad projects each task's gradient with g_i -= (g_i_g_j) * g_j / (g_j.norm() ** 2)
and writes the merged result into the parameters' .grad. When a task's gradient g_j was all zero its norm
was 0, the projection 0 / 0, and the losses became NaN from the next iteration on. The reporter added an
eps to the denominator.

Accepted answer: keep the denominator away from 0 (add eps), or skip the projection when g_j.norm() is 0.

The NaN in .grad is not what backward wrote (backward's gradients are finite): a trace that holds the
projection names its division and line; a trace that ends before it can only say the .grad was changed
after backward, by code it did not see.
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


def task_grads(losses, params):
    grads = []
    for loss in losses:
        for p in params:
            p.grad = None
        loss.backward(retain_graph=True)
        grads.append(torch.cat([p.grad.flatten() for p in params]))
    return grads


def project(grads):
    g_i, g_j = grads[0].clone(), grads[1]
    g_i_g_j = torch.dot(g_i, g_j)
    g_i -= (g_i_g_j) * g_j / (g_j.norm()**2)
    return g_i + g_j


def _models():
    torch.manual_seed(0)
    shared, head_a, head_b = nn.Linear(2, 2), nn.Linear(2, 1), nn.Linear(2, 1)
    with torch.no_grad():
        head_b.weight.zero_()  # task b does not depend on the shared layer yet: its gradient there is 0
    return shared, head_a, head_b, torch.tensor([[1.0, 2.0]])


def pcgrad_step(trace_projection):
    shared, head_a, head_b, x = _models()
    params = list(shared.parameters())
    with gl.trace() as tr:
        h = shared(x)
        grads = task_grads([head_a(h).sum(), head_b(h).sum()], params)
        if trace_projection:
            merged = project(grads)
            shared.weight.grad = merged[:4].view(2, 2)
    if not trace_projection:
        merged = project(grads)
        shared.weight.grad = merged[:4].view(2, 2)
    return shared, tr


def test_traced_projection_names_the_division():
    """With the projection traced: nonfinite_grad_assigned + division_by_zero at div, on the projection line."""
    shared, tr = pcgrad_step(trace_projection=True)
    expect(gl.explain(shared.weight, tr), reason="nonfinite_backward", reasons=("nonfinite_grad_assigned", "division_by_zero"),
           tensor="shared.weight", op=("div", "DivBackward0"), line="g_j / (g_j.norm()**2)",
           says=("the traced backward wrote a finite", "an assignment to shared.weight.grad", "0 / 0 is NaN"),
           never=("SqrtBackward0", "infinite derivative"))


def test_projection_after_the_trace_is_not_guessed():
    """With the projection after the block: nonfinite_unseen, the finite gradient backward wrote, and no op named."""
    shared, tr = pcgrad_step(trace_projection=False)
    expect(gl.explain(shared.weight, tr), reason="nonfinite_backward", reasons=("nonfinite_unseen",),
           says=("the traced backward wrote a finite", "did not see"), never=("div", "g_j.norm()", "0 / 0"),
           fix=("inside the graphlens.trace() block",))
