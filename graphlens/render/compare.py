"""Two graphs in one diagram, side by side: what a claim about a difference shows."""

from __future__ import annotations

from typing import Any

from .._util import paused_gc
from ..graph import TensorNode
from ..values import PRECISION
from .dot import Diagram, attr_list, quote, quote_id
from .draw import _to_dot
from .style import FONT, MAX_ELEMENTS, MAX_NODES

__all__ = ["comparison_dot"]


def comparison_dot(
    cmp,
    *,
    view: str = "data",
    direction: str = "forward",
    legend: bool = True,
    values: bool = True,
    grads: bool = True,
    max_elements: int | None = MAX_ELEMENTS,
    precision: int = PRECISION,
    max_nodes: int = MAX_NODES,
    depth: int | None = None,
) -> Diagram:
    """The two graphs of a :class:`~graphlens.Comparison` side by side, each in a box titled
    with its label, matching tensors on the same level, a note on every difference."""
    first, second = cmp.annotated()
    with paused_gc():
        parts = [
            _to_dot(g, view, direction, legend and k == 0, values, grads, False, None, max_elements, precision,
                    max_nodes, depth, f"part{k}", None, prefix)
            for k, (g, prefix) in enumerate(((first, "a_"), (second, "b_")))
        ]
    dot = Diagram(
        name="comparison",
        graph_attr={"rankdir": "TB", "fontname": FONT, "nodesep": "0.3", "ranksep": "0.35", "bgcolor": "white",
                    "newrank": "true"},
        node_attr={"fontname": FONT, "fontsize": "11"},
        edge_attr={"fontname": FONT, "fontsize": "9", "color": "#444444", "arrowsize": "0.7"},
    )
    for k, (part, label) in enumerate(zip(parts, cmp.labels)):
        dot.body.append(f"\tsubgraph cluster_side{k} {{\n")
        attrs = {"label": f"<<B>{_esc(label)}</B>>", "style": "rounded", "color": "#bbbbbb", "fontsize": "12", "labeljust": "l"}
        dot.body.append("\t\t" + " ".join(f"{key}={value if key == 'label' else quote(value)}" for key, value in attrs.items()) + "\n")
        dot.body.extend("\t" + line for line in part.body)
        dot.body.append("\t}\n")
    drawn = [set(_ids(p.body)) for p in parts]
    for i, j in cmp.matched:
        a, b = quote_id("a_" + i), quote_id("b_" + j)
        if isinstance(cmp.first.node(i), TensorNode) and a in drawn[0] and b in drawn[1]:
            dot.body.append(f"\t{{rank=same; {a}; {b}}}\n")
    return dot


def _esc(text: str) -> str:
    from .labels import esc

    return esc(text)


def _ids(lines: list[str]):
    for line in lines:
        head = line.strip().split(" ", 1)[0]
        if head and not head.startswith(("{", "subgraph", "}")) and "->" not in line:
            yield head  # (as written: a quoted id stays quoted, compared with quote_id's form)
