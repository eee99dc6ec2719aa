"""The replay page: the data-view diagram with a stepper through the engine's real backward steps."""

from __future__ import annotations

import hashlib
import html
import json
import re
from typing import TYPE_CHECKING, Any

from .._checks import check_choice, check_count
from ..values import PRECISION, Summary
from .dot import emit
from .collapse import SIDE_PATH
from .draw import build_scene
from .labels import esc
from .replay_assets import CSS, JS, PAGE
from .style import DIRECTIONS, FONT, GRAD_TEXT, HIGHLIGHT, LEAF_FILL, MAX_NODES, NONLEAF_FILL, RELEASED

if TYPE_CHECKING:
    from ..replay import Replay

__all__ = ["replay_page", "replay_frame", "replay_data", "drawn_depth", "script_json", "MARKERS", "BY_MODULE_ABOVE", "BY", "page_data", "opening"]

#: The text colour of the reserved ``.grad`` row of a tensor node: one step off the node's
#: fill, so Graphviz lays the row out (invisibly) and the page finds and fills it.
MARKERS = {LEAF_FILL: "#c8ebc5", NONLEAF_FILL: "#fffffe"}

#: How the page steps: ``"step"`` one engine node at a time, ``"module"`` one run of nodes
#: inside one module at a time, ``"auto"`` by module when the graph knows its modules and
#: the backward has more than :data:`BY_MODULE_ABOVE` steps.
BY = ("auto", "step", "module")
BY_MODULE_ABOVE = 100


_SCRIPT_UNSAFE = re.compile("[\u2028\u2029\ud800-\udfff]")


def script_json(data: Any) -> str:
    """``data`` as JSON that is safe inside an HTML ``<script>`` element whatever its texts
    hold: ``<``, ``>`` and ``&`` (and the two JavaScript line separators, and lone surrogates,
    which UTF-8 cannot write) are spelled as ``\\u`` escapes, so no ``</script>`` ends the
    element early and no ``<!--`` puts it in HTML's escaped script states; ``JSON.parse``
    reads the same values back.

    >>> script_json({"name": "</script><!--"})
    '{"name":"\\\\u003c/script\\\\u003e\\\\u003c!--"}'
    """
    text = json.dumps(data, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    # (the three common ones by plain replaces: every edge title holds a ">", and one call per match
    # was most of a large page's time)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return _SCRIPT_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _text(s: Summary | None, precision: int, max_elements: int | None) -> str:
    return "None" if s is None else s.format(precision, max_elements)


def _short(s: Summary, precision: int, max_elements: int | None) -> str:
    """A value as an edge label: the first numbers, then ``…`` (the tensor's node gives its shape)."""
    text = s.format(precision, max_elements)
    return re.sub(r"(, )?… \(\d+ elements\)\]$", lambda m_: ", …]" if m_.group(1) else "…]", text)


class _Map:
    """Which drawn node stands for each op and tensor of the graph, and which drawn edges exist."""

    def __init__(self, graph, nodes, edges) -> None:
        self.drawn: dict[str, str] = {}
        self.kind: dict[str, str] = {}
        for n in nodes:
            self.kind[n.id] = n.kind
            for m in n.members:
                self.drawn[m] = n.id
        self.edges = {(e.src, e.dst) for e in edges}
        self.count: dict[tuple[str, str], int] = {}
        for e in edges:
            self.count[(e.src, e.dst)] = self.count.get((e.src, e.dst), 0) + 1
        ops = {op.id: op for op in graph.ops}
        self.ops = ops
        parents: dict[str, list[str]] = {}
        self.nexts: dict[str, list] = {}
        for e in graph.edges:
            if e.kind == "next":
                parents.setdefault(e.dst, []).append(e.src)
                self.nexts.setdefault(e.src, []).append(e)
        self.outputs = {(t.op, t.output_nr): t.id for t in graph.tensors if t.op is not None}
        # An AccumulateGrad is drawn as its leaf; an op the view hides (linear's inner
        # TBackward0) as the drawn op that sends into it.
        for op in graph.ops:
            if op.id in self.drawn:
                continue
            if op.is_accumulate_grad:
                if op.variable in self.drawn:
                    self.drawn[op.id] = self.drawn[op.variable]
                continue
            seen = {op.id}
            stack = list(parents.get(op.id, ()))
            while stack:
                p = stack.pop(0)
                if p in seen:
                    continue
                seen.add(p)
                if p in self.drawn and not ops[p].is_accumulate_grad:
                    self.drawn[op.id] = self.drawn[p]
                    break
                stack.extend(parents.get(p, ()))

    def hidden(self, op_id: str) -> bool:
        """An op the view does not draw as itself (nor as a leaf): its own step draws its sends."""
        op = self.ops.get(op_id)
        return op is not None and not op.is_accumulate_grad and self.drawn.get(op_id) not in (op_id, None) and \
            self.kind.get(self.drawn.get(op_id, ""), "") == "op"

    def source(self, op_id: str, output_nr: int) -> str | None:
        """The drawn node a gradient sent to output ``output_nr`` of ``op_id`` arrives at."""
        op = self.ops.get(op_id)
        if op is None:
            return None
        if op.is_accumulate_grad:
            return self.drawn.get(op.variable) if op.variable else None
        t = self.outputs.get((op_id, output_nr))
        if t is not None and t in self.drawn:
            return self.drawn[t]
        return self.drawn.get(op_id)

    def edge(self, a: str | None, b: str | None) -> str | None:
        """The title (``"src->dst"``) of the drawn edge between ``a`` and ``b``, either way round."""
        if a is None or b is None or a == b:
            return None
        if (a, b) in self.edges:
            return f"{a}->{b}"
        if (b, a) in self.edges:
            return f"{b}->{a}"
        return None


def replay_data(
    replay: "Replay", nodes, edges, *, precision: int = PRECISION, max_elements: int | None = 3, modules: dict | None = None,
) -> dict:
    """What the page's script needs, as plain JSON-able data: per step the drawn node that
    ran, the drawn edges that carried gradients (with their values), the sentence and the
    ``.grad`` writes; per written tensor its row; with ``modules`` (depth -> the module steps
    :meth:`~graphlens.Replay.by_module` gives at that depth), per depth (``"levels"``, keyed
    by the depth as text) per module step the same, summed over its run, with the range of
    engine steps it holds (``"r"``, first and last, from 0)."""
    g = replay.graph
    m = _Map(g, nodes, edges)
    steps = []
    rows: dict[str, dict] = {}
    into: dict[tuple[int, str], list] = {}  # (call, op) -> the labelled sends that reached it
    for s in replay.steps:
        here = m.drawn.get(s.op)
        sent = []
        for e in m.nexts.get(s.op, ()):
            value = s.grads_out[e.input_nr] if e.input_nr < len(s.grads_out) else None
            if value is None:
                continue
            child = m.ops.get(e.dst)
            if child is not None and m.hidden(e.dst) and m.drawn.get(e.dst) == here:
                continue  # the hidden node's own step draws where this goes
            dst = m.source(e.dst, e.output_nr)
            title = m.edge(dst, here)
            if title is not None:
                sent.append([title, _short(value, precision, max_elements)])
                into.setdefault((s.backward, e.dst), []).append(sent[-1])
        arrived = []
        if s.name == "AccumulateGrad":  # what reached the leaf: the sends along its edges, summed here
            if m.kind.get(here) == "tensor":
                # (this node's own: a drawn leaf that stands for one per iteration of a folded loop
                # lists, at each of their steps, what reached that one)
                arrived = list(into.get((s.backward, s.op), ()))
        else:
            for nr, value in enumerate(s.grads_in):
                t = m.outputs.get((s.op, nr))
                if value is None or t is None:
                    continue
                title = m.edge(here, m.drawn.get(t))
                if title is not None:
                    arrived.append([title, _short(value, precision, max_elements)])
        writes = []
        for w in s.writes:
            row = rows.get(w.tensor)
            if row is None:
                t = g.node(w.tensor)
                row = rows[w.tensor] = {
                    "id": w.tensor, "name": t.label, "shape": list(t.shape),
                    "kind": "leaf" if t.is_leaf else "retained",
                    "before": _text(w.before, precision, max_elements),
                    "node": m.drawn.get(w.tensor) if m.drawn.get(w.tensor) == w.tensor else None,
                    "ps": [],  # (the backward calls that write it: the table lists the current call's)
                }
            if not row["ps"] or row["ps"][-1] != s.backward:
                row["ps"].append(s.backward)
            writes.append([w.tensor, _text(w.after, precision, max_elements)])
        step = {"p": s.backward, "n": s.name, "node": here, "t": replay.describe(s, precision, 4)}
        if sent:
            step["s"] = sent
        if arrived:
            step["a"] = arrived
        if writes:
            step["w"] = writes
        if s.hooked:
            step["h"] = 1
        steps.append(step)
    ran = sorted({st["node"] for st in steps if st["node"] and m.kind.get(st["node"]) in ("op", "chain", "box")})
    data = {"steps": steps, "rows": list(rows.values()), "passes": replay.passes, "ops": ran}
    if modules is not None:
        data["levels"] = {
            str(d): [_module_entry(replay, ms, steps, m, precision, max_elements) for ms in mods] for d, mods in modules.items()
        }
    return data


def _module_entry(replay: "Replay", ms, steps: list[dict], m: _Map, precision: int, max_elements: int | None) -> dict:
    """One module step for the page: the drawn nodes its engine steps ran at, the drawn edges
    that carried gradients in its run (its sends, and what reached it from outside)."""
    from ..replay import module_label

    run = steps[ms.start:ms.stop]
    nodes = list(dict.fromkeys(st["node"] for st in run if st["node"]))
    arrived = []
    for f in ms.grads_in:
        if f.sender is None:  # the gradient backward() starts from: on the edge to the op's output
            t = m.outputs.get((f.receiver, f.output_nr))
            title = m.edge(m.drawn.get(f.receiver), m.drawn.get(t)) if t is not None else None
        else:
            title = m.edge(m.source(f.receiver, f.output_nr), m.drawn.get(f.sender))
        if title is not None:
            arrived.append([title, _short(f.value, precision, max_elements)])
    entry = {"p": ms.backward, "m": module_label(ms.module), "r": [ms.start, ms.stop - 1], "nodes": nodes,
             "t": replay.describe_module(ms, precision)}
    sent = _merge([pair for st in run for pair in st.get("s", ())], m)
    if sent:
        entry["s"] = sent
    arrived = _merge(arrived, m)
    if arrived:
        entry["a"] = arrived
    writes = [w for st in run for w in st.get("w", ())]
    if writes:
        entry["w"] = writes
    if any(st.get("h") for st in run):
        entry["h"] = 1
    return entry


def _merge(pairs: list, m: _Map) -> list:
    """``[title, value]`` pairs with at most as many per title as the diagram draws edges of
    that title: extra values (several sends along one collapsed edge) join the last label."""
    by_title: dict[str, list[str]] = {}
    for title, value in pairs:
        by_title.setdefault(title, []).append(value)
    out = []
    for title, values in by_title.items():
        src, _, dst = title.partition("->")
        room = max(1, m.count.get((src, dst), 1))
        if len(values) > room:
            rest = values[room - 1:]
            values = values[: room - 1] + [rest[0] + (f" (+{len(rest) - 1} more)" if len(rest) > 1 else "")]
        out.extend([title, v] for v in values)
    return out


_DATA = re.compile(r'<script id="gl-data" type="application/json">(.*?)</script>', re.S)


def page_data(page: str) -> dict:
    """The data a replay page embeds (what its script reads), from the page's HTML."""
    found = _DATA.search(page)
    if found is None:
        raise ValueError("page holds no replay data: give the HTML that Replay.to_html() wrote")
    return json.loads(found.group(1))


def opening(page: str) -> tuple[str, int | None, int]:
    """How a replay page opens: ``("step", None, steps)`` or ``("module", depth, module steps)``."""
    data = page_data(page)
    if data.get("by") == "module":
        return "module", data["depth"], len(data["levels"][str(data["depth"])])
    return "step", None, len(data["steps"])


def drawn_depth(graph, nodes) -> int | None:
    """How many dotted parts deep the diagram's module boxes are (``None`` when it draws
    none): the dotted name of each box (its ``scope``), else the shortest scope prefix
    that the members of a box share."""
    scope = {op.id: op.scope for op in graph.ops}
    scope.update({t.id: t.scope for t in graph.tensors})
    depth = None
    for n in nodes:
        if n.kind != "box":
            continue
        name = getattr(n, "scope", None)
        if name and name.endswith(SIDE_PATH):
            continue  # (an open module's work beside the gradient path, not a level)
        if name and " " not in name:
            shared = len(name.split("."))
        else:
            parts = [scope[i].split(".") for i in getattr(n, "members", ()) if scope.get(i)]
            shared = 0
            for column in zip(*parts):
                if any(c != column[0] for c in column):
                    break
                shared += 1
        if shared:
            depth = shared if depth is None else min(depth, shared)
    return depth


def _reserve_rows(nodes, data: dict) -> None:
    """Give each tensor node with a ``.grad`` row a reserved, invisible line as wide as its widest value."""
    by_id = {n.id: n for n in nodes}
    written: dict[str, list[str]] = {}  # tensor -> the values written to its .grad, in step order
    for st in data["steps"]:
        for tid, v in st.get("w", ()):
            written.setdefault(tid, []).append(v)
    widest: dict[str, str] = {}
    for row in data["rows"]:
        if row["node"] is None:
            continue
        widest[row["node"]] = max([row["before"], *written.get(row["id"], ())], key=len)
    for node_id, text in widest.items():
        n = by_id.get(node_id)
        if n is None or n.kind != "tensor" or not n.label.endswith("</TABLE>>"):
            continue
        marker = MARKERS.get(n.attrs.get("fillcolor", ""), MARKERS[NONLEAF_FILL])
        row = f'<TR><TD><FONT POINT-SIZE="9" COLOR="{marker}">grad {esc(text)} ..</FONT></TD></TR>'
        n.label = n.label[: -len("</TABLE>>")] + row + "</TABLE>>"


_PROLOG = re.compile(r"\A.*?(?=<svg\b)", re.S)
_COMMENT = re.compile(r"<!--.*?-->\n?", re.S)


def _clean_svg(svg: str) -> str:
    """The ``<svg>`` element alone: no XML prolog, DOCTYPE (a reference to a DTD) or comments."""
    return _COMMENT.sub("", _PROLOG.sub("", svg, count=1)).strip()


def replay_page(
    replay: "Replay",
    *,
    title: str | None = None,
    direction: str = "forward",
    precision: int = PRECISION,
    max_elements: int | None = 3,
    max_nodes: int = MAX_NODES,
    depth: int | None = None,
    by: str = "auto",
    explanation: Any = None,
    engine_binary: Any = None,
) -> str:
    """The replay as one self-contained HTML page (no external files, no network): the
    data-view diagram, laid out once, with a stepper (previous / next / play, arrow keys,
    a slider, ``#step=N`` in the address) that highlights the node the engine ran at each
    step, the edges that carried gradients (with their values), every written ``.grad``
    as of that step, and says in a sentence what happened.  Gradients of earlier steps of
    the same backward call stay on their edges, faded: PyTorch released them.
    ``explanation`` (an :class:`~graphlens.Explanation`) is shown above the diagram: the
    error that stopped the program.  Without a layout program the page has no diagram
    but keeps the stepper, the sentences and the table.

    ``by`` is how it opens: ``"step"``, one node of the engine at a time; ``"module"``, one
    run of consecutive nodes inside one module box at a time (:meth:`Replay.by_module`, at
    the diagram's ``depth``: the one given, else the one the diagram opens at); ``"auto"``
    (the default) opens by module when the graph knows its modules and the backward has
    more than 100 steps, else by step.  The page can switch between the two, and read
    modules deeper or shallower, either way; ``#step=N``, ``#module=N`` and
    ``#module=N&depth=D`` (steps from 1) open a step.  Only the current step's edges are
    labelled; the "trail" box adds those of the earlier steps of the same backward call."""
    from .output import layout

    direction = check_choice("direction", direction, DIRECTIONS)
    by = check_choice("by", by, BY)
    precision = check_count("precision", precision, minimum=1)  # type: ignore[assignment]
    max_elements = check_count("max_elements", max_elements, allow_none=True, minimum=1)
    graph, nodes, edges, o, notes = build_scene(
        replay.graph, "data", direction, True, True, False, False, None, max_elements, precision, max_nodes, depth, None
    )
    scoped = replay.has_scopes()
    if by == "module" and not scoped:
        raise ValueError(
            "by='module' needs to know which module ran each op, and this graph does not: trace the model with "
            "graphlens.trace(module=model), or step through it with by='step'"
        )
    modules = None
    if scoped:  # the module steps at every depth, the page's own first
        levels = max(len(op.scope.split(".")) for op in graph.ops if op.scope)
        step_depth = o.depth if o.depth is not None else drawn_depth(graph, nodes)
        step_depth = levels if step_depth is None else min(step_depth, levels)
        modules = {d: replay.by_module(depth=d) for d in range(1, levels + 1)}
    data = replay_data(replay, nodes, edges, precision=precision, max_elements=max_elements, modules=modules)
    if modules is not None:
        data["depth"] = step_depth
    data["by"] = "module" if by == "module" or (by == "auto" and scoped and len(replay.steps) > BY_MODULE_ABOVE) else "step"
    if explanation is not None:
        data["stopped"] = 1
    _reserve_rows(nodes, data)
    source = emit(graph, nodes, edges, o, "replay", notes).source
    try:
        svg = _clean_svg(layout(source, "svg", engine_binary=engine_binary).decode("utf-8"))
        missing = ""
    except Exception as exc:  # noqa: BLE001 - the page still steps through the table
        svg = ""
        missing = f"<p class='missing'>No diagram: {html.escape(str(exc))}</p>"
    heading = title or f"Backward replay: {len(replay.steps)} step{'s' * (len(replay.steps) != 1)} in {replay.passes} backward call{'s' * (replay.passes != 1)}"
    count = len(modules[step_depth]) if modules is not None else 0
    sub_heading = f"{count} module step{'s' * (count != 1)} at depth {step_depth}" if modules is not None else ""
    payload = script_json(data)
    error = ""
    if explanation is not None:
        body = explanation.to_html() if hasattr(explanation, "to_html") else f"<p>{html.escape(str(explanation))}</p>"
        error = f"<section class='error'><b>The program stopped with an error.</b>{body}</section>"
    error += _nonfinite_banner(replay)
    page_id = hashlib.sha1(payload.encode("utf-8")).hexdigest()[:10]
    parts = {
        "TITLE": html.escape(heading),
        "MODS": html.escape(sub_heading),
        "SUB": (
            "By step, each step is one node of PyTorch's engine, in the order it really ran (seen by hooks on the real "
            "nodes); by module, each step is one run of consecutive nodes inside one module."
            if modules is not None else
            "Each step is one node of PyTorch's engine, in the order it really ran (seen by hooks on the real nodes)."
        ),
        "CSS": CSS.replace("@FONT@", FONT).replace("@HL@", HIGHLIGHT).replace("@GRAD@", GRAD_TEXT).replace("@REL@", RELEASED),
        "ERROR": error,
        "SVG": svg or missing,
        "ID": page_id,
        "DATA": payload,
        "JS": JS.replace("@MARKERS@", json.dumps(sorted(MARKERS.values()))),
    }
    # One pass: a part that holds a placeholder's spelling (a tensor named "@JS@") stays as it is.
    return _PLACEHOLDER.sub(lambda m: parts[m.group(1)], PAGE)


_PLACEHOLDER = re.compile(r"@(TITLE|MODS|SUB|CSS|ERROR|SVG|ID|DATA|JS)@")


def _nonfinite_banner(replay: "Replay") -> str:
    """A line above the diagram when a gradient went NaN or infinite: the first step (in the
    engine's order) that sent one while what arrived was finite, with a link that goes there."""
    def bad(x: Any) -> bool:
        return x is not None and getattr(x, "finite", None) is False

    for step in replay.steps:
        if any(bad(x) for x in step.grads_out) and not any(bad(x) for x in step.grads_in):
            op = replay.graph.node(step.op)
            fwd = getattr(op, "forward", None)
            where = f", the backward of {fwd}" + (f" at line {op.line}" if getattr(op, "line", None) else "") if fwd else ""
            return (
                f"<section class='nonfinite'><b>The first NaN or infinite gradient</b> is sent at step {step.index + 1}: "
                f"{html.escape(step.name)}{html.escape(where)}, from finite gradients. "
                f"<a href='#step={step.index + 1}' id='gl-nonfinite'>Go to step {step.index + 1}</a>; "
                f"<code>graphlens.explain(tensor, tr)</code> says why.</section>"
            )
    return ""


def replay_frame(replay: "Replay", *, height: int = 640, **options: Any) -> str:
    """The page inside an ``<iframe srcdoc>``: what a notebook shows (its script and styles
    stay in the frame, so two replays in one notebook never meet)."""
    page = replay_page(replay, **options)
    return (
        f'<iframe srcdoc="{html.escape(page, quote=True)}" sandbox="allow-scripts" '
        f'style="width:100%;height:{int(height)}px;border:1px solid #dcdfe4;border-radius:6px"></iframe>'
    )
