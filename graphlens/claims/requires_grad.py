"""Section 2: requires_grad spreads along every path to the loss, is locked on non-leaves,
and switching it off on a leaf freezes that leaf."""

from __future__ import annotations

import torch

from ..graph import Graph
from ..snapshot import snapshot
from ..trace import trace
from ._observe import attempt, failed, grad_of, short
from .registry import HOLDS, REFUTED, Claim

__all__ = ["CLAIMS", "propagates_program", "nonleaf_locked_program", "freeze_leaf_program"]


def _forward_paths(graph: Graph, sources: list[str], target: str) -> set[str]:
    """Names of the tensors lying on a forward path from one of ``sources`` to ``target``
    in a traced graph (following its ``input``/``output`` edges)."""
    succ: dict[str, set[str]] = {}
    for e in graph.edges:
        if e.kind in ("input", "output"):
            succ.setdefault(e.src, set()).add(e.dst)
    pred: dict[str, set[str]] = {}
    for a, bs in succ.items():
        for b in bs:
            pred.setdefault(b, set()).add(a)

    def reach(starts: list[str], nxt: dict[str, set[str]]) -> set[str]:
        seen, stack = set(starts), list(starts)
        while stack:
            for n in nxt.get(stack.pop(), ()):
                if n not in seen:
                    seen.add(n)
                    stack.append(n)
        return seen

    src_ids = [t.id for t in graph.tensors if t.name in sources]
    dst_ids = [t.id for t in graph.tensors if t.name == target]
    on_path = reach(src_ids, succ) & reach(dst_ids, pred)
    return {t.name for t in graph.tensors if t.id in on_path and t.name}


# -- requires_grad.propagates --------------------------------------------------------------
def propagates_program() -> dict:
    """Chart 3: trace the article's example through backward and read requires_grad
    of every named tensor."""
    with trace() as tr:
        p1 = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
        p2 = torch.tensor([1.1, 2.2, 3.3], requires_grad=True)
        x = torch.tensor([4.0, 5.0, 6.0])
        xx = x**2
        y1 = p1 + xx
        y2 = torch.sigmoid(y1)
        y3 = y2 + p2
        y4 = torch.sigmoid(y3)
        loss = y4.mean()
        loss.backward()
    graph = tr.graph()
    named = {"p1": p1, "p2": p2, "x": x, "xx": xx, "y1": y1, "y2": y2, "y3": y3, "y4": y4, "loss": loss}
    return {
        "requires_grad": {n: t.requires_grad for n, t in named.items()},
        "on_path_from_params": sorted(_forward_paths(graph, ["p1", "p2"], "loss")),
        "evidence": (graph,),
    }


def propagates_judge(facts: dict) -> tuple[str, str]:
    flags, on_path = facts["requires_grad"], facts["on_path_from_params"]
    if not on_path:
        return REFUTED, f"no tensor lies on a path from p1/p2 to loss; requires_grad: {flags}"
    missing = [n for n in on_path if not flags.get(n, False)]
    off_path = {n: f for n, f in flags.items() if n not in on_path}
    text = f"on a path from p1/p2 to loss: {on_path}; elsewhere: {off_path}"
    if not missing:
        return HOLDS, f"all {len(on_path)} tensors on a path from p1/p2 to loss require grad\n{text}"
    return REFUTED, f"on a path from p1/p2 to loss yet requires_grad False: {missing}\n{text}"


# -- requires_grad.nonleaf_locked ------------------------------------------------------------
def nonleaf_locked_program(*, make=lambda p1: p1 * 2) -> dict:
    """Try every way of changing requires_grad on ``y1 = make(p1)``."""
    p1 = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y1 = make(p1)
    is_leaf = y1.is_leaf
    tries = {
        "y1.requires_grad_(False)": attempt(lambda: y1.requires_grad_(False)),
        "y1.requires_grad = False": attempt(lambda: setattr(y1, "requires_grad", False)),
        "y1.requires_grad = True": attempt(lambda: setattr(y1, "requires_grad", True)),
        "y1.requires_grad_(True)": attempt(lambda: y1.requires_grad_(True)),
    }
    return {
        "is_leaf": is_leaf,
        "attempts": tries,
        "requires_grad_after": y1.requires_grad,
        "evidence": (snapshot(y1),),
    }


def nonleaf_locked_judge(facts: dict) -> tuple[str, str]:
    tries = facts["attempts"]
    offs = ["y1.requires_grad_(False)", "y1.requires_grad = False"]
    text = "; ".join(f"{k} -> {short(v)}" for k, v in tries.items())
    if facts["is_leaf"]:
        return REFUTED, f"y1 is a leaf here, so the claim about non-leaves was not exercised\n{text}"
    if all(failed(tries[k], "RuntimeError") for k in offs) and facts["requires_grad_after"]:
        also = "assigning True raises too" if failed(tries["y1.requires_grad = True"]) else "assigning True is accepted"
        return HOLDS, (
            f"switching requires_grad off on a non-leaf raises RuntimeError; {also}; "
            f"requires_grad_(True) {'is accepted as a no-op' if tries['y1.requires_grad_(True)'] == 'ok' else 'raises too'}\n{text}"
        )
    return REFUTED, f"a non-leaf accepted requires_grad False (now {facts['requires_grad_after']})\n{text}"


# -- requires_grad.freeze_leaf ---------------------------------------------------------------
def _freeze_leaf_run(freeze: bool):
    with trace() as tr:
        p1 = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
        p2 = torch.tensor([1.1, 2.2, 3.3], requires_grad=True)
        if freeze:
            p1.requires_grad_(False)
        x = torch.tensor([4.0, 5.0, 6.0])
        xx = x**2
        y1 = p1 + xx
        y2 = torch.sigmoid(y1)
        y3 = y2 + p2
        y4 = torch.sigmoid(y3)
        loss = y4.mean()
        loss.backward()
    named = {"p1": p1, "y1": y1, "y2": y2, "y3": y3, "loss": loss}
    return named, p1, p2, tr.graph()


def freeze_leaf_program(*, freeze: bool = True) -> dict:
    """Switch p1.requires_grad off before the forward pass, then run backward (and run the
    same program once without freezing, to compare)."""
    *_, before = _freeze_leaf_run(False)
    named, p1, p2, after = _freeze_leaf_run(freeze)
    return {
        "requires_grad": {n: t.requires_grad for n, t in named.items()},
        "p1.grad": grad_of(p1),
        "p2.grad": grad_of(p2),
        "evidence": (after, before),
    }


def freeze_leaf_judge(facts: dict) -> tuple[str, str]:
    flags = facts["requires_grad"]
    text = f"requires_grad: {flags}; p1.grad = {facts['p1.grad']}; p2.grad = {facts['p2.grad']}"
    frozen = facts["p1.grad"] is None and not flags["y1"] and not flags["y2"]
    if frozen and facts["p2.grad"] is not None and flags["y3"]:
        return HOLDS, f"with p1 frozen, p1 gets no gradient and y1, y2 stop requiring grad; p2 still trains\n{text}"
    return REFUTED, f"freezing p1 did not stop its gradient path as described\n{text}"


CLAIMS = (
    Claim(
        id="requires_grad.propagates",
        section="2",
        chart=3,
        statement="Any tensor lying on a route from a requires-grad leaf to the loss requires grad itself.",
        expected="requires_grad True for every tensor between p1/p2 and loss; False for x and xx",
        program=propagates_program,
        judge=propagates_judge,
    ),
    Claim(
        id="requires_grad.nonleaf_locked",
        section="2",
        chart=None,
        statement="PyTorch refuses to switch requires_grad off on a non-leaf tensor.",
        expected="RuntimeError from y1.requires_grad_(False) and from y1.requires_grad = False",
        program=nonleaf_locked_program,
        judge=nonleaf_locked_judge,
    ),
    Claim(
        id="requires_grad.freeze_leaf",
        section="2",
        chart=3,
        statement="Turning requires_grad off on the leaf P1 freezes it: no gradient for P1, and results made only from P1 and plain inputs no longer require grad.",
        expected="p1.grad None, y1 and y2 requires_grad False, p2 still gets a gradient",
        program=freeze_leaf_program,
        judge=freeze_leaf_judge,
        compare=(1, 0, "p1 requires grad", "p1.requires_grad_(False) first"),
    ),
)
