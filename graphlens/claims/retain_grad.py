"""Section 5: intermediate gradients are thrown away unless retain_grad() asks to keep them,
and the values saved for backward are freed by it."""

from __future__ import annotations

import functools
import warnings

import torch

from ..snapshot import snapshot
from ..trace import trace
from ._observe import attempt, failed, grad_of, same, short, values
from .registry import HOLDS, NUANCED, REFUTED, Claim

__all__ = ["CLAIMS", "chart6_program", "keeps_program", "graph_freed_program"]


def _chart6_facts(inner: dict, flowed: dict, p1: torch.Tensor, graph) -> dict:
    """What a chart-6 program saw: each non-leaf's ``.grad`` (and the warnings reading it
    gave), the gradient its hook saw flowing, and whether it retains grad."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        grads = {name: values(t.grad) for name, t in inner.items()}
    return {
        "grad_after_backward": grads,
        "flowed": flowed,
        "retains_grad": {name: t.retains_grad for name, t in inner.items()},
        "warnings": sorted({str(w.message).split(". ")[0] for w in caught}),
        "p1.grad": grad_of(p1),
        "evidence": (graph,),
    }


# -- retain_grad.nonleaf_discarded ----------------------------------------------------------
def chart6_program(*, retain_y2: bool = False) -> dict:
    """Chart 6: hooks see the gradient flowing into each non-leaf; after backward,
    read their ``.grad``.  With ``retain_y2``, ``y2.retain_grad()`` is called first."""
    flowed = {}
    with trace() as tr:
        p1 = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
        p2 = torch.tensor([0.5, 0.5, 0.5], requires_grad=True)
        x = torch.tensor([1.0, -1.0, 2.0])
        y1 = p1 * x
        y2 = y1 + p2
        if retain_y2:
            y2.retain_grad()
        y3 = y2**2
        loss = y3.sum()
        inner = {"y1": y1, "y2": y2, "y3": y3}
        for name, t in inner.items():
            t.register_hook(lambda g, name=name: flowed.__setitem__(name, values(g)))
        loss.backward()
    return _chart6_facts(inner, flowed, p1, tr.graph())


def discarded_judge(facts: dict) -> tuple[str, str]:
    grads, flowed = facts["grad_after_backward"], facts["flowed"]
    warned = facts["warnings"]
    text = f".grad after backward: {grads}; gradients that flowed through (seen by hooks): {flowed}; warnings: {warned}"
    kept = [n for n, g in grads.items() if g is not None]
    if not kept and all(flowed.get(n) is not None for n in grads):
        note = "PyTorch warns on reading them" if warned else "no warning was given"
        return HOLDS, f"gradients flowed through {sorted(grads)} but none was kept: .grad is None ({note})\n{text}"
    return REFUTED, f"non-leaf gradients kept after backward: {kept}\n{text}"


# -- retain_grad.keeps -------------------------------------------------------------------------
#: Chart 6 with ``y2.retain_grad()`` called before backward.
keeps_program = functools.partial(chart6_program, retain_y2=True)


def keeps_judge(facts: dict) -> tuple[str, str]:
    grads, flowed = facts["grad_after_backward"], facts["flowed"]
    retained = [n for n, r in facts["retains_grad"].items() if r]
    text = f"retain_grad() on {retained}; .grad after backward: {grads}; flowed: {flowed}"
    if not retained:
        return REFUTED, f"no tensor retains its gradient\n{text}"
    ok = all(grads[n] is not None and same(grads[n], flowed.get(n)) for n in retained)
    others = [n for n in grads if n not in retained and grads[n] is not None]
    if ok and not others:
        return HOLDS, f"only the tensors that called retain_grad() keep .grad, equal to the gradient that flowed\n{text}"
    return REFUTED, f"retain_grad() did not keep exactly the requested gradients\n{text}"


# -- retain_grad.graph_freed -------------------------------------------------------------------
def graph_freed_program() -> dict:
    """Backward twice through a graph that saved tensors (with and without
    retain_graph=True), and through one made only of additions."""
    p = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)

    y = torch.sigmoid(p * p)
    loss = y.sum()
    saved_before = attempt(lambda: y.grad_fn._saved_result)
    loss.backward()
    saved_after = attempt(lambda: y.grad_fn._saved_result)
    freed_graph = snapshot(loss)  # its saved entries are now in state FREED
    second = attempt(loss.backward)

    kept = torch.sigmoid(p * p).sum()
    kept.backward(retain_graph=True)
    second_retained = attempt(kept.backward)

    additions = (p + p + 1.0).sum()
    additions.backward()
    second_additions = attempt(additions.backward)
    additions_graph = snapshot(additions)
    return {
        "saved_before_backward": saved_before,
        "saved_after_backward": saved_after,
        "second_backward": second,
        "second_backward_retain_graph": second_retained,
        "second_backward_additions_only": second_additions,
        "evidence": (freed_graph, additions_graph),
    }


def graph_freed_judge(facts: dict) -> tuple[str, str]:
    text = (
        f"reading a saved value after backward: {short(facts['saved_after_backward'])}; "
        f"second backward: {short(facts['second_backward'])}; "
        f"with retain_graph=True: {short(facts['second_backward_retain_graph'])}; "
        f"additions only: {short(facts['second_backward_additions_only'])}"
    )
    freed = failed(facts["saved_after_backward"]) and failed(facts["second_backward"], "RuntimeError")
    if not freed or failed(facts["second_backward_retain_graph"]):
        return REFUTED, f"the saved values were not freed by backward as described\n{text}"
    if not failed(facts["second_backward_additions_only"]):
        return NUANCED, (
            "backward frees saved values, so a second backward raises unless retain_graph=True; "
            f"but a graph that saved nothing (only additions) runs backward twice\n{text}"
        )
    return HOLDS, f"backward frees saved values: a second backward raises unless retain_graph=True\n{text}"


CLAIMS = (
    Claim(
        id="retain_grad.nonleaf_discarded",
        section="5",
        chart=6,
        statement="Gradients of intermediate tensors are used on the way back and then dropped: a non-leaf has .grad None after backward.",
        expected="y1.grad, y2.grad and y3.grad are None after backward, though a gradient flowed through each",
        program=chart6_program,
        judge=discarded_judge,
    ),
    Claim(
        id="retain_grad.keeps",
        section="5",
        chart=6,
        statement="retain_grad() on a non-leaf, called before backward, makes its .grad survive.",
        expected="y2.grad holds the gradient that flowed into y2; the other non-leaves stay None",
        program=keeps_program,
        judge=keeps_judge,
    ),
    Claim(
        id="retain_grad.graph_freed",
        section="5",
        chart=6,
        statement="Backward releases the intermediate values it saved, so the same graph cannot be backpropagated twice without retain_graph=True.",
        expected="a second backward raises RuntimeError; with retain_graph=True it runs",
        program=graph_freed_program,
        judge=graph_freed_judge,
    ),
)
