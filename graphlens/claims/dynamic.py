"""Introduction: the graph is recorded while the forward pass runs, so it can differ per run."""

from __future__ import annotations

import torch

from ..trace import trace
from ._observe import fn_name
from .registry import HOLDS, REFUTED, Claim

__all__ = ["CLAIMS", "dynamic_program", "dynamic_judge"]


def dynamic_program(*, inputs=(((1.0, 2.0), (0.5, -1.0)), ((-1.0, -2.0), (0.5, -1.0)))) -> dict:
    """Run one forward pass per pair of inputs ``(x1, x2)`` with the same weights ``p1``,
    ``p2`` (the article's chart 1); the data decide which branch is taken."""
    p1 = torch.tensor([0.3, -0.2], requires_grad=True)
    p2 = torch.tensor([0.7, 0.1], requires_grad=True)
    runs = []
    evidence = []
    for d1, d2 in inputs:
        with trace() as tr:
            x1 = torch.tensor(d1)
            x2 = torch.tensor(d2)
            y = x1 * p1
            recorded_at_once = fn_name(y)  # the node exists as soon as the op has run
            if sum(d1) > 0:  # control flow that depends on the data
                z = torch.tanh(y) + x2 * p2
            else:
                z = y * y + x2 * p2
            loss = (z**2).sum()
            loss.backward()
        graph = tr.graph()  # read now: the next run adds to p1.grad and p2.grad
        runs.append({
            "input": [list(d1), list(d2)],
            "grad_fn_right_after_mul": recorded_at_once,
            "ops": [op.name for op in graph.ops if op.name and op.name != "AccumulateGrad"],
        })
        evidence.append(graph)
    return {"runs": runs, "evidence": tuple(evidence)}


def dynamic_judge(facts: dict) -> tuple[str, str]:
    runs = facts["runs"]
    graphs = [tuple(r["ops"]) for r in runs]
    during = all(r["grad_fn_right_after_mul"] is not None for r in runs)
    distinct = len(set(graphs))
    lines = [f"input {r['input']}: {' -> '.join(r['ops'])}" for r in runs]
    if during and distinct > 1:
        return HOLDS, (
            f"{len(runs)} runs of the same code recorded {distinct} different graphs, each node as soon as its op ran\n"
            + "\n".join(lines)
        )
    why = "no grad_fn existed right after the op ran" if not during else "every run recorded the same graph"
    return REFUTED, f"{why}\n" + "\n".join(lines)


CLAIMS = (
    Claim(
        id="graph.dynamic",
        section="intro",
        chart=1,
        statement="The graph is built as the forward code runs, so data-dependent control flow yields a different graph per run.",
        expected="each op adds its backward node at the moment it runs; runs taking different branches record different graphs",
        program=dynamic_program,
        judge=dynamic_judge,
        compare=(0, 1, "run 1: x1 = [1, 2]", "run 2: x1 = [-1, -2]"),
    ),
)
