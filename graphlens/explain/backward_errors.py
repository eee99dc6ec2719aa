"""The two errors backward raises about saved tensors: a graph freed before, and a saved tensor changed in place."""

from __future__ import annotations

import linecache
import re
from typing import Any

import torch

from .._live.facts import dtype_name, read_saved
from .._live.guard import node_unsafe
from ..graph import FREED, MODIFIED, OpNode
from .carried import addend, cached_in_objects, cached_parametrizations, fed_back, inplace_in_forward, feed_line, in_loop, made_once, ran_in_failing_pass, running_total
from .context import TENSOR_TYPES, Context, as_code, root_graph, root_label
from .live import shares_memory
from .optim_errors import modified_parameter, stale_parameter
from .paths import PathView
from .types import Explanation

__all__ = ["graph_freed", "inplace_saved"]

#: Nodes a live walk looks at, at most (a freed graph of millions of nodes is still answered).
_WALK_LIMIT = 200_000


# -- backward through a freed graph ------------------------------------------------------------
class _Node:
    __slots__ = ("fn", "seq", "freed", "children", "parents")

    def __init__(self, fn: Any, seq: int, freed: list[str]) -> None:
        self.fn, self.seq, self.freed = fn, seq, freed
        self.children: list[int] = []
        self.parents: list[int] = []


def _walk(roots: list[torch.Tensor]) -> tuple[list[_Node], dict]:
    """The live graph below ``roots``: every node with its sequence number and the names
    of the saved tensors backward freed (never unpacking a hooked slot)."""
    nodes: list[_Node] = []
    index: dict = {}
    stack = [t.grad_fn for t in roots if t.grad_fn is not None]
    order: list = []
    while stack and len(index) < _WALK_LIMIT:
        fn = stack.pop()
        if fn in index:
            continue
        if type(fn).__name__ == "AccumulateGrad":
            index[fn] = -1
            continue
        entries, _ = read_saved(fn)
        freed = [e.name for e in entries if e.state is FREED]
        index[fn] = len(nodes)
        nodes.append(_Node(fn, fn._sequence_nr(), freed))
        order.append(fn)
        stack.extend(c for c, _ in fn.next_functions if c is not None and c not in index)
    for k, fn in enumerate(order):
        for c, _ in fn.next_functions:
            j = index.get(c, -1) if c is not None else -1
            if j >= 0:
                nodes[k].children.append(j)
                nodes[j].parents.append(k)
    del order
    return nodes, index


def _below(nodes: list[_Node], t: Any) -> list[_Node] | None:
    """The nodes of ``nodes`` at or below tensor ``t``'s backward node (None: it is not among them)."""
    fn = getattr(t, "grad_fn", None) if isinstance(t, torch.Tensor) else None
    start = [k for k, n in enumerate(nodes) if n.fn is fn] if fn is not None else []
    if not start:
        return None
    seen, stack = set(), start
    while stack:
        k = stack.pop()
        if k not in seen:
            seen.add(k)
            stack.extend(nodes[k].children)
    return [nodes[k] for k in sorted(seen)]


def _split(nodes: list[_Node], ctx: Context | None = None) -> int | None:
    """The sequence number from which the nodes are the new graph: a gap in the sequence
    numbers below which every node that saved tensors had them freed (the nodes the earlier
    pass built after the shared part are not in this graph, hence the gap).  Of those gaps,
    the one just above a node that a variable of the raising frame still holds and the
    new part uses (``s`` returned by the earlier step and fed to this one: the variable is
    the link), else the widest (the failing backward freed the new part's nodes it ran, and
    branches the loss does not use leave gaps, so a gap alone may lie inside the new part)."""
    seqs = sorted({n.seq for n in nodes})
    best, width = None, 1
    freed_below = True
    by_seq: dict[int, list[_Node]] = {}
    for n in nodes:
        by_seq.setdefault(n.seq, []).append(n)
    any_freed = False
    gaps: list[int] = []
    for a, b in zip(seqs, seqs[1:]):
        for n in by_seq[a]:
            if n.freed:
                any_freed = True
            elif _saves_tensors(n.fn):
                freed_below = False
        if freed_below and any_freed and b - a > 1:
            gaps.append(b)
            if b - a > width:
                best, width = b, b - a
    if ctx is not None and len(gaps) > 1:
        held = _held_split(nodes, gaps, ctx)
        if held is not None:
            return held
    return best


def _held_split(nodes: list[_Node], gaps: list[int], ctx: Context) -> int | None:
    """The gap of ``gaps`` just above the latest freed node that a variable of the raising
    frame holds and a later node uses (see :func:`_split`), or None."""
    by_fn = {id(n.fn): n for n in nodes}
    found = None
    for _name, t in ctx.candidates:
        try:
            fn = t.grad_fn
        except RuntimeError:
            continue
        n = by_fn.get(id(fn)) if fn is not None else None
        if n is None or not n.freed or not n.parents:
            continue
        above = [b for b in gaps if b > n.seq]
        if not above:
            continue
        b = above[0]
        if any(nodes[p].seq >= b for p in n.parents) and (found is None or n.seq > found[0]):
            found = (n.seq, b)
    return None if found is None else found[1]


def _traced_split(trace, nodes: list[_Node]) -> int | None:
    """The sequence number at which the backward call before the failing one began, from a
    trace that saw both (the nodes made before it are the part an earlier backward freed),
    when some node below it in this graph had its saved tensors freed; else None."""
    if trace is None:
        return None
    try:
        seq = trace._split_seq()
    except Exception:  # noqa: BLE001 - no trace records to read
        return None
    if seq is None or not any(n.seq < seq and n.freed for n in nodes) or not any(n.seq >= seq for n in nodes):
        return None
    return seq


def _saves_tensors(fn: Any) -> bool:
    return any(e.summary is not None or e.tensor is not None for e in read_saved(fn)[0])


def _carried(nodes: list[_Node], split: int, ctx: Context) -> tuple[str | None, bool, list[int], list[str]]:
    """``(name, shared, boundary, ties)``: the variable through which the new graph reaches the
    old part, and the other variables that reach it as closely (``ties``).  ``shared`` when the variable still holds the old tensor (``fake`` of a GAN:
    two losses backpropagate through it), else the variable was rebound to a new tensor
    computed from the old one (a hidden state carried from the previous iteration)."""
    boundary = [k for k, n in enumerate(nodes) if n.seq < split and any(nodes[p].seq >= split for p in n.parents)]
    if not boundary:
        return None, False, [], []
    fns = {id(nodes[k].fn): k for k in boundary}
    best: tuple | None = None
    ranks: list[tuple] = []
    for name, t in ctx.candidates:
        own = any(t is r for r in ctx.root)  # (the failing call's own output: named only when nothing else carries it)
        try:
            fn = t.grad_fn
        except RuntimeError:
            continue
        if fn is None:
            continue
        if id(fn) in fns:
            rank = (0, 0, 0, name)
            shared = True
        else:
            depth = _depth_to(fn, fns)
            if depth is None:
                continue
            attr = "." in name
            stateful = any(k in name.lower() for k in ("hidden", "state", "h_", "c_", "hx", "cx")) or name in ("h", "c")
            rank = (1 + own, 0 if attr or stateful else 1, depth, name)
            shared = False
        if best is None or rank < best[0]:
            best = (rank, name, shared)
        ranks.append((rank, name, shared))
    if best is None or not best[2]:
        cached = cached_in_objects(ctx, fns)  # (a module's or an object's own cache, set in an earlier call: self._cached)
        if cached is not None:
            return cached, True, boundary, []
    if best is None:
        return None, False, boundary, []
    # (other variables that reach the old part as closely, not through the same tensor: several
    # states carried at once, one per layer; detaching one of them would not be enough)
    ties = [n for r, n, sh in ranks if not sh and not best[2] and r[:3] == best[0][:3] and n != best[1]
            and not any(n.startswith(best[1] + s) or best[1].startswith(n + s) for s in ".[")]
    return best[1], best[2], boundary, list(dict.fromkeys(ties))


def _held(ctx: Context, var: str) -> list:
    """What the variable ``var`` holds in the raising and the asking frames (locals, then globals)."""
    from ..names import frame_objects_where

    out = []
    for frame in (ctx.frame, ctx.caller):
        if frame is not None:
            out += [o for n, o in frame_objects_where(frame, lambda v: True) if n == var]
    return out


def _not_tensor(ctx: Context, var: str) -> bool:
    return any(not isinstance(o, torch.Tensor) for o in _held(ctx, var))


def _graph_attribute(ctx: Context, var: str) -> str | None:
    """``dataset.feat``: the tensor with a graph that the object ``var`` of the frames keeps as an
    attribute (None when ``var`` is a tensor itself, or keeps none)."""
    for obj in _held(ctx, var):
        if isinstance(obj, torch.Tensor):
            continue
        for attr, t in list(getattr(obj, "__dict__", {}).items())[:64]:
            if isinstance(t, torch.Tensor) and not attr.startswith("_") and not node_unsafe(t) and t.grad_fn is not None:
                return f"{var}.{attr}"
    return None


def _depth_to(fn: Any, goals: dict, limit: int = 24) -> int | None:
    """Steps from node ``fn`` down ``next_functions`` to a node of ``goals`` (by id), within
    ``limit``: a tensor outside the failing graph (a hidden state returned beside the
    output) counts too."""
    frontier, seen, depth = [fn], {id(fn)}, 0
    while frontier and depth < limit:
        nxt = []
        for f in frontier:
            for c, _ in f.next_functions:
                if c is None or id(c) in seen:
                    continue
                if id(c) in goals:
                    return depth + 1
                seen.add(id(c))
                nxt.append(c)
        frontier, depth = nxt, depth + 1
    return None


def graph_freed(message, match, g, trace, ctx: Context) -> Explanation:
    gr = root_graph(g, ctx)
    root = root_label(gr, ctx)
    call = f"{root}.backward()" if root != "the output" else "backward()"
    if ctx.torch_called("grad") and ctx.inputs:  # (the failing call is torch.autograd.grad(pe, x))
        call = f"torch.autograd.grad({root}, ...)" if root != "the output" else "torch.autograd.grad()"
    sentences = [
        f"{call} went through a part of the graph a second time: an earlier backward already freed the "
        f"tensors that part saved for computing gradients."
    ]
    reasons = ["graph_freed"]
    name, shared = None, False
    fix = None
    total = running_total(ctx)
    nodes, _ = _walk(ctx.root) if ctx.root and total is None else ([], {})
    split = None
    if nodes:
        # (a trace knows when the backward before the failing one began: the nodes made before
        # it are the old part; else the widest gap in the sequence numbers is read as that point)
        split = _traced_split(trace, nodes)
        if split is None:
            split = _split(nodes, ctx)
    if total is not None:
        name, acc_line, acc_code, earlier = total
        reasons.append("carried_state")
        added = addend(acc_code, name)
        if earlier:
            held = (f"the graphs of the losses added before the earlier {name}.backward() at line {earlier[0]} "
                    f"({earlier[1]}), which that backward freed")
        else:
            held = (f"the graphs of the losses of the earlier iterations, which this same line freed when it ran in "
                    f"those iterations (the total is started before the loop, not in it)")
        sentences.append(
            f"{name} is a running total: line {acc_line} ({acc_code}) adds each new loss to it, so {name} still holds "
            f"{held}; {call} goes back through them again."
        )
        fix = (
            f"Start {name} afresh for each backward ({name} = 0 before the losses that backward is for), so that it "
            f"holds only the new losses; if {name} is a running total to print or log, add numbers instead: "
            f"{name} += {added}.item() (or {added}.detach())."
        )
        split = -1  # (no listing of freed nodes: which pass freed which is not known without a trace)
    elif split is not None:
        name, shared, boundary, ties = _carried(nodes, split, ctx)
        old = [n for n in nodes if n.seq < split and n.freed]
        if name and shared:  # (what is listed is the part below that tensor: what a split read from gaps put above it is not)
            below = _below(nodes, next((t for n_, t in ctx.candidates if n_ == name), None))
            old = [n for n in old if below is None or n in below] or old
        shown = [f"{type(n.fn).__name__} ({', '.join(n.freed)})" for n in sorted(old, key=lambda n: -n.seq)[:4]]
        more = f" and {len(old) - 4} more" if len(old) > 4 else ""
        sentences.append(
            f"The part built before that backward is reached through {name or 'a tensor of the earlier graph'}; "
            f"its nodes' saved tensors are freed: {', '.join(shown)}{more}."
        )
        cached = cached_parametrizations(ctx)
        if cached is not None:  # (the parametrized weights, computed once inside the cache: every step reuses their graph)
            reasons.append("graph_built_once")
            sentences.append(
                f"Line {cached[0]} ({cached[1]}) opens torch.nn.utils.parametrize.cached() around the loop: inside it "
                f"each parametrized weight is computed once, at its first use, with that step's graph, and every later "
                f"step reuses it; the first backward freed that graph, so the next one fails there."
            )
            fix = ("Open parametrize.cached() inside the loop, around one step's forward and backward (or leave it out: "
                   "it only saves recomputing the parametrization), so that each step computes the weights afresh.")
        elif name and shared:
            sentences.append(
                f"{name} is used by two backward passes: the first one freed the graph below {name}, and {call} needs it again."
            )
            item = re.fullmatch(r"([A-Za-z_][\w.]*)\[\d+\]", name)  # (one tensor of a returned state: s[0] of (v, i))
            owner, _, attr = name.rpartition(".")
            if owner and attr.startswith("_"):  # (an object's cache: the earlier call stored it, later calls reuse it)
                sentences.append(
                    f"{name} is a tensor {owner} keeps between calls (a cache it filled in an earlier call, with that "
                    f"call's graph): each later call reuses it, so every later backward goes back into the graph the "
                    f"first backward freed."
                )
                fix = (
                    f"Do not reuse {name} across backward calls: turn {owner}'s caching off (recompute it in every call; "
                    f"a torch.distributions transform: build it with cache_size=0) when it depends on tensors that require "
                    f"grad, or store it detached if no gradient should flow through it; keeping the graph would only grow "
                    f"it step after step."
                )
            elif item:
                whole = item.group(1)
                fix = (
                    f"If the later step needs only the values of {whole} (a state returned by the earlier step), detach "
                    f"every tensor of it before it is used again ({whole} = tuple(t.detach() for t in {whole}), through its "
                    f"own class for a named tuple); else add the losses and call backward once, or pass retain_graph=True "
                    f"to the first backward."
                )
            else:
                fix = (
                    f"If one of the losses needs only the value of {name}, give it {name}.detach() (as a GAN's "
                    f"discriminator step does with netD(fake.detach())); else add the losses and call backward once, or "
                    f"pass retain_graph=True to the first backward."
                )
        elif name:
            fed = fed_back(ctx, name)
            once = made_once(trace, nodes, split) if fed is not True else None
            if once is not None:  # (a trace saw the old part made once, by a line no later step ran again)
                reasons.append("graph_built_once")
                line, code, lhs = once
                sentences.append(
                    f"{name} links to the graph made at line {line} ({code}), which ran once, before the earlier "
                    f"backward: that backward freed it, and every later step's loss, through {name}, goes back into it."
                )
                inner = _graph_attribute(ctx, lhs) if lhs else None  # (an object, a dataset: the tensor it keeps)
                held = (f"{inner} = {inner}.detach()" if inner else f"{lhs} = {lhs}.detach()" if lhs and not _not_tensor(ctx, lhs)
                        else f"{name} = {name}.detach()")
                fix = (
                    f"Make that tensor without a graph where it is made once (under torch.no_grad(), or {held} right "
                    f"after it), or compute it inside the loop, for each step, if its parameters should learn."
                )
            elif fed is False:  # (the code never feeds name back from one iteration to the next)
                sentences.append(
                    f"{name} links to a part of the graph built before the earlier backward, which freed it. The loop "
                    f"does not feed {name} back from one iteration to the next, so that part is probably a tensor "
                    f"computed once, before the loop, with grad on (a dataset passed through a layer): if so, every "
                    f"step's loss goes back into its one graph. graphlens.trace() shows where that part was made."
                )
                fix = (
                    f"Make the tensors {name} comes from without a graph where they are made (under torch.no_grad(), "
                    f"or .detach() them), or compute them inside the loop; {name} = {name}.detach() before it is used "
                    f"cuts the link too."
                )
            else:
                reasons.append("carried_state")
                where = feed_line(ctx, name)
                element = re.fullmatch(r"(.+\..+)\[\d+\]", name)  # one tensor of a state kept as a tuple (h, c)
                if element:  # (the whole tuple is cut at once: its other elements are no further ties)
                    name = element.group(1)
                    ties = [t for t in ties if not (t.startswith(name + "[") or t.startswith(name + "."))]
                if in_loop(ctx) is False:  # (no loop around the failing line: no "previous iteration")
                    sentences.append(
                        f"{name} carries a tensor made before the earlier backward into this step: its graph still links "
                        f"to the graph that backward freed."
                    )
                else:
                    sentences.append(
                        f"{name} carries a tensor from the previous iteration into this one: its graph still links to that "
                        f"iteration's graph, whose backward freed it."
                    )
                if ties:
                    sentences.append(f"So {'does' if len(ties) == 1 else 'do'} {', '.join(ties)}: every carried state "
                                     f"links to the old graph, and each must be cut.")
                if where:
                    sentences.append(f"It is fed back in at line {where[0]}: {where[1]}.")
                code = as_code(name)  # (model.1.v_mem is model[1].v_mem in Python)
                cut = f"{code} = tuple(h.detach() for h in {code})" if element else f"{code} = {code}.detach()"
                cuts = [cut] + [f"{as_code(t)} = {as_code(t)}.detach()" for t in ties]
                fix = (
                    f"Cut the carried tensor{'s' if ties else ''} from the old graph at the start (or end) of each "
                    f"iteration: {'; '.join(cuts)}"
                    + ("" if element or ties else " (for an LSTM, detach both h and c)") + "."
                    + (" If the batches are independent, reset the states instead at the start of each one with new "
                       "tensors (as a module's reset or init_hidden does), so nothing is carried: a reset in place "
                       "(state.zero_()) keeps the tensor's history." if ties or "." in name else "")
                )
    del nodes
    path: list[str] = []
    if split is None and gr is not None:
        # One graph, backpropagated before (the same loss twice): what it freed.
        view = PathView(gr)
        freed_ops = [o for o in gr.ops if any(e.state is FREED for e in o.saved)]
        ran = ran_in_failing_pass(trace)
        if ran is not None:  # a trace saw which nodes the failing call itself ran (and freed) before it stopped
            freed_ops = [o for o in freed_ops if o.id not in ran]

        def describe(o: OpNode) -> str:
            made = [view.t(t).name for t in view.adj.outputs.get(o.id, ()) if view.t(t).name]
            what = ", ".join(e.name for e in o.saved if e.state is FREED)
            return o.label + (f" (made {made[0]}; saved {what})" if made else f" (saved {what})")

        if freed_ops:
            more = f" and {len(freed_ops) - 4} more" if len(freed_ops) > 4 else ""
            head = "Freed by an earlier backward" if ran is not None else "Nodes of this graph whose saved tensors are freed now"
            sentences.append(f"{head}: {', '.join(describe(o) for o in freed_ops[:4])}{more}.")
            path = [r.id for r in gr.roots] + [o.id for o in freed_ops]
            for o in freed_ops:
                path.extend(view.adj.outputs.get(o.id, ()))
    if fix is None:
        fix = (
            "Recompute the forward pass before each backward (the usual training loop), add the losses and call "
            "backward once, or pass retain_graph=True to the first backward if you really need two passes. "
            "In a loop, a tensor carried over from the previous iteration (a hidden state, a running total) "
            "also links to the old graph: detach() it at the end of each iteration."
        )
    where = feed_line(ctx, name) if "carried_state" in reasons and total is None else (total[1:3] if total else None)
    return Explanation(
        reasons, sentences, fix=fix, graph=gr, message=message, path=[p for p in path if gr is not None and p in gr],
        tensor_name=name or (root if root != "the output" else None),
        line=where[1] if where else None, lineno=where[0] if where else None,
    )


# -- a saved tensor changed in place -----------------------------------------------------------
_INPLACE_NAMES = ("add_", "sub_", "mul_", "div_", "copy_", "__setitem__", "relu_", "zero_", "fill_")


def _changes_in_place(view: PathView, op_id: str, tid: str) -> bool:
    """Whether op ``op_id`` changed tensor ``tid`` in place: by its name (``add_``,
    ``__setitem__``), or because it made a newer version of that very tensor (a trace keeps
    one record per version, with the same name: ``F.relu(x, inplace=True)``)."""
    op = view.o(op_id)
    f = op.forward or ""
    if f.endswith("_") and not f.startswith("__") or f in ("__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__"):
        return True
    t = view.t(tid)
    return t.version >= 0 and any(
        o.version > t.version and o.shape == t.shape and o.dtype == t.dtype
        for o in (view.t(x) for x in view.adj.outputs.get(op_id, ()))
    )


def _modifier_lead(ctx: Context, name: str | None) -> tuple[int | None, str | None]:
    """The last line before the failing one, in the failing function, that changes ``name``
    in place (``x += ...``, ``x[i] = ...``, ``x.add_(...)``): a lead read from code."""
    if ctx.frame is None or not name or not ctx.lineno or not re.fullmatch(r"[A-Za-z_][\w.]*", name):
        return None, None
    code = ctx.frame.f_code
    pattern = re.compile(
        rf"(?<![\w.]){re.escape(name)}\s*(?:[-+*/]=|\[[^\]]*\]\s*=(?!=)|\.\w+_\()"
    )
    lines = linecache.getlines(code.co_filename)
    for ln in range(min(ctx.lineno, len(lines)) - 1, code.co_firstlineno - 1, -1):
        text = lines[ln - 1]
        if pattern.search(text):
            return ln, text.strip()
    return None, None


def inplace_saved(message, match, g, trace, ctx: Context) -> Explanation:
    ttype = match.group("type").split(".")[-1]
    dtype = TENSOR_TYPES.get(ttype, ttype)
    shape = tuple(int(s) for s in match.group("shape").replace(" ", "").split(",") if s)
    producer = match.group("op")
    producer = producer.split("::")[-1] if producer else None
    ver, exp = int(match.group("ver")), int(match.group("exp"))
    gr = root_graph(g, ctx)
    view = PathView(gr) if gr is not None else None
    name = tid = None
    savers: list[OpNode] = []
    modifier: OpNode | None = None
    alias = ""
    path: list[str] = []
    if gr is not None:
        for o in gr.ops:
            for e in o.saved:
                if e.state is MODIFIED and (e.summary is None or (e.summary.dtype == dtype and tuple(e.summary.shape) == shape)):
                    savers.append(o)
                    tid = tid or e.tensor
                    break
    change = modified_parameter(ctx, shape, dtype, ver, producer)
    if change is not None:  # a leaf that requires grad: only a change under no_grad (a step()) can have done it
        return stale_parameter(message, gr, ctx, change, savers, shape, ver, exp, changes_in_place=_changes_in_place,
                               lead=_modifier_lead(ctx, change.name))
    if view is not None and tid is not None:
        node = view.t(tid)
        name = node.name or next((t.name for t in gr.tensors if t.name and t.op and t.op == node.op), None)
        later = [c for c in view.adj.consumers.get(tid, ()) if _changes_in_place(view, c, tid)]
        dets = view.adj.detached.get(tid, ())
        via = [(d, c) for d in dets for c in view.adj.consumers.get(d, ()) if _changes_in_place(view, c, d)]
        if later:
            modifier = view.o(later[0])
        elif via:
            modifier = view.o(via[0][1])
            alias_node = via[0][0]
            alias = (f" through {view.t(alias_node).name or view.label(alias_node)} = "
                     f"{name or '{name}'}.detach(), which shares its memory")
        path = [tid] + ([modifier.id] if modifier else []) + [o.id for o in savers]
    above: list[str] = []
    if name is None:
        name, live_alias, above = _live_name(ctx, dtype, shape, ver, producer, alias)
        alias = alias or live_alias
    alias = alias.replace("{name}", name or (view.label(tid) if view is not None and tid else "it"))
    line = lineno = None
    if modifier is not None:
        line, lineno = modifier.code, modifier.line
    else:
        lineno, line = _modifier_lead(ctx, name)
    who, lead = name or f"a {dtype}{list(shape)} tensor", None
    made = f" (PyTorch calls it output {match.group('nr')} of {producer})" if producer else ""
    saver = ", ".join(dict.fromkeys(o.label for o in savers)) or None
    by = f" by {saver}" if saver else ""
    sentences = [
        f"{who}{made} was saved for backward{by} at version {exp}; it was then changed in place{alias}, "
        f"and is now at version {ver}, so backward can no longer use it."
    ]
    if modifier is not None:
        where = f" at line {modifier.line} ({modifier.code})" if modifier.line and modifier.code else ""
        sentences.append(f"The in-place operation: {modifier.forward}{where}.")
    elif line:
        sentences.append(f"graphlens read your code: line {lineno} ({line}) changes {who} in place; it is the likely culprit.")
    elif not above and producer and (lead := inplace_in_forward(ctx, producer)) is not None:
        cls, lineno, line, made_ln, made_code, var = lead  # (no trace, no variable: the model's own code, read)
        sentences.append(f"graphlens read your code: {cls}.forward changes {var} in place at line {lineno} ({line}) after "
                         f"line {made_ln} ({made_code}) made it; if {var} is that tensor, that is the in-place change.")
    elif above:
        # (no trace, no line: the live tensor's own node says what changed it, an in-place op's node on top of the saver's)
        kinds = ", ".join(dict.fromkeys(f"{n} ({_INPLACE_KIND.get(n.rstrip('0123456789'), 'an in-place operation')})" for n in above))
        sentences.append(f"{name}'s grad_fn is {above[0]}, on top of the {producer} node that saved it: the in-place "
                         f"change was recorded as {kinds}.")
    if not saver and producer is None:
        sentences.append("(graphlens cannot see which operation saved it: run the code under graphlens.trace() to know.)")
    return Explanation(
        ["inplace_saved"], sentences, tensor_name=name, tensor_id=tid, graph=gr,
        path=[p for p in path if gr is not None and p in gr],
        edges=view.highlight_edges(path) if view is not None and path else (), message=message,
        fix=_inplace_fix(name or (lead[5] if lead else None), modifier, line or " ".join(_INPLACE_KIND.get(n.rstrip("0123456789"), "") for n in above),
                         update=modifier is not None and modifier.region is not None and tid is not None
                         and view is not None and view.t(tid).is_leaf and view.t(tid).requires_grad),
        op=savers[0].label if savers else None, line=line, lineno=lineno,
        cause=modifier.id if modifier is not None else (savers[0].id if savers else None),
    )


def _inplace_fix(name: str | None, modifier: OpNode | None, line: str | None, *, update: bool = False) -> str:
    # (an unknown tensor is never called x: the program may have an x that is another tensor)
    x = name or "that tensor"
    text = (modifier.forward if modifier is not None else "") + " " + (line or "")
    activations = ("relu", "leaky_relu", "elu", "selu", "celu", "hardtanh", "relu6", "silu", "hardswish", "dropout")
    if "inplace=True" in text or (modifier is not None and (modifier.forward or "").rstrip("_") in activations):
        return (f"Use the out-of-place form (nn.ReLU(inplace=False), torch.relu({name})) so that the saved {x} keeps its values."
                if name else f"Use the out-of-place form (nn.ReLU(inplace=False), torch.relu(...)) so that {x} keeps its values.")
    step = re.search(r"([A-Za-z_][\w.]*)\.step\(", line or "")
    if step or update:  # (an optimizer's update of a leaf under no_grad, not the user's own arithmetic: the order is what to change)
        by = f"{step.group(1)}.step()" if step else "an update under no_grad (an optimizer step)"
        return (f"{x} was changed by {by}: call backward on every loss that needs its old values before that update, or "
                f"recompute the forward after it (a graph built before an update cannot be used after it); if the graph "
                f"reaches an earlier iteration through a carried state (a hidden state kept between steps), detach that "
                f"state once per iteration.")
    if "+=" in text or "add_" in text or "-=" in text or "*=" in text or "mul_" in text:
        return (f"Write {x} = {x} + ... (a new tensor) instead of changing {x} in place, or clone() it first." if name else
                "Compute a new tensor (an out-of-place +, - or *) instead of changing that tensor in place (+=, add_), or "
                "clone() it first.")
    if "setitem" in text or re.search(r"\[[^\]]*\]\s*=(?!=)", line or ""):
        return (f"Build a new tensor instead of assigning into {x} (torch.cat, torch.where, or {x} = {x}.clone() before the "
                f"assignment)." if name else
                "Build a new tensor instead of assigning into that tensor (torch.cat, torch.where, or a clone() of it before "
                "the assignment).")
    return f"Use an out-of-place operation on {x}, or clone() it before changing it; torch.autograd.set_detect_anomaly(True) names the forward line that saved it."


#: What an in-place op's backward node on top of a saver says of the op (its node has the name of the out-of-place one).
_INPLACE_KIND = {"AddBackward": "an add: += or add_", "SubBackward": "a subtraction: -= or sub_",
                 "MulBackward": "a product: *= or mul_", "DivBackward": "a division: /= or div_",
                 "CopySlices": "an assignment into it: t[...] = ... (setitem)", "ReluBackward": "relu_ (inplace=True)",
                 "ClampBackward": "clamp_", "ClampMinBackward": "clamp_", "SigmoidBackward": "sigmoid_",
                 "TanhBackward": "tanh_", "ZeroBackward": "zero_", "FillBackward": "fill_"}


def _live_name(ctx: Context, dtype: str, shape: tuple, ver: int, producer: str | None,
               alias: str) -> tuple[str | None, str, list[str]]:
    """Among the raising frame's variables, the tensor the message describes (shape, dtype,
    version, and the node that made it), when exactly one fits; with the names of the nodes
    between its grad_fn and the producer's (the in-place ops that changed it, latest first)."""
    stepped: dict[int, list[str]] = {}

    def fits(t: torch.Tensor) -> bool:
        if tuple(t.shape) != shape or dtype_name(t.dtype) != dtype or t._version != ver:
            return False
        fn = t.grad_fn
        if producer is None:
            return fn is None
        above: list[str] = []
        for _ in range(8):  # the in-place ops' nodes sit on top of the producer
            if fn is None:
                return False
            if type(fn).__name__.startswith(producer):
                stepped[id(t)] = above
                return True
            above.append(type(fn).__name__)
            fn = fn.next_functions[0][0] if fn.next_functions else None
        return False

    found = []
    for n, t in ctx.candidates:
        try:
            if fits(t) and all(t is not f for _, f in found):
                found.append((n, t))
        except RuntimeError:
            continue
    if len(found) != 1:
        return None, alias, []
    name, t = found[0]
    shared = [n for n, c in ctx.candidates if n != name and c is not t and c._version == ver and shares_memory(c, t)]
    if shared and not alias:
        alias = f" through {shared[0]}, which shares its memory and version counter (as {shared[0]} = {name}.detach() does)"
    return name, alias, stepped.get(id(t), [])
