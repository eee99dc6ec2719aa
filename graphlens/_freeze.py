"""Turning a trace's records into a Graph: numbers become Summary values, indexes become ids."""

from __future__ import annotations

import weakref
from typing import Any, Mapping

import torch

from ._facts import dtype_name, make_summary, plain_shape, tensor_node, version_of
from ._recorder import (
    _DETACHED_FROM, _DEVICE, _DTYPE, _IS_LEAF, _IS_PARAM, _IS_VIEW, _OP, _OUTPUT_NR, _REGION, _REQUIRES_GRAD,
    _SCOPE, _SHAPE, _VERSION, Recorder, readable,
)
from ._util import paused_gc
from .graph import Edge, Graph, OpNode, TensorNode
from .names import NameBook

__all__ = ["freeze"]


def freeze(rec: Recorder, *, names: Mapping[str, Any] | None, module: torch.nn.Module | None) -> Graph:
    """The graph of everything ``rec`` recorded, with the live tensors read as they are now."""
    with paused_gc():  # freezing makes several small objects per record
        return _freeze(rec, names, module)


def _flowed_by_tensor(rec: Recorder) -> dict[int, list]:
    """What flowed into each tensor, one Summary per backward pass (None: nothing)."""
    out: dict[int, list] = {}
    for i, pass_nr, head in rec.flowed:
        seen = out.get(i)
        if seen is None:
            seen = out[i] = []
        while len(seen) < pass_nr:
            seen.append(None)
        seen.append(None if head is None else make_summary(head))
    for seen in out.values():
        seen.extend([None] * (rec.passes - len(seen)))
    return out


def _freeze(rec: Recorder, names, module) -> Graph:
    refs_, facts_, oname = rec.refs, rec.facts, rec.oname
    stale = set(rec.stale)
    for i, ref in enumerate(refs_):  # tensors torch will not describe any more
        t = ref()
        if t is not None and i not in stale and not readable(t):
            stale.add(i)
    t = None
    for i in range(len(refs_)):
        f = facts_[i]
        if i not in stale and not f[_REQUIRES_GRAD] and (f[_OP] is None or oname[f[_OP]] is None):
            t = refs_[i]()
            if t is not None and version_of(t) == f[_VERSION] and t.grad_fn is not None:
                rec.adopted(t, i)
    t = None
    alive = []
    for i, ref in enumerate(refs_):
        t = ref()
        if t is not None and i not in stale:
            fn = t.grad_fn
            if fn is not None:
                alive.append(fn)
    t = fn = None
    rec.revisit(alive)
    del alive
    flowed = _flowed_by_tensor(rec)
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
        for i, (ref, f, name) in enumerate(zip(refs_, facts_, rec.tnames)):
            tid = f"t{i}"
            t = None if i in stale else ref()
            scope = f[_SCOPE]
            op = f[_OP]
            detached = f[_DETACHED_FROM]
            extra = dict(
                op=None if op is None else f"op{op}",
                flowed=tuple(flowed.get(i, ())),
                detached_from=None if detached is None else f"t{detached}",
                region=f[_REGION],
            )
            if t is not None:
                name = book.name_of(t) or name
                if scope is None and param_scopes:
                    scope = param_scopes.get(id(t))
                node = tensor_node(t, tid, name, output_nr=f[_OUTPUT_NR], max_elements=limit, scope=scope, **extra)
                refs[tid] = ref
            else:
                made = rec.values.get(i)
                node = TensorNode(
                    tid, name, plain_shape(f[_SHAPE]), dtype_name(f[_DTYPE]), str(f[_DEVICE]), f[_IS_LEAF], f[_REQUIRES_GRAD],
                    version=f[_VERSION], is_view=f[_IS_VIEW], output_nr=f[_OUTPUT_NR], is_parameter=f[_IS_PARAM],
                    value=None if made is None else make_summary(made), scope=scope, **extra,
                )
            tensors.append(node)
        t = None
    finally:
        book.close()
    osaved = rec.osaved
    ops = [
        OpNode(
            f"op{j}", name, forward, osaved.get(j, ()),
            None if var is None else f"t{var}",
            region,
            scope if var is None else tensors[var].scope,
        )
        for j, (name, var, (forward, region, scope)) in enumerate(zip(oname, rec.ovar, rec.owhere))
    ]
    edges: list[Edge] = []
    onext = rec.onext
    for j in range(len(ops)):
        for input_nr, k, output_nr in onext.get(j, ()):
            edges.append(Edge(f"op{j}", f"op{k}", "next", input_nr, output_nr))
    for j, in_ids in rec.inputs:
        for input_nr, i in enumerate(in_ids):
            edges.append(Edge(f"t{i}", f"op{j}", "input", input_nr, 0))
    for i, f in enumerate(facts_):
        if f[_OP] is not None:
            edges.append(Edge(f"op{f[_OP]}", f"t{i}", "output", 0, f[_OUTPUT_NR]))
        if f[_DETACHED_FROM] is not None:
            edges.append(Edge(f"t{f[_DETACHED_FROM]}", f"t{i}", "detach"))
    roots = [f"t{i}" for i in rec.roots]
    if not roots:
        consumed = {e.src for e in edges if e.kind in ("input", "detach")}
        roots = [t.id for t in tensors if t.id not in consumed and t.op is not None]
    return Graph(tensors, ops, edges, roots, source="trace", refs=refs)
