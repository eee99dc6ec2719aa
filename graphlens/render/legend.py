"""The legend: one row for each kind of mark a diagram actually shows."""

from __future__ import annotations

from ..graph import Graph
from .labels import esc, plural
from .modules import REPEAT, frames_of
from .scene import graph_buffers
from .scene import Edge, Node, Options
from .style import (
    BOX_BORDER,
    BOX_FILL,
    FROZEN_BORDER,
    FROZEN_FILL,
    DETACH,
    GRAD_BORDER,
    GRAD_TEXT,
    HIGHLIGHT,
    NOTE_BORDER,
    NOTE_FILL,
    LEAF_FILL,
    NONFINITE,
    NONLEAF_FILL,
    OP_BORDER,
    OP_FILL,
    PARAM_PERIPHERIES,
    PLAIN_BORDER,
    REGION,
    RELEASED,
)

__all__ = ["legend_label"]


def legend_label(nodes: list[Node], edges: list[Edge], graph: Graph, o: Options, *, notes: bool = False) -> str | None:
    """The legend's HTML-like label: one row for each kind of mark the diagram shows, or ``None``."""
    kinds = {n.kind for n in nodes}
    drawn = [n for n in nodes if n.kind == "tensor"]
    rows: list[str] = []

    def swatch(fill: str, border: str, width: int, text: str) -> str:
        return (
            f'<TR><TD BGCOLOR="{fill}" COLOR="{border}" BORDER="{width}" WIDTH="22" HEIGHT="12" FIXEDSIZE="TRUE"></TD>'
            f'<TD ALIGN="LEFT">{text}</TD></TR>'
        )

    if any(n.attrs.get("fillcolor") == LEAF_FILL for n in drawn):
        rows.append(swatch(LEAF_FILL, PLAIN_BORDER, 1, "leaf tensor"))
    if any(n.attrs.get("fillcolor") == NONLEAF_FILL for n in drawn):
        rows.append(swatch(NONLEAF_FILL, PLAIN_BORDER, 1, "non-leaf tensor"))
    if any(n.rg for n in nodes):
        rows.append(swatch(NONLEAF_FILL, GRAD_BORDER, 3, "requires grad"))
    if any(n.attrs.get("peripheries") == PARAM_PERIPHERIES for n in drawn):
        # a double border, drawn as a cell inside a framed table (a cell has one border)
        rows.append(
            f'<TR><TD><TABLE BORDER="1" COLOR="{PLAIN_BORDER}" CELLBORDER="1" CELLSPACING="1" CELLPADDING="0">'
            f'<TR><TD BGCOLOR="{LEAF_FILL}" COLOR="{PLAIN_BORDER}" WIDTH="16" HEIGHT="6" FIXEDSIZE="TRUE"></TD></TR></TABLE></TD>'
            '<TD ALIGN="LEFT">parameter (nn.Parameter)</TD></TR>'
        )
    if "op" in kinds:
        what = " (forward / backward name)" if o.view == "data" else " (backward node)"
        rows.append(swatch(OP_FILL, OP_BORDER, 1, "operation" + what))
    if any(f'COLOR="{NONFINITE}"' in n.label for n in drawn):
        rows.append(f'<TR><TD><FONT COLOR="{NONFINITE}"><B>nan</B></FONT></TD><TD ALIGN="LEFT">NaN or infinity (value or gradient)</TD></TR>')
    if any("<B>grad</B>" in n.label for n in drawn):
        rows.append(f'<TR><TD><FONT COLOR="{GRAD_TEXT}"><B>grad</B></FONT></TD><TD ALIGN="LEFT">kept after backward</TD></TR>')
    if any("(released)</I>" in n.label for n in drawn):
        rows.append(f'<TR><TD><FONT COLOR="{RELEASED}"><I>grad</I></FONT></TD><TD ALIGN="LEFT">flowed, then released</TD></TR>')
    if any(e.kind == "detach" for e in edges):
        rows.append(f'<TR><TD><FONT COLOR="{DETACH}">- - -&gt;</FONT></TD><TD ALIGN="LEFT">detach(): no gradient path</TD></TR>')
    regions = [r for n in nodes for r in frames_of(n)]  # (a region drawn inside a folded loop's body: its own kind)
    for kind in sorted({r.partition("#")[0] for r in regions if not r.startswith(REPEAT)}):
        rows.append(
            f'<TR><TD STYLE="dashed" COLOR="{REGION}" BORDER="1" WIDTH="22" HEIGHT="12" FIXEDSIZE="TRUE"></TD>'
            f'<TD ALIGN="LEFT">{"checkpointed: recomputed in backward" if kind == "checkpoint" else "made under " + esc(kind)}</TD></TR>'
        )
    if kinds & {"box", "chain"}:
        steps = any(n.kind == "box" and n.id.startswith("step_") for n in nodes)
        fans = [n for n in nodes if n.kind == "chain" and n.id.startswith("fan_")]
        leaves = [n for n in fans if " alike leaves" in n.label]  # (leaves alone, see chains._leaf_fan_node)
        alike = " / alike ops side by side" if len(leaves) < len(fans) else ""
        if leaves:
            alike += " / alike leaves side by side"
        rows.append(swatch(BOX_FILL, BOX_BORDER, 1, "collapsed submodule / chain" + (" / no_grad step" if steps else "") + alike))
    if any(n.frozen for n in nodes):
        rows.append(
            f'<TR><TD STYLE="dashed" BGCOLOR="{FROZEN_FILL}" COLOR="{FROZEN_BORDER}" BORDER="1" WIDTH="22" HEIGHT="12" FIXEDSIZE="TRUE"></TD>'
            '<TD ALIGN="LEFT">frozen submodule (no parameter requires grad)</TD></TR>'
        )
    if any(n.region and n.region.startswith(REPEAT) for n in nodes) or any("(the same graph each;" in n.label for n in nodes if n.kind == "box"):
        rows.append(
            f'<TR><TD STYLE="rounded" COLOR="{BOX_BORDER}" BORDER="1" WIDTH="22" HEIGHT="12" FIXEDSIZE="TRUE"></TD>'
            '<TD ALIGN="LEFT">× N: N blocks, the same graph each, drawn once</TD></TR>'
        )
    if o.view == "data" and not o.buffers:
        gone = graph_buffers(graph)[0]  # (once, not once per tensor)
        hidden = len({t.name for t in graph.tensors if t.id in gone})
        if hidden:
            rows.append(f'<TR><TD>–</TD><TD ALIGN="LEFT">{plural(hidden, "module buffer")} not drawn (buffers=True)</TD></TR>')
    if any(n.hl for n in nodes) or any(e.hl for e in edges):
        rows.append(swatch("#ffffff", HIGHLIGHT, 3, "highlighted"))
    if notes:
        rows.append(swatch(NOTE_FILL, NOTE_BORDER, 1, "note: what was observed there"))
    if o.direction == "backward":
        rows.append('<TR><TD>&lt;--</TD><TD ALIGN="LEFT">arrows: gradient flow</TD></TR>')
    if not rows:
        return None
    return (
        '<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="2" CELLPADDING="1">'
        f'<TR><TD COLSPAN="2" ALIGN="LEFT"><FONT COLOR="#555555"><B>legend</B></FONT></TD></TR>' + "".join(rows) + "</TABLE>>"
    )
