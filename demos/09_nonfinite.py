"""Demo 9: why a gradient is NaN or inf (beyond the article).

Two classic ways a loss or a gradient stops being a number.  First the masking trap:
torch.where picks a safe branch in the forward pass, yet log's backward still runs where
the other branch was chosen, and 0 times its infinite derivative at 0 is NaN.  Then an
overflow: exp of a large number in float16 is inf in the forward pass.  graphlens names the
first op (or backward node, in the engine's real order) that made a non-finite number, the
line, the input value there, the cause and the fix; the diagram marks NaN and inf in red,
and the replay page jumps to the step that first sent one.

Run: python demos/09_nonfinite.py [--out DIR]
"""

import torch

import graphlens as gl
from graphlens.demos import demo_args, save


def masked_log():
    x = torch.tensor([0.0, 1.0, 4.0], requires_grad=True)
    with gl.trace() as tr:
        safe = torch.where(x > 0, torch.log(x), torch.zeros_like(x))
        loss = safe.sum()
        loss.backward()
    return x, tr


def fixed_masked_log():
    x = torch.tensor([0.0, 1.0, 4.0], requires_grad=True)
    with gl.trace() as tr:
        positive = x > 0
        safe = torch.where(positive, torch.log(torch.where(positive, x, torch.ones_like(x))), torch.zeros_like(x))
        loss = safe.sum()
        loss.backward()
    return x, tr


def half_overflow():
    scores = torch.tensor([1.0, 5.0, 12.0], requires_grad=True)
    with gl.trace() as tr:
        weights = torch.exp(scores.half())
        loss = weights.sum()
    return loss, tr


def main(out):
    x, tr = masked_log()
    print("x.grad =", x.grad)
    why = gl.explain(x, tr)
    print(why)
    print("reasons:", why.reasons)
    save(tr.graph(), out, "09_nonfinite_masked_log")
    tr.replay().to_html(out / "09_nonfinite_replay.html")
    print("replay page:", out / "09_nonfinite_replay.html", "(it opens with a link to the step that first sent a NaN)")
    print()
    x, tr = fixed_masked_log()
    print("with the input made safe before log: x.grad =", x.grad)
    print(gl.explain(x, tr))
    print()
    loss, tr = half_overflow()
    print("loss =", loss)
    print(gl.explain(loss, tr))
    save(tr.graph(), out, "09_nonfinite_half_overflow")


if __name__ == "__main__":
    main(demo_args(__doc__))
