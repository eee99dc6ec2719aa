"""Why a gradient is NaN or infinite though the loss was finite: the first backward node, in the engine's order, that sent one."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import torch

from ..flowed import flowed_items
from ..graph import Graph, TensorNode
from ..values import Summary, format_number, same_head
from .nonfinite_causes import Links, bad, base, index, kind, positional, safe_where_fix, value_at
from .nonfinite_derivatives import backward_cause
from .nonfinite_text import cap as _cap, first_bad as _at, infinite as _infinite, is_text as _is, \
    occurrence as _occurrence, same_line as _same, values_text as _values, versions as _versions, where_text as _where
from .types import Explanation

if TYPE_CHECKING:  # pragma: no cover
    from ..replay import Replay, Step

__all__ = ["origins", "origin", "turned", "backward_answer", "changed_after", "explain_failed_node", "masked_softmax", "created_answer", "grad_call_answer", "diverged"]


def _forward_answer(*args: Any, **kwargs: Any) -> Explanation | None:
    from .nonfinite import _forward_answer as answer  # (the forward answer: it asks this module about optimizer steps)

    return answer(*args, **kwargs)


def _origins(steps: list, pass_nr: int | None, relevant: set | None, links: Links | None = None, end: str | None = None) -> list:
    """The steps (of backward pass ``pass_nr``, among the ``relevant`` nodes) that sent a
    non-finite gradient while every gradient that arrived was finite, in the engine's order.
    Given ``links`` (and ``end``, the node of the tensor asked about), only a step that sent it
    along an edge toward that tensor (to a relevant node, or to ``end``): a node that sent NaN
    only to another parameter is not where this tensor's NaN began."""
    out = [s for s in steps if (pass_nr is None or s.backward == pass_nr) and (relevant is None or s.op in relevant)
           and any(bad(x) for x in s.grads_out) and not any(bad(x) for x in s.grads_in)]
    if links is None or relevant is None:
        return out
    toward = relevant | ({end} if end else set())

    def leads(s) -> bool:
        nexts = links.nexts.get(s.op, {})
        return any(bad(x) and nexts.get(k, (None,))[0] in toward for k, x in enumerate(s.grads_out))

    return [s for s in out if leads(s)] or out


def _origin(g: Graph, links: Links, step: "Step", toward: set | None) -> dict:
    """What an origin step did, as phrases: the node and line, what it sent where, the input
    values there, the cause and the fix (``toward``: the nodes its gradient should be followed to)."""
    op = g.node(step.op)
    fwd, code, lineno = op.forward, op.code, op.line
    inside, fop = "", step.op  # (fop: the op whose forward inputs and result the answer reads)
    if fwd is None:  # (a node the forward op made inside, e.g. the reciprocal of 1 / x, einsum's bmm under its views)
        parent, frontier = None, [step.op]
        for _ in range(6):
            ups = [p for f in frontier for p in links.parents.get(f, ())]
            parent = next((p for p in ups if g.node(p).forward), None)
            if parent is not None or not ups:
                break
            frontier = ups
        if parent is not None:
            fop, pn = parent, g.node(parent)
            fwd, code, lineno, inside = pn.forward, pn.code, pn.line, f" inside {pn.forward}"
    fwd = fwd or step.name
    outs = [k for k, x in enumerate(step.grads_out) if bad(x)]
    if toward:
        outs = [k for k in outs if links.nexts.get(step.op, {}).get(k, (None,))[0] in toward] or outs
    k = outs[0]
    sent = step.grads_out[k]
    target, through = links.target_of(step.op, k), None
    if target is None:  # (through a node the op made inside, e.g. linear's TBackward0 on the way to its weight)
        target, through = _through(g, links, step.op, k)
    tnode = g.node(target) if target else None
    sshape = tuple(sent.shape) if sent else ()
    tshape = tnode.shape if isinstance(tnode, TensorNode) else sshape
    at, v, tainted = _pick(g, links, fop, sent, sshape if through else tuple(tshape))
    if through == "TBackward0" and at is not None and len(sshape) == 2:  # (sent to weight.T: the weight's position)
        at = (at % sshape[1]) * sshape[0] + at // sshape[1]
    elif through is not None and tuple(tshape) != sshape:
        at = None
    pos = index(tuple(tshape), at)
    arrived = step.grads_in[0] if step.grads_in else None
    came = f"a finite {arrived}" if arrived is not None and arrived.numel <= 6 else "finite gradients"
    what = (f"{step.name}{inside} (step {step.index + 1} of tr.replay()), the backward of {fwd}{_where(lineno, code)}"
            f"{_occurrence(g, fop)}: it "
            f"received {came} and sent {kind(v)} to {links.label(target)}{pos}")
    inputs = links.forward_inputs(fop)
    if step.name == "DivBackward0":  # (the denominator: the second input, or a number the trace does not hold)
        x = links.label(inputs[1]) if len(inputs) > 1 else "b"
        xin = inputs[1] if len(inputs) > 1 else None
    else:
        x = links.label(inputs[0] if inputs else None)
        xin = inputs[0] if inputs else None
    xv = value_at(g.node(xin).value, at, tuple(tshape)) if xin is not None and positional(fwd) and not through else None
    allv = [value_at(g.node(t).value, at, tuple(tshape)) for t in inputs] if positional(fwd) and not through else None
    codes, why, fix = backward_cause(g, links, fop, step.name, fwd, x, value=xv, dtype=sent.dtype if sent else None, values=allv,
                                     inputs_finite=bool(inputs) and not any(bad(g.node(t).value) for t in inputs))
    # (no recorded input: "every input was finite" would be said of nothing)
    domain = "invalid_domain" in codes
    out_t = next(iter(links.made.get(fop, {}).values()), None)
    zero = arrived is not None and value_at(arrived, at, tuple(tshape)) == 0
    extra = ""
    if zero and out_t is not None and ("infinite_derivative" in codes or domain):
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
                     f"times {'a NaN' if domain else 'an infinite'} derivative is NaN.")
            fix = safe_where_fix(fwd, x, mask, base(fwd).startswith("exp"))
        else:
            codes.append("zero_times_inf")
            users = [g.node(c).forward for c in links.consumers.get(out_t, ()) if g.node(c).forward]
            # (an op that selects elements leaves the others out; an arithmetic one used the element, and its
            # derivative there was 0: say only where the 0 came from)
            # (a class loss sends 0 only where it did not use the element; for any other selection, an indexing
            # among them, a 0 may come from the gradient it received: only where the 0 came from is said)
            by = ((f" ({users[0]} did not use that element)" if base(users[0]) in _UNUSED_IF_ZERO else f" (what {users[0]} sent "
                   f"back there)") if users else "")
            extra = (f" The gradient that arrived at {pos or 'that element'} was 0{by}, but 0 times {'a NaN' if domain else 'an infinite'} "
                     f"derivative is NaN: masking or selecting after the op cannot stop it.")
            fix = fix + (" before the op" if "log_softmax" not in fix else "")
    rounded = _rounded_clamp(g, links, xin, xv) if xin is not None and xv is not None else None
    if rounded is not None:  # (the program's own guard against that value did nothing in this dtype)
        codes.append("clamp_rounded")
        extra += rounded[0]
        fix = rounded[1]
    return {"what": what, "values": _values(g, links, fop, at, tshape), "why": why + extra, "codes": codes,
            "fix": _cap(fix) + ("" if fix.endswith(".") else "."), "op": fwd, "line": code, "lineno": lineno,
            "tainted": tainted, "at": at, "pos": pos, "fop": fop}


#: Ops between a clamp and the op whose input it guards that keep a value's magnitude (``-p.clamp(max=...)``).
_SIGN_ONLY = ("neg", "negative", "__neg__", "abs", "contiguous", "view", "reshape", "clone", "to")


def _rounded_clamp(g: Graph, links: Links, tid: str, value: Any) -> tuple[str, str] | None:
    """``(sentence, fix)`` where ``tid`` (holding ``value`` at the bad position) comes, through ops
    that keep magnitudes, from a clamp whose bound this dtype cannot hold: it rounds to the very
    value the clamp was meant to keep out (``clamp(max=1 - 1e-6)`` is ``clamp(max=1)`` in bfloat16)."""
    t, hops = tid, 0
    while hops < 4:
        op = links.maker.get(t)
        if op is None:
            return None
        node = g.node(op)
        name = base(node.forward)
        if name in ("clamp", "clip", "clamp_max", "clamp_min"):
            break
        if name not in _SIGN_ONLY or not links.forward_inputs(op):
            return None
        t, hops = links.forward_inputs(op)[0], hops + 1
    else:
        return None
    dtype = g.node(t).dtype
    for e in node.saved:
        if e.name in ("max", "min") and type(e.value) is float:
            try:
                held = torch.tensor(e.value, dtype=getattr(torch, dtype)).item()
            except (AttributeError, TypeError, RuntimeError):
                return None
            if held != e.value and abs(held) == abs(value):
                line = f" at line {node.line} ({node.code})" if node.line and node.code else ""
                return (f" The clamp{line} was meant to keep it away from there, but in {dtype} its bound "
                        f"{format_number(e.value, 8)} rounds to {format_number(held, 8)}, so it left {format_number(held, 8)} "
                        f"in place.",
                        f"use a bound {dtype} can hold (torch.finfo(torch.{dtype}).eps away from the limit: "
                        f"1 - torch.finfo(torch.{dtype}).eps for a probability), or compute this part in "
                        f"{'float64' if dtype == 'float32' else 'float32'}")
    return None


def _through(g: Graph, links: Links, op: str, k: int, hops: int = 3) -> tuple[str | None, str | None]:
    """The tensor the gradient ``op`` sends along next edge ``k`` is for, followed through the
    nodes a forward op made inside (no forward call of their own, one way on: linear's
    ``TBackward0``, a cast), and the name of the first such node (None when none)."""
    first = None
    for _ in range(hops):
        child = links.nexts.get(op, {}).get(k)
        if child is None:
            return None, first
        node = g.node(child[0])
        nexts = links.nexts.get(child[0], {})
        if node.forward is not None or len(nexts) != 1:
            return None, first
        first = first or node.name
        op, k = child[0], next(iter(nexts))
        target = links.target_of(op, k)
        if target is not None:
            return target, first
    return None, first


#: Ops whose gradient is 0 at an element exactly when they did not use it (a class loss picks the target's).
_UNUSED_IF_ZERO = frozenset({"nll_loss", "nll_loss_nd", "nll_loss2d", "cross_entropy"})


def _pick(g: Graph, links: Links, op_id: str, sent: Summary | None, shape: tuple) -> tuple[int | None, Any, str | None]:
    """The position of ``sent`` to explain: the first non-finite element where every forward
    input of ``op_id`` was finite (a true origin), else the first one, with the input that was
    already non-finite there (``tainted``: the gradient only carries a forward NaN back)."""
    at, v = _at(sent)
    inputs = links.forward_inputs(op_id)
    out = next(iter(links.made.get(op_id, {}).values()), None)
    summed = out is not None and tuple(g.node(out).shape) != tuple(shape)  # (to a broadcast operand: a sum over positions)
    if summed or not positional(g.node(op_id).forward):  # (a matmul's gradient at any position sums over a whole input)
        return at, v, next((t for t in inputs if bad(g.node(t).value)), None)

    def spoiled(p: int | None) -> str | None:
        return next((t for t in inputs if _infinite(value_at(g.node(t).value, p, shape))), None)

    if sent is not None and sent.head is not None and spoiled(at) is not None:
        for p, x in enumerate(sent.head):
            if _infinite(x) and spoiled(p) is None:
                return p, x, None
    return at, v, spoiled(at)


def _tainted_at(g: Graph, links: Links, t: TensorNode, o: dict) -> str:
    """``NaN at X[2, 1]``: what a forward input held where the origin's gradient was not finite
    (its own first non-finite element, when the op sums over it: a matmul)."""
    at = o["at"] if positional(g.node(o["fop"]).forward) else None
    v = value_at(t.value, at, t.shape) if at is not None else None
    if v is None or not _infinite(v):
        at, v = _at(t.value)
    return f"{kind(v)} at {links.label(t.id)}{index(t.shape, at)}"


def _summed(g: Graph, op: str) -> str:
    """``: its gradient ... sums over the batch``, for a matmul-like node (0 × NaN = NaN)."""
    node = g.node(op)
    if node.name in ("AddmmBackward0", "MmBackward0", "BmmBackward0", "LinearBackward0", "ConvolutionBackward0", "MvBackward0"):
        return ("; a matmul's gradient for one operand sums the other operand × the incoming gradient over every row: a "
                "NaN in any row, times the 0 gradient a masked or unused row gets, is NaN")
    return ""


def _backward_answer(g: Graph, links: Links, node: TensorNode, who: str, steps: list, where: str) -> Explanation:
    common = dict(tensor_name=who, tensor_id=node.id, graph=g)
    pass_nr, relevant = None, None
    acc = next((o.id for o in g.ops if o.variable == node.id), None)
    mine = mine_ids = {t.id for t in g.tensors if node.id in _versions(g, links, t.id)}  # (node and its earlier versions)
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
        pass_nr = next(k for k, f in flowed_items(node.flowed) if bad(f))
    if acc is not None:
        relevant = links.upstream(acc) - {acc}
    elif node.op is not None:
        relevant = links.upstream(node.op) - ({node.op} if where == "flowed" else set())
    origins = _origins(steps, pass_nr, relevant, links, acc or (node.op if where != "flowed" else None)) if pass_nr is not None else []
    if not origins:
        hooked = _hook_answer(g, links, node, who, steps, pass_nr, relevant, common) if pass_nr is not None else None
        return hooked or _unseen_gradient(g, links, node, who, steps, common)
    first = origins[0]
    o = _origin(g, links, first, (relevant or set()) | ({acc} if acc else set()))
    roots = [t for t in links.made.get(next((s.op for s in steps if s.backward == first.backward), ""), {}).values()]
    loss = links.label(roots[0]) if roots and g.node(roots[0]).name else "the loss"
    # (a gradient that reached the tensor, handed back by torch.autograd.grad: its .grad was never set)
    grad_of = f"{who}.grad" if where == "grad" or bad(node.grad) else f"The gradient that reached {who}"
    masked = masked_softmax(g, links, first, o, f"{grad_of} is not finite, though {loss} was finite")
    if masked is not None:
        return Explanation(["nonfinite_backward", "masked_softmax"], list(masked[:2]), fix=masked[2], op=o["op"],
                           line=o["line"], lineno=o["lineno"], cause=first.op, path=(first.op, o["tainted"]),
                           facts=[(first.op, "op", first.name)], **common)
    if o["tainted"] is not None:  # (a NaN of the forward pass the loss did not use, carried back by the gradient)
        t = g.node(o["tainted"])
        s1 = (f"{grad_of} is not finite, though {loss} was finite: {first.name} (step {first.index + 1} of tr.replay(), the "
              f"backward of {o['op']}{_where(o['lineno'], o['line'])}) received finite gradients, but its input "
              f"{links.label(t.id)} was already {_tainted_at(g, links, t, o)} in the forward pass (the loss did not use "
              f"that value, but its gradient still passes through it{_summed(g, first.op)}).")
        e = _forward_answer(g, links, t, links.label(t.id), steps)
        rest = list(e.sentences) if e is not None else []
        fix = e.fix if e is not None else None
        ins = links.forward_inputs(first.op)
        if first.name.startswith("DivBackward") and len(ins) > 1 and ins[0] == t.id and not bad(g.node(ins[1]).value):
            # (the non-finite value is the numerator: the divisor's gradient is -grad * a / b**2, NaN where grad is 0)
            b = links.label(ins[1])
            rest.append(f"{who} reaches the divisor {b}: for it, {first.name} computes −grad · a / {b}², and where a is "
                        f"{kind(_at(t.value)[1])} and the gradient that arrived is 0 (what a loss sends a masked position, "
                        f"cross_entropy's included), that is 0 × inf = NaN.")
            head = g.node(ins[1]).value.head if g.node(ins[1]).value is not None else None
            small = bool(head) and all(type(v) is float and 0 < abs(v) < 1 for v in head)
            fix = (f"Divide before masking: divide by {b} first and put the mask on the quotient, so that no infinite value "
                   f"is ever divided by {b}" + ("; a large finite fill instead of -inf (torch.finfo(x.dtype).min) does not "
                   f"help here: divided by {b}, below 1, it overflows back to -inf." if small else
                   "; or fill with a large finite value whose quotient stays finite (-1e4, not torch.finfo(x.dtype).min)."))
        codes = ["nonfinite_backward"] + [c for c in (e.reasons if e else ()) if c != "nonfinite_forward"]
        out_t = next(iter(links.made.get(first.op, {}).values()), None)
        masks = [c for c in links.consumers.get(out_t, ()) if base(g.node(c).forward) in ("where", "masked_fill")] if out_t else []
        if masks and fix is (e.fix if e is not None else None):  # (a branch torch.where did not choose there: 0 × NaN)
            codes.append("where_unchosen_branch")
            rest.append(f"That value is in a branch torch.{base(g.node(masks[0]).forward)} did not choose there: the loss did "
                        f"not use it, but backward still sends that branch a gradient of 0, and 0 times a NaN is NaN.")
            fix = ("Keep every branch finite where it is not chosen: compute each branch on a safe input there "
                   "(torch.where(mask, f(torch.where(mask, x, safe_value)), other), the double-where pattern, on every "
                   "branch that can be NaN), or compute each branch only on its own elements (x[mask]); clamping one "
                   "op's input is not enough while another op of the branch is NaN there too.")
        return Explanation(codes,
                           [s1] + rest, fix=fix, op=e.op if e else o["op"],
                           line=e.line if e else o["line"], lineno=e.lineno if e else o["lineno"],
                           cause=e.cause if e else first.op, path=(first.op,) + tuple(e.path if e else ()), **common)
    s1 = (f"{grad_of} is not finite, though {loss} was finite. The first non-finite gradient came from {o['what']}"
          f"{o['values']}.")
    sentences = [s1, o["why"]]
    _, mine = _at(node.grad if where == "grad" else next((f for _, f in flowed_items(node.flowed) if bad(f)), None))
    sentences += _turned(g, steps, first, relevant, mine, who, o["lineno"])
    fix = o["fix"]
    written = next((w.after for s in reversed(steps) for w in s.writes if w.tensor in mine_ids), None)
    after = _changed_after(g, links, who, written, node.grad) if where == "grad" else None
    if after is not None:
        sentences.append(after[0])
        fix += " " + after[1]
    others = [s for s in origins[1:] if s.backward == first.backward]
    for s in others[:3]:
        so = _origin(g, links, s, relevant)
        sentences.append(f"{s.name} (step {s.index + 1}, the backward of {so['op']}{_same(so['lineno'], so['line'], o['lineno'])}) "
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
        s1 = (f"{first.name} (step {first.index + 1} of tr.replay(), the backward of {o['op']}{_where(o['lineno'], o['line'])}) "
              f"received finite gradients, but its input {links.label(t.id)} was already {_tainted_at(g, links, t, o)} in "
              f"the forward pass{_summed(g, first.op)}.")
        return Explanation(["nonfinite_backward"] + [c for c in e.reasons if c != "nonfinite_forward"], [s1, *e.sentences],
                           fix=e.fix, tensor_name=e.tensor_name, tensor_id=e.tensor_id, graph=g, op=e.op, line=e.line,
                           lineno=e.lineno, cause=e.cause, path=(first.op,) + tuple(e.path), facts=e.facts)
    sentences = [f"The first non-finite gradient came from {o['what']}{o['values']}.", o["why"]]
    if first is not failed and not quiet_in:
        sentences.append(
            f"{failed.name} (step {failed.index + 1}), where anomaly mode stopped, received that non-finite gradient and "
            f"sent NaN (0 × inf and inf − inf are NaN): anomaly mode checks for NaN, not for inf, so it did not stop at "
            f"{first.name}."
        )
    target = links.target_of(failed.op, next(k for k, x in enumerate(failed.grads_out) if bad(x)))
    return Explanation(["nonfinite_backward"] + o["codes"], sentences, fix=o["fix"],
                       tensor_name=links.label(target) if target and g.node(target).name else None, tensor_id=target,
                       graph=g, path=(first.op,) + tuple(t for t in (links.target_of(first.op, 0),) if t), op=o["op"],
                       line=o["line"], lineno=o["lineno"], cause=first.op, facts=[(first.op, "op", first.name)])


def masked_softmax(g: Graph, links: Links, first: "Step", o: dict, lead: str) -> tuple[str, str, str] | None:
    """``(sentence, why, fix)`` when backward node ``first`` (a softmax's or a logsumexp's) sent
    NaN from finite gradients because its forward input (``o["tainted"]``, from
    :func:`_origin`) was -inf over a whole slice it reduced (a row a -inf mask forbids
    entirely), else None; ``lead`` begins the sentence ("w.grad is not finite, though the
    loss was finite")."""
    if o["tainted"] is None or first.name not in _MASKED_BACKWARDS or kind(_at(g.node(o["tainted"]).value)[1]) != "-inf":
        return None
    t = g.node(o["tainted"])
    fwd = o["op"]
    s1 = (f"{lead}: {first.name} (step {first.index + 1} of tr.replay(), the backward of {fwd}"
          f"{_where(o['lineno'], o['line'])}) received finite gradients and sent NaN, because its input "
          f"{links.label(t.id)} was -inf at every position of a slice it reduced (a row a mask of -inf forbids entirely: "
          f"an unreachable state or tag, a query with no visible key, a padded row an ignore_index leaves out of the loss).")
    why = (f"The forward value is fine ({fwd} of all -inf is -inf, or a softmax row of 0 / 0 the loss did not use), "
           f"but its backward computes exp(x - result) = exp(-inf - (-inf)) = NaN there, and the NaN reaches every "
           f"parameter the slice was computed from. The -inf of the mask itself is not the fault: a row that is -inf "
           f"everywhere is.")
    fix = ("Write the forbidden entries as a large finite negative number instead of -inf (torch.finfo(x.dtype).min, "
           "or -1e4), so a fully forbidden slice gives a finite result and a zero gradient; or remove the state that "
           "nothing may reach (the padding tag) from what is reduced.")
    return s1, why, fix


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


def _changed_after(g: Graph, links: Links, who: str, written: Summary | None, now: Summary | None = None) -> tuple[str, str] | None:
    """When a traced in-place op turned the gradient backward wrote into ``who.grad``
    (``written``) into other non-finite values (``now``, when known: what ``.grad`` holds at
    the end), made from exactly what backward wrote (``clip_grad_norm_`` scaling an inf by 0):
    a sentence naming that op, and a fix."""
    if written is None or written.head is None or not bad(written):
        return None
    if now is not None and (now.head is None or same_head(written.head, now.head)):
        return None
    for t in g.tensors:
        op = links.maker.get(t.id)
        v = t.value
        if op is None or v is None or v.head is None or v.shape != written.shape or not bad(v):
            continue
        if (now is not None and not same_head(v.head, now.head)) or same_head(v.head, written.head):
            continue
        now_t = v
        o = g.node(op)
        if not (o.forward or "").endswith("_"):
            continue
        ins = links.forward_inputs(op)
        # (the gradient must be what the op changed in place, its target: the first input, or
        # for a _foreach_ op the input at its output's position; an input the op only read, as
        # SGD's param.add_(grad), changed nothing in .grad)
        targets = ins[:1]
        if (o.forward or "").startswith("_foreach"):  # (output k is the new version of the k-th input changed)
            outs = [e.dst for e in g.edges if e.kind == "output" and e.src == op]
            targets = [ins[outs.index(t.id)]] if t.id in outs and outs.index(t.id) < len(ins) else []
        before = next((i for i in targets if (v := g.node(i).value) is not None and v.shape == written.shape
                       and same_head(v.head, written.head)), None)
        if before is None:
            continue
        at, v_now = _at(now_t)
        was = value_at(written, at, tuple(now_t.shape)) if at is not None else None
        how = ""
        clip = "clip_grad_norm_" in (o.code or "")
        if base(o.forward) in ("mul", "foreach_mul") and was is not None and kind(was) in ("inf", "-inf"):
            zero = next((i for i in ins if i != before and (v := g.node(i).value) is not None and v.numel == 1
                         and v.head == (0.0,)), None)
            if zero is not None:
                by = "the clip coefficient, 0" if clip else f"{links.label(zero)} = 0"
                how = f": it multiplied {format_number(was, 6)} by {by}, and inf × 0 is NaN"
        if clip and how:
            how += " (clip_grad_norm_ scales every gradient by max_norm / total_norm, which is 0 when the total norm is inf)"
        pos = index(tuple(now_t.shape), at)
        s = (f"After backward, {o.forward}{_where(o.line, o.code)} changed {who}.grad in place: backward had written "
             f"{kind(was) if was is not None else 'a non-finite value'} at {who}.grad{pos}, and {o.forward} left "
             f"{kind(v_now)} there{how}.")
        fix = ("Pass error_if_nonfinite=True to clip_grad_norm_ (it raises instead of scaling by 0), or skip the step when "
               "the total norm it returns is not finite." if clip else
               f"Check torch.isfinite({who}.grad).all() before changing the gradient in place.")
        return s, fix
    return None


#: Backward nodes that send NaN where every input of a reduced slice is -inf (exp(-inf - (-inf))).
_MASKED_BACKWARDS = frozenset({"LogsumexpBackward0", "SoftmaxBackward0", "LogSoftmaxBackward0"})

_HOOK_NOTE = re.compile(r"^a gradient hook registered at line (\d+): (.*)$")


def _hook_answer(g: Graph, links: Links, node: TensorNode, who: str, steps: list, pass_nr: int, relevant: set | None,
                 common: dict) -> Explanation | None:
    """No node sent a non-finite gradient from finite ones, but one received a non-finite
    gradient that differs from what the nodes upstream sent: a hook on that tensor made it."""
    step = next((s for s in steps if s.backward == pass_nr and (relevant is None or s.op in relevant)
                 and any(nr < len(s.grads_in) and bad(s.grads_in[nr]) for nr in s.hooked)), None)
    if step is None:
        return None
    nr = next(nr for nr in step.hooked if nr < len(step.grads_in) and bad(step.grads_in[nr]))
    arrived = step.grads_in[nr]
    t = links.made.get(step.op, {}).get(nr)
    label = links.label(t) if t else f"the output of {step.name}"
    hooks = [m.groups() for m in (_HOOK_NOTE.match(n) for n in g.notes.get(t, ())) if m] if t else []
    at, v = _at(arrived)
    where = (f", registered at line {hooks[0][0]} ({hooks[0][1]})" if len(hooks) == 1 else
             f", registered at lines {', '.join(h[0] for h in hooks)}" if hooks else "")
    s1 = (f"{_is(who + '.grad', node.grad, node.shape)} because a gradient hook on {label}{where} returned {kind(v)}: "
          f"every node upstream sent {label} a finite gradient, but what arrived at {step.name} (step {step.index + 1} of "
          f"tr.replay()) after the hook held {kind(v)} (at {index(arrived.shape, at) or 'one position'}), and the "
          f"backward carried it on to "
          f"{who}.grad.")
    why = ("graphlens does not see inside the hook; the common cause: a hook that divides the gradient by its own norm or "
           "sum (g / g.norm()) makes 0 / 0 = NaN when the gradient is all zeros (a layer after it initialised to 0, a dead "
           "ReLU, an unused branch).")
    fix = ("Guard the hook's division: g / (g.norm() + eps), or g / g.norm().clamp(min=eps), or return g unchanged where "
           "its norm is 0 (torch.where(n > 0, g / n, g)).")
    lineno = int(hooks[0][0]) if hooks else None
    return Explanation(["nonfinite_backward", "nonfinite_hook"], [s1, why], fix=fix, op="hook",
                       line=hooks[0][1] if hooks else None, lineno=lineno, cause=step.op,
                       path=(step.op,), facts=[(step.op, "op", step.name)], **common)


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




def diverged(g: Graph, e: Explanation | None) -> Explanation | None:
    """``e``, with the sign of training that diverged added where it is an overflow and a root of
    the trace (the loss) was recorded step after step, finite and growing a million-fold before it
    overflowed: the steps, not one op, made the values too large."""
    if e is None or "overflow" not in e.reasons:
        return e
    for r in g.roots:
        vals = [t.value.head[0] for t in g.tensors if r.name and t.name == r.name and t.value is not None
                and t.value.numel == 1 and t.value.head and type(t.value.head[0]) is float]
        finite = []
        for v in vals:
            if v != v or v in (float("inf"), float("-inf")):
                break
            finite.append(abs(v))
        if len(finite) < 3 or not finite[0] or finite[-1] < 1e6 * finite[0]:
            continue
        ups = sum(b > a for a, b in zip(finite, finite[1:]))
        if ups * 3 < 2 * (len(finite) - 1):
            continue
        shown = [finite[0], finite[len(finite) // 3], finite[2 * len(finite) // 3], finite[-1]]
        shown = ", ".join(format_number(v, 3) for v in dict.fromkeys(shown))
        e.sentences = e.sentences + (
            f"{r.name} grew step after step before that ({shown} over the {len(finite)} steps the trace saw finite): the "
            f"training steps made the values diverge, the usual sign of a learning rate too high for this model.",)
        e.fix = ("Lower the learning rate (or clip the gradient norm: torch.nn.utils.clip_grad_norm_) so the steps stop "
                 "growing the values. " + (e.fix or ""))
        if "diverged" not in e.reasons:
            e.reasons = e.reasons + ("diverged",)
        return e
    return e


def grad_call_answer(g: Graph, links: Links, first: TensorNode, s0: str, steps: list, common: dict) -> Explanation | None:
    """The answer for a non-finite gradient ``first`` that ``torch.autograd.grad`` handed back
    (with no graph of its own): the backward call that sent exactly that value (the same head)
    along an edge, and the first node of that call that sent a non-finite gradient from finite
    ones.  None when no call did (nothing is guessed)."""
    for p in sorted({s.backward for s in steps}, reverse=True):
        mine = [s for s in steps if s.backward == p]
        if not any(x is not None and same_head(x.head, first.value.head) for s in mine for x in s.grads_out):
            continue
        found = _origins(steps, p, None)
        if not found:
            return None
        call = f" at line {first.line} ({first.code})" if first.line and first.code else ""
        return _call_answer(g, links, found[:1], f"{s0}: torch.autograd.grad{call} handed it back from backward call {p + 1} of "
                            f"tr.replay().", ["nonfinite_backward"], common, steps)
    return None


def created_answer(g: Graph, links: Links, first: TensorNode, maker: str, s0: str, steps: list, common: dict) -> Explanation | None:
    """The answer for a non-finite value ``first`` made by backward node ``maker`` (a gradient
    computed with ``create_graph=True``, as ``torch.autograd.grad`` in a physics-informed loss
    makes): the backward call that made it is the latest one before ``maker`` first ran (or the
    last one, when it never ran); the first node of that call that sent a non-finite gradient
    from finite ones is said, as a fact of that call.  ``s0`` opens the first sentence
    (``"u_x is -inf at u_x[0, 0]"``).  None when no call had such a node (nothing is guessed)."""
    passes = sorted({s.backward for s in steps})
    ran = [s.backward for s in steps if s.op == maker]
    before = ran[0] if ran else (passes[-1] + 1 if passes else 0)
    for p in reversed([p for p in passes if p < before]):
        found = _origins(steps, p, None)
        if found:
            break
    else:
        return None
    return _call_answer(g, links, found, f"{s0}: {g.node(maker).name} made it during backward call {found[0].backward + 1} "
                        f"of tr.replay(), a gradient computed with create_graph=True (backward nodes computed it, and the "
                        f"result carries their graph).", ["nonfinite_forward", "nonfinite_backward"], common, steps)


def _call_answer(g: Graph, links: Links, found: list, opening: str, codes: list, common: dict, steps: list) -> Explanation:
    """The answer of :func:`grad_call_answer` and :func:`created_answer`: ``opening`` (the call that
    made the value), then the first node of that call that sent a non-finite gradient from finite
    ones (``found``: those nodes, in the engine's order), why, and how many more did; where that
    node only multiplied by a forward input that was already NaN or inf there, the forward answer
    for that input (where it began)."""
    step = found[0]
    o = _origin(g, links, step, None)
    t = g.node(o["tainted"]) if o["tainted"] is not None else None
    e = _forward_answer(g, links, t, links.label(t.id), steps) if t is not None else None
    if e is not None:
        s1 = (f"{opening} In that call the first non-finite gradient came from {o['what']}{o['values']}. Its input "
              f"{links.label(t.id)} was already {_tainted_at(g, links, t, o)} in the forward pass, and the backward carries "
              f"that value into the gradient{_summed(g, step.op)}.")
        return Explanation(codes + [c for c in e.reasons if c not in codes], [s1, *e.sentences], fix=e.fix,
                           path=(step.op,) + tuple(e.path), op=e.op or o["op"], line=e.line if e.op else o["line"],
                           lineno=e.lineno if e.op else o["lineno"], cause=e.cause, facts=e.facts, **common)
    s1 = f"{opening} In that call the first non-finite gradient came from {o['what']}{o['values']}."
    more = [f"{len(found) - 1} more node(s) of that call sent a non-finite gradient from finite ones too."] if len(found) > 1 else []
    return Explanation(codes + o["codes"], [s1, o["why"]] + more, fix=o["fix"], path=(step.op,), op=o["op"], line=o["line"],
                       lineno=o["lineno"], cause=step.op, facts=[(step.op, "op", step.name)], **common)


origins, origin, turned, backward_answer, changed_after = _origins, _origin, _turned, _backward_answer, _changed_after
