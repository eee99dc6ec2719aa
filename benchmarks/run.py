"""Ratio benchmarks: graphlens against a bare walk, torchviz and plain execution, in one run.

Run: ``python benchmarks/run.py [--quick] [--json PATH] [--repeats N]``.

Every comparison is a ratio of medians of interleaved repeats (the two sides of a ratio
alternate, so both see the same machine load):

(a) ``snapshot`` vs a bare iterative ``next_functions`` walk (the floor);
(b) ``snapshot`` + DOT text (``graphlens.render.to_dot(g).source``) vs ``torchviz.make_dot``
    with default options (``.source``); torchviz's recursion fails on deep graphs, which is
    recorded as ``"RecursionError"``;
(c) forward + backward inside ``graphlens.trace()`` (recording grads) vs the same plainly,
    with the floors (a do-nothing mode; plus a Python hook per node that reads nothing;
    plus hooks that read each gradient's head) and the trace without each recording feature;
(d) the peak memory a snapshot allocates (``tracemalloc``), per graph node;
(e) the seconds and megabytes of a 6-layer transformer's backward replay page;
(f) issue 24's targets, each beside the floor that bounds it (``benchmarks/floors.py``):
    snapshot vs a walk recording ordered edges (and that walk plus flat saved reads) on a
    1k chain, a 6-layer transformer and a resnet-ish conv net; snapshot + DOT vs torchviz
    there; to_dot of 10k / 100k ops vs a text baseline; the trace on the tiny-op chain
    (default, grads=False, both off, a loop written inline in the block) and on real models
    (a 2-layer GPT-2 from its config, a resnet18-like net);
(g) how each public call's time grows when the program doubles (``benchmarks/growth.py``):
    about 2 is linear, above 2.5 flagged;
(h) wide programs' pictures (``benchmarks/wide.py``): the nodes each draws and the seconds the
    layout program takes, flagged above ``max_nodes`` or 2 s.

It prints a table and writes JSON (default ``benchmarks/results.json``).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import statistics
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any, Callable

import torch
from torch.overrides import TorchFunctionMode

import graphlens as gl

try:  # drawing is optional: skip part (b) for graphlens when render is absent
    from graphlens.render import to_dot
except Exception:  # noqa: BLE001 - any import failure means "no renderer"
    to_dot = None

try:
    from torchviz import make_dot
except Exception:  # noqa: BLE001
    make_dot = None

#: Targets, as ratios (graphlens / reference); lower is better.
TARGETS = {
    "snapshot_vs_walk": 2.0, "dot_vs_torchviz": 0.5, "trace_mlp": 1.15, "trace_chain": 2.0, "small_snapshot_ms": 1.0,
    # not ratios: the replay page is a thing a learner waits for and downloads
    "replay_page_s": 5.0, "replay_page_mb": 5.0,
}


# -- workloads: each returns (roots, keep) where keep holds the tensors alive -----------------
def chain(n: int) -> Callable[[], Any]:
    def build():
        x = torch.randn(2, requires_grad=True)
        y = x
        for _ in range(n):
            y = y * 1.0001
        return y, x
    build.__name__ = f"chain {n // 1000}k" if n % 1000 == 0 else f"chain {n}"
    return build


def small() -> Any:
    """A graph of under 50 nodes: a two-layer MLP's loss."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    return model(torch.randn(3, 4)).pow(2).mean(), model


small.__name__ = "small MLP"


def transformer() -> Any:
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, num_layers=6, enable_nested_tensor=False)
    loss = model(torch.randn(2, 10, 64)).pow(2).mean()
    return loss, model


def lstm() -> Any:
    torch.manual_seed(0)
    model = torch.nn.LSTM(16, 32)
    out, _ = model(torch.randn(500, 1, 16))
    return out.pow(2).mean(), model


def lstm_cell() -> Any:
    torch.manual_seed(0)
    cell = torch.nn.LSTMCell(16, 32)
    h, c = torch.zeros(1, 32), torch.zeros(1, 32)
    for x in torch.randn(500, 1, 16):
        h, c = cell(x, (h, c))
    return h.pow(2).mean(), cell


transformer.__name__ = "transformer 6L"
lstm.__name__ = "nn.LSTM 500 steps"
lstm_cell.__name__ = "LSTMCell x500"


def bare_walk(root: torch.Tensor) -> int:
    """The floor: an iterative walk of next_functions that only collects the nodes."""
    seen = set()
    stack = [root.grad_fn]
    while stack:
        fn = stack.pop()
        if fn in seen:
            continue
        seen.add(fn)
        for child, _ in fn.next_functions:
            if child is not None and child not in seen:
                stack.append(child)
    return len(seen)


# -- timing ---------------------------------------------------------------------------------
def _calibrate(fn: Callable[[], Any], floor: float) -> int:
    """How many calls make one sample last at least ``floor`` seconds."""
    t0 = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-6)
    return max(1, int(floor / once) + 1)


def interleaved(sides: dict[str, Callable[[], Any]], repeats: int, floor: float, *, collect: bool = False) -> dict[str, Any]:
    """Median seconds per call of each side (and every repeat's, ``times``); the sides
    alternate in every repeat (their order flips each time) so they share the machine's noise.
    ``collect``: run Python's cyclic garbage collector before each sample, untimed, so that
    no side pays for a full collection the allocations of another side made due (use it to
    compare two variants of one recorder; the collections a trace causes are then left out)."""
    loops = {k: _calibrate(f, floor) for k, f in sides.items()}
    samples: dict[str, list[float]] = {k: [] for k in sides}
    names = list(sides)
    for r in range(repeats):
        for k in names if r % 2 == 0 else reversed(names):
            f, n = sides[k], loops[k]
            if collect:
                gc.collect()
            t0 = time.perf_counter()
            for _ in range(n):
                f()
            samples[k].append((time.perf_counter() - t0) / n)
    return {k: {"median_s": statistics.median(v), "min_s": min(v), "samples": len(v), "loops": loops[k], "times": v}
            for k, v in samples.items()}


def ratio(res: dict, a: str, b: str) -> float:
    return res[a]["median_s"] / res[b]["median_s"]


def _try(fn: Callable[[], Any]) -> str | None:
    try:
        fn()
    except RecursionError:
        return "RecursionError"
    except Exception as exc:  # noqa: BLE001 - recorded, not hidden
        return type(exc).__name__
    return None


# -- the four parts -------------------------------------------------------------------------
def part_a_b(workloads: list, repeats: int, floor: float) -> list[dict]:
    rows = []
    for build in workloads:
        root, keep = build()
        n = bare_walk(root)
        gl.snapshot(root)  # the bare walk and torchviz wrap nodes too: a snapshot keeps freeing safe
        row: dict[str, Any] = {"graph": build.__name__, "nodes": n}
        sides = {
            "walk": lambda: bare_walk(root),
            "snapshot": lambda: gl.snapshot(root),
            "lean": lambda: gl.snapshot(root, saved=False),
        }
        res = interleaved(sides, repeats, floor)
        row["walk_ms"] = res["walk"]["median_s"] * 1e3
        row["snapshot_ms"] = res["snapshot"]["median_s"] * 1e3
        row["snapshot_vs_walk"] = ratio(res, "snapshot", "walk")
        # the same walk without the saved-attribute summaries (the default above 5,000 nodes)
        row["snapshot_nosaved_vs_walk"] = ratio(res, "lean", "walk")

        sides = {}
        if to_dot is not None:
            sides["graphlens_dot"] = lambda: to_dot(gl.snapshot(root)).source
        else:
            row["graphlens_dot"] = "graphlens.render missing"
        if make_dot is None:
            row["torchviz"] = "torchviz missing"
        else:
            err = _try(lambda: make_dot(root).source)
            if err is None:
                sides["torchviz"] = lambda: make_dot(root).source
            else:
                row["torchviz"] = err
        if sides:
            res = interleaved(sides, repeats, floor)
            for k in sides:
                row[f"{k}_ms"] = res[k]["median_s"] * 1e3
            if len(sides) == 2:
                row["dot_vs_torchviz"] = ratio(res, "graphlens_dot", "torchviz")
        rows.append(row)
        del root, keep
        gc.collect()
    return rows


def mlp_step(model: torch.nn.Module, x: torch.Tensor) -> Callable[[], None]:
    def step():
        for p in model.parameters():
            p.grad = None
        loss = model(x).pow(2).mean()
        loss.backward()
    return step


def tiny_chain_step(n: int) -> Callable[[], None]:
    x = torch.randn(4, requires_grad=True)

    def step():
        x.grad = None
        y = x
        for i in range(n // 2):
            y = y * 1.0001
            y = y + 0.5
        y.sum().backward()
    return step


class _NopMode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class _HookMode(TorchFunctionMode):
    """A mode that only calls through, and at ``backward`` puts the post-hook that
    :meth:`make_hook` returns on every node of the graph (removed after the call)."""

    def make_hook(self) -> Callable[[Any, Any], None]:
        raise NotImplementedError

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is not torch.Tensor.backward:
            return func(*args, **kwargs)
        hook = self.make_hook()
        seen, stack, handles = set(), [args[0].grad_fn], []
        while stack:
            fn = stack.pop()
            if fn is None or fn in seen:
                continue
            seen.add(fn)
            handles.append(fn.register_hook(hook))
            stack.extend(c for c, _ in fn.next_functions)
        try:
            return func(*args, **kwargs)
        finally:
            for h in handles:
                h.remove()


class _BareHookMode(_HookMode):
    """The floor of any recorder that puts a Python hook on every backward node: hooks
    that read nothing (registering, calling and removing them is all it costs)."""

    def make_hook(self):
        def hook(grad_inputs, grad_outputs):
            return None
        return hook


class _HookFloorMode(_HookMode):
    """Hooks that read the head of each gradient that arrived and each one it sent (nothing
    else): what recording the gradients cost before the trace read each gradient only once."""

    def make_hook(self):
        from graphlens._live.facts import read_head

        store: list = []

        def hook(grad_inputs, grad_outputs):
            store.append(([read_head(g, 8) for g in grad_outputs if g is not None],
                          [read_head(g, 8) for g in grad_inputs if g is not None]))
        return hook


def part_c(repeats: int, floor: float) -> list[dict]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512)
    )
    x = torch.randn(64, 512)
    rows = []
    for label, step, target in (
        ("MLP 3x512, batch 64", mlp_step(model, x), TARGETS["trace_mlp"]),
        ("2,000-op chain, 4 elements", tiny_chain_step(2000), TARGETS["trace_chain"]),
    ):
        def traced(step=step):
            with gl.trace():
                step()

        def nop_mode(step=step):
            with _NopMode():
                step()

        def hook_floor(step=step):
            with _HookFloorMode():
                step()

        def bare_hooks(step=step):
            with _BareHookMode():
                step()

        def no_grads(step=step):
            with gl.trace(grads=False):
                step()

        def no_saved(step=step):
            with gl.trace(saved=False):
                step()

        def facts_floor(step=step):
            from floors import FactsFloorMode

            with FactsFloorMode():
                step()

        sides = {"plain": step, "trace": traced, "mode": nop_mode, "bare": bare_hooks, "hooks": hook_floor,
                 "nograds": no_grads, "nosaved": no_saved, "facts": facts_floor}
        res = interleaved(sides, repeats, floor)
        rows.append({
            "workload": label,
            "plain_ms": res["plain"]["median_s"] * 1e3,
            "trace_ms": res["trace"]["median_s"] * 1e3,
            "trace_vs_plain": ratio(res, "trace", "plain"),
            # the floor of any TorchFunctionMode recorder: a mode that only calls through
            "nop_mode_vs_plain": ratio(res, "mode", "plain"),
            # ... plus a Python hook per node reading what arrived and what it sent: the floor of
            # recording the gradients that flowed (torch runs a Python hook per node for it)
            "hook_floor_vs_plain": ratio(res, "hooks", "plain"),
            # ... with hooks that read nothing: the floor of any recorder with a Python hook per node
            "bare_hook_floor_vs_plain": ratio(res, "bare", "plain"),
            # the least a mode-and-hooks recorder of the facts the trace shows does (floors.FactsFloorMode)
            "facts_floor_vs_plain": ratio(res, "facts", "plain"),
            # what the two recording features cost: the same trace without them
            "trace_nograds_vs_plain": ratio(res, "nograds", "plain"),
            "trace_nosaved_vs_plain": ratio(res, "nosaved", "plain"),
            "target": target,
        })
    return rows


def part_d(workloads: list) -> list[dict]:
    rows = []
    for build in workloads:
        root, keep = build()
        n = bare_walk(root)
        gc.collect()
        tracemalloc.start()
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        g = gl.snapshot(root)
        after_snapshot = tracemalloc.get_traced_memory()
        _ = g.ops, g.edges  # build the lazy parts too
        full = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        size = len(g.tensors) + len(g.ops)
        rows.append({
            "graph": build.__name__,
            "nodes": size,
            "snapshot_peak_bytes_per_node": (after_snapshot[1] - base) / size,
            "with_ops_edges_peak_bytes_per_node": (full[1] - base) / size,
            "kept_bytes_per_node": (full[0] - base) / size,
        })
        del g, root, keep
        gc.collect()
    return rows


def part_e() -> list[dict]:
    """(e) The backward replay page of a 6-layer transformer: seconds to build it (the
    replay and the page, layout included) and its size; the target is under 5 s and 5 MB."""
    rows = []
    for d_model, nhead, ff, seq in ((64, 4, 128, 10), (512, 8, 2048, 32)):
        torch.manual_seed(0)
        layer = torch.nn.TransformerEncoderLayer(d_model=d_model, nhead=nhead, dim_feedforward=ff, batch_first=True)
        model = torch.nn.TransformerEncoder(layer, num_layers=6, enable_nested_tensor=False)
        x = torch.randn(2, seq, d_model)
        t0 = time.perf_counter()
        with gl.trace(module=model) as tr:
            model(x)[..., 0].mean().backward()
        t1 = time.perf_counter()
        page = tr.replay().to_html()
        t2 = time.perf_counter()
        rows.append({
            "workload": f"transformer 6L d_model {d_model}",
            "steps": len(tr.replay().steps),
            "trace_s": t1 - t0,
            "page_s": t2 - t1,
            "page_mb": len(page.encode("utf-8")) / 1e6,
        })
    return rows


def machine() -> dict[str, Any]:
    return {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "processor": platform.processor(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "torchviz": make_dot is not None,
        "graphlens_render": to_dot is not None,
    }


def _fmt(v: Any, spec: str = ".2f") -> str:
    return format(v, spec) if isinstance(v, (int, float)) else str(v)


def show(result: dict) -> None:
    m = result["machine"]
    print(f"graphlens benchmarks — torch {m['torch']}, Python {m['python']}, {m['machine']}, "
          f"{m['cpu_count']} CPUs, torch threads {result['torch_threads']}, load {m['load_average']}")
    print("\n(a) snapshot vs bare next_functions walk   (b) snapshot + DOT vs torchviz.make_dot")
    print(f"{'graph':<20}{'nodes':>8}{'walk ms':>10}{'snap ms':>10}{'ratio':>7}{'no-saved':>9}{'gl+dot ms':>11}{'torchviz ms':>16}{'ratio':>7}")
    for r in result["snapshot"]:
        tv = r.get("torchviz_ms", r.get("torchviz", "-"))
        print(f"{r['graph']:<20}{r['nodes']:>8}{r['walk_ms']:>10.2f}{r['snapshot_ms']:>10.2f}{r['snapshot_vs_walk']:>7.2f}"
              f"{r['snapshot_nosaved_vs_walk']:>9.2f}"
              f"{_fmt(r.get('graphlens_dot_ms', r.get('graphlens_dot', '-'))):>11}{_fmt(tv):>16}"
              f"{_fmt(r.get('dot_vs_torchviz', '-')):>7}")
    print("\n(c) forward + backward inside trace() vs plain")
    print(f"{'workload':<28}{'plain ms':>9}{'trace ms':>9}{'ratio':>6}{'target':>7}{'grads=F':>8}{'saved=F':>8}"
          f"{'nop mode':>9}{'bare hooks':>11}{'hook floor':>11}{'facts floor':>12}")
    for r in result["trace"]:
        print(f"{r['workload']:<28}{r['plain_ms']:>9.2f}{r['trace_ms']:>9.2f}{r['trace_vs_plain']:>6.2f}{r['target']:>7.2f}"
              f"{_fmt(r.get('trace_nograds_vs_plain', '-')):>8}{_fmt(r.get('trace_nosaved_vs_plain', '-')):>8}"
              f"{r['nop_mode_vs_plain']:>9.2f}{_fmt(r.get('bare_hook_floor_vs_plain', '-')):>11}"
              f"{_fmt(r.get('hook_floor_vs_plain', '-')):>11}{_fmt(r.get('facts_floor_vs_plain', '-')):>12}")
    print("\n(d) snapshot memory (tracemalloc), bytes per graph node (tensors + ops)")
    print(f"{'graph':<20}{'nodes':>8}{'peak':>10}{'peak+ops/edges':>16}{'kept':>8}")
    for r in result["memory"]:
        print(f"{r['graph']:<20}{r['nodes']:>8}{r['snapshot_peak_bytes_per_node']:>10.0f}"
              f"{r['with_ops_edges_peak_bytes_per_node']:>16.0f}{r['kept_bytes_per_node']:>8.0f}")
    print("\n(e) backward replay page (tr.replay().to_html()) of a 6-layer transformer")
    print(f"{'workload':<32}{'steps':>7}{'trace s':>9}{'page s':>8}{'page MB':>9}")
    for r in result.get("replay", []):
        print(f"{r['workload']:<32}{r['steps']:>7}{r['trace_s']:>9.2f}{r['page_s']:>8.2f}{r['page_mb']:>9.2f}")
    if "issue24" in result:
        from floors import show_f

        show_f(result["issue24"])
    print("\ntargets:")
    for k, v in result["targets"].items():
        print(f"  {k:<22} {v}")


def verdicts(result: dict) -> dict[str, str]:
    out = {}
    snap = [r["snapshot_vs_walk"] for r in result["snapshot"] if r["nodes"] >= 1000]
    out["snapshot_vs_walk"] = f"worst {max(snap):.2f}x from 1k nodes up (target <= {TARGETS['snapshot_vs_walk']}x): " + (
        "met" if max(snap) <= TARGETS["snapshot_vs_walk"] else "missed")
    lean = [r["snapshot_nosaved_vs_walk"] for r in result["snapshot"] if r["nodes"] >= 1000]
    out["snapshot_vs_walk_without_saved"] = f"worst {max(lean):.2f}x from 1k nodes up with saved=False"
    smalls = [r["snapshot_ms"] for r in result["snapshot"] if r["nodes"] <= 50]
    if smalls:
        out["small_snapshot_ms"] = f"{max(smalls):.3f} ms for graphs of <= 50 nodes (target < {TARGETS['small_snapshot_ms']} ms): " + (
            "met" if max(smalls) < TARGETS["small_snapshot_ms"] else "missed")
    dots = [r["dot_vs_torchviz"] for r in result["snapshot"] if "dot_vs_torchviz" in r]
    if dots:
        out["dot_vs_torchviz"] = f"worst {max(dots):.2f}x where torchviz runs (target <= {TARGETS['dot_vs_torchviz']}x): " + (
            "met" if max(dots) <= TARGETS["dot_vs_torchviz"] else "missed")
    pages = result.get("replay", [])
    if pages:
        worst_s = max(r["page_s"] for r in pages)
        worst_mb = max(r["page_mb"] for r in pages)
        out["replay_page"] = f"{worst_s:.2f} s, {worst_mb:.2f} MB at most (target < {TARGETS['replay_page_s']} s, < {TARGETS['replay_page_mb']} MB): " + (
            "met" if worst_s < TARGETS["replay_page_s"] and worst_mb < TARGETS["replay_page_mb"] else "missed")
    for r, key in zip(result["trace"], ("trace_mlp", "trace_chain")):
        out[key] = f"{r['trace_vs_plain']:.2f}x (target <= {r['target']}x): " + ("met" if r["trace_vs_plain"] <= r["target"] else "missed") + (
            f"; floors: a mode plus a Python hook per node that reads nothing {r['bare_hook_floor_vs_plain']:.2f}x,"
            f" hooks reading every gradient's head {r['hook_floor_vs_plain']:.2f}x,"
            f" the facts floor {r.get('facts_floor_vs_plain', float('nan')):.2f}x;"
            f" the trace without recorded grads {r['trace_nograds_vs_plain']:.2f}x, without saved records"
            f" {r['trace_nosaved_vs_plain']:.2f}x" if "bare_hook_floor_vs_plain" in r else "")
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats, no 100k chain")
    parser.add_argument("--json", default=str(Path(__file__).with_name("results.json")), help="where to write the JSON results")
    parser.add_argument("--repeats", type=int, default=None, help="repeats per side (default 9, quick 5)")
    parser.add_argument(
        "--threads", type=int, default=1,
        help="torch intra-op threads (default 1: on a shared machine matmul threads fight other jobs; 0 keeps torch's default)",
    )
    parser.add_argument("--skip-f", action="store_true", help="leave out part (f), issue 24's targets beside their floors")
    parser.add_argument("--skip-g", action="store_true", help="leave out part (g), each call's growth from n to 2n")
    parser.add_argument("--skip-h", action="store_true", help="leave out part (h), wide programs' pictures and their layout time")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    repeats = args.repeats or (5 if args.quick else 9)
    floor = 0.02 if args.quick else 0.05
    workloads = [small, chain(900), chain(1_000), chain(10_000)] + ([] if args.quick else [chain(100_000)]) + [transformer, lstm, lstm_cell]
    result: dict[str, Any] = {"machine": machine(), "repeats": repeats, "quick": args.quick, "torch_threads": torch.get_num_threads()}
    result["snapshot"] = part_a_b(workloads, repeats, floor)
    result["trace"] = part_c(repeats + repeats // 2, floor)
    result["memory"] = part_d(workloads)
    result["replay"] = part_e()
    if not args.skip_f:
        from floors import part_f, verdicts_f

        result["issue24"] = part_f(interleaved, ratio, repeats, floor, _NopMode, _BareHookMode)
    if not args.skip_g:
        from growth import part_g

        result["growth"] = part_g(1000 if args.quick else 2000)
    if not args.skip_h:
        from wide import part_h

        result["wide"] = part_h((50, 150) if args.quick else (100, 300))
    result["targets"] = verdicts(result)
    if "issue24" in result:
        result["targets"].update(verdicts_f(result["issue24"]))
    result["machine"]["load_average_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    show(result)
    if "growth" in result:
        from growth import show_g

        show_g(result["growth"])
    if "wide" in result:
        from wide import show_h

        show_h(result["wide"])
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {args.json}")
    return result


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 1000))
    main()
