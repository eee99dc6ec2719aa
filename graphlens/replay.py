"""The engine's real backward, step by step: which node ran, what arrived, what it sent, what it wrote."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

from ._facts import make_summary
from .graph import Graph
from .values import PRECISION, Summary

if TYPE_CHECKING:
    from .trace import Trace

__all__ = ["Replay", "Step", "Write", "replay"]


class Write(NamedTuple):
    """A ``.grad`` a step wrote: the tensor's id, its ``.grad`` before and after (Summaries)."""

    tensor: str
    before: Summary | None
    after: Summary | None


class Step(NamedTuple):
    """One backward node as PyTorch's engine ran it.

    ``index`` counts the steps of the whole trace; ``backward`` which backward call (from
    0); ``op`` the :class:`~graphlens.OpNode` id in the graph; ``name`` its class
    (``MulBackward0``, ``AccumulateGrad``); ``grads_in`` what arrived at the node, one per
    output of the node; ``grads_out`` what it sent along each of its ``next_functions``, by
    ``input_nr`` (``None`` where nothing flowed); ``writes`` the ``.grad`` updates it made;
    ``hooked`` the outputs whose incoming gradient a user's hook changed (what arrived
    differs from what the nodes upstream sent)."""

    index: int
    backward: int
    op: str
    name: str
    grads_in: tuple[Summary | None, ...]
    grads_out: tuple[Summary | None, ...]
    writes: tuple[Write, ...] = ()
    hooked: tuple[int, ...] = ()


def _summary(head: Any) -> Summary | None:
    return None if head is None else make_summary(head)


def _close(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(
        (x == y) or (isinstance(x, (int, float)) and isinstance(y, (int, float)) and math.isclose(x, y, rel_tol=1e-5, abs_tol=1e-6))
        for x, y in zip(a, b)
    )


class Replay:
    """What the engine did in the backward passes a trace saw (see :meth:`Trace.replay`).

    ``steps`` in the order PyTorch ran them; ``graph`` the traced graph they refer to."""

    def __init__(self, graph: Graph, steps: tuple[Step, ...], passes: int) -> None:
        self.graph = graph
        self.steps = steps
        self.passes = passes

    def __len__(self) -> int:
        return len(self.steps)

    def __iter__(self):
        return iter(self.steps)

    def __repr__(self) -> str:
        return f"<Replay: {len(self.steps)} steps in {self.passes} backward pass(es)>"

    def label(self, node_id: str) -> str:
        node = self.graph.node(node_id)
        return getattr(node, "label", node_id)

    def describe(self, step: Step, precision: int = PRECISION) -> str:
        """One or two plain sentences on what happened at ``step``."""
        g = self.graph
        fmt = (lambda s: "nothing" if s is None else s.format(precision))  # noqa: E731
        if step.name == "AccumulateGrad":
            w = step.writes[0] if step.writes else None
            leaf = self.label(w.tensor) if w else "the leaf"
            got = fmt(step.grads_in[0]) if step.grads_in else "nothing"
            if w is not None and w.before is None:
                return f"AccumulateGrad stores the gradient that arrived, {got}, as {leaf}.grad."
            if w is not None:
                return f"AccumulateGrad adds {got} to {leaf}.grad: {fmt(w.before)} becomes {fmt(w.after)}."
            return f"AccumulateGrad receives {got} for {leaf}."
        sent = []
        for e in g.inputs(step.op):
            value = step.grads_out[e.input_nr] if e.input_nr < len(step.grads_out) else None
            if value is None:
                continue
            child = g.node(e.dst)
            target = self.label(child.variable) if child.is_accumulate_grad and child.variable else child.label
            sent.append(f"{fmt(value)} to {target}")
        arrived = ", ".join(fmt(s) for s in step.grads_in) or "nothing"
        text = f"{step.name} receives {arrived}"
        text += f" and sends {'; '.join(sent)}." if sent else "; nothing flows on."
        if step.hooked:
            text += " A hook on its output changed the gradient that arrived."
        for w in step.writes:
            text += f" {self.label(w.tensor)}.grad (retain_grad) becomes {fmt(w.after)}."
        return text

    def __str__(self) -> str:
        rows = [f"{'step':>4}  {'pass':>4}  {'node':<22} {'arrived':<28} sent"]
        for s in self.steps:
            arrived = ", ".join("-" if x is None else str(x) for x in s.grads_in)
            sent = ", ".join("-" if x is None else str(x) for x in s.grads_out)
            rows.append(f"{s.index:>4}  {s.backward:>4}  {s.name:<22} {arrived[:28]:<28} {sent}")
            for w in s.writes:
                rows.append(f"{'':>12}{self.label(w.tensor)}.grad: {w.before} -> {w.after}")
        return "\n".join(rows)

    # -- the page (graphlens.render.replay_html does the drawing) -------------------------
    def to_html(self, path=None, **options: Any) -> str:
        """One self-contained page: the data-view diagram with a stepper (previous / next /
        play, arrow keys, a slider, ``#step=N``).  Written to ``path`` when given; returns the HTML."""
        from .render.replay_html import replay_page

        html = replay_page(self, **options)
        if path is not None:
            from pathlib import Path

            Path(path).write_text(html, encoding="utf-8")
        return html

    def _repr_html_(self) -> str:
        try:
            return self.to_html()
        except Exception as exc:  # noqa: BLE001 - a notebook shows text, never a traceback
            import html

            return f"<pre>{html.escape(str(self))}\n(no page: {html.escape(str(exc))})</pre>"


def build(rec, graph: Graph) -> Replay:
    """The replay of the steps ``rec`` (a trace's record store) observed."""
    from ._recorder import _NAME

    ops = rec.ops
    # The .grad writes by step, with the value each tensor held before.
    last: dict[tuple[int, int], Any] = {}
    writes: dict[int, list[Write]] = {}
    for k, i, after in rec.writes:
        pass_nr = rec.steps[k][1]
        before = last.get((pass_nr, i), rec.grad_before.get((pass_nr, i)))
        last[(pass_nr, i)] = after
        writes.setdefault(k, []).append(Write(f"t{i}", _summary(before), _summary(after)))
    # What the nodes upstream sent into each (op, output): to see a hook's change.
    sent_into: dict[tuple[int, int, int], list] = {}
    steps: list[Step] = []
    for k, (j, pass_nr, arrived, sent) in enumerate(rec.steps):
        hooked = []
        for nr, head in enumerate(arrived):
            parts = sent_into.get((pass_nr, j, nr))
            if head is not None and parts and all(p is not None for p in parts) and head[3] is not None:
                total = tuple(sum(vals) for vals in zip(*(p[3] for p in parts))) if all(p[3] for p in parts) else None
                if total is not None and len(total) == len(head[3]) and not _close(total, head[3]):
                    hooked.append(nr)
        for input_nr, child, output_nr in rec.onext.get(j, ()):
            if input_nr < len(sent):
                sent_into.setdefault((pass_nr, child, output_nr), []).append(sent[input_nr])
        steps.append(Step(
            k, pass_nr, f"op{j}", ops[j][_NAME] or "?",
            tuple(_summary(h) for h in arrived), tuple(_summary(h) for h in sent),
            tuple(writes.get(k, ())), tuple(hooked),
        ))
    return Replay(graph, tuple(steps), rec.passes)


def replay(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Replay:
    """Run ``fn(*args, **kwargs)`` under :func:`graphlens.trace` and return the replay of the
    backward passes it ran.

    >>> import torch, graphlens as gl
    >>> def step():
    ...     w = torch.tensor([1.0, 2.0], requires_grad=True)
    ...     x = torch.tensor([3.0, 4.0])
    ...     (w * x).sum().backward()
    >>> rp = gl.replay(step)
    >>> [s.name for s in rp.steps]
    ['SumBackward0', 'MulBackward0', 'AccumulateGrad']
    >>> rp.steps[1].grads_out[0].head, rp.steps[2].writes[0].after.head
    ((3.0, 4.0), (3.0, 4.0))
    """
    import sys

    from .trace import trace

    code = getattr(fn, "__code__", None)
    with trace() as tr:
        rec = tr._rec

        def catch(frame, event, arg):  # names come from fn's own variables: note its frame once
            if event == "call" and frame.f_code is code:
                sys.setprofile(None)
                rec.frame, rec.code, rec.last_lasti = frame, frame.f_code, -1

        watching = code is not None and sys.getprofile() is None  # never displace a profiler of the user's
        if watching:
            sys.setprofile(catch)
        try:
            fn(*args, **kwargs)
        finally:
            if watching and sys.getprofile() is catch:
                sys.setprofile(None)
    return tr.replay()
