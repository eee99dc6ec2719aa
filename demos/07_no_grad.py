"""Demo 7: torch.no_grad() for evaluation (article section 6).

Inside torch.no_grad() nothing is recorded: results have no grad_fn and nothing is saved
for backward, which saves memory.  Freezing every parameter looks similar, but an input
that requires grad still builds a graph, and the flags must be switched back.  (The
article writes `torch.nograd()`; the context manager is `torch.no_grad()`.)

Run: python demos/07_no_grad.py [--out DIR]
"""

import torch

import graphlens as gl
from graphlens.demos import demo_args, report_claims, save


def saved_bytes(fn):
    total = 0

    def pack(t):
        nonlocal total
        total += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return total


def main(out):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    batch = torch.randn(16, 4)
    print(f"bytes saved for backward, training pass: {saved_bytes(lambda: model(batch))}")
    with torch.no_grad():
        print(f"bytes saved for backward, inside no_grad: {saved_bytes(lambda: model(batch))}")

    with gl.trace(module=model) as tr:
        loss = model(batch).pow(2).mean()
        with torch.no_grad():
            score = model(batch).mean()
    print(f"loss has grad_fn {type(loss.grad_fn).__name__}; score has grad_fn {score.grad_fn}")
    save(tr.graph(), out, "07_no_grad", depth=1)
    report_claims("no_grad.", "erratum.nograd", out=out)


if __name__ == "__main__":
    main(demo_args(__doc__))
