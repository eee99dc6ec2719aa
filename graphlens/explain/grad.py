"""Why a tensor's ``.grad`` is (or will be) None, or where it comes from: :func:`explain`."""

from __future__ import annotations

import weakref
from types import FrameType
from typing import TYPE_CHECKING, Any, Mapping

import torch

from .._live.guard import node_unsafe, quiet
from .._util import tensors_in
from .._checks import check_count
from ..graph import PRECISION, Graph, TensorNode
from ..names import frame_candidates, user_frame
from .answer import Asked, Draft
from .context import backward_roots, one_reading
from .copies import copy_answer
from .cuts import Cut, code_cut, rebind_fix, rebinding, trace_origins
from .leads import leaf_root_lead
from .accumulation import accumulated, clip_order, discarded
from .modules import attribute_path, frame_modules, frame_optimizer, missing_from_optimizer, stale_hint, tied_names, unregistered_hint
from .facts import backward_ran
from .live import find_live, named_after, reaches, shares_memory, snapshot_for
from .norequire import frozen_with_grad, not_required
from .paths import PathView
from .reached import reached_answer, unreached_roots
from .after import after_trace, changed_after_sentence, moved_after, with_later_version
from .types import Explanation
from .unreached import leaf_root, not_reached
from .evidence import (
    add_ctx_change, ctx_changes, name_among, data_aliases, grad_already_there, in_optimizer, producer, rebound,
    unrecorded_sentence,
)

if TYPE_CHECKING:
    from ..trace import Trace

__all__ = ["explain", "analyse"]


def explain(
    tensor: Any,
    root: Any = None,
    *,
    names: Mapping[str, Any] | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    precision: int = PRECISION,
) -> Explanation:
    """Why ``tensor.grad`` is (or will be) None after ``root.backward()``, or where it comes from.

    ``tensor`` is a tensor, or its name (looked up in ``root`` when that is a graph or a
    trace, else among the caller's variables).  ``root`` is the loss (a tensor or a tuple of
    them), a :class:`~graphlens.Graph`, or a :func:`graphlens.trace` (richer: it knows about
    detach() and no_grad regions).  Without a root, the caller's 0-d outputs are tried.
    ``optimizer=`` also checks that the tensor is one of its parameters; ``precision``
    is the number of significant digits of a value the explanation prints.  An exception as
    ``tensor`` is handed to :func:`explain_error`.  Nothing is changed: grads, flags,
    versions and hooks stay as they were.

    >>> import torch
    >>> from graphlens.explain import explain
    >>> w = torch.tensor([1.0, 2.0], requires_grad=True)
    >>> h = w * 3
    >>> loss = h.sum()
    >>> loss.backward()
    >>> explain(h, loss).reasons
    ('nonleaf_not_retained',)
    >>> explain(w, loss).reasons
    ('grad_ok',)
    """
    from ..trace import Trace  # lazily: trace imports explain lazily too
    from .errors import explain_error  # (errors uses this module's analysis)

    if isinstance(tensor, BaseException):
        return explain_error(tensor, root)
    if names is not None and not isinstance(names, Mapping):
        raise TypeError(f"names must be a dict from name to tensor, e.g. names={{'w': w}}, not {type(names).__name__}")
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer (the one that updates the tensor), not {type(optimizer).__name__}")
    precision = check_count("precision", precision, minimum=1)
    frame = user_frame(1)
    optimizer = frame_optimizer(frame, tensor) if optimizer is None and isinstance(tensor, torch.Tensor) else optimizer  # (the caller's)
    try:
        with quiet():  # (what explain reads of live tensors is not the user's program: no mode sees it)
            if isinstance(root, (Trace, Graph)):
                with one_reading(root):
                    return _explain_recorded(tensor, root, names=names, optimizer=optimizer, precision=precision, frame=frame)
            if isinstance(tensor, torch.Tensor) and node_unsafe(tensor):
                return _view_unread(tensor, names, frame)
            return _explain_live(tensor, root, names=names, optimizer=optimizer, frame=frame, precision=precision)
    finally:
        del frame


def _view_unread(tensor: torch.Tensor, names: Mapping[str, Any] | None, frame: FrameType | None) -> Explanation:
    """The answer for a view that retains its grad and whose memory was changed in place
    (:func:`~graphlens._live.guard.node_unsafe`): what is known without reading its node."""
    from .._live.facts import summarize

    name = next((n for n, t in (names or {}).items() if t is tensor), None)
    if name is None and frame is not None:
        name = next((n for n, t in frame_candidates(frame) if t is tensor), None)
    who = name or "The tensor"
    grad = tensor.grad  # (safe: it retains its grad, so reading .grad neither warns nor rebuilds)
    held = None if grad is None else summarize(grad)
    del grad
    sentences = [
        f"{who} is a view that retains its grad (retain_grad()), and the memory it views has been "
        f"changed in place (version {tensor._version}).",
        "If that change came after the view was made (through another tensor sharing its memory, such as a detach() of "
        "it), reading its grad_fn or is_leaf now would make PyTorch rebuild its backward node and move the retain_grad "
        "hook off the graph backward runs, so its .grad would stay None; Python cannot tell the two cases apart, so "
        "graphlens reads neither and says only what it knows.",
        f"Its .grad is {'None now' if held is None else 'set now: ' + held.format(PRECISION)}.",
    ]
    fix = (
        "Record the program instead: with graphlens.trace() as tr: ... then explain("
        + (repr(name) if name else "'name'") + ", tr) answers from what the trace saw as it ran. An in-place change "
        "through a detached alias is also worth a second look: clone() the alias if it should not share memory."
    )
    return Explanation(["retained_view_unread"], sentences, fix=fix, tensor_name=name)


def _explain_recorded(
    tensor: Any, root: Trace | Graph, *, names, optimizer, precision: int = PRECISION, frame: FrameType | None = None
) -> Explanation:
    from ..trace import Trace

    trace = root if isinstance(root, Trace) else None
    g = root.graph() if trace is not None else root
    if frame is not None:  # tensors the trace could not name that the caller's variables hold
        candidates = [(n, t) for n, t in (names or {}).items() if isinstance(t, torch.Tensor) and not node_unsafe(t)]
        candidates += frame_candidates(frame, readable=True)
        try:
            g = named_after(g, candidates)
        finally:
            candidates.clear()
    view = PathView(g)
    live = None
    if isinstance(tensor, str):
        try:
            node = g.find(tensor)
        except KeyError as exc:
            raise KeyError(f"tensor {tensor!r} is not in this graph: {exc.args[0]}") from None
        if not isinstance(node, TensorNode):
            raise TypeError(f"tensor {tensor!r} names an operation ({node.label}), not a tensor: name a tensor of the graph")
        tid = node.id
        live = g.tensor(tid)
    elif isinstance(tensor, torch.Tensor):
        live = tensor
        tid = find_live(g, tensor)
        if tid is None:
            # Not in the recorded graph (a snapshot only sees what the roots reach; a trace what
            # its block made or used): re-read the live roots when they still exist, else answer
            # from the tensor alone, saying so: nothing recorded is stated of it.
            where = "trace" if trace is not None else "traced graph" if g.source == "trace" else "graph"
            roots_live = [g.tensor(r.id) for r in g.roots]
            roots_live = [r for r in roots_live if r is not None]
            return _explain_live(
                tensor, tuple(roots_live) or None, names=names, optimizer=optimizer, frame=None,
                no_frame_roots=not roots_live, precision=precision, unrecorded=where,
            )
    else:
        raise TypeError(f"tensor must be a torch.Tensor or a tensor's name in the graph, not {type(tensor).__name__}")
    if live is not None and node_unsafe(live):
        live = None  # (its node is not read: the answer is the record's, as for a tensor no longer alive)
    moved = moved_after(g, trace)
    if tid in moved and live is not None:  # (changed after the block: a NaN now is a value the trace never saw)
        later = with_later_version(g, tid, live)
        if later is not None:
            nonfinite = _nonfinite_recorded(later, later.tensors[-1].id, trace, names)
            if nonfinite is not None:
                return after_trace(nonfinite, moved[tid], reason=False)
    nonfinite = _nonfinite_recorded(g, tid, trace, names)
    if nonfinite is not None:
        return nonfinite
    earlier = _reached_version(g, tid)
    if earlier != tid:  # (an optimizer step made a new version of the leaf after the loss used the old one)
        g = _renamed(g, earlier, g.node(tid))
        view, tid = PathView(g), earlier
        moved = moved_after(g, trace)
    roots = backward_roots(g)
    ran = backward_ran(view, roots, trace)
    hints: dict[str, Any] = {"moved_after": frozenset(moved)}
    hints["stale_optimizer"] = stale_hint(live, optimizer, frame)
    owner = unregistered_hint(live, optimizer, frame_modules(frame)) if live is not None and frame is not None else None
    hints["unregistered"] = owner
    if live is not None and isinstance(live, torch.nn.Parameter):
        held = ([("module", trace._module)] if trace is not None and getattr(trace, "_module", None) is not None else [])
        tied = tied_names(live, held + (frame_modules(frame) if frame is not None else []))
        if tied:
            hints["tied"] = tied
    hints["accumulated"], hints["discarded"], hints["clip"] = accumulated(trace, tid), discarded(trace, tid), clip_order(frame)
    stopped = _stopped_before(trace, g, tid)
    if stopped:
        hints["stopped"] = stopped
    if tid in moved:
        from .._live.facts import summarize

        hints["changed_after"] = moved[tid] + (summarize(live).finite if live is not None else None,)
    origins = trace_origins(view, trace, [frame.f_code.co_filename] if frame is not None else [])
    if origins or getattr(origins, "created", None) or getattr(origins, "passes", None):
        hints["origins"] = origins
    roots_live = [t for t in (g.tensor(r) for r in roots) if t is not None]
    if live is not None and roots_live:
        hints["ctx_changed"] = ctx_changes(roots_live, live, lambda t: next(
            (n.name for n in g.tensors if n.name and g.tensor(n.id) is t), None))
    del roots_live
    return analyse(view, tid, roots, live=live, ran=ran, optimizer=optimizer, hints=hints, precision=precision)


def _stopped_before(trace: Any, g: Graph, tid: str) -> tuple[int, str, int] | None:
    """``(pass, the last node that ran, its step)`` when every traced backward pass that could
    have written ``tid``'s ``.grad`` stopped with an error before its AccumulateGrad ran (None:
    one reached it, or none stopped)."""
    rec = getattr(trace, "_rec", None)
    if rec is None or not rec.grads or not rec.passes or all(rec.pass_done[:rec.passes]):
        return None
    acc = {o.id for o in g.ops if o.variable == tid}
    try:
        steps = trace.replay().steps
    except Exception:  # noqa: BLE001 - a trace that cannot replay: nothing to add
        return None
    if not acc or any(s.op in acc for s in steps):
        return None
    for p in range(rec.passes):
        if not rec.pass_done[p]:
            ran = [s for s in steps if s.backward == p]
            if ran:
                return p, ran[-1].name, ran[-1].index
    return None


def _reached_version(g: Graph, tid: str) -> str:
    """The record the roots reach of the leaf ``tid`` stands for: ``tid`` itself, or, when the
    roots were computed before an update made in place without a backward node (an optimizer
    step under no_grad, ``w.add_()`` under torch.no_grad()) gave the leaf a new version, the
    earlier version they used.  The same tensor, the same ``.grad``."""
    from .nonfinite_causes import Links

    node = g.node(tid)
    if not isinstance(node, TensorNode) or not node.is_leaf or not g.roots:
        return tid
    links = Links(g)
    reached: set = set()
    for r in g.roots:
        reached.update(links.ancestors(r.id))
    cur = tid
    while cur not in reached:
        op = links.maker.get(cur)
        made = g.node(op) if op is not None else None
        if made is None or made.name is not None or not (made.forward or "").endswith("_"):
            return tid
        ins = links.forward_inputs(op)
        if not ins or not g.node(ins[0]).is_leaf:
            return tid
        cur = ins[0]
    return cur


def _renamed(g: Graph, tid: str, later: TensorNode) -> Graph:
    """``g`` with record ``tid``, an earlier version of the leaf ``later``, named as it is and
    holding the ``.grad`` it holds (one tensor, one ``.grad``)."""
    node = g.node(tid)
    name = node.name or later.name
    grad = node.grad if node.grad is not None else later.grad
    if name == node.name and grad is node.grad:
        return g
    tensors = [n._replace(name=name, grad=grad) if n.id == tid else n for n in g.tensors]
    refs = {n.id: weakref.ref(t) for n in g.tensors if (t := g.tensor(n.id)) is not None}
    return Graph(tensors, g.ops, g.edges, [r.id for r in g.roots], source=g.source, refs=refs, notes=dict(g.notes))


def _nonfinite_recorded(g: Graph, tid: str, trace: Any, names: Mapping[str, Any] | None) -> Explanation | None:
    """The answer for a tensor whose recorded value or gradient is NaN or infinite (None: it is not)."""
    from .nonfinite import explain_nonfinite, nonfinite_in

    node = g.node(tid)
    if not isinstance(node, TensorNode) or nonfinite_in(node) is None:
        return None
    replay = None
    if trace is not None and trace._rec.grads:
        replay = trace.replay()
    return explain_nonfinite(g, tid, replay, traced=g.source == "trace")


def _nonfinite_live(tensor: torch.Tensor, candidates: list, names: Mapping[str, Any] | None,
                    unrecorded: str | None = None) -> Explanation | None:
    """Without a trace (or with one that never saw the tensor: ``unrecorded``): a tensor whose
    value or .grad holds NaN or infinity gets what its graph shows (where the first one is; the
    leaves that hold one), never a guessed origin."""
    from .._live.facts import summarize
    from ..snapshot import snapshot
    from .nonfinite import explain_nonfinite

    grad = tensor.grad if tensor.is_leaf or tensor.retains_grad else None
    if summarize(tensor).finite is not False and (grad is None or summarize(grad).finite is not False):
        return None
    given = {k: v for k, v in (names or {}).items() if isinstance(v, torch.Tensor)}
    given.update({n: t for n, t in candidates if n not in given})
    g = snapshot(tensor, names=given)
    e = explain_nonfinite(g, g.roots[0].id, None, traced=False)
    if e is None or unrecorded not in ("trace", "traced graph"):
        return e
    who = e.tensor_name or "the tensor"
    fix = (f"Compute {who} inside the graphlens.trace() block (the block must cover the code that makes it: the "
           f"forward, the loss) and ask again; then graphlens names the op that made the non-finite value.")
    return Explanation([e.reasons[0], "nonfinite_unseen", *e.reasons[1:]], [unrecorded_sentence(unrecorded, who), *(x for x in e.sentences if not x.startswith("Without a trace")),
                        "The trace saw none of the ops that made it, so graphlens cannot tell which one made the first "
                        "non-finite value."],
                       fix=fix, tensor_name=e.tensor_name, tensor_id=e.tensor_id,
                       graph=e.graph, path=e.path, op=e.op, line=e.line, lineno=e.lineno, cause=e.cause, facts=e.facts)


def _explain_live(
    tensor, root, *, names, optimizer, frame: FrameType | None, no_frame_roots: bool = False, precision: int = PRECISION,
    unrecorded: str | None = None,
) -> Explanation:
    candidates = frame_candidates(frame) if frame is not None else []
    try:
        if isinstance(tensor, str):
            by_name = dict(reversed(candidates))
            by_name.update((k, v) for k, v in (names or {}).items() if isinstance(v, torch.Tensor))
            if tensor not in by_name:
                raise KeyError(
                    f"no tensor named {tensor!r} among your variables: pass the tensor itself, "
                    f"or a graph or trace as root (explain({tensor!r}, tr))"
                )
            tensor = by_name[tensor]
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"tensor must be a torch.Tensor (or an exception to explain), not {type(tensor).__name__}")
        candidates = [c for c in candidates if not node_unsafe(c[1])]
        names = {n: t for n, t in names.items() if not (isinstance(t, torch.Tensor) and node_unsafe(t))} if names else names
        nonfinite = _nonfinite_live(tensor, candidates, names, unrecorded)
        if nonfinite is not None:
            return nonfinite
        roots = tensors_in(root, depth=8)
        if root is not None and not roots:
            raise TypeError(
                f"root must be the output tensor (e.g. the loss), a tuple of them, a Graph or a trace, not {type(root).__name__}"
            )
        guessed = False
        if not roots:
            held = grad_already_there(tensor, candidates, names, precision, unrecorded=unrecorded)
            if held is not None:
                return held
        if not roots and not no_frame_roots:
            outs = [t for _, t in candidates if t.grad_fn is not None and t.dim() == 0 and t is not tensor]
            outs = list({id(t): t for t in outs}.values())
            # Only a root that reaches the tensor: an unrelated output in scope would lead
            # the answer astray (and blame a cut that is not there).
            roots = [t for t in outs if reaches([t.grad_fn], tensor)][:1]
            guessed = bool(roots)
        hints: dict[str, Any] = {"guessed_root": guessed, "unrecorded": unrecorded}
        hints["stale_optimizer"], hints["clip"] = stale_hint(tensor, optimizer, frame), clip_order(frame)
        hints["attribute"] = attribute_path(tensor, frame_modules(frame)) if frame is not None and not tensor.requires_grad else None
        extra: list[torch.Tensor] = []
        reach = bool(roots) and reaches([r.grad_fn for r in roots], tensor)
        if roots and not reach and tensor.requires_grad:
            # What cut it?  Other outputs that use the tensor, and detached copies of it
            # or of anything computed from it, among the caller's variables.
            users = [
                (n, t) for n, t in candidates
                if t.grad_fn is not None and t is not tensor and all(t is not r for r in roots)
                and reaches([t.grad_fn], tensor)
            ]
            family = [tensor] + [t for _, t in users]
            detached = [
                (n, t) for n, t in candidates
                if not t.requires_grad and t is not tensor and any(shares_memory(t, f) for f in family)
            ]
            users_named = {id(t): n for n, t in users}
            sinks = [
                (n, t) for n, t in users
                if not any(u is not t and reaches([u.grad_fn], t) for _, u in users)
            ]
            hints["detached"] = [(n, next((users_named.get(id(f)) or "it") for f in family if shares_memory(t, f))) for n, t in detached]
            root_var = next((n for n, t in candidates if t is roots[0]), None)
            if frame is not None:
                hints["code_cut"] = code_cut(frame, frame.f_lineno, root_var, live=dict(reversed(candidates)), frozen=False)
                if all(r.is_leaf and r.requires_grad for r in roots):
                    hints["leaf_root"] = leaf_root_lead(frame, root_var, frame.f_lineno)
            hints["sinks"] = [n for n, _ in sinks]
            extra = [t for _, t in sinks]
        if frame is not None and not tensor.requires_grad:
            own = next((n for n, t in candidates if t is tensor), None)
            hints["code_lead"] = code_cut(frame, frame.f_lineno, own, live=dict(reversed(candidates)))
            if roots and all(r.is_leaf and r.requires_grad for r in roots) and roots[0] is not tensor:
                hints["leaf_root"] = leaf_root_lead(frame, next((n for n, t in candidates if t is roots[0]), None), frame.f_lineno)
        owner = unregistered_hint(tensor, optimizer, frame_modules(frame)) if frame is not None and (optimizer is not None or roots) else None
        if owner is not None:
            hints["unregistered"] = owner
            names = {**(names or {}), owner.name: tensor} if owner.name else names
        if frame is not None and not tensor.is_leaf:
            own = next((n for n, t in candidates if t is tensor), None)
            hints["rebind"] = rebinding(frame, own)
        if frame is not None and isinstance(tensor, torch.nn.Parameter) and roots:
            tied = tied_names(tensor, frame_modules(frame))
            if tied:
                hints["tied"] = tied
        if roots:
            hints["ctx_changed"] = ctx_changes(roots, tensor, lambda t: name_among(t, candidates, names))
            hints["data_alias"] = data_aliases(candidates, lambda t: reaches([r.grad_fn for r in roots], t)
                                                and (t.is_leaf and t is tensor or reaches([t.grad_fn], tensor)))
        target_grad = tensor.grad if (tensor.is_leaf or tensor.retains_grad) else None
        g = snapshot_for(roots, tensor, extra, names=names)
        view = PathView(g)
        root_ids = [r.id for r in g.roots]
        tid = find_live(g, tensor)
        ran = backward_ran(view, root_ids, None) if roots else None
        hints["grad"] = target_grad is not None
        del target_grad
        return analyse(view, tid, root_ids, live=tensor, ran=ran, optimizer=optimizer, hints=hints, precision=precision)
    finally:
        candidates.clear()


def analyse(
    view: PathView, tid: str | None, roots: list[str], *, live, ran, optimizer, hints, precision: int = PRECISION
) -> Explanation:
    """The explanation for the tensor ``tid`` of ``view``'s graph (and ``live``, the tensor
    itself when known), given the root ids, whether backward ran (``ran``: True, False or
    None for unknown) and what the live walk found (``hints``)."""
    g = view.g
    node = view.t(tid) if tid is not None else None
    name = (node.name if node is not None else None) or "the tensor"
    who = name if node is None or node.name else f"the unnamed tensor {tid}"
    grad_of = f"{who}.grad" if node is not None and node.name else f"the .grad of {who}"
    if live is not None:
        is_leaf, requires_grad, retains = live.is_leaf, live.requires_grad, bool(live.retains_grad)
        has_grad = hints.get("grad") if "grad" in hints else (live.grad is not None if (is_leaf or retains) else False)
        dtype = live.dtype
        is_param = isinstance(live, torch.nn.Parameter)
    else:
        assert node is not None
        is_leaf, requires_grad, retains, has_grad = node.is_leaf, node.requires_grad, node.retains_grad, node.has_grad
        dtype = getattr(torch, node.dtype, None)
        is_param = node.is_parameter
    labels = [view.label(r) for r in roots]
    root_name = (", ".join(labels[:-1]) + " and " + labels[-1] if len(labels) > 1 else labels[0]) if labels else None
    backward = (f"{root_name}.backward()" if len(labels) == 1 else f"the backward calls from {root_name}") if root_name else "backward"

    # Which part of the root's graph reaches the tensor?
    reach_parents, reach_path = view.bfs(roots, tid) if roots and tid is not None else ({}, [])
    reachable = bool(reach_path)
    acc = view.adj.accumulate_grad.get(tid) if tid is not None else None
    if node is not None and is_leaf and not reachable and acc is not None and acc in reach_parents:
        reachable = True
        _, reach_path = view.bfs(roots, acc)
        reach_path = reach_path + [tid]
    a = Asked(
        view, tid, node, live, name, who, grad_of, list(roots), root_name, backward,
        "is None" if ran else "is or will be None",
        f"is None, and stays None after {backward}," if root_name else "is None, whatever backward runs,",
        ran, optimizer, hints, precision, is_leaf, requires_grad, retains, bool(has_grad), dtype, is_param,
        reachable, view.with_acc(reach_path),
    )
    d = Draft()
    if hints.get("guessed_root") and root_name:
        d.sentences.append(f"(No root was given; graphlens used {root_name}, found among your variables.)")
    if hints.get("unrecorded"):  # the given trace or graph never saw the tensor: only live facts follow
        d.sentences.append(unrecorded_sentence(hints["unrecorded"], who))
    if hints.get("changed_after"):  # (what the trace saw follows: not what happened since)
        d.sentences.append(changed_after_sentence(who, *hints["changed_after"]))

    if not requires_grad and has_grad:
        frozen_with_grad(a, d)
    elif not requires_grad:
        not_required(a, d)
        if a.root_is_leaf():
            own_fix = d.fix
            leaf_root(a, d)
            d.fix = f"{own_fix} Then drop the requires_grad=True on {view.label(roots[0])}: a loss with a graph needs no flag."
    elif not roots and not is_leaf and not retains:
        _nonleaf_no_root(a, d)
    elif not roots:
        d.reasons.append("no_root")
        d.sentences.append(
            f"graphlens cannot tell whether {who} will get a gradient: " + (
                f"the {hints['unrecorded']} given did not record it, and holds no live root to check whether one "
                f"reaches it." if hints.get("unrecorded") else
                "no root was given and none among your variables reaches it."
            )
        )
        d.fix = f"Pass the loss: graphlens.explain({name}, loss)."
        d.path = [tid] if tid else []
    elif not is_leaf and not retains and rebound(view, tid, node, hints):
        _rebound(a, d)
    elif not reachable:
        not_reached(a, d)
    elif not is_leaf and not retains:
        _nonleaf(a, d)
    else:
        reached_answer(a, d)
    if hints.get("ctx_changed"):  # (the Function reaches the tensor: the path is intact)
        d.fault_op, d.fault_node, d.fix = add_ctx_change(g, hints["ctx_changed"][0], d.reasons, d.sentences)
    if (owner := hints.get("unregistered")) and requires_grad and is_leaf:
        d.reasons.append("unregistered_module")
        d.sentences.append(owner.sentence())
        d.fix, d.cut = owner.fix(), getattr(owner, "as_cut", lambda: d.cut)()  # (a layer made in forward: its line)
    if optimizer is not None and requires_grad and is_leaf and not in_optimizer(optimizer, live, node):
        d.reasons.append("not_in_optimizer")
        d.sentences.append(f"Note: {who} is not among the optimizer's parameters, so optimizer.step() never updates it"
                           f"{' (nor does its zero_grad() clear its .grad)' if has_grad else ''}.")
        stale_sentence, stale_fix = missing_from_optimizer(name or who, hints.get("stale_optimizer"))
        if stale_sentence:
            d.sentences.append(stale_sentence)
        if d.fix is None or "zero_grad" in d.fix:
            d.fix = stale_fix
    if not d.reasons:  # pragma: no cover - every branch above adds one
        d.reasons.append("grad_ok")
    if has_grad and d.reasons[0] == "not_reachable":
        d.reasons.insert(1, "grad_set_elsewhere")  # (the gradient is there: this root gave none of it)
    if hints.get("changed_after"):
        d.reasons.append("changed_after_trace")
    if hints.get("unrecorded"):
        d.reasons.append("not_recorded")
        if "not_reachable" in d.reasons and root_name:
            d.fix = (f"Ask with the trace or the loss that {name} belongs to (explain({name}, loss)): "
                     f"{root_name} of the {hints['unrecorded']} given does not use it.")
    found = d.cut
    return Explanation(
        d.reasons,
        d.sentences,
        fix=d.fix,
        tensor_name=node.name if node is not None else None,
        tensor_id=tid,
        graph=g,
        path=[p for p in d.path if p in g],
        edges=d.edges,
        op=found.op if found else (d.fault_op or (producer(view, node) if d.reasons[0] in _MADE_BY else None)),
        line=found.code if found else None,
        lineno=found.line if found else None,
        cause=found.node if found else d.fault_node,
        facts=[f for f in d.facts if f[0] in g],
    )


def _nonleaf_no_root(a: Asked, d: Draft) -> None:
    """Whatever the root, a non-leaf keeps no .grad: that is the answer, root or not."""
    view, node, tid = a.view, a.node, a.tid
    d.reasons += ["nonleaf_not_retained", "no_root"]
    d.fact(tid, "is_leaf", False)
    op = view.o(node.op).label if node is not None and node.op else "an operation"
    leaves = [l for l in view.leaves_below(tid) if view.t(l).requires_grad] if tid else []
    named = [view.label(l) for l in leaves]
    kind = "a view" if node is not None and node.is_view else "computed"
    d.sentences.append(
        f"{a.grad_of} is None, whatever backward runs, because {a.who} is not a leaf: it is {kind} "
        + (f"of {named[0]}" if kind == "a view" and len(named) == 1 else f"by {op}")
        + " and did not call retain_grad()."
    )
    if named:
        d.sentences.append(f"A gradient that flows through {a.who} is passed on to {', '.join(named)}, where PyTorch keeps it in .grad.")
        d.path = [tid] + leaves
        d.edges = view.highlight_edges(view.with_acc(d.path))
    else:
        d.path = [tid] if tid else []
    d.sentences.append("(No root was given, and none among your variables reaches it.)")
    first = next((view.t(l).name for l in leaves if view.t(l).name), None)
    d.fix = (f"Read {first}.grad instead, or call " if first else "Call ") + f"{a.name}.retain_grad() before backward."


def _rebound(a: Asked, d: Draft) -> None:
    """w = w - lr * w.grad outside no_grad: the name now holds a non-leaf made from the old leaf."""
    view, tid, name = a.view, a.tid, a.name
    ln, code = rebound(view, tid, a.node, a.hints)
    d.reasons += ["rebound_leaf", "nonleaf_not_retained"]
    d.fact(tid, "is_leaf", False)
    where = f"line {ln} ({code})" if ln else "a hand-written update"
    d.sentences.append(
        f"{a.grad_of} {a.stays} because {where} rebound {name} to a new tensor computed from the leaf {name} was "
        f"until then: a non-leaf, whose gradient PyTorch does not keep."
    )
    d.sentences.append("The gradient goes to that earlier leaf, which no variable names any more.")
    leaves = view.leaves_below(tid)
    d.path = [tid] + leaves[:1]
    d.edges = view.highlight_edges(view.with_acc(d.path))
    d.fix = rebind_fix(name)
    d.cut = Cut("rebound_leaf", None, tid, name, ln, code, d.sentences[-2], tuple(d.path))


def _nonleaf(a: Asked, d: Draft) -> None:
    """A non-leaf that the roots reach and that did not call retain_grad()."""
    view, tid, node = a.view, a.tid, a.node
    d.fact(tid, "is_leaf", False)
    d.fact(tid, "reached", True)
    leaves = view.leaves_below(tid)
    copy_leaf = leaves[0] if len(leaves) == 1 and view.t(leaves[0]).name is None and view.t(leaves[0]).requires_grad else None
    if copy_leaf is not None and node is not None and node.is_view:
        copy_leaf = None  # (a view shares the leaf's memory: no copy; said below)
    if copy_leaf is not None:
        d.reasons += ["is_a_copy", "nonleaf_not_retained"]
        more, d.path, d.edges, d.fix = copy_answer(view, tid, node, copy_leaf, name=a.name, who=a.who, grad_of=a.grad_of,
                                                   stays=a.stays, attribute=a.live is not None and not a.is_param)
        d.sentences += more
        return
    d.reasons.append("nonleaf_not_retained")
    op = view.o(node.op).label if node is not None and node.op else "an operation"
    base = [l for l in leaves if view.t(l).requires_grad]
    if node is not None and node.is_view and len(base) == 1:
        # (x.requires_grad = True, then x = x.unsqueeze(0): the name now holds a view of the leaf)
        named = view.t(base[0]).name
        leaf = view.label(base[0]) if named else f"an unnamed leaf ({base[0]})"
        d.sentences.append(f"{a.grad_of} {a.stays} because {a.who} is not a leaf: it is a view of {leaf} (made by {op}), "
                           f"and did not call retain_grad().")
        d.sentences.append(f"The gradient flows through {a.who} to {leaf}, the leaf that requires grad, and PyTorch keeps it "
                           f"in {named + '.grad' if named else 'that leaf’s .grad'}"
                           + ("" if named else f" (no variable holds that leaf now: was {a.name} rebound to a view of it, "
                                                f"{a.name} = {a.name}.view(...)?)") + ".")
        d.path, d.edges = a.reach_path, view.highlight_edges(a.reach_path)
        d.fix = (f"Read {named}.grad" if named else f"Read the gradient from the leaf {a.who} is a view of") + (
            f", or make the leaf after the reshape ({a.name} = {a.name}.detach().requires_grad_() once it has its final "
            f"shape, then compute from it), or call {a.name}.retain_grad() before {a.backward}.")
        return
    d.sentences.append(f"{a.grad_of} {a.stays} because {a.who} is not a leaf (it was computed by {op}) and did not call retain_grad().")
    apart = unreached_roots(a)
    flows = [r for r in a.roots if r not in apart]
    by = f" from {', '.join(view.label(r) for r in flows)}" if apart else ""
    d.sentences.append(f"The gradient{by} does flow through {a.who} on its way to the leaves, but PyTorch keeps .grad only on leaves.")
    if apart:  # (a root of another pass does not depend on it at all: from that one, nothing flows)
        names = ", ".join(view.label(r) for r in apart)
        d.sentences.append(f"{names} {'does' if len(apart) == 1 else 'do'} not depend on {a.who}: no path leads from "
                           f"{'it' if len(apart) == 1 else 'them'} to {a.who}, so a gradient of {names} with respect to "
                           f"{a.who} is None (zero with materialize_grads=True), whatever retain_grad() does.")
        d.fix = (f"For the gradient from {', '.join(view.label(r) for r in flows)}: call {a.name}.retain_grad() before "
                 f"{a.backward}, or read it with a hook or torch.autograd.grad. From {names} there is none to read: "
                 f"{names} would have to be computed from {a.who}.")
        d.path, d.edges = a.reach_path, view.highlight_edges(a.reach_path)
        return
    d.path, d.edges = a.reach_path, view.highlight_edges(a.reach_path)
    d.fix = f"Call {a.name}.retain_grad() before {a.backward}, or read the gradient with a hook or torch.autograd.grad."


#: Reasons whose answer is about the operation that made the tensor (its ``op``).
_MADE_BY = ("nonleaf_not_retained", "is_a_copy", "rebound_leaf", "retain_grad_too_late")
