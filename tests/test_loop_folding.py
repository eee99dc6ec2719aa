"""Loops fold where they did not: a traced body that holds a ``no_grad`` step (an optimizer's
update, a logged value; drawn as a frame inside the loop's frame), a loop of ``autograd.grad``
calls, two loops one after the other, a loop whose every tenth step differs, and a snapshot's
repeating stretch (an unrolled cell), found from the graph alone."""

from __future__ import annotations

import re

import pytest
import torch

import graphlens as gl
from graphlens.render import to_dot
from graphlens.render.output import layout
from traced_loops import training_loop, clusters as _clusters, node_count as _nodes


def _logged_chain(steps: int):
    torch.manual_seed(0)
    x = torch.randn(4, requires_grad=True)
    with gl.trace() as tr:
        y = x
        for _ in range(steps):
            y = y * 1.0001
            with torch.no_grad():
                z = y * 2
        loss = y.sum()
        loss.backward()
    return tr.graph()


def test_training_loop_folds_with_its_optimizer_step():
    """A traced training loop (forward, backward, SGD's update under no_grad) draws as many
    nodes at 12 steps as at 24: the steps in the middle are one frame, "× N", and the
    update's no_grad region is drawn inside that frame (it drew every step before: 24
    steps were about 500 nodes, more than Graphviz lays out in its time limit)."""
    small, large = (to_dot(training_loop(n)).source for n in (12, 24))
    assert _nodes(small) == _nodes(large) < 80
    assert re.search(r"× 2\d: a loop", large)
    nested = [name for depth, name in _clusters(large) if depth == 2]
    assert nested and all("no_grad" in name for name in nested)
    assert "made under no_grad" in large  # (the legend names the inner region's kind)


def test_logged_chain_folds_to_one_iteration():
    """A loop whose every iteration makes a value under no_grad beside the gradient path
    draws its body once, the no_grad frame inside the loop's frame."""
    src = to_dot(_logged_chain(150)).source
    assert "× 150: a loop" in src and _nodes(src) < 12
    assert [d for d, _ in _clusters(src)] == [1, 2]


def test_region_around_the_whole_loop_keeps_the_loop_unfolded():
    """A no_grad region that holds every iteration (the loop inside one ``with
    torch.no_grad()``) is not one iteration's: a loop frame cannot be drawn inside it,
    and the loop is not folded into one."""
    torch.manual_seed(0)
    w = torch.randn(3, requires_grad=True)
    with gl.trace() as tr:
        z = torch.zeros(3)
        with torch.no_grad():
            for _ in range(40):
                z = z * 0.5 + 1
                z = z - 0.1
        loss = (w * z).sum()
        loss.backward()
    src = to_dot(tr.graph(), max_nodes=60).source
    assert "a loop" not in src
    assert [d for d, _ in _clusters(src)] == [1]


def test_function_view_keeps_outside_leaves_their_own_accumulate_grad():
    """In the function view of a folded loop, a leaf made by the loop (a parameter's new
    version) has its AccumulateGrad drawn in the frame, while leaves from outside it keep
    their own, one each: no AccumulateGrad is drawn fed by two leaves."""
    torch.manual_seed(0)
    ws = [torch.randn(3, requires_grad=True) for _ in range(20)]
    with gl.trace() as tr:
        s = torch.stack([w * 2 for w in ws])
        s.sum().backward()
    for g in (tr.graph(), training_loop(8, torch.optim.Adam)):
        src = to_dot(g, view="function").source
        accs = set(re.findall(r"^\s*(\S+) \[label=<AccumulateGrad>", src, re.M))
        fed: dict[str, int] = {}
        for a, b in re.findall(r"^\s*(\S+) -> (\S+) \[", src, re.M):
            if b in accs:
                fed[b] = fed.get(b, 0) + 1
        assert accs and all(k == 1 for k in fed.values())


@pytest.mark.needs_dot
def test_nested_frames_lay_out():
    """Graphviz lays out a loop frame holding a no_grad frame (the layout program a
    pip-only install has too)."""
    svg = layout(to_dot(training_loop(10)).source, "svg").decode()
    assert svg.count('class="cluster"') >= 2


def test_loop_of_grad_calls_keeps_each_result_in_its_iteration():
    """In a loop that calls ``torch.autograd.grad`` (no op of the trace makes its result, and
    nothing uses it), each result goes with the iteration whose loss it is the gradient of:
    the loop folds to one drawn iteration, instead of leaving a stray leaf per call beside it."""
    torch.manual_seed(0)
    x = torch.randn(4, requires_grad=True)
    with gl.trace() as tr:
        for _ in range(60):
            loss = (x * x).sum()
            (g,) = torch.autograd.grad(loss, x)
    src = to_dot(tr.graph()).source
    assert "× 59: a loop" in src and _nodes(src) < 16


def test_two_loops_fold_each():
    """A program with two loops (features made in one, summed in the next) draws each body once,
    in a frame of its own; one loop alone left the other drawn op by op."""
    torch.manual_seed(0)
    w = torch.randn(3, requires_grad=True)
    with gl.trace() as tr:
        feats = []
        for i in range(50):
            feats.append(torch.sin(w * i))
        total = torch.zeros(3)
        for f in feats:
            total = total + f * f
        total.sum().backward()
    src = to_dot(tr.graph()).source
    assert len(re.findall(r"× 50: a loop \(line \d+\)", src)) == 2 and _nodes(src) < 25
    assert [d for d, _ in _clusters(src)] == [1, 1]


def _every_tenth(steps: int) -> gl.Graph:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(4, 3)
    with gl.trace(module=model) as tr:
        for step in range(steps):
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
            if step % 10 == 0:
                with torch.no_grad():
                    model(x)
    return tr.graph()


def test_loop_whose_every_tenth_step_differs_folds_its_runs():
    """A training loop that also evaluates every tenth step folds twice: the ten steps and the
    evaluation that repeat, in a frame that says they hold a loop (the lines cannot tell an
    outer loop from a condition), and inside it the alike single steps, in a frame of their
    own; the picture is as large at 80 steps as at 40 (178 nodes at 40 steps before, 330 at 80)."""
    g = _every_tenth(40)
    src = to_dot(g).source
    outer = re.findall(r"× (\d+): a repeating stretch with a loop inside \(lines \d+–\d+\), runs 1 … (\d+)", src)
    assert outer and outer[0][0] == outer[0][1] and int(outer[0][0]) >= 2
    assert re.search(r"× [3-9]: a loop \(lines \d+–\d+\), iterations \d+ … \d+", src)
    depths = [d for d, name in _clusters(src) if "a_loop__lines" in name and "stretch" in name]
    assert depths and min(depths) == 2  # (the steps' frame inside the stretch's frame)
    assert _nodes(src) < _nodes(to_dot(g, repeats=False).source) / 6
    assert _nodes(to_dot(_every_tenth(80)).source) == _nodes(src)


def _lstm_snapshot(steps: int) -> gl.Graph:
    torch.manual_seed(0)
    cell = torch.nn.LSTMCell(4, 5)
    h = c = torch.zeros(1, 5)
    for x in torch.randn(steps, 1, 4):
        h, c = cell(x, (h, c))
    return gl.snapshot(h.pow(2).mean())


def test_snapshot_of_unrolled_cell_folds():
    """A snapshot knows no lines, but an unrolled LSTMCell's backward nodes, in the order of
    their way down to the leaves, repeat one pattern: the stretches that are the same graph
    fold into one frame, so 30 and 60 steps draw the same few nodes (30 steps drew 400,
    more than Graphviz lays out in its time limit)."""
    small, large = (to_dot(_lstm_snapshot(n)).source for n in (30, 60))
    assert _nodes(small) == _nodes(large) <= 60
    assert re.search(r"× 28: a repeating stretch of the graph, repeats 2 … 29", small)
    assert "a loop" not in small  # (a snapshot does not know it was a loop: it says what it sees)


def test_snapshot_chain_stays_a_chain():
    """A snapshot's run of one op (``y = y * 1.0001`` a hundred times) is no stretch to frame:
    it is drawn as before, op by op below the limit and as one chain node above it."""
    x = torch.randn(3, requires_grad=True)
    y = x
    for _ in range(100):
        y = y * 1.0001
    g = gl.snapshot(y.sum())
    for view in ("data", "function"):
        assert "repeating stretch" not in to_dot(g, view=view).source
        assert "repeating stretch" not in to_dot(g, view=view, max_nodes=30).source


def test_each_batch_folds_with_its_iteration():
    """A training loop over batches (``for xb, yb in data``): each batch is used by its
    iteration alone, so it is drawn once, in the frame, not once per step beside it."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = [(torch.randn(4, 3), torch.randn(4, 1)) for _ in range(20)]
    with gl.trace(module=model) as tr:
        for xb, yb in data:
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(xb), yb).backward()
            opt.step()
    src = to_dot(tr.graph()).source
    assert re.search(r"× 1\d: a loop", src)
    assert src.count("<B>xb</B>") <= 3 and _nodes(src) < 80


def test_loop_input_stays_outside_the_frame():
    """The one variable only the first iteration uses (the loop's starting value) is what the
    loop starts from: it stays outside the frame, and all iterations fold."""
    torch.manual_seed(0)
    x = torch.randn(4, requires_grad=True)
    with gl.trace() as tr:
        y = x
        for _ in range(40):
            y = y * 1.0001 + y.detach() * 0.0
        y.sum().backward()
    src = to_dot(tr.graph()).source
    assert "× 40: a loop" in src
    frame = src[src.index("subgraph cluster"):]
    assert "<B>x</B>" in src and "<B>x</B>" not in frame


def test_snapshot_layers_fold_with_their_own_weights():
    """A snapshot of a 6-layer transformer drawn with no module in reach (its parameters
    unnamed): the layers are a repeating stretch, each with its own weights, which fold with
    their layer instead of 60 leaves drawn beside the frame."""
    def draw():  # (a frame that holds no module: the parameters are nameless)
        torch.manual_seed(0)
        layer = torch.nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, batch_first=True)
        loss = torch.nn.TransformerEncoder(layer, num_layers=6, enable_nested_tensor=False)(torch.randn(2, 5, 16)).pow(2).mean()
        return to_dot(gl.snapshot(loss)).source
    src = draw()
    assert re.search(r"× [45]: a repeating stretch of the graph", src)
    leaves = len(re.findall(r'fillcolor="#c8ebc4"', src))
    assert leaves <= 30 and _nodes(src) < 200


def test_snapshot_stretch_is_found_past_a_chain():
    """A snapshot holding a long chain of one op (drawn as one chain node) and an unrolled RNN:
    the chain, the longest repeat, is passed over and the RNN's stretch folds."""
    torch.manual_seed(0)
    W = torch.randn(4, 4, requires_grad=True)
    h = torch.zeros(4)
    for x in torch.randn(80, 4):
        h = torch.tanh(W @ h + x)
    y = h
    for _ in range(300):
        y = y * 1.0001
    src = to_dot(gl.snapshot(y.sum())).source
    assert re.search(r"× 7\d: a repeating stretch of the graph", src) and _nodes(src) < 30
