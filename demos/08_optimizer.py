"""Demo 8: the optimizer updates what was registered with it (article section 7).

An optimizer is given the parameters to update when it is built.  step() moves exactly
those, each by its own .grad, and zero_grad() clears only theirs.  Here w is registered
and b is not: b gets a gradient but never moves.

Run: python demos/08_optimizer.py [--out DIR]
"""

import torch

import graphlens as gl
from graphlens.demos import demo_args, report_claims, save, show


def main(out):
    w = torch.tensor([1.0, -2.0], requires_grad=True)
    b = torch.tensor([0.5], requires_grad=True)
    optimizer = torch.optim.SGD([w], lr=0.1)
    x = torch.tensor([3.0, 1.0])
    with gl.trace() as tr:
        loss = ((w * x).sum() + b - 1.0).pow(2).sum()
        loss.backward()
    w_before, b_before = w.detach().clone(), b.detach().clone()
    optimizer.step()
    print(f"w: {show(w_before)} -> {show(w.detach())} (moved by -lr * grad = {show(-0.1 * w.grad)})")
    print(f"b: {show(b_before)} -> {show(b.detach())} (has grad {show(b.grad)}, but is not registered)")
    optimizer.zero_grad()
    print(f"after zero_grad(): w.grad = {w.grad}, b.grad = {show(b.grad)}")
    save(tr.graph(), out, "08_optimizer")
    report_claims("optimizer.", out=out)


if __name__ == "__main__":
    main(demo_args(__doc__))
