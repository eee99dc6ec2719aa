"""A loop is read from the lines of the ``with trace()`` block: calls made inside a function the
block called that keep a line of their own (an activation in a model's ``forward``, written in
this file above the loop or in another file) are placed at the block's line that called them,
so the loop's iterations start where its body does and the picture keeps its size."""

from __future__ import annotations

import re
import sys

import torch

import graphlens as gl
from graphlens.render import to_dot

from traced_loops import TanhNet, clusters, node_count


class Net(torch.nn.Module):
    """The same model written in this file, above the loops that train it."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 8)
        self.fc2 = torch.nn.Linear(8, 1)

    def forward(self, x):
        h = torch.tanh(self.fc1(x))
        return torch.sigmoid(self.fc2(h))


def _train(model_class: type, steps: int) -> tuple[gl.Graph, int]:
    """The graph of ``steps`` SGD steps of ``model_class`` on batches it steps through, and the
    first line of the loop's body."""
    torch.manual_seed(0)
    net = model_class()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    xs, ys = torch.randn(steps, 16, 4), torch.rand(steps, 16, 1)
    with gl.trace() as tr:
        for x, y in zip(xs, ys):
            body = sys._getframe().f_lineno
            opt.zero_grad()
            loss = torch.nn.functional.binary_cross_entropy(net(x), y)
            loss.backward()
            opt.step()
    return tr.graph(), body


def _loop_title(source: str) -> str:
    (title,) = re.findall(r"× \d+: a loop \(lines? [^)]*\)", source)
    return title


def test_a_model_defined_above_the_loop_folds_to_a_constant_picture():
    """20 and 40 steps of a model whose ``forward`` calls ``tanh`` and ``sigmoid`` draw the same
    number of nodes: every step's call of the model folds into the loop's frame (the picture grew
    by a box per step, "net #1" … "net #40", when those calls counted at their own lines)."""
    a, _ = _train(Net, 20)
    b, _ = _train(Net, 40)
    sa, sb = to_dot(a).source, to_dot(b).source
    assert node_count(sa) == node_count(sb)
    assert "net #2<" not in sb and "net #20<" not in sb


def test_the_frame_names_the_loops_lines_not_the_models():
    """The frame says the lines of the loop's body in the block (the model call, backward, the
    step), not a span from the model's ``forward`` above to the loop below."""
    g, body = _train(Net, 20)
    assert _loop_title(to_dot(g).source).endswith(f"(lines {body + 2}–{body + 4})")


def test_a_model_from_another_file_folds_the_same_way():
    """A model class from another module (its lines mean nothing in the block's file) folds alike."""
    a, body = _train(TanhNet, 20)
    b, _ = _train(TanhNet, 40)
    sa, sb = to_dot(a).source, to_dot(b).source
    assert node_count(sa) == node_count(sb)
    assert _loop_title(sb).endswith(f"(lines {body + 2}–{body + 4})")


def test_a_call_keeps_its_own_line_and_the_blocks():
    """``tanh`` made in the model's ``forward`` keeps that line (``line``, what explain says) and
    the block's line that called the model (``block_line``; ``at_block`` reads either)."""
    g, body = _train(Net, 3)
    tanh = next(op for op in g.ops if op.forward == "tanh")
    assert tanh.code == "h = torch.tanh(self.fc1(x))"
    assert tanh.line == Net.forward.__code__.co_firstlineno + 1
    assert tanh.block_line == tanh.at_block == body + 2
    linear = next(op for op in g.ops if op.forward == "linear")
    assert linear.block_line is None and linear.at_block == linear.line == body + 2


def test_block_line_survives_json_and_older_json_reads_without_it():
    """``block_line`` is written to JSON and read back; a graph written before it existed reads as ``None``."""
    g, _ = _train(Net, 3)
    again = gl.Graph.from_json(g.to_json())
    assert again == g and any(op.block_line is not None for op in again.ops)
    data = g.to_dict()
    for op in data["ops"]:
        op.pop("block_line")
    older = gl.Graph.from_dict(data)
    assert all(op.block_line is None for op in older.ops)


class _Residual(torch.nn.Module):
    """Conv blocks with BatchNorm, each added to its input: ``x = x + block(x)`` in a loop."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Conv2d(4, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU()) for _ in range(n)
        )

    def forward(self, x):
        for block in self.blocks:
            x = x + block(x)
        return x


def test_residual_blocks_with_their_own_weights_fold():
    """A residual net run for 24 and for 48 blocks (each block's weights used by it alone, inside its
    box) draws the same picture: one block in a frame, "× N" (each block's box stayed outside the
    frame, its weights counted in no iteration).  (At 8 blocks, 52 nodes, the picture fits and is
    drawn as it is.)"""
    sources = []
    for n in (24, 48):
        torch.manual_seed(0)
        model, x = _Residual(n), torch.randn(1, 4, 8, 8)
        with gl.trace() as tr:
            model(x).mean().backward()
        sources.append(to_dot(tr.graph()).source)
    assert node_count(sources[0]) == node_count(sources[1]) < 20
    assert "× 24: a loop" in sources[0] and "× 48: a loop" in sources[1]
    assert len(clusters(sources[1])) == 1
