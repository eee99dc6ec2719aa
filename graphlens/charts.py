"""The article's six charts as small real programs, each traced into a Graph."""

from __future__ import annotations

from typing import Callable, NamedTuple

import torch

from .graph import Graph
from .trace import trace

__all__ = ["Chart", "CHARTS", "chart", "article_example"]


class Chart(NamedTuple):
    """One of the article's charts: its number, section, title and the program behind it."""

    number: int
    section: str
    title: str
    build: Callable[[], Graph]


def article_example(*, detach: bool = True) -> Graph:
    """The article's section-1 program with its typo fixed (``p`` -> ``p1``), traced
    through backward: leaves ``p1``, ``p2``, ``x``, ``xx``; ``y1`` cut by ``detach()``."""
    with trace() as tr:
        p1 = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
        p2 = torch.tensor([1.1, 2.2, 3.3], requires_grad=True)
        x = torch.tensor([4.0, 5.0, 6.0], requires_grad=False)
        xx = x**2
        y1 = p1 + xx
        if detach:
            y1 = y1.detach()
        y2 = torch.sigmoid(y1)
        y3 = y2 + p2
        y4 = torch.sigmoid(y3)
        loss = y4.mean()
        loss.backward()
    return tr.graph()


def chart1_dynamic_graph() -> Graph:
    """Two inputs and two weights: the graph grows as the forward pass runs."""
    with trace() as tr:
        x1 = torch.tensor([1.0, 2.0])
        x2 = torch.tensor([0.5, -1.0])
        p1 = torch.tensor([0.3, -0.2], requires_grad=True)
        p2 = torch.tensor([0.7, 0.1], requires_grad=True)
        y = x1 * p1
        z = torch.tanh(y) + x2 * p2
        loss = (z**2).sum()
        loss.backward()
    return tr.graph()


def chart2_leaf_nodes() -> Graph:
    """Which tensors are leaves: everything made directly, and ``xx`` made only from ``x``."""
    return article_example(detach=False)


def chart3_requires_grad() -> Graph:
    """Which tensors require grad: every tensor on a path from ``p1`` or ``p2`` to the loss."""
    return article_example(detach=False)


def chart4_detach() -> Graph:
    """Two losses separated by ``detach()``: ``loss1`` trains ``p1``, ``loss2`` trains ``p2``."""
    with trace() as tr:
        x = torch.tensor([1.0, 2.0, 3.0])
        p1 = torch.tensor([0.5, -0.5, 1.0], requires_grad=True)
        p2 = torch.tensor([0.1, 0.2, 0.3], requires_grad=True)
        y1 = x * p1
        y2 = torch.sigmoid(y1)
        loss1 = y2.mean()
        y2d = y2.detach()
        y3 = y2d * p2
        loss2 = y3.sum()
        loss1.backward()
        loss2.backward()
    return tr.graph()


def chart5_two_forward_passes() -> Graph:
    """The same weights used by two forward passes: two losses, gradients accumulate."""
    with trace() as tr:
        p1 = torch.tensor([0.5, -1.0], requires_grad=True)
        p2 = torch.tensor([2.0, 1.0], requires_grad=True)
        xa = torch.tensor([1.0, 2.0])
        xb = torch.tensor([3.0, -1.0])
        ya = xa * p1 + p2
        loss1 = ya.sum()
        yb = xb * p1 + p2
        loss2 = yb.sum()
        loss1.backward()
        loss2.backward()
    return tr.graph()


def chart6_retain_grad() -> Graph:
    """Which gradients survive backward: leaves' and retained ones; the rest are released."""
    with trace() as tr:
        p1 = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
        p2 = torch.tensor([0.5, 0.5, 0.5], requires_grad=True)
        x = torch.tensor([1.0, -1.0, 2.0])
        y1 = p1 * x
        y2 = y1 + p2
        y2.retain_grad()
        y3 = y2**2
        loss = y3.sum()
        loss.backward()
    return tr.graph()


CHARTS: dict[int, Chart] = {
    1: Chart(1, "intro", "The dynamic graph", chart1_dynamic_graph),
    2: Chart(2, "1", "Leaf nodes", chart2_leaf_nodes),
    3: Chart(3, "2", "Tensors that require grad", chart3_requires_grad),
    4: Chart(4, "3", "detach() cuts the graph", chart4_detach),
    5: Chart(5, "4", "Two forward passes accumulate", chart5_two_forward_passes),
    6: Chart(6, "5", "Gradients kept and released", chart6_retain_grad),
}


def chart(number: int) -> Graph:
    """The graph of chart ``number`` (1 to 6), freshly traced."""
    try:
        return CHARTS[number].build()
    except KeyError:
        raise ValueError(f"unknown chart: {number!r} (must be one of {sorted(CHARTS)})") from None
