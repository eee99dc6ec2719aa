"""Part (g) of ``run.py``: how each public call's time grows with the graph, each timed at two sizes.

A ratio against a floor says what a constant factor costs; it does not see a step that is
quadratic.  Here every call is timed on the same program at ``n`` and ``2n`` (min of a few
samples, each from a collected heap, so that a full collection due to other work does not land
on one size) and the growth ``t(2n) / t(n)`` is printed: about 2 is linear; above
:data:`SUPERLINEAR` the call is flagged.  Three steps of ``to_dot`` grew quadratically until
2026-12-07 (the row planner, the loop search, the folding of numbered blocks); this part
would have shown each.
"""

from __future__ import annotations

import gc
import time
import warnings
from typing import Any, Callable

import torch

import graphlens as gl

__all__ = ["SUPERLINEAR", "growth", "part_g", "show_g"]

#: A call whose time more than this many times over when the graph doubles is flagged.
SUPERLINEAR = 2.5


def growth(calls: dict[str, Callable[[int], Callable[[], Any]]], n: int, *, samples: int = 3) -> list[dict]:
    """For each call (``make(size)`` returns the call to time on a program of that size): its
    seconds at ``n`` and at ``2n`` (the least of ``samples``, each from a collected heap) and the
    growth between them."""
    rows = []
    for name, make in calls.items():
        times = []
        for size in (n, 2 * n):
            call = make(size)
            call()  # (warm: caches, lazy parts)
            best = float("inf")
            for _ in range(samples):
                gc.collect()
                t0 = time.perf_counter()
                call()
                best = min(best, time.perf_counter() - t0)
            times.append(best)
            del call
        rows.append({"call": name, "n": n, "small_ms": times[0] * 1e3, "large_ms": times[1] * 1e3,
                     "growth": times[1] / times[0], "superlinear": times[1] / times[0] > SUPERLINEAR})
    return rows


# -- the programs ----------------------------------------------------------------------------
def _chain_trace(n: int) -> Any:
    x = torch.randn(4, requires_grad=True)
    with gl.trace() as tr:
        y = x
        for _ in range(n):
            y = y * 1.0001
        y.sum().backward()
    return tr


def _lstm_snapshot(steps: int) -> gl.Graph:
    torch.manual_seed(0)
    cell = torch.nn.LSTMCell(16, 32)
    h, c = torch.zeros(1, 32), torch.zeros(1, 32)
    for x in torch.randn(steps, 1, 16):
        h, c = cell(x, (h, c))
    return gl.snapshot(h.pow(2).mean())


def _training_loop(blocks: int) -> Any:
    """A traced loop of 3 SGD steps on ``blocks`` numbered Linear+Tanh blocks (module boxes, a
    folded loop, ``no_grad`` regions, rows planned: every collapsing step of to_dot)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh()) for _ in range(blocks)])
    x = torch.randn(2, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gl.trace(module=model) as tr:
        for _ in range(3):
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
    return tr


def _training_steps(steps: int, optimizer: type = torch.optim.SGD) -> Any:
    """A traced training loop of ``steps`` SGD steps (or ``optimizer``'s) on a small MLP: a root per
    step, and an update under no_grad in every step (drawn inside the folded loop's frame since
    2026-12-07). With Adam, each step's state is made from the step before's."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    opt = optimizer(model.parameters(), lr=0.01)
    x = torch.randn(4, 4)
    with gl.trace(module=model) as tr:
        for _ in range(steps):
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
    return tr


def _gan_steps(steps: int) -> Any:
    """A GAN trained ``steps`` steps, two Adam optimizers (32 ops each a step under no_grad):
    the loop folds and each update is one box (522 nodes and a 10 s layout before 2026-12-07,
    fourth session)."""
    torch.manual_seed(0)
    G = torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    D = torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    opt_g, opt_d = torch.optim.Adam(G.parameters()), torch.optim.Adam(D.parameters())
    bce = torch.nn.functional.binary_cross_entropy_with_logits
    real, ones, zeros = torch.randn(8, 2), torch.ones(8, 1), torch.zeros(8, 1)
    with gl.trace() as tr:
        for _ in range(steps):
            fake = G(torch.randn(8, 2))
            opt_d.zero_grad()
            (bce(D(real), ones) + bce(D(fake.detach()), zeros)).backward()
            opt_d.step()
            opt_g.zero_grad()
            bce(D(fake), ones).backward()
            opt_g.step()
    return tr


def _per_sample(n: int) -> Any:
    """``for x, y in zip(xs, ys)``: a loss summed over ``n`` samples, each a slice of the data
    (each slice drawn in its iteration since 2026-12-07, fourth session; outside it before)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    xs, ys = torch.randn(n, 3), torch.randn(n, 1)
    with gl.trace(module=model) as tr:
        loss = 0
        for x, y in zip(xs, ys):
            loss = loss + (model(x) - y).pow(2).sum()
        loss.backward()
    return tr


def _epochs(n: int) -> Any:
    """``n`` epochs over eight batches, each ending in an evaluation under no_grad (a loop inside a
    loop: folded as a frame inside a frame since 2026-12-07, fifth session; a frame per epoch before)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = [(torch.randn(4, 3), torch.randn(4, 1)) for _ in range(8)]
    with gl.trace(module=model) as tr:
        for _ in range(n):
            for xb, yb in data:
                opt.zero_grad()
                torch.nn.functional.mse_loss(model(xb), yb).backward()
                opt.step()
            with torch.no_grad():
                model(data[0][0])
    return tr


def _wide_sum(n: int) -> Any:
    """``total = total + w * 2`` over ``n`` leaves made before the block (a folded loop whose
    drawn leaf stands for all of them: its replay page listed every leaf's gradient at each)."""
    torch.manual_seed(0)
    ws = [torch.randn(3, requires_grad=True) for _ in range(n)]
    with gl.trace() as tr:
        total = torch.zeros(3)
        for w in ws:
            total = total + w * 2
        total.sum().backward()
    return tr


def _many_backward(n: int) -> Any:
    """``n`` losses, each with its own ``backward()``, in one trace (a training loop's shape: every
    tensor kept an entry per backward call, the square of the calls, until 2026-12-07, tenth session)."""
    torch.manual_seed(0)
    w = torch.randn(4, requires_grad=True)
    with gl.trace() as tr:
        for _ in range(n):
            (w * 2).sum().backward()
    return tr


def _sum_snapshot(n: int) -> gl.Graph:
    """A snapshot of ``sum(w * x for w in ws)`` over ``n`` leaves (a stretch found in the order
    of each node's way up from the root)."""
    torch.manual_seed(0)
    ws = [torch.randn(3, requires_grad=True) for _ in range(n)]
    x = torch.randn(3)
    return gl.snapshot(sum(w * x for w in ws).sum())


class _TanhNet(torch.nn.Module):
    """A model written in the program's own file: ``tanh`` and ``sigmoid`` in its ``forward``."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 8)
        self.fc2 = torch.nn.Linear(8, 1)

    def forward(self, x):
        return torch.sigmoid(self.fc2(torch.tanh(self.fc1(x))))


def _own_model_steps(steps: int) -> Any:
    """``steps`` SGD steps of :class:`_TanhNet` over batches (calls that keep a line of their own
    in its ``forward``, found at the block's line that called the model)."""
    torch.manual_seed(0)
    net = _TanhNet()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    xs, ys = torch.randn(steps, 8, 4), torch.rand(steps, 8, 1)
    with gl.trace() as tr:
        for x, y in zip(xs, ys):
            opt.zero_grad()
            loss = torch.nn.functional.binary_cross_entropy(net(x), y)
            loss.backward()
            opt.step()
    return tr


class _NormLayers(torch.nn.Module):
    """Conv-BatchNorm-ReLU layers in one ``nn.Sequential``, called from a ``forward`` of the
    program's own: each BatchNorm counts its batches in place, a call whose user frame holds
    the whole model (walked for names at each such call until 2026-12-07, eighth session:
    quadratic in the layers)."""

    def __init__(self, layers: int) -> None:
        super().__init__()
        self.features = torch.nn.Sequential(*[m for _ in range(layers) for m in (
            torch.nn.Conv2d(4, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU())])

    def forward(self, x):
        return self.features(x).pow(2).mean()


def _norm_layers_step(layers: int) -> Callable[[], Any]:
    torch.manual_seed(0)
    model = _NormLayers(layers)
    x = torch.randn(1, 4, 8, 8)

    def step() -> Any:
        with gl.trace() as tr:
            model(x).backward()
        return tr
    return step


def _without_collector(f: Callable[[int], Any], size: int) -> Any:
    was = gc.isenabled()
    gc.disable()
    try:
        return f(size)
    finally:
        if was:
            gc.enable()


def _nested_blocks(blocks: int) -> tuple[torch.nn.Module, torch.Tensor]:
    """``blocks`` numbered blocks of Linear and a nested Sequential (Tanh, Linear), and a loss: a
    snapshot's module boxes at every depth the picture tries, the repeats folded."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[
        torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Sequential(torch.nn.Tanh(), torch.nn.Linear(4, 4))) for _ in range(blocks)
    ])
    return model, model(torch.randn(2, 4)).pow(2).mean()


class _Between(torch.nn.Module):
    """Two Linear layers and ``n`` scalings between them, in the model's own forward."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.a, self.b, self.n = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4), n

    def forward(self, x):
        y = self.a(x)
        for _ in range(self.n):
            y = y * 1.0001
        return self.b(y)


def _between_modules(n: int) -> gl.Graph:
    torch.manual_seed(0)
    model = _Between(n)
    return gl.snapshot(model(torch.randn(2, 4)).sum())


def _chain_root(n: int) -> torch.Tensor:
    y = torch.randn(4, requires_grad=True)
    for _ in range(n):
        y = y * 1.0001
    return y


def calls() -> dict[str, Callable[[int], Callable[[], Any]]]:
    """The public calls part (g) times, each on a program whose size doubles."""
    from graphlens.render import to_dot

    def on_graph(build: Callable[[int], Any], use: Callable[[Any], Any]) -> Callable[[int], Callable[[], Any]]:
        def make(size: int) -> Callable[[], Any]:
            built = build(size)
            return lambda: use(built)
        return make

    def json_of(size: int) -> Callable[[], Any]:
        text = _chain_trace(size).graph().to_json()
        return lambda: gl.Graph.from_json(text)

    return {
        "snapshot (chain)": on_graph(_chain_root, gl.snapshot),
        "trace (chain)": lambda size: lambda: _chain_trace(size),
        # (the same with the collector off during the call: what the collector's full collections add)
        "trace (chain), collector off": lambda size: lambda: _without_collector(_chain_trace, size),
        "trace (own model, BatchNorm layers)": lambda size: _norm_layers_step(size // 40),
        "tr.graph() (chain)": on_graph(lambda size: [_chain_trace(size) for _ in range(5)], lambda trs: trs.pop().graph()),
        "to_dot (unrolled LSTMCell)": on_graph(lambda steps: _lstm_snapshot(steps // 10), lambda g: to_dot(g).source),
        "to_dot (training loop)": on_graph(lambda size: _training_loop(size // 40).graph(), lambda g: to_dot(g).source),
        "explorer page (training loop)": on_graph(lambda size: _training_loop(size // 40).graph(), lambda g: g.to_html()),
        "to_dot (nested blocks, snapshot)": on_graph(lambda size: gl.snapshot(_nested_blocks(size // 20)[1]), lambda g: to_dot(g).source),
        "explain (nested blocks)": on_graph(lambda size: _nested_blocks(size // 20), lambda ml: gl.explain(ml[0][0][0].weight, ml[1])),
        "to_dot (training loop, steps)": on_graph(lambda size: _training_steps(size // 40).graph(), lambda g: to_dot(g).source),
        "replay page (training loop, steps)": on_graph(lambda size: _training_steps(size // 40).replay(), lambda rp: rp.to_html()),
        # (the page placed each node outside every module once per pass over all of them, and
        # Adam's state took one pass a step: 43 s at 800 steps before 2026-12-07, ninth session)
        "explorer page (Adam steps)": on_graph(lambda size: _training_steps(size // 40, torch.optim.Adam).graph(), lambda g: g.to_html()),
        "replay page (wide sum)": on_graph(lambda size: _wide_sum(size // 4).replay(), lambda rp: rp.to_html()),
        "to_dot (GAN, two Adams)": on_graph(lambda size: _gan_steps(size // 100).graph(), lambda g: to_dot(g).source),
        "replay page (GAN, two Adams)": on_graph(lambda size: _gan_steps(size // 100).replay(), lambda rp: rp.to_html()),
        "to_dot (loop over slices)": on_graph(lambda size: _per_sample(size // 10).graph(), lambda g: to_dot(g).source),
        "to_dot (epochs over batches)": on_graph(lambda size: _epochs(size // 100).graph(), lambda g: to_dot(g).source),
        # (a snapshot's scopes: every op of a run of one-input ops walked the rest of it, 30 s at
        # 20,000 ops before 2026-12-07, ninth session)
        "to_dot (ops between two modules, snapshot)": on_graph(_between_modules, lambda g: to_dot(g).source),
        "to_dot (sum of terms, snapshot)": on_graph(lambda size: _sum_snapshot(size // 10), lambda g: to_dot(g).source),
        "to_dot (own model, steps)": on_graph(lambda size: _own_model_steps(size // 40).graph(), lambda g: to_dot(g).source),
        "replay (chain)": on_graph(_chain_trace, lambda tr: tr.replay()),
        "memory (chain)": on_graph(lambda size: _chain_trace(size).graph(), lambda g: g.memory()),
        # (each op's next edges, asked of every op of a fresh Graph: a scan of every edge per op
        # before 2026-12-07, ninth session)
        "g.inputs(op) of every op (chain)": on_graph(lambda size: _chain_trace(size).graph(),
                                                     lambda g: (lambda h: [h.inputs(op) for op in h.ops])(gl.Graph(g.tensors, g.ops, g.edges))),
        "to_json (chain)": on_graph(lambda size: _chain_trace(size).graph(), lambda g: g.to_json()),
        "from_json (chain)": json_of,
        "compare (chain)": on_graph(lambda size: _chain_trace(size).graph(), lambda g: gl.compare(g, g)),
        # (a key per node built once: each g.find scanned every tensor's name before 2026-12-07, tenth session)
        "g.find(id) of every node (chain)": on_graph(lambda size: _chain_trace(size).graph(),
                                                     lambda g: (lambda h: [h.find(n.id) for n in h])(gl.Graph(g.tensors, g.ops, g.edges))),
        "tr.graph() (backward calls)": on_graph(lambda size: _many_backward(size // 2), lambda tr: tr.graph()),
        "to_json (backward calls)": on_graph(lambda size: _many_backward(size // 2).graph(), lambda g: g.to_json()),
        "memory (backward calls)": on_graph(lambda size: _many_backward(size // 2).graph(), lambda g: g.memory()),
        "explorer page (backward calls)": on_graph(lambda size: _many_backward(size // 2).graph(), lambda g: g.to_html()),
    }


def part_g(n: int = 2000, samples: int = 3) -> list[dict]:
    """Part (g): every call of :func:`calls` at ``n`` and ``2n`` (ops of a chain; LSTMCell steps
    ``n / 10``, blocks of the training loop and its steps ``n / 40``, BatchNorm layers ``n / 40``, nested blocks ``n / 20``,
    leaves of the wide sum ``n / 4``, the GAN's steps and the epochs ``n / 100``, samples ``n / 10``,
    the terms of the snapshot's sum ``n / 10``, the own model's steps ``n / 40``, the backward calls ``n / 2``; the
    scalings between two modules, Adam's steps and ``g.inputs`` / ``g.find`` on the chain as the names say: ``n``,
    ``n / 40``, ``n``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (a deep chain warns about freeing; not what is measured)
        return growth(calls(), n, samples=samples)


def show_g(rows: list[dict]) -> None:
    print(f"\n(g) growth: each call on a program of size n and 2n (about 2: linear; above {SUPERLINEAR}: flagged)")
    print(f"{'call':<34}{'n':>7}{'ms at n':>10}{'ms at 2n':>10}{'growth':>8}")
    for r in rows:
        flag = "  superlinear" if r["superlinear"] else ""
        print(f"{r['call']:<34}{r['n']:>7}{r['small_ms']:>10.1f}{r['large_ms']:>10.1f}{r['growth']:>8.2f}{flag}")
