"""Pages and diagrams are safe with any name: the JSON a page's script reads is escaped, and DOT
quotes every id, name and label so that Graphviz reads back exactly what the graph holds."""

import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import graphlens as gl
from graphlens import Graph
from graphlens.render import LayoutProgramNotFound, find_layout_program
from graphlens.render.replay_html import replay_page

from browser import dump_dom, needs_browser

#: A name that would end a <script> early, open another, and put the rest in HTML's
#: "double-escaped" script state (where the page's own </script> no longer ends the script).
HOSTILE = "x</script><script>alert(1)</script><!--<script>"
#: Names that look like the page template's placeholders.
PLACEHOLDERS = "@JS@ @DATA@ @SVG@ @TITLE@"


def _has_layout() -> bool:
    try:
        find_layout_program()
        return True
    except LayoutProgramNotFound:
        return False


needs_layout = pytest.mark.skipif(not _has_layout(), reason="no dot or graphviz-pure binary to draw with")


def _hostile_replay():
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    v = torch.tensor([0.5, 0.5], requires_grad=True)
    with gl.trace(names={HOSTILE: w, PLACEHOLDERS: v}) as tr:
        h = w * v
        h.retain_grad()
        loss = (h * h).sum()
        loss.backward()
    return tr.replay()


def _payload(page: str) -> str:
    match = re.search(r'<script id="gl-data" type="application/json">(.*?)</script>', page, re.S)
    assert match, "the page embeds no step data"
    return match.group(1)


def test_replay_page_json_has_no_raw_markup_characters():
    """The JSON a replay page embeds in <script> spells <, > and & as \\u escapes, and still reads back the names."""
    page = replay_page(_hostile_replay())
    payload = _payload(page)
    assert not set("<>&") & set(payload)
    names = {row["name"] for row in json.loads(payload)["rows"]}
    assert HOSTILE in names and PLACEHOLDERS in names
    assert page.count("<script") == 2 and page.count("</script>") == 2  # the page's own two, nothing injected


def test_replay_page_placeholders_in_names_stay_text():
    """A name spelled like the page template's placeholders (@JS@, @DATA@, ...) is not filled in with the page's parts."""
    page = replay_page(_hostile_replay())
    assert page.count("use strict") == 1  # the script once, not again inside the data or the diagram
    data = json.loads(_payload(page))
    assert any(row["name"] == PLACEHOLDERS for row in data["rows"])


@needs_browser
@needs_layout
def test_replay_page_with_a_hostile_name_runs_its_script(tmp_path):
    """In Chromium, a replay page of a tensor named like a script break still runs its stepper and shows the name as text."""
    rp = _hostile_replay()
    page = tmp_path / "replay.html"
    rp.to_html(page)
    dom = dump_dom(f"{page.as_uri()}#step=2")
    assert 'data-step="2"' in dom  # the stepper ran and opened step 2
    where = re.search(r'<div id="gl-where">([^<]*)</div>', dom)
    assert where and where.group(1).startswith("step 2 of ")
    grads = re.search(r'<table id="gl-grads">.*?</table>', dom, re.S).group(0)
    assert html.escape(HOSTILE, quote=False) in grads and PLACEHOLDERS in grads  # filled in by the script, as text
    assert dom.count("<script") == 2  # no script element was injected


# -- DOT: any id, name, region and note is quoted so that Graphviz reads it back ---------------------
HOSTILE_IDS = ["t\\", 'q"', 'q\\"', "a\\\\", "<b>", "note0", "node", "line\nbreak", "legend", "\\N", "é\\", "note1", "bell\x07", "", "<<b>>", "-"]
HOSTILE_NAMES = ["n\\", "<b>bold</b>", 'say "hi"', "two\nlines", "\\N", "\\l", "&amp;", "]; x [", "<!--", "\x07"]


def _traced_graph() -> Graph:
    a = torch.tensor([1.0, 2.0], requires_grad=True)
    b = torch.tensor([3.0, 4.0], requires_grad=True)
    with gl.trace() as tr:
        c = a * b
        d = c.detach()
        with torch.no_grad():
            e = d * 2
        f = (c * e).sum()
        f.backward()
    return tr.graph()


def _rename(data: dict, new: dict) -> dict:
    """The document with every node id renamed by ``new`` (wherever an id is named)."""
    r = lambda i: new.get(i, i)  # noqa: E731
    for t in data["tensors"]:
        t["id"], t["op"], t["detached_from"] = r(t["id"]), t["op"] and r(t["op"]), t["detached_from"] and r(t["detached_from"])
    for o in data["ops"]:
        o["id"], o["variable"] = r(o["id"]), o["variable"] and r(o["variable"])
        for s in o["saved"]:
            s["tensor"] = s["tensor"] and r(s["tensor"])
    for e in data["edges"]:
        e["src"], e["dst"] = r(e["src"]), r(e["dst"])
    data["roots"] = [r(i) for i in data["roots"]]
    data["notes"] = {r(k): v for k, v in data["notes"].items()}
    return data


def _hostile_graph() -> Graph:
    g = _traced_graph().annotate({"c": ["note\\", "<b>", "\\N \\l", 'a "quote"'], "f": "end\\"})
    data = g.to_dict()
    ids = [t["id"] for t in data["tensors"]] + [o["id"] for o in data["ops"]]
    data = _rename(data, {old: HOSTILE_IDS[k] if k < len(HOSTILE_IDS) else f"{old}\\" for k, old in enumerate(ids)})
    for k, t in enumerate(data["tensors"]):
        t["name"] = HOSTILE_NAMES[k % len(HOSTILE_NAMES)]
        if t["region"]:
            t["region"] = "<r>\\#" + t["region"]
    for o in data["ops"]:
        if o["region"]:
            o["region"] = "<r>\\#" + o["region"]
    return Graph.from_json(json.dumps(data))


def _programs():
    pure = Path(sys.executable).parent / "graphviz-pure"
    found = [("dot", shutil.which("dot")), ("graphviz-pure", str(pure) if pure.is_file() else shutil.which("graphviz-pure"))]
    return [pytest.param(path, id=kind, marks=pytest.mark.skipif(path is None, reason=f"{kind} is not installed")) for kind, path in found]


def _nodes_in(svg: str) -> list[str]:
    return [html.unescape(t) for t in re.findall(r'<g id="node\d+" class="node">\s*<title>([^<]*)</title>', svg)]


@pytest.mark.parametrize("program", _programs())
@pytest.mark.parametrize("view", ["data", "function"])
def test_dot_of_hostile_ids_and_names_is_read_back_whole(program, view):
    """dot and graphviz-pure lay out the DOT of a graph whose ids, names, regions and notes end in backslashes,
    hold quotes, newlines and markup: no error or warning, and one drawn node per node of the scene."""
    g = _hostile_graph()
    source = g.to_dot(view=view).source
    proc = subprocess.run([program, "-Tsvg"], input=source.encode("utf-8"), capture_output=True, check=False)
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 0 and proc.stdout, err
    assert "rror" not in err and "arning" not in err, err
    svg = proc.stdout.decode("utf-8")
    drawn = _nodes_in(svg)
    declared = [d for d in re.findall(r'^\t+("(?:[^"\\]|\\.)*"|[^\s\[{}"]+) \[', source, re.M) if d not in ("graph", "node", "edge")]
    assert len(drawn) == len(declared) == len(set(drawn))  # no two ids fell together, no stray node
    if view == "data":  # every name is in the drawing, as text
        text = html.unescape(svg)
        for name in {t.name for t in g.tensors} - {"two\nlines", "\x07"}:
            assert name in text, name


def test_dot_of_hostile_ids_is_the_same_text_in_any_process():
    """The DOT of a hostile graph is byte-identical across loads and across processes with different hash seeds."""
    g = _hostile_graph()
    text = g.to_json()
    first = Graph.from_json(text).to_dot().source
    assert Graph.from_json(text).to_dot().source == first == g.to_dot().source
    assert '"t\\\\"' in first  # the id t\ is quoted with its backslash escaped: "t\\"
    code = "import sys, graphlens as gl; sys.stdout.write(gl.Graph.from_json(sys.stdin.read()).to_dot().source)"
    for seed in ("1", "2"):
        out = subprocess.run([sys.executable, "-c", code], input=text, capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONHASHSEED": seed})
        assert out.stdout == first


@pytest.mark.parametrize("program", _programs())
def test_a_comparison_of_hostile_graphs_draws_no_stray_node(program):
    """gl.compare of two graphs with hostile ids lays out with one drawn node per declared node:
    the side-by-side alignment lines name the very nodes the sides declare."""
    g = _hostile_graph()
    source = gl.compare(g, g).to_dot().source
    proc = subprocess.run([program, "-Tsvg"], input=source.encode("utf-8"), capture_output=True, check=False)
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 0 and "rror" not in err, err
    drawn = _nodes_in(proc.stdout.decode("utf-8"))
    declared = [d for d in re.findall(r'^\t+("(?:[^"\\]|\\.)*"|[^\s\[{}"]+) \[', source, re.M) if d not in ("graph", "node", "edge")]
    assert len(drawn) == len(declared) == len(set(drawn))
