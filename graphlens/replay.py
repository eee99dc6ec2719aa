"""The engine's real backward, step by step: which node ran, what arrived, what it sent, what it wrote."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

from ._live.facts import make_summary
from ._util import paused_gc
from .graph import Graph
from .values import PRECISION, Summary

if TYPE_CHECKING:
    from .trace import Trace

__all__ = ["Replay", "Step", "ModuleStep", "Flow", "Write", "replay", "replay_script", "ScriptRun", "module_of", "module_label"]


class Write(NamedTuple):
    """A ``.grad`` a step wrote: the tensor's id, its ``.grad`` before and after (Summaries)."""

    tensor: str
    before: Summary | None
    after: Summary | None


class Step(NamedTuple):
    """One backward node as PyTorch's engine ran it.

    ``index`` is the step's position in :attr:`Replay.steps` (from 0, as a Python index;
    what graphlens shows, in text and on the page, counts from 1); ``backward`` which
    backward call (from 0; shown from 1 too); ``op`` the :class:`~graphlens.OpNode` id in the graph; ``name`` its class
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


class Flow(NamedTuple):
    """A gradient that crossed the edge of a :class:`ModuleStep`: ``value``, sent by op
    ``sender`` (``None``: nothing upstream sent it, it is the gradient ``backward()``
    starts from) to output ``output_nr`` of op ``receiver``."""

    sender: str | None
    receiver: str
    output_nr: int
    value: Summary


class ModuleStep(NamedTuple):
    """One maximal run of consecutive engine steps whose ops belong to the same module (see
    :meth:`Replay.by_module`).

    ``index`` its position in the list (from 0; shown from 1); ``backward`` the backward
    call; ``module`` the dotted module name (``"transformer.h.0.attn"``), ``None`` for ops
    outside every submodule; ``steps`` the engine's :class:`Step` s, in the order they ran;
    ``grads_in`` the gradients that reached the run's ops from ops outside it (or from
    ``backward()`` itself); ``grads_out`` the gradients its ops sent to ops outside it;
    ``writes`` the ``.grad`` updates its steps made."""

    index: int
    backward: int
    module: str | None
    steps: tuple[Step, ...]
    grads_in: tuple[Flow, ...]
    grads_out: tuple[Flow, ...]
    writes: tuple[Write, ...] = ()

    @property
    def start(self) -> int:
        """The :attr:`Step.index` of the run's first engine step."""
        return self.steps[0].index

    @property
    def stop(self) -> int:
        """One past the :attr:`Step.index` of the run's last engine step (``range(start, stop)``)."""
        return self.steps[-1].index + 1


def module_of(scope: str | None, depth: int | None) -> str | None:
    """The module an op of scope ``scope`` belongs to when modules are read ``depth`` dotted
    parts deep (``None``: the whole scope, the innermost module); ``None`` outside every submodule.

    >>> module_of("transformer.h.0.attn.c_attn", 4), module_of("transformer.h.0", 4), module_of(None, 2)
    ('transformer.h.0.attn', 'transformer.h.0', None)
    """
    if not scope:
        return None
    return scope if depth is None else ".".join(scope.split(".")[:depth])


def module_label(module: str | None) -> str:
    """How a module step's module is written: its dotted name, or ``(top level)``."""
    return "(top level)" if module is None else module


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
        """What the diagram calls node ``node_id``: a tensor's name (else its id), an op's class."""
        node = self.graph.node(node_id)
        return getattr(node, "label", node_id)

    def _index(self) -> dict:
        ix = self.__dict__.get("_ix")
        if ix is None:
            g = self.graph
            nexts: dict[str, list] = {}
            for e in g.edges:
                if e.kind == "next":
                    nexts.setdefault(e.src, []).append(e)
            for v in nexts.values():
                v.sort(key=lambda e: e.input_nr)
            ix = self.__dict__["_ix"] = {
                "nexts": nexts,
                "outputs": {(t.op, t.output_nr): t for t in g.tensors if t.op is not None},
                "first": {s.backward: s.index for s in reversed(self.steps)},
            }
        return ix

    def target(self, op_id: str, output_nr: int) -> str:
        """What a gradient sent to output ``output_nr`` of op ``op_id`` is for: the leaf of an
        ``AccumulateGrad``, the tensor that output made, else the op's class."""
        node = self.graph.node(op_id)
        if node.is_accumulate_grad and node.variable is not None:
            return self.label(node.variable)
        t = self._index()["outputs"].get((op_id, output_nr))
        return t.label if t is not None else node.label

    def has_scopes(self) -> bool:
        """Whether the graph knows which module ran its ops (a trace with ``module=``, or
        parameters with dotted names): what :meth:`by_module` needs."""
        return any(op.scope for op in self._scoped().ops)

    def _scoped(self) -> Graph:
        """The graph with each op's module (:func:`~graphlens.scopes.infer_scopes`), made once:
        a module step's sentences ask for it once per gradient that crosses it."""
        g = self.__dict__.get("_scoped_graph")
        if g is None:
            from .scopes import infer_scopes

            g = self.__dict__["_scoped_graph"] = infer_scopes(self.graph)
        return g

    def by_module(self, *, depth: int | None = None) -> tuple[ModuleStep, ...]:
        """The backward read module by module: each :class:`ModuleStep` is one maximal run
        of consecutive engine steps whose ops lie in the same module, in the engine's real
        order (a module the engine enters twice is two steps; a run never spans two
        backward calls).  An op's module is its ``scope`` (the submodule that ran it in the
        forward; for a graph without one, inferred from the dotted parameter names) cut to
        ``depth`` dotted parts (as diagrams collapse them): ``depth=4`` reads
        ``transformer.h.0.attn.c_attn`` as ``transformer.h.0.attn``; ``None`` keeps the innermost module.  Together the
        module steps hold every engine step exactly once.

        >>> import torch, graphlens as gl
        >>> model = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Tanh(), torch.nn.Linear(3, 1))
        >>> with gl.trace(module=model) as tr:
        ...     model(torch.ones(4, 2)).sum().backward()
        >>> [(m.module, len(m.steps)) for m in tr.replay().by_module()]
        [(None, 1), ('2', 4), ('1', 1), ('0', 4)]
        """
        from ._checks import check_count

        depth = check_count("depth", depth, allow_none=True, minimum=1)
        cached = self.__dict__.setdefault("_by_module", {})
        if depth in cached:
            return cached[depth]
        g = self._scoped()
        scope = {op.id: op.scope for op in g.ops}
        into: dict[tuple[str, int], list] = {}
        for e in g.edges:
            if e.kind == "next":
                into.setdefault((e.dst, e.output_nr), []).append(e)
        nexts = self._index()["nexts"]
        ran = {(s.backward, s.op): s for s in self.steps}
        runs: list[list[Step]] = []
        key = None
        for s in self.steps:
            k = (s.backward, module_of(scope.get(s.op), depth))
            if runs and k == key:
                runs[-1].append(s)
            else:
                runs.append([s])
                key = k
        out = []
        for i, run in enumerate(runs):
            inside = {s.op for s in run}
            first = run[0].index
            ins: list[Flow] = []
            outs: list[Flow] = []
            for s in run:
                for nr, value in enumerate(s.grads_in):
                    if value is None:
                        continue
                    senders = [(e, ran.get((s.backward, e.src))) for e in into.get((s.op, nr), ())]
                    senders = [(e, t) for e, t in senders if t is not None and t.index < s.index]
                    if not senders:
                        ins.append(Flow(None, s.op, nr, value))
                    for e, t in senders:
                        sent = t.grads_out[e.input_nr] if e.input_nr < len(t.grads_out) else None
                        if t.index < first and sent is not None:
                            ins.append(Flow(e.src, s.op, nr, sent))
                for e in nexts.get(s.op, ()):
                    value = s.grads_out[e.input_nr] if e.input_nr < len(s.grads_out) else None
                    if value is not None and e.dst not in inside:
                        outs.append(Flow(s.op, e.dst, e.output_nr, value))
            out.append(ModuleStep(
                i, run[0].backward, module_of(scope.get(run[0].op), depth), tuple(run), tuple(ins), tuple(outs),
                tuple(w for s in run for w in s.writes),
            ))
        cached[depth] = tuple(out)
        return cached[depth]

    def describe_module(self, ms: ModuleStep, precision: int = PRECISION, max_elements: int | None = 2, *, most: int = 3) -> str:
        """A few plain sentences on a :class:`ModuleStep`: which engine steps ran in the
        module (numbered from 1), what reached it from outside, what it sent out (at most
        ``most`` of each, then how many more) and whose ``.grad`` it wrote.

        >>> import torch, graphlens as gl
        >>> _ = torch.manual_seed(0)
        >>> model = torch.nn.Sequential(torch.nn.Linear(2, 1), torch.nn.Tanh())
        >>> with gl.trace(module=model) as tr:
        ...     model(torch.ones(1, 2)).sum().backward()
        >>> rp = tr.replay()
        >>> print(rp.describe_module(rp.by_module()[1]))
        Module 1 runs 1 node (engine step 2 of 6): TanhBackward0. It receives [1] for a tensor made in 1 and sends [0.958] to a tensor made in 0.
        """
        fmt = (lambda s: s.format(precision, max_elements))  # noqa: E731
        names: dict[str, int] = {}
        for s in ms.steps:
            names[s.name] = names.get(s.name, 0) + 1
        kinds = ", ".join(f"{n} \u00d7{c}" if c > 1 else n for n, c in list(names.items())[:8])
        if len(names) > 8:
            kinds += f" and {len(names) - 8} other kinds"
        span = f"engine step {ms.start + 1}" if len(ms.steps) == 1 else f"engine steps {ms.start + 1} to {ms.stop}"
        who = "Outside every submodule (the top level)," if ms.module is None else f"Module {ms.module}"
        text = f"{who} runs {len(ms.steps)} node{'s' * (len(ms.steps) != 1)} ({span} of {len(self.steps)}): {kinds}."

        def listed(parts: list[str]) -> str:
            if len(parts) > most:
                parts = parts[:most] + [f"{len(parts) - most} more"]
            return ", ".join(parts[:-1]) + (" and " if len(parts) > 1 else "") + parts[-1]

        # What arrived, once per tensor: what reached it from two consumers outside is their sum.
        by_target: dict[tuple[str, int], list[Flow]] = {}
        for f in ms.grads_in:
            by_target.setdefault((f.receiver, f.output_nr), []).append(f)
        at = {s.op: s for s in ms.steps}
        arrived = []
        for (op, nr), flows in by_target.items():
            f = flows[0]
            if f.sender is None:
                arrived.append(f"{fmt(f.value)} for {self._flow_target(f)} (the gradient backward() starts from)")
            elif len(flows) == 1:
                arrived.append(f"{fmt(f.value)} for {self._flow_target(f)}")
            else:
                total = at[op].grads_in[nr]
                arrived.append(f"{fmt(total)} for {self._flow_target(f)} (the sum of what {len(flows)} nodes outside sent)"
                               if total is not None else f"{len(flows)} gradients for {self._flow_target(f)}")
        said = []
        if arrived:
            said.append("receives " + listed(arrived))
        if ms.grads_out:
            said.append("sends " + listed([f"{fmt(f.value)} to {self._flow_target(f)}" for f in ms.grads_out]))
        else:
            said.append("sends nothing out of it")
        text += " It " + " and ".join(said) + "."
        if ms.writes:
            labels = list(dict.fromkeys(self.label(w.tensor) for w in ms.writes))
            shown = ", ".join(labels[:most]) + (f" and {len(labels) - most} more" if len(labels) > most else "")
            text += f" It writes the .grad of {shown}."
        return text

    def _flow_target(self, f: Flow) -> str:
        """What a crossing gradient is for: the tensor (or leaf) it is the gradient of, by name
        when the tensor has one, else as the output of the module that made it."""
        node = self.graph.node(f.receiver)
        if node.is_accumulate_grad and node.variable is not None:
            return self.label(node.variable)
        t = self._index()["outputs"].get((f.receiver, f.output_nr))
        if t is not None and t.name:
            return t.name
        scope = self._scoped().node(f.receiver).scope
        return f"a tensor made in {scope}" if scope else (t.label if t is not None else node.label)

    def describe(self, step: Step, precision: int = PRECISION, max_elements: int | None = 4) -> str:
        """One or two plain sentences on what happened at ``step``: what arrived, what the
        node does with it, what it sent to whom, and the ``.grad`` it wrote.

        >>> import torch, graphlens as gl
        >>> def f():
        ...     w = torch.tensor([1.0, 2.0], requires_grad=True)
        ...     x = torch.tensor([3.0, 4.0])
        ...     y = w * x
        ...     y.sum().backward()
        >>> rp = gl.replay(f)
        >>> print(rp.describe(rp.steps[1]))
        MulBackward0 (from y = w * x) receives [1, 1] for y. It multiplies it by the other factor, x = [3, 4], and sends [3, 4] to w.
        >>> print(rp.describe(rp.steps[2]))
        AccumulateGrad stores the gradient that arrived, [3, 4], as w.grad (it was None).
        """
        from ._backward_rules import FACTOR_OF, base, rule

        g = self.graph
        fmt = (lambda s: "nothing" if s is None else s.format(precision, max_elements))  # noqa: E731
        if step.name == "AccumulateGrad":
            w = step.writes[0] if step.writes else None
            op = g.node(step.op)
            leaf = self.label(w.tensor) if w else self.label(op.variable) if getattr(op, "variable", None) else "the leaf"
            got = fmt(step.grads_in[0]) if step.grads_in else "nothing"
            if w is not None and w.before is None:
                return f"AccumulateGrad stores the gradient that arrived, {got}, as {leaf}.grad (it was None)."
            if w is not None:
                return f"AccumulateGrad adds {got} to {leaf}.grad: {fmt(w.before)} becomes {fmt(w.after)}."
            return f"AccumulateGrad receives {got} for {leaf}; a hook or a grad of its own kept it from {leaf}.grad."
        ix = self._index()
        op = g.node(step.op)
        where = f" (from {op.code})" if getattr(op, "code", None) else f" ({op.forward})" if getattr(op, "forward", None) else ""
        arrived = []
        for nr, s in enumerate(step.grads_in):
            if s is None:
                continue
            t = ix["outputs"].get((step.op, nr))
            arrived.append(fmt(s) + (f" for {t.label}" if t is not None else ""))
        text = f"{step.name}{where} receives {' and '.join(arrived) or 'nothing'}"
        if ix["first"].get(step.backward) == step.index:
            text += ", the gradient backward() starts from"
        text += "."
        if step.hooked:
            text += " A hook on its output changed that gradient before it arrived."
        sent = []
        to_inputs = set()
        factors: list[tuple[str, str]] = []
        saved = {e.name: e for e in getattr(op, "saved", ())}
        for e in ix["nexts"].get(step.op, ()):
            value = step.grads_out[e.input_nr] if e.input_nr < len(step.grads_out) else None
            if value is None:
                continue
            who = self.target(e.dst, e.output_nr)
            to_inputs.add(e.input_nr)
            sent.append(f"{fmt(value)} to {who}")
            names = FACTOR_OF.get(base(step.name))
            if names and e.input_nr < len(names) and names[e.input_nr] in saved:
                factors.append((self._saved_text(saved[names[e.input_nr]], precision, max_elements), who))
        phrase = rule(step.name, to_inputs)
        if phrase is not None:
            uniq = list(dict.fromkeys(f for f, _ in factors if f))
            if len(uniq) == 1:
                factor = ", " + uniq[0]
            elif uniq:
                factor = " (" + "; ".join(f"{f} for {who}" for f, who in factors if f) + ")"
            else:
                factor = ""
            action = phrase.format(factor=factor)
        else:
            action = f"applies the chain rule of {op.forward or step.name}"
        if sent:
            text += f" It {action}, and sends {' and '.join(sent)}."
        else:
            text += " Nothing flows on: no input of it needs a gradient."
        for w in step.writes:
            text += f" {self.label(w.tensor)}.grad (kept by retain_grad) becomes {fmt(w.after)}."
        return text

    def _saved_text(self, entry, precision: int, max_elements: int | None) -> str:
        """A saved factor as the sentence names it: ``x = [3, 4]``, ``2.5``, or ``""``."""
        if entry.tensor is not None and entry.tensor in self.graph:
            t = self.graph.node(entry.tensor)
            value = t.value.format(precision, max_elements) if t.value is not None else None
            return f"{t.label} = {value}" if value else t.label
        if entry.summary is not None and entry.summary.head is not None:
            return entry.summary.format(precision, max_elements)
        if entry.value is not None and entry.state.value == "live":
            return entry.format(precision)
        return ""

    def __str__(self) -> str:
        return self.table()

    def table(self, *, by: str = "step", depth: int | None = None) -> str:
        """The replay as a text table, steps and backward calls numbered from 1: one row per
        engine step (``by="step"``, what ``str()`` gives) or per module step (``by="module"``,
        read ``depth`` dotted parts deep as in :meth:`by_module`)."""
        from ._checks import check_choice

        if check_choice("by", by, ("step", "module")) == "module":
            rows = [f"{'step':>4}  {'call':>4}  {'module':<28} {'engine steps':<13} sent out"]
            for m in self.by_module(depth=depth):
                span = f"{m.start + 1}" if len(m.steps) == 1 else f"{m.start + 1}-{m.stop}"
                sent = ", ".join(str(f.value) for f in m.grads_out[:2]) + (" ..." if len(m.grads_out) > 2 else "")
                rows.append(f"{m.index + 1:>4}  {m.backward + 1:>4}  {module_label(m.module):<28} {span:<13} {sent}".rstrip())
            return "\n".join(rows)
        rows = [f"{'step':>4}  {'call':>4}  {'node':<22} {'arrived':<28} sent"]
        for s in self.steps:
            arrived = ", ".join("-" if x is None else str(x) for x in s.grads_in)
            sent = ", ".join("-" if x is None else str(x) for x in s.grads_out)
            rows.append(f"{s.index + 1:>4}  {s.backward + 1:>4}  {s.name:<22} {arrived[:28]:<28} {sent}".rstrip())
            for w in s.writes:
                rows.append(f"{'':>12}{self.label(w.tensor)}.grad: {w.before} -> {w.after}")
        return "\n".join(rows)

    # -- the page (graphlens.render.replay_html does the drawing) -------------------------
    def to_html(self, path=None, **options: Any) -> str:
        """One self-contained page: the data-view diagram with a stepper (previous / next /
        play, arrow keys, a slider, ``#step=N`` and ``#module=N``, counting from 1).  Written
        to ``path`` when given; returns the HTML.

        Keyword options (see :func:`graphlens.render.replay_html.replay_page`): ``by="auto"``
        (by module when the graph knows its modules and has more than 100 steps, else by
        step), ``"step"`` or ``"module"``; ``depth`` collapses the diagram's module boxes
        and the module steps at that many dotted parts; ``title``, ``direction``,
        ``precision``, ``max_elements``, ``max_nodes``.  Only the current step's edges
        are labelled; the page's "trail" box adds the earlier steps' of the same call."""
        from .render.replay_html import replay_page

        with paused_gc():  # (drawing and the page's steps make many small acyclic objects)
            html = replay_page(self, **options)
        if path is not None:
            from pathlib import Path

            Path(path).write_text(html, encoding="utf-8")
        return html

    def _repr_html_(self) -> str:
        try:
            from .render.replay_html import replay_frame

            return replay_frame(self)
        except Exception as exc:  # noqa: BLE001 - a notebook shows text, never a traceback
            import html

            return f"<pre>{html.escape(str(self))}\n(no page: {html.escape(str(exc))})</pre>"


def build(rec, graph: Graph) -> Replay:
    """The replay of the steps ``rec`` (a trace's record store) observed."""
    from ._live.capture import _NAME

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
                rec.frame, rec.code, rec.last_lasti, rec.targets = frame, frame.f_code, -1, None

        watching = code is not None and sys.getprofile() is None  # never displace a profiler of the user's
        if watching:
            sys.setprofile(catch)
        try:
            fn(*args, **kwargs)
        finally:
            if watching and sys.getprofile() is catch:
                sys.setprofile(None)
    return tr.replay()


class ScriptRun(NamedTuple):
    """What :func:`replay_script` saw: the trace, its replay, and the exception that stopped
    the script (``None`` when it ran to the end)."""

    trace: Any
    replay: Replay
    error: BaseException | None


def replay_script(path: str, argv: tuple[str, ...] = ()) -> ScriptRun:
    """Run the Python script at ``path`` (as ``python path *argv`` would, ``__name__ ==
    "__main__"``) under :func:`graphlens.trace`, its tensors named after the script's
    variables, and return the trace, the replay of the backward passes it ran, and the
    exception that stopped it (a script that raises still gives the steps up to the failure).
    ``sys.argv`` and ``sys.path[0]`` are the script's while it runs and restored after."""
    import os
    import runpy
    import sys

    from .trace import trace

    full = os.path.abspath(path)
    if not os.path.isfile(full):
        raise FileNotFoundError(f"no script at {path!r}: give the path of a Python file, e.g. graphlens replay train.py")
    old_argv, old_path0 = sys.argv, (sys.path[0] if sys.path else None)
    error: BaseException | None = None
    with trace() as tr:
        rec = tr._rec

        def catch(frame, event, arg):  # the script's own module frame names the tensors
            if event == "call" and frame.f_code.co_filename == full and frame.f_code.co_name == "<module>":
                sys.setprofile(None)
                rec.frame, rec.code, rec.last_lasti, rec.targets = frame, frame.f_code, -1, None

        watching = sys.getprofile() is None  # never displace a profiler
        sys.argv = [path, *argv]
        if sys.path:
            sys.path[0] = os.path.dirname(full)
        if watching:
            sys.setprofile(catch)
        try:
            runpy.run_path(full, run_name="__main__")
        except SystemExit as exc:
            if exc.code not in (None, 0):
                error = exc
        except BaseException as exc:  # noqa: BLE001 - the page shows it, explained
            if isinstance(exc, KeyboardInterrupt):
                raise
            error = exc
        finally:
            if watching and sys.getprofile() is catch:
                sys.setprofile(None)
            sys.argv = old_argv
            if sys.path and old_path0 is not None:
                sys.path[0] = old_path0
    return ScriptRun(tr, tr.replay(), error)
