"""Demo 5: gradients accumulate; zero_grad() starts afresh (article section 4, chart 5).

Two forward passes share p1 and p2.  Calling backward on each loss adds their gradients
into .grad, exactly as one backward of loss1 + loss2 would.  To update with each loss on
its own, clear the gradients in between; since PyTorch 2.0 optimizer.zero_grad() sets
them to None rather than to zeros.  (The article spells backward as `back_ward`.)

Run: python demos/05_zero_grad.py [--out DIR]
"""

import torch

import graphlens as gl
from graphlens.demos import demo_args, report_claims, save, show


def two_passes():
    p1 = torch.tensor([0.5, -1.0], requires_grad=True)
    p2 = torch.tensor([2.0, 1.0], requires_grad=True)
    xa, xb = torch.tensor([1.0, 2.0]), torch.tensor([3.0, -1.0])
    loss1 = (xa * p1 + p2).sum()
    loss2 = (xb * p1 + p2).sum()
    return p1, p2, loss1, loss2


def main(out):
    with gl.trace() as tr:
        p1 = torch.tensor([0.5, -1.0], requires_grad=True)
        p2 = torch.tensor([2.0, 1.0], requires_grad=True)
        xa = torch.tensor([1.0, 2.0])
        xb = torch.tensor([3.0, -1.0])
        ya = xa * p1 + p2
        loss1 = ya.sum()
        yb = xb * p1 + p2
        loss2 = yb.sum()
        loss1.backward()
        loss2.backward()
    print(f"two backward calls: p1.grad = {show(p1.grad)}, p2.grad = {show(p2.grad)}")

    q1, q2, l1, l2 = two_passes()
    (l1 + l2).backward()
    print(f"one backward of loss1 + loss2: p1.grad = {show(q1.grad)}, p2.grad = {show(q2.grad)}")

    r1, r2, l1, l2 = two_passes()
    optimizer = torch.optim.SGD([r1, r2], lr=0.1)
    l1.backward()
    optimizer.zero_grad()
    print(f"after optimizer.zero_grad(): p1.grad = {r1.grad} (None, not zeros)")
    l2.backward()
    print(f"loss2 alone then gives p1.grad = {show(r1.grad)}")
    save(tr.graph(), out, "05_zero_grad")
    report_claims("accumulate.", "zero_grad.", "erratum.back_ward", out=out)


if __name__ == "__main__":
    main(demo_args(__doc__))
