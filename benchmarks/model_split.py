"""Where a traced model step's time goes: its forward and its backward, each side timed apart.

Run: ``python benchmarks/model_split.py [--repeats N]``.

A 2-layer GPT-2 built from its config (``transformers``; no weights) takes one training step
(forward, a loss, backward) plainly, inside ``graphlens.trace()`` (default, and with grads
and saved records off), and inside the facts floor of ``benchmarks/floors.py`` (the same two
ways).  Each sample starts from a collected heap; the sides alternate in every repeat; it
prints the median milliseconds of the forward, the backward and the block's exit.  Then the
lean trace once more with its recording switched off (``Recorder.record`` a no-op), which
leaves the cost of the mode itself (its checks and the warning attribution).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import graphlens as gl  # noqa: E402
from floors import FactsFloorMode, patched  # noqa: E402
from graphlens._live.recorder import Recorder  # noqa: E402


def gpt2() -> tuple[torch.nn.Module, torch.Tensor]:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=4, n_embd=128, vocab_size=1000, n_positions=64))
    return model, torch.randint(0, 1000, (2, 32))


def split(model: torch.nn.Module, ids: torch.Tensor, context: Callable[[], Any]) -> tuple[float, float, float]:
    """Seconds of the forward (to the loss), of the backward, and of leaving ``context``."""
    for p in model.parameters():
        p.grad = None
    with context():
        t0 = time.perf_counter()
        loss = model(ids).logits.float().pow(2).mean()
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
    return t1 - t0, t2 - t1, time.perf_counter() - t2


def _not_recorded(self: Any, *args: Any) -> None:
    return None


def main(argv: list[str] | None = None) -> dict[str, tuple[float, float, float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args(argv)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (what transformers says of the config, once: not measured)
            model, ids = gpt2()
    except ImportError as exc:
        print(f"skipped: transformers missing ({exc})")
        return {}

    sides = {
        "plain": contextlib.nullcontext,
        "trace": gl.trace,
        "facts floor": FactsFloorMode,
        "trace, grads and saved off": lambda: gl.trace(grads=False, saved=False),
        "facts floor, grads and saved off": lambda: FactsFloorMode(grads=False, saved=False),
        "the same trace, nothing recorded": lambda: gl.trace(grads=False, saved=False),
    }
    unrecorded = "the same trace, nothing recorded"
    def sample(k: str) -> tuple[float, float, float]:
        if k != unrecorded:
            return split(model, ids, sides[k])
        with patched(Recorder, "record", _not_recorded):  # (switched around the sample: the trace's block stays split's own)
            return split(model, ids, sides[k])

    for _ in range(3):
        for k in sides:
            sample(k)
    samples: dict[str, list] = {k: [] for k in sides}
    names = list(sides)
    for r in range(args.repeats):
        for k in names if r % 2 == 0 else reversed(names):
            gc.collect()
            samples[k].append(sample(k))
    out = {}
    print(f"GPT-2, 2 layers, one step (medians of {args.repeats}, ms): forward / backward / exit")
    for k, v in samples.items():
        out[k] = tuple(statistics.median(s[i] for s in v) * 1e3 for i in range(3))
        print(f"  {k:34s} {out[k][0]:7.2f} {out[k][1]:7.2f} {out[k][2]:6.2f}")
    return out


if __name__ == "__main__":
    main()
