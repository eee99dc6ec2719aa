"""Tests of the replay page: its data, its self-containedness, the CLI, notebooks, and a real browser."""

import html
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import graphlens as gl
from graphlens.render import LayoutProgramNotFound, find_layout_program
from graphlens.render.replay_html import replay_frame

from browser import dump_dom, needs_browser, screenshot


def _has_layout() -> bool:
    try:
        find_layout_program()
        return True
    except LayoutProgramNotFound:
        return False


needs_layout = pytest.mark.skipif(not _has_layout(), reason="no dot or graphviz-pure binary to draw with")


def _two_calls():
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    x = torch.tensor([3.0, 4.0])
    h = w * x
    h.retain_grad()
    loss = (h * h).sum()
    loss.backward(retain_graph=True)
    loss.backward()


def _data(page: str) -> dict:
    match = re.search(r'<script id="gl-data" type="application/json">(.*?)</script>', page, re.S)
    assert match, "the page embeds no step data"
    return json.loads(match.group(1).replace("<\\/", "</"))


def _svg_titles(page: str) -> set[str]:
    return {html.unescape(t) for t in re.findall(r"<title>([^<]*)</title>", page)}


# -- the page's content -----------------------------------------------------------------
@needs_layout
def test_page_has_one_entry_per_step_pointing_at_drawn_nodes():
    """Every step of the replay is in the page, each naming a node the diagram draws."""
    rp = gl.replay(_two_calls)
    page = rp.to_html()
    data = _data(page)
    assert len(data["steps"]) == len(rp.steps) == 8
    assert [s["n"] for s in data["steps"]] == [s.name for s in rp.steps]
    assert [s["p"] for s in data["steps"]] == [0] * 4 + [1] * 4
    titles = _svg_titles(page)
    assert all(s["node"] in titles for s in data["steps"])
    # AccumulateGrad is drawn as its leaf: w's node is the one that runs at the last step
    w = rp.graph.find("w").id
    assert data["steps"][-1]["node"] == w


@needs_layout
def test_page_edges_carry_what_each_node_sent():
    """A step's highlighted edges are drawn edges of the diagram, labelled with the values sent."""
    rp = gl.replay(_two_calls)
    page = rp.to_html()
    data, titles = _data(page), _svg_titles(page)
    square = data["steps"][1]  # h * h sends grad * h = [3, 8] along each of its two edges from h
    assert [v for _, v in square["s"]] == ["[3, 8]", "[3, 8]"]
    for step in data["steps"]:
        for title, _ in step.get("s", []) + step.get("a", []):
            assert title in titles
    mul = data["steps"][2]
    assert [v for _, v in mul["s"]] == ["[18, 64]"] and [v for _, v in mul["a"]] == ["[6, 16]"]


@needs_layout
def test_page_grad_rows_follow_the_writes_across_two_calls():
    """w.grad goes None -> [18, 64] -> [36, 128]; h.grad (retain_grad) [6, 16] -> [12, 32]."""
    rp = gl.replay(_two_calls)
    data = _data(rp.to_html())
    rows = {r["name"]: r for r in data["rows"]}
    assert rows["w"]["before"] == "None" and rows["w"]["kind"] == "leaf"
    assert rows["h"]["kind"] == "retained"
    writes = [(data["steps"].index(s), w) for s in data["steps"] for w in s.get("w", [])]
    w_id, h_id = rows["w"]["id"], rows["h"]["id"]
    assert [v for _, (t, v) in writes if t == w_id] == ["[18, 64]", "[36, 128]"]
    assert [v for _, (t, v) in writes if t == h_id] == ["[6, 16]", "[12, 32]"]
    # the reserved .grad row is in w's node, in the (invisible) marker colour
    assert "#c8ebc5" in rp.to_html()


def test_page_is_self_contained():
    """The page refers to nothing outside itself: no src/href, no url(), no @import, no DTD."""
    page = gl.replay(_two_calls).to_html()
    assert not re.search(r"\b(src|href)\s*=", page)
    assert "url(" not in page and "@import" not in page and "<link" not in page
    assert "<!DOCTYPE svg" not in page and "<?xml" not in page
    rest = page.replace('xmlns="http://www.w3.org/2000/svg"', "").replace('xmlns:xlink="http://www.w3.org/1999/xlink"', "")
    rest = rest.replace('"http://www.w3.org/2000/svg"', "")  # the namespace the script creates labels in
    assert "http" not in rest


def test_page_is_deterministic():
    """The same program gives the same page, byte for byte."""
    assert gl.replay(_two_calls).to_html() == gl.replay(_two_calls).to_html()


def test_page_without_a_layout_program_keeps_the_steps(tmp_path):
    """With no layout program the page says so and still holds every step and sentence."""
    missing = tmp_path / "no-such-dot"
    rp = gl.replay(_two_calls)
    from graphlens.render.replay_html import replay_page

    with pytest.raises(LayoutProgramNotFound):
        find_layout_program(engine_binary=str(missing))
    page = replay_page(rp, engine_binary=str(missing))
    assert "No diagram" in page and "<svg" not in page
    assert len(_data(page)["steps"]) == 8


def test_page_escapes_names_and_values():
    """A tensor named with markup cannot break out of the page's data or its labels."""
    evil = "</script><b>x</b>"
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    with gl.trace(names={evil: w}) as tr:
        (w * 2).sum().backward()
    page = tr.replay().to_html()
    assert "</script><b>" not in page
    assert [r["name"] for r in _data(page)["rows"]] == [evil]


def test_page_writes_to_a_path(tmp_path):
    """to_html(path) writes the page it returns."""
    rp = gl.replay(_two_calls)
    out = tmp_path / "replay.html"
    text = rp.to_html(out)
    assert out.read_text(encoding="utf-8") == text


def test_notebook_shows_the_page_in_a_frame():
    """In a notebook a Replay is the stepper page inside an iframe's srcdoc (its script stays inside)."""
    rp = gl.replay(_two_calls)
    frame = rp._repr_html_()
    assert frame.startswith("<iframe srcdoc=") and 'sandbox="allow-scripts"' in frame
    assert "<script" not in frame  # escaped into the attribute
    assert html.unescape(re.search(r'srcdoc="(.*?)"', frame, re.S).group(1)) == rp.to_html()
    assert replay_frame(rp, height=300).count("height:300px") == 1


def test_describe_says_what_the_node_did_with_names_and_values():
    """The sentence names the op, the other factor with its value, what was sent and to whom."""
    def program():
        w = torch.tensor([1.0, 2.0], requires_grad=True)
        x = torch.tensor([3.0, 4.0])
        y = w * x
        z = y / 2
        z.sum().backward()

    rp = gl.replay(program)
    by_name = {s.name: rp.describe(s) for s in rp.steps}
    mul = by_name["MulBackward0"]
    assert "x = [3, 4]" in mul and "to w" in mul and "[0.5, 0.5] for y" in mul
    div = by_name["DivBackward0"]
    assert "divisor, 2" in div and "numerator" not in div  # only the numerator needed a gradient
    assert "starts from" in by_name["SumBackward0"]
    assert "as w.grad" in by_name["AccumulateGrad"] and "None" in by_name["AccumulateGrad"]


def test_describe_of_an_op_without_a_rule_still_says_what_flowed():
    """An op graphlens has no phrase for gets the chain rule sentence with the values."""
    def program():
        w = torch.tensor([0.5, 1.0], requires_grad=True)
        torch.special.erf(w).sum().backward()

    rp = gl.replay(program)
    erf = next(s for s in rp.steps if s.name.startswith("Erf"))
    text = rp.describe(erf)
    assert "chain rule" in text and "to w" in text


# -- the command line ---------------------------------------------------------------------
def _script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "prog.py"
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return path


def test_cli_replay_writes_page_and_diagram(tmp_path):
    """graphlens replay SCRIPT --out DIR writes replay.html and the final diagram; tensors carry the script's names."""
    script = _script(tmp_path, """
        import torch
        w = torch.tensor([1.0, 2.0], requires_grad=True)
        for _ in range(2):
            loss = (w * 3).sum()
            loss.backward()
    """)
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "graphlens", "replay", str(script), "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "6 backward steps in 2 backward calls" in proc.stdout
    page = (out / "replay.html").read_text(encoding="utf-8")
    data = _data(page)
    assert len(data["steps"]) == 6
    assert [r["name"] for r in data["rows"]] == ["w"]
    assert any((out / name).is_file() for name in ("graph.svg", "graph.dot"))


def test_cli_replay_of_a_failing_script_keeps_the_steps_and_explains(tmp_path):
    """A script whose second backward fails: exit 1, a page with the first call's steps and the error explained."""
    script = _script(tmp_path, """
        import torch
        w = torch.tensor([1.0, 2.0], requires_grad=True)
        y = (w * 2).exp()
        loss = y.sum()
        loss.backward()
        loss.backward()
    """)
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "graphlens", "replay", str(script), "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "RuntimeError" in proc.stderr and "graphlens:" in proc.stderr
    page = (out / "replay.html").read_text(encoding="utf-8")
    data = _data(page)
    assert data["stopped"] == 1
    assert [s["p"] for s in data["steps"]][:4] == [0, 0, 0, 0]
    error = re.search(r"<section class='error'>(.*?)</section>", page, re.S).group(1)
    assert "second time" in error or "freed" in error  # the explanation of graph_freed, not the raw message only
    assert "retain_graph=True" in error


def test_cli_replay_passes_arguments_and_restores_sys_state(tmp_path):
    """Arguments after '--' reach the script's sys.argv; sys.argv and sys.path[0] come back."""
    script = _script(tmp_path, """
        import sys, json
        json.dump(sys.argv[1:], open(sys.argv[0] + ".argv", "w"))
    """)
    from graphlens.cli import main

    before = (list(sys.argv), sys.path[0])
    assert main(["replay", str(script), "--out", str(tmp_path / "o"), "--", "--epochs", "3"]) == 0
    assert (list(sys.argv), sys.path[0]) == before
    assert json.loads(Path(str(script) + ".argv").read_text()) == ["--epochs", "3"]


def test_cli_replay_rejects_a_missing_script(tmp_path, capsys):
    """A script path that is not a file: exit 2 and one line naming it."""
    from graphlens.cli import main

    assert main(["replay", str(tmp_path / "nope.py"), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "nope.py" in err and len(err.strip().splitlines()) == 1


# -- in a real browser ----------------------------------------------------------------------
@needs_browser
@needs_layout
def test_browser_opens_the_step_in_the_address(tmp_path):
    """#step=N (from 1) opens step N: the body says N and the running node is that step's node."""
    rp = gl.replay(_two_calls)
    page = tmp_path / "replay.html"
    rp.to_html(page)
    data = _data(page.read_text(encoding="utf-8"))
    for k in (1, 3, 8):
        dom = dump_dom(f"{page.as_uri()}#step={k}")
        assert f'data-step="{k}"' in dom
        running = re.findall(r'<g id="[^"]*" class="node gl-run">\s*<title>([^<]*)</title>', dom)
        assert running == [data["steps"][k - 1]["node"]], k
        # the sentence of that step is in the side panel
        assert html.escape(data["steps"][k - 1]["t"][:40], quote=False) in dom


def _three_updates():
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(4, 2)
    with gl.trace(module=model) as tr:
        for _ in range(3):
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
    return tr.replay()


def test_page_grad_rows_say_which_backward_calls_write_them():
    """Each .grad row lists the calls that write it: a parameter updated in place gets a row per version, each written in one call."""
    data = _data(_three_updates().to_html())
    assert sorted(r["name"] for r in data["rows"]) == ["bias"] * 3 + ["weight"] * 3
    assert sorted(r["ps"] for r in data["rows"]) == [[0], [0], [1], [1], [2], [2]]
    twice = _data(gl.replay(_two_calls).to_html())  # (one leaf, written by both calls: one row)
    assert {r["name"]: r["ps"] for r in twice["rows"]} == {"w": [0, 1], "h": [0, 1]}


@needs_browser
@needs_layout
def test_browser_grad_table_lists_the_current_backward_calls_writes(tmp_path):
    """In a training loop's page, the .grad table at a step of the second call lists weight and bias once each, as that call left them."""
    rp = _three_updates()
    page = tmp_path / "replay.html"
    rp.to_html(page)
    data = _data(page.read_text(encoding="utf-8"))
    second = [k for k, st in enumerate(data["steps"]) if st["p"] == 1]
    dom = dump_dom(f"{page.as_uri()}#step={second[-1] + 1}")
    table = re.search(r'<table id="gl-grads">.*?</table>', dom, re.S).group(0)
    names = re.findall(r"<tr[^>]*><td>([^<]*)</td>", table)
    assert sorted(names) == ["bias", "weight"]
    assert "written in this backward() call" in table
    assert "None" not in table  # (at the call's last step both were written)


@needs_browser
@needs_layout
def test_browser_screenshots_differ_where_the_running_node_is(tmp_path):
    """Screenshots at #step=1 and #step=3 (from 1) differ inside the box of step 3's running node."""
    from PIL import Image, ImageChops

    rp = gl.replay(_two_calls)
    page = tmp_path / "replay.html"
    text = rp.to_html()
    page.write_text(text, encoding="utf-8")
    # A copy that reports where the running node is drawn (the page itself never reports it).
    probe = tmp_path / "probe.html"
    probe.write_text(text.replace("</body>", "<script>var r=document.querySelector('.gl-run').getBoundingClientRect();"
                                  "document.body.setAttribute('data-rect',[r.left,r.top,r.right,r.bottom].map(Math.round).join(','));"
                                  "</script></body>"), encoding="utf-8")
    rect = re.search(r'data-rect="([\d,.-]+)"', dump_dom(f"{probe.as_uri()}#step=3")).group(1)
    left, top, right, bottom = map(int, rect.split(","))
    a = Image.open(screenshot(f"{page.as_uri()}#step=1", tmp_path / "s1.png")).convert("RGB")
    b = Image.open(screenshot(f"{page.as_uri()}#step=3", tmp_path / "s3.png")).convert("RGB")
    diff = ImageChops.difference(a, b).crop((left, top, right, bottom))
    assert diff.getbbox() is not None, "nothing changed where step 3's node is"
    # and the highlight is red: the node's border at step 3 has the highlight colour
    raw = b.crop((left, top, right, bottom)).tobytes()
    pixels = [tuple(raw[i:i + 3]) for i in range(0, len(raw), 3)]
    assert any(abs(p[0] - 0xd6) < 24 and abs(p[1] - 0x27) < 40 and abs(p[2] - 0x28) < 40 for p in pixels)


@needs_browser
@needs_layout
def test_browser_keys_and_buttons_step(tmp_path):
    """The next button and the arrow keys move the step from 1 to 4 (driven by a script in a copy of the page)."""
    text = gl.replay(_two_calls).to_html()
    probe = tmp_path / "keys.html"
    probe.write_text(text.replace("</body>", "<script>"
                                  "document.getElementById('gl-next').click();document.getElementById('gl-next').click();"
                                  "document.dispatchEvent(new KeyboardEvent('keydown',{key:'ArrowRight'}));"
                                  "document.dispatchEvent(new KeyboardEvent('keydown',{key:'ArrowLeft'}));"
                                  "document.dispatchEvent(new KeyboardEvent('keydown',{key:'ArrowRight'}));"
                                  "document.body.setAttribute('data-after', document.body.getAttribute('data-step'));"
                                  "</script></body>"), encoding="utf-8")
    dom = dump_dom(probe.as_uri())
    assert 'data-after="4"' in dom


def test_page_marks_the_step_whose_gradient_a_user_hook_changed():
    """A tensor hook that doubles h's gradient: the step that receives it is flagged and says so."""
    with gl.trace() as tr:
        w = torch.tensor([1.0, 2.0], requires_grad=True)
        h = w * 3
        h.register_hook(lambda g: g * 2)
        h.sum().backward()
    data = _data(tr.replay().to_html())
    flagged = [s for s in data["steps"] if s.get("h")]
    assert [s["n"] for s in flagged] == ["MulBackward0"]
    assert "hook" in flagged[0]["t"]
    assert [v for s in data["steps"] for _, v in s.get("w", [])] == ["[6, 6]"]
