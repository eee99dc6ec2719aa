"""Drawing a Graph: Graphviz DOT for the data view and the function view, and rendering it to files."""

from __future__ import annotations

import gc
import heapq
import html
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Collection, Iterable, Mapping, NamedTuple

import graphviz

from .graph import Graph, OpNode, TensorNode

__all__ = [
    "to_dot",
    "render",
    "repr_mimebundle",
    "svg",
    "layout",
    "find_layout_program",
    "LayoutProgram",
    "LayoutProgramNotFound",
    "VIEWS",
    "DIRECTIONS",
    "FORMATS",
    "MAX_NODES",
]

#: The diagrams :func:`to_dot` can draw.
VIEWS = ("data", "function")
#: Which way the arrows point: as the forward pass ran, or as gradients flow back.
DIRECTIONS = ("forward", "backward")
#: Output formats of :func:`render`, by file suffix (``dot`` and ``gv`` need no layout program).
FORMATS = ("svg", "png", "jpg", "jpeg", "pdf", "dot", "gv")
#: Above this many drawn nodes, submodules and repeated chains of identical ops collapse.
MAX_NODES = 150
#: How many numbers a value or grad row shows by default.
MAX_ELEMENTS = 4
#: A run of at least this many identical ops collapses into one node (above ``max_nodes``).
MIN_CHAIN = 3

# -- the visual language (see DESIGN.md) ------------------------------------------------
FONT = "Helvetica"
LEAF_FILL = "#c8ebc4"  # green: leaf tensor
NONLEAF_FILL = "#ffffff"  # white: non-leaf tensor
GRAD_BORDER = "#f28c28"  # thick orange border: requires_grad
PLAIN_BORDER = "#555555"
OP_FILL = "#ececec"  # small grey rounded box: operation
OP_BORDER = "#9e9e9e"
RELEASED = "#8c8c8c"  # grey italic: a gradient that flowed and was released
GRAD_TEXT = "#1f5fa8"  # a grad that survived backward
HIGHLIGHT = "#d62728"
DETACH = "#7a7a7a"
REGION = "#9e9e9e"
BOX_FILL = "#e9eff9"  # a collapsed submodule or chain
BOX_BORDER = "#6b8cc7"
FADED = "#777777"


class LayoutProgram(NamedTuple):
    """A Graphviz layout program found on this machine: its path and which kind it is
    (``"dot"``, the Graphviz C program, or ``"graphviz-pure"``, the PyPI build)."""

    path: str
    kind: str

    @property
    def formats(self) -> tuple[str, ...]:
        """The output formats this program writes."""
        if self.kind == "dot":
            return ("svg", "png", "jpeg", "pdf")
        return ("svg", "png", "jpeg")


class LayoutProgramNotFound(RuntimeError):
    """Neither Graphviz ``dot`` nor ``graphviz-pure`` could be found."""


_INSTALL_HINT = (
    "install one of them: 'pip install graphviz-pure' (a pure-Rust Graphviz, no system "
    "packages) or 'apt-get install graphviz' / 'brew install graphviz'; the DOT text is "
    "always available as to_dot(graph).source"
)


def find_layout_program(engine_binary: str | os.PathLike | None = None) -> LayoutProgram:
    """The layout program :func:`render` uses: ``engine_binary`` when given, else Graphviz
    ``dot`` on ``PATH``, else ``graphviz-pure`` beside ``sys.executable`` (a virtualenv's
    ``bin``) or on ``PATH``.  Raises :class:`LayoutProgramNotFound` saying how to get one.

    >>> find_layout_program().kind in ("dot", "graphviz-pure")
    True
    """
    if engine_binary is not None:
        given = os.fspath(engine_binary)
        path = shutil.which(given)
        if path is None:
            raise LayoutProgramNotFound(
                f"engine_binary {given!r} is not an executable program: pass the path of 'dot' "
                f"or 'graphviz-pure', or leave it out to search for one"
            )
        kind = "graphviz-pure" if "graphviz-pure" in Path(path).name else "dot"
        return LayoutProgram(path, kind)
    dot = shutil.which("dot")
    if dot is not None:
        return LayoutProgram(dot, "dot")
    beside = Path(sys.executable).parent / ("graphviz-pure.exe" if os.name == "nt" else "graphviz-pure")
    if beside.is_file() and os.access(beside, os.X_OK):
        return LayoutProgram(str(beside), "graphviz-pure")
    pure = shutil.which("graphviz-pure")
    if pure is not None:
        return LayoutProgram(pure, "graphviz-pure")
    raise LayoutProgramNotFound(f"no Graphviz layout program found (neither 'dot' nor 'graphviz-pure'): {_INSTALL_HINT}")


def layout(source: str, format: str = "svg", *, engine_binary: str | os.PathLike | None = None) -> bytes:
    """Lay out DOT ``source`` with :func:`find_layout_program` and return the ``format``
    output (``svg``, ``png``, ``jpeg``; ``pdf`` needs Graphviz ``dot``)."""
    fmt = _check_format(format)
    program = find_layout_program(engine_binary)
    if fmt == "jpg":
        fmt = "jpeg"
    if fmt not in program.formats:
        raise ValueError(
            f"format {format!r} needs Graphviz 'dot': {program.kind} at {program.path} writes only "
            f"{list(program.formats)}; install Graphviz ('apt-get install graphviz' or 'brew install "
            f"graphviz') or render to .svg/.png instead"
        )
    proc = subprocess.run(
        [program.path, f"-T{fmt}"], input=source.encode("utf-8"), capture_output=True, check=False
    )
    if proc.returncode != 0 or not proc.stdout:
        err = proc.stderr.decode("utf-8", "replace").strip()
        raise RuntimeError(f"{program.kind} ({program.path}) failed to lay out the graph (exit {proc.returncode}): {err}")
    return proc.stdout


def _check_format(format: str) -> str:
    if not isinstance(format, str) or format.lower().lstrip(".") not in FORMATS:
        raise ValueError(f"unknown format: {format!r} (must be one of {list(FORMATS)})")
    return format.lower().lstrip(".")


# -- options -----------------------------------------------------------------------------
def _check_graph(graph: Any, func: str) -> Graph:
    if not isinstance(graph, Graph):
        raise TypeError(
            f"{func}() needs a graphlens.Graph, not {type(graph).__name__}: make one with "
            f"graphlens.snapshot(loss) or 'with graphlens.trace() as tr: ...' then tr.graph()"
        )
    return graph


def _check_choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ValueError(f"unknown {name}: {value!r} (must be one of {list(choices)})")
    return value


def _check_flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, not {value!r}")
    return value


def _check_count(name: str, value: Any, *, allow_none: bool, minimum: int) -> int | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        extra = " or None" if allow_none else ""
        raise ValueError(f"{name} must be an int >= {minimum}{extra}, not {value!r}")
    return value


def _check_highlight(graph: Graph, highlight: Any) -> tuple[set[str], set[tuple[str, str]]]:
    if highlight is None:
        return set(), set()
    if isinstance(highlight, (str, TensorNode, OpNode)):
        highlight = [highlight]
    nodes: set[str] = set()
    edges: set[tuple[str, str]] = set()
    try:
        items = list(highlight)
    except TypeError:
        raise TypeError(
            f"highlight must be a set of node ids (and (src, dst) pairs for edges), not {type(highlight).__name__}"
        ) from None
    for item in items:
        if isinstance(item, (TensorNode, OpNode)):
            item = item.id
        if isinstance(item, str):
            ids = (item,)
        elif isinstance(item, tuple) and len(item) == 2 and all(isinstance(i, str) for i in item):
            ids = item
        else:
            raise TypeError(f"highlight items must be node ids like 't3' or (src, dst) id pairs, not {item!r}")
        for i in ids:
            if i not in graph:
                raise ValueError(f"highlight names {i!r}, which is not a node of this graph (ids look like 't0', 'op3')")
        if isinstance(item, str):
            nodes.add(item)
        else:
            edges.add(item)
    return nodes, edges


# -- text --------------------------------------------------------------------------------
def _esc(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _shape_text(t: TensorNode) -> str:
    if not t.shape:
        text = "scalar"
    else:
        text = "shape [" + ", ".join(str(s) for s in t.shape) + "]"
    if t.dtype != "float32":
        text += f" {t.dtype}"
    if t.device != "cpu":
        text += f" {t.device}"
    return text


def _shorten(summary: str | None, max_elements: int | None) -> str | None:
    """Re-truncate a value summary (``"[1, 2, 3, … (9 elements)]"``) to ``max_elements``."""
    if summary is None or max_elements is None:
        return summary
    if not (summary.startswith("[") and summary.endswith("]")):
        return summary
    inner = summary[1:-1]
    if "…" in inner:
        head, tail = inner.split("…", 1)
        nums = [n for n in head.split(", ") if n.strip()]
        total_text = tail.strip().removeprefix("(").removesuffix(")").split(" ")[0]
        try:
            total = int(total_text)
        except ValueError:
            return summary
    else:
        nums = inner.split(", ") if inner else []
        total = len(nums)
    if len(nums) <= max_elements:
        return summary
    body = ", ".join(nums[:max_elements])
    return "[" + (body + ", " if body else "") + f"… ({total} elements)]"


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def _last_flowed(t: TensorNode) -> str | None:
    for value in reversed(t.flowed):
        if value not in ("-", "None"):
            return value
    return None


# -- the scene: view-independent nodes and edges, before collapsing ----------------------
class _Node:
    __slots__ = ("id", "kind", "label", "attrs", "region", "scope", "sig", "rank", "members", "hl", "rg", "param", "named")

    def __init__(self, id: str, kind: str, label: str, attrs: dict, *, region=None, scope=None, sig=None, hl=False, rg=False, param=False, named=False):
        self.id = id
        self.kind = kind  # tensor | op | box | chain
        self.label = label
        self.attrs = attrs
        self.region = region
        self.scope = scope
        self.sig = sig  # chain signature: op label, "" for a tensor a chain may pass through, None otherwise
        self.rank: str | None = None
        self.members = (id,)
        self.hl = hl
        self.rg = rg
        self.param = param
        self.named = named


class _Edge:
    __slots__ = ("src", "dst", "kind", "attrs", "orig", "hl")

    def __init__(self, src: str, dst: str, kind: str, attrs: dict | None = None, hl: bool = False):
        self.src = src
        self.dst = dst
        self.kind = kind  # flow | detach | variable
        self.attrs = attrs or {}
        self.orig = (src, dst)
        self.hl = hl


class _Options(NamedTuple):
    view: str
    direction: str
    legend: bool
    values: bool
    grads: bool
    saved: bool
    max_elements: int | None
    max_nodes: int
    depth: int | None
    hl_nodes: frozenset
    hl_edges: frozenset


def _tensor_label(t: TensorNode, o: _Options, *, hl: bool) -> str:
    name = t.name if t.name is not None else t.id
    rows = []
    if t.name is not None:
        rows.append(f'<TR><TD><B>{_esc(name)}</B></TD></TR>')
    else:
        rows.append(f'<TR><TD><FONT COLOR="{FADED}">{_esc(name)}</FONT></TD></TR>')
    rows.append(f'<TR><TD><FONT POINT-SIZE="9" COLOR="#444444">{_esc(_shape_text(t))}</FONT></TD></TR>')
    if o.values and t.value is not None:
        rows.append(f'<TR><TD><FONT POINT-SIZE="9">{_esc(_shorten(t.value, o.max_elements))}</FONT></TD></TR>')
    if o.grads:
        if t.grad is not None:
            text = _shorten(t.grad, o.max_elements)
            rows.append(f'<TR><TD><FONT POINT-SIZE="9" COLOR="{GRAD_TEXT}"><B>grad</B> {_esc(text)}</FONT></TD></TR>')
        else:
            flowed = _last_flowed(t)
            if flowed is not None:
                text = _shorten(flowed, o.max_elements)
                rows.append(
                    f'<TR><TD><FONT POINT-SIZE="9" COLOR="{RELEASED}"><I>grad {_esc(text)} (released)</I></FONT></TD></TR>'
                )
    inner = "".join(rows)
    if hl and t.requires_grad:  # keep the requires_grad mark inside the red highlight border
        return f'<<TABLE BORDER="2" COLOR="{GRAD_BORDER}" CELLBORDER="0" CELLSPACING="0" CELLPADDING="1">{inner}</TABLE>>'
    return f'<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="1">{inner}</TABLE>>'


def _tensor_node(t: TensorNode, o: _Options, node_id: str | None = None, *, chainable: bool = False) -> _Node:
    hl = t.id in o.hl_nodes
    attrs = {
        "shape": "box",
        "style": "rounded,filled",
        "fillcolor": LEAF_FILL if t.is_leaf else NONLEAF_FILL,
        "color": GRAD_BORDER if t.requires_grad else PLAIN_BORDER,
        "penwidth": "3" if t.requires_grad else "1",
    }
    if hl:
        attrs["color"] = HIGHLIGHT
        attrs["penwidth"] = "3.5"
    label = _tensor_label(t, o, hl=hl)
    tooltip = f"{t.label}: {'leaf' if t.is_leaf else 'non-leaf'}, requires_grad={t.requires_grad}"
    attrs["tooltip"] = graphviz.nohtml(tooltip)
    sig = "" if chainable and t.name is None and not t.is_leaf and t.grad is None and not hl else None
    return _Node(node_id or t.id, "tensor", label, attrs, region=t.region, scope=t.scope, sig=sig, hl=hl,
                 rg=t.requires_grad, param=t.is_parameter, named=t.name is not None)


def _op_text(op: OpNode, view: str) -> str:
    if view == "function":
        return op.name or op.forward or op.id
    if op.forward and op.name:
        return f"{op.forward} / {op.name}"
    return op.forward or op.name or op.id


def _op_node(op: OpNode, o: _Options, cache: dict | None = None) -> _Node:
    hl = op.id in o.hl_nodes
    text = _op_text(op, o.view)
    key = (text, hl)
    if cache is not None and not (o.saved and op.saved):
        hit = cache.get(key)
        if hit is None:
            hit = cache[key] = _op_node(op, o)
        return _Node(op.id, "op", hit.label, hit.attrs, region=op.region, scope=op.scope, sig=text, hl=hl)
    rows = [f"<TR><TD>{_esc(text)}</TD></TR>"]
    if o.saved and op.saved:
        for attr, summary in op.saved:
            rows.append(f'<TR><TD><FONT POINT-SIZE="8" COLOR="#555555">saved {_esc(attr)}: {_esc(summary)}</FONT></TD></TR>')
    if len(rows) == 1:
        label = f"<{_esc(text)}>"
    else:
        label = '<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="0">' + "".join(rows) + "</TABLE>>"
    attrs = {
        "shape": "box",
        "style": "rounded,filled",
        "fillcolor": OP_FILL,
        "color": HIGHLIGHT if hl else OP_BORDER,
        "penwidth": "3" if hl else "1",
        "fontsize": "10",
        "height": "0.25",
        "margin": "0.08,0.03",
    }
    return _Node(op.id, "op", label, attrs, region=op.region, scope=op.scope, sig=text, hl=hl)


def _data_scene(graph: Graph, o: _Options) -> tuple[list[_Node], list[_Edge]]:
    ops = graph.ops
    op_by_id = {op.id: op for op in ops}
    hidden = {op.id: op.variable for op in ops if op.is_accumulate_grad}  # AccumulateGrad -> its leaf (or None)
    traced_calls: set[str] = set()
    if graph.source == "trace":
        # A trace recorded every call with its inputs: the backward nodes a call made
        # inside itself (the TBackward0 of linear) are the engine's business, not data.
        produces = {e.src for e in graph.edges if e.kind == "output"}
        traced_calls = {op.id for op in ops if op.forward is not None}
        for op in ops:
            if op.forward is None and op.id not in produces and op.id not in hidden:
                hidden[op.id] = None
    tensors = {t.id: t for t in graph.tensors}

    nodes: list[_Node] = [_tensor_node(t, o, chainable=True) for t in graph.tensors]
    cache: dict = {}
    nodes.extend(_op_node(op, o, cache) for op in ops if op.id not in hidden)
    edges: list[_Edge] = []
    inputs_of: dict[str, set] = {}
    for e in graph.edges:
        if e.kind == "input":
            if e.dst in hidden:
                continue
            edges.append(_Edge(e.src, e.dst, "flow"))
            t = tensors.get(e.src)
            if t is not None:
                key = ("acc", t.id) if t.op is None else (t.op, t.output_nr)
                inputs_of.setdefault(e.dst, set()).add(key)
        elif e.kind == "output":
            if e.src in hidden:
                continue
            edges.append(_Edge(e.src, e.dst, "flow"))
        elif e.kind == "detach":
            edges.append(_Edge(e.src, e.dst, "detach"))
    # next_functions no known tensor stands for (a snapshot's unnamed intermediates):
    # connect the ops directly, in forward direction.
    seen_pairs = {(e.src, e.dst) for e in edges}
    for e in graph.edges:
        if e.kind != "next" or e.src in hidden or e.src in traced_calls:
            continue
        target = op_by_id.get(e.dst)
        if target is None:
            continue
        if target.is_accumulate_grad:
            key = ("acc", target.variable)
            src = target.variable
        else:
            key = (e.dst, e.output_nr)
            src = e.dst
        if src is None or key in inputs_of.get(e.src, ()):
            continue
        if (src, e.src) not in seen_pairs:
            seen_pairs.add((src, e.src))
            edges.append(_Edge(src, e.src, "flow"))
    _mark_edges(edges, o, alias=hidden)
    _set_ranks(graph, nodes, edges)
    return nodes, edges


def _function_scene(graph: Graph, o: _Options) -> tuple[list[_Node], list[_Edge]]:
    tensors = {t.id: t for t in graph.tensors}
    nodes: list[_Node] = []
    edges: list[_Edge] = []
    drawn = {op.id for op in graph.ops if op.name is not None}
    var_nodes: list[_Node] = []
    cache: dict = {}
    for op in graph.ops:
        if op.id not in drawn:
            continue
        nodes.append(_op_node(op, o, cache))
        if op.is_accumulate_grad and op.variable in tensors:
            var = _tensor_node(tensors[op.variable], o, node_id=op.variable)
            var_nodes.append(var)
            edges.append(_Edge(op.variable, op.id, "variable"))
    root_nodes = []
    for r in graph.roots:
        if r.op in drawn:
            root_nodes.append(_tensor_node(r, o))
    for e in graph.edges:
        if e.kind == "next" and e.src in drawn and e.dst in drawn:
            edges.append(_Edge(e.dst, e.src, "flow"))
    for r in root_nodes:
        edges.append(_Edge(tensors[r.id].op, r.id, "flow"))
    # roots are drawn after their ops; variables before everything (they sit on top).
    nodes = var_nodes + nodes + root_nodes
    _mark_edges(edges, o, alias={})
    _set_ranks(graph, nodes, edges)
    return nodes, edges


def _mark_edges(edges: list[_Edge], o: _Options, *, alias: Mapping[str, str | None]) -> None:
    if not o.hl_edges:
        return
    wanted = set()
    for src, dst in o.hl_edges:
        wanted.add((alias.get(src) or src, alias.get(dst) or dst))
        wanted.add((alias.get(dst) or dst, alias.get(src) or src))  # pairs may be given in backward order
    for e in edges:
        if e.orig in wanted:
            e.hl = True


def _set_ranks(graph: Graph, nodes: list[_Node], edges: list[_Edge]) -> None:
    """Roots at the bottom; leaves requiring grad that feed two or more roots at the top."""
    by_id = {n.id: n for n in nodes}
    roots = [r.id for r in graph.roots if r.id in by_id and by_id[r.id].region is None]
    if not roots:
        return
    for r in roots:
        by_id[r].rank = "max"
    if len(roots) < 2:
        return
    preds: dict[str, list[str]] = {}
    for e in edges:
        if e.kind != "detach":
            preds.setdefault(e.dst, []).append(e.src)
    reach: dict[str, int] = {}
    for r in roots:
        seen = {r}
        stack = [r]
        while stack:
            n = stack.pop()
            for p in preds.get(n, ()):
                if p not in seen:
                    seen.add(p)
                    stack.append(p)
        for n in seen:
            reach[n] = reach.get(n, 0) + 1
    for t in graph.tensors:
        n = by_id.get(t.id)
        if n is not None and t.is_leaf and t.requires_grad and reach.get(t.id, 0) >= 2 and n.region is None:
            n.rank = "min"


# -- collapsing: submodules (scope) and chains of identical ops ---------------------------
def _common_scope(scopes: Iterable[str]) -> str | None:
    parts = None
    for scope in scopes:
        bits = scope.split(".")
        if parts is None:
            parts = bits
        else:
            n = 0
            while n < min(len(parts), len(bits)) and parts[n] == bits[n]:
                n += 1
            parts = parts[:n]
    return ".".join(parts) if parts else None


def _with_inferred_scopes(graph: Graph) -> Graph:
    """A snapshot knows no submodules, but its parameters carry dotted names
    (``layers.0.linear1.weight``).  Give each parameter its module's name as scope, each
    op that consumes a parameter (directly or through a one-input op such as
    ``TBackward0``) that scope, and each connected run of other ops lying between two or
    more scoped ops the common prefix of their scopes.  Graphs that already have
    scopes (traced with ``module=``) are returned as they are."""
    if any(op.scope for op in graph.ops) or any(t.scope for t in graph.tensors):
        return graph
    scope: dict[str, str] = {}
    for t in graph.tensors:
        if t.is_leaf and t.requires_grad and t.name and "." in t.name and (t.is_parameter or t.op is None):
            scope[t.id] = t.name.rsplit(".", 1)[0]
    if not scope:
        return graph
    ops = {op.id: op for op in graph.ops}
    for op in graph.ops:
        if op.is_accumulate_grad and op.variable in scope:
            scope[op.id] = scope[op.variable]
    children: dict[str, list[str]] = {}
    parents: dict[str, list[str]] = {}
    for e in graph.edges:
        if e.kind == "next":
            children.setdefault(e.src, []).append(e.dst)
            parents.setdefault(e.dst, []).append(e.src)
    # Ops fed by a parameter, directly or through a chain of one-input ops.
    for op in graph.ops:
        if op.id in scope:
            continue
        found = []
        for child in children.get(op.id, ()):
            hop = child
            while hop not in scope and len(children.get(hop, ())) == 1 and not ops[hop].is_accumulate_grad:
                hop = children[hop][0]
            if hop in scope and ops[hop].is_accumulate_grad:
                found.append(scope[hop])
        common = _common_scope(found) if found else None
        if common:
            scope[op.id] = common
    # The rest, a connected run of unscoped ops at a time: the common prefix of the scoped
    # ops around it, when it lies between two or more of them and holds no root.
    seen: set[str] = set()
    for op in graph.ops:
        if op.id in scope or op.id in seen or op.is_accumulate_grad:
            continue
        run, border, stack, has_root = [], set(), [op.id], False
        seen.add(op.id)
        while stack:
            node = stack.pop()
            run.append(node)
            has_root = has_root or not parents.get(node)
            for n in children.get(node, []) + parents.get(node, []):
                if ops[n].is_accumulate_grad:
                    continue
                if n in scope:
                    border.add(n)
                elif n not in seen:
                    seen.add(n)
                    stack.append(n)
        if has_root or len(border) < 2:
            continue
        common = _common_scope(scope[n] for n in border)
        if common:
            for node in run:
                scope[node] = common
    for t in graph.tensors:
        if t.id not in scope and t.op in scope and not t.name:
            scope[t.id] = scope[t.op]
    return Graph(
        (t._replace(scope=scope.get(t.id)) for t in graph.tensors),
        (op._replace(scope=scope.get(op.id)) for op in graph.ops),
        graph.edges,
        (t.id for t in graph.roots),
        source=graph.source,
    )



def _scope_box(scope: str | None, depth: int) -> str | None:
    if not scope:
        return None
    parts = scope.split(".")
    if len(parts) < depth:
        return None
    return ".".join(parts[:depth])


_REGION_SEP = "\x00"


def _box_map(nodes: list[_Node], edges: list[_Edge], depth: int) -> dict[str, str]:
    """node id -> submodule box name, for nodes collapsed at ``depth``."""
    box: dict[str, str] = {}
    for n in nodes:
        if n.kind == "tensor" and n.named and not n.param:
            continue  # the program's own variables stay visible between the boxes
        b = _scope_box(n.scope, depth)
        if b is not None:
            # A submodule run inside no_grad is a different box from its training run.
            box[n.id] = b if n.region is None else f"{b}{_REGION_SEP}{n.region}"
    # A parameter without a scope folds into the one box that consumes it.
    consumers: dict[str, set] = {}
    for e in edges:
        if e.kind != "detach":
            consumers.setdefault(e.src, set()).add(box.get(e.dst))
    for n in nodes:
        if n.id in box or n.kind != "tensor" or not n.param:
            continue
        targets = consumers.get(n.id)
        if targets and len(targets) == 1:
            (b,) = targets
            if b is not None:
                box[n.id] = b
    return box


def _count_after(nodes: list[_Node], box: Mapping[str, str]) -> int:
    return sum(1 for n in nodes if n.id not in box) + len(set(box.values()))


def _collapse_scopes(nodes: list[_Node], edges: list[_Edge], box: Mapping[str, str]) -> tuple[list[_Node], list[_Edge]]:
    if not box:
        return nodes, edges
    members: dict[str, list[_Node]] = {}
    for n in nodes:
        b = box.get(n.id)
        if b is not None:
            members.setdefault(b, []).append(n)
    box_ids = {b: "scope_" + "".join(c if c.isalnum() else "_" for c in b) for b in members}
    out: list[_Node] = []
    placed: set[str] = set()
    for n in nodes:
        b = box.get(n.id)
        if b is None:
            out.append(n)
            continue
        if b in placed:
            continue
        placed.add(b)
        group = members[b]
        n_ops = sum(1 for m in group if m.kind in ("op", "chain"))
        n_tensors = sum(1 for m in group if m.kind == "tensor")
        detail = _plural(n_ops, "op") + (", " + _plural(n_tensors, "tensor") if n_tensors else "")
        hl = any(m.hl for m in group)
        rg = any(m.rg for m in group)
        title, _, region = b.partition(_REGION_SEP)
        label = (
            f'<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="1"><TR><TD><B>{_esc(title)}</B></TD></TR>'
            f'<TR><TD><FONT POINT-SIZE="9" COLOR="#444444">{_esc(detail)}</FONT></TD></TR></TABLE>>'
        )
        attrs = {
            "shape": "box",
            "style": "filled",
            "fillcolor": BOX_FILL,
            "color": HIGHLIGHT if hl else (GRAD_BORDER if rg else BOX_BORDER),
            "penwidth": "2.5" if hl or rg else "1.5",
        }
        node = _Node(box_ids[b], "box", label, attrs, region=region or None, hl=hl)
        node.members = tuple(m.id for m in group)
        node.rank = next((m.rank for m in group if m.rank), None)
        out.append(node)
    return out, _remap_edges(edges, {i: box_ids[b] for i, b in box.items()})


def _remap_edges(edges: list[_Edge], alias: Mapping[str, str]) -> list[_Edge]:
    out: list[_Edge] = []
    index: dict[tuple[str, str, str], _Edge] = {}
    for e in edges:
        src = alias.get(e.src, e.src)
        dst = alias.get(e.dst, e.dst)
        if src == dst:
            continue
        key = (src, dst, e.kind)
        prev = index.get(key)
        if prev is not None:
            prev.hl = prev.hl or e.hl
            continue
        ne = _Edge(src, dst, e.kind, dict(e.attrs), e.hl)
        ne.orig = e.orig
        index[key] = ne
        out.append(ne)
    return out


def _periodic_segment(sigs: list[str], max_period: int = 4) -> tuple[int, int, int]:
    """``(start, period, repeats)`` of the longest stretch of ``sigs`` that repeats one
    pattern of up to ``max_period`` ops (the shortest pattern on ties)."""
    best = (0, 1, 0)
    for p in range(1, max_period + 1):
        start = 0
        for k in range(p, len(sigs) + 1):
            if k == len(sigs) or sigs[k] != sigs[k - p]:
                repeats = (k - start) // p
                if repeats * p > best[1] * best[2]:
                    best = (start, p, repeats)
                start = k - p + 1 if k < len(sigs) else k
    return best


def _collapse_chains(nodes: list[_Node], edges: list[_Edge]) -> tuple[list[_Node], list[_Edge]]:
    """Replace each long stretch of ops that repeats one pattern of up to four ops (a run
    of one op, or the steps of a loop: ``mul, add, mul, add, ...``), together with the
    unnamed tensors between them, every member with one way in and one way out, by a
    single node, once the pattern repeats at least ``MIN_CHAIN`` times."""
    preds: dict[str, list[str]] = {}
    succs: dict[str, list[str]] = {}
    for e in edges:
        succs.setdefault(e.src, []).append(e.dst)
        preds.setdefault(e.dst, []).append(e.src)
    by_id = {n.id: n for n in nodes}

    def simple(n: _Node) -> bool:
        return (
            n.sig is not None and n.region is None and n.rank is None and not n.hl
            and len(preds.get(n.id, ())) == 1 and len(succs.get(n.id, ())) == 1
        )

    alias: dict[str, str] = {}
    new_nodes: dict[str, _Node] = {}
    visited: set[str] = set()
    for n in nodes:
        if n.id in visited or n.kind != "op" or not simple(n):
            continue
        # The maximal linear run of simple nodes through n.
        back, cur = [], n
        while True:
            p = by_id.get(preds[cur.id][0])
            if p is None or p.id in visited or not simple(p) or p is n:
                break
            back.append(p)
            cur = p
        back.reverse()
        run, cur = back + [n], n
        while True:
            q = by_id.get(succs[cur.id][0])
            if q is None or q.id in visited or not simple(q) or q is run[0]:
                break
            run.append(q)
            cur = q
        visited.update(m.id for m in run)
        op_pos = [k for k, m in enumerate(run) if m.kind == "op"]
        sigs = [run[k].sig for k in op_pos]
        start, period, repeats = _periodic_segment(sigs)
        if repeats < MIN_CHAIN:
            continue
        first, last = op_pos[start], op_pos[start + period * repeats - 1]
        members = run[first:last + 1]
        n_ops = period * repeats
        cid = "chain_" + members[0].id
        if period == 1:
            head = f"{_esc(sigs[start])} <B>×{n_ops:,}</B>"
            detail = f"chain of {n_ops:,} identical ops"
        else:
            head = f"({_esc(', '.join(sigs[start:start + period]))}) <B>×{repeats:,}</B>"
            detail = f"{n_ops:,} ops repeating a pattern of {period}"
        label = (
            f'<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="0"><TR><TD>{head}</TD></TR>'
            f'<TR><TD><FONT POINT-SIZE="8" COLOR="#555555">{detail}</FONT></TD></TR></TABLE>>'
        )
        attrs = dict(members[0].attrs)
        attrs.update({"style": "rounded,filled", "fillcolor": BOX_FILL, "color": BOX_BORDER, "peripheries": "2"})
        attrs.pop("tooltip", None)
        node = _Node(cid, "chain", label, attrs, scope=members[0].scope)
        node.members = tuple(m.id for m in members)
        new_nodes[members[0].id] = node
        for m in members:
            alias[m.id] = cid
    if not alias:
        return nodes, edges
    out = []
    for n in nodes:
        if n.id in new_nodes:
            out.append(new_nodes[n.id])
        elif n.id not in alias:
            out.append(n)
    return out, _remap_edges(edges, alias)


# -- legend --------------------------------------------------------------------------------
def _legend(nodes: list[_Node], edges: list[_Edge], graph: Graph, o: _Options) -> str | None:
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
    if "op" in kinds:
        what = " (forward / backward name)" if o.view == "data" else " (backward node)"
        rows.append(swatch(OP_FILL, OP_BORDER, 1, "operation" + what))
    if any("<B>grad</B>" in n.label for n in drawn):
        rows.append(f'<TR><TD><FONT COLOR="{GRAD_TEXT}"><B>grad</B></FONT></TD><TD ALIGN="LEFT">kept after backward</TD></TR>')
    if any("(released)</I>" in n.label for n in drawn):
        rows.append(f'<TR><TD><FONT COLOR="{RELEASED}"><I>grad</I></FONT></TD><TD ALIGN="LEFT">flowed, then released</TD></TR>')
    if any(e.kind == "detach" for e in edges):
        rows.append(f'<TR><TD><FONT COLOR="{DETACH}">- - -&gt;</FONT></TD><TD ALIGN="LEFT">detach(): no gradient path</TD></TR>')
    for kind in sorted({n.region.partition("#")[0] for n in nodes if n.region}):
        rows.append(
            f'<TR><TD STYLE="dashed" COLOR="{REGION}" BORDER="1" WIDTH="22" HEIGHT="12" FIXEDSIZE="TRUE"></TD>'
            f'<TD ALIGN="LEFT">made under {_esc(kind)}</TD></TR>'
        )
    if kinds & {"box", "chain"}:
        rows.append(swatch(BOX_FILL, BOX_BORDER, 1, "collapsed submodule / chain"))
    if any(n.hl for n in nodes) or any(e.hl for e in edges):
        rows.append(swatch("#ffffff", HIGHLIGHT, 3, "highlighted"))
    if o.direction == "backward":
        rows.append('<TR><TD>&lt;--</TD><TD ALIGN="LEFT">arrows: gradient flow</TD></TR>')
    if not rows:
        return None
    return (
        '<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="2" CELLPADDING="1">'
        f'<TR><TD COLSPAN="2" ALIGN="LEFT"><FONT COLOR="#555555"><B>legend</B></FONT></TD></TR>' + "".join(rows) + "</TABLE>>"
    )


# -- emitting DOT ----------------------------------------------------------------------------
def _topological(nodes: list[_Node], edges: list[_Edge]) -> list[_Node]:
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


_QUOTED: dict[str, str] = {}


def _quote(value: str) -> str:
    """graphviz's own quoting of a DOT id or value, remembered (values repeat a lot)."""
    quoted = _QUOTED.get(value)
    if quoted is None:
        quoted = graphviz.quoting.quote(value)
        if len(_QUOTED) < 8192:
            _QUOTED[value] = quoted
    return quoted


def _attr_list(label: str | None, attrs: Mapping[str, Any]) -> str:
    """`` [label=... key=value ...]`` exactly as graphviz writes it: the label first,
    then the other attributes sorted by name; HTML-like labels as they are."""
    parts = []
    if label is not None:
        parts.append("label=" + (label if label[:1] == "<" and label[-1:] == ">" else _quote(label)))
    for key in sorted(attrs):
        value = attrs[key]
        if value is not None:
            parts.append(f"{_quote(key)}={_quote(value)}")
    return " [" + " ".join(parts) + "]" if parts else ""


def _emit(graph: Graph, nodes: list[_Node], edges: list[_Edge], o: _Options, name: str) -> graphviz.Digraph:
    dot = graphviz.Digraph(
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
    nodes = _topological(nodes, edges)
    body = dot.body  # lines are written directly: graphviz's per-attribute quoting is the slow part
    regions: dict[str, list[_Node]] = {}
    for n in nodes:
        if n.region:
            regions.setdefault(n.region, []).append(n)
    for n in nodes:
        if not n.region:
            body.append(f"\t{_quote(n.id)}{_attr_list(n.label, n.attrs)}\n")
    for region, members in regions.items():
        kind = region.partition("#")[0]
        cid = "cluster_" + "".join(c if c.isalnum() else "_" for c in region)
        body.append(f"\tsubgraph {cid} {{\n")
        body.append(f"\t\t{_attr_list(None, {'style': 'dashed,rounded', 'color': REGION})[2:-1]}\n")
        # The title is a node of its own above the region's first node, so that no
        # edge is ever drawn across it (a cluster label would be).
        title = cid.removeprefix("cluster_")
        title_attrs = {"shape": "plaintext", "fontcolor": REGION, "fontsize": "10", "height": "0.2", "margin": "0"}
        body.append(f"\t\t{_quote(title)}{_attr_list(kind, title_attrs)}\n")
        for n in members:
            body.append(f"\t\t{_quote(n.id)}{_attr_list(n.label, n.attrs)}\n")
        body.append(f"\t\t{_quote(title)} -> {_quote(members[0].id)}{_attr_list(None, {'style': 'invis'})}\n")
        body.append("\t}\n")
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
        label = attrs.pop("label", None)
        body.append(f"\t{_quote(e.src)} -> {_quote(e.dst)}{_attr_list(label, attrs)}\n")
    for rank in ("min", "max"):
        ids = [n.id for n in nodes if n.rank == rank and not n.region]
        if ids:
            body.append("\t{rank=" + rank + "; " + "; ".join(ids) + "}\n")
    if o.legend:
        legend = _legend(nodes, edges, graph, o)
        if legend is not None:
            legend_attrs = {"shape": "box", "style": "rounded", "color": "#cccccc", "fontsize": "9", "margin": "0.05"}
            body.append(f"\tlegend{_attr_list(legend, legend_attrs)}\n")
    return dot


def to_dot(
    graph: Graph,
    *,
    view: str = "data",
    direction: str = "forward",
    legend: bool = True,
    values: bool = True,
    grads: bool = True,
    saved: bool = False,
    highlight: Iterable[Any] | None = None,
    max_elements: int | None = MAX_ELEMENTS,
    max_nodes: int = MAX_NODES,
    depth: int | None = None,
    name: str = "graphlens",
) -> graphviz.Digraph:
    """Draw ``graph`` as a :class:`graphviz.Digraph` (nothing is rendered or opened).

    ``view="data"`` draws tensors as the main nodes (leaf: green, non-leaf: white,
    requires grad: thick orange border, kept ``grad`` and released grads as rows) with
    small grey operation boxes between them, ``detach()`` as a dashed edge and
    ``no_grad`` regions as a dashed box.  ``view="function"`` draws the backward nodes
    PyTorch links by ``next_functions`` (as torchviz does), leaves above their
    ``AccumulateGrad``.  ``direction="backward"`` points arrows the way gradients flow.
    ``highlight`` is a collection of node ids (``"t3"``) and ``(src, dst)`` id pairs.
    ``values``/``grads`` show value and grad rows (``max_elements`` numbers each),
    ``saved=True`` lists each op's saved tensors.  Above ``max_nodes`` drawn nodes,
    submodules (``scope``, traced with ``module=``) collapse into one box each, at
    ``depth`` levels below the model (``depth=1``: its direct children; ``None``: the
    deepest level that fits), and runs of identical ops collapse into one node.
    The DOT text (``.source``) is deterministic: the same program gives the same bytes.

    >>> import torch, graphlens as gl
    >>> from graphlens.render import to_dot
    >>> w = torch.tensor([1.0, 2.0], requires_grad=True)
    >>> loss = (w * 3).sum()
    >>> dot = to_dot(gl.snapshot(loss), legend=False)
    >>> [line.strip() for line in dot.source.splitlines() if "->" in line]
    ['op0 -> t0', 't1 -> op1', 'op1 -> op0']
    >>> 'fillcolor="#c8ebc4" penwidth=3' in dot.source  # w: a leaf (green) requiring grad (thick)
    True
    """
    graph = _check_graph(graph, "to_dot")
    gc_was_enabled = gc.isenabled()
    gc.disable()  # drawing makes many small objects; torch alone holds ~200k tracked ones
    try:
        return _to_dot(graph, view, direction, legend, values, grads, saved, highlight, max_elements, max_nodes, depth, name)
    finally:
        if gc_was_enabled:
            gc.enable()


def _to_dot(graph, view, direction, legend, values, grads, saved, highlight, max_elements, max_nodes, depth, name):
    hl_nodes, hl_edges = _check_highlight(graph, highlight)
    o = _Options(
        view=_check_choice("view", view, VIEWS),
        direction=_check_choice("direction", direction, DIRECTIONS),
        legend=_check_flag("legend", legend),
        values=_check_flag("values", values),
        grads=_check_flag("grads", grads),
        saved=_check_flag("saved", saved),
        max_elements=_check_count("max_elements", max_elements, allow_none=True, minimum=0),
        max_nodes=_check_count("max_nodes", max_nodes, allow_none=False, minimum=1),  # type: ignore[arg-type]
        depth=_check_count("depth", depth, allow_none=True, minimum=1),
        hl_nodes=frozenset(hl_nodes),
        hl_edges=frozenset(hl_edges),
    )
    graph = _with_inferred_scopes(graph)
    if o.view == "data":
        nodes, edges = _data_scene(graph, o)
    else:
        nodes, edges = _function_scene(graph, o)
    nodes, edges = _collapse(nodes, edges, o)
    return _emit(graph, nodes, edges, o, name)


def _collapse(nodes: list[_Node], edges: list[_Edge], o: _Options) -> tuple[list[_Node], list[_Edge]]:
    depth = o.depth
    if depth is None and len(nodes) > o.max_nodes:
        levels = max((len(n.scope.split(".")) for n in nodes if n.scope), default=0)
        fits = None
        for k in range(1, levels + 1):
            if _count_after(nodes, _box_map(nodes, edges, k)) <= o.max_nodes:
                fits = k
            else:
                break
        depth = fits if fits is not None else (1 if levels else None)
    if depth is not None:
        nodes, edges = _collapse_scopes(nodes, edges, _box_map(nodes, edges, depth))
    if len(nodes) > o.max_nodes:
        nodes, edges = _collapse_chains(nodes, edges)
    return nodes, edges


# -- files and notebooks ---------------------------------------------------------------------
def render(
    graph: Graph,
    path: str | os.PathLike,
    *,
    format: str | None = None,
    engine_binary: str | os.PathLike | None = None,
    **to_dot_options: Any,
) -> Path:
    """Write ``graph`` to ``path`` as svg, png, jpeg or pdf (from the suffix, or
    ``format``), laid out by :func:`find_layout_program`; ``.dot``/``.gv`` write the DOT
    text.  ``to_dot_options`` are those of :func:`to_dot`.  Returns the path written.
    pdf needs Graphviz ``dot``; ``graphviz-pure`` writes svg, png and jpeg."""
    graph = _check_graph(graph, "render")
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a file path like 'graph.svg', not {type(path).__name__}")
    out = Path(path)
    if not out.parent.is_dir():
        raise FileNotFoundError(f"cannot write {str(out)!r}: the folder {str(out.parent)!r} does not exist (create it first)")
    if format is None:
        suffix = out.suffix.lower().lstrip(".")
        if suffix not in FORMATS:
            raise ValueError(
                f"unknown suffix: {out.suffix!r} of path {str(out)!r} (must be one of "
                f"{['.' + f for f in FORMATS]}, or pass format=)"
            )
        fmt = suffix
    else:
        fmt = _check_format(format)
    source = to_dot(graph, **to_dot_options).source
    if fmt in ("dot", "gv"):
        data = source.encode("utf-8")
    else:
        data = layout(source, fmt, engine_binary=engine_binary)
    out.write_bytes(data)
    return out


def svg(graph: Graph, *, engine_binary: str | os.PathLike | None = None, **to_dot_options: Any) -> str:
    """The diagram as SVG text, scaled to fit the width of the page it is shown in."""
    graph = _check_graph(graph, "svg")
    text = layout(to_dot(graph, **to_dot_options).source, "svg", engine_binary=engine_binary).decode("utf-8")
    return _fit_width(text)


def _fit_width(text: str) -> str:
    """Let a browser scale the SVG down to the page width (never up), keeping its ratio."""
    start = text.find("<svg ")
    if start < 0:
        return text
    return text[:start] + '<svg style="max-width: 100%; height: auto;" ' + text[start + 5:]


def repr_mimebundle(graph: Graph, include: Collection[str] | None = None, exclude: Collection[str] | None = None) -> dict[str, str]:
    """What Jupyter shows for a Graph: ``{"image/svg+xml": ..., "text/plain": ...}``,
    filtered by ``include``/``exclude``.  Without a layout program only text is given,
    with a hint on how to get the picture."""
    graph = _check_graph(graph, "repr_mimebundle")

    def wanted(mime: str) -> bool:
        return (include is None or mime in include) and (exclude is None or mime not in exclude)

    bundle: dict[str, str] = {}
    text = repr(graph)
    if wanted("image/svg+xml"):
        try:
            bundle["image/svg+xml"] = svg(graph)
        except LayoutProgramNotFound as exc:
            text += f"\n(no diagram: {exc})"
    if wanted("text/plain"):
        bundle["text/plain"] = text
    return bundle
