"""The explorer page's template, styles and script: a layered layout, module boxes, search, pan and zoom."""

from __future__ import annotations

__all__ = ["PAGE", "CSS", "JS"]

PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>@TITLE@</title>
<style>@CSS@</style>
</head><body data-page="@ID@">
<header><h1>@TITLE@</h1><p class="sub">@SUB@</p>
<div class="tools"><input id="gl-search" type="search" placeholder="search: variable, parameter, op or module name" autocomplete="off" spellcheck="false">
<button id="gl-fit" type="button" title="fit the diagram to the window">fit</button>
<button id="gl-collapse" type="button" title="close every module">collapse all</button>
<button id="gl-expand" type="button" title="open every module">open all</button>
<span class="legend"><i class="lg leaf"></i>leaf <i class="lg rg"></i>requires grad <i class="lg pm"></i>parameter <i class="lg op"></i>op <i class="lg box"></i>module (click to open)</span></div>
</header>@ERROR@
<div class="wrap"><div id="gl-stage"><svg id="gl-svg" xmlns="http://www.w3.org/2000/svg"><defs>
<marker id="gl-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" fill="#666"/></marker>
</defs><g id="gl-view"><g id="gl-frames"></g><g id="gl-edges"></g><g id="gl-nodes"></g></g></svg></div>
<aside id="gl-panel"><div id="gl-matches"></div><div id="gl-info"><p class="hint">Hover a node for its shape, value and gradient; click to keep it here.
Click a blue module box to open it, an open module's title to close it. Drag to pan, wheel to zoom.</p></div></aside></div>
<script id="gl-data" type="application/json">@DATA@</script>
<script>@JS@</script>
</body></html>
"""

CSS = """
* { box-sizing: border-box; }
html, body { height: 100%; }
body { font: 14px/1.4 -apple-system, "Segoe UI", @FONT@, Arial, sans-serif; color:#1d1d1f; margin:0; background:#f6f7f9;
       display:flex; flex-direction:column; }
header { padding: 10px 16px 6px; }
h1 { font-size: 18px; margin: 0; }
.sub { color:#555; font-size: 12px; margin: 1px 0 6px; }
.tools { display:flex; gap:8px; align-items:center; flex-wrap:wrap; font-size:12px; }
#gl-search { width: 340px; padding: 4px 8px; font-size: 13px; border:1px solid #bbb; border-radius:6px; }
button { font-size:12px; padding:3px 9px; border:1px solid #bbb; border-radius:6px; background:#fff; cursor:pointer; }
.legend { color:#444; margin-left: 8px; }
.lg { display:inline-block; width:14px; height:10px; border-radius:3px; vertical-align:-1px; margin:0 3px 0 8px; border:1px solid @PLAIN@; }
.lg.leaf { background:@LEAF@; } .lg.rg { border:2px solid @RG@; background:#fff; }
.lg.pm { border:3px double @PLAIN@; background:@LEAF@; } .lg.op { background:@OPF@; border-color:@OPB@; height:8px; }
.lg.box { background:@BOXF@; border-color:@BOXB@; }
.error { margin: 0 16px 6px; padding: 6px 10px; background:#fdecea; border:1px solid #f5c2bd; border-radius:8px; font-size:13px; }
.wrap { flex:1 1 auto; display:flex; gap:10px; padding: 0 16px 12px; min-height:0; }
#gl-stage { flex:1 1 auto; min-width:0; background:#fff; border:1px solid #dcdfe4; border-radius:10px; overflow:hidden; position:relative; }
#gl-svg { width:100%; height:100%; display:block; cursor:grab; user-select:none; }
#gl-svg.dragging { cursor:grabbing; }
#gl-panel { flex:0 0 330px; background:#fff; border:1px solid #dcdfe4; border-radius:10px; padding:10px 12px; overflow:auto; font-size:13px; }
#gl-panel h3 { font-size:14px; margin:2px 0 6px; word-break:break-all; }
#gl-panel table { border-collapse:collapse; width:100%; }
#gl-panel td { vertical-align:top; padding:2px 4px; border-top:1px solid #eee; word-break:break-word; }
#gl-panel td:first-child { color:#666; white-space:nowrap; width:1%; }
#gl-panel .hint { color:#666; }
#gl-matches:empty { display:none; }
#gl-matches { margin-bottom:10px; padding-bottom:8px; border-bottom:1px solid #ddd; }
#gl-matches a { display:block; color:#1f4fa0; cursor:pointer; text-decoration:none; padding:1px 0; word-break:break-all; }
#gl-matches a:hover { text-decoration:underline; }
.grad { color:@GRAD@; } .released { color:@REL@; font-style:italic; } .bad { color:@BAD@; font-weight:bold; }
.gl-node, .gl-box, .gl-title { cursor:pointer; }
.gl-node text, .gl-box text, .gl-title text { pointer-events:none; }
.gl-node.match > rect.outer, .gl-box.match > rect.outer { stroke:@HL@; stroke-width:3.5; }
.gl-node.sel > rect.outer, .gl-box.sel > rect.outer { stroke:@HL@; stroke-width:3.5; stroke-dasharray:5 3; }
.gl-frame rect { fill:rgba(233,239,249,0.35); stroke:@BOXB@; stroke-dasharray:4 3; }
.gl-frame.match rect { stroke:@HL@; }
path.e { fill:none; stroke:#777; stroke-width:1.1; }
path.e.detach { stroke-dasharray:5 4; stroke:#999; }
"""

JS = r"""
(function () {
"use strict";
const D = JSON.parse(document.getElementById("gl-data").textContent);
const N = D.nodes, M = D.modules, E = D.edges;
const SVG = "http://www.w3.org/2000/svg";
const svg = document.getElementById("gl-svg"), view = document.getElementById("gl-view");
const gFrames = document.getElementById("gl-frames"), gEdges = document.getElementById("gl-edges"), gNodes = document.getElementById("gl-nodes");
const info = document.getElementById("gl-info"), matchesBox = document.getElementById("gl-matches");
const search = document.getElementById("gl-search");
const open = new Set(D.open);
const t0 = performance.now();

// -- the module tree ---------------------------------------------------------------------
const chain = M.map((m, k) => { const c = []; for (let p = k; p >= 0; p = M[p].p) c.unshift(p); return c; });
const producer = new Map(), consumers = new Map();
for (const e of E) {
  if (N[e[0]].k === "o" && N[e[1]].k === "t") producer.set(e[1], e[0]);
  if (N[e[0]].k === "t" && N[e[1]].k === "o") consumers.set(e[0], (consumers.get(e[0]) || 0) + 1);
}
function rep(i) {  // what stands for node i: the outermost closed module around it, else the node
  const s = N[i].s;
  if (s < 0) return "n" + i;
  for (const m of chain[s]) if (!open.has(m)) return "m" + m;
  return "n" + i;
}
function shortName(k) {  // a module's name inside its parent: "attn", "h.0" for a ModuleList entry
  const m = M[k], p = m.p;
  let name = p >= 0 && m.n.startsWith(M[p].n + ".") ? m.n.slice(M[p].n.length + 1) : m.n;
  if (/^\d+$/.test(name) && p >= 0) name = M[p].n.split(".").pop() + "." + name;
  return name;
}
function bytes(b) {
  if (b < 1024) return b + " B";
  const u = ["KiB", "MiB", "GiB", "TiB"]; let x = b, k = -1;
  while (x >= 1024 && k < u.length - 1) { x /= 1024; k++; }
  return x.toFixed(1) + " " + u[k];  // (as graphlens.memory.format_bytes writes it)
}
function plural(n, w) { return n.toLocaleString("en-US") + " " + w + (n === 1 ? "" : "s"); }

// -- text sizes ----------------------------------------------------------------------------
const ctx = document.createElement("canvas").getContext("2d");
const widths = new Map();
function textWidth(text, font) {
  const key = font + "|" + text;
  let w = widths.get(key);
  if (w === undefined) { ctx.font = font; w = ctx.measureText(text).width; widths.set(key, w); }
  return w;
}
const FAMILY = "@FONT@, Arial, sans-serif";
const F_NAME = "bold 12px " + FAMILY, F_ID = "12px " + FAMILY, F_SMALL = "10px " + FAMILY, F_OP = "10px " + FAMILY;
function cut(text, n) { return text.length > n ? "\u2026" + text.slice(text.length - n + 1) : text; }

// -- the scene: items (nodes, closed modules) inside frames (open modules) -----------------
function buildScene() {
  const items = new Map(), root = { key: "root", kind: "f", mod: -1, children: [], ledges: new Map() };
  function frame(k) {
    if (k < 0) return root;
    let f = items.get("f" + k);
    if (!f) {
      f = { key: "f" + k, kind: "f", mod: k, children: [], ledges: new Map() };
      items.set(f.key, f);
      f.parent = frame(M[k].p); f.parent.children.push(f);
    }
    return f;
  }
  const repOf = new Array(N.length);
  for (let i = 0; i < N.length; i++) {
    const r = repOf[i] = rep(i);
    if (items.has(r)) continue;
    const it = r[0] === "n" ? { key: r, kind: "n", node: i } : { key: r, kind: "m", mod: +r.slice(1) };
    items.set(r, it);
    it.parent = it.kind === "n" ? frame(N[i].s) : frame(M[it.mod].p);
    it.parent.children.push(it);
  }
  const drawn = new Map();
  for (const e of E) {
    const a = repOf[e[0]], b = repOf[e[1]];
    if (a === b) continue;
    const key = a + ">" + b;
    if (drawn.has(key)) continue;
    const ia = items.get(a), ib = items.get(b);
    const pa = [], pb = [];
    for (let x = ia; x; x = x.parent) pa.push(x);
    for (let x = ib; x; x = x.parent) pb.push(x);
    const inB = new Set(pb);
    let k = 0; while (!inB.has(pa[k])) k++;
    const lca = pa[k], ca = pa[k - 1], cb = pb[pb.indexOf(lca) - 1];
    const lkey = ca.key + ">" + cb.key;
    if (!lca.ledges.has(lkey)) lca.ledges.set(lkey, { a: ca, b: cb, pts: null });
    drawn.set(key, { a: ia, b: ib, lift: lca.ledges.get(lkey), frame: lca, detach: e[2] === 1 });
  }
  return { root, items, drawn };
}

// -- sizes ---------------------------------------------------------------------------------
function sizeItem(it) {
  if (it.kind === "n") {
    const n = N[it.node];
    if (n.k === "t") {
      // a parameter inside its module's frame: the last two parts of its name say enough
      const nm = n.n !== undefined && (n.f || "").includes("p") && n.s >= 0 ? n.n.split(".").slice(-2).join(".") : n.n;
      it.l1 = nm !== undefined ? cut(nm || '""', 34) : n.i; it.f1 = n.n ? F_NAME : F_ID;
      it.l2 = n.sh;
      it.w = Math.max(textWidth(it.l1, it.f1), textWidth(it.l2, F_SMALL)) + 18; it.h = 34;
    } else {
      it.l1 = cut(n.n, 40); it.w = textWidth(it.l1, F_OP) + 14; it.h = 19;
    }
  } else if (it.kind === "m") {
    const m = M[it.mod];
    it.l1 = shortName(it.mod); it.l2 = m.g ? plural(m.t, "tensor") : plural(m.o, "op") + (m.pm ? " \u00b7 " + plural(m.pm, "param") : "");
    it.l3 = D.memory && m.m ? "saved " + bytes(m.m) : null;
    it.w = Math.max(textWidth(it.l1, F_NAME) + 16, textWidth(it.l2, F_SMALL), it.l3 ? textWidth(it.l3, F_SMALL) : 0) + 22;
    it.h = it.l3 ? 50 : 38;
  }
}
const PAD = 10, HEAD = 26, GAP = 16, LGAP = 30, DUMMY = 8;
function layoutFrame(f) {
  for (const c of f.children) { if (c.kind === "f") layoutFrame(c); else sizeItem(c); }
  const box = sugiyama(f.children, [...f.ledges.values()]);
  f.iw = box.w; f.ih = box.h;
  if (f.kind === "f" && f.mod >= 0) {
    f.title = "\u2212 " + shortName(f.mod);
    f.w = Math.max(box.w, textWidth(f.title, F_NAME) + 10) + 2 * PAD; f.h = box.h + HEAD + PAD;
  }
}

// -- a layered layout (Sugiyama): longest-path layers, barycenter sweeps, balanced placement --
function sugiyama(items, ledges) {
  const n = items.length;
  if (!n) return { w: 0, h: 0 };
  const at = new Map(items.map((it, k) => [it, k]));
  const succ = items.map(() => []), pred = items.map(() => []);
  const seen = new Set();
  for (const le of ledges) {
    const u = at.get(le.a), v = at.get(le.b), key = u * n + v;
    if (u === v || seen.has(key)) continue;
    seen.add(key); succ[u].push(v); pred[v].push(u); le.u = u; le.v = v;
  }
  // break cycles: an iterative depth-first search, back edges point the other way for layering
  const state = new Uint8Array(n), back = new Set();
  for (let s = 0; s < n; s++) {
    if (state[s]) continue;
    const stack = [[s, 0]]; state[s] = 1;
    while (stack.length) {
      const top = stack[stack.length - 1], u = top[0];
      if (top[1] < succ[u].length) {
        const v = succ[u][top[1]++];
        if (state[v] === 1) back.add(u * n + v);
        else if (!state[v]) { state[v] = 1; stack.push([v, 0]); }
      } else { state[u] = 2; stack.pop(); }
    }
  }
  const dsucc = items.map(() => []), dpred = items.map(() => []);
  for (let u = 0; u < n; u++) for (const v of succ[u]) {
    if (back.has(u * n + v)) { dsucc[v].push(u); dpred[u].push(v); } else { dsucc[u].push(v); dpred[v].push(u); }
  }
  // longest-path layers in topological order, then every node that is not a sink moves down
  // to just above its first use (a parameter beside the op that takes it, a mask beside its use)
  const indeg = dpred.map(p => p.length), topo = [];
  for (let u = 0; u < n; u++) if (!indeg[u]) topo.push(u);
  for (let k = 0; k < topo.length; k++) for (const v of dsucc[topo[k]]) if (--indeg[v] === 0) topo.push(v);
  // a tall item (an open module) spans several layers, so that small nodes beside it keep theirs
  const span = items.map(it => it.h <= 54 ? 1 : 1 + Math.ceil((it.h - 54) / 50));
  const L = new Int32Array(n);
  for (const u of topo) for (const v of dsucc[u]) if (L[v] < L[u] + span[u]) L[v] = L[u] + span[u];
  for (let k = topo.length - 1; k >= 0; k--) {
    const u = topo[k];
    if (dsucc[u].length) { let m = Infinity; for (const v of dsucc[u]) m = Math.min(m, L[v]); if (m - span[u] > L[u]) L[u] = m - span[u]; }
  }
  let lo = Infinity, hi = -Infinity;
  for (let u = 0; u < n; u++) { lo = Math.min(lo, L[u]); hi = Math.max(hi, L[u] + span[u] - 1); }
  // the vertices: items (a tall one with a ghost in each further layer it spans), then one
  // dummy per layer crossed by a longer edge
  const V = items.map((it, k) => ({ it, w: it.w, h: span[k] > 1 ? 0 : it.h, l: L[k] - lo, up: [], down: [], full: it.h }));
  const last = V.slice();
  for (let k = 0; k < n; k++) for (let s = 1; s < span[k]; s++) {
    const g = { it: null, ghost: V[k], w: V[k].w, h: 0, l: V[k].l + s, up: [last[k]], down: [] };
    last[k].down.push(g); V.push(g); last[k] = g;
  }
  for (const le of ledges) {
    if (le.u === undefined) continue;
    let u = le.u, v = le.v;
    const rev = back.has(u * n + v);
    if (rev) { const t = u; u = v; v = t; }
    let prev = last[u];
    const dums = [];
    for (let l = last[u].l + 1; l < V[v].l; l++) {
      const d = { it: null, w: DUMMY, h: 0, l, up: [prev], down: [] };
      prev.down.push(d); V.push(d); dums.push(d); prev = d;
    }
    prev.down.push(V[v]); V[v].up.push(prev);
    le.dums = rev ? dums.reverse() : dums; le.rev = rev;
  }
  const layers = [];
  for (let l = 0; l <= hi - lo; l++) layers.push([]);
  const order = topo.length === n ? topo : items.map((_, k) => k);
  const placed = new Set();
  for (const u of order) { layers[V[u].l].push(V[u]); placed.add(V[u]); }
  for (const v of V) if (!placed.has(v)) layers[v.l].push(v);
  layers.forEach(layer => layer.forEach((v, k) => { v.o = k; }));
  // barycenter sweeps down and up
  function sweep(layer, side) {
    for (const v of layer) {
      const nb = v[side];
      v.b = nb.length ? nb.reduce((s, x) => s + x.o, 0) / nb.length : v.o;
    }
    layer.sort((a, b) => a.b - b.b || a.o - b.o);
    layer.forEach((v, k) => { v.o = k; });
  }
  const sweeps = V.length > 6000 ? 2 : 4;
  for (let s = 0; s < sweeps; s++) {
    for (let l = 1; l < layers.length; l++) sweep(layers[l], "up");
    for (let l = layers.length - 2; l >= 0; l--) sweep(layers[l], "down");
  }
  // x: pack, then pull each vertex toward its neighbours while keeping order and spacing
  for (const layer of layers) {
    let x = 0;
    for (const v of layer) { v.x = x + v.w / 2; x += v.w + GAP; }
  }
  function place(layer, side) {
    const m = layer.length; if (!m) return;
    const want = layer.map(v => {
      if (side === "tie") return v.x;
      const nb = side === "both" ? v.up.concat(v.down) : v[side];
      return nb.length ? nb.reduce((s, x) => s + x.x, 0) / nb.length : v.x;
    });
    const a = new Float64Array(m), b = new Float64Array(m);
    for (let k = 0; k < m; k++) a[k] = k ? Math.max(want[k], a[k - 1] + (layer[k - 1].w + layer[k].w) / 2 + GAP) : want[k];
    for (let k = m - 1; k >= 0; k--) b[k] = k < m - 1 ? Math.min(want[k], b[k + 1] - (layer[k + 1].w + layer[k].w) / 2 - GAP) : want[k];
    for (let k = 0; k < m; k++) layer[k].x = (a[k] + b[k]) / 2;
  }
  for (let s = 0; s < 4; s++) {
    for (let l = 1; l < layers.length; l++) place(layers[l], "up");
    for (let l = layers.length - 2; l >= 0; l--) place(layers[l], "down");
  }
  for (const layer of layers) place(layer, "both");
  for (let s = 0; s < 3; s++) {  // a tall item and its ghosts share one x
    for (const v of V) if (v.ghost) v.x = v.ghost.x;
    for (const layer of layers) place(layer, "tie");
  }
  // y: one band per layer; a tall item's last band grows to hold it
  const top = new Float64Array(layers.length), band = layers.map(layer => layer.reduce((h, v) => Math.max(h, v.h), 0));
  const ends = layers.map(() => []);
  for (let k = 0; k < n; k++) if (span[k] > 1) ends[last[k].l].push(V[k]);
  let y = 0, minx = Infinity, maxx = -Infinity;
  for (let l = 0; l < layers.length; l++) {
    top[l] = y;
    for (const v of ends[l]) band[l] = Math.max(band[l], top[v.l] + v.full - y);
    y += band[l] + LGAP;
  }
  for (const layer of layers) for (const v of layer) {
    v.y = v.it && v.full !== v.h ? top[v.l] + v.full / 2 : top[v.l] + band[v.l] / 2;
    minx = Math.min(minx, v.x - v.w / 2); maxx = Math.max(maxx, v.x + v.w / 2);
  }
  for (const v of V) {
    v.x -= minx;
    if (v.it) { v.it.cx = v.x; v.it.cy = v.y; }
  }
  for (const le of ledges) if (le.dums) le.pts = le.dums.map(d => [d.x, d.y]);
  return { w: maxx - minx, h: Math.max(0, y - LGAP) };
}

// -- absolute positions ---------------------------------------------------------------------
function place(f, ox, oy) {  // f's content origin at (ox, oy)
  f.ox = ox; f.oy = oy;
  for (const c of f.children) {
    c.ax = ox + c.cx; c.ay = oy + c.cy;
    if (c.kind === "f") place(c, c.ax - c.w / 2 + PAD, c.ay - c.h / 2 + HEAD);
  }
}

// -- drawing ----------------------------------------------------------------------------------
function el(tag, attrs, parent) {
  const e = document.createElementNS(SVG, tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (parent) parent.appendChild(e);
  return e;
}
function text(parent, x, y, s, font, fill) {
  const t = el("text", { x, y, "text-anchor": "middle", "dominant-baseline": "central", fill: fill || "#1d1d1f" }, parent);
  t.style.font = font; t.textContent = s; return t;
}
let scene = null, selected = null, pinned = false, query = "", hits = [];
const elOf = new Map();
function draw() {
  scene = buildScene();
  layoutFrame(scene.root);
  place(scene.root, 20, 20);
  gFrames.textContent = ""; gEdges.textContent = ""; gNodes.textContent = ""; elOf.clear();
  const frames = [];
  (function walk(f) { for (const c of f.children) if (c.kind === "f") { frames.push(c); walk(c); } })(scene.root);
  for (const f of frames) {
    const g = el("g", { class: "gl-frame", "data-mod": f.mod }, gFrames);
    el("rect", { x: f.ax - f.w / 2, y: f.ay - f.h / 2, width: f.w, height: f.h, rx: 8 }, g);
    const t = el("g", { class: "gl-title", "data-mod": f.mod }, g);
    el("rect", { x: f.ax - f.w / 2, y: f.ay - f.h / 2, width: f.w, height: HEAD, rx: 8, fill: "transparent", stroke: "none" }, t);
    const tt = el("text", { x: f.ax - f.w / 2 + 8, y: f.ay - f.h / 2 + 11, "dominant-baseline": "central", fill: "@BOXB@" }, t);
    tt.style.font = F_NAME; tt.textContent = f.title;
    elOf.set(f.key, g);
  }
  for (const d of scene.drawn.values()) {
    const a = d.a, b = d.b, pts = [[a.ax, a.ay + a.h / 2]];
    if (d.lift.pts && !d.lift.rev) for (const p of d.lift.pts) pts.push([d.frame.ox + p[0], d.frame.oy + p[1]]);
    pts.push([b.ax, b.ay - b.h / 2]);
    let s = "M" + pts[0][0].toFixed(1) + "," + pts[0][1].toFixed(1);
    for (let k = 1; k < pts.length; k++) {
      const p = pts[k - 1], q = pts[k], my = ((p[1] + q[1]) / 2).toFixed(1);
      s += "C" + p[0].toFixed(1) + "," + my + " " + q[0].toFixed(1) + "," + my + " " + q[0].toFixed(1) + "," + q[1].toFixed(1);
    }
    el("path", { d: s, class: d.detach ? "e detach" : "e", "marker-end": "url(#gl-arrow)" }, gEdges);
  }
  for (const it of scene.items.values()) {
    if (it.kind === "f") continue;
    const x = it.ax - it.w / 2, y = it.ay - it.h / 2;
    if (it.kind === "m") {
      const g = el("g", { class: "gl-box", "data-mod": it.mod }, gNodes);
      el("rect", { class: "outer", x, y, width: it.w, height: it.h, rx: 7, fill: "@BOXF@", stroke: "@BOXB@", "stroke-width": 1.5 }, g);
      text(g, it.ax - 6, y + 12, it.l1, F_NAME);
      text(g, it.ax, y + 26, it.l2, F_SMALL, "#444");
      if (it.l3) text(g, it.ax, y + 39, it.l3, F_SMALL, "#7a4a00");
      text(g, x + it.w - 10, y + 12, "+", F_NAME, "@BOXB@");
      elOf.set(it.key, g);
      continue;
    }
    const n = N[it.node];
    const g = el("g", { class: "gl-node", "data-node": it.node, "data-id": n.i }, gNodes);
    if (n.k === "t") {
      const f = n.f || "", rg = f.includes("r");
      el("rect", { class: "outer", x, y, width: it.w, height: it.h, rx: 6, fill: f.includes("l") ? "@LEAF@" : "@NONLEAF@",
                   stroke: rg ? "@RG@" : "@PLAIN@", "stroke-width": rg ? 3 : 1 }, g);
      if (f.includes("p")) el("rect", { x: x + 3.5, y: y + 3.5, width: it.w - 7, height: it.h - 7, rx: 4, fill: "none", stroke: rg ? "@RG@" : "@PLAIN@", "stroke-width": 1 }, g);
      text(g, it.ax, y + 12, it.l1, it.f1, n.n ? "#1d1d1f" : "#777");
      text(g, it.ax, y + 25, it.l2, F_SMALL, "#444");
    } else {
      el("rect", { class: "outer", x, y, width: it.w, height: it.h, rx: 6, fill: "@OPF@", stroke: "@OPB@", "stroke-width": 1 }, g);
      text(g, it.ax, it.ay, it.l1, F_OP, "#333");
    }
    elOf.set(it.key, g);
  }
  mark();
}

// -- search -------------------------------------------------------------------------------------
function nodeText(n) { return [n.n, n.i, n.fw, n.bw].filter(Boolean).join("\n").toLowerCase(); }
const haystack = N.map(nodeText), modHay = M.map(m => m.n.toLowerCase());
function find(q) {
  const out = [];
  if (!q) return out;
  for (let k = 0; k < M.length; k++) if (modHay[k].includes(q)) out.push(["m", k]);
  for (let i = 0; i < N.length; i++) if (haystack[i].includes(q)) out.push(["n", i]);
  out.sort((a, b) => rank(a) - rank(b));
  return out;
}
function rank(h) {  // exact names first, then parameters and named tensors, then the rest
  const name = (h[0] === "m" ? M[h[1]].n : (N[h[1]].n || N[h[1]].i)).toLowerCase();
  if (name === query || name.endsWith("." + query)) return 0;
  if (h[0] === "n" && N[h[1]].k === "t" && N[h[1]].n) return 1;
  return h[0] === "m" ? 2 : 3;
}
function mark() {
  for (const g of gNodes.querySelectorAll(".match")) g.classList.remove("match");
  for (const g of gFrames.querySelectorAll(".match")) g.classList.remove("match");
  for (const g of gNodes.querySelectorAll(".sel")) g.classList.remove("sel");
  for (const h of hits) {
    const key = h[0] === "n" ? rep(h[1]) : visibleModule(h[1]);
    const g = key && (elOf.get(key) || elOf.get("f" + h[1]));
    if (g) g.classList.add("match");
  }
  if (selected) { const g = elOf.get(selected); if (g) g.classList.add("sel"); }
  svg.setAttribute("data-matches", hits.length);
}
function visibleModule(k) {  // what stands for module k: itself (box or frame), or the closed module around it
  for (const m of chain[k]) if (!open.has(m)) return "m" + m;
  return "f" + k;
}
function listMatches() {
  matchesBox.textContent = "";
  if (!query) return;
  const head = document.createElement("div");
  head.textContent = hits.length ? plural(hits.length, "match") + (hits.length > 50 ? " (first 50 listed)" : "") + ": Enter opens them" : "no match for \u201c" + query + "\u201d";
  matchesBox.appendChild(head);
  for (const h of hits.slice(0, 50)) {
    const a = document.createElement("a");
    a.textContent = h[0] === "m" ? "module " + M[h[1]].n : (N[h[1]].k === "t" ? (N[h[1]].n || N[h[1]].i) + "  " + N[h[1]].sh : N[h[1]].n);
    a.addEventListener("click", () => reveal([h], true));
    matchesBox.appendChild(a);
  }
}
function reveal(list, focus) {  // open the modules around each hit, redraw, centre on the first
  for (const h of list) {
    const c = h[0] === "n" ? (N[h[1]].s >= 0 ? chain[N[h[1]].s] : []) : chain[h[1]].slice(0, -1);
    for (const m of c) open.add(m);
  }
  draw();
  if (list.length) {
    const h = list[0], key = h[0] === "n" ? "n" + h[1] : (open.has(h[1]) ? "f" + h[1] : "m" + h[1]);
    const it = scene.items.get(key);
    if (it && focus) { centre(it); select(key); }
  }
}
search.addEventListener("input", () => { query = search.value.trim().toLowerCase(); hits = find(query); mark(); listMatches(); });
search.addEventListener("keydown", ev => {
  if (ev.key === "Enter" && hits.length) reveal(hits.length <= 25 ? hits : hits.slice(0, 1), true);
});

// -- details ---------------------------------------------------------------------------------
function esc(s) { return String(s).replace(/[&<>"]/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]); }
function rows(list) { return "<table>" + list.filter(r => r[1] !== undefined && r[1] !== null && r[1] !== "").map(r => "<tr><td>" + esc(r[0]) + "</td><td" + (r[2] ? " class='" + r[2] + "'" : "") + ">" + (r[3] ? r[1] : esc(r[1])) + "</td></tr>").join("") + "</table>"; }
function moduleName(s) { return s >= 0 ? M[s].n : "(no module)"; }
function details(key) {
  if (!key) return;
  if (key[0] === "m" || key[0] === "f") {
    const k = +key.slice(1), m = M[k];
    info.innerHTML = "<h3>module " + esc(m.n) + "</h3>" + rows([["ops", m.o], ["tensors", m.t], ["parameters", m.pm],
      ["saved for backward", D.memory ? bytes(m.m || 0) + " (what its ops' saved tensors keep alive until backward)" : null],
      ["", open.has(k) ? "open: click its title to close it" : "closed: click it to open it"]]);
    return;
  }
  const i = +key.slice(1), n = N[i], f = n.f || "";
  if (n.k === "t") {
    const kind = f.includes("p") ? "parameter (leaf)" : f.includes("l") ? "leaf" : "non-leaf";
    const p = producer.get(i);
    info.innerHTML = "<h3>" + esc(n.n !== undefined ? n.n || '""' : n.i) + "</h3>" + rows([
      ["id", n.i], ["kind", kind], ["shape", n.sh.replace(/^shape /, "")], ["dtype", n.dt], ["device", n.dv],
      ["requires_grad", f.includes("r") ? "True" : "False"], ["retains_grad", f.includes("k") ? "True" : null],
      ["value", n.v, n.vn ? "bad" : ""],
      ["grad", n.g === undefined ? "None" : n.g + (n.gr ? " (flowed in backward, then released)" : ""), n.gr ? "released" : "grad"],
      ["made by", p !== undefined ? N[p].n : null], ["used by", consumers.has(i) ? plural(consumers.get(i), "op") : null],
      ["module", moduleName(n.s) + (n.a ? " (drawn there: it serves that module; it ran outside every module)" : "")], ["no_grad", n.rg], ["line", n.ln !== undefined ? n.ln + (n.c ? ": " + n.c : "") : null],
      ...(n.no || []).map(t => ["note", t])]);
  } else {
    info.innerHTML = "<h3>" + esc(n.n) + "</h3>" + rows([
      ["id", n.i], ["forward", n.fw], ["backward node", n.bw || "none (no input required grad)"], ["module", moduleName(n.s) + (n.a ? " (drawn there: it serves that module; it ran outside every module)" : "")],
      ["saved tensors", n.sv ? n.sv.map(esc).join("<br>") : "none", "", 1],
      ["saved bytes", D.memory && n.m !== undefined ? bytes(n.m) + " kept alive until backward" : null],
      ["no_grad", n.rg], ["line", n.ln !== undefined ? n.ln + (n.c ? ": " + n.c : "") : null],
      ...(n.no || []).map(t => ["note", t])]);
  }
}
function select(key) { selected = key; pinned = true; details(key); mark(); }

// -- pan and zoom ------------------------------------------------------------------------------
let tx = 0, ty = 0, k = 1, drag = null, moved = false;
function apply() { view.setAttribute("transform", "translate(" + tx.toFixed(1) + "," + ty.toFixed(1) + ") scale(" + k.toFixed(4) + ")"); }
function fit() {
  const r = svg.getBoundingClientRect(), w = scene.root.iw + 40, h = scene.root.ih + 40;
  // the whole diagram when it fits at a readable scale, else its top at a readable scale
  k = Math.max(Math.min(1, r.width / w, r.height / h), Math.min(0.85, r.width / w)); if (!(k > 0)) k = 1;
  tx = Math.max(0, (r.width - w * k) / 2); ty = Math.max(0, (r.height - h * k) / 2); apply();
}
function centre(it) {
  const r = svg.getBoundingClientRect();
  if (k < 0.6) k = 0.9;
  tx = r.width / 2 - it.ax * k; ty = r.height / 2 - it.ay * k; apply();
}
svg.addEventListener("mousedown", ev => { drag = [ev.clientX, ev.clientY, tx, ty]; moved = false; });
window.addEventListener("mousemove", ev => {
  if (!drag) return;
  const dx = ev.clientX - drag[0], dy = ev.clientY - drag[1];
  if (!moved && Math.abs(dx) + Math.abs(dy) > 3) { moved = true; svg.classList.add("dragging"); }
  if (moved) { tx = drag[2] + dx; ty = drag[3] + dy; apply(); }
});
window.addEventListener("mouseup", () => { drag = null; svg.classList.remove("dragging"); });
svg.addEventListener("wheel", ev => {
  ev.preventDefault();
  const r = svg.getBoundingClientRect(), px = ev.clientX - r.left, py = ev.clientY - r.top;
  const nk = Math.min(4, Math.max(0.02, k * Math.exp(-ev.deltaY * 0.0015)));
  tx = px - (px - tx) * nk / k; ty = py - (py - ty) * nk / k; k = nk; apply();
}, { passive: false });

// -- clicks and hovers ---------------------------------------------------------------------------
function keyOf(target) {
  const g = target.closest(".gl-node, .gl-box, .gl-title");
  if (!g) return null;
  if (g.classList.contains("gl-node")) return "n" + g.getAttribute("data-node");
  return (g.classList.contains("gl-box") ? "m" : "f") + g.getAttribute("data-mod");
}
function toggle(key) {  // open a closed module / close an open one, keeping it where it was on screen
  const kmod = +key.slice(1), before = scene.items.get(key);
  const sx = before.ax - before.w / 2, sy = before.ay - before.h / 2;
  if (key[0] === "m") open.add(kmod); else open.delete(kmod);
  draw();
  const after = scene.items.get((key[0] === "m" ? "f" : "m") + kmod);
  if (after) { tx += (sx - (after.ax - after.w / 2)) * k; ty += (sy - (after.ay - after.h / 2)) * k; apply(); }
}
svg.addEventListener("click", ev => {
  if (moved) return;
  const key = keyOf(ev.target);
  if (!key) { pinned = false; selected = null; mark(); return; }
  if (key[0] === "n") select(key); else { toggle(key); select(key[0] === "m" ? "f" + key.slice(1) : "m" + key.slice(1)); }
});
svg.addEventListener("mouseover", ev => { const key = keyOf(ev.target); if (key && !pinned) details(key); });
document.getElementById("gl-fit").addEventListener("click", fit);
document.getElementById("gl-collapse").addEventListener("click", () => { open.clear(); draw(); fit(); });
document.getElementById("gl-expand").addEventListener("click", () => { M.forEach((_, m) => open.add(m)); draw(); fit(); });
document.addEventListener("keydown", ev => { if (ev.key === "/" && document.activeElement !== search) { ev.preventDefault(); search.focus(); } });

draw();
fit();
// when the page was drawn, in ms since navigation began (and how long the script took): for the curious and the tests
document.body.setAttribute("data-ready", performance.now().toFixed(0));
document.body.setAttribute("data-script-ms", (performance.now() - t0).toFixed(0));
})();
"""
