"""Tests of the replay read by module on real GPT-2 models: the module steps, the page's module mode, its trail, numbering from 1."""

import html
import re

import pytest
import torch

import graphlens as gl
from graphlens.render import LayoutProgramNotFound, find_layout_program
from graphlens.render.replay_html import BY_MODULE_ABOVE, opening, page_data
from graphlens.replay import module_of
from graphlens.scopes import infer_scopes

from browser import dump_dom, needs_browser


def _has_layout() -> bool:
    try:
        find_layout_program()
        return True
    except LayoutProgramNotFound:
        return False


needs_layout = pytest.mark.skipif(not _has_layout(), reason="no dot or graphviz-pure binary to draw with")


def _gpt2(layers: int):
    """A traced forward and backward of a small, randomly initialised GPT-2 (no weights downloaded)."""
    transformers = pytest.importorskip("transformers")
    transformers.utils.logging.set_verbosity_error()
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=layers, n_embd=32, n_head=2, vocab_size=64, n_positions=16,
                                  bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(cfg)
    ids = torch.randint(0, 64, (1, 6))
    with gl.trace(module=model) as tr:
        model(ids, labels=ids).loss.backward()
    return model, tr.replay()


@pytest.fixture(scope="module")
def gpt2():
    return _gpt2(2)[1]


@pytest.fixture(scope="module")
def gpt2_page(gpt2):
    return gpt2.to_html()


def _scopes(rp):
    return {op.id: op.scope for op in infer_scopes(rp.graph).ops}


# -- the module steps ---------------------------------------------------------------------
@pytest.mark.parametrize("depth", [1, 2, 3, 4, 5, None])
def test_module_steps_partition_the_engine_steps_in_their_order(gpt2, depth):
    """At every depth the module steps, one after the other, hold exactly the engine steps in the engine's order."""
    mods = gpt2.by_module(depth=depth)
    assert [s for m in mods for s in m.steps] == list(gpt2.steps)
    assert [m.index for m in mods] == list(range(len(mods)))
    for m in mods:
        assert [s.index for s in m.steps] == list(range(m.start, m.stop))
    assert len(mods) < len(gpt2.steps)


@pytest.mark.parametrize("depth", [2, 4, None])
def test_each_module_step_is_one_maximal_run_inside_one_module(gpt2, depth):
    """Every engine step of a module step lies in its module; two neighbouring module steps differ in module or backward call."""
    scope = _scopes(gpt2)
    mods = gpt2.by_module(depth=depth)
    for m in mods:
        assert {module_of(scope[s.op], depth) for s in m.steps} == {m.module}
        assert {s.backward for s in m.steps} == {m.backward}
    for a, b in zip(mods, mods[1:]):
        assert (a.module, a.backward) != (b.module, b.backward)


def test_a_module_the_engine_enters_twice_is_two_steps(gpt2):
    """The engine leaves transformer.h.1 for its MLP and comes back for the residual add: two module steps, in that order."""
    names = [m.module for m in gpt2.by_module(depth=4)]
    where = [i for i, name in enumerate(names) if name == "transformer.h.1"]
    assert len(where) >= 2 and all(b > a + 1 for a, b in zip(where, where[1:]))
    assert names[where[0] + 1] == "transformer.h.1.mlp"
    # and the backward runs the blocks last to first
    blocks = [name for name in dict.fromkeys(module_of(n, 3) for n in names) if name and name.startswith("transformer.h.")]
    assert blocks == ["transformer.h.1", "transformer.h.0"]


def test_what_flows_out_of_one_module_step_flows_into_another(gpt2):
    """Each gradient a module step sends out is what a later module step receives from it, with the same value."""
    mods = gpt2.by_module(depth=4)
    step_of = {s.op: m.index for m in mods for s in m.steps}
    sent = {(f.sender, f.receiver, f.output_nr): (m.index, f.value) for m in mods for f in m.grads_out}
    received = {(f.sender, f.receiver, f.output_nr): (m.index, f.value) for m in mods for f in m.grads_in if f.sender}
    assert sent and set(sent) == set(received)
    for key, (frm, value) in sent.items():
        to, got = received[key]
        assert to > frm and to == step_of[key[1]] and got == value
        assert key[0] in {s.op for s in mods[frm].steps} and key[1] not in {s.op for s in mods[frm].steps}


def test_the_first_module_step_receives_the_gradient_backward_starts_from(gpt2):
    """The loss's module step (outside every submodule) is first and receives 1.0 from backward() itself."""
    first = gpt2.by_module(depth=2)[0]
    assert first.module is None and first.start == 0
    roots = [f for f in first.grads_in if f.sender is None]
    assert [f.value.head for f in roots] == [(1.0,)]
    assert all(f.sender is not None for m in gpt2.by_module(depth=2)[1:] for f in m.grads_in)


def test_module_steps_hold_every_grad_write(gpt2):
    """The .grad writes of the module steps are those of the engine steps, each parameter's in its own module."""
    mods = gpt2.by_module(depth=4)
    assert [w for m in mods for w in m.writes] == [w for s in gpt2.steps for w in s.writes]
    ln_f = [m for m in mods if m.module == "transformer.ln_f"]
    assert [gpt2.label(w.tensor) for m in ln_f for w in m.writes] == ["transformer.ln_f.weight", "transformer.ln_f.bias"]


def test_depth_must_be_a_positive_int(gpt2):
    """by_module(depth=0) is refused with a message naming depth."""
    with pytest.raises(ValueError, match="depth"):
        gpt2.by_module(depth=0)


def test_twelve_layers_step_through_by_module():
    """A 12-layer GPT-2's hundreds of engine steps read as one module step per block part, blocks 11 down to 0."""
    _, rp = _gpt2(12)
    mods = rp.by_module(depth=4)
    assert len(rp.steps) > 800 and len(mods) < len(rp.steps) / 8
    attn = [m.module for m in mods if m.module and m.module.endswith(".attn")]
    assert attn == [f"transformer.h.{i}.attn" for i in range(11, -1, -1)]
    assert [s for m in mods for s in m.steps] == list(rp.steps)
    assert opening(rp.to_html())[0] == "module"


# -- numbering from 1 -----------------------------------------------------------------------
def test_text_numbers_steps_and_calls_from_1(gpt2):
    """str(replay) and the module table number steps and backward calls from 1; the sentences count engine steps from 1."""
    first_row = str(gpt2).splitlines()[1].split()
    assert first_row[:3] == ["1", "1", "NllLossBackward0"]
    rows = gpt2.table(by="module", depth=2).splitlines()[1:]
    assert [r.split()[0] for r in rows] == [str(i) for i in range(1, len(rows) + 1)]
    assert rows[0].split()[2:5] == ["(top", "level)", "1-3"]
    assert "(engine steps 1 to 3 of" in gpt2.describe_module(gpt2.by_module(depth=2)[0])


def test_the_nonfinite_banner_numbers_its_step_from_1():
    """The first infinite gradient (sqrt's at 0) is sent at engine step 2 of 3: the banner and its link say 2."""
    def program():
        w = torch.tensor([0.0, 1.0], requires_grad=True)
        w.sqrt().sum().backward()

    rp = gl.replay(program)
    assert [s.name for s in rp.steps] == ["SumBackward0", "SqrtBackward0", "AccumulateGrad"]
    page = rp.to_html()
    assert "is sent at step 2:" in page and "#step=2'" in page and "Go to step 2<" in page


# -- the page -------------------------------------------------------------------------------
@needs_layout
def test_page_embeds_the_module_steps_at_each_depth(gpt2, gpt2_page):
    """The page's data holds, per depth, the module steps by_module gives, with their engine ranges and drawn nodes."""
    data = page_data(gpt2_page)
    titles = {html.unescape(t) for t in re.findall(r"<title>([^<]*)</title>", gpt2_page)}
    assert sorted(data["levels"], key=int) == [str(d) for d in range(1, 6)]
    for depth, entries in data["levels"].items():
        mods = gpt2.by_module(depth=int(depth))
        assert [e["m"] for e in entries] == [m.module or "(top level)" for m in mods]
        assert [e["r"] for e in entries] == [[m.start, m.stop - 1] for m in mods]
        assert [e["t"] for e in entries] == [gpt2.describe_module(m) for m in mods]
        for e in entries:
            assert e["nodes"] and set(e["nodes"]) <= titles
            for title, _ in e.get("s", []) + e.get("a", []):
                assert title in titles


@needs_layout
def test_gpt2_page_opens_by_module_at_the_diagrams_depth(gpt2, gpt2_page):
    """GPT-2 has scopes and more than 100 steps: the page opens by module, at the depth of its module boxes."""
    data = page_data(gpt2_page)
    assert len(gpt2.steps) > BY_MODULE_ABOVE and data["by"] == "module"
    boxes = set(re.findall(r'class="node">\s*<title>(scope_[^<]*)</title>', gpt2_page))
    depth = data["depth"]
    named = {"scope_" + re.sub(r"\W", "_", e["m"]) for e in data["levels"][str(depth)]}
    assert boxes and boxes <= named  # every module box of the diagram is a module of the steps
    assert opening(gpt2_page) == ("module", depth, len(gpt2.by_module(depth=depth)))
    # by="step" opens it by step, depth= collapses both the diagram and the module steps
    assert page_data(gpt2.to_html(by="step"))["by"] == "step"
    deeper = page_data(gpt2.to_html(depth=4))
    assert deeper["depth"] == 4 and [e["m"] for e in deeper["levels"]["4"]] == [m.module or "(top level)" for m in gpt2.by_module(depth=4)]


def test_page_opens_by_step_without_scopes_or_with_few_steps():
    """A 122-step graph without modules opens by step; so does a small model; by='module' without modules is refused."""
    def loop():
        w = torch.tensor([1.0, 2.0], requires_grad=True)
        y = w
        for _ in range(120):
            y = y * 1.01
        y.sum().backward()

    rp = gl.replay(loop)
    assert len(rp.steps) > BY_MODULE_ABOVE and not rp.has_scopes()
    data = page_data(rp.to_html())
    assert data["by"] == "step" and "levels" not in data
    with pytest.raises(ValueError, match=r"by='module'.*module=model"):
        rp.to_html(by="module")
    with pytest.raises(ValueError, match="by"):
        rp.to_html(by="modules")
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Tanh())
    with gl.trace(module=model) as tr:
        model(torch.ones(1, 2)).sum().backward()
    small = page_data(tr.replay().to_html())
    assert small["by"] == "step" and small["levels"]  # it can still switch to by module


def test_cli_replay_says_the_page_opens_by_module(tmp_path, capsys):
    """graphlens replay of a GPT-2 script writes a page that opens by module and says so; --by step opens it by step."""
    pytest.importorskip("transformers")
    from graphlens.cli import main

    script = tmp_path / "gpt2.py"
    script.write_text(
        "import torch, transformers\n"
        "transformers.utils.logging.set_verbosity_error()\n"
        "cfg = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=16, bos_token_id=0, eos_token_id=0)\n"
        "model = transformers.GPT2LMHeadModel(cfg)\n"
        "ids = torch.randint(0, 64, (1, 6))\n"
        "model(ids, labels=ids).loss.backward()\n", encoding="utf-8")
    assert main(["replay", str(script), "--out", str(tmp_path / "a")]) == 0
    said = capsys.readouterr().out
    by, depth, count = opening((tmp_path / "a" / "replay.html").read_text(encoding="utf-8"))
    assert by == "module" and f"the page opens by module: {count} module steps at depth {depth}" in said
    assert main(["replay", str(script), "--out", str(tmp_path / "b"), "--by", "step", "--depth", "3"]) == 0
    assert "opens by module" not in capsys.readouterr().out
    data = page_data((tmp_path / "b" / "replay.html").read_text(encoding="utf-8"))
    assert data["by"] == "step" and data["depth"] == 3


# -- in a real browser ----------------------------------------------------------------------
def _probe(page: str, script: str) -> str:
    """The page with ``script`` run after its own (the page itself never reports its state)."""
    return page.replace("</body>", f"<script>{script}</script></body>")


def _attr(dom: str, name: str) -> str:
    found = re.search(rf'\b{name}="([^"]*)"', dom)
    assert found, f"the page set no {name}"
    return found.group(1)


@needs_browser
@needs_layout
def test_browser_opens_gpt2_by_module_and_numbers_from_1(gpt2_page, tmp_path):
    """In Chromium the GPT-2 page opens at module step 1; #module=3 highlights module step 3's drawn nodes."""
    data = page_data(gpt2_page)
    mods = data["levels"][str(data["depth"])]
    page = tmp_path / "gpt2.html"
    page.write_text(gpt2_page, encoding="utf-8")
    dom = dump_dom(page.as_uri())
    assert _attr(dom, "data-mode") == "module" and _attr(dom, "data-step") == "1"
    where = re.search(r'<div id="gl-where">([^<]*)</div>', dom).group(1)
    assert where.startswith(f"module step 1 of {len(mods)} \u00b7 engine steps 1\u2013{mods[0]['r'][1] + 1} of ")
    dom = dump_dom(f"{page.as_uri()}#module=3")
    running = re.findall(r'<g id="[^"]*" class="node gl-run">\s*<title>([^<]*)</title>', dom)
    assert _attr(dom, "data-step") == "3" and sorted(html.unescape(t) for t in running) == sorted(mods[2]["nodes"])
    assert html.escape(mods[2]["m"]) in dom


@needs_browser
@needs_layout
def test_browser_trail_toggle_adds_the_earlier_steps_edges(gpt2_page, tmp_path):
    """Only the current module step's edges are labelled; ticking the trail adds the earlier ones (faded), unticking removes them."""
    data = page_data(gpt2_page)
    mods = data["levels"][str(data["depth"])]
    k = next(i for i in range(3, len(mods)) if mods[i].get("s") or mods[i].get("a"))
    probe = tmp_path / "trail.html"
    probe.write_text(_probe(gpt2_page, (
        "function count(sel){return document.querySelectorAll('#gl-layer '+sel).length;}"
        "var b=document.body;b.setAttribute('data-now',count('.gl-val'));b.setAttribute('data-now-past',count('.gl-val.past'));"
        "document.getElementById('gl-trail').click();"
        "b.setAttribute('data-trail',count('.gl-val'));b.setAttribute('data-trail-past',count('.gl-val.past'));"
        "document.getElementById('gl-trail').click();b.setAttribute('data-off',count('.gl-val'));"
    )), encoding="utf-8")
    dom = dump_dom(f"{probe.as_uri()}#module={k + 1}")
    now, trail, past = int(_attr(dom, "data-now")), int(_attr(dom, "data-trail")), int(_attr(dom, "data-trail-past"))
    assert _attr(dom, "data-now-past") == "0" and now >= 1
    assert past >= 1 and trail == now + past
    assert int(_attr(dom, "data-off")) == now


@needs_browser
@needs_layout
def test_browser_switches_between_module_and_step_and_depth(gpt2, gpt2_page, tmp_path):
    """From a module step, 'by step' opens its first engine step, an engine step in its list opens that step, and a deeper depth keeps the place."""
    data = page_data(gpt2_page)
    mods = data["levels"][str(data["depth"])]
    k = max(range(len(mods)), key=lambda i: mods[i]["r"][1] - mods[i]["r"][0])  # the longest run
    start, last = mods[k]["r"]
    probe = tmp_path / "modes.html"
    probe.write_text(_probe(gpt2_page, (
        "var b=document.body;"
        "var r=document.getElementById('gl-by-step');r.checked=true;r.dispatchEvent(new Event('change'));"
        "b.setAttribute('data-a',b.getAttribute('data-mode')+':'+b.getAttribute('data-step'));"
        "r=document.getElementById('gl-by-module');r.checked=true;r.dispatchEvent(new Event('change'));"
        "b.setAttribute('data-b',b.getAttribute('data-mode')+':'+b.getAttribute('data-step'));"
        "var j=document.querySelectorAll('#gl-inside .gl-jump');j[j.length-1].click();"
        "b.setAttribute('data-c',b.getAttribute('data-mode')+':'+b.getAttribute('data-step'));"
        "r=document.getElementById('gl-by-module');r.checked=true;r.dispatchEvent(new Event('change'));"
        "var d=document.getElementById('gl-depth');d.value='5';d.dispatchEvent(new Event('change'));"
        "b.setAttribute('data-d',b.getAttribute('data-mode')+':'+b.getAttribute('data-step')+':'+document.getElementById('gl-node').textContent);"
    )), encoding="utf-8")
    dom = dump_dom(f"{probe.as_uri()}#module={k + 1}")
    assert _attr(dom, "data-a") == f"step:{start + 1}"
    assert _attr(dom, "data-b") == f"module:{k + 1}"
    shown = min(last, start + 39)  # the list shows the first 40 engine steps of a run
    assert _attr(dom, "data-c") == f"step:{shown + 1}"
    deep = gpt2.by_module(depth=5)
    at = next(m for m in deep if m.start <= start < m.stop)  # the deeper module step holding the run's first engine step
    mode, step, name = _attr(dom, "data-d").split(":", 2)
    assert (mode, int(step), html.unescape(name)) == ("module", at.index + 1, at.module or "(top level)")
