"""Why a tensor's ``.grad`` is (or will be) None, or where it comes from: :func:`explain`."""

from __future__ import annotations

from types import FrameType
from typing import TYPE_CHECKING, Any, Mapping

import torch

from .._facts import dtype_name
from .._guard import quiet
from .._util import tensors_in
from .._checks import check_count
from ..graph import PRECISION, Graph, TensorNode
from ..names import frame_candidates, user_frame
from .copies import copy_answer
from .cuts import Cut, code_cut, origin_cut, cut_fix as _cut_fix, rebind_fix, rebinding, traced_cut_between
from .facts import backward_ran, gradient_flowed, grad_text, region_kind
from .live import INTEGER_DTYPES, find_live, reaches, shares_memory, snapshot_for
from .paths import PathView
from .types import Explanation
from .evidence import (
    add_ctx_change, ctx_changes, name_among, changed_untracked, data_alias_sentence, data_aliases, grad_already_there, hook_fix, hook_sentence, hooks_of,
    in_optimizer, producer, rebound, unrecorded_sentence,
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
    try:
        with quiet():  # (what explain reads of live tensors is not the user's program: no mode sees it)
            if isinstance(root, (Trace, Graph)):
                return _explain_recorded(tensor, root, names=names, optimizer=optimizer, precision=precision)
            return _explain_live(tensor, root, names=names, optimizer=optimizer, frame=frame, precision=precision)
    finally:
        del frame


def _explain_recorded(tensor: Any, root: Trace | Graph, *, names, optimizer, precision: int = PRECISION) -> Explanation:
    from ..trace import Trace

    trace = root if isinstance(root, Trace) else None
    g = root.graph() if trace is not None else root
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
    roots = [r.id for r in g.roots]
    ran = backward_ran(view, roots, trace)
    hints: dict[str, Any] = {}
    origins = getattr(getattr(trace, "_rec", None), "origins", None)
    if origins:
        hints["origins"] = {f"t{i}": where for i, where in origins.items()}
    roots_live = [t for t in (g.tensor(r) for r in roots) if t is not None]
    if live is not None and roots_live:
        hints["ctx_changed"] = ctx_changes(roots_live, live, lambda t: next(
            (n.name for n in g.tensors if n.name and g.tensor(n.id) is t), None))
    del roots_live
    return analyse(view, tid, roots, live=live, ran=ran, optimizer=optimizer, hints=hints, precision=precision)


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
                hints["code_cut"] = code_cut(frame, frame.f_lineno, root_var)
            hints["sinks"] = [n for n, _ in sinks]
            extra = [t for _, t in sinks]
        if frame is not None and not tensor.is_leaf:
            own = next((n for n, t in candidates if t is tensor), None)
            hints["rebind"] = rebinding(frame, own)
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
    root_name = " and ".join(view.label(r) for r in roots) if roots else None
    backward = f"{root_name}.backward()" if root_name else "backward"
    will = "is None" if ran else "is or will be None"
    stays = f"is None, and stays None after {backward}," if root_name else "is None, whatever backward runs,"
    reasons: list[str] = []
    sentences: list[str] = []
    fix = None
    found_cut = None
    fault_op: str | None = None  # the op at fault where no cut is (a Function that kept a ctx tensor)
    fault_node: str | None = None
    root_cut = False
    path: list[str] = []
    edges: list[tuple[str, str]] = []
    if hints.get("guessed_root") and root_name:
        sentences.append(f"(No root was given; graphlens used {root_name}, found among your variables.)")
    if hints.get("unrecorded"):  # the given trace or graph never saw the tensor: only live facts follow
        sentences.append(unrecorded_sentence(hints["unrecorded"], who))

    # Which part of the root's graph reaches the tensor?
    reach_parents, reach_path = view.bfs(roots, tid) if roots and tid is not None else ({}, [])
    reachable = bool(reach_path)
    acc = view.adj.accumulate_grad.get(tid) if tid is not None else None
    if node is not None and is_leaf and not reachable and acc is not None and acc in reach_parents:
        reachable = True
        _, reach_path = view.bfs(roots, acc)
        reach_path = reach_path + [tid]
    reach_path = view.with_acc(reach_path)

    if not requires_grad and has_grad:
        # Frozen after it got a gradient: .grad still holds it (zeros, after zero_grad(set_to_none=False)).
        reasons.append("requires_grad_false")
        shown = grad_text(node, precision) if node is not None else None
        sentences.append(
            f"{who} does not require grad, so backward computes no gradient for it; but {grad_of} is not None: it still "
            f"holds {shown or 'a tensor'} from before it was frozen."
        )
        fix = f"Set {name}.grad = None after freezing it."
        if optimizer is not None and in_optimizer(optimizer, live, node):
            reasons.append("frozen_in_optimizer")
            sentences.append(
                f"{who} is still one of the optimizer's parameters, and optimizer.step() updates every parameter whose "
                f".grad is not None: with momentum or weight decay, {who} keeps moving although it is frozen."
            )
            fix = f"Set {name}.grad = None after freezing it (zero_grad() does that by default), or leave {name} out of the optimizer."
    elif not requires_grad:
        reasons.append("requires_grad_false")
        sentences.append(f"{grad_of} {will} because {who} does not require grad, so no gradient is computed for it.")
        if dtype in INTEGER_DTYPES:
            reasons.append("integer_dtype")
            sentences.append(f"It has dtype {dtype_name(dtype)}, and only floating point or complex tensors can require grad.")
            fix = f"Make it a float tensor first, e.g. {name} = {name}.float().requires_grad_()."
        elif node is not None and node.detached_from is not None:
            src = node.detached_from
            reasons.append("made_by_detach")
            sentences.append(
                f"It was made by {view.label(src)}.detach() (or .data): a new leaf that shares the memory "
                f"of {view.label(src)} but is cut from its graph."
            )
            path = [src, tid]
            edges = view.highlight_edges(path)
            fix = f"Use {view.label(src)} itself where you need the gradient, and detach only what must stay constant."
        elif node is not None and node.region is not None:
            reasons.append("created_in_no_grad")
            op = node.op
            ins = [i for i in view.adj.inputs.get(op, ())] if op else []
            grad_ins = [i for i in ins if view.t(i).requires_grad]
            region = region_kind(node.region)
            made = f" by {view.o(op).label}" if op else ""
            sentences.append(f"It was made{made} inside torch.{region}(), where PyTorch records no graph.")
            if grad_ins:
                sentences.append(
                    "Its input " + ", ".join(view.label(i) for i in grad_ins)
                    + f" requires grad, but no graph links {who} back to it."
                )
            path = grad_ins + ([op] if op else []) + [tid]
            edges = view.highlight_edges(path)
            fix = f"Compute {name} outside the torch.{region}() block if a gradient must flow through it."
        elif is_param:
            sentences.append("It is a parameter whose requires_grad was set to False (frozen).")
            fix = f"Call {name}.requires_grad_(True) before the forward pass if it should learn."
        elif tid is not None and hints.get("origins") and (lead := origin_cut(view, tid, hints["origins"])) is not None:
            # made from a tensor the trace saw only at its first use: the code says how it was made
            reasons.append(lead.kind)
            sentences.append(lead.text)
            fix = _cut_fix(lead, name)
            found_cut = lead
            path = [tid]
        else:
            sentences.append(
                "A tensor made directly starts with requires_grad=False; so does one made by detach(), inside "
                "torch.no_grad(), or only from tensors that do not require grad."
            )
            fix = (
                f"If {name} is data or a parameter you create, create it with requires_grad=True. If it should be "
                f"computed from the parameters, compute it with torch operations (no detach(), torch.no_grad(), "
                f"integer results or .item()/torch.tensor(...) in between); switching requires_grad on for {name} itself "
                f"would only make a new leaf with no link to them. graphlens.trace() shows where the link is lost."
            )
            path = [tid] if tid else []
    elif not roots and not is_leaf and not retains:
        # Whatever the root, a non-leaf keeps no .grad: that is the answer, root or not.
        reasons += ["nonleaf_not_retained", "no_root"]
        op = view.o(node.op).label if node is not None and node.op else "an operation"
        leaves = [l for l in view.leaves_below(tid) if view.t(l).requires_grad] if tid else []
        named = [view.label(l) for l in leaves]
        kind = "a view" if node is not None and node.is_view else "computed"
        sentences.append(
            f"{grad_of} is None, whatever backward runs, because {who} is not a leaf: it is {kind} "
            + (f"of {named[0]}" if kind == "a view" and len(named) == 1 else f"by {op}")
            + " and did not call retain_grad()."
        )
        if named:
            sentences.append(
                f"A gradient that flows through {who} is passed on to {', '.join(named)}, "
                f"where PyTorch keeps it in .grad."
            )
            path = [tid] + leaves
            edges = view.highlight_edges(view.with_acc(path))
        else:
            path = [tid] if tid else []
        sentences.append("(No root was given, and none among your variables reaches it.)")
        first = next((view.t(l).name for l in leaves if view.t(l).name), None)
        fix = (f"Read {first}.grad instead, or call " if first else "Call ") + f"{name}.retain_grad() before backward."
    elif not roots:
        reasons.append("no_root")
        sentences.append(
            f"graphlens cannot tell whether {who} will get a gradient: " + (
                f"the {hints['unrecorded']} given did not record it, and holds no live root to check whether one "
                f"reaches it." if hints.get("unrecorded") else
                "no root was given and none among your variables reaches it."
            )
        )
        fix = f"Pass the loss: graphlens.explain({name}, loss)."
        path = [tid] if tid else []
    elif not is_leaf and not retains and rebound(view, tid, node, hints):
        # w = w - lr * w.grad outside no_grad: the name now holds a non-leaf made from the old leaf.
        ln, code = rebound(view, tid, node, hints)
        reasons += ["rebound_leaf", "nonleaf_not_retained"]
        where = f"line {ln} ({code})" if ln else "a hand-written update"
        sentences.append(
            f"{grad_of} {stays} because {where} rebound {name} to a new tensor computed from the leaf {name} was "
            f"until then: a non-leaf, whose gradient PyTorch does not keep."
        )
        sentences.append(f"The gradient goes to that earlier leaf, which no variable names any more.")
        leaves = view.leaves_below(tid)
        path = [tid] + leaves[:1]
        edges = view.highlight_edges(view.with_acc(path))
        fix = rebind_fix(name)
        found_cut = Cut("rebound_leaf", None, tid, name, ln, code, sentences[-2], tuple(path))
    elif not reachable:
        reasons.append("not_reachable")
        if has_grad:  # a live fact: the gradient is there, from another backward or an assignment
            shown = grad_text(node, precision) if node is not None else None
            sentences.append(
                f"{grad_of} is set{f' ({shown})' if shown else ''}, but not by {root_name}: {root_name} does not depend "
                f"on {who} through any gradient-carrying path, so {backward} adds nothing to it. Its value comes from "
                f"elsewhere (a backward from another output, or an assignment to .grad)."
            )
        else:
            sentences.append(f"{grad_of} {will} because {root_name} does not depend on {who} through any gradient-carrying path.")
        cut = traced_cut_between(view, tid, roots) if tid is not None and g.source == "trace" else None
        if cut is None and not hints.get("detached"):  # (a detached copy in memory is evidence; code is a lead)
            cut = hints.get("code_cut")
        if cut is not None:
            reasons.append(cut.kind)
            sentences.append(cut.text)
            if cut.path:
                path, edges = list(cut.path), view.highlight_edges(list(cut.path))
            found_cut = cut
        elif hints.get("detached"):
            reasons.append("cut_by_detach")
            d, src = hints["detached"][0]
            sentences.append(
                f"{d} shares memory with {src} but does not require grad: it most likely came from {src}.detach() "
                f"(or .data), which cuts the gradient path."
            )
            path = [tid] if tid else []
        elif roots and not all(view.t(r).requires_grad for r in roots):
            # The root itself has no graph: nothing reaches anything from it.
            sentences.append(
                f"{root_name} itself does not require grad (it has no grad_fn): no backward from it reaches any tensor, "
                f"so the question is where {root_name} lost its link to the parameters."
            )
            fix = (
                f"Find where {root_name} stops depending on the parameters (graphlens.explain({root_name}), or run the "
                f"code under graphlens.trace()): a detach(), torch.no_grad(), an integer result or .item() / "
                f"torch.tensor(...) on the way."
            )
            root_cut = True
        elif node is not None and view.forward_sinks(tid) and g.source == "trace":
            others = [s for s in view.forward_sinks(tid) if s not in roots and view.t(s).requires_grad]
            if others:
                reasons.append("feeds_other_root")
                sentences.append(f"{who} is used only by {', '.join(view.label(s) for s in others)}, not by {root_name}.")
                fpath = view.forward_bfs(tid, set(others))
                path, edges = fpath, view.highlight_edges(fpath)
        if len(reasons) == 1 and hints.get("sinks") and not root_cut:
            reasons.append("feeds_other_root")
            sentences.append(f"{who} feeds {', '.join(hints['sinks'])}, not {root_name}.")
            sinks = [n.id for n in g.tensors if n.name in hints["sinks"]]
            _, spath = view.bfs(sinks[:1], tid) if sinks and tid else ({}, [])
            path, edges = spath[::-1], view.highlight_edges(spath)
        if len(reasons) == 1 and not root_cut and not hints.get("unrecorded"):
            sentences.append(
                "No path in the recorded graph connects them (a snapshot sees only the backward graph): run the code "
                "under graphlens.trace() to see where the path stops."
            )
        if not is_leaf and not retains:
            reasons.append("nonleaf_not_retained")
            sentences.append(f"Even when reached, {who} is not a leaf, so PyTorch would not keep its .grad without retain_grad().")
        if root_cut:
            pass  # (the fix above)
        elif found_cut is not None and found_cut.kind in ("cut_by_integer_op", "cut_by_python_value"):
            fix = _cut_fix(found_cut, root_name)
        elif "feeds_other_root" in reasons:
            fix = f"Backpropagate the output that uses {name} too (e.g. (loss1 + loss2).backward()), or compute {root_name} from {name}."
        elif "cut_by_detach" in reasons:
            fix = f"Remove the detach() (or .data) between {name} and {root_name} if the gradient should reach {name}."
        elif "cut_by_no_grad" in reasons:
            fix = f"Move the computation that links {name} to {root_name} out of the torch.no_grad() block."
        else:
            fix = (
                f"Compute {root_name} from {name} without detach(), torch.no_grad(), integer results (argmax, "
                f"comparisons, .long()) or values taken out with .item() in between; graphlens.trace() shows which it is."
            )
        if not path and tid:
            path = [tid]
    elif not is_leaf and not retains:
        leaves = view.leaves_below(tid)
        copy_leaf = leaves[0] if len(leaves) == 1 and view.t(leaves[0]).name is None and view.t(leaves[0]).requires_grad else None
        if copy_leaf is not None:
            reasons += ["is_a_copy", "nonleaf_not_retained"]
            more, path, edges, fix = copy_answer(view, tid, node, copy_leaf, name=name, who=who, grad_of=grad_of,
                                                 stays=stays, attribute=live is not None and not is_param)
            sentences += more
        else:
            reasons.append("nonleaf_not_retained")
            op = view.o(node.op).label if node is not None and node.op else "an operation"
            sentences.append(
                f"{grad_of} {stays} because {who} is not a leaf (it was computed by {op}) and did not call retain_grad()."
            )
            sentences.append(
                f"The gradient does flow through {who} on its way to the leaves, but PyTorch keeps .grad only on leaves."
            )
            path, edges = reach_path, view.highlight_edges(reach_path)
            fix = f"Call {name}.retain_grad() before {backward}, or read the gradient with a hook or torch.autograd.grad."
    else:
        chain = view.chain(reach_path)
        path, edges = reach_path, view.highlight_edges(reach_path)
        what = "a leaf that requires grad" if is_leaf else "a non-leaf that retains its grad"
        shown = grad_text(node, precision) if node is not None else None
        if has_grad:
            reasons.append("grad_ok")
            value = f" ({shown})" if shown else ""
            sentences.append(
                f"{grad_of} is set{value}: {who} is {what}, and {root_name} reaches it through {chain}."
            )
            zero = [view.o(p).name for p in reach_path if p.startswith("op") and (view.o(p).name or "").rstrip("0123456789") in _ZERO_DERIVATIVE]
            if zero and node is not None and node.grad is not None and node.grad.max == 0 and node.grad.min == 0:
                sentences.append(
                    f"It is zero because {zero[0]} is on the path: that operation's derivative is zero almost everywhere "
                    f"(a step function), so no gradient passes it."
                )
                fix = (
                    f"Use a differentiable stand-in on the way (a straight-through estimator: y = x + (x.round() - x).detach(), "
                    f"or a smooth approximation) if the gradient should pass."
                )
                found_cut = Cut("zero_derivative", zero[0], None, None, None, None, sentences[-1])
            if node is not None and node.dtype.startswith("complex"):
                sentences.append(
                    "For a complex tensor PyTorch gives the conjugate Wirtinger derivative (the conjugate of df/dz for a "
                    "holomorphic f), the convention under which gradient descent works; it is not a bug."
                )
            changed = changed_untracked(view, reach_path) if g.source == "trace" else None
            if changed is None and hints.get("data_alias"):
                text, alias_fix = data_alias_sentence(hints["data_alias"])
                changed = (text, alias_fix, [])
            if changed is not None:
                reasons.append("modified_through_data")
                sentences.append(changed[0])
                fix = changed[1]
                path = list(path) + [p for p in changed[2] if p not in path]
            hooks = hooks_of(live) if live is not None else []
            if hooks:
                reasons.append("hook_changed_grad")
                sentences.append(hook_sentence(name, hooks))
                fix = hook_fix(name, hooks)
            if ran is None:
                sentences.append(
                    f"It holds the sum of every backward pass that reached {who} since its gradient was last cleared; "
                    f"graphlens cannot tell from the graph whether {backward} already ran (saved tensors are still "
                    f"there before a backward and after one with retain_graph=True). If it has not, {backward} will "
                    f"add to this value."
                )
        elif ran:
            node_flowed = node is not None and gradient_flowed(node)
            if is_leaf:
                reasons.append("zero_grad_set_none")
                sentences.append(
                    f"{grad_of} is None although {who} is {what}, {root_name} reaches it through {chain}, "
                    f"and backward already ran ("
                    + ("a gradient flowed into it" if node_flowed else "its graph's saved tensors are freed")
                    + ")."
                )
                in_opt = optimizer is not None and in_optimizer(optimizer, live, node)
                if in_opt:
                    sentences.append(
                        f"{who} is a parameter of the optimizer, whose zero_grad() sets .grad to None by default (set_to_none=True)."
                    )
                else:
                    sentences.append(
                        "Something reset it afterwards: most often optimizer.zero_grad() or model.zero_grad(), which set "
                        ".grad to None by default, or an explicit .grad = None."
                    )
                    if not node_flowed:
                        sentences.append(
                            "(torch.autograd.grad() and backward(inputs=...) also leave .grad untouched.)"
                        )
                fix = f"Read {name}.grad after backward and before zero_grad(); use zero_grad(set_to_none=False) to keep zeros instead."
            else:
                reasons.append("retain_grad_too_late")
                sentences.append(
                    f"{who} retains its grad but has none although backward already ran: retain_grad() was called "
                    f"after the backward, or its .grad was set to None."
                )
                fix = f"Call {name}.retain_grad() before {backward}."
        else:
            reasons.append("backward_not_run")
            if ran is False:
                sentences.append(
                    f"{grad_of} is None for now because {backward} has not run yet; {who} is {what} and will get "
                    f"its gradient through {chain}."
                )
            else:
                sentences.append(
                    f"{who} is {what} and {root_name} reaches it through {chain}, so {backward} gives it a gradient. "
                    f"Its .grad is None now: either backward has not run yet, or it ran and something (zero_grad(), "
                    f"which sets None by default) cleared the gradient since; graphlens cannot tell which from the graph."
                )
            fix = f"Call {backward}, then read {name}.grad."
    if hints.get("ctx_changed"):  # (the Function reaches the tensor: the path is intact)
        fault_op, fault_node, fix = add_ctx_change(g, hints["ctx_changed"][0], reasons, sentences)
    if optimizer is not None and requires_grad and is_leaf and not in_optimizer(optimizer, live, node):
        reasons.append("not_in_optimizer")
        sentences.append(f"Note: {who} is not among the optimizer's parameters, so optimizer.step() never updates it.")
    if not reasons:  # pragma: no cover - every branch above adds one
        reasons.append("grad_ok")
    if has_grad and reasons[0] == "not_reachable":
        reasons.insert(1, "grad_set_elsewhere")  # (the gradient is there: this root gave none of it)
    if hints.get("unrecorded"):
        reasons.append("not_recorded")
        if "not_reachable" in reasons and root_name:
            fix = (f"Ask with the trace or the loss that {name} belongs to (explain({name}, loss)): "
                   f"{root_name} of the {hints['unrecorded']} given does not use it.")
    return Explanation(
        reasons,
        sentences,
        fix=fix,
        tensor_name=node.name if node is not None else None,
        tensor_id=tid,
        graph=g,
        path=[p for p in path if p in g],
        edges=edges,
        op=found_cut.op if found_cut else (fault_op or (producer(view, node) if reasons[0] in _MADE_BY else None)),
        line=found_cut.code if found_cut else None,
        lineno=found_cut.line if found_cut else None,
        cause=found_cut.node if found_cut else fault_node,
    )


#: Reasons whose answer is about the operation that made the tensor (its ``op``).
_MADE_BY = ("nonleaf_not_retained", "is_a_copy", "rebound_leaf", "retain_grad_too_late")


#: Backward nodes whose derivative is zero almost everywhere (step functions).
_ZERO_DERIVATIVE = {"RoundBackward", "FloorBackward", "CeilBackward", "SignBackward", "TruncBackward", "FracBackward"}
