"""Laws 7 and 8: graphlens's snapshot is exactly the live backward graph, and recording changes nothing."""

from __future__ import annotations

from typing import Any, Callable, Iterable

import torch

from ..programs import Executed, _subject, backward_nodes
from ._base import LawViolation, _bitwise_equal, _fail, _law_entry, _show, _snapshot_fn, _take

__all__ = ["match_snapshot", "law_snapshot_is_next_functions", "law_transparent"]


def match_snapshot(graph: Any, roots: Iterable[torch.Tensor], *, subject: Any = None) -> dict[str, Any]:
    """Match a snapshot's ops one-to-one with the live backward nodes behind ``roots``.

    The match starts from the roots (the snapshot's root tensors are the live ``roots``,
    by identity) and follows each op's ``next`` edges in ``input_nr`` order alongside the
    node's ``next_functions``.  Returns ``{op id: node}``; raises :class:`LawViolation`
    (law 7) where a class name, an edge, an ``AccumulateGrad`` variable or the number of
    ops differs from what :func:`backward_nodes` sees.
    """
    roots = list(roots)
    ex_name = subject.name_of if isinstance(subject, Executed) else (lambda fn: "<unnamed>")
    subj = subject.subject if isinstance(subject, Executed) else subject

    def fail(detail: str, tensor: str | None = None) -> LawViolation:
        return _fail(7, subj, detail, tensor) if subj is not None else LawViolation(_law_entry(7), detail, tensor=tensor)

    nodes, walk_edges = backward_nodes(roots)
    ops = {o.id: o for o in graph.ops}
    nexts: dict[str, list] = {o: [] for o in ops}
    for e in graph.edges:
        if e.kind == "next":
            if e.src not in ops or e.dst not in ops:
                raise fail(f"the snapshot has a next edge {e.src} -> {e.dst} between unknown ops")
            nexts[e.src].append(e)
    for lst in nexts.values():
        lst.sort(key=lambda e: e.input_nr)
    op_of: dict[Any, str] = {}
    node_of: dict[str, Any] = {}
    queue: list[tuple[str, Any]] = []

    def pair(op_id: str, node: Any, how: str) -> None:
        known = node_of.get(op_id)
        if known is not None and known is not node:
            raise fail(f"snapshot op {op_id} stands for two different nodes ({type(known).__name__}, {type(node).__name__}) {how}")
        other = op_of.get(node)
        if other is not None and other != op_id:
            raise fail(f"node {type(node).__name__} ({ex_name(node)}) appears twice in the snapshot, as {other} and {op_id}")
        if known is None:
            node_of[op_id] = node
            op_of[node] = op_id
            queue.append((op_id, node))

    graph_roots = list(graph.roots)
    for t in roots:
        if t.grad_fn is None:
            continue
        match = [r for r in graph_roots if graph.tensor(r.id) is t]
        if not match:
            raise fail(f"root tensor {ex_name(t)} is not among the snapshot's roots", ex_name(t))
        if match[0].op is None or match[0].op not in ops:
            raise fail(f"the snapshot's root {match[0].id} has no producing op, but it has grad_fn {type(t.grad_fn).__name__}", ex_name(t))
        pair(match[0].op, t.grad_fn, f"(root {ex_name(t)})")
    while queue:
        op_id, node = queue.pop()
        op = ops[op_id]
        kind = type(node).__name__
        label = f"{kind} ({ex_name(node)})"
        if op.name != kind:
            raise fail(f"snapshot op {op_id} is named {op.name} but the node there is {label}")
        if kind == "AccumulateGrad":
            var = graph.tensor(op.variable) if op.variable is not None else None
            if var is not node.variable:
                raise fail(f"snapshot op {op_id} (AccumulateGrad) does not point at its leaf {ex_name(node.variable)}", ex_name(node.variable))
        want = walk_edges.get(node, [])
        have = nexts[op_id]
        if [(i, nr) for i, _, nr in want] != [(e.input_nr, e.output_nr) for e in have]:
            raise fail(
                f"{label} has next_functions entries (input_nr, output_nr) {[(i, nr) for i, _, nr in want]} -> "
                f"{[type(c).__name__ for _, c, _ in want]}, but snapshot op {op_id} has next edges "
                f"{[(e.input_nr, e.output_nr) for e in have]} -> {[ops[e.dst].name for e in have]}"
            )
        for (i, child, nr), e in zip(want, have):
            pair(e.dst, child, f"(input {i} of {label})")
    if len(node_of) != len(ops) or len(op_of) != len(nodes):
        extra = sorted(set(ops) - set(node_of))
        missing = [f"{type(n).__name__} ({ex_name(n)})" for n in nodes if n not in op_of]
        raise fail(f"the snapshot has {len(ops)} ops for {len(nodes)} backward nodes: unmatched ops {extra}, missing nodes {missing}")
    for t in graph.tensors:  # each captured tensor is the live tensor of its op
        live = graph.tensor(t.id)
        if live is None:
            continue
        if t.op is not None:
            if live.grad_fn is not node_of.get(t.op) or live.output_nr != t.output_nr:
                raise fail(f"snapshot tensor {t.id} says it comes from {t.op} output {t.output_nr}, but its grad_fn differs", t.name)
        if (t.is_leaf, t.requires_grad) != (live.is_leaf, live.requires_grad):
            raise fail(f"snapshot tensor {t.id} records is_leaf={t.is_leaf}, requires_grad={t.requires_grad}; the tensor has {live.is_leaf}, {live.requires_grad}", t.name)
    return node_of


def law_snapshot_is_next_functions(subject: Any, *, snapshot: Callable | None = None, **_: Any) -> None:
    """Law 7: the snapshot's ops and next edges are exactly the nodes and ``next_functions``
    entries a plain walk sees (before and after backward)."""
    subject = _subject(subject)
    ex = subject.run()
    take = _snapshot_fn(snapshot)
    g = _take(take, ex)
    match_snapshot(g, ex.losses, subject=ex)
    ex.backward()
    g2 = _take(take, ex)
    match_snapshot(g2, ex.losses, subject=ex)
    strip = lambda graph: ([(o.id, o.name, o.variable) for o in graph.ops], [e for e in graph.edges if e.kind == "next"])  # noqa: E731
    if strip(g) != strip(g2):
        raise _fail(7, subject, "the snapshot taken after backward has other ops or next edges than the one taken before")


def law_transparent(subject: Any, **_: Any) -> None:
    """Law 8: values and grads are bitwise identical (NaNs included) with and without
    ``graphlens.trace()`` and ``graphlens.snapshot()``."""
    from ..snapshot import snapshot
    from ..trace import trace

    subject = _subject(subject)
    plain = subject.run()
    plain.backward()
    runs = {}
    try:
        with trace():
            traced = subject.run()
            traced.backward()
        runs["graphlens.trace()"] = traced
    except Exception as exc:  # noqa: BLE001 - a crash of the recorder is a broken law
        raise _fail(8, subject, f"graphlens.trace() raised {type(exc).__name__}: {exc}") from exc
    if torch._C._is_torch_function_mode_enabled():
        raise _fail(8, subject, "graphlens.trace() left a TorchFunctionMode active")
    snap = subject.run()
    try:
        snapshot(*snap.losses, names=dict(snap.tensors))
    except Exception as exc:  # noqa: BLE001
        raise _fail(8, subject, f"graphlens.snapshot() raised {type(exc).__name__}: {exc}") from exc
    snap.backward()
    runs["graphlens.snapshot()"] = snap
    want = plain.grads()
    for how, run in runs.items():
        for name, t in plain.tensors.items():
            other = run.tensors.get(name)
            if other is None or not _bitwise_equal(t, other):
                raise _fail(8, subject, f"under {how} the value is {_show(other)}, plainly {_show(t)}", name)
        got = run.grads()
        for name in want.keys() | got.keys():
            if not _bitwise_equal(want.get(name), got.get(name)):
                raise _fail(8, subject, f"under {how} .grad is {_show(got.get(name))}, plainly {_show(want.get(name))}", name)
