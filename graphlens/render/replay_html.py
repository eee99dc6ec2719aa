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
from .draw import build_scene
from .labels import esc
from .style import DIRECTIONS, FONT, GRAD_TEXT, HIGHLIGHT, LEAF_FILL, MAX_NODES, NONFINITE, NONLEAF_FILL, RELEASED

if TYPE_CHECKING:
    from ..replay import Replay

__all__ = ["replay_page", "replay_frame", "replay_data", "script_json", "MARKERS"]

#: The text colour of the reserved ``.grad`` row of a tensor node: one step off the node's
#: fill, so Graphviz lays the row out (invisibly) and the page finds and fills it.
MARKERS = {LEAF_FILL: "#c8ebc5", NONLEAF_FILL: "#fffffe"}


_SCRIPT_UNSAFE = re.compile("[<>&\u2028\u2029\ud800-\udfff]")


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


def replay_data(replay: "Replay", nodes, edges, *, precision: int = PRECISION, max_elements: int | None = 3) -> dict:
    """What the page's script needs, as plain JSON-able data: per step the drawn node that
    ran, the drawn edges that carried gradients (with their values), the sentence and the
    ``.grad`` writes; per written tensor its row."""
    g = replay.graph
    m = _Map(g, nodes, edges)
    steps = []
    rows: dict[str, dict] = {}
    into: dict[tuple[int, str], list] = {}  # (call, drawn node) -> the labelled sends that reached it
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
                into.setdefault((s.backward, dst), []).append(sent[-1])
        arrived = []
        if s.name == "AccumulateGrad":  # what reached the leaf: the sends along its edges, summed here
            if m.kind.get(here) == "tensor":
                arrived = list(into.get((s.backward, here), ()))
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
                }
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
    ran = sorted({st["node"] for st in steps if st["node"] and m.kind.get(st["node"]) in ("op", "chain")})
    return {"steps": steps, "rows": list(rows.values()), "passes": replay.passes, "ops": ran}


def _reserve_rows(nodes, data: dict) -> None:
    """Give each tensor node with a ``.grad`` row a reserved, invisible line as wide as its widest value."""
    by_id = {n.id: n for n in nodes}
    widest: dict[str, str] = {}
    for row in data["rows"]:
        if row["node"] is None:
            continue
        texts = [row["before"]] + [v for st in data["steps"] for tid, v in st.get("w", ()) if tid == row["id"]]
        widest[row["node"]] = max(texts, key=len)
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
    but keeps the stepper, the sentences and the table."""
    from .output import layout

    direction = check_choice("direction", direction, DIRECTIONS)
    precision = check_count("precision", precision, minimum=1)  # type: ignore[assignment]
    max_elements = check_count("max_elements", max_elements, allow_none=True, minimum=1)
    graph, nodes, edges, o, notes = build_scene(
        replay.graph, "data", direction, True, True, False, False, None, max_elements, precision, max_nodes, depth, None
    )
    data = replay_data(replay, nodes, edges, precision=precision, max_elements=max_elements)
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
    payload = script_json(data)
    error = ""
    if explanation is not None:
        body = explanation.to_html() if hasattr(explanation, "to_html") else f"<p>{html.escape(str(explanation))}</p>"
        error = f"<section class='error'><b>The program stopped with an error.</b>{body}</section>"
    error += _nonfinite_banner(replay)
    page_id = hashlib.sha1(payload.encode("utf-8")).hexdigest()[:10]
    parts = {
        "TITLE": html.escape(heading),
        "CSS": _CSS.replace("@FONT@", FONT).replace("@HL@", HIGHLIGHT).replace("@GRAD@", GRAD_TEXT).replace("@REL@", RELEASED),
        "ERROR": error,
        "SVG": svg or missing,
        "ID": page_id,
        "DATA": payload,
        "JS": _JS.replace("@MARKERS@", json.dumps(sorted(MARKERS.values()))),
    }
    # One pass: a part that holds a placeholder's spelling (a tensor named "@JS@") stays as it is.
    return _PLACEHOLDER.sub(lambda m: parts[m.group(1)], _PAGE)


_PLACEHOLDER = re.compile(r"@(TITLE|CSS|ERROR|SVG|ID|DATA|JS)@")


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
                f"<section class='nonfinite'><b>The first NaN or infinite gradient</b> is sent at step {step.index}: "
                f"{html.escape(step.name)}{html.escape(where)}, from finite gradients. "
                f"<a href='#step={step.index}' id='gl-nonfinite'>Go to step {step.index}</a>; "
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


_CSS = """
* { box-sizing: border-box; }
body { font: 15px/1.45 -apple-system, "Segoe UI", @FONT@, Arial, sans-serif; color:#1d1d1f; margin:0; background:#f6f7f9; }
header { padding: 14px 20px 6px; }
h1 { font-size: 20px; margin: 0; }
.sub { color:#555; font-size: 13px; margin: 2px 0 0; }
.wrap { display:flex; gap:14px; padding: 8px 20px 20px; align-items:flex-start; }
#gl-diagram { flex: 1 1 auto; min-width: 0; background:#fff; border:1px solid #dcdfe4; border-radius:10px; padding:8px;
              overflow:auto; max-height: calc(100vh - 90px); }
#gl-panel { flex: 0 0 360px; background:#fff; border:1px solid #dcdfe4; border-radius:10px; padding:12px 14px;
            position: sticky; top: 8px; max-height: calc(100vh - 16px); overflow:auto; }
@media (max-width: 860px) { .wrap { flex-direction: column; } #gl-panel { position: static; flex-basis:auto; width:100%; } }
.controls { display:flex; gap:6px; align-items:center; }
.controls button { font: inherit; font-size: 14px; padding: 4px 10px; border:1px solid #b9c0cc; border-radius:6px; background:#f3f5f8; cursor:pointer; }
.controls button:hover { background:#e6ebf2; }
#gl-slider { width: 100%; margin: 10px 0 2px; }
#gl-where { font-size: 13px; color:#555; }
#gl-node { font: 600 15px ui-monospace, Menlo, Consolas, monospace; margin: 10px 0 2px; }
#gl-text { margin: 4px 0 10px; }
#gl-hook { display:none; background:#fff3d6; border:1px solid #e0b44a; border-radius:6px; padding:2px 8px; font-size:13px; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { text-align:left; padding: 2px 6px; border-bottom: 1px solid #eceef2; vertical-align: top; }
td.v { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 12px; }
#gl-gradbox { max-height: 38vh; overflow: auto; border-top: 1px solid #eceef2; }
#gl-grads thead th { position: sticky; top: 0; background: #fff; }
#gl-grads td.v { white-space: nowrap; overflow: hidden; text-overflow: ellipsis; max-width: 190px; }
#gl-grads td:first-child { overflow-wrap: anywhere; }
tr.now td { background: #fdecec; }
tr.changed td.v { color: @GRAD@; font-weight: 700; }
#gl-steps tr { cursor: pointer; }
#gl-steps tr:hover td { background: #f0f4fa; }
.key { font-size: 12px; color:#444; margin-top: 10px; }
.key span { display:inline-block; width: 22px; height: 0; border-top: 3px solid; vertical-align: middle; margin-right: 4px; }
.error { margin: 0 20px 6px; background:#fdecec; border:1px solid #e4a1a1; border-radius:8px; padding: 8px 12px; }
.nonfinite { margin: 0 20px 6px; background:#fff3e0; border:1px solid #e0a060; border-radius:8px; padding: 8px 12px; }
.missing { color:#8a4b00; }
details { margin-top: 10px; }
summary { cursor:pointer; color:#1f5fa8; font-size: 14px; }
svg .gl-run path, svg .gl-run polygon, svg .gl-run ellipse { stroke: @HL@; stroke-width: 4px; }
svg .gl-ran path, svg .gl-ran polygon { fill: #dbe7f6; }
svg .gl-sent > path { stroke: @HL@; stroke-width: 3px; }
svg .gl-sent > polygon { fill: @HL@; stroke: @HL@; }
svg .gl-arr > path { stroke: @GRAD@; stroke-width: 3px; }
svg .gl-arr > polygon { fill: @GRAD@; stroke: @GRAD@; }
svg .gl-val rect { fill: #ffffff; fill-opacity: .92; stroke-width: 1px; }
svg .gl-val text { font: 700 10px @FONT@, Arial, sans-serif; }
svg .gl-val.sent rect { stroke: @HL@; } svg .gl-val.sent text { fill: @HL@; }
svg .gl-val.arr rect { stroke: @GRAD@; } svg .gl-val.arr text { fill: @GRAD@; }
svg .gl-val.past { opacity: .75; } svg .gl-val.past rect { stroke: #cccccc; } svg .gl-val.past text { fill: @REL@; font-weight: 400; font-style: italic; }
"""

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>@TITLE@</title>
<style>@CSS@</style>
</head>
<body data-page="@ID@">
<header><h1>@TITLE@</h1>
<p class="sub">Each step is one node of PyTorch's engine, in the order it really ran (seen by hooks on the real nodes). Keys: &larr; &rarr; step, space plays, Home / End.</p></header>
@ERROR@
<div class="wrap">
<div id="gl-diagram" class="fit">@SVG@</div>
<aside id="gl-panel">
<div class="controls">
<button id="gl-first" title="first step (Home)">first</button>
<button id="gl-prev" title="previous step (&larr;)">&#x25C0; prev</button>
<button id="gl-play" title="play / pause (space)">&#x25B6; play</button>
<button id="gl-next" title="next step (&rarr;)">next &#x25B6;</button>
<button id="gl-fit" title="fit the diagram to the page, or show it full size">fit</button>
</div>
<input id="gl-slider" type="range" min="0" max="0" value="0" aria-label="step">
<div id="gl-where"></div>
<div id="gl-node"></div>
<div id="gl-hook">a hook of the program changed the gradient that arrived</div>
<p id="gl-text"></p>
<div id="gl-gradbox"><table id="gl-grads"><thead><tr><th>tensor</th><th>.grad as of this step</th></tr></thead><tbody></tbody></table></div>
<div class="key"><span style="border-color:@HLC@"></span>sent by the running node
&nbsp; <span style="border-color:@GRC@"></span>arrived at it
&nbsp; <i style="color:#8c8c8c">grey italics</i>: used earlier in this call and released</div>
<details><summary>all steps</summary><table id="gl-steps"><thead><tr><th>step</th><th>call</th><th>node</th><th>what it sent</th></tr></thead><tbody></tbody></table></details>
</aside>
</div>
<script id="gl-data" type="application/json">@DATA@</script>
<script>@JS@</script>
</body>
</html>
""".replace("@HLC@", HIGHLIGHT).replace("@GRC@", GRAD_TEXT)

_JS = r"""
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("gl-data").textContent);
  var steps = D.steps, n = steps.length, MARKERS = @MARKERS@;
  var NS = "http://www.w3.org/2000/svg";
  var svg = document.querySelector("#gl-diagram svg");
  var nodeEl = {}, edgeEls = {}, gradText = {}, layer = null;
  if (svg) {
    svg.querySelectorAll("g.node").forEach(function (g) {
      var t = g.querySelector("title"); if (t) nodeEl[t.textContent] = g;
    });
    svg.querySelectorAll("g.edge").forEach(function (g) {
      var t = g.querySelector("title"); if (!t) return;
      (edgeEls[t.textContent] = edgeEls[t.textContent] || []).push(g);
    });
    D.rows.forEach(function (row) {
      var g = row.node && nodeEl[row.node]; if (!g) return;
      var texts = g.querySelectorAll("text");
      for (var i = 0; i < texts.length; i++) {
        var fill = (texts[i].getAttribute("fill") || "").toLowerCase();
        if (MARKERS.indexOf(fill) >= 0) { gradText[row.id] = texts[i]; break; }
      }
    });
    var root = svg.querySelector("g.graph") || svg;
    layer = document.createElementNS(NS, "g");
    layer.setAttribute("id", "gl-layer");
    root.appendChild(layer);
  }
  var slider = document.getElementById("gl-slider");
  slider.max = String(Math.max(0, n - 1));
  var cur = -1, timer = null;

  // Geometry needs a laid-out page (a frame may not be yet when its script runs): it is
  // measured when first needed, and again once the page is shown.
  var centred = false;
  function centre() {  // the reserved .grad rows: centred in their node, once measurable
    if (centred) return;
    var ok = true;
    Object.keys(gradText).forEach(function (id) {
      var t = gradText[id];
      if (t.getAttribute("text-anchor") === "middle") return;
      var b = t.getBBox();
      if (!b.width) { ok = false; return; }
      t.setAttribute("text-anchor", "middle");
      t.setAttribute("x", String(b.x + b.width / 2));
    });
    centred = ok;
  }
  function mid(g) {
    if (g._mid) return g._mid;
    var p = g.querySelector("path");
    if (!p || !p.getTotalLength) return null;
    var len = p.getTotalLength();
    if (!len) return null;
    var pt = p.getPointAtLength(len / 2);
    g._mid = [pt.x, pt.y];
    return g._mid;
  }
  function label(g, text, cls, left) {
    var at = mid(g); if (!at || !layer) return;
    var box = document.createElementNS(NS, "g");
    box.setAttribute("class", "gl-val " + cls);
    var r = document.createElementNS(NS, "rect"), t = document.createElementNS(NS, "text");
    t.setAttribute("x", String(left ? at[0] - 6 : at[0] + 6)); t.setAttribute("y", String(at[1] + 3.5));
    if (left) t.setAttribute("text-anchor", "end");
    t.textContent = text;
    box.appendChild(r); box.appendChild(t); layer.appendChild(box);
    var b = t.getBBox();
    if (!b.width) { layer.removeChild(box); return; }
    r.setAttribute("x", String(b.x - 3)); r.setAttribute("y", String(b.y - 1.5));
    r.setAttribute("width", String(b.width + 6)); r.setAttribute("height", String(b.height + 3));
    r.setAttribute("rx", "3");
  }
  function reveal(el, box) {  // scroll box (not the page) so that el is in sight
    var r = el.getBoundingClientRect(), b = box.getBoundingClientRect();
    if (r.top < b.top || r.bottom > b.bottom) box.scrollTop += (r.top - b.top) - (b.height - r.height) / 2;
    if (r.left < b.left || r.right > b.right) box.scrollLeft += (r.left - b.left) - (b.width - r.width) / 2;
  }
  function esc(s) { return String(s).replace(/[&<>"]/g, function (c) { return {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]; }); }

  function show(k) {
    if (!n) { document.getElementById("gl-text").textContent = "No backward step ran."; return; }
    k = Math.max(0, Math.min(n - 1, k | 0));
    cur = k; slider.value = String(k);
    document.body.setAttribute("data-step", String(k));
    centre();
    var s = steps[k], first = k;
    while (first > 0 && steps[first - 1].p === s.p) first--;
    // The nodes: the one running now, the ops that ran before it in this call.
    Object.keys(nodeEl).forEach(function (id) { nodeEl[id].classList.remove("gl-run", "gl-ran"); });
    Object.keys(edgeEls).forEach(function (id) { edgeEls[id].forEach(function (g) { g.classList.remove("gl-sent", "gl-arr"); }); });
    if (layer) while (layer.firstChild) layer.removeChild(layer.firstChild);
    var last = {};
    for (var i = first; i <= k; i++) {
      if (i < k && steps[i].node && nodeEl[steps[i].node] && D.ops.indexOf(steps[i].node) >= 0) nodeEl[steps[i].node].classList.add("gl-ran");
      [["a", "arr"], ["s", "sent"]].forEach(function (kind) {
        var seen = {};
        (steps[i][kind[0]] || []).forEach(function (pair) {
          var nr = seen[pair[0]] = (seen[pair[0]] || 0) + 1;
          last[pair[0] + "#" + nr] = [pair[0], nr - 1, pair[1], i === k ? kind[1] : "past"];
        });
      });
    }
    Object.keys(last).forEach(function (key) {
      var e = last[key], els = edgeEls[e[0]];
      if (!els || !els[e[1]]) return;
      if (e[3] !== "past") els[e[1]].classList.add(e[3] === "sent" ? "gl-sent" : "gl-arr");
      // Of two edges between the same nodes (x * x), the left one has its label on its left.
      var left = els.length > 1 && mid(els[e[1]]) && els.every(function (o) { var p = mid(o); return !p || p[0] >= mid(els[e[1]])[0]; });
      label(els[e[1]], e[2], e[3], left);
    });
    var run = s.node && nodeEl[s.node];
    if (run) {
      run.classList.remove("gl-ran"); run.classList.add("gl-run");
      reveal(run, document.getElementById("gl-diagram"));
    }
    // The .grad of every written tensor as of this step.
    var now = {}, changed = {};
    D.rows.forEach(function (row) { now[row.id] = row.before; });
    for (var j = 0; j <= k; j++) (steps[j].w || []).forEach(function (w) { now[w[0]] = w[1]; if (j === k) changed[w[0]] = 1; });
    var body = "";
    D.rows.forEach(function (row) {
      body += "<tr class='" + (changed[row.id] ? "changed" : "") + "'><td>" + esc(row.name) + (row.kind === "retained" ? " <small>(retain_grad)</small>" : "") +
              "</td><td class='v'>" + esc(now[row.id]) + "</td></tr>";
      var t = gradText[row.id];
      if (t) {
        t.textContent = "grad " + now[row.id];
        t.setAttribute("fill", now[row.id] === "None" ? "#8c8c8c" : (/nan|inf/.test(now[row.id]) ? "@BAD@" : "@GRAD@"));
        t.setAttribute("font-weight", changed[row.id] ? "bold" : "normal");
      }
    });
    document.querySelector("#gl-grads tbody").innerHTML = body || "<tr><td colspan='2'>no .grad was written</td></tr>";
    var hit = document.querySelector("#gl-grads tr.changed");
    if (hit) reveal(hit, document.getElementById("gl-gradbox"));
    document.getElementById("gl-where").textContent =
      "step " + k + " (0 to " + (n - 1) + ") \u00b7 backward() call " + s.p + " (0 to " + (D.passes - 1) + ")";
    document.getElementById("gl-node").textContent = s.n;
    document.getElementById("gl-hook").style.display = s.h ? "inline-block" : "none";
    document.getElementById("gl-text").textContent = s.t + (D.stopped && k === n - 1 ? " After this step the program stopped with the error above." : "");
    var rows = document.querySelectorAll("#gl-steps tbody tr");
    rows.forEach(function (r, i) { r.classList.toggle("now", i === k); });
    try { history.replaceState(null, "", "#step=" + k); } catch (err) { /* a sandboxed frame */ }
  }
  function fromHash() {
    var m = /step=(\d+)/.exec(location.hash || "");
    return m ? parseInt(m[1], 10) : 0;
  }
  function stop() { if (timer) { clearInterval(timer); timer = null; } document.getElementById("gl-play").innerHTML = "&#x25B6; play"; }
  function play() {
    if (timer) { stop(); return; }
    if (cur >= n - 1) show(0);
    document.getElementById("gl-play").innerHTML = "&#x23F8; pause";
    timer = setInterval(function () { if (cur >= n - 1) stop(); else show(cur + 1); }, 1100);
  }
  var table = "";
  steps.forEach(function (s, i) {
    table += "<tr data-k='" + i + "'><td>" + i + "</td><td>" + s.p + "</td><td>" + esc(s.n) + "</td><td class='v'>" +
             esc((s.s || []).map(function (p) { return p[1]; }).join("; ")) + "</td></tr>";
  });
  document.querySelector("#gl-steps tbody").innerHTML = table;
  document.querySelector("#gl-steps tbody").addEventListener("click", function (ev) {
    var tr = ev.target.closest("tr"); if (tr) { stop(); show(parseInt(tr.getAttribute("data-k"), 10)); }
  });
  document.getElementById("gl-first").onclick = function () { stop(); show(0); };
  document.getElementById("gl-prev").onclick = function () { stop(); show(cur - 1); };
  document.getElementById("gl-next").onclick = function () { stop(); show(cur + 1); };
  document.getElementById("gl-play").onclick = play;
  // "fit": the whole diagram in sight when that keeps it readable (at least 55% of its size),
  // else as wide as the page; the button switches to full size and back.
  function fit() {
    if (!svg) return;
    var box = document.getElementById("gl-diagram"), vb = svg.viewBox && svg.viewBox.baseVal;
    if (!vb || !vb.width) return;
    var w = vb.width * 4 / 3, h = vb.height * 4 / 3, W = box.clientWidth - 18, H = window.innerHeight - 110;
    var s = Math.min(1, W / w, Math.max(H, 200) / h);
    if (s < 0.55) s = Math.min(1, W / w);
    if (box.classList.contains("fit")) { svg.style.width = (w * s) + "px"; svg.style.height = (h * s) + "px"; }
    else { svg.style.width = w + "px"; svg.style.height = h + "px"; }
  }
  document.getElementById("gl-fit").onclick = function () {
    document.getElementById("gl-diagram").classList.toggle("fit"); fit(); if (n) show(cur);
  };
  window.addEventListener("resize", fit);
  fit();
  slider.addEventListener("input", function () { stop(); show(parseInt(slider.value, 10)); });
  document.addEventListener("keydown", function (ev) {
    if (ev.target === slider || ev.altKey || ev.ctrlKey || ev.metaKey) return;
    if (ev.key === "ArrowRight" || ev.key === "ArrowDown") { stop(); show(cur + 1); ev.preventDefault(); }
    else if (ev.key === "ArrowLeft" || ev.key === "ArrowUp") { stop(); show(cur - 1); ev.preventDefault(); }
    else if (ev.key === "Home") { stop(); show(0); ev.preventDefault(); }
    else if (ev.key === "End") { stop(); show(n - 1); ev.preventDefault(); }
    else if (ev.key === " ") { play(); ev.preventDefault(); }
  });
  window.addEventListener("hashchange", function () { var k = fromHash(); if (k !== cur) show(k); });
  show(fromHash());
  function again() { centred = false; fit(); if (n) show(cur); }
  if (document.readyState !== "complete") window.addEventListener("load", again);
  if (window.requestAnimationFrame) requestAnimationFrame(function () { requestAnimationFrame(again); });
})();
""".replace("@GRAD@", GRAD_TEXT).replace("@BAD@", NONFINITE)
