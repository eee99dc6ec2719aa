"""Introduction: the graph is recorded while the forward pass runs, so it can differ per run."""

from __future__ import annotations

import torch

from ..snapshot import snapshot
from ._observe import fn_name
from .registry import HOLDS, REFUTED, Claim

__all__ = ["CLAIMS", "dynamic_program", "dynamic_judge"]


def dynamic_program(*, inputs=((1.0, 2.0), (-1.0, -2.0))) -> dict:
    """Run one forward pass per input; the data decide which branch is taken."""
    p = torch.tensor([0.5, 0.25], requires_grad=True)
    runs = []
    evidence = []
    for data in inputs:
        x = torch.tensor(data)
        y = x * p
        recorded_at_once = fn_name(y)  # the node exists as soon as the op has run
        if y.sum() > 0:
            z = torch.exp(y)
        else:
            z = y**2
        loss = z.sum()
        graph = snapshot(loss)
        runs.append({
            "input": list(data),
            "grad_fn_right_after_mul": recorded_at_once,
            "ops": [op.name for op in graph.ops],
        })
        evidence.append(graph)
        loss.backward()
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
    ),
)
