"""What an autograd error means for this program: :func:`explain_error` and its handlers."""

from __future__ import annotations

import re
from types import FrameType
from typing import TYPE_CHECKING, Any

import torch

from .._live.guard import quiet
from ..graph import Graph
from ..names import user_frame
from .backward_errors import graph_freed, inplace_saved
from .context import Context, as_code, assignment_line, line_op, on_graph, one_reading, root_graph, short
from .cuts import code_cut, cut_fix, trace_origins, traced_cut
from .evidence import unrecorded_sentence
from .grad import analyse
from .live import INFERENCE_LIBRARY_FIX, INTEGER_DTYPES, find_live, is_inference, named_after
from .hook_errors import (
    backward_hook_inplace, custom_fn_grad_shape, custom_fn_legacy, custom_fn_no_backward, custom_fn_once_differentiable,
    custom_fn_view_inplace,
    hook_changed_gradient, hook_no_requires_grad, hook_wrong_count, inplace_activation,
)
from .messages import SIMPLE_HANDLERS, classify
from .mistakes import HANDLERS as MISTAKE_HANDLERS
from .nan_errors import anomaly_nan
from .optim_errors import optimizer_nonleaf
from .paths import PathView
from .types import ERROR_REASONS, Explanation

if TYPE_CHECKING:
    from ..trace import Trace

__all__ = ["explain_error"]

def explain_error(exc: Any, graph_or_trace: Graph | Trace | None = None) -> Explanation:
    """What a classic autograd ``RuntimeError`` means for this program, in plain words.

    Recognises (see :data:`ERROR_REASONS`; the patterns are in :mod:`.messages`): backward
    through a freed graph (and the running total or hidden state that carried it), an
    in-place change to a tensor saved for backward (naming the tensor, the op that saved it
    and the one that changed it: an in-place activation, an optimizer's ``step()``), an
    in-place change to a leaf that requires grad, requires_grad changed on a non-leaf,
    backward on a non-scalar or on a tensor without grad_fn, a non-leaf given to an
    optimizer, hooks and custom Functions that return the wrong thing, a custom Function
    written the old way or without backward, a hook on a tensor without grad, anomaly mode's
    NaN, the warning about ``.grad`` of a non-leaf, and more.  Names come from ``graph_or_trace`` when
    given, else from the variables of the frame that raised.  Any other error gets
    ``"unknown_error"``, its message quoted and no fix.  This function never raises: a
    partial trace or an odd object still gives an explanation.

    >>> import torch
    >>> from graphlens.explain import explain_error
    >>> w = torch.tensor([1.0, 2.0], requires_grad=True)
    >>> try:
    ...     (w * 2).backward()
    ... except RuntimeError as exc:
    ...     print(explain_error(exc).reasons)
    ('nonscalar_backward',)
    """
    try:
        message = str(exc)
    except Exception:  # noqa: BLE001
        message = f"<{type(exc).__name__}>"
    frame = None
    try:
        frame = user_frame(1)
        with quiet(), one_reading(graph_or_trace):  # (what explain reads of live tensors is not the user's program: no mode sees it)
            return _explain_error(exc, message, graph_or_trace, frame)
    except Exception:  # noqa: BLE001 - explaining must never raise
        try:
            code = classify(exc, message)[0]
        except Exception:  # noqa: BLE001
            code = "unknown_error"
        if code == "unknown_error":
            sentences = [f"graphlens does not recognise this error: {short(message)!r}."]
        else:
            sentences = [f"PyTorch raised: {short(message)!r}.", ERROR_REASONS[code][0].upper() + ERROR_REASONS[code][1:] + "."]
        return Explanation([code], sentences, message=message)
    finally:
        del frame


def _graph_of(graph_or_trace) -> tuple[Graph | None, Trace | None]:
    from ..trace import Trace  # lazily: trace imports explain lazily too

    if isinstance(graph_or_trace, Graph):
        return graph_or_trace, None
    if isinstance(graph_or_trace, Trace):
        try:
            return graph_or_trace.graph(), graph_or_trace
        except Exception:  # noqa: BLE001 - a trace that cannot build a graph yet
            return None, graph_or_trace
    return None, None


def _explain_error(exc: Any, message: str, graph_or_trace, caller: FrameType | None) -> Explanation:
    # PyTorch raises autograd's errors as RuntimeError: a script's own ValueError that happens
    # to quote one of them is not one (each pattern says which exception types it fits).
    code, match = classify(exc, message)
    g, trace = _graph_of(graph_or_trace)
    ctx = Context(exc if isinstance(exc, BaseException) else None, caller)
    try:
        handler = _HANDLERS.get(code) or MISTAKE_HANDLERS.get(code) or SIMPLE_HANDLERS.get(code, _unknown)
        return handler(message, match, g, trace, ctx)
    finally:
        ctx.close()


# -- the handlers: one per reason code, each (message, match, graph, trace, context) -> Explanation


def _named_in_line(ctx: Context, g: Graph | None, keep, rec_keep) -> tuple[str | None, str | None]:
    found = ctx.in_line(keep)
    if found:
        name = found[0][0]
        tid = on_graph(g, found[0][1]) if g is not None else None
        return name, tid
    if g is not None:  # a record named in the failing line (without a line, any record would be a guess)
        tokens = set(re.findall(r"[A-Za-z_]\w*", ctx.line))
        recs = [t for t in g.tensors if rec_keep(t) and t.name in tokens]
        if len(recs) >= 1:
            return recs[-1].name, recs[-1].id
    return None, None


def _inplace_leaf(message, match, g, trace, ctx) -> Explanation:
    view_of = bool(match.group("view"))
    changed = next((ctx.torch_local(f.f_code.co_name, "input") for f in reversed(ctx.torch_frames)
                    if f.f_globals.get("__name__") == "torch.nn.functional" and f.f_locals.get("inplace") is True), None)
    named = ctx.name_of(changed) if isinstance(changed, torch.Tensor) else None
    if named is not None:  # the tensor an in-place activation was given (the traceback's frame holds it)
        name, tid = named, (on_graph(g, changed) if g is not None else None)
    else:
        name, tid = None, None
    name, tid = (name, tid) if name else _named_in_line(
        ctx, g,
        lambda t: t.requires_grad and (t.is_leaf or (t._base is not None and t._base.is_leaf)),
        lambda r: r.is_leaf and r.requires_grad,
    )
    who = name or "a leaf tensor that requires grad"
    base = None  # the leaf, when the tensor the line changes is a view of it (v = p[:2]; v.mul_(2))
    if view_of and name is not None:
        t = next((t for n, t in ctx.candidates if n == name), None)
        if t is not None and t._base is not None:
            base = next((n for n, c in ctx.candidates if c is t._base), None) or "a leaf"
    if base is not None:
        target = f"{name}, a view of {base} (a leaf that requires grad)"
    else:
        target = f"{'a view of ' if view_of else ''}{who}, a leaf that requires grad"
    sentences = [
        f"An in-place operation was applied to {target}. PyTorch forbids it: "
        f"the leaf's values are what its gradient is taken with respect to, and no graph records the change."
    ]
    if ctx.line:
        sentences.append(f"The failing line: {ctx.line}")
    op, _ = line_op(ctx.line)
    reasons = ["inplace_leaf"]
    fix = (f"To update a parameter, do it inside `with torch.no_grad():`; to compute something new, use an "
           f"out-of-place operation ({name or 'w'} + 1) or work on {name or 'w'}.clone().")
    act_name, act_op, act = inplace_activation(ctx)
    if act_op is not None:  # the traceback shows who changed it: an activation with inplace=True
        reasons.append("inplace_activation")
        op = act_op
        kind = f"{type(act).__name__}(inplace=True)" if act is not None else f"{act_op.rstrip('_')}(..., inplace=True)"
        who_changed = f"{act_name} ({kind})" if act_name else kind
        sentences.insert(1, f"The in-place operation is {who_changed}: it writes its result into its input, "
                            f"{name or 'the leaf'}, instead of making a new tensor.")
        x = name or "w"
        fix = (f"Use the activation out of place on {x}: " + (
            f"give {act_name} inplace=False (or set {as_code(act_name)}.inplace = False)" if act_name else f"drop inplace=True")
            + f", call it on a copy ({as_code(act_name) if act_name else 'relu'}({x}.clone())), or use torch.nn.functional.{act_op.rstrip('_')}({x}); "
            f"an in-place activation suits only tensors computed inside the model, never its parameters or inputs that require grad.")
    leaf_facts = [(tid, "requires_grad", True)] + ([(tid, "is_leaf", True)] if base is None and not view_of else [])
    return Explanation(
        reasons, sentences, tensor_name=name, tensor_id=tid, graph=g, path=[tid] if tid else (), message=message,
        op=op, line=ctx.line or None, lineno=ctx.lineno, fix=fix, facts=leaf_facts if tid else (),
    )


def _requires_grad_nonleaf(message, match, g, trace, ctx) -> Explanation:
    name, tid = _named_in_line(ctx, g, lambda t: not t.is_leaf, lambda r: not r.is_leaf)
    who = name or "a non-leaf tensor"
    sentences = [
        f"The requires_grad flag of {who} was changed, but {who} is not a leaf: it was computed from tensors that "
        f"require grad, and only a leaf's flag can be set."
    ]
    t = dict(ctx.candidates).get(name) if name else None
    made = type(t.grad_fn).__name__ if t is not None and t.grad_fn is not None else None
    if made:
        sentences.append(f"{who} was made by {made}.")
    return Explanation(
        ["requires_grad_nonleaf"], sentences, tensor_name=name, tensor_id=tid, graph=g, path=[tid] if tid else (), message=message,
        op=made, line=ctx.line or None, lineno=ctx.lineno, facts=[(tid, "is_leaf", False)] if tid else (),
        fix=f"Use {name or 'y'}.detach() for a copy without gradient, or set requires_grad on the leaves it comes from.",
    )


def _requires_grad_dtype(message, match, g, trace, ctx) -> Explanation:
    name, tid = _named_in_line(ctx, g, lambda t: t.dtype in INTEGER_DTYPES, lambda r: r.dtype in ("int64", "int32", "bool"))
    who = name or "the tensor"
    sentences = [f"{who} has an integer or bool dtype; only floating point and complex tensors can require grad."]
    # Integer results of the model (argmax indices): a float copy that requires grad would be a new
    # leaf cut from the model, the very mistake; say so instead of offering that copy.
    cut = code_cut(ctx.frame, ctx.lineno, name) if name else None
    if cut is not None and cut.kind == "cut_by_integer_op":
        sentences.append(
            f"{who} holds integer results ({cut.op} at line {cut.line}: {cut.code}): no gradient passes them, and "
            f"{who}.float().requires_grad_() would only make a new leaf, cut from the model that computed them."
        )
        fix = (
            f"Compute the loss from the scores before {cut.op} (the values, probabilities or logits), or use a "
            f"differentiable relaxation (softmax weights, a soft-argmax) if you need the position itself."
        )
        return Explanation(
            ["requires_grad_dtype", "cut_by_integer_op"], sentences, tensor_name=name, tensor_id=tid, graph=g,
            path=[tid] if tid else (), message=message, fix=fix, op=cut.op, line=cut.code, lineno=cut.line,
        )
    return Explanation(
        ["requires_grad_dtype"], sentences,
        tensor_name=name, tensor_id=tid, graph=g, path=[tid] if tid else (), message=message,
        line=ctx.line or None, lineno=ctx.lineno,
        fix=f"Create it with a float dtype (torch.tensor([1.0]) rather than [1]), or convert data that needs a "
        f"gradient first: {name or 'x'} = {name or 'x'}.float().requires_grad_().",
    )


def _retain_no_rg(message, match, g, trace, ctx) -> Explanation:
    name, tid = _named_in_line(ctx, g, lambda t: not t.requires_grad, lambda r: not r.requires_grad)
    who = name or "the tensor"
    return Explanation(
        ["retain_grad_no_requires_grad"],
        [f"retain_grad() was called on {who}, which does not require grad, so there is no gradient to keep."],
        tensor_name=name, tensor_id=tid, graph=g, path=[tid] if tid else (), message=message,
        facts=[(tid, "requires_grad", False)] if tid else (),
        fix=f"Make the leaves {who} is computed from require grad (or ask graphlens.explain({name or 'x'}) why it does not).",
    )


def _nonscalar(message, match, g, trace, ctx) -> Explanation:
    root = ctx.root[0] if ctx.root else None
    name = ctx.name_of(root) if root is not None else None
    g2 = root_graph(g, ctx)
    tid = on_graph(g2, root) if g2 is not None else None
    shape = list(root.shape) if root is not None else None
    who = name or ("the output" + (f" of shape {shape}" if shape else ""))
    grad_call = bool(re.search(r"\bgrad\s*\(", ctx.line or "")) and ".backward(" not in (ctx.line or "")
    call = "torch.autograd.grad() was called on" if grad_call else "backward() was called on"
    sentences = [
        f"{call} {who}" + (f", of shape {shape}," if name and shape is not None else "")
        + (" without grad_outputs." if grad_call else " without a gradient argument.")
        + " PyTorch can start backward on its own only from a single number."
    ]
    if ctx.line:
        sentences.append(f"The failing line: {ctx.line}")
    x = name or "the output"
    if grad_call:
        fix = (f"Pass grad_outputs=torch.ones_like({name or 'outputs'}) to torch.autograd.grad (it then gives the "
               f"gradient of the sum of {x}'s elements), or reduce {x} to a scalar first ({name or 'outputs'}.sum()); "
               f"for one gradient per element, use torch.func.jacrev or is_grads_batched=True.")
    elif name:
        fix = (f"Reduce {x} to a scalar first ({name}.sum().backward() or .mean()), or pass the gradient yourself: "
               f"{name}.backward(torch.ones_like({name})).")
    else:
        fix = ("Reduce the output to a scalar first (call .sum() or .mean() on it before .backward()), or pass the "
               "gradient yourself: .backward(torch.ones_like(...)) with the output's shape.")
    pairs = _all_pairs_index(root) if root is not None and not grad_call else None
    if pairs is not None:  # (x[:, target] of a batch: every row with every label, not each row with its own)
        n, m = pairs
        sentences.insert(1,
            f"Its graph indexes a [{n}, {m}] tensor as x[:, idx] with {n} indices, one per row of the batch: that picks, "
            f"for every row, the column of every index, a [{n}, {n}] block of all (row, index) pairs, not each row's own "
            f"entry (a per-sample loss picked with the batch's labels, say).")
        fix = (f"To take each row's own entry, index rows and columns together: x[torch.arange({n}), idx] or "
               f"x.gather(1, idx[:, None]), then reduce (.mean()); .mean() of the [{n}, {n}] block would also run, but "
               f"average every row with every other row's index.")
    return Explanation(
        ["nonscalar_backward"], sentences, tensor_name=name, tensor_id=tid, graph=g2, path=[tid] if tid else (), message=message,
        line=ctx.line or None, lineno=ctx.lineno, fix=fix,
    )


def _all_pairs_index(root, depth: int = 12) -> tuple[int, int] | None:
    """``(n, m)`` when ``root``'s graph, within ``depth`` nodes, indexes an [n, m] tensor as ``x[:, idx]``
    with a 1-d ``idx`` of n integers (one per row) and ``root`` has two sizes n: the all-pairs block."""
    if root.dim() < 2 or sum(1 for s in root.shape if s == root.shape[0]) < 2:
        return None
    frontier, seen = [root.grad_fn], set()
    for _ in range(depth):
        nxt = []
        for fn in frontier:
            if fn is None or id(fn) in seen:
                continue
            seen.add(id(fn))
            if type(fn).__name__ == "IndexBackward0":
                try:  # (never through a slot a saved-tensor hook packed: reading it would run the user's unpack hook)
                    raw = fn._raw_saved_indices
                    if any(getattr(r, "unpack_hook", None) is not None for r in (raw if isinstance(raw, (list, tuple)) else (raw,))):
                        raise LookupError
                    idx, sizes = fn._saved_indices, tuple(fn._saved_self_sym_sizes)
                except Exception:  # noqa: BLE001 - freed or hidden: nothing to read
                    idx, sizes = (), ()
                if (len(idx) == 2 and idx[0] is None and isinstance(idx[1], torch.Tensor) and idx[1].dim() == 1
                        and len(sizes) == 2 and idx[1].numel() == sizes[0] == root.shape[0] and not idx[1].is_floating_point()):
                    return int(sizes[0]), int(sizes[1])
            nxt.extend(c for c, _ in fn.next_functions)
        frontier = nxt
    return None


def _no_grad_fn(message, match, g, trace, ctx) -> Explanation:
    index = int(match.group("index"))
    root = ctx.root[index] if index < len(ctx.root) else None
    name = ctx.name_of(root) if root is not None else None
    tid = None
    if g is not None and root is not None:
        tid = find_live(g, root)
    unrecorded = root is not None and g is not None and tid is None  # live, and never seen by the trace or graph
    if tid is None and g is not None and trace is not None and root is None:
        # (the failing tensor itself is not known: the trace's latest record of one that needs no grad)
        recs = [t for t in g.tensors if not t.requires_grad and (name is None or t.name == name)]
        if recs:
            tid, name = recs[-1].id, recs[-1].name or name
    if g is not None and tid is not None and ctx.candidates:
        g = named_after(g, ctx.candidates, paths=True)  # (tensors a helper made, named after the raising frame's variables)
    who = name or ("the tensor" if root is not None else f"output {index}")
    asked = "torch.autograd.grad was asked for the gradient of" if ctx.inputs else "backward was called on"
    sentences = [f"{asked} {who}, which does not require grad and has no grad_fn: no graph leads back from it."]
    reasons = ["no_grad_fn"]
    facts: list[tuple] = []
    if unrecorded:  # nothing recorded is said of it: another tensor's record would be a wrong answer
        reasons.append("not_recorded")
        sentences.append(unrecorded_sentence("trace" if trace is not None else "traced graph" if g.source == "trace" else "graph", who))
    path: list[str] = [tid] if tid else []
    edges: list = []
    cut = None
    detail: list = []
    made_at = None
    sub_fix = None  # (the fix for how the root itself was made, when that is the answer)
    if g is not None and tid is not None:
        view = PathView(g)
        node = view.t(tid)
        facts += [(tid, "requires_grad", False), (tid, "is_leaf", True)]
        sub = analyse(view, tid, [], live=g.tensor(tid), ran=None, optimizer=None, hints={})
        detail = [r for r in sub.reasons if r in ("created_in_no_grad", "made_by_detach", "integer_dtype")]
        reasons += detail
        if detail:  # the root itself was made so
            sentences += sub.sentences[1:2]
            facts += sub.facts
            sub_fix = sub.fix
            path, edges = list(sub.path) or path, list(sub.edges)
            made = view.o(node.op) if node.op is not None else None
            at, text = assignment_line(ctx.frame, ctx.lineno, name, made.forward if made is not None else None)
            if made is not None:
                made_at = (made.forward, text or made.code, at or made.line, made.id)
            if at is not None and text:  # (the raising frame's own assignment: a traced op's line may be its caller's)
                sentences.append(f"{name or 'It'} is made at line {at}: {text}")
        else:
            cut = traced_cut(view, tid, trace_origins(view, trace, _files(ctx)))
    if cut is None and not detail and root is not None and is_inference(root):  # (a live fact: made in inference_mode)
        detail = ["created_in_no_grad"]
        reasons += detail
        sentences.append(f"{who} is an inference tensor: it was computed under torch.inference_mode() (a with block, or a "
                         f"@torch.inference_mode() decorator on the function that computed it), which records no graph at all.")
        sub_fix = (f"Compute {name or 'it'} outside torch.inference_mode(): remove the decorator or the with block around the "
                   f"code that trains (use torch.no_grad() only around what needs no gradient)." + INFERENCE_LIBRARY_FIX)
    if cut is None and not detail:  # what the graph does not show, the code may: a lead, said as one
        cut = code_cut(ctx.frame, ctx.lineno, name or _receiver(ctx.line), live=dict(reversed(ctx.candidates)))
    if cut is None and not detail and g is not None and tid is not None:
        view = PathView(g)
        if view.t(tid).op is not None and view.o(view.t(tid).op).name is None:
            sentences.append(_computed_from(view, tid, facts))
    if cut is not None:
        reasons.append(cut.kind)
        sentences.append(cut.text)
        facts += [f for f in cut.facts if f]
        if cut.path and g is not None:
            path = list(cut.path) + [p for p in path if p not in cut.path]
            edges = PathView(g).highlight_edges(path)
    elif (g is None or tid is None) and not detail:
        sentences.append(
            "Either none of the tensors it was computed from required grad, or it was computed inside "
            "torch.no_grad(), or it came from detach(), an integer result (argmax, a comparison, .long()), "
            "or a value taken out with .item() and put back with torch.tensor()."
        )
    if cut is not None and cut.kind == "rebound_leaf" and cut.tensor:
        name, tid = cut.tensor, None  # the answer is about the variable that was rebound
    return Explanation(
        reasons, sentences, tensor_name=name, tensor_id=tid, graph=g, path=path, edges=edges, message=message,
        fix=cut_fix(cut, name) if cut is not None else (sub_fix or _no_cut_fix(g, ctx, name)),
        op=cut.op if cut else (made_at[0] if made_at else None), line=cut.code if cut else (made_at[1] if made_at else None),
        lineno=cut.line if cut else (made_at[2] if made_at else None),
        cause=cut.node if cut else (made_at[3] if made_at else None),
        facts=[f for f in facts if g is not None and f[0] in g],
    )


def _computed_from(view: PathView, tid: str, facts: list) -> str:
    """What the trace saw of the tensors ``tid`` was computed from (none of them requires
    grad, or which do), as one sentence; the premises it states go to ``facts``."""
    seen, stack, ancestors = {tid}, [tid], []
    while stack:
        node = view.t(stack.pop())
        for i in (view.adj.inputs.get(node.op, ()) if node.op is not None and node.op in view.g else ()):
            if i not in seen:
                seen.add(i)
                ancestors.append(i)
                stack.append(i)
    needing = [a for a in ancestors if view.t(a).requires_grad]
    if not needing:
        facts.extend((a, "requires_grad", False) for a in ancestors)
        return "The tensors it was computed from, as far as the trace saw them, do not require grad."
    facts.extend((a, "requires_grad", True) for a in needing[:3])
    shown = ", ".join(view.label(a) for a in needing[:3]) + (", ..." if len(needing) > 3 else "")
    return (f"It was computed from {shown}, which {'requires' if len(needing) == 1 else 'require'} grad, but no call the "
            f"trace saw on the way explains the missing grad_fn; graphlens cannot tell where the path stops.")


def _no_cut_fix(g: Graph | None, ctx: Context, root: str | None) -> str:
    """The fix when no cut was found: make the leaves require grad, without claiming that the
    parameters do unless the graph (or the user's variables) shows they all do."""
    loss = root or "the loss"
    params = [t for t in g.tensors if t.is_parameter] if g is not None else []
    flags = [t.requires_grad for t in params] or [t.requires_grad for _, t in ctx.candidates if isinstance(t, torch.nn.Parameter)]
    which = "(parameters do)" if flags and all(flags) else "(an nn.Parameter does unless it was frozen; data needs requires_grad=True)"
    return (f"Make sure the leaves {loss} is computed from require grad {which}, and compute {loss} outside "
            f"torch.no_grad(), without detach(), integer results or .item(); run the code under graphlens.trace() to "
            f"see where the path stops.")


def _files(ctx: Context) -> list[str]:
    """The source files of the user's frames the traceback and the caller show (where a
    traced line may be read)."""
    frames = [f for f, _ in ctx.user_frames] + ([ctx.caller] if ctx.caller is not None else [])
    return list(dict.fromkeys(f.f_code.co_filename for f in frames))


def _receiver(line: str) -> str | None:
    """The variable whose ``.backward()`` the failing line calls (``y2`` of ``y2.sum().backward()``)."""
    m = re.search(r"([A-Za-z_]\w*)(?:\.\w+\([^()]*\))*\.backward\(", line or "")
    return m.group(1) if m else None


def _view_of_many(message, match, g, trace, ctx) -> Explanation:
    op, target = line_op(ctx.line)
    view = target or f"output {match.group('nr')} of {match.group('op')}"
    sentences = [
        f"{view} (output {match.group('nr')} of {match.group('op')}) is one of several views that one function "
        f"returned, and it was changed in place; PyTorch cannot track such a change for gradients."
        + (f" The failing line: {ctx.line}." if ctx.line else "")
    ]
    v = target or "v"
    return Explanation(
        ["view_inplace_multi_output"], sentences, tensor_name=target, graph=g, message=message, op=op,
        line=ctx.line or None, lineno=ctx.lineno,
        fix=f"Change a copy of the view, not the view itself: c = {v}.clone() then c.{op or 'mul_'}(...), or an "
        f"out-of-place operation (c = {v} * 2); the base tensor and the other views stay as they are.",
    )


def _unused_input(message, match, g, trace, ctx) -> Explanation:
    index = int(match.group("index")) if match.group("index") is not None else None
    if index is None and len(ctx.inputs) == 1:
        index = 0
    t = ctx.inputs[index] if index is not None and index < len(ctx.inputs) else None
    names = [n for n, c in ctx.candidates if c is t] if t is not None else []
    name = max(names, key=lambda n: n.count(".")) if names else None  # the module path is the telling one
    who = name or (f"input {index}" if index is not None else "one of its inputs")
    return Explanation(
        ["unused_input"],
        [f"torch.autograd.grad was asked for the gradient of {who}" + (f" (input {index})" if index is not None else "")
         + ", but the output does not depend "
         f"on it: no path of the graph leads from the output to it." + (f" The failing line: {ctx.line}." if ctx.line else "")],
        tensor_name=name, graph=g, message=message, line=ctx.line or None, lineno=ctx.lineno,
        fix=f"Leave {who} out of the inputs (e.g. only the parameters the output uses), or pass allow_unused=True "
        f"to get None for it.",
    )


def _inference_saved(message, match, g, trace, ctx) -> Explanation:
    found = ctx.in_line(lambda t: t.is_inference())
    name = found[0][0] if found else None
    who = name or "a tensor made inside torch.inference_mode()"
    made = " (made inside torch.inference_mode())" if name else ""
    return Explanation(
        ["inference_tensor_saved"],
        [f"{who}{made} was used in a computation whose gradient is needed; such tensors can never be saved for backward."
         + (f" The failing line: {ctx.line}." if ctx.line else "")],
        tensor_name=name, graph=g, message=message, line=ctx.line or None, lineno=ctx.lineno,
        fix=f"Make {name or 'it'} under torch.no_grad() instead of inference_mode() if autograd uses it later, or use "
        f"{name or 'x'}.clone() outside inference_mode().",
    )


def _unknown(message, match, g, trace, ctx) -> Explanation:
    exc = ctx.exc
    if exc is not None and not isinstance(exc, RuntimeError):
        # Not an error PyTorch's autograd raises (a script's own ValueError, a KeyError):
        # nothing about the graph to say, and no autograd fix to offer.
        return Explanation(
            ["unknown_error"],
            [f"graphlens does not recognise this {type(exc).__name__} as an autograd error, so it says nothing more "
             f"about it than its message: {short(message)!r}."],
            graph=g, message=message,
        )
    # No fix: a fix for an error graphlens cannot read would be a guess (anomaly mode, out-of-place ops).
    return Explanation(
        ["unknown_error"],
        [f"graphlens does not recognise this error, so it cannot relate it to the graph. The error says: {short(message)!r}."],
        graph=g, message=message,
    )


_HANDLERS = {
    "graph_freed": graph_freed,
    "inplace_saved": inplace_saved,
    "inplace_leaf": _inplace_leaf,
    "requires_grad_nonleaf": _requires_grad_nonleaf,
    "requires_grad_dtype": _requires_grad_dtype,
    "retain_grad_no_requires_grad": _retain_no_rg,
    "nonscalar_backward": _nonscalar,
    "no_grad_fn": _no_grad_fn,
    "view_inplace_multi_output": _view_of_many,
    "inference_tensor_saved": _inference_saved,
    "unused_input": _unused_input,
    "optimizer_nonleaf": optimizer_nonleaf,
    "backward_hook_inplace": backward_hook_inplace,
    "custom_fn_view_inplace": custom_fn_view_inplace,
    "anomaly_nan": anomaly_nan,
    "hook_changed_gradient": hook_changed_gradient,
    "hook_wrong_count": hook_wrong_count,
    "custom_fn_grad_shape": custom_fn_grad_shape,
    "hook_no_requires_grad": hook_no_requires_grad,
    "custom_fn_legacy": custom_fn_legacy,
    "custom_fn_no_backward": custom_fn_no_backward,
    "custom_fn_once_differentiable": custom_fn_once_differentiable,
}
