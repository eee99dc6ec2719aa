"""Demo 2: leaf nodes, where backpropagation ends (article section 1, chart 2).

A tensor you create yourself is a leaf: it has no grad_fn.  A tensor computed from a
leaf that requires grad is a non-leaf and remembers the op that made it.  But xx = x**2
is a leaf too, because nothing it came from needs a gradient.  The demo runs the
article's example (with its typo `p` fixed to `p1`), prints each tensor's flags, and
draws chart 2.

Run: python demos/02_leaf_nodes.py [--out DIR]
"""

import torch

import graphlens as gl
from graphlens.demos import demo_args, report_claims, save


def main(out):
    with gl.trace() as tr:
        p1 = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
        p2 = torch.tensor([1.1, 2.2, 3.3], requires_grad=True)
        x = torch.tensor([4.0, 5.0, 6.0])  # data: requires_grad is False by default
        xx = x**2
        y1 = p1 + xx  # the article writes `p + xx`; p does not exist
        y2 = torch.sigmoid(y1)
        y3 = y2 + p2
        y4 = torch.sigmoid(y3)
        loss = y4.mean()
        loss.backward()

    print(f"{'tensor':8} {'is_leaf':8} {'requires_grad':14} grad_fn")
    for name, t in [("p1", p1), ("p2", p2), ("x", x), ("xx", xx), ("y1", y1), ("y2", y2),
                    ("y3", y3), ("y4", y4), ("loss", loss)]:
        fn = type(t.grad_fn).__name__ if t.grad_fn is not None else "-"
        print(f"{name:8} {str(t.is_leaf):8} {str(t.requires_grad):14} {fn}")
    print("only leaves that require grad receive .grad:", {"p1": p1.grad is not None, "p2": p2.grad is not None,
                                                           "x": x.grad is not None, "xx": xx.grad is not None})
    save(tr.graph(), out, "02_leaf_nodes")
    report_claims("leaf.", "defaults.", "erratum.undefined_p", out=out)


if __name__ == "__main__":
    main(demo_args(__doc__))
