"""DOT emission: quoting, attribute lists, node order and the Digraph of a collapsed scene."""

from __future__ import annotations

import bisect
import heapq
import re
import shutil
from pathlib import Path
from typing import Any, Callable, Mapping

import graphviz

from ..graph import REENTRANT_TAG, Graph
from .labels import printable
from .notes import note_lines
from .legend import legend_label
from .rows import NODESEP, legend_width, plan_rows
from .scene import Edge, Node, Options
from .modules import REPEAT
from .style import BOX_BORDER, DETACH, FONT, HIGHLIGHT, REGION

__all__ = ["emit", "quote", "quote_id", "attr_list", "topological", "Diagram"]


_DEFAULT = 10.0  # = output.LAYOUT_TIMEOUT (output imports this module)
_LAID_OUT = ("svg", "png", "jpg", "jpeg", "pdf")  # what render/pipe lay out themselves, with the time limit


class Diagram(graphviz.Digraph):
    """The ``graphviz.Digraph`` that :func:`~graphlens.render.to_dot` returns: in a notebook it
    draws itself with the layout program graphlens finds (``dot`` or the pip-installed
    ``graphviz-pure``), and falls back to its DOT text rather than a traceback."""

    def _repr_mimebundle_(self, include=None, exclude=None, **_):
        from .output import _fit_width, layout  # (output imports this module)

        def wanted(mime: str) -> bool:
            return (include is None or mime in include) and (exclude is None or mime not in exclude)

        bundle: dict[str, str] = {}
        text = self.source
        if wanted("image/svg+xml"):
            try:
                bundle["image/svg+xml"] = _fit_width(layout(self.source, "svg").decode("utf-8"))
            except Exception as exc:  # noqa: BLE001 - a notebook shows text, never a traceback
                text = f"(no diagram: {exc})\n" + text
        if wanted("text/plain") or not bundle:
            bundle["text/plain"] = text
        return bundle

    def pipe(self, format: str | None = None, *args: Any, **kwargs: Any) -> Any:
        """As ``graphviz.Digraph.pipe``, laid out by the program graphlens finds (Graphviz's
        ``dot``, or on a pip-only install ``graphviz-pure``), stopped after ``timeout=``
        seconds (10 by default; ``None``: no limit) with a message that says how to draw less."""
        from .output import layout

        fmt = format or self.format
        if args or kwargs.get("renderer") or kwargs.get("formatter") or str(fmt).lower() not in _LAID_OUT or (
            fmt == "pdf" and shutil.which("dot") is None
        ):
            return super().pipe(format, *args, **kwargs)
        data = layout(self.source, fmt, timeout=kwargs.get("timeout", _DEFAULT))
        encoding = kwargs.get("encoding")
        return data.decode(encoding) if encoding else data

    def render(self, filename: Any = None, directory: Any = None, view: bool = False, cleanup: bool = False,
               format: str | None = None, *args: Any, outfile: Any = None, **kwargs: Any) -> str:
        """As ``graphviz.Digraph.render`` (the DOT source saved as ``filename``, the picture
        as ``filename.format``; ``cleanup=True`` removes the source; ``outfile=`` names the
        picture), laid out by the program graphlens finds (Graphviz's ``dot``, or on a pip-only
        install ``graphviz-pure``: svg, png, jpeg), stopped after ``timeout=`` seconds (10 by
        default; ``None``: no limit).  Returns the picture's path."""
        from .output import check_target, layout

        wanted = format or (Path(outfile).suffix.lstrip(".") if outfile is not None else None) or self.format
        if args or kwargs.get("renderer") or kwargs.get("formatter") or view or str(wanted).lower() not in _LAID_OUT or (
            str(wanted).lower() == "pdf" and shutil.which("dot") is None
        ):
            return super().render(filename, directory, view, cleanup, format, *args, outfile=outfile, **kwargs)
        timeout = kwargs.pop("timeout", _DEFAULT)

        if outfile is not None:
            out = Path(outfile)
            fmt = format or out.suffix.lstrip(".") or self.format
            source_path = Path(filename if filename is not None else out.with_suffix(".gv"))
            if directory is not None and filename is not None:
                source_path = Path(directory) / source_path
        else:
            fmt = format or self.format
            source_path = Path(directory or self.directory or "") / (filename if filename is not None else self.filename)
            out = Path(f"{source_path}.{fmt}")
        check_target(out)
        data = layout(self.source, fmt, timeout=timeout)
        saved = Path(self.save(source_path.name, str(source_path.parent)))
        out.write_bytes(data)
        if cleanup:
            saved.unlink()
        return str(out)


def topological(nodes: list[Node], edges: list[Edge]) -> list[Node]:
    """The nodes in forward order (inputs before what they feed), ties by graph order:
    Graphviz places nodes left to right in the order it meets them."""
    position = {n.id: i for i, n in enumerate(nodes)}
    indegree = [0] * len(nodes)
    succs: list[list[int]] = [[] for _ in nodes]
    for e in edges:
        a, b = position.get(e.src), position.get(e.dst)
        if a is None or b is None or a == b:
            continue
        succs[a].append(b)
        indegree[b] += 1
    ready = [i for i, d in enumerate(indegree) if d == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for j in succs[i]:
            indegree[j] -= 1
            if indegree[j] == 0:
                heapq.heappush(ready, j)
    if len(order) < len(nodes):  # a cycle (cannot happen in autograd): keep the rest in graph order
        done = set(order)
        order.extend(i for i in range(len(nodes)) if i not in done)
    return [nodes[i] for i in order]


_QUOTED: dict[tuple[str, bool], str] = {}  # (value, is text) -> quoted; values repeat a lot
_QUOTED_IDS: dict[str, str] = {}
_BARE = graphviz.quoting.ID.match  # what DOT reads as an id without quotes
_KEYWORDS = graphviz.quoting.KEYWORDS
_ID_SPECIAL = re.compile(r'[\\"\x00-\x1f\x7f\ud800-\udfff\ufffe\uffff]')
_TEXT_SPECIAL = re.compile(r'[\\"\n]')
_ODD_BACKSLASHES = re.compile(r"(?<!\\)(\\\\)*\\\Z")


def _spell(m: re.Match) -> str:
    c = m.group()
    if c == "\\" or c == '"':
        return "\\" + c
    if c == "\n":
        return "\\n"
    return f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}"


def _quoted(text: str, special: re.Pattern) -> str:
    if _BARE(text) and text.lower() not in _KEYWORDS:
        return text
    return '"' + special.sub(_spell, text) + '"'


def quote_id(value: str) -> str:
    r"""A DOT node id for any string: bare where DOT reads it as it is (``t3``), else in
    double quotes with every backslash and quote escaped and control characters spelled
    (``\x07``).  Two different strings never give the same id, nothing in one can end the
    quotes early (``t\`` gives ``"t\\"``), and it is never read as HTML (``<b>``).

    >>> print(quote_id("t3"), quote_id("t\\"), quote_id('a"b'), quote_id("<b>"), quote_id("node"))
    t3 "t\\" "a\"b" "<b>" "node"
    """
    quoted = _QUOTED_IDS.get(value)
    if quoted is None:
        quoted = _quoted(str(value), _ID_SPECIAL)
        if len(_QUOTED_IDS) < 8192:
            _QUOTED_IDS[value] = quoted
    return quoted


def quote(value: str) -> str:
    r"""A DOT attribute value, as graphviz quotes it but never read as HTML (HTML-like labels
    go through :func:`attr_list` as they are).  Characters Graphviz cannot take (NUL,
    control characters) are spelled out and a long text is cut (:func:`~graphlens.render.labels.printable`).

    A plain ``str`` is Graphviz's escString already (``\l`` ends a left-aligned line, as a
    note's label is written): its backslashes stay, but a lone backslash at its end, which
    would escape the closing quote, is doubled.  A ``graphviz.nohtml(text)`` is text as it
    is shown (a name, a tooltip): every backslash, quote and newline in it is escaped, so
    that ``\N`` shows as ``\N``, not as the node's id.

    >>> print(quote("#ff0000"), quote("a\\"), quote(graphviz.nohtml('\\N "x"')))
    "#ff0000" "a\\" "\\N \"x\""
    """
    key = (value, isinstance(value, graphviz.quoting.NoHtml))
    quoted = _QUOTED.get(key)
    if quoted is None:
        clean = printable(value)
        if key[1]:
            quoted = _quoted(clean, _TEXT_SPECIAL)
        elif _BARE(clean) and clean.lower() not in _KEYWORDS:
            quoted = clean
        else:
            if _ODD_BACKSLASHES.search(clean):
                clean += "\\"
            quoted = '"' + graphviz.quoting.ESCAPE_UNESCAPED_QUOTES(clean) + '"'  # (as graphviz does)
        if len(_QUOTED) < 8192:
            _QUOTED[key] = quoted
    return quoted


def attr_list(label: str | None, attrs: Mapping[str, Any]) -> str:
    """`` [label=... key=value ...]`` exactly as graphviz writes it: the label first,
    then the other attributes sorted by name; an HTML-like label (``<...>``, unless it is a
    ``graphviz.nohtml`` text) as it is.

    >>> print(attr_list("x", {"shape": "box", "color": "#ff0000", "tooltip": graphviz.nohtml('a "b"')}))
     [label=x color="#ff0000" shape=box tooltip="a \\"b\\""]
    """
    parts = []
    if label is not None:
        html_like = label[:1] == "<" and label[-1:] == ">" and not isinstance(label, graphviz.quoting.NoHtml)
        parts.append("label=" + (label if html_like else quote(label)))
    if attrs:
        tip = attrs.get("tooltip")
        if tip is None:
            parts.extend(_style_pairs(attrs)[1])
        else:  # (a tooltip is a node's own: the style around it is what repeats)
            keys, pairs = _style_pairs({k: v for k, v in attrs.items() if k != "tooltip"})
            at = bisect.bisect(keys, "tooltip")
            parts.extend(pairs[:at])
            parts.append("tooltip=" + quote(tip))
            parts.extend(pairs[at:])
    return " [" + " ".join(parts) + "]" if parts else ""


def _style_pairs(attrs: Mapping[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(the keys, the ``key=value`` texts)`` of ``attrs`` sorted by key, None left out;
    the same attributes of many nodes and edges (their style) are written once: plain
    strings only are cached (a ``graphviz.nohtml`` value equals the plain string with
    its text, but is quoted otherwise)."""
    key = tuple(attrs.items())
    made = _STYLES.get(key)
    if made is not None and set(map(type, attrs.values())) <= _PLAIN:
        return made
    keys = sorted(k for k, v in attrs.items() if v is not None)
    made = (tuple(keys), tuple([f"{quote(k)}={quote(attrs[k])}" for k in keys]))
    if len(_STYLES) < 4096 and set(map(type, attrs.values())) <= _PLAIN and set(map(type, attrs)) <= _PLAIN:
        _STYLES[key] = made
    return made


def _plain_id(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in text)


def _nested(body: list[str], members: list[Node], level: int, cid: str, title: str, qid: Callable[[str], str],
            own: Callable[[str], str]) -> None:
    """Write ``members`` of a frame: each node whose ``inner`` frames go deeper than ``level``
    inside a frame of its own (a no_grad step inside a folded loop's body, a loop folded inside
    another's), in the order their first nodes come, each with its title above it."""
    indent = "\t" * (level + 2)
    nested: dict[str, list[Node]] = {}
    for n in members:
        if len(n.inner) > level:
            nested.setdefault(n.inner[level], []).append(n)
        else:
            body.append(f"{indent}{qid(n.id)}{attr_list(n.label, n.attrs)}\n")
    for inner, within in nested.items():
        inner_cid = f"{cid}__{_plain_id(inner)}"
        inner_title = own(f"{title}__{_plain_id(inner)}")
        body.extend(_frame_open(inner, inner_cid, inner_title, qid, indent))
        _nested(body, within, level + 1, inner_cid, inner_title, qid, own)
        body.append(f"{indent}\t{qid(inner_title)} -> {qid(within[0].id)}{attr_list(None, {'style': 'invis'})}\n")
        body.append(f"{indent}}}\n")


def _frame_open(region: str, cid: str, title: str, qid: Callable[[str], str], indent: str) -> list[str]:
    """The start of cluster ``cid``, which draws ``region``: a loop's frame or a dashed region, and
    its title, a node of its own above the region's first node, so that no edge is ever drawn
    across it (a cluster label would be)."""
    kind = region.partition("#")[0]
    repeat = kind.startswith(REPEAT)
    frame = {"style": "rounded", "color": BOX_BORDER, "penwidth": "1.5"} if repeat else {"style": "dashed,rounded", "color": REGION}
    title_attrs = {"shape": "plaintext", "fontcolor": BOX_BORDER if repeat else REGION, "fontsize": "10", "height": "0.2", "margin": "0"}
    shown = kind.removeprefix(REPEAT) + (" (inside a reentrant checkpoint)" if region.endswith(REENTRANT_TAG) else "")
    return [f"{indent}subgraph {cid} {{\n", f"{indent}\t{attr_list(None, frame)[2:-1]}\n",
            f"{indent}\t{qid(title)}{attr_list(graphviz.nohtml(shown), title_attrs)}\n"]


_STYLES: dict[tuple, tuple[tuple[str, ...], tuple[str, ...]]] = {}  # (attrs' items) -> their sorted keys and texts
_PLAIN = frozenset({str, type(None)})


def emit(graph: Graph, nodes: list[Node], edges: list[Edge], o: Options, name: str, notes=None, prefix: str = "") -> graphviz.Digraph:
    """The Digraph named ``name`` of the (collapsed) scene: nodes in forward order, no_grad regions
    as dashed clusters, edges styled by kind and direction, ranks and the legend.  A diagram
    too wide for a screen gets the rows :func:`~graphlens.render.rows.plan_rows` picks."""
    dot = Diagram(
        name=name,
        graph_attr={
            "rankdir": "TB",
            "fontname": FONT,
            "nodesep": "0.3",
            "ranksep": "0.35",
            "bgcolor": "white",
            "newrank": "true",
        },
        node_attr={"fontname": FONT, "fontsize": "11"},
        edge_attr={"fontname": FONT, "fontsize": "9", "color": "#444444", "arrowsize": "0.7"},
    )
    nodes = topological(nodes, edges)
    legend = legend_label(nodes, edges, graph, o, notes=bool(notes)) if o.legend else None
    rows = plan_rows(nodes, edges, legend=legend_width(legend) if legend else 0.0)
    if rows is not None:
        dot.graph_attr["nodesep"] = NODESEP
    spine = rows.spine if rows is not None else frozenset()
    qid = (lambda x: quote_id(prefix + x)) if prefix else quote_id  # node ids (prefixed to draw two graphs in one)
    body = dot.body  # lines are written directly: graphviz's per-attribute quoting is the slow part
    beside, note_tail = note_lines(notes or {}, nodes, qid, prefix)
    # Ids of the diagram's own nodes (region titles, the legend) never fall together with a
    # node of the graph (a graph read from JSON may call a tensor "legend").
    taken = {n.id for n in nodes} | {f"note{k}" for k in range(sum(map(len, (notes or {}).values())))}

    def own(base: str) -> str:
        while base in taken:
            base += "_"
        taken.add(base)
        return base
    regions: dict[str, list[Node]] = {}
    for n in nodes:
        if n.region:
            regions.setdefault(n.region, []).append(n)
    for n in nodes:
        if not n.region:
            body.append(f"\t{qid(n.id)}{attr_list(n.label, {**n.attrs, 'group': 'spine'} if n.id in spine else n.attrs)}\n")
            body.extend(beside.pop(n.id, ()))
    clusters: set[str] = set()
    for region, members in regions.items():
        cid = "cluster_" + prefix + _plain_id(region)
        while cid in clusters:  # ("a-b" and "a_b" are two regions)
            cid += "_"
        clusters.add(cid)
        title = own(cid.removeprefix("cluster_" + prefix))
        body.extend(_frame_open(region, cid, title, qid, "\t"))
        _nested(body, members, 0, cid, title, qid, own)
        for n in members:
            # Notes on the region's nodes are declared inside it: outside, they would all
            # go after the region in its rows, tied to their nodes by arcs across the others.
            body.extend("\t" + line for line in beside.pop(n.id, ()))
        above = {"style": "invis"}
        if rows is not None and region in rows.titles:
            above["minlen"] = str(max(1, rows.titles[region] - rows.level[members[0].id]))
        body.append(f"\t\t{qid(title)} -> {qid(members[0].id)}{attr_list(None, above)}\n")
        body.append("\t}\n")
    for rest in beside.values():
        body.extend(rest)
    backward = o.direction == "backward"
    for e in edges:
        attrs = dict(e.attrs)
        if e.kind == "detach":
            attrs.update(style="dashed", color=DETACH, fontcolor=DETACH, label="detach", penwidth="1.2")
            if backward:
                attrs["dir"] = "none"
        elif backward:
            attrs["dir"] = "back"
        if e.hl:
            attrs.update(color=HIGHLIGHT, penwidth="2.5")
        if rows is not None and rows.minlen(e.src, e.dst) > 1:
            attrs["minlen"] = str(rows.minlen(e.src, e.dst))
        label = attrs.pop("label", None)
        body.append(f"\t{qid(e.src)} -> {qid(e.dst)}{attr_list(label, attrs)}\n")
    if rows is not None:
        for a, b in rows.links:
            body.append(f"\t{qid(a)} -> {qid(b)}{attr_list(None, {'style': 'invis', 'weight': '0', 'minlen': str(rows.minlen(a, b))})}\n")
        for a, b in rows.aligned:
            body.append(f"\t{qid(a)} -> {qid(b)}{attr_list(None, {'style': 'invis', 'minlen': str(rows.minlen(a, b))})}\n")
    for rank in ("min", "max") if rows is None else ():  # rows graphlens chose say where everything goes
        ids = [n.id for n in nodes if n.rank == rank and not n.region]
        if ids:
            body.append("\t{rank=" + rank + "; " + "; ".join(map(qid, ids)) + "}\n")
    body.extend(note_tail)
    if legend is not None:
        legend_attrs = {"shape": "box", "style": "rounded", "color": "#cccccc", "fontsize": "9", "margin": "0.05"}
        lid = qid(own("legend"))
        body.append(f"\t{lid}{attr_list(legend, legend_attrs)}\n")
        if rows is not None and rows.legend_beside is not None:
            body.append(f"\t{{rank=same; {lid}; {qid(rows.legend_beside)}}}\n")
    return dot
