"""Why a tensor that does not require grad gets no gradient, and where it lost the gradient of what it was computed from."""

from __future__ import annotations

import torch

from .._live.facts import dtype_name
from .answer import Asked, Draft
from .cuts import cut_fix, origin_cut, traced_cut
from .evidence import in_optimizer
from .facts import custom_forward_of, grad_off, grad_text, region_kind
from .live import INFERENCE_LIBRARY_FIX, INTEGER_DTYPES

__all__ = ["frozen_with_grad", "not_required"]

#: Cuts the trace finds upstream of a tensor that say more than "it does not require grad".
_UPSTREAM = (
    "cut_by_integer_op", "cut_by_nondifferentiable_op", "requires_grad_set_late", "grad_without_create_graph",
    "constant_gradient", "gradient_without_graph", "cut_by_checkpoint", "frozen_parameters", "grad_disabled", "custom_fn_non_differentiable", "cut_by_python_value", "cut_by_detach",
    "cut_by_no_grad",
)


def frozen_with_grad(a: Asked, d: Draft) -> None:
    """Frozen after it got a gradient: ``.grad`` still holds it (zeros, after ``zero_grad(set_to_none=False)``)."""
    d.reasons.append("requires_grad_false")
    d.fact(a.tid, "requires_grad", False)
    d.fact(a.tid, "has_grad", True)
    shown = grad_text(a.node, a.precision) if a.node is not None else None
    d.sentences.append(
        f"{a.who} does not require grad, so backward computes no gradient for it; but {a.grad_of} is not None: it still "
        f"holds {shown or 'a tensor'} from before it was frozen."
    )
    d.fix = f"Set {a.name}.grad = None after freezing it."
    if a.optimizer is not None and in_optimizer(a.optimizer, a.live, a.node):
        d.reasons.append("frozen_in_optimizer")
        d.sentences.append(
            f"{a.who} is still one of the optimizer's parameters, and optimizer.step() updates every parameter whose "
            f".grad is not None: with momentum or weight decay, {a.who} keeps moving although it is frozen."
        )
        d.fix = f"Set {a.name}.grad = None after freezing it (zero_grad() does that by default), or leave {a.name} out of the optimizer."


def _upstream(a: Asked):
    """Where the tensor lost the gradient of what it was computed from: seen in a trace,
    else read from the user's code (``hints["code_lead"]``, a lead)."""
    if a.tid is not None and a.traced:
        cut = traced_cut(a.view, a.tid, a.hints.get("origins"))
        if cut is not None and cut.kind in _UPSTREAM:
            return cut
        return None
    lead = a.hints.get("code_lead")
    return lead if lead is not None and lead.kind in _UPSTREAM else None


def not_required(a: Asked, d: Draft) -> None:
    """The tensor does not require grad: say so, and how it came to be so."""
    view, node, tid, name, who = a.view, a.node, a.tid, a.name, a.who
    d.reasons.append("requires_grad_false")
    d.fact(tid, "requires_grad", False)
    d.sentences.append(f"{a.grad_of} {a.will} because {who} does not require grad, so no gradient is computed for it.")
    cut = _upstream(a)
    fn_name = custom_forward_of(node.region) if node is not None else None
    if fn_name is not None:
        _custom_output(a, d, fn_name)
    elif a.dtype in INTEGER_DTYPES:
        d.reasons.append("integer_dtype")
        d.sentences.append(f"It has dtype {dtype_name(a.dtype)}, and only floating point or complex tensors can require grad.")
        if cut is not None and cut.kind == "cut_by_integer_op":
            # Integer results of a model (argmax, a comparison): a float copy that requires grad would be a new
            # leaf cut from the model, the very mistake; say where the integers came from instead.
            d.add_cut(cut)
            d.sentences.append(
                f"{name}.float().requires_grad_() would only make a new leaf with no link to what {name} was computed from."
            )
            d.fix = cut_fix(cut, None)
            d.path = [p for p in cut.path if p in view.g] or ([tid] if tid else [])
            d.edges = view.highlight_edges(d.path)
        else:
            d.fix = f"Make it a float tensor first, e.g. {name} = {name}.float().requires_grad_()."
    elif node is not None and node.detached_from is not None:
        src = node.detached_from
        d.reasons.append("made_by_detach")
        d.sentences.append(
            f"It was made by {view.label(src)}.detach() (or .data): a new leaf that shares the memory "
            f"of {view.label(src)} but is cut from its graph."
        )
        d.path = [src, tid]
        d.edges = view.highlight_edges(d.path)
        d.fix = f"Use {view.label(src)} itself where you need the gradient, and detach only what must stay constant."
    elif node is not None and grad_off(node.region) and not (cut is not None and cut.kind == "cut_by_checkpoint"):
        d.reasons.append("created_in_no_grad")
        op = node.op
        ins = [i for i in view.adj.inputs.get(op, ())] if op else []
        grad_ins = [i for i in ins if view.t(i).requires_grad]
        region = region_kind(node.region)
        made = f" by {view.o(op).label}" if op else ""
        d.sentences.append(f"It was made{made} inside torch.{region}(), where PyTorch records no graph"
                           + (" (torch.enable_grad() inside it does not switch recording back on)." if region == "inference_mode" else "."))
        if grad_ins:
            d.facts.extend((i, "requires_grad", True) for i in grad_ins)
            d.sentences.append(
                "Its input " + ", ".join(view.label(i) for i in grad_ins)
                + f" requires grad, but no graph links {who} back to it."
            )
        d.path = grad_ins + ([op] if op else []) + [tid]
        d.edges = view.highlight_edges(d.path)
        d.fix = f"Compute {name} outside torch.{region}() (not inside its with block) if a gradient must flow through it."
        if region == "inference_mode":
            d.fix += INFERENCE_LIBRARY_FIX
        if region == "no_grad" and not torch.is_grad_enabled():  # (still off where graphlens is asked)
            d.reasons.append("grad_disabled")
            d.sentences.append(
                "Gradient recording is still off where graphlens was asked (torch.is_grad_enabled() is False): unless a "
                "with torch.no_grad() block surrounds both, it was switched off for the whole thread "
                "(torch.set_grad_enabled(False), or a library or framework that calls it), not by a block around that line."
            )
            d.fix = (f"Switch gradient recording back on for the forward that makes {name}: torch.set_grad_enabled(True) "
                     f"before it, or with torch.enable_grad(): around it; then find the code that switched it off.")
    elif a.is_param:
        d.fact(tid, "is_parameter", True)
        d.sentences.append("It is a parameter whose requires_grad was set to False (frozen).")
        d.fix = f"Call {name}.requires_grad_(True) before the forward pass if it should learn."
    elif cut is not None:
        d.add_cut(cut)
        d.fix = cut_fix(cut, name)
        d.path = [p for p in cut.path if p in view.g] or ([tid] if tid else [])
        d.edges = view.highlight_edges(d.path)
    elif tid is not None and a.hints.get("origins") and (lead := origin_cut(view, tid, a.hints["origins"])) is not None:
        # made from a tensor the trace saw only at its first use: the code says how it was made
        d.add_cut(lead)
        d.fix = cut_fix(lead, name)
        d.path = [tid]
    else:
        d.sentences.append(
            "A tensor made directly starts with requires_grad=False; so does one made by detach(), inside "
            "torch.no_grad(), or only from tensors that do not require grad."
        )
        d.fix = (
            f"If {name} is data or a parameter you create, create it with requires_grad=True. If it should be "
            f"computed from the parameters, compute it with torch operations (no detach(), torch.no_grad(), "
            f"integer results or .item()/torch.tensor(...) in between); switching requires_grad on for {name} itself "
            f"would only make a new leaf with no link to them. graphlens.trace() shows where the link is lost."
        )
        owner, _, attr = (name if "." in name else a.hints.get("attribute") or name).rpartition(".")
        if owner and attr.isidentifier() and type(a.live) is torch.Tensor:  # (a plain tensor kept on an object)
            opt = a.optimizer is not None and not in_optimizer(a.optimizer, a.live, a.node)
            d.sentences.append(
                (f"{name} is {owner}.{attr}, " if f"{owner}.{attr}" != name else f"{name} is ")
                + f"a plain tensor attribute, not an nn.Parameter: a module does not list it in its parameters(), "
                f"so an optimizer built from them never updates it{' (it is not among the optimizer' + chr(39) + 's parameters)' if opt else ''}."
            )
            d.fix = (
                f"If {name} should learn, register it as a parameter where it is made: self.{attr} = "
                f"nn.Parameter(torch.randn(...)) in {owner}'s __init__ (then it requires grad and is in "
                f"{owner}.parameters()); requires_grad=True alone would give it a .grad that no optimizer built from "
                f"model.parameters() applies. If it is data, it needs no gradient."
            )
        d.path = [tid] if tid else []


def _custom_output(a: Asked, d: Draft, fn_name: str) -> None:
    """A tensor made inside a custom ``autograd.Function``'s forward: PyTorch runs that forward
    with grad off, and what ``apply`` returns gets the Function's backward node, except what
    the forward marks non-differentiable (and integer tensors)."""
    view, node, tid, name, who = a.view, a.node, a.tid, a.name, a.who
    d.reasons.append("custom_fn_non_differentiable")
    apply_op = next((o.id for o in view.g.ops if o.forward == f"{fn_name}.apply" and o.name), None)
    back = view.o(apply_op).name if apply_op else f"{fn_name}Backward"
    made = f" by {view.o(node.op).forward}" if node.op and view.o(node.op).forward else ""
    if node.op:
        d.fact(node.op, "op", view.o(node.op).forward)
    d.sentences.append(
        f"It was made{made} inside the forward of the custom autograd.Function {fn_name}, which PyTorch runs with grad "
        f"off (not a torch.no_grad() block of yours): what {fn_name}.apply returns gets {back} as its grad_fn, except "
        f"the outputs the forward marks non-differentiable and integer ones."
    )
    integer = a.dtype in INTEGER_DTYPES
    if integer:
        d.reasons.append("integer_dtype")
        d.sentences.append(f"{who} has dtype {dtype_name(a.dtype)}: an integer output is never differentiable.")
        d.fix = (f"Nothing to fix if {name} holds indices or counts: compute the loss from the float outputs of "
                 f"{fn_name} (they have {back}); a float copy of {name} that requires grad would only be a new leaf with no link to the model.")
    else:
        why = ("its forward marked it with ctx.mark_non_differentiable (an input of apply required grad: the other "
               f"outputs got {back})" if apply_op else
               "its forward marked it with ctx.mark_non_differentiable, or none of the inputs of apply required grad")
        d.sentences.append(
            f"If {fn_name}.apply returned {who}, {why}: no gradient flows back through it, by the Function's own "
            f"choice. (A value made inside forward and kept elsewhere, on ctx or an attribute, has no graph at all.)"
        )
        d.fix = (f"Nothing to fix if {name} should carry no gradient. If one should flow through it, remove it from "
                 f"ctx.mark_non_differentiable(...) in {fn_name}.forward and return its gradient from {fn_name}.backward.")
    d.path = [p for p in (node.op, tid) if p]
    d.edges = view.highlight_edges(d.path)
