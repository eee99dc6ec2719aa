"""The step every example shares: a plain training step, the same step traced, the facts, the files."""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch

import graphlens as gl

__all__ = ["Step", "run", "pip_layout_program", "main"]

#: A step: given the model, run the forward pass and return the loss (backward is done here).
Step = Callable[[torch.nn.Module], torch.Tensor]


def pip_layout_program() -> str | None:
    """The ``graphviz-pure`` program ``pip install graphviz-pure`` put beside this Python (so the
    diagram needs no system Graphviz), or ``None`` when it is not there."""
    beside = Path(sys.executable).parent / ("graphviz-pure.exe" if os.name == "nt" else "graphviz-pure")
    return str(beside) if beside.is_file() and os.access(beside, os.X_OK) else None


def _grads(model: torch.nn.Module) -> dict[str, torch.Tensor | None]:
    return {name: (None if p.grad is None else p.grad.detach().clone()) for name, p in model.named_parameters()}


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(-1).view(torch.uint8)  # the raw bytes: NaN == NaN, -0.0 != 0.0


def _bitwise_equal(a: dict[str, torch.Tensor | None], b: dict[str, torch.Tensor | None]) -> bool:
    """Whether the two runs left the same parameters with gradients of the same bytes."""
    if a.keys() != b.keys():
        return False
    for name, x in a.items():
        y = b[name]
        if x is None or y is None:
            if x is not y:
                return False
        elif x.dtype != y.dtype or x.shape != y.shape or not torch.equal(_bits(x), _bits(y)):
            return False
    return True


def run(
    name: str,
    model: torch.nn.Module,
    step: Step,
    *,
    out: str | os.PathLike = "examples-out",
    names: dict[str, torch.Tensor] | None = None,
    seed: int = 0,
    page: bool = True,
    format: str = "svg",
) -> dict[str, Any]:
    """Run ``step`` on a copy of ``model`` without graphlens, then on ``model`` inside
    ``gl.trace(module=model)`` (forward and backward, the same random seed, so dropout draws the
    same masks; ``names`` names the inputs in the diagram), and return the facts: sizes, times, whether every gradient is bitwise the
    untraced one, and the files written (``<out>/<name>.svg``, or ``.png`` by ``format``, and ``<out>/<name>.html`` when
    ``page`` and this graphlens has the explorer page)."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    reference = copy.deepcopy(model)  # same weights and buffers: the plain run cannot disturb the traced one

    torch.manual_seed(seed)
    step(copy.deepcopy(model)).backward()  # a warm-up: the first call pays one-time costs, timed for neither side

    torch.manual_seed(seed)
    t0 = time.perf_counter()
    step(reference).backward()
    plain_s = time.perf_counter() - t0
    plain = _grads(reference)

    torch.manual_seed(seed)
    t0 = time.perf_counter()
    with gl.trace(module=model, names=names) as tr:
        loss = step(model)
        loss.backward()
    traced_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    g = tr.graph()
    graph_s = time.perf_counter() - t0

    parameters = dict(model.named_parameters())
    drawn_parameters = {t.name for t in g.leaves if t.is_parameter}
    facts: dict[str, Any] = {
        "example": name,
        "parameters": sum(p.numel() for p in parameters.values()),
        "parameter_tensors": len(parameters),
        "graph_tensors": g.counts["tensors"],
        "graph_ops": g.counts["ops"],
        "loss": float(loss.detach()),
        "grads_bitwise_equal": _bitwise_equal(plain, _grads(model)),
        "parameters_with_grad": sum(p.grad is not None for p in parameters.values()),
        # batch norm's running statistics, updated by both steps: the traced one left the same bytes
        "buffers_bitwise_equal": _bitwise_equal(
            {n: b.detach().clone() for n, b in reference.named_buffers()}, {n: b.detach().clone() for n, b in model.named_buffers()}
        ),
        "parameters_named": drawn_parameters == set(parameters),
        "plain_step_s": round(plain_s, 4),
        "traced_step_s": round(traced_s, 4),
        "graph_s": round(graph_s, 4),
    }

    t0 = time.perf_counter()
    diagram = g.render(folder / f"{name}.{format}", engine_binary=pip_layout_program())
    facts["render_s"] = round(time.perf_counter() - t0, 4)
    facts["diagram"] = str(diagram)
    facts["diagram_bytes"] = diagram.stat().st_size

    if page and hasattr(g, "to_html"):
        t0 = time.perf_counter()
        explorer = folder / f"{name}.html"
        g.to_html(explorer)
        facts["page_s"] = round(time.perf_counter() - t0, 4)
        facts["page"] = str(explorer)
        facts["page_bytes"] = explorer.stat().st_size
    return facts


def _print(facts: dict[str, Any]) -> None:
    print(f"{facts['example']}: {facts['parameters']:,} parameters in {facts['parameter_tensors']} tensors, loss {facts['loss']:.4f}")
    print(f"  graph: {facts['graph_tensors']} tensors, {facts['graph_ops']} ops; every parameter named by its qualified name: {facts['parameters_named']}")
    print(f"  step: {facts['plain_step_s']:.3f} s plain, {facts['traced_step_s']:.3f} s traced; gradients bitwise equal to the plain run: {facts['grads_bitwise_equal']} "
          f"({facts['parameters_with_grad']} of {facts['parameter_tensors']} parameter tensors got one)")
    print(f"  buffers (e.g. batch norm's running statistics) bitwise equal to the plain run: {facts['buffers_bitwise_equal']}")
    print(f"  diagram: {facts['diagram']} ({facts['diagram_bytes'] / 1e3:.0f} kB, {facts['render_s']:.2f} s)")
    if "page" in facts:
        print(f"  explorer page: {facts['page']} ({facts['page_bytes'] / 1e3:.0f} kB, {facts['page_s']:.2f} s)")


def main(name: str, build: Callable[[], tuple[torch.nn.Module, Step, dict[str, torch.Tensor]]], argv: list[str] | None = None) -> dict[str, Any]:
    """The command line of an example: ``--out DIR`` (default ``examples-out``), ``--json``
    (print the facts as one JSON line instead of sentences), ``--format png``, ``--no-page``."""
    parser = argparse.ArgumentParser(description=f"Trace one training step of {name} with graphlens.")
    parser.add_argument("--out", default="examples-out", help="folder for the diagram and the explorer page")
    parser.add_argument("--json", action="store_true", help="print the facts as one JSON line")
    parser.add_argument("--format", choices=("svg", "png"), default="svg", help="the diagram's file format")
    parser.add_argument("--no-page", action="store_true", help="do not write the explorer page")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    model, step, inputs = build()
    facts = run(name, model, step, names=inputs, out=args.out, page=not args.no_page, format=args.format)
    if args.json:
        print(json.dumps(facts, sort_keys=True))
    else:
        _print(facts)
    return facts
