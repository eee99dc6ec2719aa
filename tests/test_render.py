"""Tests of graphlens.render: the data and function views, collapsing, golden DOT, rendering files.

Golden DOT files of the article's six charts live in tests/golden/chartN.dot; regenerate
them after an intended change of the drawing with
``GRAPHLENS_UPDATE_GOLDEN=1 pytest tests/test_render.py -k golden``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import graphlens as gl
from graphlens import charts
from graphlens.graph import Graph
from graphlens.render import (
    BOX_FILL,
    GRAD_BORDER,
    HIGHLIGHT,
    LEAF_FILL,
    NONLEAF_FILL,
    PARAM_PERIPHERIES,
    RELEASED,
    LayoutProgramNotFound,
    find_layout_program,
    render,
    repr_mimebundle,
    to_dot,
)
from graphlens.render.rows import MAX_PASSES

GOLDEN = Path(__file__).parent / "golden"
UPDATE_GOLDEN = os.environ.get("GRAPHLENS_UPDATE_GOLDEN") == "1"


def _pure() -> str | None:
    beside = Path(sys.executable).parent / "graphviz-pure"
    return str(beside) if beside.is_file() else shutil.which("graphviz-pure")


needs_pure = pytest.mark.skipif(_pure() is None, reason="graphviz-pure is not installed (pip install graphviz-pure)")
needs_system_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz 'dot' is not on PATH")


def node_line(source: str, node_id: str) -> str:
    """The DOT statement that declares ``node_id``."""
    for line in source.splitlines():
        if line.strip().startswith(f"{node_id} [label="):
            return line
    raise AssertionError(f"node {node_id} is not drawn")


def edge_lines(source: str) -> list[str]:
    return [line.strip() for line in source.splitlines() if " -> " in line]


def edge_line(source: str, src: str, dst: str) -> str:
    for line in edge_lines(source):
        if line == f"{src} -> {dst}" or line.startswith(f"{src} -> {dst} "):
            return line
    raise AssertionError(f"no edge {src} -> {dst}")


def drawn_ids(source: str) -> list[str]:
    return re.findall(r"^\s*(\w+) \[label=", source, flags=re.M)


def traced_example():
    """w (leaf, requires grad) -> h -> out, with m made under no_grad from h."""
    with gl.trace() as tr:
        w = torch.tensor([1.0, 2.0], requires_grad=True)
        x = torch.tensor([3.0, 4.0])
        h = w * x
        with torch.no_grad():
            m = h * 2
        out = (h * m).sum()
        out.backward()
    return tr.graph()


# -- colours and marks on real traced graphs ---------------------------------------------------
def test_leaf_requiring_grad_is_green_with_thick_orange_border():
    """A leaf that requires grad is filled green and has a thick orange border."""
    g = traced_example()
    line = node_line(to_dot(g).source, g.find("w").id)
    assert f'fillcolor="{LEAF_FILL}"' in line
    assert f'color="{GRAD_BORDER}"' in line and "penwidth=3" in line


def test_nonleaf_is_white_and_plain_leaf_has_thin_border():
    """A non-leaf is white; a leaf that does not require grad has a thin, non-orange border."""
    g = traced_example()
    source = to_dot(g).source
    h = node_line(source, g.find("h").id)
    assert f'fillcolor="{NONLEAF_FILL}"' in h and f'color="{GRAD_BORDER}"' in h
    x = node_line(source, g.find("x").id)
    assert f'fillcolor="{LEAF_FILL}"' in x and GRAD_BORDER not in x and "penwidth=1" in x


def test_retained_grad_row_shows_value_and_released_grad_is_grey_italic():
    """Chart 6: y2 (retain_grad) shows its grad value; y1's grad flowed and was released."""
    g = charts.chart(6)
    source = to_dot(g).source
    y2 = g.find("y2")
    assert y2.grad is not None
    assert f"<B>grad</B> {y2.grad}" in node_line(source, y2.id)
    y1 = g.find("y1")
    assert y1.grad is None and y1.flowed
    assert f'COLOR="{RELEASED}"><I>grad {y1.flowed[-1]} (released)</I>' in node_line(source, y1.id)


def test_detached_tensor_sits_behind_a_dashed_cut_edge():
    """Chart 4: y2d = y2.detach() is a leaf reached from y2 only by a dashed 'detach' edge."""
    g = charts.chart(4)
    source = to_dot(g).source
    y2, y2d = g.find("y2"), g.find("y2d")
    line = edge_line(source, y2.id, y2d.id)
    assert "style=dashed" in line and "label=detach" in line
    assert f'fillcolor="{LEAF_FILL}"' in node_line(source, y2d.id)


def test_no_grad_region_is_a_dashed_grey_cluster():
    """Tensors and ops made under no_grad sit in a dashed cluster labelled no_grad."""
    g = traced_example()
    source = to_dot(g).source
    m = g.find("m")
    assert m.region == "no_grad#0"
    cluster = source.split("subgraph cluster_no_grad_0 {", 1)[1].split("}", 1)[0]
    assert "no_grad_0 [label=no_grad" in cluster and "dashed" in cluster and "#9e9e9e" in cluster
    assert f"{m.id} [label=" in cluster and f"{m.op} [label=<mul>" in cluster
    assert f"{g.find('h').id} [label=" not in cluster


def test_ops_show_forward_and_backward_names_and_accumulate_grad_is_hidden():
    """Data view: 'mul / MulBackward0', a forward-only op by its forward name, no AccumulateGrad."""
    g = charts.chart(2)
    source = to_dot(g).source
    assert "<add / AddBackward0>" in source
    xx = g.find("xx")
    assert g.producer(xx).name is None
    assert node_line(source, xx.op).split(" [label=")[1].startswith("<pow>")
    assert "AccumulateGrad" not in source
    p1 = g.find("p1")
    consumer = next(e.dst for e in g.edges if e.kind == "input" and e.src == p1.id)
    edge_line(source, p1.id, consumer)  # the leaf feeds its consumer directly


def test_snapshot_data_view_is_connected_through_unnamed_intermediates():
    """A snapshot knows no unnamed intermediate tensors: its ops are linked through next edges."""
    a = torch.tensor([1.0, 2.0], requires_grad=True)
    c = (a.exp() * 2).sin().sum()
    g = gl.snapshot(c)
    source = to_dot(g, legend=False).source
    ids = drawn_ids(source)
    assert sorted(ids) == sorted([t.id for t in g.tensors] + [o.id for o in g.ops if not o.is_accumulate_grad])
    # weakly connected: a walk over the undirected edges reaches every drawn node
    adj: dict[str, set] = {i: set() for i in ids}
    for line in edge_lines(source):
        src, dst = line.split(" [")[0].split(" -> ")
        adj[src].add(dst)
        adj[dst].add(src)
    seen, stack = {ids[0]}, [ids[0]]
    while stack:
        for n in adj[stack.pop()] - seen:
            seen.add(n)
            stack.append(n)
    assert seen == set(ids)


def test_values_grads_and_max_elements_options():
    """values=/grads= switch the rows off; max_elements shortens the numbers shown."""
    with gl.trace() as tr:
        w = torch.arange(10.0, requires_grad=True)
        (w * 2).sum().backward()
    g = tr.graph()
    wid = g.find("w").id
    full = node_line(to_dot(g, max_elements=None).source, wid)
    assert "[0, 1, 2, 3, 4, 5, … (10 elements)]" in full and "grad</B> [2, 2, 2, 2, 2, 2, … (10 elements)]" in full
    short = node_line(to_dot(g, max_elements=2).source, wid)
    assert "[0, 1, … (10 elements)]" in short and "grad</B> [2, 2, … (10 elements)]" in short
    bare = node_line(to_dot(g, values=False, grads=False).source, wid)
    assert "elements" not in bare and "<B>grad</B>" not in bare


def test_precision_sets_the_significant_digits_of_every_value_row():
    """precision=N prints values, kept grads and released grads with N significant digits;
    the default stays 4 (the golden charts)."""
    w = torch.tensor([1 / 3, 2.0], requires_grad=True)
    with gl.trace() as tr:
        h = w / 7
        loss = (h * h).sum()
        loss.backward()
    g = tr.graph()
    wid, hid = g.find("w").id, g.find("h").id
    default, fine = to_dot(g).source, to_dot(g, precision=8).source
    assert "[0.3333, 2]" in node_line(default, wid) and "[0.33333334, 2]" in node_line(fine, wid)
    assert f"grad</B> {g.find('w').grad.format(8)}" in node_line(fine, wid)
    assert f"grad {g.find('h').flowed[0].format(8)} (released)" in node_line(fine, hid)
    assert g.find("h").flowed[0].format(8) != g.find("h").flowed[0].format(4)
    with pytest.raises(ValueError, match="precision"):
        to_dot(g, precision=0)
    with pytest.raises(TypeError, match="precision"):
        to_dot(g, precision=2.5)


def test_saved_tensors_on_request():
    """saved=True lists each op's saved values and names the tensor each saved (self = y2),
    then says freed once backward released them; by default they are not drawn."""
    p = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    with gl.trace() as tr:
        y2 = p * 2
        y3 = y2**2
    g = tr.graph()
    pow_op = g.producer(g.find("y3"))
    entry = next(e for e in pow_op.saved if e.name == "self")
    assert entry.tensor == g.find("y2").id and entry.state is gl.graph.LIVE
    assert "saved self" not in to_dot(g).source
    assert "saved self = y2: float32[3]" in node_line(to_dot(g, saved=True).source, pow_op.id)
    with gl.trace() as tr:
        y2 = p * 2
        y3 = y2**2
        y3.sum().backward()
    g = tr.graph()  # the trace saw what each op saved before backward freed it
    assert "saved self = y2: freed" in node_line(to_dot(g, saved=True).source, g.producer(g.find("y3")).id)
    after = gl.snapshot(y3)  # a snapshot after backward cannot read the freed tensor: no name is guessed
    assert "saved self: freed" in node_line(to_dot(after, saved=True).source, after.producer(after.find("y3")).id)


def test_a_picture_without_saved_values_makes_no_saved_records():
    """Drawing a snapshot with saved=False (the default) gives the DOT it gives once the ops
    are built with their saved entries, and leaves those entries unmade until something reads
    ``g.ops``; they then hold what the snapshot read before backward freed the tensors."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    x = torch.randn(5, 3)
    y = x
    for _ in range(300):  # (a chain the picture folds, beside a model the picture boxes)
        y = y * 1.0001
    for root, module in ((model(x).pow(2).mean(), model), (y.sum() + model(x).sum(), None)):
        lazy, built = gl.snapshot(root, module=module), gl.snapshot(root, module=module)
        built.ops
        for options in ({}, {"view": "function"}, {"max_nodes": 20}, {"highlight": {"op1"}}, {"depth": 1}):
            assert to_dot(lazy, **options).source == to_dot(built, **options).source
        assert callable(lazy._ops), "drawing without saved values made the saved records"
        root.backward()
        assert lazy == built and any(op.saved for op in lazy.ops)
        assert to_dot(lazy, saved=True).source == to_dot(built, saved=True).source
        assert not any(e.state is gl.graph.FREED for op in lazy.ops for e in op.saved)


def test_roots_at_bottom_and_shared_parameters_at_top():
    """Chart 5: both losses share the bottom rank, p1 and p2 (used by both) the top rank."""
    g = charts.chart(5)
    source = to_dot(g).source
    ids = {name: g.find(name).id for name in ("loss1", "loss2", "p1", "p2", "xa")}
    max_rank = re.search(r"\{rank=max; ([^}]*)\}", source).group(1).split("; ")
    min_rank = re.search(r"\{rank=min; ([^}]*)\}", source).group(1).split("; ")
    assert sorted(max_rank) == sorted([ids["loss1"], ids["loss2"]])
    assert sorted(min_rank) == sorted([ids["p1"], ids["p2"]])


def test_legend_on_by_default_and_can_be_turned_off():
    """The legend lists only the marks the graph uses and legend=False removes it."""
    g = charts.chart(4)
    source = to_dot(g).source
    legend = node_line(source, "legend")
    assert "detach(): no gradient path" in legend and "no_grad" not in legend
    assert "legend [" not in to_dot(g, legend=False).source


def test_direction_backward_points_arrows_the_way_gradients_flow():
    """direction='backward' keeps the layout and reverses every arrow of the flow."""
    g = charts.chart(1)
    forward = edge_lines(to_dot(g, legend=False, notes=False).source)
    backward = edge_lines(to_dot(g, legend=False, notes=False, direction="backward").source)
    assert len(forward) == len(backward)
    assert all("dir=back" in line for line in backward) and not any("dir=" in line for line in forward)


def test_highlight_nodes_and_edges():
    """highlight= draws the given nodes and (src, dst) edges in the highlight colour."""
    g = charts.chart(6)
    p1, y1 = g.find("p1"), g.find("y1")
    source = to_dot(g, highlight={p1.id, (p1.id, y1.op)}).source
    assert f'color="{HIGHLIGHT}"' in node_line(source, p1.id)
    assert f'color="{HIGHLIGHT}"' in edge_line(source, p1.id, y1.op)
    assert HIGHLIGHT not in node_line(source, y1.id)
    with pytest.raises(ValueError, match="'t99'"):
        to_dot(g, highlight={"t99"})


def test_highlight_of_an_accumulate_grad_edge_lands_on_its_leaf():
    """An edge given through a hidden AccumulateGrad node is drawn on the leaf's own edge."""
    g = charts.chart(6)
    acc = next(o for o in g.ops if o.is_accumulate_grad and o.variable == g.find("p2").id)
    consumer = g.producer(g.find("y2"))
    source = to_dot(g, highlight={(consumer.id, acc.id)}).source
    assert f'color="{HIGHLIGHT}"' in edge_line(source, acc.variable, consumer.id)


# -- the function view ---------------------------------------------------------------------------
def test_function_view_draws_backward_nodes_with_leaves_above_accumulate_grad():
    """view='function' draws every backward node, next edges reversed, leaves above AccumulateGrad."""
    g = charts.chart(4)
    source = to_dot(g, view="function", legend=False).source
    backward_ops = [o for o in g.ops if o.name is not None]
    for o in backward_ops:
        assert f"<{o.name}>" in node_line(source, o.id)
    for e in g.edges:
        if e.kind == "next":
            edge_line(source, e.dst, e.src)
    for o in backward_ops:
        if o.is_accumulate_grad:
            edge_line(source, o.variable, o.id)
    for root in g.roots:
        edge_line(source, root.op, root.id)
    assert " / " not in source  # no forward names in the function view
    assert g.find("y1").id not in drawn_ids(source)  # intermediates are not drawn


def test_function_view_of_snapshot_matches_next_functions():
    """The function view of a snapshot has exactly one edge per next_functions entry (plus leaves and root)."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    loss = (w.exp() * w).sum()
    g = gl.snapshot(loss)
    lines = edge_lines(to_dot(g, view="function").source)
    n_next = sum(1 for e in g.edges if e.kind == "next")
    n_acc = sum(1 for o in g.ops if o.is_accumulate_grad)
    assert len(lines) == n_next + n_acc + len(g.roots)


# -- collapsing ------------------------------------------------------------------------------------
class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.act = torch.nn.Tanh()

    def forward(self, x):
        return self.act(self.lin(x)) + x


def traced_model():
    torch.manual_seed(0)
    model = torch.nn.Sequential(Block(), Block(), Block())
    with gl.trace(module=model) as tr:
        inp = torch.randn(2, 4)
        out = model(inp)
        loss = out.pow(2).sum()
        loss.backward()
    return tr.graph()


def test_depth_collapses_submodules_into_boxes():
    """depth=1 draws one box per top-level submodule; the program's own tensors stay visible."""
    g = traced_model()
    assert {o.scope for o in g.ops if o.scope} >= {"0", "0.lin", "1", "2.act"}
    source = to_dot(g, depth=1, repeats=False).source  # (blocks 0 and 1 are the same graph)
    ids = drawn_ids(source)
    assert {"scope_0", "scope_1", "scope_2"} <= set(ids)
    for name in ("inp", "out", "loss"):
        assert g.find(name).id in ids
    # nothing scoped is left outside a box but the program's own named tensors
    assert all(g.node(i).scope is None or g.node(i).name for i in ids if i in g)
    assert "weight" not in source and "bias" not in source  # parameters folded into their box
    edge_line(source, "scope_0", "scope_1")
    edge_line(source, "scope_2", g.find("out").id)
    deeper = drawn_ids(to_dot(g, depth=2).source)
    assert "scope_0_lin" in deeper and "scope_0" not in deeper


def test_auto_collapse_above_max_nodes_and_not_below():
    """With depth=None, submodules collapse only when the graph has more than max_nodes nodes."""
    g = traced_model()
    full = drawn_ids(to_dot(g, legend=False).source)
    assert not any(i.startswith("scope_") for i in full)
    small = drawn_ids(to_dot(g, legend=False, max_nodes=len(full) - 1).source)
    assert any(i.startswith("scope_") for i in small) and len(small) < len(full)


def test_long_chain_of_identical_ops_collapses_above_max_nodes():
    """A 2,000-op chain becomes one 'MulBackward0 ×2,000' node; under the budget it is drawn in full."""
    a = torch.tensor([1.0], requires_grad=True)
    x = a
    for _ in range(2000):
        x = x * 1.0001
    g = gl.snapshot(x)
    source = to_dot(g, legend=False).source
    assert "MulBackward0 <B>×2,000</B>" in source
    assert len(drawn_ids(source)) == 3  # a, the chain, x
    assert f'fillcolor="{BOX_FILL}"' in source
    b = torch.tensor([1.0], requires_grad=True)
    y = b * 2 * 3 * 4
    g2 = gl.snapshot(y)
    assert "×" not in to_dot(g2, max_nodes=1000).source


# -- determinism and golden files ---------------------------------------------------------------------
def test_same_program_gives_byte_identical_dot():
    """Two runs of the same program give the same DOT bytes, traced and snapshotted."""
    assert to_dot(charts.chart(4)).source == to_dot(charts.chart(4)).source

    def program():
        w = torch.tensor([0.5, -1.0], requires_grad=True)
        h = torch.tanh(w * 2)
        return gl.snapshot((h * w).sum())

    assert to_dot(program()).source == to_dot(program()).source
    assert to_dot(program(), view="function").source == to_dot(program(), view="function").source


@pytest.mark.parametrize("number", sorted(charts.CHARTS))
def test_golden_chart_dot(number):
    """The article's chart N draws exactly as tests/golden/chartN.dot (GRAPHLENS_UPDATE_GOLDEN=1 rewrites)."""
    source = to_dot(charts.chart(number)).source
    path = GOLDEN / f"chart{number}.dot"
    if UPDATE_GOLDEN:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source, encoding="utf-8")
    assert path.is_file(), f"missing {path}: run GRAPHLENS_UPDATE_GOLDEN=1 pytest tests/test_render.py -k golden"
    assert source == path.read_text(encoding="utf-8")


def test_graph_from_json_draws_the_same():
    """A graph saved to JSON and loaded back draws the same DOT."""
    g = charts.chart(4)
    assert to_dot(Graph.from_json(g.to_json())).source == to_dot(g).source


def test_labels_are_escaped():
    """Names with HTML characters are escaped, and the DOT still lays out."""
    t = torch.tensor([1.0], requires_grad=True)
    g = gl.snapshot((t * 2).sum(), names={"a<b>&\"c": t})
    line = node_line(to_dot(g).source, g.find("a<b>&\"c").id)
    label = line.split(" [label=", 1)[1].split(" color=", 1)[0]
    assert "<B>a&lt;b&gt;&amp;&quot;c</B>" in label and "a<b>" not in label



def test_attribute_lists_written_once_per_style_read_as_each_would_alone():
    """An attribute list whose style was written before comes out as writing it anew would: a
    ``graphviz.nohtml`` value equal to a plain one already seen keeps its own quoting, and a
    tooltip sits at its sorted place among the cached style."""
    import graphviz

    from graphlens.render.dot import attr_list

    plain = {"shape": "box", "xlabel": 'a\\lb "c"'}
    first = attr_list(None, plain)
    assert attr_list(None, dict(plain)) == first == ' [shape=box xlabel="a\\lb \\"c\\""]'
    text = attr_list(None, {"shape": "box", "xlabel": graphviz.nohtml('a\\lb "c"')})
    assert text == ' [shape=box xlabel="a\\\\lb \\"c\\""]' != first
    tipped = attr_list("n", {"width": "1", "shape": "box", "tooltip": graphviz.nohtml("t: x"), "color": None})
    assert tipped == ' [label=n shape=box tooltip="t: x" width=1]'

# -- rendering files -------------------------------------------------------------------------------------
@pytest.mark.needs_dot
@needs_pure
@pytest.mark.parametrize("suffix, magic", [(".svg", b"<?xml"), (".png", b"\x89PNG")])
def test_render_with_graphviz_pure(tmp_path, suffix, magic):
    """render() writes svg and png with graphviz-pure, chosen by the suffix."""
    out = render(charts.chart(1), tmp_path / f"chart1{suffix}", engine_binary=_pure())
    assert out.read_bytes().startswith(magic)


@pytest.mark.needs_dot
@needs_pure
def test_pdf_without_dot_is_a_clear_error(tmp_path):
    """graphviz-pure cannot write pdf: render() says so and how to get Graphviz."""
    with pytest.raises(ValueError, match="needs Graphviz 'dot'.*apt-get install graphviz"):
        render(charts.chart(1), tmp_path / "chart1.pdf", engine_binary=_pure())
    assert not (tmp_path / "chart1.pdf").exists()


@pytest.mark.needs_dot
@needs_system_dot
@pytest.mark.parametrize("suffix, magic", [(".svg", b"<?xml"), (".png", b"\x89PNG"), (".pdf", b"%PDF")])
def test_render_with_system_dot(tmp_path, suffix, magic):
    """With Graphviz dot on PATH, render() writes svg, png and pdf."""
    out = render(charts.chart(1), tmp_path / f"chart1{suffix}", engine_binary="dot")
    assert out.read_bytes().startswith(magic)


def test_render_dot_source_needs_no_layout_program(tmp_path):
    """A .dot path gets the DOT text, with no layout program involved."""
    out = render(charts.chart(2), tmp_path / "chart2.dot", engine_binary="no-such-program")
    assert out.read_text(encoding="utf-8") == to_dot(charts.chart(2)).source


def test_no_layout_program_is_one_clear_error(tmp_path, monkeypatch):
    """Without dot and graphviz-pure, the error says how to get either one."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    with pytest.raises(LayoutProgramNotFound, match="pip install graphviz-pure.*apt-get install graphviz"):
        find_layout_program()
    with pytest.raises(LayoutProgramNotFound):
        render(charts.chart(1), tmp_path / "x.svg")
    bundle = repr_mimebundle(charts.chart(1))
    assert "image/svg+xml" not in bundle and "pip install graphviz-pure" in bundle["text/plain"]


@pytest.mark.needs_dot
@needs_pure
def test_find_layout_program_prefers_dot_then_graphviz_pure():
    """find_layout_program() names dot when on PATH, else graphviz-pure beside the interpreter."""
    program = find_layout_program()
    if shutil.which("dot"):
        assert program.kind == "dot"
    else:
        assert program.kind == "graphviz-pure" and Path(program.path).name == "graphviz-pure"
        assert "pdf" not in program.formats


@pytest.mark.needs_dot
@needs_pure
def test_repr_mimebundle_gives_scalable_svg():
    """Jupyter gets an SVG that scales to the page width (no fixed size cap) and text."""
    g = charts.chart(5)
    bundle = repr_mimebundle(g)
    svg = bundle["image/svg+xml"]
    assert svg.lstrip().startswith("<?xml") and 'style="max-width: 100%; height: auto;"' in svg
    graph_attrs = next(line for line in to_dot(g).source.splitlines() if line.strip().startswith("graph ["))
    assert " size=" not in graph_attrs and "[size=" not in graph_attrs
    assert bundle["text/plain"] == repr(g)
    assert list(repr_mimebundle(g, include={"text/plain"})) == ["text/plain"]
    assert list(repr_mimebundle(g, exclude={"text/plain"})) == ["image/svg+xml"]


# -- bad input ---------------------------------------------------------------------------------------------
def test_bad_input_errors():
    """Unknown view, direction, suffix or format, a non-Graph and bad counts raise clear errors."""
    g = charts.chart(1)
    with pytest.raises(ValueError, match=r"unknown view: 'x' \(must be one of \['data', 'function'\]\)"):
        to_dot(g, view="x")
    with pytest.raises(ValueError, match="unknown direction"):
        to_dot(g, direction="up")
    with pytest.raises(ValueError, match=r"unknown suffix: '\.bmp'"):
        render(g, "/tmp/render-test.bmp")
    with pytest.raises(ValueError, match="unknown format"):
        render(g, "/tmp/render-test.svg", format="tiff")
    with pytest.raises(TypeError, match="needs a graphlens.Graph, not Tensor"):
        to_dot(torch.ones(1))
    with pytest.raises(TypeError, match="needs a graphlens.Graph"):
        render("chart.svg", "chart.svg")
    with pytest.raises(ValueError, match="max_nodes must be an int >= 1"):
        to_dot(g, max_nodes=0)
    with pytest.raises(TypeError, match="depth must be an int >= 1 or None"):
        to_dot(g, depth=True)
    with pytest.raises(TypeError, match="highlight items"):
        to_dot(g, highlight=[3])
    with pytest.raises(LayoutProgramNotFound, match="engine_binary 'no-such-program'"):
        render(g, "/tmp/render-test.svg", engine_binary="no-such-program")


def test_snapshot_of_a_model_collapses_by_parameter_names():
    """A snapshot has no scopes, but its parameters' dotted names let submodules collapse."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 4)),
        torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1)),
    )
    loss = model(torch.randn(2, 3)).pow(2).mean()
    g = gl.snapshot(loss, module=model)
    assert not any(op.scope for op in g.ops)
    source = to_dot(g, depth=1).source
    boxes = sorted(set(re.findall(r"^\s*(scope_\w+) \[", source, re.M)))
    assert boxes == ["scope_0", "scope_1"]
    # the ReLU between the two linears of block 0 lies inside block 0's box
    assert "ReluBackward0" not in source and "TanhBackward0" not in source
    assert "PowBackward0" in source  # the loss's own ops stay outside every box


def test_a_loop_of_alternating_ops_collapses_into_one_pattern_node():
    """2,000 ops alternating add and mul become one '(AddBackward0, MulBackward0) ×1,000' node."""
    x = torch.randn(3, requires_grad=True)
    y = x
    for i in range(2000):
        y = y * 1.001 if i % 2 else y + 0.001
    source = to_dot(gl.snapshot(y.sum())).source
    assert "(AddBackward0, MulBackward0) <B>×1,000</B>" in source
    assert "2,000 ops repeating a pattern of 2" in source
    assert source.count("[label") < 10


def test_flags_must_be_booleans_and_folders_must_exist(tmp_path):
    """legend='no' is a TypeError (not a legend); a missing folder is named in a clear error."""
    g = charts.chart(1)
    with pytest.raises(TypeError, match="legend must be True or False, not 'no'"):
        to_dot(g, legend="no")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        render(g, tmp_path / "missing" / "x.dot")


# -- parameters ----------------------------------------------------------------------------------------------
def traced_linear():
    """A Linear layer (two parameters) times a plain leaf w that requires grad."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 2)
    with gl.trace(module=lin) as tr:
        x = torch.randn(4, 3)
        w = torch.randn(2, requires_grad=True)
        loss = (lin(x) * w).sum()
        loss.backward()
    return tr.graph()


def test_parameters_have_a_double_border_and_a_legend_row():
    """nn.Parameter leaves get a double border (data and function view) and a legend row; other leaves do not."""
    g = traced_linear()
    params = [t for t in g.tensors if t.is_parameter]
    assert len(params) == 2
    for view in ("data", "function"):
        source = to_dot(g, view=view).source
        for p in params:
            line = node_line(source, p.id)
            assert f"peripheries={PARAM_PERIPHERIES}" in line and "tooltip=\"" + p.name + ": parameter" in line
        assert "peripheries" not in node_line(source, g.find("w").id)
        assert "parameter (nn.Parameter)" in node_line(source, "legend")
    assert "parameter (nn.Parameter)" not in to_dot(charts.chart(5)).source  # only what the diagram shows


# -- wide graphs: a training loop ----------------------------------------------------------------------------
class _Carry(torch.nn.Module):
    """An RNN cell whose hidden state is carried on self, and a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.rnn = torch.nn.RNNCell(3, 4)
        self.head = torch.nn.Linear(4, 1)
        self.hidden = torch.zeros(1, 4)

    def forward(self, x):
        self.hidden = self.rnn(x, self.hidden)
        return self.head(self.hidden)


def two_iterations(retain: bool = False, module: bool = True):
    """Two training steps of _Carry with SGD (the second backward fails without retain_graph)."""
    torch.manual_seed(0)
    m = _Carry()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    with gl.trace(module=m) if module else gl.trace() as tr:
        for _ in range(2):
            loss = m(torch.randn(1, 3)).pow(2).sum()
            opt.zero_grad()
            try:
                loss.backward(retain_graph=retain)
            except RuntimeError:
                pass
            opt.step()
    return tr.graph()


def svg_width_px(svg: str) -> float:
    return float(re.search(r'<svg [^>]*?width="([\d.]+)pt"', svg).group(1)) * 96 / 72


def svg_y(svg: str) -> dict[str, float]:
    """The vertical position of each node's first text line (smaller: higher up)."""
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"<title>(\w+)</title>.*?<text[^>]*? y=\"(-?[\d.]+)\"", svg, re.S)}


@pytest.mark.needs_dot
@needs_pure
@pytest.mark.parametrize("retain, module", [(False, True), (True, True), (False, False)])
def test_a_two_iteration_training_loop_fits_a_laptop_screen_in_time_order(retain, module):
    """The two-step loop draws under 2,500 px wide (it was 5,500-8,700), iteration 1, optimizer step, iteration 2 top to bottom."""
    g = two_iterations(retain, module)
    svg = gl.render.svg(g, engine_binary=_pure())
    assert svg_width_px(svg) < 2500
    y = svg_y(svg)
    loss1, loss2 = (t.id for t in g.tensors if t.name == "loss")
    step1 = next(o.id for o in g.ops if o.region == "no_grad#0")
    assert y[loss1] < y[step1] < y[loss2]


def test_wide_graphs_get_rows_and_narrow_ones_are_left_to_graphviz():
    """A wide trace gets edge minlen rows and no shared top rank; the article's charts keep Graphviz's ranks."""
    source = to_dot(two_iterations()).source
    assert "minlen=" in source and "{rank=min" not in source and "nodesep=0.15" in source
    for number in charts.CHARTS:
        chart = to_dot(charts.chart(number)).source
        assert "minlen" not in chart and "group=" not in chart and "nodesep=0.3" in chart


def test_rows_of_a_wide_graph_are_deterministic_across_processes(tmp_path):
    """The rows graphlens picks do not depend on Python's hash seed: two processes write the same DOT."""
    script = tmp_path / "wide.py"
    script.write_text(
        "import sys\nsys.path.insert(0, %r)\nimport test_render as t\nprint(t.to_dot(t.two_iterations(True)).source)\n"
        % str(Path(__file__).parent),
        encoding="utf-8",
    )
    outputs = set()
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, check=True)
        outputs.add(run.stdout)
    assert len(outputs) == 1 and "minlen=" in outputs.pop()


def test_thousands_of_leaves_feeding_one_op_keep_graphviz_ranks():
    """Rows for 2,000 parameters (each drawn as itself: alike unnamed leaves would be one node) would
    make Graphviz lay out tens of thousands of edge bends: it ranks them itself."""
    xs = [torch.nn.Parameter(torch.randn(2)) for _ in range(2000)]
    with gl.trace() as tr:
        torch.stack(xs).sum().backward()
    assert "minlen" not in to_dot(tr.graph()).source
    with gl.trace() as tr:
        torch.stack(xs[:200]).sum().backward()
    lengths = [int(n) for n in re.findall(r"minlen=(\d+)", to_dot(tr.graph()).source)]
    assert lengths and sum(n - 1 for n in lengths) <= MAX_PASSES


def test_a_submodule_run_twice_gets_one_box_per_run():
    """depth=1 on the two-step loop draws rnn #1, head #1 and rnn #2, head #2, and no box feeds itself."""
    g = two_iterations()
    source = to_dot(g, depth=1).source
    for title in ("rnn #1", "rnn #2", "head #1", "head #2"):
        assert f"<B>{title}</B>" in source
    succ: dict[str, set] = {}
    for line in edge_lines(source):
        if "style=invis" not in line:
            src, dst = line.split(" [")[0].split(" -> ")
            succ.setdefault(src, set()).add(dst)
    state: dict[str, int] = {}

    def acyclic(n: str) -> bool:
        state[n] = 1
        for m in succ.get(n, ()):
            if state.get(m) == 1 or (m not in state and not acyclic(m)):
                return False
        state[n] = 2
        return True

    assert all(acyclic(n) for n in list(succ) if n not in state)
    single = to_dot(traced_model(), depth=1, repeats=False).source  # modules run once keep their plain names
    assert "<B>0</B>" in single and "#1" not in single


# -- every edge names a declared node ---------------------------------------------------------------------------
class _Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad


def _forget_call(g: Graph, forward: str) -> Graph:
    """``g`` as a trace that saw the call ``forward`` only as its output's grad_fn (no forward
    name, no inputs): how a trace records a call it does not intercept."""
    op = next(o for o in g.ops if o.forward == forward)
    ops = [o._replace(forward=None) if o is op else o for o in g.ops]
    edges = [e for e in g.edges if not (e.kind == "input" and e.dst == op.id)]
    return Graph(g.tensors, ops, edges, [r.id for r in g.roots], source=g.source)


def _complex():
    with gl.trace() as tr:
        z = torch.tensor([1 + 2j, 3 - 1j], requires_grad=True)
        loss = (z * z.conj()).real.sum()
        loss.backward()
    return tr.graph(), gl.snapshot(loss)


def _transformer():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True)
    with gl.trace(module=layer) as tr:
        loss = layer(torch.randn(2, 3, 8)).pow(2).mean()
        loss.backward()
    return tr.graph(), gl.snapshot(loss, module=layer)


def _lstm():
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(3, 4, batch_first=True)
    with gl.trace(module=lstm) as tr:
        out, (h, _) = lstm(torch.randn(2, 5, 3))
        loss = out.sum() + h.sum()
        loss.backward()
    return tr.graph(), gl.snapshot(loss, module=lstm)


def _custom_function():
    with gl.trace() as tr:
        x = torch.randn(3, requires_grad=True)
        loss = _Square.apply(x).sum()
        loss.backward()
    return tr.graph(), gl.snapshot(loss)


def _in_place():
    with gl.trace() as tr:
        w = torch.randn(4, requires_grad=True)
        a = w * 2
        a[1:3].mul_(3)
        a.add_(1)
        a.view(2, 2)[0, 0] = 5.0
        loss = a.sum()
        loss.backward()
    return tr.graph(), gl.snapshot(loss)


def _detach_and_no_grad():
    with gl.trace() as tr:
        w = torch.randn(3, requires_grad=True)
        h = w.exp()
        d = h.detach()
        with torch.no_grad():
            m = h * 2
            w.add_(1)
        loss = (h * d * m).sum()
        loss.backward()
    return tr.graph(), gl.snapshot(loss)


PROGRAMS = {
    "complex": _complex,
    "complex_without_recorded_real": lambda: (_forget_call(_complex()[0], "real"), _complex()[1]),
    "transformer": _transformer,
    "lstm": _lstm,
    "custom_function": _custom_function,
    "in_place": _in_place,
    "detach_and_no_grad": _detach_and_no_grad,
    "two_iterations": lambda: (two_iterations(True), two_iterations()),
}


def declared_and_used(source: str) -> tuple[set, set]:
    """The node ids a DOT text declares, and those its edges use."""
    declared = set(re.findall(r"^\s*(\w+) \[", source, re.M))
    used = set()
    for src, dst in re.findall(r"^\s*(\w+) -> (\w+)", source, re.M):
        used.update((src, dst))
    return declared, used


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_every_node_an_edge_uses_is_declared(program):
    """For traced and snapshotted programs, in every view, each node id an edge of the DOT names is a declared node."""
    traced, snapped = PROGRAMS[program]()
    for g in (traced, snapped):
        for options in ({}, {"view": "function"}, {"depth": 1}, {"max_nodes": 10}, {"direction": "backward"}):
            declared, used = declared_and_used(to_dot(g, **options).source)
            assert used <= declared, (program, g.source, options, sorted(used - declared))


def test_a_call_the_trace_saw_only_as_a_grad_fn_is_joined_through_hidden_ops():
    """The complex example recorded without its .real call: SelectBackward0's input is found through the
    hidden ViewAsRealBackward0, as the recorded tensor that op stands for (no bare 'op4' node)."""
    traced, _ = _complex()
    g = _forget_call(traced, "real")
    select = next(o for o in g.ops if o.name == "SelectBackward0")
    hidden = next(o for o in g.ops if o.name == "ViewAsRealBackward0")
    source = to_dot(g).source
    declared, used = declared_and_used(source)
    assert used <= declared and hidden.id not in used
    # loss <- sum <- select <- (view_as_real, hidden) <- mul: the mul's recorded output feeds select
    mul_out = next(t for t in g.tensors if t.op is not None and g.node(t.op).name == "MulBackward0")
    edge_line(source, mul_out.id, select.id)


def test_labels_name_tensors_and_never_print_an_id_where_a_name_exists():
    """Every named tensor's label shows its name and not its id; saved rows name the saved tensor."""
    g = traced_linear()
    source = to_dot(g, saved=True).source
    for t in g.tensors:
        label = node_line(source, t.id).split(" [label=", 1)[1]
        if t.name:
            assert f"<B>{t.name}</B>" in label and f">{t.id}<" not in label
        if t.name:
            assert f"= {t.id}:" not in source  # a saved row names it too
    assert "saved mat1 = x: freed" in source and "saved other = w: freed" in source


def test_a_module_level_never_draws_more_nodes_than_its_boxes_and_the_nodes_outside_them():
    """Folding repeated blocks only drops nodes, so a level whose boxes fit the budget fits (collapse skips building it)."""
    from graphlens.render.collapse import _box_map, _collapse_scopes, _count_after, _fold
    from graphlens.render.scene import data_scene
    from graphlens.render.draw import build_scene
    from graphlens.scopes import infer_scopes

    torch.manual_seed(0)
    model = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True), 3,
                                        enable_nested_tensor=False)
    with gl.trace(module=model) as tr:  # (exact scopes: a snapshot's inferred ones leave each residual add between blocks)
        model(torch.randn(2, 3, 8)).sum()
    graph = infer_scopes(tr.graph())
    o = build_scene(graph, "data", "forward", True, True, True, False, None, 4, 3, 150, None)[3]
    nodes, edges = data_scene(graph, o)
    folded_some = False
    for depth in range(1, 5):
        box = _box_map(nodes, edges, depth)
        scoped = _collapse_scopes(nodes, edges, box)
        assert len(scoped[0]) == _count_after(nodes, box)
        drawn = _fold(*scoped, o)[0]
        assert len(drawn) <= len(scoped[0])
        folded_some |= len(drawn) < len(scoped[0])
    assert folded_some  # (the three alike layers fold at some level)
