"""The tour: one self-contained HTML page with every claim of the article, checked live."""

from __future__ import annotations

import datetime as _dt
import html
import platform
import sys
from pathlib import Path
from typing import Callable, Iterable, TextIO

import torch

import graphlens

from . import __version__, claims
from .charts import CHARTS
from .claims.registry import ARTICLE
from .claims.status import STATUS, STATUSES
from .graph import Graph

__all__ = ["SECTION_TITLES", "REPLAYS", "build_page", "write_tour", "replay_html", "nonfinite_html"]

#: The article's sections, in order, with the titles the tour gives them.
SECTION_TITLES = {
    "intro": "The graph is built as the forward pass runs",
    "1": "Leaf nodes",
    "2": "requires_grad",
    "3": "detach()",
    "4": "zero_grad() and gradient accumulation",
    "5": "retain_grad()",
    "6": "torch.no_grad()",
    "7": "The optimizer",
}

_CSS = """
:root { @STATUS_COLORS@ }
* { box-sizing: border-box; }
body { font: 16px/1.5 -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color:#1d1d1f;
       margin:0; background:#f6f7f9; }
header, main, footer { max-width: 980px; margin: 0 auto; padding: 0 20px; }
header { padding-top: 28px; }
h1 { font-size: 28px; margin: 0 0 4px; }
h2 { font-size: 22px; margin: 40px 0 8px; padding-top: 8px; border-top: 1px solid #dcdfe4; }
h3 { font-size: 15px; margin: 0; font-family: ui-monospace, Menlo, Consolas, monospace; }
.sub { color:#555; margin: 0 0 14px; }
.versions { color:#555; font-size: 14px; }
.summary { display:flex; flex-wrap:wrap; gap:8px; margin: 14px 0 6px; }
.chip { border-radius: 999px; padding: 3px 12px; color:#fff; font-weight:600; font-size:14px; }
nav ol { columns: 2; font-size: 15px; padding-left: 20px; }
.claim { background:#fff; border:1px solid #dcdfe4; border-radius:10px; padding:16px 18px; margin:14px 0; }
.claim-head { display:flex; justify-content:space-between; align-items:center; gap:12px; }
.badge { border-radius:6px; padding:2px 10px; color:#fff; font-weight:700; font-size:13px;
         text-transform:uppercase; letter-spacing:.04em; white-space:nowrap; }
@STATUS_CLASSES@
.statement { font-size: 17px; margin: 8px 0 6px; }
.label { font-weight:600; color:#333; }
.observed { white-space: pre-wrap; background:#f3f6f3; border-left:4px solid #9bbf9f; padding:8px 10px;
            font-size:14px; margin:6px 0; }
.expected { color:#444; font-size:14px; margin:6px 0; }
details { margin: 8px 0; }
summary { cursor: pointer; color:#1f5fa8; font-size:14px; }
pre { background:#1e1e1e; color:#e8e8e8; padding:12px; border-radius:8px; overflow-x:auto; font-size:13px; }
figure { margin: 10px 0 0; text-align:center; }
figure svg { max-width:100%; max-height:900px; width:auto; height:auto; }
.figures { display:flex; flex-wrap:wrap; gap:12px; justify-content:center; align-items:flex-end; }
.figures figure { flex: 1 1 280px; }
.claim figure svg { max-height:820px; }
.figures figure.wide { flex: 1 1 100%; width: min(1400px, 96vw); margin-left: calc(50% - min(700px, 48vw)); }
.claim figure.wide svg { max-height: 1100px; }
figcaption { color:#555; font-size:13px; }
.chart { background:#fff; border:1px solid #dcdfe4; border-radius:10px; padding:14px; margin: 10px 0; }
.nodiagram { color:#777; font-style: italic; font-size: 14px; }
footer { color:#666; font-size:13px; padding: 30px 20px 40px; }
"""
# each status's colour (graphlens.claims.status): a variable, and a class that paints a badge or chip
_CSS = _CSS.replace("@STATUS_COLORS@", " ".join(f"--{s.word}:{s.color};" for s in STATUS.values())).replace(
    "@STATUS_CLASSES@", " ".join(f".{s.word} {{ background:var(--{s.word}); }}" for s in STATUS.values())
)


def _meaning(status: str) -> str:
    entry = STATUS.get(status)
    return entry.meaning if entry is not None else ""


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def _plain_doc(doc: str | None) -> str:
    """A docstring as one plain sentence: reST literals unquoted, lines joined."""
    return " ".join((doc or "").replace("``", "").split())


def _inline_svg(graph: Graph, **options) -> str:
    """The diagram as inline SVG (no XML prolog), or a note saying why it is missing."""
    from .render import LayoutProgramNotFound, svg

    try:
        text = svg(graph, **options)
    except LayoutProgramNotFound as exc:
        return f'<p class="nodiagram">{_esc(exc)}</p>'
    start = text.find("<svg")
    return text[start:] if start >= 0 else text


def _inline_svg_of(source: str) -> str:
    """DOT source as inline SVG (see _inline_svg)."""
    from .render import LayoutProgramNotFound
    from .render.output import _fit_width, layout

    try:
        text = _fit_width(layout(source, "svg").decode("utf-8"))
    except LayoutProgramNotFound as exc:
        return f'<p class="nodiagram">{_esc(exc)}</p>'
    start = text.find("<svg")
    return text[start:] if start >= 0 else text


# -- replays: backward, step by step, for the sections where the order matters -------------
def accumulate_twice() -> None:
    """Two backward calls on two fresh graphs: AccumulateGrad adds the second gradient to w.grad."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    x = torch.tensor([3.0, 4.0])
    for _ in range(2):
        loss = (w * x).sum()
        loss.backward()


def keep_a_grad() -> None:
    """h.retain_grad(): h's own backward step writes h.grad; y's gradient is used and released."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    h = w * 3
    h.retain_grad()
    y = h * h
    loss = y.sum()
    loss.backward()


#: The replays the tour embeds, by section: (caption, program).
REPLAYS: dict[str, tuple[str, Callable[[], None]]] = {
    "4": ("Two backward calls, step by step: w.grad goes from None to [3, 4], then to [6, 8]", accumulate_twice),
    "5": ("retain_grad(), step by step: the step that computes h's gradient also writes h.grad", keep_a_grad),
}


def replay_html(section: str) -> str:
    """The replay of a section's program: its code and the stepper page in a frame."""
    import inspect
    import textwrap

    from .render.replay_html import replay_frame
    from .replay import replay

    caption, program = REPLAYS[section]
    code = textwrap.dedent(inspect.getsource(program))
    code = "\n".join(line for line in code.splitlines() if not line.lstrip().startswith('"""'))
    try:
        frame = replay_frame(replay(program), height=560, title=caption)
    except Exception as exc:  # noqa: BLE001 - one broken replay must not cost the whole tour
        frame = f'<p class="nodiagram">no replay: {_esc(exc)}</p>'
    return (
        f'<div class="chart replay" id="replay-{section}">'
        f"<details><summary>The program replayed</summary><pre><code>{_esc(code)}</code></pre></details>"
        f"{frame}<p class=\"versions\">Each step is a node PyTorch's engine ran, seen by hooks on the real nodes: "
        f"use the buttons, the slider or the arrow keys (click the frame first).</p></div>"
    )


# -- beyond the article: a gradient that is NaN -----------------------------------------------
def masked_log():
    """torch.where keeps log(0) = -inf out of the loss, but not out of the gradient."""
    x = torch.tensor([0.0, 1.0, 4.0], requires_grad=True)
    with graphlens.trace() as tr:
        safe = torch.where(x > 0, torch.log(x), torch.zeros_like(x))
        loss = safe.sum()
        loss.backward()
    return x, tr


NONFINITE_TITLE = "Beyond the article: why is my gradient NaN?"


def nonfinite_html() -> str:
    """A section on a NaN gradient: the program, graphlens's answer, the diagram with NaN and
    inf marked, and the replay that goes to the step that first sent a NaN."""
    import inspect
    import textwrap

    from .explain import explain
    from .render.replay_html import replay_frame

    code = textwrap.dedent(inspect.getsource(masked_log))
    code = "\n".join(line for line in code.splitlines() if not line.lstrip().startswith('"""'))
    try:
        x, tr = masked_log()
        graph = tr.graph()
        why = explain(x, tr)
        answer = why.to_html()
        diagram = _inline_svg(graph)
        frame = replay_frame(tr.replay(), height=560, title="The backward pass, step by step: the step that sends the NaN")
    except Exception as exc:  # noqa: BLE001 - one broken section must not cost the whole tour
        return f'<p class="nodiagram">no section: {_esc(exc)}</p>'
    return (
        f'<h2 id="section-nonfinite">{_esc(NONFINITE_TITLE)}</h2>'
        "<p>The article's graph also explains a classic surprise: a loss that is a number, and a gradient that is not. "
        "Here torch.where keeps log(0) out of the loss, yet x.grad[0] is NaN. In the diagram NaN and inf are red; the "
        "replay opens with a link to the step of the engine that first sent one.</p>"
        f'<div class="chart"><pre><code>{_esc(code)}</code></pre>'
        f'<div class="observed">{answer}</div>'
        f"<figure>{diagram}<figcaption>The traced graph: log's result holds -inf at [0], hidden from the loss by where; "
        f"x.grad holds NaN at [0].</figcaption></figure>{frame}</div>"
    )


def _claim_html(claim: claims.Claim, verdict: claims.Verdict) -> str:
    figures = []
    shown: set[int] = set()
    pair = claim.compare
    if pair is not None and max(pair[0], pair[1]) < len(verdict.evidence):
        from .compare import compare

        i, j, a, b = pair
        cmp = compare(verdict.evidence[i], verdict.evidence[j], labels=(a, b))
        figures.append(
            f"<figure class=\"wide\">{_inline_svg_of(cmp.to_dot(legend=False).source)}<figcaption>the two graphs this check "
            f"recorded, side by side: notes say what differs</figcaption></figure>"
        )
        shown = {i, j}
    for k, graph in enumerate(verdict.evidence):
        if k in shown:
            continue
        figures.append(
            f"<figure>{_inline_svg(graph, legend=False)}<figcaption>the graph this check recorded"
            f"{f' ({k + 1} of {len(verdict.evidence)})' if len(verdict.evidence) > 1 else ''}</figcaption></figure>"
        )
    diagrams = f'<div class="figures">{"".join(figures)}</div>' if figures else '<p class="nodiagram">no diagram for this check</p>'
    chart = f" · illustrates chart {claim.chart}" if claim.chart else ""
    return f"""
<article class="claim" id="{_esc(claim.id)}">
  <div class="claim-head"><h3>{_esc(claim.id)}</h3>
    <span class="badge {_esc(verdict.status)}" title="{_esc(_meaning(verdict.status))}">{_esc(verdict.status)}</span></div>
  <p class="statement">{_esc(claim.statement)}</p>
  <div class="label">What torch did{chart}</div>
  <div class="observed">{_esc(verdict.observed)}</div>
  <p class="expected"><span class="label">What the article leads one to expect:</span> {_esc(verdict.expected)}</p>
  <details><summary>The code that was run</summary><pre><code>{_esc(claim.code)}</code></pre></details>
  {diagrams}
</article>"""


def build_page(
    verdicts: Iterable[claims.Verdict],
    *,
    charts: dict[int, Graph] | None = None,
    progress: Callable[[str], None] | None = None,
) -> str:
    """The tour page for these verdicts (in article order), with the charts' graphs."""
    by_id = {v.id: v for v in verdicts}
    chosen = [c for c in claims.all() if c.id in by_id]
    counts = {s: 0 for s in STATUSES}
    for v in by_id.values():
        counts[v.status] = counts.get(v.status, 0) + 1
    chips = "".join(
        f'<span class="chip {s}" title="{_esc(STATUS[s].meaning)}">{counts[s]} {s}</span>' for s in STATUSES if counts.get(s)
    )
    sections = [s for s in SECTION_TITLES if any(c.section == s for c in chosen)]
    nav = "".join(
        f'<li><a href="#section-{s}">{"Introduction" if s == "intro" else "Section " + s}: {_esc(SECTION_TITLES[s])}</a></li>'
        for s in sections
    )
    body = []
    for section in sections:
        heading = "Introduction" if section == "intro" else f"Section {section}"
        body.append(f'<h2 id="section-{section}">{heading}: {_esc(SECTION_TITLES[section])}</h2>')
        for number, chart in sorted(CHARTS.items()):
            if chart.section == section and charts and number in charts:
                if progress:
                    progress(f"drawing chart {number}")
                body.append(
                    f'<div class="chart" id="chart-{number}"><figure>{_inline_svg(charts[number])}'
                    f"<figcaption>Chart {number}: {_esc(chart.title)}. {_esc(_plain_doc(chart.build.__doc__))}</figcaption>"
                    f"</figure></div>"
                )
        if section in REPLAYS:
            if progress:
                progress(f"replaying section {section}")
            body.append(replay_html(section))
        for claim in chosen:
            if claim.section == section:
                if progress:
                    progress(f"drawing {claim.id}")
                body.append(_claim_html(claim, by_id[claim.id]))
    if progress:
        progress("tracing a NaN gradient")
    body.append(nonfinite_html())
    nav += f'<li><a href="#section-nonfinite">{_esc(NONFINITE_TITLE)}</a></li>'
    legend = " · ".join(f"{s.word}: {s.legend}" for s in STATUS.values() if s.legend)
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    versions = (
        f"torch {_esc(torch.__version__)} · graphlens {_esc(__version__)} · Python {_esc(platform.python_version())}"
        f" · {_esc(platform.machine())} · checked {now}"
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>graphlens tour: the autograd article, checked on torch {_esc(torch.__version__)}</title>
<style>{_CSS}</style></head>
<body>
<header>
<h1>The autograd article, checked live</h1>
<p class="sub">Every statement of the article <cite>{_esc(ARTICLE)}</cite> (on PyTorch's dynamic graph), in
graphlens's own words, run as a small real program on this machine's torch. Each verdict comes from what torch did just now, with the graph graphlens recorded.</p>
<p class="versions">{versions}</p>
<div class="summary">{chips}</div>
<p class="versions">{len(by_id)} claims · {html.escape(legend, quote=False)}</p>
<p class="versions">How to read the diagrams: green = leaf tensor, white = non-leaf, thick orange border =
requires grad, blue <b>grad</b> row = gradient kept after backward, grey italic grad = gradient that flowed
and was released, dashed arrow = detach(), dashed box = made under no_grad.</p>
<nav><ol>{nav}</ol></nav>
</header>
<main>
{''.join(body)}
</main>
<footer>Made by graphlens {_esc(__version__)}: <code>graphlens tour --out DIR</code> rebuilds this page;
<code>graphlens check</code> prints the verdicts as a table.</footer>
</body></html>
"""


def write_tour(out: str | Path, *, stream: TextIO | None = None) -> Path:
    """Check every claim, draw every chart and write ``out/index.html``; returns its path.
    Progress goes to ``stream`` (default: standard error)."""
    stream = sys.stderr if stream is None else stream
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    every = claims.all()
    step = {"n": 0}

    def tell(claim: claims.Claim) -> None:
        step["n"] += 1
        print(f"[{step['n']:2}/{len(every)}] checking {claim.id}", file=stream, flush=True)

    verdicts = claims.run(every, progress=tell)
    charts = {}
    for number, chart in sorted(CHARTS.items()):
        print(f"tracing chart {number}: {chart.title}", file=stream, flush=True)
        charts[number] = chart.build()
    page = build_page(verdicts, charts=charts, progress=lambda msg: print(msg, file=stream, flush=True))
    path = folder / "index.html"
    path.write_text(page, encoding="utf-8")
    return path
