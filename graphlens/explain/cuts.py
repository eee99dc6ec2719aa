"""Where a gradient path is cut: in a traced graph (known), or read from the user's code (a lead)."""

from __future__ import annotations

import re
from collections import deque

import torch

from ..names import source_line
from ..values import same_head
from .facts import custom_forward_of, grad_off, reentrant_checkpoint, region_kind
from .leads import code_cut, origin_cut, rebind_fix, rebinding  # noqa: F401 - (the half read from the code)
from .kinds import CHECKPOINTS, CODE_CUTS, INDEXED, INTEGER_DTYPE_NAMES, NONDIFFERENTIABLE, REWRAPS, ZERO_DERIVATIVE, Cut
from .paths import PathView

__all__ = [
    "Cut", "traced_cut", "traced_cut_between", "trace_origins", "code_cut", "origin_cut", "cut_fix", "rebinding", "rebind_fix",
    "INTEGER_DTYPE_NAMES", "CODE_CUTS", "INDEXED", "NONDIFFERENTIABLE", "ZERO_DERIVATIVE",
]


def _cap(label: str) -> str:
    """A label at the start of a sentence (``an unnamed tensor (t3)`` -> ``An unnamed tensor (t3)``)."""
    return label[0].upper() + label[1:] if label.startswith("an unnamed") else label


def _where(line: int | None, code: str | None) -> str:
    if line is not None and code:
        return f"line {line} ({code})"
    return f"line {line}" if line is not None else ""


def _differentiable(forward: str | None) -> bool:
    """Whether torch has a backward node for the forward op ``forward`` (``exp`` ->
    ``ExpBackward0``): read from torch's own table of backward nodes, so an op it lists is
    one that records a graph when an input requires grad."""
    if not forward:
        return False
    bare = forward.strip("_")
    names = [bare, bare[1:]] if forward.startswith("__r") else [bare]  # (__rsub__: rsub or sub)
    for n in names:
        camel = "".join(p.capitalize() for p in n.rstrip("_").split("_") if p)
        if camel and any(hasattr(torch._C._functions, f"{camel}Backward{k}") for k in range(3)):
            return True
    return False


def _called(view: PathView, tid: str, result: str | None = None) -> str:
    """How a sentence calls the tensor ``tid``: its name; else, unnamed, ``result`` (when the
    sentence has just named the op that made it) or what made it (``the result of softmax (t7)``)."""
    t = view.t(tid)
    if t.name:
        return t.name
    if result is not None:
        return f"{result} ({tid})"
    op = view.o(t.op) if t.op is not None and t.op in view.g else None
    if op is not None and op.forward:
        return f"the result of {op.forward} ({tid})"
    return f"the tensor torch.{t.made_by} made ({tid})" if t.made_by else view.label(tid)


def _named_from(view: PathView, tid: str, limit: int = 2) -> list[str]:
    """The first few named tensors computed from ``tid`` (following the recorded forward ops)."""
    seen, queue, out = {tid}, deque([tid]), []
    while queue and len(out) < limit:
        for op in view.adj.consumers.get(queue.popleft(), ()):
            for t in view.adj.outputs.get(op, ()):
                if t not in seen:
                    seen.add(t)
                    queue.append(t)
                    if view.t(t).name and view.t(t).name not in out:
                        out.append(view.t(t).name)
    return out[:limit]


def _fact(view: PathView, tid: str | None, fact: str) -> tuple:
    return (tid, fact, getattr(view.t(tid), fact)) if tid else ()


def _checkpoint_inputs(view: PathView, op) -> list[str]:
    """The tensors that entered the no_grad region of ``op`` from outside it (not made in the
    region, not parameters): the inputs the reentrant checkpoint was given."""
    # (a region known to be the checkpoint's holds its function's ops, from any line)
    region_ops = [o.id for o in view.g.ops if o.region == op.region and (o.line == op.line or reentrant_checkpoint(op.region))]
    out = []
    for j in region_ops:
        for i in view.adj.inputs.get(j, ()):
            t = view.t(i)
            if t.region != op.region and not t.is_parameter and i not in out:
                out.append(i)
    if reentrant_checkpoint(op.region):
        # (the whole function's ops: a module's buffers they read, named after the module,
        # were not passed to checkpoint; the tensors without such a name were)
        given = [i for i in out if "." not in (view.t(i).name or "")]
        if given:
            return given
    return out


def _op_cut(view: PathView, op_id: str, out_id: str | None, path: list[str]) -> Cut | None:
    """The cut at op ``op_id`` (a call with an input that requires grad and no backward node)."""
    op = view.o(op_id)
    ins = [i for i in view.adj.inputs.get(op_id, ()) if view.t(i).requires_grad]
    out = view.t(out_id) if out_id else None
    # (torch.tensor([a, b], requires_grad=True): the copy is a new leaf that requires grad, with no
    # path back to a and b; it cuts the path as the same copy without the flag does)
    fresh_leaf = out is not None and out.requires_grad and out.is_leaf and op.name is None and (op.forward or "") in REWRAPS
    if not ins or (out is not None and out.requires_grad and not fresh_leaf) or (out is None and op.name is not None):
        return None
    src = view.label(ins[0])
    where = _where(op.line, op.code)
    at = f" at {where}" if where else ""
    facts = ((op_id, "op", op.forward), _fact(view, ins[0], "requires_grad")) + ((_fact(view, out_id, "requires_grad"),) if out_id else ())
    fn_name = custom_forward_of(op.region) if op.name is None else None
    if fn_name is not None:  # (inside a custom Function's forward: grad is off there by design)
        made = f", which made {view.label(out_id)}" if out_id else ""
        text = (f"On the way, {op.forward or 'an operation'}{at}{made}, ran inside the forward of the custom "
                f"autograd.Function {fn_name}, which PyTorch runs with grad off: what {fn_name}.apply returns gets "
                f"{fn_name}'s backward node as grad_fn, except the outputs its forward marks non-differentiable "
                f"(ctx.mark_non_differentiable) and integer ones, so the gradient path from {src} stops there.")
        return Cut("custom_fn_non_differentiable", op.forward, op_id, view.label(out_id) if out_id else None, op.line,
                   op.code, text, tuple(path), facts=facts)
    if grad_off(op.region) and op.name is None:
        made = f" made {view.label(out_id)}" if out_id else ""
        lhs = re.match(r"\s*([A-Za-z_]\w*)\s*=[^=]", op.code or "")
        target = (out.name if out is not None and out.name else None) or (lhs.group(1) if lhs else None)
        same = [i for i in ins if target is not None and view.t(i).name == target]
        if same:  # w = w - lr * w.grad inside no_grad: the name now holds a new leaf
            text = (
                f"{op.forward}{at} rebound {target} to a new tensor made inside torch.{region_kind(op.region)}(): a leaf "
                f"that does not require grad, no longer the {target} that requires grad."
            )
            return Cut("rebound_leaf", op.forward, op_id, target, op.line, op.code, text, tuple(path), facts=facts)
        on_line = any(c in (op.code or "") for c in CHECKPOINTS)
        if (on_line or reentrant_checkpoint(op.region)) and region_kind(op.region) == "no_grad":
            given = _checkpoint_inputs(view, op)
            plain = [i for i in given if not view.t(i).requires_grad]
            if given and len(plain) == len(given):
                names = ", ".join(view.label(i) for i in plain)
                how = (f"The call at {where or 'the checkpoint line'} runs its function through" if on_line else
                       f"{op.forward or 'An operation'}{at}{',' + made.replace(' made', ' which made', 1) + ',' if made else ''} "
                       f"ran inside the function given to")
                text = (
                    f"{how} the reentrant torch.utils.checkpoint (use_reentrant=True), which computes it inside "
                    f"torch.no_grad(){f' ({op.forward} there{made})' if on_line else ''} and gives the result a graph only "
                    f"when one of the tensors passed to checkpoint requires grad; {names} "
                    f"{'does' if len(plain) == 1 else 'do'} not require grad, so the result has no graph and the "
                    f"parameters inside, {src} among them, get no gradient."
                )
                facts = facts + tuple(_fact(view, i, "requires_grad") for i in plain)
                return Cut("cut_by_checkpoint", "checkpoint", op_id, view.label(out_id) if out_id else None, op.line,
                           op.code, text, tuple(path), facts=facts)
        text = (
            f"On the way, {op.forward or 'an operation'}{at}{made} inside torch.{region_kind(op.region)}(), which "
            f"records no graph, so the gradient path from {src} stops there."
        )
        return Cut("cut_by_no_grad", op.forward, op_id, view.label(out_id) if out_id else None, op.line, op.code, text, tuple(path), facts=facts)
    if out is not None and out.dtype in INTEGER_DTYPE_NAMES:
        later = _named_from(view, out_id) if not out.name else []  # (an unnamed result: say what holds it)
        text = (
            f"The gradient path is cut at {op.forward}{at}: it turns {_called(view, ins[0])} into {out.dtype} values, and "
            f"no gradient passes an integer or bool tensor, so {_called(view, out_id, 'its result')} and everything "
            f"computed from it{' (' + ', '.join(later) + ')' if later else ''} do not require grad."
        )
        return Cut("cut_by_integer_op", op.forward, op_id, view.label(out_id), op.line, op.code, text, tuple(path), facts=facts)
    if out is not None and (op.forward or "") in REWRAPS:
        if fresh_leaf:
            text = (
                f"torch.{op.forward}{at} copies the values of {src} into a new tensor without history: requires_grad=True "
                f"makes {view.label(out_id)} a new leaf that requires grad, with no link back to {src}, so the gradient "
                f"path stops there (backward fills that leaf's .grad and nothing before it)."
            )
        else:
            text = (
                f"torch.{op.forward}{at} copies the values of {src} into a new tensor without history, so "
                f"{view.label(out_id)} does not require grad and the gradient path stops there."
            )
        return Cut("cut_by_python_value", op.forward, op_id, view.label(out_id), op.line, op.code, text, tuple(path), facts=facts)
    if out is None and (op.forward or "") in {"item", "tolist", "numpy", "__float__", "__int__", "__bool__", "__index__"}:
        text = f"{op.forward}(){at} took the value of {src} out of the graph as a plain number."
        return Cut("cut_by_python_value", op.forward, op_id, None, op.line, op.code, text, tuple(path), facts=facts)
    if out is None or op.name is not None or grad_off(op.region):
        return None
    if (op.forward or "") in NONDIFFERENTIABLE:
        what = NONDIFFERENTIABLE[op.forward]
        text = (
            f"The gradient path is cut at {op.forward}{at}: {op.forward} has no gradient in PyTorch (it makes {what}), "
            f"so although {_called(view, ins[0])} requires grad, {_called(view, out_id, 'its result')} has no grad_fn and "
            f"nothing computed from it reaches {src}."
        )
        return Cut("cut_by_nondifferentiable_op", op.forward, op_id, view.label(out_id), op.line, op.code, text,
                   tuple(path), facts=facts)
    late = _flag_set_after(view, op_id, ins[0])
    if late is not None or _differentiable(op.forward):
        then = f" ({late[1]} at {_where(late[2], late[3])})" if late is not None and late[2] else ""
        text = (
            f"{_cap(src)} requires grad now, but when {op.forward}{at} used it, it did not yet: {op.forward} records a graph "
            f"whenever an input requires grad, and it made {view.label(out_id)} without one. requires_grad was switched on "
            f"afterwards{then}; PyTorch decides at each operation, from the flags its inputs have at that moment, whether "
            f"to record it, so the graph was built before the flag was set."
        )
        return Cut("requires_grad_set_late", op.forward, op_id, src, op.line, op.code, text, tuple(path), facts=facts)
    # An op outside graphlens's tables that, with grad mode on, gave no grad_fn to the result of an input that
    # requires grad: what the trace saw is the cut; why the op has no gradient, graphlens does not know.
    text = (
        f"The gradient path is cut at {op.forward or 'an operation'}{at}: {_called(view, ins[0])} requires grad, but "
        f"{_called(view, out_id, 'its result')} has no grad_fn (PyTorch recorded no backward node for this call), so "
        f"nothing computed from it reaches {src}."
    )
    return Cut("cut_by_nondifferentiable_op", op.forward, op_id, view.label(out_id), op.line, op.code, text, tuple(path),
               facts=facts)


def _flag_set_after(view: PathView, op_id: str, tid: str) -> tuple[str, str, int | None, str | None] | None:
    """``(op id, call, line, code)`` of a ``requires_grad_()`` call on the tensor ``tid``
    recorded after the op ``op_id`` used it, or None."""
    n = int(op_id[2:])
    for j in view.adj.consumers.get(tid, ()):
        o = view.o(j)
        if o.forward == "requires_grad_" and int(j[2:]) > n:
            return j, "requires_grad_()", o.line, o.code
    return None


def _rewrapped(view: PathView, leaf_id: str) -> Cut | None:
    """A leaf made from numbers inside the trace that holds a value an earlier ``.item()``
    (or ``.numpy()``, ``.tolist()``) took out of the graph: the value left and came back."""
    leaf = view.t(leaf_id)
    if leaf.made_by is None or leaf.value is None or not leaf.value.head:
        return None
    held = {v for v in leaf.value.head if isinstance(v, float) and v not in (0.0, 1.0, -1.0)}
    if not held:
        return None
    for op in view.g.ops:
        if op.name is not None or (op.forward or "") not in {"item", "tolist", "numpy", "__float__"}:
            continue
        ins = view.adj.inputs.get(op.id, ())
        if not ins or not view.t(ins[0]).requires_grad:
            continue
        src = view.t(ins[0])
        read = set(src.value.head or ()) if src.value is not None else set()
        if held & read:
            where = _where(op.line, op.code)
            made = _where(leaf.line, leaf.code)
            again = leaf.name or f"a new tensor ({leaf_id})"
            text = (
                f"{op.forward}(){' at ' + where if where else ''} took the value of {_called(view, src.id)} out of the "
                f"graph as a Python number, and torch.{leaf.made_by}{' at ' + made if made else ''} made {again} from that "
                f"number again: a new leaf without history, so the gradient path stops there."
            )
            return Cut("cut_by_python_value", op.forward, op.id, view.label(leaf_id), op.line, op.code, text,
                       (src.id, op.id, leaf_id))
    return None


def _rewrap_lead(view: PathView, leaf_id: str) -> Cut | None:
    """A leaf made inside the trace by a factory that copies values (torch.tensor,
    torch.from_numpy, ...), after a tensor that requires grad left the graph there
    (a detach(), an .item(), a .numpy()): a lead, not a certainty, since graphlens does
    not see where the numbers went in between."""
    leaf = view.t(leaf_id)
    if leaf.made_by not in REWRAPS:
        return None
    n = int(leaf.id[1:])
    leads = [
        t for t in view.g.tensors
        if t.detached_from is not None and int(t.id[1:]) < n and view.t(t.detached_from).requires_grad
    ]
    exits = [o for o in view.g.ops if o.name is None and o.forward in ("item", "numpy", "tolist")]
    if not leads and not exits:
        return None
    made = _where(leaf.line, leaf.code)
    if exits:
        left = f"{exits[-1].forward}() at {_where(exits[-1].line, exits[-1].code) or 'an earlier line'}"
        first = view.adj.inputs.get(exits[-1].id, ())
        src = first[0] if first else None
    else:
        src = leads[-1].detached_from
        left = f"{view.label(leads[-1].id)} = {view.label(src)}.detach()"
    text = (
        f"{view.label(leaf_id)} is a new leaf made from numbers by torch.{leaf.made_by}{' at ' + made if made else ''}: "
        f"it has no history. Earlier, {left} took a tensor that requires grad out of the graph; if those numbers "
        f"became {view.label(leaf_id)}, that is where the gradient path stops."
    )
    return Cut("cut_by_python_value", leaf.made_by, leaf_id, view.label(leaf_id), leaf.line, leaf.code, text,
               tuple(p for p in (src, leaf_id) if p), known=False)


def traced_cut(view: PathView, tid: str, origins: dict | None = None) -> Cut | None:
    """Where the traced tensor ``tid``, which does not require grad, lost the gradient of
    the tensors it was computed from: the closest detach(), no_grad op, integer-output or
    non-differentiable op, requires_grad switched on too late, value that left the graph and
    came back, or gradient computed without create_graph; else, when every parameter it was
    computed from is frozen, that (None when it never had a gradient to lose).  ``origins``
    (the trace's ``{tensor id: (file, line)}`` of tensors first seen where they were used)
    lets the code say how such a tensor was made: a lead."""
    seen = {tid}
    queue: deque[tuple[str, list[str]]] = deque([(tid, [tid])])
    while queue:
        node, path = queue.popleft()
        t = view.t(node)
        if t.detached_from is not None:
            src = view.t(t.detached_from)
            if src.requires_grad:
                how = "data" if t.made_by == "data" else "detach"  # (what the trace saw: .data or .detach())
                text = (f"{view.label(node)} = {view.label(src.id)}{'.data' if how == 'data' else '.detach()'}"
                        f"{' at ' + _where(t.line, t.code) if t.line and '.' + how in (t.code or '') else ''} cuts the gradient path: "
                        f"a new leaf that does not require grad.")
                shown = bool(t.line) and "." + how in (t.code or "")  # (the block's line, where it shows the call)
                return Cut("cut_by_detach", how, node, view.label(node), t.line if shown else None, t.code if shown else None,
                           text, tuple([src.id] + path[::-1]),
                           facts=(_fact(view, src.id, "requires_grad"), _fact(view, node, "requires_grad")))
            nxt = [src.id]
        elif t.op is not None:
            cut = _op_cut(view, t.op, node, [t.op] + path)
            if cut is not None:
                return cut._replace(path=tuple([i for i in view.adj.inputs.get(t.op, ())] + list(cut.path)))
            nxt = list(view.adj.inputs.get(t.op, ()))
        else:
            cut = (_late_leaf(view, node, path) or _rewrapped(view, node) or _rewrap_lead(view, node)
                   or _gradient_leaf(view, node, origins))
            if cut is not None:
                return cut._replace(path=cut.path + tuple(path[1:][::-1]))
            nxt = []
        for n in nxt:
            if n not in seen:
                seen.add(n)
                queue.append((n, path + [n]))
    return _frozen(view, tid, seen)


def _unwired_leaf(view: PathView, leaf_id: str, op_id: str, path: list[str]) -> Cut | None:
    """The op ``op_id`` recorded a backward node, and the leaf ``leaf_id`` it took as an input
    requires grad now, but that node does not lead to the leaf's AccumulateGrad: the leaf did
    not require grad yet when the op ran (its flag was switched on afterwards)."""
    if not leaf_id.startswith("t"):
        return None
    leaf, op = view.t(leaf_id), view.o(op_id)
    if op.name is None or op.is_accumulate_grad or not leaf.is_leaf or not leaf.requires_grad:
        return None
    nxt = view.adj.next
    if not nxt.get(op_id):
        return None  # (its next functions were not recorded: nothing is known of them)
    acc, seen, stack = view.adj.accumulate_grad.get(leaf_id), {op_id}, [op_id]
    while stack:  # (through TBackward0 and the like: a weight is often one node further)
        for j in nxt.get(stack.pop(), ()):
            if j == acc:
                return None
            if j not in seen:
                seen.add(j)
                stack.append(j)
    name = view.label(leaf_id)
    text = (
        f"{_cap(name)} requires grad now, but {op.forward or op.name}{' at ' + _where(op.line, op.code) if op.line else ''} "
        f"used it before that: its backward node {op.name} does not lead to {name} (no AccumulateGrad of {name} below "
        f"its next functions), so {name} did not require grad yet when that line ran. requires_grad was switched on "
        f"afterwards; PyTorch decides at each operation, from the flags its inputs have at that moment, whether to "
        f"record it, so the graph was built before the flag was set."
    )
    facts = ((op_id, "op", op.name), (leaf_id, "requires_grad", True), (leaf_id, "is_leaf", True))
    return Cut("requires_grad_set_late", op.forward or op.name, op_id, name, op.line, op.code, text, tuple(path), facts=facts)


def _late_leaf(view: PathView, leaf_id: str, path: list[str]) -> Cut | None:
    """The leaf record ``leaf_id`` (it did not require grad) was used, and later handed to
    ``requires_grad_()``: the flag came after the use."""
    users = [j for j in view.adj.consumers.get(leaf_id, ()) if view.o(j).forward != "requires_grad_"]
    late = [j for j in view.adj.consumers.get(leaf_id, ()) if view.o(j).forward == "requires_grad_"
            and any(view.t(o).requires_grad for o in view.adj.outputs.get(j, ()))]
    if not users or not late or int(late[0][2:]) < int(users[0][2:]):
        return None
    first, flag = view.o(users[0]), view.o(late[0])
    name = view.label(leaf_id)
    text = (
        f"{name} was used by {first.forward} at {_where(first.line, first.code) or 'an earlier line'} before "
        f"requires_grad_() at {_where(flag.line, flag.code) or 'a later line'} switched its flag on: PyTorch decides at "
        f"each operation, from the flags its inputs have at that moment, whether to record it, so the graph was built "
        f"before the flag was set and nothing computed then links back to {name}."
    )
    facts = ((users[0], "op", first.forward), (late[0], "op", "requires_grad_"), _fact(view, leaf_id, "requires_grad"))
    return Cut("requires_grad_set_late", first.forward, users[0], name, first.line, first.code, text,
               (leaf_id, users[0]), facts=facts)


def _gradient_leaf(view: PathView, leaf_id: str, origins: dict | None) -> Cut | None:
    """A leaf without history that is a gradient: one the trace saw ``torch.autograd.grad``
    return (``made_by``), or one whose values are exactly a gradient that flowed into another
    tensor in a traced backward pass (a .grad read after backward): a gradient computed
    without a graph of its own.  The code, when ``origins`` says where the call was made
    (or where the leaf was first used), says whether create_graph=True was passed (a lead)."""
    leaf = view.t(leaf_id)
    by_call = leaf.made_by == "autograd.grad"
    if leaf.requires_grad or not (by_call or leaf.made_by is None):
        return None
    held = leaf.value if leaf.value is not None and leaf.value.head else None
    source = next((t for t in view.g.tensors if held is not None and t.id != leaf_id and any(
        f is not None and f.shape == held.shape and same_head(f.head, held.head) and f.max == held.max
        and f.min == held.min for f in t.flowed)), None)
    if source is None and not by_call:
        return None
    k = next((n for n, f in enumerate(source.flowed) if f is not None and same_head(f.head, held.head)), 0) if source else 0
    lead = None
    if origins and leaf_id in origins:
        lead = origin_cut(view, leaf_id, origins, kinds=("grad_without_create_graph", "constant_gradient"))
    name = view.label(leaf_id)
    src = view.label(source.id) if source is not None else None
    if lead is not None:  # the code names what the trace could not: the variable, and the call's inputs=
        given = _grad_input_name(lead.code)
        if given and (source is None or source.name is None):
            src = f"{given} ({source.id}, the inputs of that call)" if source is not None else given
        if lead.tensor and leaf.name is None:
            name = f"{lead.tensor} ({leaf_id})"
    line, code = (leaf.line, leaf.code) if by_call else (None, None)
    if by_call and origins and leaf_id in origins:  # (the call's own line, where the trace saw it: maybe in a helper)
        line = origins[leaf_id][1]
        code = source_line(origins[leaf_id][0], line) or code
    if by_call:
        at = "" if lead is not None else (" at " + _where(line, code) if line is not None else "")
        text = (
            f"{_cap(name)} is the gradient{' of ' + src if src else ''} that torch.autograd.grad returned{at}, and it "
            f"has no grad_fn, so nothing computed from it can be differentiated again: a gradient has a graph of its "
            f"own only when it is computed with create_graph=True and depends on something that requires grad."
        )
    else:
        text = (
            f"{_cap(name)} holds exactly the gradient that flowed into {src} in backward pass {k + 1} (a "
            f"torch.autograd.grad call, or a .grad read after backward), and it is a leaf without grad_fn, so nothing "
            f"computed from it can be differentiated again: a gradient has a graph of its own only when it is "
            f"computed with create_graph=True and depends on something that requires grad."
        )
    kind = "gradient_without_graph"
    if lead is not None:  # (whether create_graph was passed, the code says)
        text += " " + lead.text
        kind, line, code = lead.kind, lead.line, lead.code
    created = None  # (whether the call passed create_graph=True, as the trace saw it)
    if isinstance(origins, Origins):
        if by_call:
            created = origins.created.get(leaf_id)
        elif source is not None and k < len(origins.passes):
            created = origins.passes[k]
    if created is not None:
        call = "torch.autograd.grad call" if by_call else f"backward pass {k + 1}"
        if created:
            kind = "constant_gradient"
            text += (f" The trace saw the {call} made with create_graph=True: a gradient that still has no graph is a "
                     f"constant (it depends on nothing that requires grad), so its own derivative is zero.")
        else:
            kind = "grad_without_create_graph"
            text += f" The trace saw the {call} made without create_graph=True."
    facts = (_fact(view, leaf_id, "requires_grad"), _fact(view, leaf_id, "is_leaf"))
    path = (source.id, leaf_id) if source is not None else (leaf_id,)
    return Cut(kind, "grad", leaf_id, name, line, code, text, path, facts=facts)


class Origins(dict):
    """``{tensor id: (file, line)}`` where the code made or first used the traced tensors
    without history, with what the trace saw of the backward calls: ``created`` (for each
    gradient ``torch.autograd.grad`` handed back, whether that call passed ``create_graph=True``)
    and ``passes`` (the same, per backward call, in order)."""

    created: dict[str, bool] = {}
    passes: tuple[bool, ...] = ()


def trace_origins(view: PathView, trace, files=()) -> dict[str, tuple[str, int]]:
    """Where the code made or first used the traced tensors without history: the trace's
    ``origins`` (``{tensor id: (file, line)}`` of tensors first seen where they were used)
    and, for each tensor it recorded as made by ``torch.autograd.grad``, the file and line
    of that call (the first of ``files`` and the origins' files whose line is the code the
    trace recorded there; none when no file matches)."""
    rec = getattr(trace, "_rec", None)
    raw = getattr(rec, "origins", None) or {}
    out = Origins((f"t{i}", where) for i, where in dict(raw).items())
    out.created = {f"t{i}": c for i, c in dict(getattr(rec, "grad_created", None) or {}).items()}
    out.passes = tuple(getattr(rec, "pass_created", None) or ())
    where = list(dict.fromkeys([*(f for f in files if f), *(f for f, _ in out.values())]))
    for t in view.g.tensors:
        if t.made_by == "autograd.grad" and t.id not in out and t.line and t.code:
            found = next((f for f in where if source_line(f, t.line) == t.code), None)
            if found is not None:
                out[t.id] = (found, t.line)
    return out


def _grad_input_name(code: str | None) -> str | None:
    """The variable a ``torch.autograd.grad(outputs, inputs, ...)`` call on the source line
    ``code`` passes as ``inputs`` (a lone name), or None."""
    m = re.search(r"\bgrad\((?P<args>.*)", code or "")
    if not m:
        return None
    kw = re.search(r"\binputs\s*=\s*\(?\s*([A-Za-z_]\w*)\s*[,)]", m.group("args"))
    if kw:
        return kw.group(1)
    pos = re.match(r"\s*(?:outputs\s*=\s*)?[A-Za-z_][\w.]*\s*,\s*([A-Za-z_]\w*)\s*[,)]", m.group("args"))
    return pos.group(1) if pos and pos.group(1) not in ("grad_outputs", "inputs") else None


def _frozen(view: PathView, tid: str, seen: set[str]) -> Cut | None:
    """When nothing that ``tid`` was computed from requires grad and some of it are
    parameters: they are frozen."""
    tensors = [n for n in seen if n.startswith("t")]
    params = sorted((n for n in tensors if view.t(n).is_parameter), key=lambda n: int(n[1:]))
    if not params or any(view.t(n).requires_grad for n in tensors):
        return None
    names = ", ".join(view.label(p) for p in params[:4]) + (f", ... ({len(params)} in all)" if len(params) > 4 else "")
    text = (
        f"{_cap(view.label(tid))} was computed from the parameters {names}, and every one of them is frozen "
        f"(requires_grad=False); nothing else it was computed from requires grad either, so no operation on the way "
        f"recorded a graph."
    )
    facts = tuple((p, "requires_grad", False) for p in params) + tuple((p, "is_parameter", True) for p in params)
    return Cut("frozen_parameters", None, params[0], view.label(tid), None, None, text, tuple(params) + (tid,), facts=facts)


def traced_cut_between(view: PathView, tid: str, roots: list[str]) -> Cut | None:
    """Where the forward path from tensor ``tid`` to a root stops carrying the gradient.  An
    integer result (indices, a mask) on the way is the cut only when no other path leads to the
    root: where another one does, the values went that way and its cut is told (a sparse
    tensor's ``_indices()`` beside its ``_values()``)."""
    cut = _cut_on(view, tid, roots, view.forward_bfs(tid, set(roots)))
    if cut is not None and cut.kind == "cut_by_integer_op" and cut.path:
        op = next((p for p in cut.path if p.startswith("op") and view.o(p).forward == cut.op), None)
        other = view.forward_bfs(tid, set(roots), {op}) if op is not None else []
        alt = _cut_on(view, tid, roots, other) if other else None
        if alt is not None and alt.kind != "cut_by_integer_op":
            return alt
    return cut


def _cut_on(view: PathView, tid: str, roots: list[str], fpath: list[str]) -> Cut | None:
    if fpath:
        for a, b in zip(fpath, fpath[1:]):
            if a.startswith("t") and b.startswith("t"):  # a detach edge
                tb = view.t(b)
                how = "data" if tb.made_by == "data" else "detach"
                text = (
                    f"On the way, {view.label(b)} = {view.label(a)}{'.data' if how == 'data' else '.detach()'}"
                    f"{' at ' + _where(tb.line, tb.code) if tb.line and '.' + how in (tb.code or '') else ''} cuts the gradient path: "
                    f"{view.label(b)} is a new leaf that does not require grad."
                )
                shown = bool(tb.line) and "." + how in (tb.code or "")
                return Cut("cut_by_detach", how, b, view.label(b), tb.line if shown else None, tb.code if shown else None, text,
                           tuple(fpath))
            if b.startswith("op"):
                unwired = _unwired_leaf(view, a, b, fpath)
                if unwired is not None:
                    return unwired
                outs = [o for o in view.adj.outputs.get(b, ()) if o in fpath]
                cut = _op_cut(view, b, outs[0] if outs else None, fpath)
                if cut is not None:
                    return cut
        return None
    # No forward path: did the value leave the graph (.item()) and come back (torch.tensor)?
    for root in roots:
        cut = traced_cut(view, root)
        if cut is not None and cut.kind == "cut_by_python_value":
            return cut
    return None


def cut_fix(cut, root: str | None) -> str:
    """What to do about a cut, by its kind."""
    loss = root or "the loss"
    if cut.kind == "cut_by_integer_op":
        return (
            f"Compute {loss} from the tensor before {cut.op} (the scores or logits, e.g. "
            f"cross_entropy(logits, target)), and use {cut.op} only for metrics: no gradient passes an integer result."
        )
    if cut.kind == "cut_by_python_value":
        return (
            f"Keep the computation in torch operations on the tensors themselves: no .item(), .tolist() or .numpy() "
            f"followed by torch.tensor(...) / torch.from_numpy(...) (e.g. torch.stack([a, b]) or sum([a, b]) rather than "
            f"torch.tensor([a, b]) or torch.tensor([a.item(), b.item()]); setting requires_grad on the copy does not link "
            f"it back); {loss} then keeps its history."
        )
    if cut.kind == "cut_by_detach":
        return f"Remove the detach() (or .data) on the way to {loss} if the gradient should flow back through it."
    if cut.kind == "rebound_leaf":
        return rebind_fix(cut.tensor or "w")
    if cut.kind == "cut_by_nondifferentiable_op":
        if cut.op in ("histc", "histogram"):
            return (
                f"Compute {loss} from a differentiable stand-in for {cut.op}: a soft histogram (each value adds "
                f"exp(-(x - center)**2 / (2 * sigma**2)) to every bin, or a triangular kernel relu(1 - |x - center| / width)), "
                f"and keep torch.{cut.op} for reporting."
            )
        if cut.op == "_values":
            return (f"Read the values with their history: x.coalesce().values() instead of x._values() (values() is "
                    f"differentiable; _values() is a raw accessor, like .data), so that {loss} reaches what they were computed from.")
        return f"Compute {loss} from the tensor itself, not from {cut.op}(...): {cut.op} makes a tensor without history."
    if cut.kind == "requires_grad_set_late":
        who = cut.tensor if cut.tensor and cut.tensor.isidentifier() else None
        how = f"{who}.requires_grad_() right after creating it" if who else "requires_grad_() right after creating it"
        return (
            f"Switch requires_grad on before the forward pass that uses {who or 'the tensor'} ({how}, or create it "
            f"with requires_grad=True), then compute {loss} again: the flag only affects operations that run after it is set."
        )
    if cut.kind == "gradient_without_graph":
        return (
            "If the call that computed the gradient lacks create_graph=True, pass it (torch.autograd.grad(outputs, "
            "inputs, grad_outputs=..., create_graph=True), or loss.backward(create_graph=True) before reading p.grad) so "
            f"the gradient keeps a graph and {loss} can be differentiated again; if it has it, the gradient is a "
            "constant and its own derivative is zero."
        )
    if cut.kind in ("grad_without_create_graph", "constant_gradient"):
        if cut.kind == "constant_gradient":
            return (
                "Nothing to fix in the call: the gradient is a constant, so its own derivative is zero; treat a missing "
                "graph as a zero second derivative (or use torch.func.hessian / jacrev, which return the zeros)."
            )
        return (
            "Pass create_graph=True to the call that computes the gradient (torch.autograd.grad(outputs, inputs, "
            "grad_outputs=..., create_graph=True), or loss.backward(create_graph=True) before reading p.grad), so the "
            f"gradient keeps a graph of its own and {loss} can be differentiated again."
        )
    if cut.kind == "custom_fn_non_differentiable":
        return (
            f"If a gradient should flow through that output, remove it from ctx.mark_non_differentiable(...) in the "
            f"Function's forward and return its gradient from backward; else compute {loss} from the outputs that "
            f"have a grad_fn."
        )
    if cut.kind == "cut_by_checkpoint":
        return (
            "Call checkpoint(..., use_reentrant=False): the non-reentrant checkpoint gives the parameters inside their "
            "gradient whatever its inputs are. With use_reentrant=True, at least one tensor passed to checkpoint must "
            "require grad."
        )
    if cut.kind == "grad_disabled":
        return (
            f"Switch gradient recording back on for the forward that makes {loss}: torch.set_grad_enabled(True) "
            f"before it, or with torch.enable_grad(): around it (with torch.inference_mode(False): where inference "
            f"mode is on); then find the code that switched it off for the whole thread."
        )
    if cut.kind == "frozen_parameters":
        return (
            "Unfreeze the parameters that should learn before the forward pass (p.requires_grad_(True) for the layers "
            "to train) and give the optimizer those (filter(lambda p: p.requires_grad, model.parameters())); setting "
            f"{loss}.requires_grad = True instead would only make {loss} a leaf with no link to the model."
        )
    return f"Move the computation of {loss} out of the torch.no_grad() block."
