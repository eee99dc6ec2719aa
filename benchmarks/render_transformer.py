"""Time drawing a 6-layer nn.TransformerEncoder forward + loss graph to SVG with default options.

Run: ``python benchmarks/render_transformer.py``.  Prints, for a snapshot and a trace
(``module=``, so ops carry their submodule scope), the graph size, the time to build the
DOT text, the time to lay it out to SVG and the SVG size.  The goal is under 10 s in total
per graph on a small CPU machine; this is a measurement, not a timed test.
"""

from __future__ import annotations

import time

import torch

import graphlens as gl
from graphlens.render import find_layout_program, layout, to_dot


def build_model() -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, num_layers=6, enable_nested_tensor=False)
    return model, torch.randn(2, 10, 64)


def measure(label: str, graph: gl.Graph, **options) -> float:
    t0 = time.perf_counter()
    dot = to_dot(graph, **options)
    source = dot.source
    t1 = time.perf_counter()
    svg = layout(source, "svg")
    t2 = time.perf_counter()
    drawn = source.count(" [label=")
    print(
        f"{label:<34} {graph.counts['tensors']:>5} tensors {graph.counts['ops']:>5} ops -> {drawn:>4} drawn nodes | "
        f"to_dot {t1 - t0:6.3f} s | layout {t2 - t1:6.3f} s | total {t2 - t0:6.3f} s | svg {len(svg) / 1e3:7.1f} kB"
    )
    return t2 - t0


def main() -> None:
    program = find_layout_program()
    print(f"layout program: {program.kind} ({program.path})")
    model, x = build_model()

    out = model(x)
    loss = out.pow(2).mean()
    snap = gl.snapshot(loss, module=model)
    worst = measure("snapshot, defaults", snap)
    measure("snapshot, view='function'", snap, view="function")

    with gl.trace(module=model) as tr:
        out = model(x)
        loss = out.pow(2).mean()
        loss.backward()
    traced = tr.graph()
    has_scope = any(op.scope for op in traced.ops)
    print(f"trace records submodule scopes: {has_scope}")
    worst = max(worst, measure("trace, defaults", traced))
    for depth in (1, 2):
        measure(f"trace, depth={depth}", traced, depth=depth)
    measure("trace, everything expanded", traced, max_nodes=10**6)
    print(f"slowest default render: {worst:.3f} s (goal: under 10 s)")


if __name__ == "__main__":
    main()
