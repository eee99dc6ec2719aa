"""Questions asked of live tensors: their record in a graph, whether a backward graph reaches them."""

from __future__ import annotations

import weakref

import torch

from .._live.safety import KEEP_MIN_NODES, keep_children

from ..graph import Graph
from ..snapshot import snapshot

__all__ = ["INTEGER_DTYPES", "find_live", "reaches", "shares_memory", "snapshot_for", "named_after", "is_inference", "INFERENCE_LIBRARY_FIX"]

#: The dtypes that can never require grad.
INTEGER_DTYPES = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def find_live(g: Graph, t: torch.Tensor) -> str | None:
    """The id of the graph's latest record of the live tensor ``t``, or ``None``."""
    found = None
    for node in g.tensors:
        if g.tensor(node.id) is t:
            found = node.id  # the latest record of the tensor wins
    return found


#: The end of every fix for a tensor made under inference mode: where the mode is a library's.
INFERENCE_LIBRARY_FIX = (" Where a library runs the code under inference mode (a trainer's validation or test loop), switch it "
                         "off there, e.g. Lightning's Trainer(inference_mode=False): it then uses torch.no_grad(), which a "
                         "torch.enable_grad() inside the step does switch off (inference mode it does not).")


def is_inference(t: torch.Tensor) -> bool:
    """Whether ``t`` was made under ``torch.inference_mode()`` (False where a wrapper cannot say)."""
    try:
        return bool(t.is_inference())
    except Exception:  # noqa: BLE001 - a subclass or wrapper that cannot say
        return False


def reaches(starts: list, target: torch.Tensor, *, limit: int = 500_000) -> bool:
    """Whether the live backward graph below ``starts`` reaches ``target``."""
    goal = target.grad_fn
    seen = set()
    stack = [fn for fn in starts if fn is not None]
    while stack and len(seen) < limit:
        fn = stack.pop()
        if fn in seen:
            continue
        seen.add(fn)
        if goal is not None and fn is goal:
            return True
        if goal is None and type(fn).__name__ == "AccumulateGrad" and fn.variable is target:
            return True
        nexts = fn.next_functions if len(seen) < KEEP_MIN_NODES else keep_children(fn)
        for child, _ in nexts:
            if child is not None and child not in seen:
                stack.append(child)
    return False


def shares_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors use the same storage (as ``b = a.detach()`` does)."""
    try:
        pa, pb = a.untyped_storage().data_ptr(), b.untyped_storage().data_ptr()
    except Exception:  # noqa: BLE001 - odd tensors (meta, sparse) share nothing we can see
        return False
    return pa != 0 and pa == pb


def snapshot_for(roots: list[torch.Tensor], tensor: torch.Tensor, extra: list[torch.Tensor], *, names) -> Graph:
    """A snapshot of the roots, the tensor and ``extra`` tensors, whose roots are ``roots`` only."""
    all_roots = list(roots) + [tensor] + list(extra)
    g = snapshot(*all_roots, names=names)
    n_roots = len({id(r) for r in roots})
    root_ids = [r.id for r in g.roots][:n_roots]
    refs = {}
    for node in g.tensors:
        t = g.tensor(node.id)
        if t is not None:
            refs[node.id] = weakref.ref(t)
    return Graph(g.tensors, g.ops, g.edges, root_ids, source=g.source, refs=refs)


def named_after(g: Graph, candidates: list, *, paths: bool = False) -> Graph:
    """``g`` with the tensors it recorded without a name named after the caller's variables
    that hold them now (``candidates``: ``(name, tensor)`` pairs): a tensor made inside a
    function the traced block called, that the caller's frame holds, is named in the answer
    by its variable rather than as ``t37``.  With ``paths``, a parameter recorded under a
    plain variable's name (the ``param`` of ``for param in net.parameters()``) is named by
    its module path (``net.2.bias``) when a candidate holds it under one.  ``g`` itself when
    there is nothing to name."""
    names: dict[str, str] = {}
    taken = {n.name for n in g.tensors if n.name}
    for name, t in candidates:
        tid = find_live(g, t)
        if tid is None or name in taken or tid in names:
            continue
        node = g.node(tid)
        if node.name is not None and not (paths and node.is_parameter and "." in name and "." not in node.name):
            continue
        names[tid] = name
        taken.add(name)
    if not names:
        return g
    tensors = [n._replace(name=names[n.id]) if n.id in names else n for n in g.tensors]
    refs = {n.id: weakref.ref(t) for n in g.tensors if (t := g.tensor(n.id)) is not None}
    return Graph(tensors, g.ops, g.edges, [r.id for r in g.roots], source=g.source, refs=refs, notes=dict(g.notes))
