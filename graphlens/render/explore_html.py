"""The explorer page: a graph of thousands of nodes, opened by module, searched, panned and zoomed offline."""

from __future__ import annotations

import hashlib
import html
import re
from typing import Any, Mapping

from .._checks import check_count
from ..graph import Graph, OpNode, TensorNode
from ..scopes import infer_scopes
from ..values import PRECISION
from .draw import check_graph
from .labels import last_flowed, op_text, printable, saved_text, shape_text
from .replay_html import script_json
from .scene import Options, data_scene
from .style import (
    BOX_BORDER, BOX_FILL, FONT, GRAD_BORDER, GRAD_TEXT, HIGHLIGHT, LEAF_FILL, NONFINITE, NONLEAF_FILL, OP_BORDER,
    OP_FILL, PLAIN_BORDER, RELEASED,
)

__all__ = ["explore_page", "explore_data", "saved_bytes", "UNCONNECTED", "DATA_VERSION"]

#: Version of the JSON the page embeds (``data["v"]``).
DATA_VERSION = 1

#: The group of nodes with no path to any root (a model built inside the traced block, say):
#: drawn as one box of its own, never a module's name (a module path holds no spaces).
UNCONNECTED = "(not connected to a root)"

#: Above this share of the graph's nodes, a lone module opens by itself when the page opens
#: (``depth=None``): a page of one box says nothing.
_DOMINANT = 0.5


def saved_bytes(graph: Graph) -> Mapping[str, int] | None:
    """The one place the page learns memory: per op id, the bytes of the saved tensors it
    keeps alive until backward, from :mod:`graphlens.memory` when that module can say; ``None``
    when it cannot (the page then shows no memory rather than a guess)."""
    try:
        from .. import memory  # type: ignore[attr-defined]
    except ImportError:
        return None
    per_op = getattr(memory, "saved_bytes_by_op", None)
    if per_op is None:
        return None
    try:
        found = per_op(graph)
    except Exception:  # noqa: BLE001 - a page without memory beats no page
        return None
    return {str(k): int(v) for k, v in dict(found).items()}


def _module_bytes(graph: Graph) -> Mapping[str, int] | None:
    """Per module path, the bytes :func:`graphlens.memory.memory` charges to it and the
    modules inside it; ``None`` when it cannot say."""
    try:
        from ..memory import memory

        return dict(memory(graph).modules)
    except Exception:  # noqa: BLE001 - a page without memory beats no page
        return None


def _options(precision: int, max_elements: int | None) -> Options:
    return Options(
        view="data", direction="forward", legend=False, values=True, grads=True, saved=True,
        max_elements=max_elements, precision=precision, max_nodes=1 << 30, depth=None,
        hl_nodes=frozenset(), hl_edges=frozenset(),
    )


def _text(summary, precision: int, max_elements: int | None) -> str | None:
    return None if summary is None else summary.format(precision, max_elements)


def _tensor_record(t: TensorNode, scope: int, precision: int, max_elements: int | None, notes) -> dict:
    d: dict[str, Any] = {"i": t.id, "k": "t", "s": scope, "sh": shape_text(t), "dt": t.dtype}
    if t.name is not None:
        d["n"] = printable(t.name)
    flags = "".join(c for c, on in (("l", t.is_leaf), ("r", t.requires_grad), ("p", t.is_parameter),
                                     ("k", t.retains_grad), ("v", t.is_view)) if on)
    if flags:
        d["f"] = flags
    if t.value is not None:
        d["v"] = _text(t.value, precision, max_elements)
        if t.value.finite is False:
            d["vn"] = 1
    if t.grad is not None:
        d["g"] = _text(t.grad, precision, max_elements)
    else:
        flowed = last_flowed(t)
        if flowed is not None:
            d["g"], d["gr"] = _text(flowed, precision, max_elements), 1  # released after it flowed
    if t.device != "cpu":
        d["dv"] = t.device
    if t.region:
        d["rg"] = t.region
    if t.code:
        d["c"] = printable(t.code)
    if t.line is not None:
        d["ln"] = t.line
    if notes:
        d["no"] = [printable(n) for n in notes]
    return d


def _op_record(o: OpNode, scope: int, names: Mapping[str, str], precision: int, mem: Mapping[str, int] | None, notes) -> dict:
    d: dict[str, Any] = {"i": o.id, "k": "o", "s": scope, "n": printable(op_text(o, "data"))}
    if o.forward:
        d["fw"] = o.forward
    if o.name:
        d["bw"] = o.name
    if o.saved:
        d["sv"] = [printable(saved_text(e, names, precision)) for e in o.saved]
    if o.code:
        d["c"] = printable(o.code)
    if o.line is not None:
        d["ln"] = o.line
    if o.region:
        d["rg"] = o.region
    if mem is not None and o.id in mem:
        d["m"] = mem[o.id]
    if notes:
        d["no"] = [printable(n) for n in notes]
    return d


def _unconnected(graph: Graph, ids: list[str], edges) -> set[str]:
    """The drawn nodes with no path (either way along drawn edges) to a root."""
    roots = [r.id for r in graph.roots]
    if not roots:
        return set()
    around: dict[str, list[str]] = {}
    for e in edges:
        around.setdefault(e.src, []).append(e.dst)
        around.setdefault(e.dst, []).append(e.src)
    seen = set(r for r in roots if r in around or r in set(ids))
    stack = list(seen)
    while stack:
        for n in around.get(stack.pop(), ()):
            if n not in seen:
                seen.add(n)
                stack.append(n)
    return {i for i in ids if i not in seen}


def _adopt(graph: Graph, ids: list[str], succ: Mapping[str, list[str]], pred: Mapping[str, list[str]], scope_of: dict) -> set[str]:
    """Draw nodes that ran outside every module with the module they serve, changing
    ``scope_of`` in place; returns the ids so placed.  A parameter goes to the module its
    name ends with (``model.transformer.wte.weight``: ``transformer.wte``); then, repeatedly,
    a node outside every module whose drawn successors all lie in one module (a parameter's
    initialisation, made before any forward ran) goes to that module.  ``succ`` and ``pred``:
    each drawn node's successors and predecessors along the drawn edges."""
    known = {s for s in scope_of.values() if s and s != UNCONNECTED}
    prefixes = {".".join(s.split(".")[: k + 1]) for s in known for k in range(s.count(".") + 1)}
    adopted: set[str] = set()
    for t in graph.tensors:
        if t.is_parameter and scope_of.get(t.id, UNCONNECTED) is None and t.name and "." in t.name:
            owner = t.name.rsplit(".", 1)[0]
            parts = owner.split(".")
            for k in range(len(parts)):
                if ".".join(parts[k:]) in prefixes:
                    scope_of[t.id] = ".".join(parts[k:])
                    adopted.add(t.id)
                    break
    # (a node is placed once every successor has a module, and one module at that: each node is
    # looked at again only when one of its successors was placed, so a long training loop's chain
    # of optimizer steps is walked once, not once per step)
    todo = [i for i in ids if scope_of[i] is None and i in succ]
    drawn = set(todo)
    while todo:
        i = todo.pop()
        if scope_of[i] is not None:
            continue
        where = {scope_of[j] for j in succ[i]}
        if len(where) == 1:
            (s,) = where
            if s is not None and s != UNCONNECTED:
                scope_of[i] = s
                adopted.add(i)
                todo.extend(p for p in pred.get(i, ()) if p in drawn and scope_of[p] is None)
    return adopted


#: Alike leaves that one node alone reads, this many or more, are one group, closed when the page opens.
ALIKE_GROUP = 20


def _alike_leaves(nodes, succ: Mapping[str, list[str]], pred: Mapping[str, list[str]], scope_of: dict) -> set[str]:
    """Put alike leaves outside every module that only one node reads (``torch.stack(ws)``
    over 400 of them) in a group of their own, changing ``scope_of`` in place, when there are
    ``ALIKE_GROUP`` or more (what the diagrams draw as one node, "400 alike leaves"); returns
    the groups' names.  A parameter, or a leaf of a name of its own, is never grouped."""
    alike: dict[tuple, list] = {}
    for n in nodes:
        if n.leaf is None or scope_of.get(n.id) is not None or n.id in pred or len(set(succ.get(n.id, ()))) != 1:
            continue
        alike.setdefault((succ[n.id][0], n.leaf[1]), []).append(n)
    names: set[str] = set()
    for (_, (shape, dtype, requires_grad, base)), members in alike.items():
        if len(members) < ALIKE_GROUP:
            continue
        what = f"{base}[…]" if base else "leaves"
        name = (f"({len(members)} alike {what}, shape [{', '.join(map(str, shape))}], {dtype}"
                f"{', requiring grad' if requires_grad else ''})").replace(".", "\u2024")  # (no dot: not a module path)
        k, unique = 1, name
        while unique in names:
            k += 1
            unique = f"{name} #{k}"
        names.add(unique)
        for n in members:
            scope_of[n.id] = unique
    return names


def explore_data(
    graph: Graph, *, precision: int = PRECISION, max_elements: int | None = 4, depth: int | None = None,
) -> dict:
    """What the explorer page embeds, as plain JSON values: ``nodes`` (the data view's tensors
    and ops, each with its module's index ``s``, -1 outside every module), ``edges`` as pairs of
    node indices (``[src, dst, 1]`` for a ``detach``), ``modules`` (the module tree from the
    nodes' scopes: dotted name, parent index, and the ops, tensors, parameters and saved bytes
    inside it) and ``open``, the modules open when the page opens.  ``depth=None`` opens,
    one level at a time, the module that alone holds more than half of the graph (GPT-2's
    ``transformer`` and ``transformer.h``); ``depth=k`` opens every module less than ``k`` levels
    deep (``depth=1``: the top-level modules only, all collapsed)."""
    graph = infer_scopes(check_graph(graph, "explore_data"))
    precision = check_count("precision", precision, minimum=1)  # type: ignore[assignment]
    max_elements = check_count("max_elements", max_elements, allow_none=True, minimum=1)
    depth = check_count("depth", depth, allow_none=True, minimum=1)
    o = _options(precision, max_elements)
    nodes, edges = data_scene(graph, o)
    ids = [n.id for n in nodes]
    lonely = _unconnected(graph, ids, edges)
    scope_of: dict[str, str | None] = {n.id: (UNCONNECTED if n.id in lonely else n.scope) for n in nodes}
    succ: dict[str, list[str]] = {}
    pred: dict[str, list[str]] = {}
    for e in edges:
        succ.setdefault(e.src, []).append(e.dst)
        pred.setdefault(e.dst, []).append(e.src)
    adopted = _adopt(graph, ids, succ, pred, scope_of)
    groups = _alike_leaves(nodes, succ, pred, scope_of)
    # the module tree: every dotted prefix of every scope is a module (a ModuleList ``h`` included)
    names: set[str] = set()
    for s in scope_of.values():
        if s is None:
            continue
        if s == UNCONNECTED:
            names.add(s)
            continue
        parts = s.split(".")
        names.update(".".join(parts[: k + 1]) for k in range(len(parts)))
    order = sorted(names, key=_module_key)
    index = {m: k for k, m in enumerate(order)}

    def parent(m: str) -> int:
        return -1 if m == UNCONNECTED or "." not in m else index[m.rsplit(".", 1)[0]]

    mem = saved_bytes(graph)
    by_id = {r.id: r for r in graph}
    label_of = {t.id: t.name or t.id for t in graph.tensors}
    modules = [{"n": m, "p": parent(m), "o": 0, "t": 0, "pm": 0, **({"m": 0} if mem is not None else {}),
                **({"g": 1} if m in groups else {})} for m in order]
    records = []
    for n in nodes:
        rec = by_id[n.id]
        s = scope_of[n.id]
        k = -1 if s is None else index[s]
        notes = graph.notes.get(n.id)
        if isinstance(rec, TensorNode):
            records.append(_tensor_record(rec, k, precision, max_elements, notes))
        else:
            records.append(_op_record(rec, k, label_of, precision, mem, notes))
        if n.id in adopted:
            records[-1]["a"] = 1
        while k >= 0:  # counted in the module and every module around it
            mod = modules[k]
            if isinstance(rec, TensorNode):
                mod["t"] += 1
            else:
                mod["o"] += 1
                if mem is not None:
                    mod["m"] += mem.get(rec.id, 0)
            k = mod["p"]
    totals = _module_bytes(graph) if mem is not None else None
    if totals is not None:  # (memory() charges every op, the backward-only ones the page does not draw too)
        for mod in modules:
            mod["m"] = totals.get(mod["n"], 0)
    at = {i: k for k, i in enumerate(ids)}
    # a parameter counts where the backward graph uses it (its initialisation, say, is no use)
    used = {e.src for e in edges if e.kind == "flow" and isinstance(by_id.get(e.dst), OpNode) and by_id[e.dst].name}
    for n in nodes:
        rec, k = by_id[n.id], index.get(scope_of[n.id], -1) if scope_of[n.id] is not None else -1
        while isinstance(rec, TensorNode) and rec.is_parameter and n.id in used and k >= 0:
            modules[k]["pm"] += 1
            k = modules[k]["p"]
    pairs = []
    seen = set()
    for e in edges:
        if e.src in at and e.dst in at:
            key = (at[e.src], at[e.dst], 1 if e.kind == "detach" else 0)
            if key not in seen:
                seen.add(key)
                pairs.append(list(key) if key[2] else list(key[:2]))
    data = {
        "v": DATA_VERSION, "nodes": records, "edges": pairs, "modules": modules,
        "open": _initially_open(modules, len(records), depth),
        "roots": [at[r.id] for r in graph.roots if r.id in at],
        "memory": mem is not None,
    }
    return data


def _module_key(name: str) -> tuple:
    """Modules in a natural order: ``h.2`` before ``h.10``, the unconnected group last."""
    if name == UNCONNECTED:
        return ((2, ""),)
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in name.split("."))


def _initially_open(modules: list[dict], total: int, depth: int | None) -> list[int]:
    """The module indices open when the page opens (see :func:`explore_data`)."""
    level = []
    for m in modules:
        p, d = m["p"], 1
        while p >= 0:
            d, p = d + 1, modules[p]["p"]
        level.append(d)
    if depth is not None:
        return [k for k, d in enumerate(level) if d < depth]
    opened: list[int] = []
    parent = -1
    while True:
        children = [k for k, m in enumerate(modules) if m["p"] == parent and m["n"] != UNCONNECTED and not m.get("g")]
        big = [k for k in children if modules[k]["o"] + modules[k]["t"] > _DOMINANT * total]
        if len(big) != 1:
            return opened
        opened.append(big[0])
        parent = big[0]


def explore_page(
    graph: Graph,
    *,
    title: str | None = None,
    depth: int | None = None,
    precision: int = PRECISION,
    max_elements: int | None = 4,
    explanation: Any = None,
) -> str:
    """The graph as one self-contained HTML page (no external file, no network): the data view
    laid out in the page by a layered layout (so any module opens and closes at once), opening
    by module (see :func:`explore_data` for ``depth``); a click on a module box opens it, a click
    on an open module's title closes it; the search box finds tensors by variable or parameter
    name, ops by name and modules, highlights them and opens the modules around them; hovering
    (or clicking, which pins it) a node shows its shape, dtype, value, gradient and the op's saved
    tensors; drag pans, the wheel zooms.  ``explanation`` is shown above the diagram: the error
    that stopped the program."""
    from .explore_js import CSS, JS, PAGE

    data = explore_data(graph, precision=precision, max_elements=max_elements, depth=depth)
    t_count = sum(1 for n in data["nodes"] if n["k"] == "t")
    heading = title or "graphlens explorer"
    sub = (f"{t_count:,} tensors, {len(data['nodes']) - t_count:,} ops, "
           f"{sum(1 for m in data['modules'] if m['n'] != UNCONNECTED and not m.get('g')):,} modules")
    error = ""
    if explanation is not None:
        body = explanation.to_html() if hasattr(explanation, "to_html") else f"<p>{html.escape(str(explanation))}</p>"
        error = f"<section class='error'><b>The program stopped with an error.</b>{body}</section>"
    payload = script_json(data)
    colors = {
        "LEAF": LEAF_FILL, "NONLEAF": NONLEAF_FILL, "RG": GRAD_BORDER, "PLAIN": PLAIN_BORDER, "OPF": OP_FILL,
        "OPB": OP_BORDER, "BOXF": BOX_FILL, "BOXB": BOX_BORDER, "HL": HIGHLIGHT, "GRAD": GRAD_TEXT, "REL": RELEASED,
        "BAD": NONFINITE, "FONT": FONT,
    }
    css = re.sub(r"@([A-Z]+)@", lambda m: colors[m.group(1)], CSS)
    js = re.sub(r"@([A-Z]+)@", lambda m: colors[m.group(1)], JS)
    parts = {
        "TITLE": html.escape(heading), "SUB": html.escape(sub), "CSS": css, "ERROR": error, "DATA": payload, "JS": js,
        "ID": hashlib.sha1(payload.encode("utf-8")).hexdigest()[:10],
    }
    # One pass: a part that holds a placeholder's spelling (a tensor named "@JS@") stays as it is.
    return re.sub(r"@(TITLE|SUB|CSS|ERROR|DATA|JS|ID)@", lambda m: parts[m.group(1)], PAGE)
