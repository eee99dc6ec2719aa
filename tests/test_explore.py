"""Tests of the explorer page: the data it embeds, the explore command, and its behaviour in a real browser."""

import json
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
import torch

import graphlens as gl
from graphlens.explore import explore_script, module_scopes
from graphlens.render.explore_html import UNCONNECTED, explore_data

from browser import CHROMIUM, needs_browser


class Block(torch.nn.Module):
    """A small residual block: a layer norm, a linear layer and a tanh."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(n)
        self.fc = torch.nn.Linear(n, n)

    def forward(self, x):
        return x + torch.tanh(self.fc(self.norm(x)))


class Net(torch.nn.Module):
    """An embedding, three blocks in a ModuleList, and a head."""

    def __init__(self, n: int = 8) -> None:
        super().__init__()
        self.embed = torch.nn.Linear(4, n)
        self.blocks = torch.nn.ModuleList(Block(n) for _ in range(3))
        self.head = torch.nn.Linear(n, 1)

    def forward(self, x):
        x = self.embed(x)
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def _net_graph():
    torch.manual_seed(0)
    model = Net()
    x = torch.randn(2, 4)
    with gl.trace(module=model) as tr:
        loss = model(x).pow(2).mean()
        loss.backward()
    return tr.graph()


def _data(page: str) -> dict:
    m = re.search(r'<script id="gl-data" type="application/json">(.*?)</script>', page, re.S)
    return json.loads(m.group(1))


# -- the embedded data --------------------------------------------------------------------
def test_data_has_the_module_tree_and_opens_the_dominant_module():
    """Modules come from the ops' scopes with every dotted prefix; the model's one big container opens by itself."""
    data = explore_data(_net_graph())
    names = [m["n"] for m in data["modules"]]
    assert {"embed", "blocks", "blocks.0", "blocks.0.fc", "blocks.2.norm", "head"} <= set(names)
    index = {n: k for k, n in enumerate(names)}
    assert data["modules"][index["blocks.1.fc"]]["p"] == index["blocks.1"]
    from graphlens.render.explore_html import _module_key
    assert sorted(["h.10", "h.2", "h"], key=_module_key) == ["h", "h.2", "h.10"]  # natural order of block numbers
    assert [names[k] for k in data["open"]] == ["blocks"]  # it holds most of the graph; its blocks stay closed
    blocks = data["modules"][index["blocks"]]
    assert blocks["pm"] == 12 and blocks["o"] == sum(data["modules"][index[f"blocks.{i}"]]["o"] for i in range(3))


def test_depth_opens_modules_by_level():
    """depth=1 opens nothing (the top-level modules, closed); depth=2 opens the top level."""
    g = _net_graph()
    assert explore_data(g, depth=1)["open"] == []
    data = explore_data(g, depth=2)
    assert sorted(data["modules"][k]["n"] for k in data["open"]) == ["blocks", "embed", "head"]


def test_graph_without_scopes_opens_flat():
    """A snapshot of a program without modules embeds no module: every node is outside (-1)."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    loss = (w * 3).exp().sum()
    data = explore_data(gl.snapshot(loss))
    assert data["modules"] == [] and data["open"] == []
    assert {n["s"] for n in data["nodes"]} == {-1}
    assert any(n.get("n") == "w" and "r" in n["f"] for n in data["nodes"])


def test_nodes_carry_shape_value_grad_and_saved_tensors():
    """A tensor node holds its shape, dtype, value and grad; an op its saved tensors by name (x, freed by the backward)."""
    with gl.trace() as tr:
        w = torch.tensor([1.0, 2.0], requires_grad=True)
        x = torch.tensor([3.0, 4.0])
        y = w * x
        y.sum().backward()
    nodes = explore_data(tr.graph())["nodes"]
    by = {n.get("n"): n for n in nodes}
    assert by["w"]["sh"] == "shape [2]" and by["w"]["dt"] == "float32" and by["w"]["g"] == "[3, 4]"
    assert by["y"]["v"] == "[3, 8]" and by["y"]["gr"] == 1  # flowed, then released
    mul = next(n for n in nodes if n["k"] == "o" and n.get("fw") == "mul")
    assert mul["sv"][0] == "saved other = x: freed"


def test_page_escapes_what_it_embeds():
    """A name holding </script>, <!-- and & is embedded as \\u escapes and reads back unchanged."""
    name = "</script><!--&x"
    w = torch.tensor([1.0], requires_grad=True)
    page = gl.snapshot((w * 2).sum(), names={name: w}).to_html()
    assert page.count("</script>") == 2 and "<!--" not in page
    assert "\\u003c/script\\u003e" in page and "\\u0026x" in page
    assert any(n.get("n") == name for n in _data(page)["nodes"])


def test_page_is_deterministic_and_offline():
    """The same program gives the same bytes, and the page loads nothing from anywhere."""
    a, b = _net_graph().to_html(), _net_graph().to_html()
    assert a == b
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", a)
    assert "@import" not in a and "fetch(" not in a and "XMLHttpRequest" not in a


def test_to_html_writes_the_page(tmp_path):
    """g.to_html(path) writes the page it returns."""
    page = _net_graph().to_html(tmp_path / "g.html", title="net")
    assert (tmp_path / "g.html").read_text(encoding="utf-8") == page and "<title>net</title>" in page


def test_bad_depth_is_refused_in_a_sentence():
    """depth=0 raises a ValueError naming the option."""
    with pytest.raises(ValueError, match="depth must be an int >= 1"):
        explore_data(_net_graph(), depth=0)


def test_nodes_no_root_reaches_are_grouped():
    """A traced tensor with no path to the root is drawn in the one 'not connected' group."""
    with gl.trace() as tr:
        w = torch.tensor([1.0, 2.0], requires_grad=True)
        stray = torch.ones(3) * 5
        loss = (w * 2).sum()
        loss.backward()
    data = explore_data(tr.graph())
    group = [k for k, m in enumerate(data["modules"]) if m["n"] == UNCONNECTED]
    assert len(group) == 1
    assert {n.get("n") for n in data["nodes"] if n["s"] == group[0]} >= {"stray"}
    assert next(n for n in data["nodes"] if n.get("n") == "w")["s"] == -1


def test_optimizer_state_goes_with_the_module_of_its_parameter_in_every_step():
    """An Adam loop's state, made outside every module and each step's from the step before's, is placed, every version, with the module whose parameter it updates."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    opt = torch.optim.Adam(m.parameters(), lr=0.01)
    x = torch.randn(4, 4)
    steps = 12
    with gl.trace(module=m) as tr:
        for _ in range(steps):
            opt.zero_grad()
            m(x).pow(2).mean().backward()
            opt.step()
    data = explore_data(tr.graph())
    modules = [mod["n"] for mod in data["modules"]]
    state = [n for n in data["nodes"] if n.get("n", "").startswith("opt.state[")]
    for layer in ("0", "2"):
        for kind in ("exp_avg'", "exp_avg_sq'"):
            mine = [n for n in state if n["n"].startswith(f"opt.state[m.{layer}.weight]") and n["n"].endswith(kind + "]")]
            assert len(mine) >= steps  # (a version per step, at least)
            assert {modules[n["s"]] for n in mine} == {layer}
            assert all(n.get("a") == 1 for n in mine)

def _stack_of_leaves(n: int, *, params: bool = False):
    ws = [torch.nn.Parameter(torch.randn(3)) if params else torch.randn(3, requires_grad=True) for _ in range(n)]
    with gl.trace() as tr:
        loss = torch.stack(ws).pow(2).sum()
        loss.backward()
    return tr.graph()


def test_many_alike_leaves_one_op_reads_are_one_closed_group():
    """torch.stack over 400 leaves: the 400 are one group, closed when the page opens; 19 are drawn each as itself, and so are parameters."""
    from graphlens.render.explore_html import ALIKE_GROUP

    data = explore_data(_stack_of_leaves(400))
    (group,) = [k for k, m in enumerate(data["modules"]) if m.get("g")]
    m = data["modules"][group]
    assert m["n"].startswith("(400 alike leaves, shape [3], float32") and m["t"] == 400 and m["p"] == -1
    members = [n for n in data["nodes"] if n["s"] == group]
    assert len(members) == 400 and all(n["k"] == "t" for n in members)
    assert group not in data["open"]
    assert not any(m.get("g") for m in explore_data(_stack_of_leaves(ALIKE_GROUP - 1))["modules"])
    assert not any(m.get("g") for m in explore_data(_stack_of_leaves(400, params=True))["modules"])


# -- running a script ----------------------------------------------------------------------
def _script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "prog.py"
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return path


_NET_SCRIPT = """
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Sequential(torch.nn.Linear(4, 1)))
    loss = model(torch.randn(5, 3)).sum()
    loss.backward()
    torch.save([p.grad for p in model.parameters()], __file__ + ".grads")
"""


def test_explore_script_names_ops_by_module_and_changes_nothing(tmp_path):
    """A script run for the explorer: its ops carry module paths, its grads are bitwise those of a plain run, and no hook stays."""
    script = _script(tmp_path, _NET_SCRIPT)
    subprocess.run([sys.executable, str(script)], check=True, timeout=120)
    plain = torch.load(str(script) + ".grads")
    run = explore_script(str(script))
    assert run.error is None
    traced = torch.load(str(script) + ".grads")
    assert all(torch.equal(a, b) for a, b in zip(plain, traced))
    scopes = {o.scope for o in run.trace.graph().ops if o.forward in ("linear", "tanh")}
    assert scopes == {"0", "1", "2.0"}
    hooks = torch.nn.modules.module
    assert not hooks._global_forward_pre_hooks and not hooks._global_forward_hooks


def test_module_scopes_leave_a_trace_with_its_own_module_alone():
    """A trace given module= keeps its own scopes; the global hooks add none to it."""
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    with module_scopes(), gl.trace(module=model) as tr:
        model(torch.ones(1, 2)).sum().backward()
    assert {o.scope for o in tr.graph().ops if o.forward == "linear"} == {"0"}


def test_cli_explore_writes_the_page(tmp_path):
    """graphlens explore SCRIPT -o PAGE writes a page whose modules are the script's model's."""
    script = _script(tmp_path, _NET_SCRIPT)
    out = tmp_path / "o" / "page.html"
    proc = subprocess.run([sys.executable, "-m", "graphlens", "explore", str(script), "-o", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "written:" in proc.stdout
    names = {m["n"] for m in _data(out.read_text(encoding="utf-8"))["modules"]}
    assert {"0", "1", "2", "2.0"} <= names


def test_cli_explore_keeps_exit_status_and_traceback(tmp_path):
    """A failing script: exit 1, its traceback on stderr, and the page says it stopped; sys.exit(3) gives 3."""
    from graphlens.cli import main

    script = _script(tmp_path, """
        import torch
        w = torch.tensor([1.0], requires_grad=True)
        loss = (w * 2).exp().sum()
        loss.backward()
        loss.backward()
    """)
    out = tmp_path / "p.html"
    proc = subprocess.run([sys.executable, "-m", "graphlens", "explore", str(script), "-o", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "Traceback" in proc.stderr and "RuntimeError" in proc.stderr and "graphlens:" in proc.stderr
    assert "The program stopped with an error." in out.read_text(encoding="utf-8")
    exits = _script(tmp_path, "import sys\nsys.exit(3)\n")
    assert main(["explore", str(exits), "-o", str(tmp_path / "e.html")]) == 3


def test_cli_explore_rejects_a_missing_script(tmp_path, capsys):
    """A script path that is not a file: exit 2 and one line naming it."""
    from graphlens.cli import main

    assert main(["explore", str(tmp_path / "nope.py"), "-o", str(tmp_path / "x.html")]) == 2
    err = capsys.readouterr().err
    assert "nope.py" in err and len(err.strip().splitlines()) == 1


# -- a real browser ----------------------------------------------------------------------------
_HARNESS = """<script>
(function () {
  const out = {};
  const boxes = () => [...document.querySelectorAll('.gl-box')];
  const name = g => g.querySelector('text').textContent;
  const nodes = () => [...document.querySelectorAll('.gl-node')].map(g => [...g.querySelectorAll('text')].map(t => t.textContent).join(' | '));
  out.ready = +document.body.getAttribute('data-ready');
  out.boxes = boxes().map(name);
  out.nodesBefore = nodes();
  const box = boxes().find(g => name(g) === @BOX@);
  box.dispatchEvent(new MouseEvent('click', {bubbles: true}));
  out.boxesAfter = boxes().map(name);
  out.nodesAfter = nodes();
  out.frames = [...document.querySelectorAll('.gl-frame .gl-title text')].map(t => t.textContent);
  const s = document.getElementById('gl-search');
  s.value = @PARAM@; s.dispatchEvent(new Event('input'));
  out.listed = [...document.querySelectorAll('#gl-matches a')].map(a => a.textContent);
  s.dispatchEvent(new KeyboardEvent('keydown', {key: 'Enter'}));
  out.matched = [...document.querySelectorAll('.gl-node.match')].map(g => g.getAttribute('data-id'));
  const hit = document.querySelector('.gl-node.match');
  document.querySelector('#gl-info').innerHTML = '';
  document.getElementById('gl-svg').dispatchEvent(new MouseEvent('click', {bubbles: true}));  // unpin the search's pick
  hit.dispatchEvent(new MouseEvent('mouseover', {bubbles: true}));
  out.hover = document.getElementById('gl-info').innerText;
  const pre = document.createElement('pre'); pre.id = 'gl-test'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script></body>"""


def _open(page: str, box: str, param: str, tmp: Path) -> dict:
    """Open ``page`` in headless Chromium with a script that clicks, searches and hovers as a user would."""
    path = tmp / "probe.html"
    path.write_text(page.replace("</body>", _HARNESS.replace("@BOX@", json.dumps(box)).replace("@PARAM@", json.dumps(param))),
                    encoding="utf-8")
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
             f"--user-data-dir={profile}", "--window-size=1400,900", "--virtual-time-budget=5000", "--dump-dom", path.as_uri()],
            capture_output=True, text=True, timeout=120, check=False,
        )
    found = re.search(r'<pre id="gl-test">(.*?)</pre>', proc.stdout, re.S)
    assert found, proc.stderr[-2000:]
    return json.loads(found.group(1).replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"'))


@needs_browser
def test_browser_opens_collapsed_expands_searches_and_hovers(tmp_path):
    """In Chromium: three closed blocks; a click opens one to its ops; search finds a parameter by qualified name; hover shows its shape."""
    g = _net_graph()
    weight = next(t for t in g.tensors if t.name == "blocks.2.fc.weight")
    got = _open(g.to_html(), "blocks.1", "blocks.2.fc.weight", tmp_path)
    assert sorted(got["boxes"]) == ["blocks.0", "blocks.1", "blocks.2", "embed", "head"]
    assert not any("AddmmBackward0" in n for n in got["nodesBefore"])
    assert "blocks.1" not in got["boxesAfter"] and {"fc", "norm"} <= set(got["boxesAfter"])
    assert any(n.startswith("add / AddBackward0") for n in got["nodesAfter"])  # the block's residual add
    assert "\u2212 blocks.1" in got["frames"]
    assert any(a.startswith("blocks.2.fc.weight") for a in got["listed"])
    assert weight.id in got["matched"]  # revealed: blocks.2 and its fc opened
    assert "shape\t[8, 8]" in got["hover"]
    assert "parameter" in got["hover"] and "grad" in got["hover"]


@needs_browser
def test_browser_draws_many_alike_leaves_as_one_box_until_clicked(tmp_path):
    """In Chromium: the page of torch.stack over 400 leaves opens on one box for them (not a row 400 wide); a click lists them."""
    page = _stack_of_leaves(400).to_html()
    name = next(m["n"] for m in explore_data(_stack_of_leaves(400))["modules"] if m.get("g"))
    got = _open(page, name, "loss", tmp_path)
    assert got["boxes"] == [name] and len(got["nodesBefore"]) < 10
    assert got["boxesAfter"] == [] and len(got["nodesAfter"]) > 400


@needs_browser
def test_browser_gpt2_page_is_small_and_opens_fast(tmp_path):
    """A 12-layer GPT-2 traced with module=model: the page is under 5 MB, opens on its 12 blocks in under 2 s, and a block opens."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=12, n_embd=64, n_head=4, vocab_size=256, n_positions=64)
    model = transformers.GPT2LMHeadModel(cfg)
    ids = torch.randint(0, 256, (2, 16))
    with gl.trace(module=model) as tr:
        model(ids, labels=ids).loss.backward()
    start = time.perf_counter()
    page = tr.graph().to_html()
    assert time.perf_counter() - start < 5
    assert len(page.encode("utf-8")) < 5_000_000
    got = _open(page, "h.4", "transformer.h.7.mlp.c_fc.weight", tmp_path)
    assert [f"h.{i}" for i in range(12)] == [b for b in got["boxes"] if b.startswith("h.")]
    assert got["ready"] < 2000
    assert {"attn", "mlp", "ln_1", "ln_2"} <= set(got["boxesAfter"])
    assert any("c_fc.weight" in a for a in got["listed"])
    assert "shape\t[64, 256]" in got["hover"]


def test_module_boxes_carry_the_bytes_memory_charges_them():
    """Each module's saved bytes on the page are what g.memory() gives that module (backward-only ops included)."""
    g = _net_graph()
    data = explore_data(g)
    totals = g.memory().modules
    shown = {m["n"]: m["m"] for m in data["modules"] if "m" in m}
    assert shown and any(v > 0 for v in shown.values())
    for name, value in shown.items():
        assert value == totals.get(name, 0), name
