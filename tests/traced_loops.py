"""Traced loops that several test modules draw (a training loop of a small MLP), and the readers of their DOT text."""

from __future__ import annotations

import re

import torch

import graphlens as gl

__all__ = ["training_loop", "TanhNet", "clusters", "node_count"]


def training_loop(steps: int, opt_class=torch.optim.SGD) -> gl.Graph:
    """The graph of ``steps`` steps of a 3-4-1 MLP (Tanh) trained by ``opt_class`` (lr 0.01) on one
    batch: forward, backward, the optimizer's update under no_grad, and a root per step."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    opt = opt_class(model.parameters(), lr=0.01)
    x = torch.randn(4, 3)
    with gl.trace(module=model) as tr:
        for _ in range(steps):
            opt.zero_grad()
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
    return tr.graph()


class TanhNet(torch.nn.Module):
    """A model written as learners write one, in its own file: two layers, ``tanh`` and
    ``sigmoid`` called in its ``forward`` (calls a trace keeps a line of their own for)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 8)
        self.fc2 = torch.nn.Linear(8, 1)

    def forward(self, x):
        h = torch.tanh(self.fc1(x))
        return torch.sigmoid(self.fc2(h))


def clusters(source: str) -> list[tuple[int, str]]:
    """``(depth, name)`` of each cluster of a DOT text, depth 1 for one at the top."""
    out, depth = [], 0
    for line in source.splitlines():
        m = re.match(r"\s*subgraph (\S+) \{", line)
        if m:
            depth += 1
            out.append((depth, m.group(1)))
        elif line.strip() == "}":
            depth -= 1
    return out


def node_count(source: str) -> int:
    """How many nodes a DOT text declares (frame titles and the legend included)."""
    return len(re.findall(r"^\s*\S+ \[label=", source, re.M))
