"""Part (h) of ``run.py``: wide programs, each picture's nodes and the seconds its layout takes.

Growth (part (g)) times graphlens; this part times what the user waits for next: the layout
program turning the picture into SVG (Graphviz's ``dot``, or ``graphviz-pure``), which slows down
far faster than the number of nodes drawn grows.  Each program is wide in its own way (many leaves
into one op, a product per leaf, a product per pair of leaves, a loop over a dict of leaves, a
leaf read by many ops, slices, a gradient per sample); each picture is drawn with the defaults,
in the data view and the function view, at 100 and 300 items.  A picture above ``max_nodes`` (150)
or a layout above :data:`SLOW` seconds is flagged.  On 2026-12-07 (eighth session) a stack of
400 leaves drew 407 nodes and took ``dot`` 8.6 s; a snapshot of 100 products of pairs of
leaves, 304 nodes and 10.5 s; a pairwise sum tree over 300 leaves still draws 603 nodes (no
fold finds a tree).
"""

from __future__ import annotations

import re
import time
import warnings
from typing import Any, Callable

import torch

import graphlens as gl

__all__ = ["SLOW", "programs", "part_h", "show_h"]

#: A layout that takes longer than this many seconds is flagged.
SLOW = 2.0


def _stack_of_leaves(n: int) -> gl.Graph:
    ws = [torch.randn(3, requires_grad=True) for _ in range(n)]
    with gl.trace() as tr:
        torch.stack(ws).pow(2).sum().backward()
    return tr.graph()


def _products_of_own_leaves(n: int) -> gl.Graph:
    ws = [torch.randn(2, requires_grad=True) for _ in range(n)]
    return gl.snapshot(torch.stack([w * 2.0 for w in ws]).sum())


def _products_of_pairs(n: int) -> gl.Graph:
    xs = [torch.randn(3, requires_grad=True) for _ in range(n)]
    ys = [torch.randn(3, requires_grad=True) for _ in range(n)]
    return gl.snapshot(torch.stack([x * y for x, y in zip(xs, ys)]).sum())


def _sum_over_a_dict(n: int) -> gl.Graph:
    d = {f"k{i}": torch.randn(3, requires_grad=True) for i in range(n)}
    with gl.trace() as tr:
        loss = sum((v * 2).sum() for v in d.values())
        loss.backward()
    return tr.graph()


def _one_leaf_many_ops(n: int) -> gl.Graph:
    x = torch.randn(3, requires_grad=True)
    with gl.trace() as tr:
        torch.stack([x * (i + 1) for i in range(n)]).sum().backward()
    return tr.graph()


def _slices(n: int) -> gl.Graph:
    x = torch.randn(n, 3, requires_grad=True)
    return gl.snapshot(sum(x[i].sum() for i in range(n)))


def _gradient_per_sample(n: int) -> gl.Graph:
    w = torch.randn(3, requires_grad=True)
    xs = torch.randn(n, 3)
    with gl.trace() as tr:
        for i in range(n):
            torch.autograd.grad((w * xs[i]).sum(), w)
    return tr.graph()


def _pairwise_sum_tree(n: int) -> gl.Graph:
    xs = [torch.randn(3, requires_grad=True) for _ in range(n)]
    while len(xs) > 1:
        xs = [xs[i] + xs[i + 1] if i + 1 < len(xs) else xs[i] for i in range(0, len(xs), 2)]
    return gl.snapshot(xs[0].sum())


def programs() -> dict[str, Callable[[int], gl.Graph]]:
    """The wide programs part (h) draws, each made at ``n`` items."""
    return {
        "stack of n leaves (trace)": _stack_of_leaves,
        "a product per leaf (snapshot)": _products_of_own_leaves,
        "a product per pair of leaves (snapshot)": _products_of_pairs,
        "sum over a dict of n leaves (trace)": _sum_over_a_dict,
        "one leaf read by n ops (trace)": _one_leaf_many_ops,
        "n slices summed (snapshot)": _slices,
        "a gradient per sample (trace)": _gradient_per_sample,
        "pairwise sum tree (snapshot)": _pairwise_sum_tree,
    }


def _nodes(source: str) -> int:
    return len(re.findall(r"^\s*\S+ \[label=", source, re.M))


def part_h(sizes: tuple[int, ...] = (100, 300), *, timeout: float = 60.0) -> list[dict]:
    """Part (h): each program of :func:`programs` at each of ``sizes`` items, in both views: nodes
    drawn and seconds of layout (None without a layout program; ``timeout`` where it was stopped)."""
    from graphlens.render import to_dot
    from graphlens.render.output import LayoutTimeout, find_layout_program, layout
    from graphlens.render.style import MAX_NODES

    try:
        find_layout_program()
        can_lay_out = True
    except Exception:  # noqa: BLE001 - no layout program: nodes only
        can_lay_out = False
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, make in programs().items():
            for n in sizes:
                torch.manual_seed(0)
                g = make(n)
                for view in ("data", "function"):
                    source = to_dot(g, view=view).source
                    seconds: Any = None
                    if can_lay_out:
                        t0 = time.perf_counter()
                        try:
                            layout(source, "svg", timeout=timeout)
                            seconds = time.perf_counter() - t0
                        except LayoutTimeout:
                            seconds = timeout
                    nodes = _nodes(source)  # (the legend and any frame title included: a few over max_nodes is still a fit)
                    rows.append({"program": name, "n": n, "view": view, "nodes": nodes, "layout_s": seconds,
                                 "flagged": nodes > MAX_NODES + 10 or (seconds is not None and seconds > SLOW)})
    return rows


def show_h(rows: list[dict]) -> None:
    print(f"\n(h) wide programs: nodes drawn and seconds of layout (flagged: above max_nodes, or above {SLOW:g} s)")
    print(f"{'program':<42}{'n':>5}  {'view':<9}{'nodes':>7}{'layout s':>10}")
    for r in rows:
        s = "-" if r["layout_s"] is None else f"{r['layout_s']:.2f}"
        print(f"{r['program']:<42}{r['n']:>5}  {r['view']:<9}{r['nodes']:>7}{s:>10}{'  flagged' if r['flagged'] else ''}")
