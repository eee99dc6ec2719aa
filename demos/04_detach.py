"""Demo 4: detach() cuts the graph (article section 3, chart 4).

Two losses are joined by a detached tensor, as in a GAN: loss1 trains p1 only, loss2
trains p2 only.  The detached tensor is a new leaf without a gradient path, but it is
not a copy: it shares storage (and the version counter) with the original, so an
in-place change to it shows through.  The demo prints both facts and draws chart 4.

Run: python demos/04_detach.py [--out DIR]
"""

import torch

import graphlens as gl
from graphlens.demos import demo_args, report_claims, save, show


def main(out):
    with gl.trace() as tr:
        x = torch.tensor([1.0, 2.0, 3.0])
        p1 = torch.tensor([0.5, -0.5, 1.0], requires_grad=True)
        p2 = torch.tensor([0.1, 0.2, 0.3], requires_grad=True)
        y1 = x * p1
        y2 = torch.sigmoid(y1)
        loss1 = y2.mean()
        y2d = y2.detach()
        y3 = y2d * p2
        loss2 = y3.sum()
        loss1.backward()
        print(f"after loss1.backward(): p1.grad = {show(p1.grad)}, p2.grad = {p2.grad}")
        loss2.backward()
        print(f"after loss2.backward(): p1.grad unchanged, p2.grad = {show(p2.grad)}")
    print(f"y2d is a leaf: {y2d.is_leaf}, requires grad: {y2d.requires_grad}")
    print(f"y2d shares y2's storage: {y2d.data_ptr() == y2.data_ptr()} (so it is not a copy)")
    save(tr.graph(), out, "04_detach")
    report_claims("detach.", out=out)


if __name__ == "__main__":
    main(demo_args(__doc__))
