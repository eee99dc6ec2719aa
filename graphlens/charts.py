"""The article's six charts, each drawn from the evidence of the claim that illustrates it."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

from . import claims
from .graph import Graph

__all__ = ["Chart", "CHARTS", "chart", "evidence", "article_example"]


class Chart(NamedTuple):
    """One of the article's charts: its number, section and title, ``build`` (a function
    of no arguments returning the graph; its docstring is the chart's caption), and the
    claim whose evidence graph number ``evidence`` it draws."""

    number: int
    section: str
    title: str
    build: Callable[[], Graph]
    claim: str
    evidence: int = 0


def evidence(claim_id: str, index: int = 0) -> Graph:
    """Graph ``index`` of the evidence that the claim ``claim_id`` records when it is checked
    now (see :meth:`graphlens.claims.Claim.check`)."""
    verdict = claims.check(claim_id)
    if index >= len(verdict.evidence):
        raise RuntimeError(
            f"claim {claim_id!r} recorded {len(verdict.evidence)} evidence graph(s), so there is no graph {index} "
            f"to draw (its verdict: {verdict.status}: {verdict.summary})"
        )
    return verdict.evidence[index]


def article_example(*, detach: bool = True) -> Graph:
    """The article's section-1 program with its typo fixed (``p`` -> ``p1``), traced
    through backward: leaves ``p1``, ``p2``, ``x``, ``xx``; ``y1`` cut by ``detach()``
    (the evidence of ``detach.leaf_cut``; without ``detach``, of ``leaf.derived_nonleaf``)."""
    return evidence("detach.leaf_cut" if detach else "leaf.derived_nonleaf")


def _flag(g: Graph, name: str, when: Callable[[Any], bool], text: str) -> dict:
    """``{name: text}`` when the tensor ``name`` of ``g`` is there and ``when(it)`` holds."""
    try:
        t = g.find(name)
    except KeyError:
        return {}
    return {name: text} if when(t) else {}


#: Chart number -> its section's talking points: (tensor, when the graph bears it out, text).
_POINTS: dict[int, tuple[tuple[str, Any, str], ...]] = {
    1: (("x1", lambda t: not t.requires_grad, "input data: no gradient needed"),
        ("p1", lambda t: t.grad is not None, "a weight: training needs dloss/dp1")),
    2: (("xx", lambda t: t.is_leaf, "a leaf, though an op made it: x needs no grad"),
        ("loss", lambda t: not t.is_leaf, "non-leaf: it has a grad_fn")),
    3: (("y1", lambda t: t.requires_grad, "requires grad: p1 flows into it"),
        ("x", lambda t: not t.requires_grad, "off every path from p1/p2")),
    4: (("loss1", lambda t: True, "trains p1 only"),
        ("loss2", lambda t: True, "trains p2 only: y2d is cut from p1")),
    5: (("xb", lambda t: True, "the second pass: same weights, new data"),),
    6: (("p1", lambda t: t.grad is not None, "a leaf: its grad stays after backward"),),
}


def _points(number: int, g: Graph) -> dict:
    """The talking points of chart ``number``'s section, each shown only where the graph bears it out."""
    out: dict = {}
    for name, when, text in _POINTS.get(number, ()):
        out.update(_flag(g, name, when, text))
    return out


def _chart(number: int, section: str, title: str, claim: str, caption: str, index: int = 0) -> Chart:
    def build() -> Graph:
        g = evidence(claim, index)
        return g.annotate(_points(number, g))

    build.__name__ = build.__qualname__ = f"chart{number}"
    build.__doc__ = caption
    return Chart(number, section, title, build, claim, index)


CHARTS: dict[int, Chart] = {
    c.number: c
    for c in (
        _chart(
            1, "intro", "The dynamic graph", "graph.dynamic",
            "The graph recorded as the forward pass ran: with this input (``x1`` sums to more than 0) "
            "``y = x1 * p1`` went through ``tanh``; other data take the other branch (``y * y``) and "
            "record another graph.",
        ),
        _chart(
            2, "1", "Leaf nodes", "leaf.derived_nonleaf",
            "Which tensors are leaves: everything made directly, and ``xx`` made only from ``x``.",
        ),
        _chart(
            3, "2", "Tensors that require grad", "requires_grad.propagates",
            "Which tensors require grad: every tensor on a path from ``p1`` or ``p2`` to the loss.",
        ),
        _chart(
            4, "3", "detach() cuts the graph", "detach.two_losses",
            "Two losses separated by ``detach()``: ``loss1`` trains ``p1``, ``loss2`` trains ``p2``.",
        ),
        _chart(
            5, "4", "Two forward passes accumulate", "accumulate.two_backwards",
            "The same weights used by two forward passes: two losses, gradients accumulate.",
        ),
        _chart(
            6, "5", "Gradients kept and released", "retain_grad.keeps",
            "Which gradients survive backward: leaves' and retained ones; the rest are released.",
        ),
    )
}


def chart(number: int) -> Graph:
    """The graph of chart ``number`` (1 to 6): the evidence of the claim that illustrates
    it, freshly checked."""
    try:
        entry = CHARTS[number]
    except KeyError:
        raise ValueError(f"unknown chart: {number!r} (must be one of {sorted(CHARTS)})") from None
    return entry.build()
