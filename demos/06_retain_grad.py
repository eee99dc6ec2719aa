"""Demo 6: which gradients survive backward (article section 5, chart 6).

Backward computes a gradient for every tensor on the way, but keeps .grad only on the
leaves that require grad; the intermediate ones are thrown away once used.  Calling
retain_grad() on a non-leaf before backward keeps its gradient.  The diagram shows kept
gradients in blue and released ones in grey (graphlens saw them flow).

Run: python demos/06_retain_grad.py [--out DIR]
"""

import torch

import graphlens as gl
from graphlens.demos import demo_args, report_claims, save


def main(out):
    with gl.trace() as tr:
        p1 = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
        p2 = torch.tensor([0.5, 0.5, 0.5], requires_grad=True)
        x = torch.tensor([1.0, -1.0, 2.0])
        y1 = p1 * x
        y2 = y1 + p2
        y2.retain_grad()
        y3 = y2**2
        loss = y3.sum()
        loss.backward()
    graph = tr.graph()
    for name in ("p1", "p2", "y1", "y2", "y3"):
        node = graph.find(name)
        flowed = node.flowed[-1] if node.flowed else None
        print(f"{name}.grad = {str(node.grad):24} gradient that flowed: {flowed if flowed is not None else '-'}")
    try:
        loss.backward()
    except RuntimeError as err:
        print("a second backward fails, the saved values are gone:", str(err).splitlines()[0][:90], "...")
    save(graph, out, "06_retain_grad")
    report_claims("retain_grad.", out=out)


if __name__ == "__main__":
    main(demo_args(__doc__))
