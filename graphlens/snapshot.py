"""Snapshot of the live autograd graph: an iterative walk of ``grad_fn.next_functions``."""

from __future__ import annotations

import weakref
from functools import partial
from itertools import accumulate, chain, compress, repeat
from operator import is_not, itemgetter, not_
from typing import Any, Mapping

import torch

from ._checks import check_count, check_optional_flag
from ._live.guard import quiet
from ._live.capture import saved_entry
from ._live.facts import MAX_ELEMENTS, StorageBook, check_roots, same_data, tensor_node
from ._live.saved_columns import saved_rows_of_all
from ._live.safety import KEEP_MIN_NODES, keep_walked
from ._util import paused_gc
from .graph import Edge, Graph, OpNode, TensorNode
from .names import NameBook, user_frame

__all__ = ["snapshot"]


def snapshot(
    *roots: Any,
    names: Mapping[str, Any] | None = None,
    module: torch.nn.Module | None = None,
    saved: bool | None = None,
    max_elements: int = MAX_ELEMENTS,
) -> Graph:
    """Walk the graph PyTorch recorded behind ``roots`` and return it as a :class:`Graph`.

    ``roots`` are tensors, or tuples/lists/dicts of tensors as models return.  Tensors
    are named after ``names`` (``{"w": w}``), then the parameter names of ``module``,
    then the caller's variables.  The walk is iterative, so a 100,000-op chain is fine,
    and it works after backward freed the saved tensors (their entries say :data:`~graphlens.graph.FREED`).
    ``saved`` summarises each op's saved attributes; the default (``None``) does so for
    graphs of up to 5,000 nodes, where a diagram can still show them.
    The graph holds no tensor: only records and weak references.

    >>> import torch, graphlens as gl
    >>> w = torch.tensor([1.0, 2.0], requires_grad=True)
    >>> loss = (w * 3).sum()
    >>> g = gl.snapshot(loss)
    >>> [op.name for op in g.ops]
    ['SumBackward0', 'MulBackward0', 'AccumulateGrad']
    >>> g.find("w").is_leaf, g.find("loss").is_leaf
    (True, False)
    """
    pairs = check_roots("snapshot", roots)
    check_optional_flag("saved", saved)
    check_count("max_elements", max_elements)
    book = NameBook()
    try:
        with quiet():  # (naming reads grad_fn and output_nr: a user's mode or subclass must not see it)
            book.add_explicit(names)
            book.add_module(module)
            book.add_frame(user_frame(1))
        return _walk(pairs, book, saved=saved, max_elements=max_elements)
    finally:
        book.close()


_first, _second = itemgetter(0), itemgetter(1)


def _resolve(near: list, refs: dict, by_id: dict, value: torch.Tensor, _name: str) -> str | None:
    """The tensor node a saved tensor is: one of the op's own inputs and outputs holding
    the same data, else any recorded tensor that is the very same object."""
    for tid in near:
        t = refs[tid]()
        if t is not None and same_data(t, value):
            return tid
    return by_id.get(id(value))

#: With ``saved=None``, saved attributes are summarised for graphs up to this many nodes.
SAVED_AUTO_LIMIT = 5_000


def _walk(pairs: list, book: NameBook, *, saved: bool | None, max_elements: int) -> Graph:
    # The walk makes many small objects (torch alone holds ~200k tracked ones); reading
    # values must not be recorded by an enclosing trace (or a user's TorchFunctionMode).
    with paused_gc(), quiet():
        return _walk_paused(pairs, book, saved=saved, max_elements=max_elements)


def _walk_paused(pairs: list, book: NameBook, *, saved: bool | None, max_elements: int) -> Graph:
    # 1. Iterative pre-order walk; op ids follow the order nodes are first reached.  Every
    #    (node, output_nr) pair of next_functions is pushed as it is (one C-level extend)
    #    and the ones already seen are skipped when popped: the same order as checking
    #    before pushing, with less Python work per edge.
    index: dict[Any, int] = {}  # node -> op index; insertion order is walk order
    nexts: list[tuple] = []
    stack: list = [(t.grad_fn, 0) for _, t in reversed(pairs)]
    pop, push, record = stack.pop, stack.extend, nexts.append
    while stack:
        fn = pop()[0]
        if fn is None or fn in index:
            continue
        index[fn] = len(index)
        nf = fn.next_functions
        record(nf)
        push(reversed(nf))
    del stack, pop, push, record
    fns = list(index)
    if len(fns) >= KEEP_MIN_NODES:  # freeing the graph must stay safe (see graphlens._live.safety)
        keep_walked(fns, nexts)

    # 2. Per op only plain data is kept: its class, its next_functions as parallel lists
    #    (child count, child op index or None, output_nr), built with C-level maps.
    types = list(map(type, fns))
    counts = list(map(len, nexts))
    child_ops = list(map(index.get, map(_first, chain.from_iterable(nexts))))  # None for a None input
    child_nrs = list(map(_second, chain.from_iterable(nexts)))
    del nexts

    # 3. Tensor nodes: the roots first, then leaves and named non-leaves in walk order.
    tensors: list[TensorNode] = []
    refs: dict[str, weakref.ref] = {}
    by_id: dict[int, str] = {}  # id(tensor) -> tensor node id (the tensors are alive here)
    by_output: dict[tuple[int, int], str] = {}  # (op index, output_nr) -> tensor node id

    def add(t: torch.Tensor, name: str | None = None) -> str:
        tid = by_id.get(id(t))
        if tid is None:
            tid = f"t{len(tensors)}"
            by_id[id(t)] = tid
            fn = t.grad_fn
            op = None if fn is None else f"op{index[fn]}"
            if fn is not None:
                by_output.setdefault((index[fn], t.output_nr), tid)
            tensors.append(tensor_node(t, tid, name or book.name_of(t), op=op, max_elements=max_elements))
            refs[tid] = weakref.ref(t)
        return tid

    root_ids: list[str] = []
    for _, t in pairs:
        tid = add(t)
        if tid not in root_ids:
            root_ids.append(tid)

    type_names = {cls: cls.__name__ for cls in set(types)}
    acc = {cls for cls, name in type_names.items() if name == "AccumulateGrad"}
    variables: dict[int, str] = {}
    named = book.outputs_by_node()
    special = [i for i in compress(range(len(counts)), map(not_, counts)) if types[i] in acc] if acc else []
    if named:
        special.extend(i for i in (index.get(fn) for fn in named) if i is not None and types[i] not in acc)
        special.sort()
    for i in special:
        fn = fns[i]
        if types[i] in acc:
            variables[i] = add(fn.variable)
        else:
            for _, name, t in book.named_outputs(fn):
                add(t, name)
    if saved is None:
        saved = len(fns) <= SAVED_AUTO_LIMIT
    saved_of = []
    if saved:
        outputs_of: dict[int, list[str]] = {}
        for (i, _nr), tid in by_output.items():
            outputs_of.setdefault(i, []).append(tid)
        starts = list(accumulate(counts, initial=0))
        book = StorageBook(weak=False)  # (every saved tensor is alive during the walk: a storage's address names it)
        def resolve(i: int, value: torch.Tensor, name: str) -> str | None:
            near = list(outputs_of.get(i, ()))  # (an op's tensors near are listed only when it saved a tensor)
            for k in range(starts[i], starts[i + 1]):
                c = child_ops[k]
                if c is not None:
                    tid = variables.get(c) or by_output.get((c, child_nrs[k]))
                    if tid is not None:
                        near.append(tid)
            return _resolve(near, refs, by_id, value, name)

        saved_of = saved_rows_of_all(fns, resolve, book=book)  # (entries made in build_ops)
        del resolve
    fn = None  # no node may outlive the walk in a local the closures could see
    del fns, index, special

    n_ops = len(types)
    op_ids: list[str] = []  # ("op0", "op1", ...: made once, for the ops and the edges)

    def ids() -> list[str]:
        if not op_ids:
            op_ids.extend(map("op".__add__, map(str, range(n_ops))))
        return op_ids

    def make_ops(entries: bool) -> list[OpNode]:
        # (each OpNode made by tuple.__new__ with every field, column by column: the record OpNode(...) makes, faster)
        names = map(type_names.__getitem__, types)
        held = map(variables.get, range(n_ops)) if variables else repeat(None)
        if entries and saved_of:
            kept: Any = (tuple(map(saved_entry, rows)) for rows in saved_of)
        else:
            kept = repeat(())
        rest = [repeat(None)] * (len(OpNode._fields) - 5)
        return list(map(partial(tuple.__new__, OpNode), zip(ids(), names, repeat(None), kept, held, *rest)))

    # A picture that shows no saved value draws from ops built without their entries
    # (Graph._without_saved): the rows above are read now, their records made when shown.
    build_ops = partial(make_ops, True)
    build_ops.bare = partial(make_ops, False)  # type: ignore[attr-defined]

    def build_edges() -> list[Edge]:
        # (each Edge made by tuple.__new__ with every field, column by column: the record Edge(...) makes, faster)
        names = ids()
        real = list(map(is_not, child_ops, repeat(None)))  # (an input with no node: no edge)
        srcs = list(compress(chain.from_iterable(map(repeat, range(n_ops), counts)), real))
        input_nrs = list(compress(chain.from_iterable(map(range, counts)), real))
        dsts = list(compress(child_ops, real))
        nrs = list(compress(child_nrs, real))
        src_ids = list(map(names.__getitem__, srcs))
        new = partial(tuple.__new__, Edge)
        edges = list(map(new, zip(src_ids, map(names.__getitem__, dsts), repeat("next"), input_nrs, nrs)))
        # Forward edges between the known tensors and ops, for the data view.
        edges.extend(new((t.op, t.id, "output", 0, t.output_nr)) for t in tensors if t.op is not None)
        if variables or by_output:
            made = list(map(by_output.get, zip(dsts, nrs)))
            if variables:
                made = [v or m for v, m in zip(map(variables.get, dsts), made)]
            known = list(map(is_not, made, repeat(None)))
            edges.extend(map(new, zip(compress(made, known), compress(src_ids, known), repeat("input"), compress(input_nrs, known), repeat(0))))
        return edges

    return Graph(tensors, build_ops, build_edges, root_ids, source="snapshot", refs=refs)
