"""What a graph's saved tensors keep alive until backward: bytes per op and per module (``g.memory()``)."""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

from .graph import FREED, HIDDEN, LIVE, MODIFIED, Graph

__all__ = ["Memory", "memory", "saved_bytes", "saved_bytes_by_op", "format_bytes", "OUTSIDE"]

#: How the table names the ops that ran in no submodule (the traced module's own code, or a loss
#: computed after the model).
OUTSIDE = "(no submodule)"

_RANK = {"number": 0, "untracked": 1, "activation": 2, "parameter": 3}  # a storage seen as two kinds is the higher
_WHY = {
    HIDDEN: "hidden by saved-tensor hooks (the hooks decide what they keep: offloading, say)",
    FREED: "freed before graphlens read them (a snapshot taken after backward)",
    MODIFIED: "modified in place before graphlens read them",
}
_NOT_READ = "not measured (read without storage facts, or a tensor without a plain storage)"


def format_bytes(n: int) -> str:
    """A byte count as people read it: ``"512 B"``, ``"1.5 KiB"``, ``"12.0 MiB"``.

    >>> format_bytes(512), format_bytes(1536), format_bytes(3 * 2**20)
    ('512 B', '1.5 KiB', '3.0 MiB')
    """
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            break
    return f"{value:.1f} {unit}"


@dataclass(frozen=True)
class Memory:
    """The bytes a graph's saved tensors keep alive until backward, per op and per module.

    What is counted: every storage a backward node's saved tensors hold, once, however many
    saved tensors share it (the same tensor saved by two ops, a view of another saved
    tensor), at the size of the whole storage (a saved view keeps all of it).  A storage is
    charged to one op: of the ops that saved it, the one farthest from the roots (the longest
    chain of ``next`` edges; on a tie the first in graph order), which backward reaches after
    every other holder that leads to it.  ``total`` counts two kinds (see
    :class:`~graphlens.values.SavedStorage`): ``activations``, tensors with autograd
    history, which nothing but backward needs once the forward is done (unless the program
    holds them too, as it may a model's returned logits), and ``untracked``, tensors without
    history that do not require grad: the program's inputs and a model's buffers, alive
    anyway while the program holds them, and masks, indices or positions made during the
    forward, which only backward keeps.  Under ``torch.no_grad()`` none of ``total`` is
    saved; checkpointing a module saves what its ops hold.  ``parameters`` (storages of
    leaves that require grad, and views of them) are alive anyway and not in ``total``;
    neither are Python numbers torch wrapped into 0-d tensors (``x * 0.5`` saves ``0.5``,
    which torch's saved-tensor hooks never see either).  This is the count a
    ``torch.autograd.graph.saved_tensors_hooks`` pack hook gives, deduplicated by
    ``untyped_storage().data_ptr()``, with the same kinds.

    Inside a region checkpointed by ``torch.utils.checkpoint`` (non-reentrant), the saved
    tensors are hidden by the checkpoint's hooks and kept by none of them; what is kept is
    the region's inputs, to recompute it, and those are counted (so the region's bytes drop
    to its inputs).  A custom ``autograd.Function``'s ``ctx.save_for_backward`` tensors are
    counted (a reentrant checkpoint's inputs among them).

    What is not: saved tensors graphlens could not measure (``unmeasured``, by reason:
    hidden by other saved-tensor hooks, which decide what they keep; freed by a backward
    pass before a snapshot read them), tensors kept other ways (a ``ctx.attribute``, a
    checkpoint's RNG state), and the memory of the backward pass itself.  A trace of several
    forward passes (a training loop) counts each pass's saved tensors, though they were not
    alive at once: trace one step to read one step's memory.

    ``ops`` maps an op id to the bytes charged to it, for every op that saved a measured
    storage (0 when another holder is charged); ``held`` to the bytes of every storage it
    saved, shared ones included; ``modules`` a module's dotted path to the bytes charged to
    its ops and to those of the modules inside it (``transformer.h`` includes
    ``transformer.h.0.attn``); ``outside`` the bytes of ops in no submodule (:data:`OUTSIDE`).  Modules
    come from the ops' ``scope`` (a trace with ``module=``), or for a snapshot from its
    parameters' names (:func:`graphlens.scopes.infer_scopes`).  ``str()`` is a table, the
    largest modules first; :meth:`table` takes options.
    """

    total: int
    activations: int
    untracked: int
    parameters: int
    storages: int
    ops: Mapping[str, int]
    held: Mapping[str, int]
    modules: Mapping[str, int]
    outside: int
    unmeasured: Mapping[str, int]
    unmeasured_ops: tuple[str, ...]

    def table(self, *, depth: int | None = None, limit: int | None = 30) -> str:
        """The totals, what was not counted, and one row per module with bytes charged, the
        largest first: at most ``limit`` rows (``None``: all) of modules at most ``depth``
        levels deep (``None``: any)."""
        if depth is not None and (type(depth) is not int or depth < 1):
            raise ValueError(f"depth must be a whole number >= 1 (1: the top-level modules) or None, not {depth!r}")
        if limit is not None and (type(limit) is not int or limit < 1):
            raise ValueError(f"limit must be a whole number >= 1 or None for every row, not {limit!r}")
        lines = [
            f"saved for backward: {format_bytes(self.total)} in {self.storages} storage{'s' * (self.storages != 1)} "
            f"(activations {format_bytes(self.activations)}, untracked {format_bytes(self.untracked)})",
            f"parameters saved too: {format_bytes(self.parameters)} (alive anyway, not in the total)",
        ]
        for why, n in self.unmeasured.items():
            lines.append(f"not counted: {n} saved tensor{'s' * (n != 1)} {why}")
        rows = [(m, b) for m, b in self.modules.items() if b and (depth is None or m.count(".") < depth)]
        if self.outside:
            rows.append((OUTSIDE, self.outside))
        rows.sort(key=lambda r: (-r[1], _natural(r[0])))
        more = 0
        if limit is not None and len(rows) > limit:
            rows, more = rows[:limit], len(rows) - limit
        if rows:
            width = max(len("module"), *(len(m) for m, _ in rows))
            lines.append(f"{'module':<{width}}  {'saved':>10}  {'share':>6}")
            for m, b in rows:
                share = f"{100 * b / self.total:.1f}%" if self.total else "-"
                lines.append(f"{m:<{width}}  {format_bytes(b):>10}  {share:>6}")
        if more:
            lines.append(f"... {more} more module{'s' * (more != 1)} (table(limit=None) lists them all)")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def _natural(path: str) -> tuple:
    """A module path's sort key, numbers as numbers (``h.2`` before ``h.10``)."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in path.split("."))


def _depths(graph: Graph) -> dict[str, int]:
    """Each op's longest chain of ``next`` edges from the ops that made the roots (ops no root
    leads to are left out)."""
    nxt = graph.adjacency.next
    tops = list(dict.fromkeys(t.op for t in graph.roots if t.op is not None))  # (in order, each once: a loop's many roots)
    reach, stack = set(tops), list(tops)
    while stack:
        for c in nxt.get(stack.pop(), ()):
            if c not in reach:
                reach.add(c)
                stack.append(c)
    indegree = dict.fromkeys(reach, 0)
    for op in reach:
        for c in nxt.get(op, ()):
            indegree[c] += 1
    depth = dict.fromkeys(reach, 0)
    ready = [op for op in tops if indegree[op] == 0]
    while ready:
        op = ready.pop()
        for c in nxt.get(op, ()):
            depth[c] = max(depth[c], depth[op] + 1)
            indegree[c] -= 1
            if indegree[c] == 0:
                ready.append(c)
    return depth


def memory(graph: Graph) -> Memory:
    """The bytes ``graph``'s saved tensors keep alive until backward (see :class:`Memory`).

    >>> import torch, graphlens as gl
    >>> from collections import OrderedDict
    >>> from torch import nn
    >>> model = nn.Sequential(OrderedDict(body=nn.Sequential(nn.Linear(64, 256), nn.Tanh()), head=nn.Linear(256, 1)))
    >>> with gl.trace(module=model) as tr:
    ...     loss = model(torch.ones(32, 64)).pow(2).mean()
    >>> m = tr.graph().memory()
    >>> print(m)
    saved for backward: 40.1 KiB in 3 storages (activations 32.1 KiB, untracked 8.0 KiB)
    parameters saved too: 1.0 KiB (alive anyway, not in the total)
    module               saved   share
    body              40.0 KiB   99.7%
    body.1            32.0 KiB   79.8%
    body.0             8.0 KiB   19.9%
    (no submodule)       128 B    0.3%

    The tanh's output is saved twice (by ``TanhBackward0`` and by the head's ``AddmmBackward0``),
    counted once and charged to the tanh; the head's op holds it too:

    >>> [(tr.graph().node(op).name, m.ops[op], m.held[op]) for op in m.ops]
    [('AddmmBackward0', 8192, 8192), ('TanhBackward0', 32768, 32768), ('AddmmBackward0', 0, 32768), ('PowBackward0', 128, 128)]
    """
    if not isinstance(graph, Graph):
        raise TypeError(f"graph must be a graphlens Graph (from gl.snapshot or tr.graph()), not {type(graph).__name__}")
    ops = graph.ops
    if not any(o.saved for o in ops) and any(o.name and not o.is_accumulate_grad for o in ops):
        raise ValueError(
            "graph has no saved entries to count: it was captured with saved=False (a snapshot of over "
            "5,000 nodes skips them by default); take it with gl.snapshot(..., saved=True) or gl.trace(saved=True)"
        )
    if not any(o.scope for o in ops):
        from .scopes import infer_scopes

        graph = infer_scopes(graph)
        ops = graph.ops
    size: dict[int, int] = {}
    kind: dict[int, str] = {}
    holders: dict[int, list[str]] = {}
    unmeasured: dict[str, int] = {}
    unmeasured_ops: list[str] = []
    for o in ops:
        missed = False
        for e in o.saved:
            if e.storages:
                for s in e.storages:
                    size[s.number] = s.nbytes
                    seen = kind.get(s.number)
                    if seen is None or _RANK[s.kind] > _RANK[seen]:
                        kind[s.number] = s.kind
                    who = holders.setdefault(s.number, [])
                    if not who or who[-1] != o.id:
                        who.append(o.id)
            elif e.is_tensor:
                why = _WHY.get(e.state, _NOT_READ if e.state is LIVE else "unreadable")
                unmeasured[why] = unmeasured.get(why, 0) + 1
                missed = True
        if missed:
            unmeasured_ops.append(o.id)
    depth = _depths(graph)
    order = {o.id: k for k, o in enumerate(ops)}
    charged: dict[str, int] = {}
    held: dict[str, int] = {}
    totals = {"activation": 0, "untracked": 0, "parameter": 0, "number": 0}
    counted = 0
    for number, who in holders.items():
        k = kind[number]
        totals[k] += size[number]
        if k in ("parameter", "number"):
            continue
        counted += 1
        for op in who:
            held[op] = held.get(op, 0) + size[number]
            charged.setdefault(op, 0)
        owner = max(who, key=lambda op: (depth.get(op, -1), -order[op]))
        charged[owner] += size[number]
    scope = {o.id: o.scope for o in ops}
    modules: dict[str, int] = {}
    outside = 0
    for op in sorted(charged, key=order.__getitem__):
        s = scope[op]
        if not s:
            outside += charged[op]
            continue
        parts = s.split(".")
        for n in range(1, len(parts) + 1):
            m = ".".join(parts[:n])
            modules[m] = modules.get(m, 0) + charged[op]
    ordered = sorted(charged, key=order.__getitem__)
    return Memory(
        total=totals["activation"] + totals["untracked"],
        activations=totals["activation"],
        untracked=totals["untracked"],
        parameters=totals["parameter"],
        storages=counted,
        ops=MappingProxyType({op: charged[op] for op in ordered}),
        held=MappingProxyType({op: held[op] for op in ordered}),
        modules=MappingProxyType(dict(sorted(modules.items(), key=lambda kv: (-kv[1], _natural(kv[0]))))),
        outside=outside,
        unmeasured=MappingProxyType(unmeasured),
        unmeasured_ops=tuple(unmeasured_ops),
    )


def saved_bytes(graph: Graph) -> dict[str, int]:
    """Per op id, the bytes charged to it in :func:`memory` (ops that saved no measured
    storage are left out): what the explorer page shows on each op."""
    return dict(memory(graph).ops)


#: The name :mod:`graphlens.render.explore_html` looks for (the same function).
saved_bytes_by_op = saved_bytes
