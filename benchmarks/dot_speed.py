"""The to_dot rows of issue 24 alone (part f of ``run.py``), interleaved, with their floors.

``python benchmarks/dot_speed.py [repeats]`` prints, as ratios of medians (and the spread
of the per-repeat ratios, min–max): to_dot of a 10k- and a 100k-op chain against the text
baseline (``floors.text_dot``) and against a floor that only reads the structure (each
edge's ends into one dict each way, every op's id: what any writer that finds the chain
must read), and snapshot + to_dot against ``torchviz.make_dot`` on the 900-op chain, the
6-layer transformer and the resnet-ish net, beside their floor (``floors.dot_floor``), and,
where Graphviz's ``dot`` is installed, the time to an SVG picture on both sides (no target).
"""

from __future__ import annotations

import shutil
import statistics
import sys
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

import graphlens as gl  # noqa: E402
from graphlens.render import to_dot  # noqa: E402

import floors  # noqa: E402
import run  # noqa: E402

__all__ = ["paired", "read_floor", "main"]


def paired(sides: dict[str, Callable[[], Any]], repeats: int) -> dict[str, list[float]]:
    """Seconds per call of each side, one sample per repeat (``run.interleaved``'s)."""
    return {k: v["times"] for k, v in run.interleaved(sides, repeats, 0.05).items()}


def read_floor(g: gl.Graph) -> int:
    """What any drawing that finds a chain must read: each edge's ends (both ways) and each op's id."""
    edges = g.edges
    srcs = [e.src for e in edges]
    dsts = [e.dst for e in edges]
    pred = dict(zip(dsts, srcs))
    succ = dict(zip(srcs, dsts))
    ids = {op.id for op in g.ops}
    return len(pred) + len(succ) + len(ids)


def _ratio(s: dict[str, list[float]], a: str, b: str) -> str:
    per = sorted(x / y for x, y in zip(s[a], s[b]))
    med = statistics.median(s[a]) / statistics.median(s[b])
    return f"{med:5.2f}x (per repeat {per[0]:.2f}–{per[-1]:.2f})"


def main(repeats: int = 15) -> None:
    print(f"to_dot of a prebuilt chain, {repeats} interleaved repeats (target <= {floors.TARGETS_F['to_dot_vs_text']}x text)")
    per_op = {}
    for n in (10_000, 100_000):
        g = floors.chain_graph(n)
        s = paired({"dot": lambda: to_dot(g).source, "text": lambda: floors.text_dot(g), "read": lambda: read_floor(g)}, repeats)
        per_op[n] = statistics.median(s["dot"]) / n
        print(f"  {n:>7,} ops: to_dot {statistics.median(s['dot']) * 1e3:7.2f} ms, text {statistics.median(s['text']) * 1e3:6.2f} ms,"
              f" read floor {statistics.median(s['read']) * 1e3:6.2f} ms; to_dot/text {_ratio(s, 'dot', 'text')},"
              f" read floor/text {_ratio(s, 'read', 'text')}, to_dot/read floor {_ratio(s, 'dot', 'read')}")
        del g
    print(f"  growth per op 100k/10k: {per_op[100_000] / per_op[10_000]:.2f} (target <= {floors.TARGETS_F['to_dot_growth']})")
    if floors.make_dot is None:
        print("  torchviz missing: no make_dot rows")
        return
    print(f"snapshot + to_dot / make_dot (target <= {floors.TARGETS_F['dot_vs_torchviz']}x)")
    for build in (floors.chain_900, floors.transformer_6l, floors.resnetish):
        root, keep = build()
        g = gl.snapshot(root)
        s = paired({"gl": lambda: to_dot(gl.snapshot(root)).source, "tv": lambda: floors.make_dot(root).source,
                    "snap": lambda: gl.snapshot(root), "dot": lambda: to_dot(g).source,
                    "floor": lambda: floors.dot_floor(root, g), "nosaved": lambda: to_dot(gl.snapshot(root, saved=False)).source,
                    "floor_nosaved": lambda: floors.dot_floor(root, g, saved=False)}, repeats)
        print(f"  {build.__name__:>15}: snapshot+to_dot {statistics.median(s['gl']) * 1e3:6.2f} ms, make_dot "
              f"{statistics.median(s['tv']) * 1e3:6.2f} ms -> {_ratio(s, 'gl', 'tv')}; of which snapshot alone "
              f"{_ratio(s, 'snap', 'tv')}, to_dot alone {_ratio(s, 'dot', 'tv')}; floor (facts walk with saved"
              f" records + the text of every node and edge) {_ratio(s, 'floor', 'tv')}")
        print(f"  {'':>15}  with snapshot(saved=False): {_ratio(s, 'nosaved', 'tv')}; its floor {_ratio(s, 'floor_nosaved', 'tv')}")
        if shutil.which("dot") is not None:  # (the picture a user waits for, laid out by Graphviz: no target)
            v = paired({"gl": lambda: to_dot(gl.snapshot(root)).pipe(format="svg"),
                        "tv": lambda: floors.make_dot(root).pipe(format="svg")}, max(3, repeats // 3))
            print(f"  {'':>15}  to an SVG picture (Graphviz's dot laying it out): {statistics.median(v['gl']) * 1e3:.0f} ms vs"
                  f" {statistics.median(v['tv']) * 1e3:.0f} ms -> {_ratio(v, 'gl', 'tv')}")
        del root, keep, g


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 15)
