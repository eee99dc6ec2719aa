"""A loop inside a loop folds as a frame inside a frame: a training loop's epochs, each over the
batches and ending in an evaluation, are drawn once, and inside them the steps are drawn once;
what one call repeats inside it (an optimizer's update, parameter after parameter) is not taken
for a loop of the user's."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest
import torch

import graphlens as gl
from graphlens.render import to_dot
from graphlens.render.loops import _iterations_before
from graphlens.render.output import layout
from graphlens.graph import OpNode
from traced_loops import clusters as _clusters, node_count as _nodes

F = torch.nn.functional


def _titles(source: str) -> list[str]:
    return re.findall(r'label="(× \d+: [^"]*)"', source)


def _epochs(epochs: int, batches: int = 8) -> gl.Graph:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = [(torch.randn(4, 3), torch.randn(4, 1)) for _ in range(batches)]
    with gl.trace(module=model) as tr:
        for _ in range(epochs):
            for xb, yb in data:
                opt.zero_grad()
                loss = F.mse_loss(model(xb), yb)
                loss.backward()
                opt.step()
            with torch.no_grad():
                val = F.mse_loss(model(data[0][0]), data[0][1])  # noqa: F841
    return tr.graph()


def test_epochs_over_batches_fold_inside_one_another():
    """A training loop of epochs over eight batches, each epoch ending in an evaluation, is as
    large a picture at 10 epochs as at 5: the epochs that are the same graph are drawn once, in
    a frame saying it holds a loop (the lines cannot tell an outer loop from a condition), and the
    steps inside that epoch once, in a frame inside it (each epoch drew its own frame of steps
    before: 251 nodes at 6 epochs of 20 batches, growing by 42 an epoch; now 114 at any count)."""
    five, ten = to_dot(_epochs(5)).source, to_dot(_epochs(10)).source
    assert _nodes(five) == _nodes(ten)
    titles = _titles(ten)
    outer = [t for t in titles if "a repeating stretch with a loop inside" in t]
    assert len(outer) == 1 and outer[0].startswith("× 9:") and "runs 1 … 9" in outer[0]  # (the last epoch differs: its update feeds nothing)
    inner = [name for depth, name in _clusters(ten) if depth == 2 and "a_loop__lines" in name]
    assert inner and "stretch" in inner[0]  # (the steps' frame inside the epochs' frame)
    assert any(re.match(r"× [67]: a loop \(lines \d+–\d+\), iterations [12] … [78]", t) for t in titles)


def test_the_batches_go_with_their_step_inside_the_epoch():
    """Each batch the steps take, used by the same step of every epoch, goes with that step where
    the epoch is drawn: the eight batches draw as a few nodes, not as sixteen leaves beside the
    frames."""
    src = to_dot(_epochs(6)).source
    assert len(re.findall(r"<B>xb</B>", src)) <= 4
    assert len(re.findall(r"<B>yb</B>", src)) <= 4


def _adam_evaluating(steps: int) -> gl.Graph:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x, y = torch.randn(16, 3), torch.randn(16, 1)
    with gl.trace(module=model) as tr:
        for step in range(steps):
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            if step % 10 == 0:
                with torch.no_grad():
                    val = F.mse_loss(model(x), y)  # noqa: F841
    return tr.graph()


def test_adam_evaluating_every_tenth_step_is_as_large_at_any_length():
    """Adam evaluating every tenth step draws each update as one box (too many ops to draw one
    by one) and still folds the ten steps inside the stretch that repeats: as many nodes at 100
    steps as at 50 (a frame per ten steps before: 182 nodes at 50, 342 at 100; the box holding the
    evaluation's submodule boxes kept it out of its stretch)."""
    fifty, hundred = to_dot(_adam_evaluating(50)).source, to_dot(_adam_evaluating(100)).source
    assert _nodes(fifty) == _nodes(hundred) < 150
    assert "no_grad step" in hundred and any("loop inside" in t for t in _titles(hundred))


def _clipped_adamw(steps: int) -> gl.Graph:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=False)
    x, y = torch.randn(8, 3), torch.randn(8, 1)
    with gl.trace(module=model) as tr:
        for _ in range(steps):
            opt.zero_grad()
            F.mse_loss(model(x), y).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=False)
            opt.step()
    return tr.graph()


def test_what_one_call_repeats_is_not_a_loop_inside():
    """An optimizer's update repeats its ops parameter after parameter, on one line and with no
    backward in between: the loop around it folds as one loop, not as a stretch with a loop
    inside, and its iterations are numbered as the loop ran them."""
    titles = _titles(to_dot(_clipped_adamw(12)).source)
    assert titles and not any("loop inside" in t for t in titles)
    assert any(re.match(r"× \d+: a loop \(lines \d+–\d+\), iterations [12] … \d+", t) for t in titles)


def _accumulating() -> gl.Graph:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = [(torch.randn(4, 3), torch.randn(4, 1)) for _ in range(20)]
    with gl.trace(module=model) as tr:
        opt.zero_grad()
        for i, (xb, yb) in enumerate(data):
            loss = F.mse_loss(model(xb), yb) / 4
            loss.backward()
            if (i + 1) % 4 == 0:
                opt.step()
                opt.zero_grad()
    return tr.graph()


def test_accumulated_microbatches_fold_inside_each_update():
    """Gradient accumulation (a backward for each micro-batch, an update every fourth) folds the
    updates' stretch with the micro-batches inside it; a body written on one line is numbered
    by its whole pattern coming again, so the last update's micro-batches are counted as the
    loop ran them (17 to 19 of 20), not from 1."""
    src = to_dot(_accumulating()).source
    titles = _titles(src)
    assert any("a repeating stretch with a loop inside" in t for t in titles)
    numbers = [tuple(map(int, m)) for t in titles for m in re.findall(r"iterations (\d+) … (\d+)", t)]
    assert (1, 4) in numbers and (17, 19) in numbers


@pytest.mark.parametrize("make", [lambda: _epochs(6), _accumulating], ids=["epochs", "accumulation"])
def test_a_graph_read_back_from_json_draws_the_same_nesting(make):
    """A traced graph written to JSON and read back draws byte for byte the same nested picture
    (what tells a loop inside, the lines and the roots backward ran from, is in the JSON)."""
    g = make()
    src = to_dot(g).source
    assert "loop inside" in src and to_dot(gl.Graph.from_json(g.to_json())).source == src


def test_iterations_before_each_stretch_are_counted_in_one_pass():
    """The iterations that ran before each stretch of a loop are counted by the body starting
    again: at its lowest line for a body on several lines, by its whole pattern for a body on
    one; an op on a line above the body's (what ran before the loop) starts the count again."""
    def ops(items):
        return [OpNode(f"op{k}", "X", forward=f, line=line) for k, (line, f) in enumerate(items)]
    body = [(5, "a"), (6, "b")]
    seq = ops([(1, "z"), *body * 3, (7, "e"), *body * 4, (7, "e"), *body * 3])
    # stretches of the body's 2 ops: 3 at 1, 4 at 8, 3 at 17 (after the evaluation's op on line 7)
    assert _iterations_before(seq, [(1, 3), (8, 4), (17, 3)], 2) == [0, 3, 7]
    assert _iterations_before(seq, [(8, 4)], 2) == [3]
    one = [(5, "a"), (5, "b")]
    seq = ops([*one * 2, (9, "s"), *one * 2, (9, "s"), *one * 2])
    assert _iterations_before(seq, [(5, 2), (10, 2)], 2) == [2, 4]
    assert _iterations_before(ops([(3, "q"), *one * 3]), [(1, 3)], 2) == [0]


def _layout_programs() -> list[str]:
    found = [p for p in (shutil.which("dot"), str(Path(sys.executable).parent / "graphviz-pure")) if p and Path(p).exists()]
    return found or [pytest.param(None, marks=pytest.mark.skip(reason="no dot or graphviz-pure binary to draw with"))]


@pytest.mark.parametrize("program", _layout_programs())
def test_a_frame_in_a_frame_in_a_frame_lays_out(program):
    """Graphviz and graphviz-pure both lay out the epochs' frame holding the steps' frame holding
    each update's no_grad frame (three clusters deep)."""
    src = to_dot(_epochs(5)).source
    assert max(d for d, _ in _clusters(src)) == 3
    svg = layout(src, "svg", engine_binary=program).decode()
    assert "a repeating stretch with a loop inside" in svg and "no_grad" in svg


@pytest.mark.parametrize("make", [lambda: _epochs(6), lambda: _adam_evaluating(30)], ids=["epochs", "adam evaluating"])
def test_every_op_stands_in_one_drawn_node_after_nesting(make):
    """Folding a loop inside a loop keeps every op of the unfolded drawing in exactly one drawn
    node's members (what the replay page maps each engine step to)."""
    from graphlens.render.draw import build_scene

    def scene(g, **kw):
        args = dict(view="data", direction="forward", legend=True, values=True, grads=True, saved=False, highlight=None,
                    max_elements=4, precision=4, max_nodes=150, depth=None)
        args.update(kw)
        return build_scene(g, *args.values())[1]

    g = make()
    ops = {n.id for n in scene(g, depth=99, repeats=False) if n.kind == "op"}
    nodes = scene(g)
    assert any(n.inner and n.region.startswith("\x02") for n in nodes)  # (nested: a frame inside a loop's frame)
    seen = [m for n in nodes for m in n.members if m in ops]
    assert sorted(seen) == sorted(ops)
