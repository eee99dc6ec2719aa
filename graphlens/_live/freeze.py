"""Turning a trace's records into a Graph: numbers become Summary values, indexes become ids."""

from __future__ import annotations

import weakref
from typing import Any, Mapping

import torch

from .facts import dtype_name, make_summary, plain_shape, tensor_node, version_of
from .capture import (
    _DETACHED_FROM, _DEVICE, _DTYPE, _FORWARD, _HEAD, _INS, _IS_LEAF, _IS_PARAM, _IS_VIEW, _NAME, _OP, _OREGION,
    _LASTI, _OSCOPE, _OUTPUT_NR, _REGION, _REQUIRES_GRAD, _SCOPE, _SHAPE, _VAR, _VERSION, readable,
)
from .guard import node_unsafe
from .recorder import Recorder
from .._util import paused_gc
from ..flowed import Flowed
from ..graph import FREED, LIVE, Edge, Graph, OpNode, TensorNode
from ..names import NameBook

__all__ = ["freeze"]

_NO_FLOW = Flowed()


def freeze(rec: Recorder, *, names: Mapping[str, Any] | None, module: torch.nn.Module | None) -> Graph:
    """The graph of everything ``rec`` recorded, with the live tensors read as they are now."""
    with paused_gc():  # freezing makes several small objects per record
        return _freeze(rec, names, module)


def _flowed_by_tensor(rec: Recorder) -> dict[int, Flowed]:
    """What flowed into each tensor, by backward pass (a :class:`~graphlens.flowed.Flowed`: the
    passes where something did, of all the trace's passes)."""
    last: dict[int, int] = {}  # (each tensor's last pass so far: an entry goes after the one before)
    at: dict[int, list] = {}
    for i, pass_nr, head in rec.flowed:
        k = last[i] = max(pass_nr, last.get(i, -1) + 1)
        if head is not None:
            at.setdefault(i, []).append((k, make_summary(head)))
    passes = rec.passes
    return {i: Flowed(max(passes, k + 1), at.get(i, ())) for i, k in last.items()}


def _saved_of(rec: Recorder, visited: set) -> dict[int, tuple]:
    """Each op's saved entries.  An op read just now (its node is alive) says what it
    holds; one whose node died after it ran in a backward pass that kept no graph had its
    saved tensors released by PyTorch, which its entries say."""
    for j in list(rec.rows):
        rec.saved_of(j)
    out = dict(rec.osaved)
    for j in rec.released() - visited:
        entries = out.get(j)
        if entries and any(e.state is LIVE and (e.summary is not None or e.tensor is not None) for e in entries):
            out[j] = tuple(
                e._replace(state=FREED) if e.state is LIVE and (e.summary is not None or e.tensor is not None) else e
                for e in entries
            )
    return out


def _grad_names(recs: list, refs: list, tnames: dict, book: Any) -> dict:
    """``{id(g): (weakref to g, "w.grad")}`` for the ``.grad`` ``g`` of each live, named tensor
    of the trace that keeps one (a leaf, or a non-leaf that retains its grad): a gradient the
    block read as ``w.grad`` is named so, as the user wrote it."""
    out: dict = {}
    for i, r in enumerate(recs):
        if not r[_REQUIRES_GRAD]:
            continue
        t = refs[i]()
        if t is None:
            continue
        name = book.name_of(t) or tnames.get(i)
        if name and (t.retains_grad or t.is_leaf):
            g = t._grad if type(t) in (torch.Tensor, torch.nn.Parameter) else None  # (a subclass may watch reads)
            if isinstance(g, torch.Tensor):
                out.setdefault(id(g), (weakref.ref(g), f"{name}.grad"))
    return out


def _freeze(rec: Recorder, names, module) -> Graph:
    recs, ops_, refs_ = rec.tensors, rec.ops, rec.refs
    stale = set(rec.stale)
    for i, r in enumerate(recs):  # tensors torch will not describe any more
        t = refs_[i]()
        if t is not None and i not in stale and not node_unsafe(t) and not readable(t):
            stale.add(i)
    t = None
    for i in range(len(recs)):
        r = recs[i]
        if i not in stale and not r[_REQUIRES_GRAD] and (r[_OP] is None or ops_[r[_OP]][_NAME] is None):
            t = refs_[i]()
            if t is not None and version_of(t) == r[_VERSION] and not node_unsafe(t) and t.grad_fn is not None:
                rec.adopted(t, i)
    t = None
    alive = []
    for i, r in enumerate(recs):
        t = refs_[i]()
        if t is not None and i not in stale and not node_unsafe(t):  # (such a view's node is reached from the others)
            fn = t.grad_fn
            if fn is not None:
                alive.append(fn)
    t = fn = None
    visited = rec.complete(alive)
    factory = rec.made
    factory_lines = rec.lines({i: m[1] for i, m in factory.items()})
    factory_lines.update(rec.factory_where)
    del alive
    flowed = _flowed_by_tensor(rec)
    saved = _saved_of(rec, visited)
    rec.name_from_models()  # (the models the noted inner frames held, walked once each)
    book = NameBook()
    try:
        book.add_explicit(names)
        book.add_module(module)
        param_scopes: dict[int, str | None] = {}
        if module is not None:
            for qualname, sub in module.named_modules():
                for p in sub.parameters(recurse=False):
                    param_scopes.setdefault(id(p), qualname or None)
        tensors: list[TensorNode] = []
        refs: dict[str, weakref.ref] = {}
        limit = rec.max_elements
        tnames = rec.tnames
        grad_names = None
        for i, r in enumerate(recs):
            tid = f"t{i}"
            t = None if i in stale else refs_[i]()
            scope = r[_SCOPE]
            op = r[_OP]
            detached = r[_DETACHED_FROM]
            name = tnames.get(i) or rec.inner_names.get(i)
            if t is None and i in stale:
                obj = refs_[i]()  # an older version of a live tensor: the same name as its latest
                given = book.name_of(obj) if obj is not None else None
                if given is None and name is None and obj is not None:
                    latest = rec.index_of(obj)
                    given = tnames.get(latest) or rec.inner_names.get(latest) if latest is not None else None
                name = given or name
                obj = None
            if name is None and not r[_REQUIRES_GRAD]:
                obj = refs_[i]()
                if obj is not None:
                    if grad_names is None:
                        grad_names = _grad_names(recs, refs_, tnames, book)
                    hit = grad_names.get(id(obj))
                    name = hit[1] if hit is not None and hit[0]() is obj else None
                obj = None
            m = factory.get(i)
            where = factory_lines.get(i, (None, None))
            extra = dict(
                made_by=None if m is None else m[0], line=where[0], code=where[1],
                op=None if op is None else f"op{op}",
                flowed=flowed.get(i, _NO_FLOW),
                detached_from=None if detached is None else f"t{detached}",
                region=r[_REGION],
            )
            if t is not None:
                name = book.name_of(t) or name
                if scope is None and param_scopes:
                    scope = param_scopes.get(id(t))
                node = tensor_node(t, tid, name, output_nr=r[_OUTPUT_NR], max_elements=limit, scope=scope, **extra)
                made = r[_HEAD]
                if made is not None and (r[_VERSION] != node.version or (node.value is not None and made[3] != node.value.head)):
                    # Changed since it was used (in place through an alias: d = t.detach(); d += 1, or t.data):
                    # the record shows the value the ops that used it saw, at the version they saw.
                    node = node._replace(value=make_summary(made), version=r[_VERSION])
                refs[tid] = refs_[i]
            else:
                made = r[_HEAD]
                node = TensorNode(
                    tid, name, plain_shape(r[_SHAPE]), dtype_name(r[_DTYPE]), str(r[_DEVICE]), r[_IS_LEAF],
                    r[_REQUIRES_GRAD], version=r[_VERSION], is_view=r[_IS_VIEW], output_nr=r[_OUTPUT_NR],
                    is_parameter=r[_IS_PARAM], value=None if made is None else make_summary(made), scope=scope, **extra,
                )
            tensors.append(node)
        t = None
    finally:
        book.close()
    lines = rec.lines({j: o[_LASTI] for j, o in enumerate(ops_)})
    own = rec.where_lines()
    # (a call that keeps a line of its own, in a function the block called, keeps the block's line that called it too)
    block_lines = {j: lines[j][0] for j, w in own.items() if j in lines and lines[j][0] != w[0]}
    lines.update(own)
    ops = [
        OpNode(
            f"op{j}", o[_NAME], o[_FORWARD], saved.get(j, ()),
            None if o[_VAR] is None else f"t{o[_VAR]}",
            o[_OREGION],
            o[_OSCOPE] if o[_VAR] is None else tensors[o[_VAR]].scope,
            *lines.get(j, (None, None)),
            rec.autocast.get(j),
            rec.assigned.get(j),
            block_lines.get(j),
        )
        for j, o in enumerate(ops_)
    ]
    edges: list[Edge] = []
    onext = rec.onext
    for j in range(len(ops)):
        for input_nr, k, output_nr in onext.get(j, ()):
            edges.append(Edge(f"op{j}", f"op{k}", "next", input_nr, output_nr))
    called: set[int] = set()
    for j in rec.calls:
        if j in called:
            continue
        called.add(j)
        for input_nr, i in enumerate(ops_[j][_INS] or ()):
            edges.append(Edge(f"t{i}", f"op{j}", "input", input_nr, 0))
    for i, r in enumerate(recs):
        if r[_OP] is not None:
            edges.append(Edge(f"op{r[_OP]}", f"t{i}", "output", 0, r[_OUTPUT_NR]))
        if r[_DETACHED_FROM] is not None:
            edges.append(Edge(f"t{r[_DETACHED_FROM]}", f"t{i}", "detach"))
    roots = [f"t{i}" for i in rec.roots]
    if not roots:
        consumed = {e.src for e in edges if e.kind in ("input", "detach")}
        roots = [t.id for t in tensors if t.id not in consumed and t.op is not None]
    notes = {f"t{i}": tuple(hook_note(n, code) for n, code in where) for i, where in rec.hook_lines.items()}
    if rec.alias_writes:
        _alias_notes(rec, tensors, ops, notes)
    return Graph(tensors, ops, edges, roots, source="trace", refs=refs, notes=notes)


def _alias_notes(rec: Any, tensors: list, ops: list, notes: dict) -> None:
    """Notes for the in-place writes through a ``detach()`` alias the trace saw (see
    :meth:`~graphlens._live.writes.WriteNotes.note_alias_write`): at the op that wrote, the
    tensor it changed too; at the record of that tensor made for its changed value, the op
    and the alias that changed it (the diagram draws that record as the output of the op
    whose backward node it still has, which did not make this value)."""
    def name(i: int) -> str:
        return tensors[i].name or f"an unnamed tensor ({tensors[i].id})"

    for op, src, alias in rec.alias_writes:
        text = ALIAS_OP_NOTE.format(source=name(src), alias=name(alias))
        notes[f"op{op}"] = (*notes.get(f"op{op}", ()), text)
    for k, w in sorted(rec.written_by.items()):
        op, src, alias = rec.alias_writes[w]
        o = ops[op]
        where = f" (line {o.line})" if o.line is not None else ""
        text = ALIAS_TENSOR_NOTE.format(op=o.forward or o.name or "an op", where=where, alias=name(alias), source=name(src))
        notes[f"t{k}"] = (*notes.get(f"t{k}", ()), text)


#: The note at an in-place op that wrote through a detach() alias, and at the changed tensor's new record.
ALIAS_OP_NOTE = "also changes {source} in place: {alias} is a detach() of it, sharing its memory and version counter"
ALIAS_TENSOR_NOTE = "changed in place by {op}{where} on {alias}, a detach() of {source} sharing its memory"


#: The note a tensor with a gradient hook gets (read back by graphlens.explain).
HOOK_NOTE = "a gradient hook registered at line {line}: {code}"


def hook_note(line: int, code: str | None) -> str:
    return HOOK_NOTE.format(line=line, code=code or "?")

