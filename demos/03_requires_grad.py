"""Demo 3: requires_grad spreads along every path to the loss (article section 2, chart 3).

Every tensor computed from a tensor that requires grad requires grad too (the orange
borders in the diagram).  You cannot switch it off on a non-leaf, but you can freeze a
leaf: then the tensors computed only from it and from data stop requiring grad.  The
demo draws the graph twice: normal, and with p1 frozen.

Run: python demos/03_requires_grad.py [--out DIR]
"""

import torch

import graphlens as gl
from graphlens.demos import demo_args, report_claims, save


def program(freeze_p1):
    with gl.trace() as tr:
        p1 = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
        p2 = torch.tensor([1.1, 2.2, 3.3], requires_grad=True)
        if freeze_p1:
            p1.requires_grad_(False)
        x = torch.tensor([4.0, 5.0, 6.0])
        xx = x**2
        y1 = p1 + xx
        y2 = torch.sigmoid(y1)
        y3 = y2 + p2
        y4 = torch.sigmoid(y3)
        loss = y4.mean()
        loss.backward()
    flags = {n: t.requires_grad for n, t in [("p1", p1), ("y1", y1), ("y2", y2), ("y3", y3), ("loss", loss)]}
    return tr.graph(), flags, y1


def main(out):
    graph, flags, y1 = program(freeze_p1=False)
    print("requires_grad on the path p1 -> loss:", flags)
    try:
        y1.requires_grad = False
    except RuntimeError as err:
        print("switching it off on the non-leaf y1 fails:", str(err).splitlines()[0])
    save(graph, out, "03_requires_grad")

    frozen, flags, _ = program(freeze_p1=True)
    print("with p1.requires_grad_(False):", flags)
    save(frozen, out, "03_requires_grad_p1_frozen")
    report_claims("requires_grad.", out=out)


if __name__ == "__main__":
    main(demo_args(__doc__))
