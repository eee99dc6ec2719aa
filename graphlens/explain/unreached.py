"""Why the root's backward graph never reaches a tensor: the cut on the way, a root that is a leaf, another output."""

from __future__ import annotations

from .answer import Asked, Draft
from .cuts import cut_fix, traced_cut, traced_cut_between
from .facts import grad_text
from .live import INFERENCE_LIBRARY_FIX, is_inference
from ..values import same_head

__all__ = ["not_reached", "leaf_root"]

#: Cuts whose fix :func:`cut_fix` writes (the others name the tensor and the root themselves).
_FIXED_BY_KIND = (
    "cut_by_integer_op", "cut_by_python_value", "cut_by_nondifferentiable_op", "requires_grad_set_late",
    "grad_without_create_graph", "constant_gradient", "gradient_without_graph", "cut_by_checkpoint", "frozen_parameters", "grad_disabled", "custom_fn_non_differentiable",
)


def _rewrapped(view, sinks: list[str], roots: list[str]) -> tuple[str, str] | None:
    """``(sink, leaf)``: a leaf that requires grad, reached from the roots, recorded after ``sink``
    and holding exactly its value (shape, first values, min and max): the sink's value made a new leaf."""
    reached = set(view.bfs(roots, None)[0]) if roots else set()
    for s in sinks:
        rec = view.t(s).value
        if rec is None or not rec.head:
            continue
        n = int(s[1:])
        for t in view.g.tensors:
            if (int(t.id[1:]) > n and t.is_leaf and t.requires_grad and t.id in reached and t.value is not None
                    and t.value.shape == rec.shape and same_head(t.value.head, rec.head) and t.value.min == rec.min
                    and t.value.max == rec.max):
                return s, t.id
    return None


def _twin(view, r: str) -> str | None:
    """A tensor recorded before the leaf root ``r`` that holds exactly its value (shape, first
    values, min and max): the value the root was made from."""
    rec = view.t(r)
    if rec.value is None or not rec.value.head:
        return None
    n = int(r[1:])
    for t in reversed(view.g.tensors):
        if int(t.id[1:]) < n and t.value is not None and t.value.shape == rec.value.shape and same_head(t.value.head, rec.value.head) \
                and t.value.min == rec.value.min and t.value.max == rec.value.max and not t.requires_grad:
            return t.id
    return None


def leaf_root(a: Asked, d: Draft):
    """The root is a leaf that requires grad: backward from it reaches nothing but itself.
    How it became one is known from a trace (``made_by``, or the tensor without graph whose
    value it holds, and where that one lost its graph: the cut returned) or read from the
    code (a lead)."""
    view = a.view
    r = a.roots[0]
    rname = view.label(r)
    d.reasons.append("leaf_root")
    d.fact(r, "is_leaf", True)
    d.fact(r, "requires_grad", True)
    d.sentences.append(
        f"{rname} is a leaf that requires grad: it has no grad_fn, so {rname}.backward() reaches nothing but {rname} "
        f"itself (it only fills {rname}.grad) and no gradient can flow from it to {a.who}."
    )
    rec = view.t(r)
    lead = a.hints.get("leaf_root")
    if rec.made_by is not None:
        where = f" at line {rec.line} ({rec.code})" if rec.line else ""
        d.sentences.append(
            f"It was made by torch.{rec.made_by}{where}, which copies a value into a new tensor: requires_grad=True then "
            f"makes a new leaf, it does not bring back the graph the value was computed with."
        )
    elif a.traced and (twin := _twin(view, r)) is not None:
        d.fact(twin, "requires_grad", False)
        d.sentences.append(
            f"It holds exactly the value of {view.label(twin)}, which does not require grad: a new leaf made from that "
            f"value (Variable(..., requires_grad=True), torch.tensor(...), or requires_grad set on it) does not bring "
            f"back the graph the value was computed with."
        )
        found = traced_cut(view, twin)
        if found is not None:
            return found
    elif lead is not None:
        ln, code, how = lead
        did = ("makes a new leaf from a value" if how == "created" else
               "switches requires_grad on for a value that has no graph behind it")
        d.sentences.append(
            f"graphlens read your code: line {ln} ({code}) {did}; that makes {rname} a leaf, it does not bring back "
            f"the graph the value was computed with."
        )
    d.fix = (
        f"Compute {rname} with torch operations from the model's output (no .item(), .data, .detach(), .numpy() or "
        f"torch.tensor(...) on the way) and drop the requires_grad=True: a loss that has a graph needs no flag, and one "
        f"that has none is not given one by the flag."
    )
    live = view.g.tensor(r)
    if live is not None and is_inference(live):
        d.reasons.append("created_in_no_grad")
        d.sentences.append(
            f"{rname} is an inference tensor: it was computed under torch.inference_mode() (a with block, or a "
            f"@torch.inference_mode() decorator on the function that computed it), which records no graph at all; "
            f"setting requires_grad on the result cannot bring one back."
        )
        d.fix = (
            f"Compute {rname} outside torch.inference_mode(): remove the decorator or the with block around the code that "
            f"trains (use torch.no_grad() only around the parts that need no gradient), then drop requires_grad_(True)."
            + INFERENCE_LIBRARY_FIX
        )


def not_reached(a: Asked, d: Draft) -> None:
    """The root's backward graph does not reach the tensor: say what cut it off, when known."""
    view, g, tid, name, who, root_name = a.view, a.view.g, a.tid, a.name, a.who, a.root_name
    if not a.traced and any((o.name or "").startswith("CheckpointFunctionBackward") for o in g.ops):
        # (a reentrant checkpoint's backward recomputes its function: what that reaches is in no graph to read)
        d.reasons.append("through_checkpoint")
        d.sentences.append(
            f"{root_name}'s graph goes through the reentrant torch.utils.checkpoint (CheckpointFunctionBackward): its "
            f"backward runs the checkpointed function again and backpropagates through that new graph, which does not "
            f"exist yet, so whether {root_name} reaches {who} through it cannot be read from the graph"
            + (f" ({a.grad_of} is set now: some backward reached it)." if a.has_grad else "."))
        d.fix = ("Ask with a trace (with graphlens.trace() as tr: ... then graphlens.explain(..., tr)); with "
                 "use_reentrant=False the checkpointed part is in the graph and can be read.")
        return
    base = len(d.reasons)
    d.reasons.append("not_reachable")
    d.fact(tid, "reached", False)
    if a.has_grad:  # a live fact: the gradient is there, from another backward or an assignment
        shown = grad_text(a.node, a.precision) if a.node is not None else None
        d.sentences.append(
            f"{a.grad_of} is set{f' ({shown})' if shown else ''}, but not by {root_name}: {root_name} "
            f"{'do not depend' if len(a.roots) > 1 else 'does not depend'} "
            f"on {who} through any gradient-carrying path, so {a.backward} adds nothing to it. Its value comes from "
            f"elsewhere (a backward from another output, or an assignment to .grad)."
        )
    else:
        verb = "do not depend" if len(a.roots) > 1 else "does not depend"
        d.sentences.append(f"{a.grad_of} {a.will} because {root_name} {verb} on {who} through any gradient-carrying path.")
    leaf_fix = twin_cut = None
    if a.root_is_leaf():
        twin_cut = leaf_root(a, d)
        leaf_fix, d.fix = d.fix, None
    cut = traced_cut_between(view, tid, a.roots) if tid is not None and a.traced else None
    cut = cut or twin_cut
    code = a.hints.get("code_cut")
    if cut is None and (not a.hints.get("detached") or (code is not None and code.kind == "requires_grad_set_late")):
        # (a detached copy in memory is evidence, code a lead; but a flag set after the forward makes
        # that detach() the correct idiom, not the cut)
        cut = code
    named = len(d.reasons)
    if cut is not None:
        d.add_cut(cut)
        if cut.path:
            d.path, d.edges = list(cut.path), view.highlight_edges(list(cut.path))
    elif a.hints.get("detached"):
        d.reasons.append("cut_by_detach")
        det, src = a.hints["detached"][0]
        d.sentences.append(
            f"{det} shares memory with {src} but does not require grad: it most likely came from {src}.detach() "
            f"(or .data), which cuts the gradient path."
        )
        d.path = [tid] if tid else []
    elif a.roots and not all(view.t(r).requires_grad for r in a.roots):
        # The root itself has no graph: nothing reaches anything from it.
        d.facts.extend((r, "requires_grad", False) for r in a.roots)
        d.sentences.append(
            f"{root_name} itself does not require grad (it has no grad_fn): no backward from it reaches any tensor, "
            f"so the question is where {root_name} lost its link to {who}."
        )
        d.fix = (
            f"Find where {root_name} stops depending on {name} (graphlens.explain({root_name}), or run the code under "
            f"graphlens.trace()): a detach(), torch.no_grad(), an integer result or .item() / torch.tensor(...) on the way."
        )
        d.root_cut = True
    elif a.node is not None and view.forward_sinks(tid) and a.traced:
        others = [s for s in view.forward_sinks(tid) if s not in a.roots and view.t(s).requires_grad]
        wrapped = _rewrapped(view, others, a.roots) if others else None
        if wrapped is not None:
            sink, leaf = wrapped
            d.reasons.append("rewrapped_as_leaf")
            d.facts.extend(((leaf, "is_leaf", True), (leaf, "requires_grad", True)))
            d.sentences.append(
                f"{who} is used only by {view.label(sink)}, whose value {root_name} uses as {view.label(leaf)}: a leaf that "
                f"holds exactly that value but has no history (made from it by nn.Parameter(...), torch.tensor(...) or a "
                f"copy), so the gradient stops at {view.label(leaf)}.")
            d.fix = (f"Use {view.label(sink)} itself where {view.label(leaf)} is used (a weight computed by another network "
                     f"is a plain tensor passed to a functional call, e.g. F.linear(x, w), not an nn.Parameter assigned to "
                     f"a module); wrapping it in nn.Parameter makes a new leaf each time.")
            fpath = view.forward_bfs(tid, {sink})
            d.path, d.edges = fpath + [leaf], view.highlight_edges(fpath)
            d.root_cut = True  # (the fix above)
            others = []
        if others:
            d.reasons.append("feeds_other_root")
            d.sentences.append(f"{who} is used only by {', '.join(view.label(s) for s in others)}, not by {root_name}.")
            fpath = view.forward_bfs(tid, set(others))
            d.path, d.edges = fpath, view.highlight_edges(fpath)
    if len(d.reasons) == named and a.hints.get("sinks") and not d.root_cut and "leaf_root" not in d.reasons:
        d.reasons.append("feeds_other_root")
        d.sentences.append(f"{who} feeds {', '.join(a.hints['sinks'])}, not {root_name}.")
        sinks = [n.id for n in g.tensors if n.name in a.hints["sinks"]]
        _, spath = view.bfs(sinks[:1], tid) if sinks and tid else ({}, [])
        d.path, d.edges = spath[::-1], view.highlight_edges(spath)
    if len(d.reasons) == base + 1 and not d.root_cut and a.traced and tid is not None:
        _unused_output(a, d)
    if len(d.reasons) == base + 1 and not d.root_cut and not a.hints.get("unrecorded"):
        d.sentences.append(
            "No operation the trace recorded links them." if a.traced else
            "No path in the recorded graph connects them (a snapshot sees only the backward graph): run the code "
            "under graphlens.trace() to see where the path stops."
        )
    if not a.is_leaf and not a.retains:
        d.reasons.append("nonleaf_not_retained")
        d.fact(tid, "is_leaf", False)
        d.sentences.append(f"Even when reached, {who} is not a leaf, so PyTorch would not keep its .grad without retain_grad().")
    found = d.cut
    if d.root_cut:
        pass  # (the fix above)
    elif leaf_fix is not None and found is None:
        d.fix = leaf_fix
    elif found is not None and found.kind in _FIXED_BY_KIND:
        d.fix = cut_fix(found, root_name)
    elif "unused_output" in d.reasons:
        d.fix = (
            f"Nothing is wrong if {name} is not needed: an output {root_name} does not use gets no gradient. If it should "
            f"train the model, compute {root_name} from {name} too (e.g. add a term that uses it)."
        )
    elif "feeds_other_root" in d.reasons:
        d.fix = f"Backpropagate the output that uses {name} too (e.g. (loss1 + loss2).backward()), or compute {root_name} from {name}."
    elif "cut_by_detach" in d.reasons:
        d.fix = f"Remove the detach() (or .data) between {name} and {root_name} if the gradient should reach {name}."
    elif "cut_by_no_grad" in d.reasons:
        d.fix = f"Move the computation that links {name} to {root_name} out of the torch.no_grad() block."
    else:
        d.fix = (
            f"Compute {root_name} from {name} without detach(), torch.no_grad(), integer results (argmax, "
            f"comparisons, .long()) or values taken out with .item() in between"
            + ("." if a.traced else "; graphlens.trace() shows which it is.")
        )
    if leaf_fix is not None and d.fix != leaf_fix:
        root = view.label(a.roots[0])
        d.fix += f" Then drop the requires_grad=True on {root}: a loss that has a graph needs no flag."
    if not d.path and tid:
        d.path = [tid]


def _unused_output(a: Asked, d: Draft) -> None:
    """The tensor is one output of a call whose other outputs the roots use, and no recorded
    operation takes it (an LSTM's final state ``hn`` beside ``out``): the root does not use it."""
    view, tid, node = a.view, a.tid, a.node
    adj = view.adj
    if node is None or node.op is None or adj.consumers.get(tid) or adj.detached.get(tid):
        return
    op = view.o(node.op)
    siblings = [t for t in adj.outputs.get(node.op, ()) if t != tid]
    parents, _ = view.bfs(a.roots)
    used = [t for t in siblings if t in parents]
    if not used:
        return
    d.reasons.append("unused_output")
    for t in used:
        d.fact(t, "reached", True)
    where = f" at line {op.line} ({op.code})" if op.line and op.code else ""
    names = ", ".join(view.label(t) for t in used)
    d.sentences.append(
        f"{a.who} is an output of {op.forward or op.label}{where} that {a.root_name} does not use: {a.root_name} was "
        f"computed from {names}, {'another output' if len(used) == 1 else 'other outputs'} of the same call, and no "
        f"operation the trace recorded takes {a.who} as input."
    )
    d.path = [tid, node.op] + used
    d.edges = view.highlight_edges([tid, node.op])
