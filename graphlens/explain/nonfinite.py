"""Why a value or a gradient is NaN or infinite: where the first non-finite number appeared, and why.

Read from a trace's records only: the forward pass first (the first op, in program order, among
the ops a value was computed from, whose output was not finite), then backward (the first node,
in the order PyTorch's engine ran them, that sent a non-finite gradient while what arrived was
finite).  A gradient that an optimizer step turned into a non-finite parameter is followed back
to the backward pass that made it.  Where the records show no origin (a value changed after the
trace saw it, a ``.grad`` assigned by hand), the answer says so and guesses nothing.  Without a
trace it says only where the NaN is and which leaves of the graph hold one.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ..graph import Graph, TensorNode
from ..values import Summary, format_number
from .nonfinite_causes import Links, bad, backward_cause, base, forward_cause, index, kind, safe_where_fix, value_at
from .types import NONFINITE_REASONS, Explanation

if TYPE_CHECKING:  # pragma: no cover
    from ..replay import Replay, Step

__all__ = ["explain_nonfinite", "explain_failed_node", "NONFINITE_REASONS", "nonfinite_in"]

#: The reason codes of this module are :data:`graphlens.explain.types.NONFINITE_REASONS` (part of GRAD_REASONS).
_GUARD = ("Guard the step too: skip optimizer.step() when a gradient is not finite (check torch.isfinite(p.grad).all() "
          "for each parameter); clipping cannot remove an inf or a NaN.")


#: Forward ops that use only some elements of their input: a 0 gradient elsewhere is theirs.
_SELECTING = frozenset({
    "nll_loss", "nll_loss_nd", "nll_loss2d", "cross_entropy", "getitem", "index", "index_select", "gather", "select",
    "narrow", "take", "take_along_dim", "masked_select", "max", "min", "amax", "amin", "topk", "sort", "kthvalue",
    "median", "where", "masked_fill", "slice", "embedding", "max_pool2d", "max_pool1d", "adaptive_max_pool2d",
})


def nonfinite_in(node: TensorNode) -> str | None:
    """Which of ``node``'s records holds NaN or infinity: ``"value"``, ``"grad"`` or
    ``"flowed"`` (a gradient that passed through it), else None."""
    if bad(node.value):
        return "value"
    if bad(node.grad):
        return "grad"
    if any(bad(f) for f in node.flowed):
        return "flowed"
    return None


def _at(s: Summary | None) -> tuple[int | None, Any]:
    """The flat position of the first non-finite element of ``s`` and its value (None where unread)."""
    at = s.nonfinite_at if s is not None else None
    v = s.head[at] if s is not None and s.head and at is not None and at < len(s.head) else None
    return at, v


def _infinite(v: Any) -> bool:
    """Whether ``v`` is a NaN or an infinity (a number; False for anything else)."""
    if type(v) is complex:
        return not (math.isfinite(v.real) and math.isfinite(v.imag))
    return type(v) is float and not math.isfinite(v)


def _is(subject: str, s: Summary | None, shape: tuple) -> str:
    """``loss is NaN`` or ``out is inf at out[1]``."""
    at, v = _at(s)
    pos = index(shape, at)
    return f"{subject} is {kind(v)}" + (f" at {subject}{pos}" if pos else "")


def _where(line: int | None, code: str | None) -> str:
    return f" at line {line} ({code})" if line and code else (f" at line {line}" if line else "")


def _values(g: Graph, links: Links, op_id: str, at: int | None, shape: tuple) -> str:
    """``, where x[0] = 0`` for the inputs of ``op_id`` readable at position ``at`` of an output of ``shape``."""
    pos = index(tuple(shape), at)
    division = base(g.node(op_id).forward) in ("div", "truediv", "true_divide", "divide")
    inputs = list(dict.fromkeys(links.forward_inputs(op_id)))
    out = []
    for k, t in enumerate(inputs):
        tn = g.node(t)
        v = value_at(tn.value, at, tuple(shape))
        if v is None:
            continue
        label = links.label(t) + (pos if tuple(tn.shape) == tuple(shape) else "")
        if division:  # (an unnamed operand is just the numerator, the denominator)
            label = ("the numerator" if k == 0 else "the denominator") + (f" {label}" if tn.name else "")
        out.append(f"{label} = {format_number(v, 6)}")
    return f", where {', '.join(out)}" if out else ""


def _path(links: Links, src: str, dst: str) -> tuple[str, ...]:
    """Tensors from ``src`` down to ``dst`` along the forward data flow (for the diagram)."""
    if src == dst:
        return (src,)
    prev: dict[str, str | None] = {src: None}
    frontier = [src]
    while frontier and dst not in prev:
        nxt = []
        for t in frontier:
            for op in links.consumers.get(t, ()):
                for out in links.made.get(op, {}).values():
                    if out not in prev:
                        prev[out] = t
                        nxt.append(out)
        frontier = nxt
    if dst not in prev:
        return (src, dst)
    chain = [dst]
    while prev[chain[-1]] is not None:
        chain.append(prev[chain[-1]])
    return tuple(reversed(chain))


def _same(line: int | None, code: str | None, other: int | None) -> str:
    """`` at line N (code)``, or ``, on the same line`` when it is ``other``."""
    return ", on the same line" if line is not None and line == other else _where(line, code)


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:]


# -- the answer --------------------------------------------------------------------------------
def explain_nonfinite(g: Graph, tid: str, replay: "Replay | None" = None, *, name: str | None = None,
                      traced: bool = True) -> Explanation | None:
    """Where the NaN or infinity in tensor ``tid``'s value or gradient came from, or None when
    its records hold none.  The forward pass first (the first op, in program order, among the
    ops its value was computed from, whose output was not finite), then backward (the first
    node, in the order the engine ran them, that sent a non-finite gradient while what arrived
    was finite, among the nodes whose gradients reach the tensor), read from the records the
    replay uses; said only on that evidence."""
    node = g.node(tid)
    if not isinstance(node, TensorNode):
        return None
    where = nonfinite_in(node)
    if where is None:
        return None
    links = Links(g)
    who = name or links.label(tid)
    if not traced:
        return _snapshot_answer(g, links, node, who, where)
    steps = list(replay.steps) if replay is not None else []
    if where == "value":
        e = _forward_answer(g, links, node, who, steps)
        if e is not None and node.is_leaf and (bad(node.grad) or any(bad(f) for f in node.flowed)):
            e = _and_gradient(g, links, node, who, steps, e)
        return e
    # A gradient.  When the loss it comes from is not finite, the forward pass explains it (every
    # gradient of a NaN loss is NaN); else the first backward node that sent a non-finite one does.
    reach = _reaching_roots(g, links, node)
    for rn in reach:
        if bad(rn.value):
            e = _forward_answer(g, links, rn, links.label(rn.id), steps, grad_of=(who, node))
            if e is not None:
                return e
    return _backward_answer(g, links, node, who, steps, where)


def _and_gradient(g: Graph, links: Links, node: TensorNode, who: str, steps: list, e: Explanation) -> Explanation:
    """A leaf whose value is not finite, and whose gradient is not either: add a cause of the
    gradient that its own value does not explain (an origin where the forward values were finite)."""
    if any(bad(r.value) for r in _reaching_roots(g, links, node)):
        return e  # (a non-finite loss: every gradient of it is non-finite, the value's answer covers it)
    b = _backward_answer(g, links, node, who, steps, "grad" if bad(node.grad) else "flowed")
    if "infinite_derivative" not in b.reasons or b.reasons[1:2] != ("infinite_derivative",):
        return e
    first = b.sentences[0].split("The first non-finite gradient came from ", 1)[-1]
    sentences = list(e.sentences) + [f"{who}.grad has a second cause, at an element where {who} was finite: {first}",
                                     *b.sentences[1:]]
    reasons = list(e.reasons) + [c for c in b.reasons if c not in e.reasons]
    return Explanation(reasons, sentences, fix=f"{e.fix} Then, for the gradient: {b.fix[0].lower()}{b.fix[1:]}",
                       tensor_name=e.tensor_name, tensor_id=e.tensor_id, graph=g, path=tuple(e.path) + tuple(b.path),
                       op=e.op, line=e.line, lineno=e.lineno, cause=e.cause, facts=e.facts)


def _reaching_roots(g: Graph, links: Links, node: TensorNode) -> list[TensorNode]:
    """The roots whose value was computed from ``node``, or from an earlier version of it (one
    that in-place ops, an optimizer step, turned into ``node``)."""
    roots = [r for r in g.roots if isinstance(r, TensorNode)]
    out = []
    for r in roots:
        anc = links.ancestors(r.id)
        if node.id in anc or any(node.id in _versions(g, links, t) for t in anc if g.node(t).is_leaf):
            out.append(r)
    return out


def _forward_answer(g: Graph, links: Links, node: TensorNode, who: str, steps: list,
                    grad_of: tuple[str, TensorNode] | None = None, head: str | None = None,
                    it: str = "it was") -> Explanation | None:
    """The first non-finite value ``node`` was computed from, and why it was not finite."""
    bad_ids = [t for t in links.ancestors(node.id) if bad(g.node(t).value)]
    if not bad_ids:
        return None
    first = g.node(bad_ids[0])
    if grad_of is not None:
        at_, v_ = _at(node.value)
        head = f"{grad_of[0]}.grad is not finite because the loss it comes from, {who}, is {kind(v_)}"
        asked, asked_id = grad_of[0], grad_of[1].id
    else:
        head, asked, asked_id = head or _is(who, node.value, node.shape), who, node.id
    at, bad_value = _at(first.value)
    fname, pos, what = links.label(first.id), index(first.shape, at), kind(bad_value)
    maker = links.maker.get(first.id)
    common = dict(tensor_name=asked, tensor_id=asked_id, graph=g)
    if maker is None:
        same = first.id == node.id or (fname == who and grad_of is None)  # (an earlier record of the same variable)
        intro = f"{head}: it" if same else (f"{head}: {fname}" if grad_of is not None else f"{head} because {fname}")
        return _without_maker(g, links, node, first, head, intro, steps, common)
    op = g.node(maker)
    fwd = op.forward or op.name or maker
    vals = _values(g, links, maker, at, first.shape)
    cause = forward_cause(g, links, op, maker, at, first, bad_value)
    line = _where(op.line, op.code)
    if first.id == node.id:
        s1 = f"{head}: {fwd} made it{line}{vals}."
    else:
        core = f"{what} at {fname}{pos}, made by {fwd}{line}{vals}"
        s1 = (f"{head}, and the first non-finite value {who} was computed from was {core}." if grad_of is not None
              else f"{head} because the first non-finite value {it} computed from was {core}.")
    codes = ["nonfinite_forward"] + ([cause.code] if cause.code != "nonfinite_forward" else [])
    return Explanation(codes, [s1, cause.why], fix=cause.fix, path=_path(links, first.id, node.id) + (maker,), op=fwd,
                       line=op.code, lineno=op.line, cause=maker, facts=[(maker, "op", fwd)],
                       **common)


def _without_maker(g: Graph, links: Links, node: TensorNode, first: TensorNode, head: str, intro: str, steps: list,
                   common: dict) -> Explanation:
    """The first non-finite value was made by nothing the trace saw: a gradient an optimizer step
    used, a value changed after the trace saw it, a parameter, or the input data."""
    at, v = _at(first.value)
    fname, pos, what = links.label(first.id), index(first.shape, at), kind(v)
    path = _path(links, first.id, node.id)
    write = None if first.requires_grad else next(
        ((s, w) for s in steps for w in s.writes if bad(w.after) and w.after == first.value and _used_after(links, first, s)), None)
    if write is not None:
        return _step_answer(g, links, node, first, write, head, steps, common)
    earlier = _earlier_record(g, first)
    if not links.consumers.get(first.id) and first.is_leaf and not first.made_by:
        seen = (f"; when the trace saw {fname} used, it held {earlier.value}" if earlier is not None else "")
        s1 = (f"{head}, but the trace recorded no op that made or used this value of {fname}{seen}: it was written after "
              f"the trace saw it (in place after the block, or through .data), by code graphlens did not see.")
        return Explanation(["nonfinite_forward", "nonfinite_unseen"], [s1], path=path,
                           fix=f"Trace the code that changes {fname} (run it inside the graphlens.trace() block) and ask "
                               f"again; check torch.isfinite({fname}).all() right after each step.", **common)
    if first.is_parameter:
        s1 = (f"{intro} is a parameter that already held {what} at {fname}{pos} when the trace first saw it; "
              f"what made it non-finite ran before the trace (an earlier optimizer step, or values loaded into it), so "
              f"graphlens cannot name it.")
        fix = (f"Trace the training steps from the first one (the forward, the backward and optimizer.step() of each) "
               f"and ask again: graphlens then names the step and the gradient that made {fname} non-finite. {_GUARD}")
        code = "nonfinite_parameter"
    else:
        if first.made_by:
            s1 = f"{intro} was made holding {what} at {fname}{pos}, by {first.made_by}{_where(first.line, first.code)}."
        else:
            s1 = (f"{intro} already held {what} at {fname}{pos} when the trace first saw it (the input data, or a tensor "
                  f"made before the block).")
        fix = (f"Check the data before the model: torch.isfinite({fname}).all(); replace or drop the bad entries where the "
               f"data is loaded (torch.nan_to_num, or a mask that drops the rows).")
        code = "nonfinite_input"
    facts = [(first.id, "is_parameter", True)] if first.is_parameter else []
    return Explanation(["nonfinite_forward", code], [s1], fix=fix, path=path, facts=facts, **common)


def _op_nr(op: str) -> int:
    return int(op[2:]) if op[2:].isdigit() else -1


def _used_after(links: Links, t: TensorNode, step: "Step") -> bool:
    """Whether ``t`` (holding exactly the .grad ``step`` wrote) was first used by an op recorded
    after that step's node: the evidence that ``t`` is that gradient, read by the code after
    backward (an optimizer step), not a tensor that holds the same numbers by chance."""
    users = links.consumers.get(t.id, ())
    return bool(users) and min(_op_nr(o) for o in users) > _op_nr(step.op)


def _earlier_record(g: Graph, t: TensorNode) -> TensorNode | None:
    """An earlier, finite record of the same variable (an older version of the same tensor)."""
    if not t.name:
        return None
    for other in g.tensors:
        if other.id == t.id:
            return None
        if other.name == t.name and other.shape == t.shape and other.dtype == t.dtype and other.value is not None \
                and other.value.finite is True:
            return other
    return None


def _step_answer(g: Graph, links: Links, node: TensorNode, grad_t: TensorNode, write: tuple, head: str, steps: list,
                 common: dict) -> Explanation:
    """A parameter made non-finite by an optimizer step from a non-finite gradient (both traced)."""
    step, w = write
    param = links.label(w.tensor)
    at, v = _at(grad_t.value)
    pos = index(grad_t.shape, at)
    users = sorted(links.consumers.get(grad_t.id, ()), key=lambda o: int(o[2:]) if o[2:].isdigit() else 0)
    user = g.node(users[0])
    did = f"{user.code} at line {user.line}" if user.code and user.line else f"{user.forward}"
    wrote, writer = "", None
    versions = _versions(g, links, w.tensor)
    written = next((t for t in versions if bad(g.node(t).value) and links.maker.get(t)), None)
    if written is not None:
        writer, wt = links.maker[written], g.node(written)
        wat, wv = _at(wt.value)
        wrote = f" (its {g.node(writer).forward} wrote {kind(wv)} into {param}{index(wt.shape, wat)})"
    s1 = (f"{head}. It comes from a gradient: {param}.grad held {kind(v)} at {param}.grad{pos} after backward pass "
          f"{step.backward + 1}, and {did} computed an update from it{wrote}.")
    sentences, codes, fix = [s1], ["nonfinite_forward", "nonfinite_parameter"], _GUARD
    relevant = links.upstream(step.op) - {step.op}
    origins = _origins(steps, step.backward, relevant)
    if origins:
        o = origins[0]
        desc = _origin(g, links, o, relevant | {step.op})
        sentences.append(f"That {kind(v)} came from {desc['what']}{desc['values']}. {desc['why']}")
        sentences += _turned(g, steps, o, relevant, v, f"{param}.grad", desc["lineno"])
        codes += desc["codes"]
        fix = desc["fix"] + " " + _GUARD
    op_id = writer or users[0]
    return Explanation(codes, sentences, fix=fix, path=(grad_t.id, op_id) + _path(links, grad_t.id, node.id),
                       op=g.node(op_id).forward, line=user.code, lineno=user.line, cause=op_id,
                       facts=[(op_id, "op", g.node(op_id).forward)], **common)


def _versions(g: Graph, links: Links, tid: str) -> list[str]:
    """``tid`` and its later versions: the outputs of the in-place ops that took it as their first input."""
    out, seen = [tid], {tid}
    while True:
        nxt = [links.made.get(op, {}).get(0) for op in links.consumers.get(out[-1], ())
               if (g.node(op).forward or "").endswith("_") and links.forward_inputs(op)[:1] == [out[-1]]]
        nxt = [t for t in nxt if t is not None and t not in seen]
        if not nxt:
            return out
        out.append(nxt[0])
        seen.add(nxt[0])


# -- backward ------------------------------------------------------------------------------------
def _origins(steps: list, pass_nr: int | None, relevant: set | None) -> list:
    """The steps (of backward pass ``pass_nr``, among the ``relevant`` nodes) that sent a
    non-finite gradient while every gradient that arrived was finite, in the engine's order."""
    return [s for s in steps if (pass_nr is None or s.backward == pass_nr) and (relevant is None or s.op in relevant)
            and any(bad(x) for x in s.grads_out) and not any(bad(x) for x in s.grads_in)]


def _origin(g: Graph, links: Links, step: "Step", toward: set | None) -> dict:
    """What an origin step did, as phrases: the node and line, what it sent where, the input
    values there, the cause and the fix (``toward``: the nodes its gradient should be followed to)."""
    op = g.node(step.op)
    fwd, code, lineno = op.forward, op.code, op.line
    inside, fop = "", step.op  # (fop: the op whose forward inputs and result the answer reads)
    if fwd is None:  # (a node the forward op made inside, e.g. the reciprocal of 1 / x)
        parent = next((p for p in links.parents.get(step.op, ()) if g.node(p).forward), None)
        if parent is not None:
            fop, pn = parent, g.node(parent)
            fwd, code, lineno, inside = pn.forward, pn.code, pn.line, f" inside {pn.forward}"
    fwd = fwd or step.name
    outs = [k for k, x in enumerate(step.grads_out) if bad(x)]
    if toward:
        outs = [k for k in outs if links.nexts.get(step.op, {}).get(k, (None,))[0] in toward] or outs
    k = outs[0]
    sent = step.grads_out[k]
    target = links.target_of(step.op, k)
    tnode = g.node(target) if target else None
    tshape = tnode.shape if isinstance(tnode, TensorNode) else (sent.shape if sent else ())
    at, v, tainted = _pick(g, links, fop, sent, tuple(tshape))
    pos = index(tuple(tshape), at)
    arrived = step.grads_in[0] if step.grads_in else None
    came = f"a finite {arrived}" if arrived is not None and arrived.numel <= 6 else "finite gradients"
    what = (f"{step.name}{inside} (step {step.index} of tr.replay()), the backward of {fwd}{_where(lineno, code)}: it "
            f"received {came} and sent {kind(v)} to {links.label(target)}{pos}")
    inputs = links.forward_inputs(fop)
    if step.name == "DivBackward0":  # (the denominator: the second input, or a number the trace does not hold)
        x = links.label(inputs[1]) if len(inputs) > 1 else "b"
    else:
        x = links.label(inputs[0] if inputs else None)
    codes, why, fix = backward_cause(g, links, fop, step.name, fwd, x)
    out_t = next(iter(links.made.get(fop, {}).values()), None)
    zero = arrived is not None and value_at(arrived, at, tuple(tshape)) == 0
    extra = ""
    if zero and out_t is not None:
        masks = [c for c in links.consumers.get(out_t, ()) if base(g.node(c).forward) in ("where", "masked_fill")]
        hidden = g.node(out_t).value
        hv = value_at(hidden, at, tuple(tshape)) if bad(hidden) else None
        shown = f" (its forward value there, {format_number(hv, 6)}, was hidden)" if hv is not None else ""
        if masks:
            codes.append("where_unchosen_branch")
            cond = links.forward_inputs(masks[0])[:1]
            mask = g.node(cond[0]).name if cond and g.node(cond[0]).name else "mask"
            extra = (f" The result of {fwd} reached the loss through torch.{base(g.node(masks[0]).forward)}, which chose "
                     f"the other branch at {pos or 'that position'}{shown}: the gradient that arrived there was 0, but 0 "
                     f"times an infinite derivative is NaN.")
            fix = safe_where_fix(fwd, x, mask, base(fwd).startswith("exp"))
        else:
            codes.append("zero_times_inf")
            users = [g.node(c).forward for c in links.consumers.get(out_t, ()) if g.node(c).forward]
            # (an op that selects elements leaves the others out; an arithmetic one used the element, and its
            # derivative there was 0: say only where the 0 came from)
            by = (f" ({users[0]} did not use that element)" if base(users[0]) in _SELECTING else f" (from {users[0]})") if users else ""
            extra = (f" The gradient that arrived at {pos or 'that element'} was 0{by}, but 0 times an infinite "
                     f"derivative is NaN: masking or selecting after the op cannot stop it.")
            fix = fix + (" before the op" if "log_softmax" not in fix else "")
    return {"what": what, "values": _values(g, links, fop, at, tshape), "why": why + extra, "codes": codes,
            "fix": _cap(fix) + ("" if fix.endswith(".") else "."), "op": fwd, "line": code, "lineno": lineno,
            "tainted": tainted, "at": at, "pos": pos}


def _pick(g: Graph, links: Links, op_id: str, sent: Summary | None, shape: tuple) -> tuple[int | None, Any, str | None]:
    """The position of ``sent`` to explain: the first non-finite element where every forward
    input of ``op_id`` was finite (a true origin), else the first one, with the input that was
    already non-finite there (``tainted``: the gradient only carries a forward NaN back)."""
    at, v = _at(sent)
    inputs = links.forward_inputs(op_id)

    def spoiled(p: int | None) -> str | None:
        return next((t for t in inputs if _infinite(value_at(g.node(t).value, p, shape))), None)

    if sent is not None and sent.head is not None and spoiled(at) is not None:
        for p, x in enumerate(sent.head):
            if _infinite(x) and spoiled(p) is None:
                return p, x, None
    return at, v, spoiled(at)


def _backward_answer(g: Graph, links: Links, node: TensorNode, who: str, steps: list, where: str) -> Explanation:
    common = dict(tensor_name=who, tensor_id=node.id, graph=g)
    pass_nr, relevant = None, None
    acc = next((o.id for o in g.ops if o.variable == node.id), None)
    mine = {t.id for t in g.tensors if node.id in _versions(g, links, t.id)}  # (node and its earlier versions)
    for s in steps:
        for w in s.writes:
            if w.tensor in mine and bad(w.after) and pass_nr is None:
                if bad(w.before):
                    return Explanation(
                        ["nonfinite_backward", "nonfinite_grad_before"],
                        [f"{who}.grad was already NaN or inf when backward pass {s.backward + 1} began adding to it: the "
                         f"non-finite gradient came from an earlier backward (before the trace, or before .grad was "
                         f"cleared)."],
                        fix="Clear the gradients before each backward (optimizer.zero_grad()) and trace the pass that "
                            "first made it.", **common)
                pass_nr, acc = s.backward, s.op
    if pass_nr is None and where == "flowed":
        pass_nr = next(k for k, f in enumerate(node.flowed) if bad(f))
    if acc is not None:
        relevant = links.upstream(acc) - {acc}
    elif node.op is not None:
        relevant = links.upstream(node.op) - ({node.op} if where == "flowed" else set())
    origins = _origins(steps, pass_nr, relevant) if pass_nr is not None else []
    if not origins:
        return _unseen_gradient(g, links, node, who, steps, common)
    first = origins[0]
    o = _origin(g, links, first, (relevant or set()) | ({acc} if acc else set()))
    roots = [t for t in links.made.get(next((s.op for s in steps if s.backward == first.backward), ""), {}).values()]
    loss = links.label(roots[0]) if roots and g.node(roots[0]).name else "the loss"
    if o["tainted"] is not None:  # (a NaN of the forward pass the loss did not use, carried back by the gradient)
        t = g.node(o["tainted"])
        s1 = (f"{who}.grad is not finite, though {loss} was finite: {first.name} (step {first.index} of tr.replay(), the "
              f"backward of {o['op']}{_where(o['lineno'], o['line'])}) received finite gradients, but its input "
              f"{links.label(t.id)} was already {kind(value_at(t.value, o['at'], t.shape))} at {links.label(t.id)}"
              f"{index(t.shape, o['at'])} in the forward pass (the loss did not use that value, but its gradient still "
              f"passes through it).")
        e = _forward_answer(g, links, t, links.label(t.id), steps)
        rest = list(e.sentences) if e is not None else []
        return Explanation(["nonfinite_backward"] + [c for c in (e.reasons if e else ()) if c != "nonfinite_forward"],
                           [s1] + rest, fix=e.fix if e is not None else None, op=e.op if e else o["op"],
                           line=e.line if e else o["line"], lineno=e.lineno if e else o["lineno"],
                           cause=e.cause if e else first.op, path=(first.op,) + tuple(e.path if e else ()), **common)
    s1 = (f"{who}.grad is not finite, though {loss} was finite. The first non-finite gradient came from {o['what']}"
          f"{o['values']}.")
    sentences = [s1, o["why"]]
    _, mine = _at(node.grad if where == "grad" else next((f for f in node.flowed if bad(f)), None))
    sentences += _turned(g, steps, first, relevant, mine, who, o["lineno"])
    fix = o["fix"]
    others = [s for s in origins[1:] if s.backward == first.backward]
    for s in others[:3]:
        so = _origin(g, links, s, relevant)
        sentences.append(f"{s.name} (step {s.index}, the backward of {so['op']}{_same(so['lineno'], so['line'], o['lineno'])}) "
                         f"sent {kind(_at(next(x for x in s.grads_out if bad(x)))[1])} too: {so['why'][0].lower()}{so['why'][1:]}")
        if so["fix"] != fix:
            fix += f" For {so['op']} too: {so['fix'][0].lower()}{so['fix'][1:]}"
    return Explanation(["nonfinite_backward"] + o["codes"], sentences, fix=fix,
                       path=(first.op,) + tuple(t for t in (links.target_of(first.op, 0),) if t), op=o["op"],
                       line=o["line"], lineno=o["lineno"], cause=first.op, facts=[(first.op, "op", first.name)], **common)


def explain_failed_node(g: Graph, replay: "Replay | None", node_name: str) -> Explanation | None:
    """Where the NaN that anomaly mode stopped at (``Function 'node_name' returned nan values``)
    came from, read from a trace's backward records: the last step named ``node_name`` that
    sent a non-finite gradient, and the first step of that pass, among the nodes whose gradient
    reaches it, that sent one from finite gradients (anomaly mode checks only for NaN, so an
    inf sent earlier that a later node turned into NaN is the origin).  The same phrases as
    :func:`explain_nonfinite` gives for the tensor that gradient was for; None when the
    records show no such step (nothing is guessed)."""
    steps = list(replay.steps) if replay is not None else []
    failed = next((s for s in reversed(steps) if s.name == node_name and any(bad(x) for x in s.grads_out)), None)
    if failed is None:
        return None
    links = Links(g)
    relevant = links.upstream(failed.op)
    origins = _origins(steps, failed.backward, relevant)
    if not origins:
        return None
    quiet_in = not any(bad(x) for x in failed.grads_in)
    first = failed if quiet_in and failed in origins else origins[0]  # (its own NaN, from finite gradients)
    o = _origin(g, links, first, relevant)
    if o["tainted"] is not None:  # (a NaN of the forward pass, carried back: the forward answer says where it began)
        t = g.node(o["tainted"])
        e = _forward_answer(g, links, t, links.label(t.id), steps)
        if e is None:
            return None
        s1 = (f"{first.name} (step {first.index} of tr.replay(), the backward of {o['op']}{_where(o['lineno'], o['line'])}) "
              f"received finite gradients, but its input {links.label(t.id)} was already "
              f"{kind(value_at(t.value, o['at'], t.shape))} at {links.label(t.id)}{index(t.shape, o['at'])} in the "
              f"forward pass.")
        return Explanation(["nonfinite_backward"] + [c for c in e.reasons if c != "nonfinite_forward"], [s1, *e.sentences],
                           fix=e.fix, tensor_name=e.tensor_name, tensor_id=e.tensor_id, graph=g, op=e.op, line=e.line,
                           lineno=e.lineno, cause=e.cause, path=(first.op,) + tuple(e.path), facts=e.facts)
    sentences = [f"The first non-finite gradient came from {o['what']}{o['values']}.", o["why"]]
    if first is not failed and not quiet_in:
        sentences.append(
            f"{failed.name} (step {failed.index}), where anomaly mode stopped, received that non-finite gradient and "
            f"sent NaN (0 × inf and inf − inf are NaN): anomaly mode checks for NaN, not for inf, so it did not stop at "
            f"{first.name}."
        )
    target = links.target_of(failed.op, next(k for k, x in enumerate(failed.grads_out) if bad(x)))
    return Explanation(["nonfinite_backward"] + o["codes"], sentences, fix=o["fix"],
                       tensor_name=links.label(target) if target and g.node(target).name else None, tensor_id=target,
                       graph=g, path=(first.op,) + tuple(t for t in (links.target_of(first.op, 0),) if t), op=o["op"],
                       line=o["line"], lineno=o["lineno"], cause=first.op, facts=[(first.op, "op", first.name)])


def _turned(g: Graph, steps: list, first: "Step", relevant: set | None, mine: Any, who: str, lineno: int | None) -> list[str]:
    """The sentence saying which later node turned the inf ``first`` sent into the NaN ``who`` got."""
    _, sent = _at(next(x for x in first.grads_out if bad(x)))
    if kind(sent) not in ("inf", "-inf") or kind(mine) != "NaN":
        return []

    def nan(xs: tuple) -> bool:
        return any(kind(_at(x)[1]) == "NaN" for x in xs if bad(x))

    turned = next((s for s in steps if s.backward == first.backward and s.index > first.index
                   and (relevant is None or s.op in relevant) and any(bad(x) for x in s.grads_in)
                   and nan(s.grads_out) and not nan(s.grads_in)), None)
    if turned is None:
        return []
    top = g.node(turned.op)
    return [f"On the way to {who}, {turned.name} (the backward of {top.forward or turned.name}"
            f"{_same(top.line, top.code, lineno)}) turned that inf into NaN (0 × inf and inf − inf are NaN)."]


def _unseen_gradient(g: Graph, links: Links, node: TensorNode, who: str, steps: list, common: dict) -> Explanation:
    """A non-finite .grad that no traced backward node made: what the records do show."""
    mine = {t.id for t in g.tensors if node.id in _versions(g, links, t.id)}
    writes = [w for s in steps for w in s.writes if w.tensor in mine]
    wrote = f"the traced backward wrote a finite {writes[-1].after} into it, and " if writes and not bad(writes[-1].after) else ""
    sentences = [f"{_is(who + '.grad', node.grad, node.shape)}, but {wrote}every gradient the trace saw flow was finite: the "
                 f"non-finite values were put into {who}.grad afterwards."]
    # (the values .grad holds now, made by an op on a line that writes .grad: equal values alone could be chance)
    same = next((t for t in g.tensors if t.id != node.id and links.maker.get(t.id) and t.value == node.grad
                 and ".grad" in (g.node(links.maker[t.id]).code or "")), None)
    path: tuple = ()
    e = None
    if same is not None:
        op = g.node(links.maker[same.id])
        sentences.append(f"They are exactly the values {op.forward} made{_where(op.line, op.code)}: an assignment to "
                         f"{who}.grad after backward.")
        e = _forward_answer(g, links, same, links.label(same.id), steps, head="They are not finite", it="they were")
        sentences += list(e.sentences)
        return Explanation(["nonfinite_backward", "nonfinite_grad_assigned"] + [c for c in e.reasons if c != "nonfinite_forward"],
                           sentences, fix=e.fix, path=tuple(e.path), op=e.op, line=e.line, lineno=e.lineno, cause=e.cause,
                           facts=e.facts, **common)
    else:
        sentences.append(f"graphlens did not see what put them there: code after the block that changes {who}.grad in "
                         f"place or assigns to it, or a backward outside the block.")
    fix = (e.fix if e is not None else f"Run the code that changes {who}.grad (clipping, hooks, a manual update, the "
                                        f"backward) inside the graphlens.trace() block and ask again.")
    return Explanation(["nonfinite_backward", "nonfinite_unseen"], sentences, fix=fix, path=path, **common)


# -- without a trace -----------------------------------------------------------------------------
def _snapshot_answer(g: Graph, links: Links, node: TensorNode, who: str, where: str) -> Explanation:
    s = node.value if where == "value" else node.grad
    subject = who if where == "value" else f"{who}.grad"
    sentences = [_is(subject, s, node.shape) + "."]
    reasons = ["nonfinite_forward" if where == "value" else "nonfinite_backward"]
    leaves = [t for t in g.leaves if bad(t.value) and t.id != node.id]
    if node.is_leaf and bad(node.value):
        sentences.append(f"It is a leaf: no op of its graph computed it, so something before (an optimizer step, "
                         f"the data, values loaded into it) put the NaN or inf there.")
    if leaves:
        shown = ", ".join(f"{links.label(t.id)} (at {links.label(t.id)}{index(t.shape, t.value.nonfinite_at)})"
                          if t.shape else links.label(t.id) for t in leaves[:4])
        verb = "holds" if len(leaves) == 1 else "hold"
        sentences.append(f"Among the leaves of its graph, {shown} already {verb} NaN or inf.")
        reasons.append("nonfinite_input")
    elif not (node.is_leaf and bad(node.value)):
        sentences.append("Every leaf of its backward graph (the tensors that require grad) is finite; the data and other "
                         "inputs that need no grad are not part of that graph, so graphlens did not read them.")
    sentences.append("Without a trace graphlens cannot tell which op made the first non-finite value.")
    return Explanation(reasons, sentences, fix=f"Run the forward (and the backward) inside graphlens.trace() and ask "
                       f"graphlens.explain({who}, tr): it names the first op (or backward node) that made it, and why.",
                       tensor_name=who, tensor_id=node.id, graph=g)
