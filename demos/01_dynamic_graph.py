"""Demo 1: the graph is built while the forward pass runs (article intro, chart 1).

Two inputs x1, x2 and two weights p1, p2 flow through a few operations into a loss.
PyTorch records each operation the moment it runs, so a branch that depends on the
data gives a different graph on each run.  The demo prints the graph it recorded,
runs backward, and draws chart 1.

Run: python demos/01_dynamic_graph.py [--out DIR]
"""

import torch

import graphlens as gl
from graphlens.demos import demo_args, report_claims, save, show


def forward(x1, x2, p1, p2):
    y = x1 * p1
    if y.sum() > 0:  # the data decides which op is recorded
        z = torch.tanh(y) + x2 * p2
    else:
        z = torch.relu(y) + x2 * p2
    return (z**2).sum()


def main(out):
    p1 = torch.tensor([0.3, -0.2], requires_grad=True)
    p2 = torch.tensor([0.7, 0.1], requires_grad=True)
    x2 = torch.tensor([0.5, -1.0])

    for x1 in (torch.tensor([1.0, 2.0]), torch.tensor([-1.0, -2.0])):
        loss = forward(x1, x2, p1, p2)
        ops = [op.name for op in gl.snapshot(loss).ops if not op.is_accumulate_grad]
        print(f"x1 = {show(x1)}: backward nodes recorded, from the loss down: {', '.join(ops)}")

    with gl.trace() as tr:
        x1 = torch.tensor([1.0, 2.0])
        y = x1 * p1
        z = torch.tanh(y) + x2 * p2
        loss = (z**2).sum()
        loss.backward()
    print(f"after backward: p1.grad = {show(p1.grad)}, p2.grad = {show(p2.grad)}")
    print("x1 and x2 are data: they need no gradient, so they get none:", x1.grad, x2.grad)
    save(tr.graph(), out, "01_dynamic_graph")
    report_claims("graph.", out=out)


if __name__ == "__main__":
    main(demo_args(__doc__))
