"""Notes on a diagram: pale yellow ``shape=note`` nodes beside the nodes they are about."""

from __future__ import annotations

import textwrap
from typing import Any, Mapping

from ..graph import Graph
from .scene import Node
from .style import NOTE_BORDER, NOTE_EDGE, NOTE_FILL, NOTE_WIDTH

__all__ = ["resolve_notes", "note_lines"]


def resolve_notes(graph: Graph, notes: Any) -> dict[str, tuple[str, ...]]:
    """The notes to draw: the graph's own (``notes=None``), none (``False``), or the graph's
    with ``notes`` (a dict of node id or name to text) added for this drawing."""
    if notes is False:
        return {}
    if notes is None or notes is True:
        return dict(graph.notes)
    if not isinstance(notes, Mapping):
        raise TypeError(f"notes must be a dict from a node id or name to a text, or False, not {type(notes).__name__}")
    return dict(graph.annotate(notes).notes)


def _wrap(text: str) -> str:
    """The text as a DOT label: wrapped to about ``NOTE_WIDTH`` characters, lines left-aligned."""
    from .labels import printable

    lines = textwrap.wrap(printable(text), NOTE_WIDTH, break_long_words=True) or [""]
    return "".join(line.replace("\\", "\\\\") + "\\l" for line in lines)


def note_lines(notes: Mapping[str, tuple[str, ...]], nodes: list[Node], quote, prefix: str = "") -> tuple[dict[str, list[str]], list[str]]:
    """DOT lines for ``notes``: ``(beside, tail)``.  One node per note (``note0``, ``note1``,
    … in the order of the drawn nodes), declared right after its target (``beside``: drawn
    node id -> lines; the order of declaration is where Graphviz starts placing them), tied
    to it by a dotted, arrowless edge and put in its rank (``tail``); further notes on the
    same node stack under the first one, each still tied to the node.  A note on a node that
    was collapsed goes to the box or chain that holds it; one text on several nodes drawn as
    one is written once, "(× N)"."""
    beside: dict[str, list[str]] = {}
    if not notes:
        return beside, []
    holder: dict[str, str] = {}
    for n in nodes:
        for member in n.members:
            holder.setdefault(member, n.id)
        holder.setdefault(n.id, n.id)
    order = {n.id: k for k, n in enumerate(nodes)}
    targets = sorted(
        ((holder[k], k) for k in notes if k in holder),
        key=lambda pair: (order.get(pair[0], 0), pair[1]),
    )
    from .dot import quote as quote_value  # (a label is a value, not an id)

    lines: list[str] = []
    count = 0
    used = {prefix + n.id for n in nodes} | {prefix + m for n in nodes for m in n.members}  # (a JSON graph may call a tensor "note0")
    bottom = {n.id for n in nodes if getattr(n, "rank", None) == "max"}
    stacks: dict[str, list[str]] = {}  # drawn node -> its notes' ids, in order
    # The same text on several nodes drawn as one (a hook registered in every step of a folded
    # loop) is written once, with how many it stands for.
    texts: dict[str, dict[str, int]] = {}
    for drawn, key in targets:
        for text in notes[key]:
            seen = texts.setdefault(drawn, {})
            seen[text] = seen.get(text, 0) + 1
    for drawn, key in targets:
        for text in notes[key]:
            times = texts[drawn].pop(text, 0)
            if not times:
                continue
            if times > 1:
                text = f"{text} (× {times:,})"
            nid = f"{prefix}note{count}"
            while nid in used:
                nid += "_"
            count += 1
            label = quote_value(_wrap(text))
            beside.setdefault(drawn, []).append(
                f"\t{nid} [label={label} shape=note style=filled fillcolor=\"{NOTE_FILL}\" color=\"{NOTE_BORDER}\" "
                f"fontsize=9 margin=\"0.08,0.04\"]\n"
            )
            stacks.setdefault(drawn, []).append(nid)
    for drawn, ids in stacks.items():
        # One note sits beside its node, in its rank; the others stack in a column with it,
        # read top to bottom (several in the same rank would be put anywhere along it, tied
        # by long arcs).  Each stays tied to the node, by an edge that does not pull it under
        # the node.  Nothing may go below the bottom row: there the last note is the one
        # beside the node and the others stack above it.
        first = len(ids) - 1 if drawn in bottom else 0
        for k, nid in enumerate(ids):
            if k == first:
                lines.append(f"\t{quote(drawn)} -> {nid} [style=dotted dir=none color=\"{NOTE_EDGE}\" weight=8]\n")
                lines.append(f"\t{{rank=same; {quote(drawn)}; {nid}}}\n")
            else:
                lines.append(
                    f"\t{quote(drawn)} -> {nid} [style=dotted dir=none color=\"{NOTE_EDGE}\" constraint=false]\n"
                )
                upper, lower = (ids[k - 1], nid) if k > first else (nid, ids[k + 1])  # (upper one first)
                lines.append(f"\t{upper} -> {lower} [style=invis weight=20]\n")
    return beside, lines
