"""The replay page's stylesheet, markup and script (graphlens.render.replay_html fills them in)."""

from __future__ import annotations

from .style import GRAD_TEXT, HIGHLIGHT, NONFINITE

__all__ = ["CSS", "PAGE", "JS"]

CSS = """
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
.modes { display:flex; gap:10px; align-items:center; font-size: 13px; color:#333; margin-top: 8px; flex-wrap: wrap; }
.modes label { cursor:pointer; }
#gl-by[hidden] { display:none; }
#gl-inside { font-size: 12px; color:#444; margin: 2px 0 8px; line-height: 1.6; }
#gl-inside .gl-jump { font-family: ui-monospace, Menlo, Consolas, monospace; cursor:pointer; color:#1f5fa8; margin-right: 8px; white-space: nowrap; }
#gl-inside .gl-jump:hover { text-decoration: underline; }
"""

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>@TITLE@</title>
<style>@CSS@</style>
</head>
<body data-page="@ID@">
<header><h1>@TITLE@</h1><p class="sub" id="gl-mods">@MODS@</p>
<p class="sub">@SUB@ Steps count from 1. Keys: &larr; &rarr; step, space plays, Home / End.</p></header>
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
<div class="modes">
<span id="gl-by" class="modes" hidden><label><input type="radio" name="gl-by" value="module" id="gl-by-module"> by module</label>
<label><input type="radio" name="gl-by" value="step" id="gl-by-step"> by step</label>
<label title="how many dotted parts of the module names make one module">depth <select id="gl-depth"></select></label></span>
<label title="also label the edges of the earlier steps of this backward call"><input type="checkbox" id="gl-trail"> trail</label>
</div>
<input id="gl-slider" type="range" min="0" max="0" value="0" aria-label="step">
<div id="gl-where"></div>
<div id="gl-node"></div>
<div id="gl-hook">a hook of the program changed the gradient that arrived</div>
<p id="gl-text"></p>
<div id="gl-inside"></div>
<div id="gl-gradbox"><table id="gl-grads"><thead><tr><th>tensor</th><th>.grad as of this step</th></tr></thead><tbody></tbody></table></div>
<div class="key"><span style="border-color:@HLC@"></span>sent by what runs now
&nbsp; <span style="border-color:@GRC@"></span>arrived at it
&nbsp; <i style="color:#8c8c8c">grey italics</i> (trail): used earlier in this call and released</div>
<details><summary>all steps</summary><table id="gl-steps"><thead></thead><tbody></tbody></table></details>
</aside>
</div>
<script id="gl-data" type="application/json">@DATA@</script>
<script>@JS@</script>
</body>
</html>
""".replace("@HLC@", HIGHLIGHT).replace("@GRC@", GRAD_TEXT)

JS = r"""
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("gl-data").textContent);
  var MARKERS = @MARKERS@, depth = D.levels ? String(D.depth) : null;
  var MODS = depth && D.levels[depth].length ? D.levels[depth] : null;
  var NS = "http://www.w3.org/2000/svg";
  var svg = document.querySelector("#gl-diagram svg");
  var nodeEl = {}, edgeEls = {}, gradText = {}, layer = null;
  if (D.passes > 1) document.querySelector("#gl-grads th").textContent = "tensor (written in this backward() call)";
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
  var slider = document.getElementById("gl-slider"), trailBox = document.getElementById("gl-trail");
  // mode "step": one engine node per step (D.steps); "module": one run inside one module (D.mods).
  var mode = "step", list = D.steps, n = list.length, cur = -1, timer = null;

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
  function esc(s) { return String(s).replace(/[&<>"']/g, function (c) { return {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]; }); }
  function running(s) { return s.nodes || (s.node ? [s.node] : []); }
  function span(s) { return s.r[0] === s.r[1] ? "engine step " + (s.r[0] + 1) : "engine steps " + (s.r[0] + 1) + "\u2013" + (s.r[1] + 1); }

  function show(k) {
    if (!n) { document.getElementById("gl-text").textContent = "No backward step ran."; return; }
    k = Math.max(0, Math.min(n - 1, k | 0));
    cur = k; slider.value = String(k);
    document.body.setAttribute("data-step", String(k + 1));
    document.body.setAttribute("data-mode", mode);
    centre();
    var s = list[k], first = k, trail = trailBox.checked;
    while (first > 0 && list[first - 1].p === s.p) first--;
    // The nodes: the ones running now, the ops (and module boxes) that ran before them in this call.
    Object.keys(nodeEl).forEach(function (id) { nodeEl[id].classList.remove("gl-run", "gl-ran"); });
    Object.keys(edgeEls).forEach(function (id) { edgeEls[id].forEach(function (g) { g.classList.remove("gl-sent", "gl-arr"); }); });
    if (layer) while (layer.firstChild) layer.removeChild(layer.firstChild);
    var last = {};
    for (var i = first; i <= k; i++) {
      if (i < k) running(list[i]).forEach(function (id) { if (nodeEl[id] && D.ops.indexOf(id) >= 0) nodeEl[id].classList.add("gl-ran"); });
      if (i < k && !trail) continue;  // only the current step's edges, unless the trail is on
      [["a", "arr"], ["s", "sent"]].forEach(function (kind) {
        var seen = {};
        (list[i][kind[0]] || []).forEach(function (pair) {
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
    var shown = null;
    running(s).forEach(function (id) {
      var g = nodeEl[id]; if (!g) return;
      g.classList.remove("gl-ran"); g.classList.add("gl-run");
      if (!shown) shown = g;
    });
    if (shown) reveal(shown, document.getElementById("gl-diagram"));
    // The .grad of every written tensor as of this step.
    var now = {}, changed = {};
    D.rows.forEach(function (row) { now[row.id] = row.before; });
    for (var j = 0; j <= k; j++) (list[j].w || []).forEach(function (w) { now[w[0]] = w[1]; if (j === k) changed[w[0]] = 1; });
    var body = "";
    D.rows.forEach(function (row) {
      // (of several backward calls, the table lists what the current one writes: a training loop's
      // parameters, a new version after every update, would otherwise be listed once a step)
      if (D.passes < 2 || row.ps.indexOf(s.p) >= 0)
        body += "<tr class='" + (changed[row.id] ? "changed" : "") + "'><td>" + esc(row.name) + (row.kind === "retained" ? " <small>(retain_grad)</small>" : "") +
                "</td><td class='v'>" + esc(now[row.id]) + "</td></tr>";
      var t = gradText[row.id];
      if (t) {
        t.textContent = "grad " + now[row.id];
        t.setAttribute("fill", now[row.id] === "None" ? "#8c8c8c" : (/nan|inf/.test(now[row.id]) ? "@BAD@" : "@GRAD@"));
        t.setAttribute("font-weight", changed[row.id] ? "bold" : "normal");
      }
    });
    document.querySelector("#gl-grads tbody").innerHTML = body || "<tr><td colspan='2'>no .grad is written" + (D.passes > 1 ? " in this backward() call" : "") + "</td></tr>";
    var hit = document.querySelector("#gl-grads tr.changed");
    if (hit) reveal(hit, document.getElementById("gl-gradbox"));
    var call = " \u00b7 backward() call " + (s.p + 1) + " of " + D.passes;
    document.getElementById("gl-where").textContent = mode === "module"
      ? "module step " + (k + 1) + " of " + n + " \u00b7 " + span(s) + " of " + D.steps.length + call
      : "step " + (k + 1) + " of " + n + call;
    document.getElementById("gl-node").textContent = mode === "module" ? s.m : s.n;
    document.getElementById("gl-hook").style.display = s.h ? "inline-block" : "none";
    var lastOne = mode === "module" ? s.r[1] === D.steps.length - 1 : k === n - 1;
    document.getElementById("gl-text").textContent = s.t + (D.stopped && lastOne ? " After this step the program stopped with the error above." : "");
    var inside = "";
    if (mode === "module") {
      var most = 40;
      for (var e = s.r[0]; e <= s.r[1] && e < s.r[0] + most; e++) inside += "<span class='gl-jump' data-e='" + e + "'>" + (e + 1) + " " + esc(D.steps[e].n) + "</span> ";
      if (s.r[1] - s.r[0] + 1 > most) inside += "\u2026 " + (s.r[1] - s.r[0] + 1 - most) + " more";
      inside = "<b>inside</b> (click one to step through it node by node): " + inside;
    }
    document.getElementById("gl-inside").innerHTML = inside;
    var rows = document.querySelectorAll("#gl-steps tbody tr");
    rows.forEach(function (r, i) { r.classList.toggle("now", i === k); });
    var hash = "#" + mode + "=" + (k + 1) + (mode === "module" && depth !== String(D.depth) ? "&depth=" + depth : "");
    try { history.replaceState(null, "", hash); } catch (err) { /* a sandboxed frame */ }
  }
  function table() {  // the "all steps" list of the current mode, numbered from 1
    var head = mode === "module" ? "<tr><th>step</th><th>call</th><th>module</th><th>engine steps</th></tr>"
                                 : "<tr><th>step</th><th>call</th><th>node</th><th>what it sent</th></tr>";
    var body = "";
    list.forEach(function (s, i) {
      body += "<tr data-k='" + i + "'><td>" + (i + 1) + "</td><td>" + (s.p + 1) + "</td><td>" + esc(mode === "module" ? s.m : s.n) + "</td><td class='v'>" +
              esc(mode === "module" ? span(s).replace("engine step ", "").replace("engine steps ", "")
                                    : (s.s || []).map(function (p) { return p[1]; }).join("; ")) + "</td></tr>";
    });
    document.querySelector("#gl-steps thead").innerHTML = head;
    document.querySelector("#gl-steps tbody").innerHTML = body;
  }
  function engineStep() { return cur < 0 ? -1 : (mode === "module" ? list[cur].r[0] : cur); }
  function setMode(m, d) {  // by step or by module (at depth d): the position stays on the same engine step
    var e = engineStep();
    if (d && D.levels && D.levels[d]) { depth = d; MODS = D.levels[d]; }
    mode = m === "module" && MODS ? "module" : "step";
    list = mode === "module" ? MODS : D.steps; n = list.length;
    slider.max = String(Math.max(0, n - 1));
    document.getElementById("gl-by-" + mode).checked = true;
    if (depth) document.getElementById("gl-depth").value = depth;
    table();
    if (e < 0) return;
    cur = 0;
    if (mode === "step") { cur = e; return; }
    for (var i = 0; i < n; i++) if (list[i].r[0] <= e && e <= list[i].r[1]) { cur = i; return; }
  }
  function fromHash() {  // "#step=N", "#module=N" or "#module=N&depth=D" (N from 1); else the page's default
    var h = location.hash || "", m = /(step|module)=(\d+)/.exec(h), d = /depth=(\d+)/.exec(h);
    if (!m) return [D.by === "module" && MODS ? "module" : "step", 0, null];
    return [m[1], Math.max(0, parseInt(m[2], 10) - 1), d ? d[1] : null];
  }
  function go(where) { cur = -1; setMode(where[0], where[2] || (D.levels ? String(D.depth) : null)); show(where[1]); }
  function stop() { if (timer) { clearInterval(timer); timer = null; } document.getElementById("gl-play").innerHTML = "&#x25B6; play"; }
  function play() {
    if (timer) { stop(); return; }
    if (cur >= n - 1) show(0);
    document.getElementById("gl-play").innerHTML = "&#x23F8; pause";
    timer = setInterval(function () { if (cur >= n - 1) stop(); else show(cur + 1); }, 1100);
  }
  if (MODS) {
    document.getElementById("gl-by").hidden = false;
    document.getElementById("gl-depth").innerHTML = Object.keys(D.levels).sort(function (a, b) { return a - b; }).map(function (d) {
      return "<option value='" + d + "'>" + d + " (" + D.levels[d].length + ")</option>";
    }).join("");
  }
  document.querySelectorAll("input[name=gl-by]").forEach(function (r) {
    r.addEventListener("change", function () { if (r.checked) { stop(); setMode(r.value); show(cur); } });
  });
  document.getElementById("gl-depth").addEventListener("change", function (ev) { stop(); setMode("module", ev.target.value); show(cur); });
  trailBox.addEventListener("change", function () { if (n) show(cur); });
  document.getElementById("gl-inside").addEventListener("click", function (ev) {
    var j = ev.target.closest(".gl-jump"); if (j) { stop(); go(["step", parseInt(j.getAttribute("data-e"), 10)]); }
  });
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
  window.addEventListener("hashchange", function () { var h = fromHash(); if (h[0] !== mode || h[1] !== cur || (h[2] && h[2] !== depth)) go(h); });
  go(fromHash());
  function again() { centred = false; fit(); if (n) show(cur); }
  if (document.readyState !== "complete") window.addEventListener("load", again);
  if (window.requestAnimationFrame) requestAnimationFrame(function () { requestAnimationFrame(again); });
})();
""".replace("@GRAD@", GRAD_TEXT).replace("@BAD@", NONFINITE)
