"""Errors around the optimizer: a non-leaf given to it, and a step() that changed parameters a later backward still needed."""

from __future__ import annotations

import ast
import linecache
import re
from typing import Any

import torch

from .._live.facts import dtype_name, read_saved
from .._live.guard import node_unsafe
from ..graph import MODIFIED, OpNode
from .context import Context, as_code, assignment_line, root_label
from .live import find_live
from .paths import PathView
from .types import Explanation

__all__ = ["optimizer_nonleaf", "modified_parameter", "ParameterChange", "step_lines", "parameter_fix", "stale_parameter"]

#: Backward nodes of views, between a node that saved a view of a parameter and the
#: parameter's AccumulateGrad (``addmm`` saves ``weight.t()``: TBackward0).
_VIEW_NODES = ("TBackward0", "TransposeBackward0", "PermuteBackward0", "ViewBackward0", "ReshapeAliasBackward0",
               "ExpandBackward0", "AsStridedBackward0", "UnsqueezeBackward0", "SqueezeBackward0", "SqueezeBackward1",
               "SliceBackward0", "SelectBackward0", "UnsafeViewBackward0", "AliasBackward0")


def optimizer_nonleaf(message, match, g, trace, ctx: Context) -> Explanation:
    t = ctx.torch_local("add_param_group", "param")
    t = t if isinstance(t, torch.Tensor) else None
    names = [n for n, c in ctx.candidates if t is not None and c is t]
    name = names[0] if names else None
    made = type(t.grad_fn).__name__ if t is not None and t.grad_fn is not None else None
    who = name or "one of the tensors given to it"
    at, text = assignment_line(ctx.frame, ctx.lineno, name) if name and name.isidentifier() else (None, None)
    copy = bool(made) and made.startswith(("ToCopy", "Clone", "CopyBackwards", "Copy"))
    how = (
        f"a copy made by {made} (.to(), .cuda(), .float() or clone() of a tensor that requires grad)" if copy else
        f"computed by {made} from a tensor that requires grad" if made else "computed from a tensor that requires grad"
    )
    sentences = [
        f"The optimizer was given {who}, which is not a leaf: it is {how}, an intermediate result of a graph. "
        f"An optimizer updates leaves, the tensors whose .grad backward fills, so it refuses."
    ]
    if text:
        sentences.append(f"{name} is made at line {at}: {text}.")
    base = _leaves_below(t.grad_fn) if made else []
    bname = _leaf_name(ctx, base[0]) if len(base) == 1 else None
    if len(base) == 1:
        leaf = bname or f"a leaf of shape {list(base[0].shape)} that no variable graphlens can see holds"
        sentences.append(f"It is computed from one leaf that requires grad, {leaf}: that leaf is what backward fills and "
                         f"an optimizer can update.")
    remade = _as_leaf(text, name) if text else None
    if len(base) == 1 and not remade and not copy:  # (a copy is better made as the leaf: the fix below)
        x = name or "the tensor"
        where = bname or "the leaf (where your code or a library keeps it: for a constrained or transformed parameter, the unconstrained one)"
        fix = (f"Give the optimizer {where}, and compute {x} from it again after each step, so the update reaches {x}; "
               f"making {x} a leaf of its own (detach().requires_grad_()) would train a copy that nothing computed from "
               f"that leaf reads.")
    elif remade:
        fix = (f"Make {name} the leaf itself: {remade} (the arithmetic or copy first, then requires_grad), or give the "
               f"optimizer the leaf {name} is computed from.")
    else:
        x = name or "t"
        fix = (f"Give the optimizer leaves: create the tensor as it should be (on its device, scaled) and only then make "
               f"it require grad ({x} = (torch.randn(...) * 0.01).requires_grad_(), torch.zeros(..., device=device, "
               f"requires_grad=True)), or {x} = {x}.detach().requires_grad_() if its history is not needed.")
    return Explanation(["optimizer_nonleaf"], sentences, fix=fix, tensor_name=name, graph=g, message=message, op=made,
                       line=text or ctx.line or None, lineno=at or ctx.lineno)


def _leaf_name(ctx: Context, leaf: torch.Tensor) -> str | None:
    """The name the user's frames give ``leaf``: a variable holding it, else a parameter of a module
    they hold (``model.weight_hh_l0_raw``, ``net[0].weight``)."""
    name = next((n for n, c in ctx.candidates if c is leaf), None)
    if name is not None:
        return name
    for mname, m in ctx.objects(object):
        if isinstance(m, torch.nn.Module):
            for pname, p in m.named_parameters(recurse=False):
                if p is leaf:
                    return as_code(f"{mname}.{pname}")  # (model.0.weight -> model[0].weight)
    return None


def _leaves_below(fn: Any, limit: int = 500) -> list[torch.Tensor]:
    """The distinct leaves that require grad below backward node ``fn`` (their AccumulateGrad variables)."""
    out: list[torch.Tensor] = []
    stack, seen = [fn], set()
    while stack and len(seen) < limit:
        f = stack.pop()
        if f is None or id(f) in seen:
            continue
        seen.add(id(f))
        if type(f).__name__ == "AccumulateGrad":
            v = f.variable
            if all(v is not o for o in out):
                out.append(v)
            continue
        stack.extend(c for c, _ in f.next_functions)
    return out


def _as_leaf(code: str, name: str) -> str | None:
    """``name = (<value without requires_grad=True>).requires_grad_()`` for an assignment
    ``code`` whose value creates a tensor with ``requires_grad=True`` and then computes on
    it (``torch.randn(3, requires_grad=True) * 0.01``, ``torch.ones(2, requires_grad=True).to(d)``)."""
    try:
        node = ast.parse(code.strip()).body[0]
    except (SyntaxError, ValueError, IndexError):
        return None
    if not isinstance(node, ast.Assign):
        return None
    found = False
    for call in ast.walk(node.value):
        if isinstance(call, ast.Call):
            keep = [k for k in call.keywords if not (k.arg == "requires_grad" and isinstance(k.value, ast.Constant) and k.value.value is True)]
            if len(keep) != len(call.keywords):
                call.keywords = keep
                found = True
    if not found:
        return None
    return f"{name} = ({ast.unparse(node.value)}).requires_grad_()"


# -- a parameter that an in-place change made stale -----------------------------------------------
class ParameterChange:
    """What is known of a parameter named in an in-place error: the live leaf, its name,
    the optimizers holding it (and whether they have state for it: they have stepped),
    and the ``opt.step()`` lines of the failing function before the failing line."""

    def __init__(self, param: torch.Tensor, name: str | None, optimizers: list[tuple[str, Any, bool]],
                 steps: list[tuple[int, str]], nodes: list[Any]) -> None:
        self.param, self.name = param, name
        self.nodes = nodes  # the live backward nodes that saved it (a view of it)
        self.optimizers = optimizers  # (name, optimizer, has state for the parameter)
        self.steps = steps  # (line, text) of "<optimizer>.step()" before the failing line
        self.others: list[str] = []  # other parameters that fit the message as well (each stepped too)
        self.fresh: list[Any] = []  # nodes of the same graph that saved it at its current version (a later forward)


def modified_parameter(ctx: Context, shape: tuple, dtype: str, ver: int, producer: str | None = None) -> ParameterChange | None:
    """The parameter (a leaf that requires grad) an in-place error describes: a leaf reached
    from a node of the failed backward's graph whose saved tensor was modified (through the
    view it saved, ``weight.t()``), at the message's version and of its shape (or that
    shape transposed); None when not exactly one fits, when the message names a producer
    that is no view (the tensor was computed: ``output 0 of ReluBackward0``), or when a
    tensor of the raising frame that is no such leaf (computed, or data) fits the message as well."""
    if producer and producer.split("Backward")[0] not in {v.split("Backward")[0] for v in _VIEW_NODES}:
        return None
    if any(not (t.is_leaf and t.requires_grad) and _fits(t, shape, dtype, ver) for _, t in ctx.candidates):
        return None
    found: list[torch.Tensor] = []
    nodes: list[Any] = []
    stack = [t.grad_fn for t in ctx.root if t.grad_fn is not None]
    seen: set[int] = set()
    while stack and len(seen) < 100_000:
        fn = stack.pop()
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        if type(fn).__name__ != "AccumulateGrad" and any(e.state is MODIFIED for e in read_saved(fn)[0]):
            for leaf in _leaves_near(fn):
                if _fits(leaf, shape, dtype, ver):
                    nodes.append((leaf, fn))
                    if all(leaf is not f for f in found):
                        found.append(leaf)
        stack.extend(c for c, _ in fn.next_functions if c is not None)
    if not found or len(found) > 4:  # (without the failed graph, a variable that happens to fit would be a guess)
        return None

    def name_of(q: torch.Tensor) -> str | None:
        names = [n for n, c in ctx.candidates if c is q]
        return max(names, key=lambda n: (n.count("."), -len(n))) if names else None  # D.2.weight over a loop's p

    def held_by(q: torch.Tensor) -> list[tuple[str, Any, bool]]:
        return [(oname, opt, bool(opt.state.get(q))) for oname, opt in ctx.objects(torch.optim.Optimizer)
                if any(r is q for group in opt.param_groups for r in group["params"])]

    if len(found) > 1 and not all(any(h[2] for h in held_by(q)) for q in found):
        return None  # (several fit, and not every one was stepped: which one changed is not known)
    p = found[0]
    optimizers = held_by(p)
    steps = step_lines(ctx, [o[0] for o in optimizers]) if optimizers else []
    change = ParameterChange(p, name_of(p), optimizers, steps, [fn for leaf, fn in nodes if leaf is p])
    change.others = [name_of(q) or f"a parameter of shape {list(q.shape)}" for q in found[1:]]
    change.fresh = _saved_now(ctx, p, change.nodes)
    return change


def _saved_now(ctx: Context, p: torch.Tensor, stale: list) -> list:
    """The nodes of the failed backward's graph that saved ``p`` (near it, as its view) and read
    fine: a forward after the in-place change used it, so the graph holds two forward passes."""
    stack, seen, out = [t.grad_fn for t in ctx.root if t.grad_fn is not None], set(), []
    stale_ids = {id(fn) for fn in stale}
    while stack and len(seen) < 100_000:
        fn = stack.pop()
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        if id(fn) not in stale_ids and type(fn).__name__ != "AccumulateGrad" and any(leaf is p for leaf in _leaves_near(fn)):
            entries = read_saved(fn)[0]
            if entries and all(e.state is not MODIFIED for e in entries) and any(e.summary is not None for e in entries):
                out.append(fn)
        stack.extend(c for c, _ in fn.next_functions if c is not None)
    return out


def _carrier(ctx: Context, stale: list) -> str | None:
    """``net.lstm.hidden_state and net.lstm.cell_state``: the tensors a module of the frames keeps as
    attributes whose graph reaches one of the ``stale`` nodes (an earlier iteration's), the state
    carried between calls (every one of them: detaching some leaves the link)."""
    goals = {id(fn): fn for fn in stale}
    found: list[str] = []
    for mname, m in ctx.objects(object):
        if not isinstance(m, torch.nn.Module):
            continue
        for sub, mod in list(m.named_modules())[:256]:
            for attr, t in list(vars(mod).items())[:64]:
                if attr.startswith("__") or not isinstance(t, torch.Tensor) or isinstance(t, torch.nn.Parameter) or node_unsafe(t):
                    continue  # (a retained view changed in place: reading its node would move its retain_grad hook)
                try:
                    fn = t.grad_fn
                except RuntimeError:
                    continue
                path = ".".join(x for x in (mname, sub, attr) if x)
                if fn is not None and path not in found and (id(fn) in goals or _reaches(fn, goals)):
                    found.append(path)
        if found:
            break  # (the first module that carries it; its submodules were searched with it)
    return " and ".join(as_code(q) for q in found) if found else None


def _reaches(fn: Any, goals: dict, limit: int = 5_000) -> bool:
    stack, seen = [fn], set()
    while stack and len(seen) < limit:
        f = stack.pop()
        if id(f) in goals:
            return True
        if id(f) in seen:
            continue
        seen.add(id(f))
        stack.extend(c for c, _ in f.next_functions if c is not None)
    return False


def _leaves_near(fn: Any, depth: int = 3) -> list[torch.Tensor]:
    out = []
    frontier = [fn]
    for _ in range(depth):
        nxt = []
        for f in frontier:
            for c, _ in f.next_functions:
                if c is None:
                    continue
                name = type(c).__name__
                if name == "AccumulateGrad":
                    out.append(c.variable)
                elif name in _VIEW_NODES:
                    nxt.append(c)
        frontier = nxt
    return out


def _fits(t: torch.Tensor, shape: tuple, dtype: str, ver: int) -> bool:
    if t._version != ver or dtype_name(t.dtype) != dtype:
        return False
    own = tuple(t.shape)
    return own == shape or (len(own) == 2 and own[::-1] == shape)


def step_lines(ctx: Context, optimizers: list[str]) -> list[tuple[int, str]]:
    """``(line, text)`` of the calls ``<optimizer>.step()`` in the failing function, before
    the failing line: read from the code."""
    if ctx.frame is None or not ctx.lineno:
        return []
    code = ctx.frame.f_code
    lines = linecache.getlines(code.co_filename)
    names = "|".join(re.escape(n) for n in optimizers)
    pattern = re.compile(rf"(?<![\w.])(?:{names})\.step\(")
    return [(ln, lines[ln - 1].strip()) for ln in range(code.co_firstlineno, min(ctx.lineno, len(lines) + 1))
            if pattern.search(lines[ln - 1].split("#")[0])]


def parameter_fix(change: ParameterChange, root: str, saver: str | None, stepped: str | None, downstream: str | None) -> str:
    """The fix of an in-place error on a parameter: the order of the steps (or a new forward)."""
    p = change.name or "the parameter"
    if stepped:
        module = p.split(".")[0] if "." in p else None  # the network the parameter belongs to (D of D.2.weight)
        through = f" through {module}" if module else ""
        again = f" ({downstream} = ... again)" if downstream else ""
        return (f"Recompute the forward{through} after {stepped}.step(){again}, so that {root} is built from the updated "
                f"weights; or change the order (call {root}.backward() before {stepped}.step()), but then {root}'s gradient "
                f"is added to the .grad of {stepped}'s parameters too, and the step applies it with the other loss's "
                f"(an actor's loss through a critic moves the critic): only if that is meant. Keeping the graph does not "
                f"help, the weights themselves changed.")
    return (f"Make the change to {p} after every backward that needs its old values (or recompute the forward after the "
            f"change); under torch.no_grad() a parameter's in-place update is not recorded, so the graph built before it "
            f"cannot be used afterwards.")


def stale_parameter(message, gr, ctx: Context, change: ParameterChange, savers: list[OpNode], shape: tuple,
                    ver: int, exp: int, *, changes_in_place, lead: tuple[int | None, str | None] = (None, None)) -> Explanation:
    """An in-place error on a parameter: who changed it (a trace's record of the in-place op,
    else the optimizers holding it and the code's ``opt.step()`` lines), and the fix of the order."""
    p = change.name or f"a parameter of shape {list(change.param.shape)}"
    view = PathView(gr) if gr is not None else None
    near = {type(n).__name__ for n in change.nodes}  # (a node whose saved tensor of unknown shape was modified too, a
    savers = [o for o in savers if o.name in near] or savers  # stepped BatchNorm weight, did not save this parameter)
    saver = ", ".join(dict.fromkeys([o.label for o in savers] or [type(n).__name__ for n in change.nodes])) or None
    as_view = f" (as its transpose, {p}.t())" if tuple(change.param.shape) != shape else ""
    root = root_label(gr, ctx)
    kind = "a parameter (a leaf that requires grad)" if isinstance(change.param, torch.nn.Parameter) else "a leaf that requires grad"
    sentences = [
        f"{p} is {kind}. It was saved for backward{' by ' + saver if saver else ''}"
        f"{as_view} at version {exp} and is at version {ver} now: it was changed in place after the forward used it. "
        f"A leaf that requires grad can be changed in place only while gradients are off (torch.no_grad()): an "
        f"optimizer's step(), a hand-written update, clamp_() or copy_()."
    ]
    reasons = ["inplace_saved"]
    line = lineno = None
    stepped = None
    cause = None
    # What the trace saw change it: an in-place op on its record, at the line that ran it.
    tid = find_live(gr, change.param) if gr is not None and gr.source == "trace" else None
    if view is not None and tid is not None:
        same = [t.id for t in gr.tensors if t.id == tid or (change.name and t.name == change.name)]
        ops = [view.o(c) for t in same for c in view.adj.consumers.get(t, ()) if changes_in_place(view, c, t)]
        ops = [o for o in ops if o.line is not None]
        if ops:
            o = ops[-1]
            m = re.search(r"([A-Za-z_][\w.]*)\.step\(", o.code or "")
            stepped = m.group(1) if m else None
            line, lineno, cause = o.code, o.line, o.id
            sentences.append(f"The trace saw {o.forward} change {p} in place at line {o.line}"
                             + (f" ({o.code})." if o.code else "."))
    if stepped is None and line is None:
        held = change.optimizers
        if len(held) == 1 or (held and change.steps):
            oname, _, has_state = next((h for h in held if any(h[0] + ".step(" in t for _, t in change.steps)), held[0])
            before = [s for s in change.steps if oname + ".step(" in s[1]]
            facts = []
            if before:
                lineno, line = before[-1]
                facts.append(f"graphlens read your code: line {lineno} ({line}) runs before this backward")
            if has_state:
                facts.append(f"{oname} holds state for {p}, so it has stepped")
            if facts:
                stepped = oname
                sentences.append(f"{p} is one of {oname}'s parameters, and {oname}.step() updates them in place; "
                                 + "; ".join(facts) + ".")
            else:
                sentences.append(f"{p} is one of {oname}'s parameters: if {oname}.step() ran between the forward and this "
                                 f"backward, it is what changed {p}.")
    if stepped is None and line is None and lead[1]:
        lineno, line = lead
        sentences.append(f"graphlens read your code: line {lineno} ({line}) changes {p} in place; it is the likely culprit.")
    if change.others:
        sentences.append(f"{', '.join(change.others)} {'fits' if len(change.others) == 1 else 'fit'} the message as well "
                         f"(the same shape, dtype and version), and {'its' if len(change.others) == 1 else 'each'} "
                         f"optimizer holds state for {'it' if len(change.others) == 1 else 'them'}: "
                         f"{'it was' if len(change.others) == 1 else 'they were'} stepped too, and the graph saved "
                         f"{'it' if len(change.others) == 1 else 'them'} as well.")
    if stepped:
        reasons.append("optimizer_step_inplace")
        sentences.append(f"{root}.backward() goes back through the graph built with the old values of {p}, and those "
                         f"values are gone.")
    carried = None
    if change.fresh and (stepped or line):
        # (the same graph also saved it at its current version: the forward after the change ran, and the old node
        # belongs to an earlier iteration's graph that something carried over still links to)
        carried = _carrier(ctx, change.nodes) or "a tensor carried over from an earlier iteration (a hidden state, a running value)"
        reasons.append("carried_state")
        fresh = ", ".join(dict.fromkeys(type(n).__name__ for n in change.fresh))
        sentences.append(
            f"{root}'s graph also holds {fresh} that saved {p} at its current version: the forward after that change did "
            f"use the new values. The node that saved version {exp} belongs to an earlier iteration's graph, which {root} "
            f"still reaches through {carried}; that old graph's saved tensors were kept (a backward with "
            f"retain_graph=True keeps them), so backward finds them out of date instead of freed.")
    downstream = _downstream(ctx, change.nodes, root)
    return Explanation(
        reasons, sentences, tensor_name=change.name, tensor_id=tid, graph=gr, message=message,
        path=[x for x in [tid] + [o.id for o in savers] if x], op=saver.split(", ")[0] if saver else None,
        line=line, lineno=lineno, cause=cause or (savers[0].id if savers else None),
        fix=(parameter_fix(change, root if root != "the output" else "the second loss", saver, stepped, downstream)
             + (f" The same holds for {', '.join(change.others)}: every step that changes a parameter this backward needs "
                f"must come after it." if change.others else "")) if carried is None else
        ("Detach the carried state once per iteration, after the step ("
         + "; ".join(f"{c} = {c}.detach()" for c in carried.replace("`", "").split(" and "))
         + (", every one of them" if " and " in carried else "") + ", or the model's own detach call), so that each "
         "backward ends at the current iteration; retain_graph=True is then not needed."
         if not carried.startswith("a tensor") else
         "Detach what is carried from one iteration to the next (a hidden state: h = h.detach()) once per iteration, "
         "after the step, so that each backward ends at the current iteration; retain_graph=True is then not needed."),
    )


def _downstream(ctx: Context, nodes: list, root: str) -> str | None:
    """The variable of the raising frame closest after the saving node (``prob_artist1 = D(...)``):
    what to compute again after the step."""
    best = None
    for n, t in ctx.candidates:
        if n == root or not isinstance(t, torch.Tensor) or t.grad_fn is None or "." in n or "[" in n:
            continue
        fn, depth = t.grad_fn, 0
        frontier = [fn]
        for depth in range(6):
            if any(f is n for f in frontier for n in nodes):
                if best is None or depth < best[0]:
                    best = (depth, n)
                break
            frontier = [c for f in frontier for c, _ in f.next_functions if c is not None][:64]
    return best[1] if best else None
