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
import re
from typing import TYPE_CHECKING

from ..flowed import flowed_items
from ..graph import FREED, Graph, TensorNode
from .nonfinite_backward import backward_answer as _backward_answer, changed_after as _changed_after, explain_failed_node, masked_softmax, origin as _origin, \
    origins as _origins, turned as _turned, created_answer as _created_answer, grad_call_answer as _grad_call_answer, \
    diverged as _diverged
from .nonfinite_links import hidden_by_exp
from .nonfinite_rules import masked_product
from .nonfinite_causes import ATTENTIONS, FILLS, SOFTMAXES, Cause, Links, bad, base, forward_cause, index, kind, live_as_recorded, value_at, \
    masked_softmax_cause
from .nonfinite_text import GUARD as _GUARD, data_path as _path, first_bad as _at, is_text as _is, occurrence as _occurrence, \
    values_text as _values, versions as _versions, where_text as _where
from .types import NONFINITE_REASONS, Explanation

if TYPE_CHECKING:  # pragma: no cover
    from ..replay import Replay, Step

__all__ = ["explain_nonfinite", "explain_failed_node", "NONFINITE_REASONS", "nonfinite_in"]

#: The reason codes of this module are :data:`graphlens.explain.types.NONFINITE_REASONS` (part of GRAD_REASONS).
def nonfinite_in(node: TensorNode) -> str | None:
    """Which of ``node``'s records holds NaN or infinity: ``"value"``, ``"grad"`` or
    ``"flowed"`` (a gradient that passed through it), else None."""
    if bad(node.value):
        return "value"
    if bad(node.grad):
        return "grad"
    if any(bad(f) for _, f in flowed_items(node.flowed)):
        return "flowed"
    return None


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
        if e is not None and node.is_leaf and (bad(node.grad) or any(bad(f) for _, f in flowed_items(node.flowed))):
            e = _and_gradient(g, links, node, who, steps, e)
        return _diverged(g, e)
    # A gradient.  When the loss it comes from is not finite, the forward pass explains it (every
    # gradient of a NaN loss is NaN); else the first backward node that sent a non-finite one does.
    reach = _reaching_roots(g, links, node)
    # (and the loss of the backward call that wrote it: a gradient computed with create_graph=True between
    # them is made by backward nodes, whose inputs the records do not link to node)
    wrote = {s.backward for s in steps for w in s.writes if w.tensor == node.id and bad(w.after)}
    reach += [g.node(r) for r in (_pass_root(links, steps, k) for k in sorted(wrote)) if r and g.node(r) not in reach]
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
    if b.cause is not None and (b.cause == e.cause or b.cause in e.path):
        return e  # (the value's answer already follows the gradient to that origin)
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
    bad_ids = links.tainted_at(node.id, _at(node.value)[0])
    if not bad_ids:
        return None
    first = g.node(bad_ids[0])
    fill = None
    if _deliberate(g, links, first):  # (a mask's -inf: the NaN a softmax made of it is what went wrong)
        nan = next((t for t in bad_ids[1:] if _masked_softmax(g, links, t, first.id)), None)
        if nan is not None:
            fill, first = first, g.node(nan)
    elif (links.maker.get(first.id) is None and kind(_at(node.value)[1]) == "NaN" and _infinite_only(first)
          and _written_grad(links, first, steps) is None):
        # (a NaN, and the earliest value it comes from is an input made before the block that holds
        # infinities but no NaN, an additive mask perhaps: a later value it comes from that is NaN itself
        # explains the NaN on its own (whatever made that NaN, its own answer says), the infinity may not)
        nan = next((g.node(t) for t in bad_ids[1:] if kind(_at(g.node(t).value)[1]) == "NaN"), None)
        if nan is not None:
            first = nan
    if grad_of is not None:
        at_, v_ = _at(node.value)
        head = f"{grad_of[0]}.grad is not finite because the loss it comes from, {who}, is {kind(v_)}"
        asked, asked_id = grad_of[0], grad_of[1].id
    else:
        head, asked, asked_id = head or _is(who, node.value, node.shape), who, node.id
    at, bad_value = links.read_at(first) or _at(first.value)
    asked_at, kept = _at(node.value)[0], None
    if asked_at != at and first.id in links.kept_from(node.id, asked_at):
        # (the asked element is one an assignment left as the target held it: that element of it)
        v = value_at(first.value, asked_at, first.shape)
        if type(v) is float and not math.isfinite(v):
            at, bad_value = kept = asked_at, v
    if fill is not None and kind(bad_value) != "NaN":
        # (softmax's results are never infinite; log_softmax's masked -inf are fine: the NaN is what went wrong)
        bad_value = math.nan
        if base(g.node(links.maker[first.id]).forward) in ("log_softmax", "_log_softmax"):
            at = None
    fname, pos, what = links.label(first.id), index(first.shape, at), kind(bad_value)
    maker = links.maker.get(first.id)
    common = dict(tensor_name=asked, tensor_id=asked_id, graph=g)
    if maker is None:
        same = first.id == node.id or (fname == who and grad_of is None)  # (an earlier record of the same variable)
        intro = f"{head}: it" if same else (f"{head}: {fname}" if grad_of is not None else f"{head} because {fname}")
        if first.made_by == "autograd.grad" and steps and first.value is not None:
            s0 = head if same else f"{intro} is {what} at {fname}{pos}"
            made = _grad_call_answer(g, links, first, s0, steps, common)
            if made is not None:
                return made
        return _without_maker(g, links, node, first, head, intro, steps, common, kept)
    op = g.node(maker)
    fwd = op.forward or op.name or maker
    hidden = hidden_by_exp(g, links, maker) if base(fwd) in ("log", "log2", "log10") else None
    if hidden is not None:  # (log of a sum of exps of -inf: the -inf came first, exp(-inf) = 0 only hid it)
        inner = _forward_answer(g, links, hidden, links.label(hidden.id), steps)
        if inner is not None:
            hid = links.made_by(links.forward_inputs(maker)[0])  # (sum: a sum of exps; sigmoid or exp: taken directly)
            what_was = "a sum of exps that was 0: the exps there" if hid in ("sum", "mean") else f"a {hid} that was 0: the {hid} there"
            s0 = (f"{head} because {links.label(first.id)}{index(first.shape, at)} is {kind(bad_value)}, made by {fwd}"
                  f"{_where(op.line, op.code)} of {what_was} received -inf, not a finite number far below 0, so the value "
                  f"was already not finite before ({hid if hid not in ('sum', 'mean') else 'exp'}(-inf) = 0 only hid it on the way).")
            return Explanation(list(inner.reasons), [s0, *inner.sentences], fix=inner.fix,
                               path=tuple(inner.path) + _path(links, first.id, node.id), op=inner.op, line=inner.line,
                               lineno=inner.lineno, cause=inner.cause, facts=inner.facts, tensor_name=asked, tensor_id=asked_id,
                               graph=g)
    if op.forward is None and steps and not links.forward_inputs(maker):  # (a gradient made with create_graph=True)
        s0 = (head if first.id == node.id else f"{head}, and the first non-finite value {who} was computed from was {what} at {fname}{pos}"
              if grad_of is not None else f"{head} because the first non-finite value it was computed from was {what} at {fname}{pos}")
        made = _created_answer(g, links, first, maker, s0, steps, common)
        if made is not None:
            return made
    if fill is not None:
        vals, cause = "", masked_softmax_cause(g, links, maker, at, first, fill)
    else:
        vals, cause = _values(g, links, maker, at, first.shape), forward_cause(g, links, op, maker, at, first, bad_value)
        if cause.code == "masked_infinity":
            cause = _smoothed(g, links, bad_ids, first.id, cause)
        unchecked = [t for t in links.forward_inputs(maker) if _unchecked(g.node(t))]
        if unchecked and cause.code == "nonfinite_forward":
            who_ = ", ".join(links.label(t) for t in unchecked[:3])
            cause = Cause("nonfinite_unseen", f"{who_} (made before the block) could not be checked for NaN or inf: it was "
                          f"changed in place before graphlens read it, so graphlens cannot tell whether {fwd} made the "
                          f"non-finite value or passed on one {who_} already held.",
                          f"Check {who_} before the block (torch.isfinite(x).all()), or use it once inside the block before "
                          f"it is changed, and ask again.")
    line = _where(op.line, op.code) + _occurrence(g, maker)
    value = "the first NaN" if fill is not None else "the first non-finite value"
    if first.id == node.id:
        s1 = f"{head}: {fwd} made it{line}{vals}."
    else:
        core = f"{what} at {fname}{pos}, made by {fwd}{line}{vals}"
        s1 = (f"{head}, and {value} {who} was computed from was {core}." if grad_of is not None
              else f"{head} because {value} {it} computed from was {core}.")
    codes = ["nonfinite_forward"] + ([cause.code] if cause.code != "nonfinite_forward" else []) + list(cause.more)
    if first.is_parameter and "nonfinite_parameter" not in codes:
        codes.append("nonfinite_parameter")  # (a parameter written in place: an optimizer step made the value)
    if cause.code == "masked_infinity" and "so it is label_smoothing" in cause.why:
        codes.append("label_smoothing")
    mp = masked_product(g, links, bad_ids, first, kind(_at(node.value)[1]) == "NaN") or ("", "")  # (inf times a 0 of a mask)
    why, fix = cause.why + mp[0], cause.fix + mp[1]
    return Explanation(codes, [s1, why], fix=fix, path=_path(links, first.id, node.id) + (maker,), op=fwd,
                       line=op.code, lineno=op.line, cause=maker, facts=[(maker, "op", fwd)],
                       **common)


_CLASS_LOSSES = ("cross_entropy", "nll_loss")


def _smoothed(g: Graph, links: Links, bad_ids: list, fill: str, cause: Cause) -> Cause:
    """A mask's -inf that a classification loss turned into an infinite loss (the masked class is
    the target, or label_smoothing spreads the target over every class): the loss named, and a
    fix that works with smoothing (a finite mask, soft targets over the allowed classes)."""
    loss = next((t for t in bad_ids if base(g.node(links.maker[t]).forward if links.maker.get(t) else "") in _CLASS_LOSSES
                 and fill in links.ancestors(t)), None)
    if loss is None:
        return _picked(g, links, bad_ids, fill, cause)
    op = g.node(links.maker[loss])
    hit = _masked_target(g, links, links.maker[loss])
    counts = ("the loss counts a masked class where it is the target, or everywhere with label_smoothing (which gives "
              "every class, masked ones too, a share of the target)")
    if hit is False:
        counts = ("no target here is a masked class, so it is label_smoothing that counts them: it gives every class, "
                  "masked ones too, a share of the target")
    elif hit:
        counts = f"the target of row {hit[0]} is class {hit[1]}, which is masked"
    why = (f"{cause.why.split(':')[0]}: a mask. Then {op.forward}{_where(op.line, op.code)} made an infinite loss of it: "
           f"-log p of a class masked with -inf (p = 0) is inf, and {counts}.")
    if hit:
        return Cause(cause.code, why, f"The mask and the labels disagree: row {hit[0]}'s target, class {hit[1]}, is masked. "
                     "Fix the mask (never mask a row's own target) or the labels; to find such rows: "
                     "torch.isinf(logits.gather(1, target[:, None])).")
    fix = ("With label_smoothing no mask value is harmless: mask with torch.finfo(logits.dtype).min instead of -inf and "
           "build the smoothed target over the allowed classes yourself (probability 0 on the masked ones), then pass it "
           "as probabilities: F.cross_entropy(logits, target_probs). Without label_smoothing a -inf mask is fine as long as "
           "no target is a masked class.")
    return Cause(cause.code, why, fix)


_PICKS = frozenset({"gather", "take_along_dim", "index_select", "getitem", "index"})


def _picked(g: Graph, links: Links, bad_ids: list, fill: str, cause: Cause) -> Cause:
    """A mask's -inf that an index picked from the (log-)probabilities (``log_probs.gather(1,
    actions)`` with an action the mask forbids): that pick named, and a fix about the index."""
    pick = next((t for t in bad_ids if links.maker.get(t) and base(g.node(links.maker[t]).forward) in _PICKS
                 and fill in links.ancestors(t) and kind(_at(g.node(t).value)[1]) == "-inf"), None)
    if pick is None:
        return cause
    op = g.node(links.maker[pick])
    at, _ = _at(g.node(pick).value)
    pos = index(g.node(pick).shape, at)
    why = (f"{cause.why.split(':')[0]}: a mask. Then {op.forward}{_where(op.line, op.code)} picked a masked position: "
           f"{links.label(pick)}{pos} is -inf, the log-probability of an index (an action, a class) that the mask "
           f"forbids (probability 0), and every value computed from it is not finite.")
    fix = ("The index and the mask disagree: the index picked at that row is masked. Keep the mask of the moment the "
           "action was taken (store it with the action), or never mask a chosen index; to find such rows: "
           f"torch.isinf({links.label(pick) if _named(links.label(pick)) else 'picked'}).")
    return Cause(cause.code, why, fix)


def _named(label: str) -> bool:
    return label.replace(".", "_").isidentifier() and not (label[:1] == "t" and label[1:].isdigit())


def _masked_target(g: Graph, links: Links, op: str) -> tuple | bool | None:
    """For a classification loss ``op`` over 2-d logits with -inf masks: ``(row, class)`` of a target
    that is a masked class, False when no target is (read from the live logits, still as recorded,
    and the targets), None when that cannot be told."""
    import torch

    ins = links.forward_inputs(op)
    if len(ins) < 2:
        return None
    logits, target = live_as_recorded(g, ins[0]), live_as_recorded(g, ins[1])
    try:
        if logits is None or target is None or logits.dim() != 2 or target.dim() != 1 or target.dtype not in (torch.int64, torch.int32):
            return None
        with torch.no_grad(), torch._C.DisableTorchFunction():
            rows = torch.arange(len(target))
            keep = target >= 0  # (ignore_index rows)
            picked = logits.detach()[rows[keep], target[keep]]
            masked = torch.isinf(picked) & (picked < 0)
            if bool(masked.any()):
                r = int(rows[keep][masked][0])
                return (r, int(target[r]))
            return False
    except Exception:  # noqa: BLE001 - a check on live data is a bonus
        return None


def _infinite_only(t: TensorNode) -> bool:
    """Whether ``t``'s recorded value holds infinities and, as far as the record knows, no NaN
    (its first non-finite element is an infinity, and its head holds no NaN)."""
    _, v = _at(t.value)
    head = t.value.head if t.value is not None else None
    return kind(v) in ("inf", "-inf") and not any(isinstance(x, float) and x != x for x in (head or ()))


def _deliberate(g: Graph, links: Links, t: TensorNode) -> bool:
    """Whether ``t``'s first non-finite value is an infinity the program wrote on purpose: a fill
    (``masked_fill(mask, float("-inf"))``, ``torch.full``) of finite tensors."""
    op = links.maker.get(t.id)
    if op is None:  # (a factory the trace holds as a leaf: torch.full((n, n), -inf))
        _, v = _at(t.value)
        return base(t.made_by) in FILLS and kind(v) != "NaN"
    if base(g.node(op).forward) == "log":
        return _log_mask(g, links, t, op)
    if base(g.node(op).forward) not in FILLS:
        return False
    _, v = _at(t.value)
    return kind(v) != "NaN" and not any(bad(g.node(i).value) for i in links.forward_inputs(op))


def _log_mask(g: Graph, links: Links, t: TensorNode, op: str) -> bool:
    """Whether ``t = log(mask)`` is an additive mask (0 where the mask is 1, -inf where it is 0): the
    mask holds only 0 and 1 (every value, read from the live tensor or the record), and the log is
    added to scores."""
    import torch

    _, v = _at(t.value)
    ins = links.forward_inputs(op)
    if kind(v) != "-inf" or len(ins) != 1 or not any(base(g.node(c).forward) in ("add", "radd", "sub")
                                                       for c in links.consumers.get(t.id, ())):
        return False
    m = g.node(ins[0]).value
    live = live_as_recorded(g, ins[0])
    if live is not None:
        try:
            with torch.no_grad(), torch._C.DisableTorchFunction():
                return bool(((live == 0) | (live == 1)).all())
        except Exception:  # noqa: BLE001 - a check on live data is a bonus
            return False
    # (else the values the record holds: every one, or at least a head of them, all 0 or 1, a log added to scores)
    return m is not None and m.head is not None and len(m.head) >= min(m.numel, 4) and all(x in (0, 1) for x in m.head)


def _masked_softmax(g: Graph, links: Links, tid: str, fill: str) -> bool:
    """Whether ``tid`` is the NaN a softmax made of a row holding the infinities of ``fill``."""
    op = links.maker.get(tid)
    name = base(g.node(op).forward) if op is not None else ""
    if name not in SOFTMAXES and name not in ATTENTIONS:
        return False
    ins = links.forward_inputs(op) if name in ATTENTIONS else links.forward_inputs(op)[:1]
    if not any(bad(g.node(i).value) and fill in links.ancestors(i) for i in ins):
        return False
    _, v = _at(g.node(tid).value)
    # (softmax's results, and attention's weighted sums of finite values, are never infinite)
    if kind(v) == "NaN" or (v is None and name not in ("log_softmax", "_log_softmax")):
        return True
    return name in ("log_softmax", "_log_softmax") and (_live_nan(g, tid) or _selected_nan(g, links, tid))  # (its -inf: fine)


_COPIES = frozenset({"gather", "getitem", "index", "index_select", "take_along_dim", "select", "narrow", "squeeze",
                     "unsqueeze", "view", "reshape", "t", "transpose", "permute", "clone", "contiguous"})


def _selected_nan(g: Graph, links: Links, tid: str) -> bool:
    """Whether ``tid`` held a NaN beyond what its record shows: an op that only copies or selects
    its elements (gather, indexing, a view) made a NaN of it, and it was its one non-finite input."""
    for c in links.consumers.get(tid, ()):
        if base(g.node(c).forward) not in _COPIES:
            continue
        if any(i != tid and bad(g.node(i).value) for i in links.forward_inputs(c)):
            continue
        if any(kind(_at(g.node(o).value)[1]) == "NaN" for o in links.made.get(c, {}).values() if bad(g.node(o).value)):
            return True
    return False


def _live_nan(g: Graph, tid: str) -> bool:
    """Whether the live tensor of record ``tid``, still the version recorded, holds a NaN."""
    import torch

    t = live_as_recorded(g, tid)
    try:
        if t is None:
            return False
        with torch.no_grad(), torch._C.DisableTorchFunction():
            return bool(torch.isnan(t.detach()).any())
    except Exception:  # noqa: BLE001 - a check on live data is a bonus
        return False


def _written_grad(links: Links, first: TensorNode, steps: list) -> tuple | None:
    """``(step, write)`` when ``first`` is a gradient a backward step wrote (a ``.grad`` an
    optimizer step then used), else None."""
    if first.requires_grad:
        return None
    return next(((s, w) for s in steps for w in s.writes if bad(w.after) and w.after == first.value
                 and _used_after(links, first, s)), None)


def _without_maker(g: Graph, links: Links, node: TensorNode, first: TensorNode, head: str, intro: str, steps: list,
                   common: dict, kept: tuple | None = None) -> Explanation:
    """The first non-finite value was made by nothing the trace saw: a gradient an optimizer step
    used, a value changed after the trace saw it, a parameter, or the input data (``kept``: the
    position and value of ``first`` the asked element is, where an assignment left it)."""
    at, v = kept or _at(first.value)
    fname, pos, what = links.label(first.id), index(first.shape, at), kind(v)
    path = _path(links, first.id, node.id)
    write = _written_grad(links, first, steps)
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
               f"and ask again: graphlens then names the step and the gradient that made {fname} non-finite; if the values "
               f"were loaded (load_state_dict, a checkpoint), check what was loaded "
               f"(all(torch.isfinite(v).all() for v in state_dict.values())) and go back to an earlier checkpoint. {_GUARD}")
        code = "nonfinite_parameter"
    elif _OPT_STATE.match(fname):
        opt, param, key = _OPT_STATE.match(fname).groups()
        s1 = (f"{intro} is the optimizer's state ({key} of {param}), which already held {what} at {pos or 'one position'} "
              f"when the trace first saw it: it was made non-finite before the block (loaded with "
              f"{opt}.load_state_dict from a checkpoint, or left by an earlier step), and each step computes the update "
              f"from it.")
        fix = (f"Check the optimizer's state where it is loaded (all(torch.isfinite(v).all() for s in {opt}.state.values() "
               f"for v in s.values() if torch.is_tensor(v))); reset it ({opt}.state.clear(), or a new optimizer) or load an "
               f"earlier checkpoint whose state is finite.")
        code = "nonfinite_input"
    elif fname.rsplit(".", 1)[-1] in ("running_mean", "running_var"):
        module = re.sub(r"\.(\d+)(?=\.|$)", r"[\1]", fname.rsplit(".", 1)[0])  # (net.1 -> net[1], as code writes it)
        s1 = (f"{intro} is a running statistic of a batch norm layer that already held {what} at {fname}{pos} when the "
              f"trace first saw it: in eval mode the layer normalises with it, so every output it touches is {what}. A "
              f"training step before the trace put it there (a batch holding NaN or inf, or a diverged forward pass, "
              f"updated the running statistics).")
        fix = (f"Reset the statistics ({module}.reset_running_stats(), then run training batches to fill them again, or "
               f"load them from a good checkpoint), and trace the training steps to find the batch that made them "
               f"non-finite; check torch.isfinite(x).all() for each training batch.")
        code = "nonfinite_input"
    elif not first.made_by and not first.is_parameter and re.fullmatch(r"[A-Za-z_]\w*(\.\w+)+", fname or ""):
        owner, attr = fname.rsplit(".", 1)  # (a tensor a module or object keeps: a buffer, or an attribute set when it was built)
        s1 = (f"{intro} is a tensor the module {owner} keeps ({attr}: a buffer, or an attribute), which already held {what} "
              f"at {fname}{pos} when the trace first saw it: it was computed before the block, when {owner} was built (its "
              f"__init__) or since.")
        fix = (f"Find where {fname} is computed (register_buffer('{attr}', ...) or self.{attr} = ... in {owner}'s class) and "
               f"why it is NaN or inf there: check torch.isfinite({fname}).all() right after {owner} is built, or build it "
               f"inside graphlens.trace() and ask about it: the trace names the op that made the value; replacing the "
               f"values (torch.nan_to_num) would hide a wrong computation.")
        code = "nonfinite_input"
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


#: The name graphlens gives an optimizer's state tensor (graphlens.names.state_names).
_OPT_STATE = re.compile(r"^(\w+)\.state\[(.+)\]\['(\w+)'\]$")


def _unchecked(t: TensorNode) -> bool:
    """Whether ``t`` is a floating tensor from before the block whose values were never checked."""
    v = t.value
    return (v is not None and v.finite is None and v.head is not None and not t.requires_grad
            and t.dtype.startswith(("float", "bfloat", "complex")) and not t.made_by)


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
    wrote, writer = "", None
    versions = _versions(g, links, w.tensor)
    written = next((t for t in versions if bad(g.node(t).value) and links.maker.get(t)), None)
    if written is not None:
        writer, wt = links.maker[written], g.node(written)
        wat, wv = _at(wt.value)
        wrote = f" (its {g.node(writer).forward} wrote {kind(wv)} into {param}{index(wt.shape, wat)})"
        user = g.node(writer)  # (the update is the op that wrote the parameter, not the first that read the gradient)
    did = f"{user.code} at line {user.line}" if user.code and user.line else f"{user.forward}"
    s1 = (f"{head}. It comes from a gradient: {param}.grad held {kind(v)} at {param}.grad{pos} after backward pass "
          f"{step.backward + 1}, and {did} computed an update from it{wrote}.")
    sentences, codes, fix = [s1], ["nonfinite_forward", "nonfinite_parameter"], _GUARD
    after = _changed_after(g, links, param, w.after)
    relevant = links.upstream(step.op) - {step.op}
    origins = _origins(steps, step.backward, relevant, links, step.op)
    root = _pass_root(links, steps, step.backward)
    desc = _origin(g, links, origins[0], relevant | {step.op}) if origins else None
    loss_finite = root is None or not bad(g.node(root).value)
    masked = masked_softmax(g, links, origins[0], desc, f"The loss of backward pass {step.backward + 1} was finite") \
        if desc is not None and loss_finite else None
    if masked is not None:
        # (an all -inf slice of a softmax: its backward made the NaN, not the mask's own -inf)
        sentences += list(masked[:2])
        codes += ["nonfinite_backward", "masked_softmax"]
        fix = masked[2] + " " + _GUARD
        if after is not None:
            sentences.append(after[0])
            fix += " " + after[1]
        o = origins[0]
        return Explanation(codes, sentences, fix=fix, path=(o.op, desc["tainted"], grad_t.id) + _path(links, grad_t.id, node.id),
                           op=desc["op"], line=desc["line"], lineno=desc["lineno"], cause=o.op,
                           facts=[(o.op, "op", o.name)], **common)
    source = root if root is not None and root != node.id and bad(g.node(root).value) else (
        desc["tainted"] if desc is not None and desc["tainted"] is not None else None)
    if source is not None:
        # (that backward pass carried a NaN of its own forward pass: every gradient of a non-finite loss is
        # non-finite; the forward answer of that value says where it began)
        rn = g.node(source)
        _, rv = _at(rn.value)
        e = _forward_answer(g, links, rn, links.label(source), steps)
        lead = (f"Backward pass {step.backward + 1} started from {links.label(source)}, which was already {kind(rv)}: every "
                f"gradient it sent was not finite." if source == root else
                f"Backward pass {step.backward + 1} carried a value of its forward pass that was already {kind(rv)} "
                f"({links.label(source)}).")
        sentences.append(lead)
        if e is not None:
            sentences += list(e.sentences)
            codes += [c for c in e.reasons if c not in codes]
            fix = f"{e.fix} {_GUARD}" if e.fix else _GUARD
            if after is not None:
                sentences.append(after[0])
                fix += " " + after[1]
            return Explanation(codes, sentences, fix=fix, path=tuple(e.path) + _path(links, grad_t.id, node.id),
                               op=e.op, line=e.line, lineno=e.lineno, cause=e.cause, facts=e.facts, **common)
        origins = []
    if origins:
        o = origins[0]
        sentences.append(f"That {kind(v)} came from {desc['what']}{desc['values']}. {desc['why']}")
        sentences += _turned(g, steps, o, relevant, v, f"{param}.grad", desc["lineno"])
        codes += desc["codes"]
        fix = desc["fix"] + " " + _GUARD
    if after is not None:
        sentences.append(after[0])
        fix += " " + after[1]
    op_id = writer or users[0]
    began = (origins[0].op,) if origins else ()  # (where the non-finite gradient began: on the answer's path)
    return Explanation(codes, sentences, fix=fix, path=began + (grad_t.id, op_id) + _path(links, grad_t.id, node.id),
                       op=g.node(op_id).forward, line=user.code, lineno=user.line, cause=op_id,
                       facts=[(op_id, "op", g.node(op_id).forward)], **common)


def _pass_root(links: Links, steps: list, k: int) -> str | None:
    """The tensor backward pass ``k`` started from (its loss): the output of the node it ran first."""
    first = next((st.op for st in steps if st.backward == k), None)
    outs = list(links.made.get(first, {}).values()) if first is not None else []
    return outs[0] if outs else None


# -- without a trace -----------------------------------------------------------------------------
def _snapshot_answer(g: Graph, links: Links, node: TensorNode, who: str, where: str) -> Explanation:
    s = node.value if where == "value" else node.grad
    subject = who if where == "value" else f"{who}.grad"
    sentences = [_is(subject, s, node.shape) + "."]
    reasons = ["nonfinite_forward" if where == "value" else "nonfinite_backward"]
    leaves = [t for t in g.leaves if bad(t.value) and t.id != node.id]
    if node.is_leaf and bad(node.value):
        sentences.append("It is a leaf: no op of its graph computed it, so something before (an optimizer step, "
                         "the data, values loaded into it) put the NaN or inf there.")
    written = [t for t in leaves if t.version > 0]  # (written in place since made: an optimizer step, for one)
    if leaves:
        shown = ", ".join(f"{links.label(t.id)} (at {links.label(t.id)}{index(t.shape, t.value.nonfinite_at)})"
                          if t.shape else links.label(t.id) for t in leaves[:4])
        verb = "holds" if len(leaves) == 1 else "hold"
        if written and any(e.state is FREED for op in g.ops for e in op.saved):
            sentences.append(
                f"Among the leaves of its graph, {shown} {verb} NaN or inf now. "
                + (f"{links.label(written[0].id)} has" if len(written) == 1 else f"{len(written)} of them have")
                + f" been changed in place since {'it was' if len(written) == 1 else 'they were'} made (an optimizer step, for "
                f"one), and backward already ran through this graph (its saved tensors are freed): whether they held it "
                f"when {who} was computed, or a step after that backward wrote it into them, is not known without a trace.")
        else:
            sentences.append(f"Among the leaves of its graph, {shown} already {verb} NaN or inf.")
            reasons.append("nonfinite_input")
    elif not (node.is_leaf and bad(node.value)):
        sentences.append("Every leaf of its backward graph (the tensors that require grad) is finite; the data and other "
                         "inputs that need no grad are not part of that graph, so graphlens did not read them.")
    sentences.append("Without a trace graphlens cannot tell which op made the first non-finite value.")
    return Explanation(reasons, sentences, fix=f"Run the forward (and the backward) inside graphlens.trace() and ask "
                       f"graphlens.explain({who}, tr): it names the first op (or backward node) that made it, and why.",
                       tensor_name=who, tensor_id=node.id, graph=g)
