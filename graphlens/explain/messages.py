"""Which error a message is: the patterns graphlens recognises, tried in order, and the answers that need only the message.

Every pattern names one reason code of :data:`~graphlens.explain.types.ERROR_REASONS`; what
the handler of that code reads beyond the message (the traceback's frames, the graph, the
code) lives with the handler.  ``tests/data/autograd_messages.json`` lists the messages
torch 2.13's autograd, optimizers and hooks can raise and the code each one gets here (or
``unknown``); ``tests/test_explain_errors.py`` runs it.
"""

from __future__ import annotations

import re
from typing import Any

from .mistakes import PATTERNS as MISTAKES
from .types import Explanation

__all__ = ["AUTOGRAD", "MORE", "classify", "simple", "SIMPLE_HANDLERS"]

#: Autograd's own RuntimeErrors (or a message given as text): ``(reason code, pattern)``.
AUTOGRAD: list[tuple[str, re.Pattern]] = [
    ("graph_freed", re.compile(r"Trying to backward through the graph a second time")),
    (
        "inplace_saved",
        re.compile(
            r"modified by an inplace operation: \[(?P<type>[\w.]+) \[(?P<shape>[^\]]*)\]\]"
            r"(?:, which is output (?P<nr>\d+) of (?P<op>[\w:]+),)? is at version (?P<ver>\d+); "
            r"expected version (?P<exp>\d+)"
        ),
    ),
    (
        "inplace_leaf",
        re.compile(r"a (?P<view>view of a )?leaf Variable that requires grad (?:is being|has been) used in an in-place operation"),
    ),
    ("requires_grad_nonleaf", re.compile(r"you can only change requires_grad flags of leaf variables")),
    ("requires_grad_dtype", re.compile(r"only Tensors of floating point (?:and complex )?dtype can require gradients", re.I)),
    ("retain_grad_no_requires_grad", re.compile(r"can't retain_grad on Tensor that has requires_grad=False")),
    ("nonscalar_backward", re.compile(r"grad can be implicitly created only for scalar outputs")),
    ("no_grad_fn", re.compile(r"element (?P<index>\d+) of tensors does not require grad and does not have a grad_fn")),
    (
        "view_inplace_multi_output",
        re.compile(r"Output (?P<nr>\d+) of (?P<op>\w+) is a view and is being modified inplace\. This view is the output of a function that returns multiple views"),
    ),
    ("inference_tensor_saved", re.compile(r"Inference tensors cannot be saved for backward")),
    (
        "unused_input",
        re.compile(r"(?:The differentiated Tensor at index (?P<index>\d+)|One of the differentiated Tensors) appears to not have been used in the graph"),
    ),
    ("input_not_requiring_grad", re.compile(r"One of the differentiated Tensors does not require grad")),
    (
        "grad_shape_mismatch",
        re.compile(r"Mismatch in shape: grad_output\[(?P<index>\d+)\] has a shape of (?P<given>.*?) and output\[\d+\] has a shape of (?P<want>.*?)\.$", re.M),
    ),
]

_RT, _VALUE, _TYPE = (RuntimeError,), (ValueError,), (TypeError,)

#: Errors of optimizers, hooks, custom Functions and anomaly mode: ``(code, exception types,
#: pattern)``, tried after :data:`AUTOGRAD` and before the plain Python mistakes.
MORE: list[tuple[str, tuple[type, ...], re.Pattern]] = [
    ("optimizer_nonleaf", _VALUE, re.compile(r"can't optimize a non-leaf Tensor")),
    ("optimizer_empty", _VALUE, re.compile(r"optimizer got an empty parameter list")),
    (
        "optimizer_params_type",
        _TYPE,
        re.compile(
            r"optimizer can only optimize Tensors, but one of the params is (?P<what>[\w.]+)"
            r"|params argument given to the optimizer should be an iterable of Tensors or dicts, but got (?P<given>[\w.]+)"
        ),
    ),
    (
        "backward_hook_inplace",
        _RT,
        re.compile(r"Output (?P<nr>\d+) of BackwardHookFunction(?:Backward)? is a view and is being modified inplace"),
    ),
    (
        "custom_fn_view_inplace",
        _RT,
        re.compile(r"Output (?P<nr>\d+) of (?P<op>\w+) is a view and is being modified inplace\. This view was created inside a custom Function"),
    ),
    (
        "view_inplace_no_grad",
        _RT,
        re.compile(
            r"(?:A view|is a view of a view which) was created in (?P<mode>no_grad|inference) mode and "
            r"(?:is being|(?P<base>its base or another view of its base has been)) modified inplace"
        ),
    ),
    (
        "inference_tensor_outside",
        _RT,
        re.compile(r"(?P<what>Inplace update to|Setting requires_grad=True on) inference tensor outside InferenceMode is not allowed"),
    ),
    ("anomaly_nan", _RT, re.compile(r"Function '(?P<op>\w+)' returned nan values in its (?P<nr>\d+)(?:st|nd|rd|th) output")),
    (
        "hook_changed_gradient",
        _RT + _TYPE,
        re.compile(
            r"hook '(?P<hook>[^']*)' has changed the (?P<what>size|type|device) of value(?: \(was (?P<was>[\w.]+) got (?P<got>[\w.]+)\))?"
            r"|expected (?:Variable|tuple), but hook returned '(?P<returned>\w+)'"
        ),
    ),
    (
        "hook_wrong_count",
        _RT,
        re.compile(
            r"hook '(?P<hook>[^']*)' has returned an incorrect number of values \(got (?P<got>\d+), but expected (?P<want>\d+)\)"
            r"|Backward (?P<pre>pre )?hook returned an invalid number of grad_(?:input|output), got (?P<got2>\d+), but expected (?P<want2>\d+)"
        ),
    ),
    (
        "custom_fn_grad_shape",
        _RT,
        re.compile(
            r"Function (?P<fn>\w+) returned an invalid gradient at index (?P<index>\d+) - "
            r"got \[(?P<got>[^\]]*)\] but expected shape compatible with \[(?P<want>[^\]]*)\]"
        ),
    ),
    ("hook_no_requires_grad", _RT, re.compile(r"cannot register a hook on a (?:tensor|variable) that doesn't require gradient")),
    ("save_for_backward_nontensor", _TYPE, re.compile(r"save_for_backward can only save variables, but argument (?P<index>\d+) is of type (?P<type>\w+)")),
    ("custom_fn_legacy", _RT, re.compile(r"Legacy autograd function with non-static forward method is deprecated")),
    ("custom_fn_once_differentiable", _RT, re.compile(r"differentiate twice a function that was marked with @once_differentiable")),
    (
        "custom_fn_no_backward",
        _RT,
        re.compile(r"You must implement either the backward or vjp method for your custom autograd\.Function"),
    ),
    (
        "nonleaf_grad_access",
        (Warning,),
        re.compile(r"The \.grad attribute of a Tensor that is not a leaf Tensor is being accessed"),
    ),
    (
        "grad_assignment_mismatch",
        _RT,
        re.compile(r"attempting to assign a gradient (?:of size '(?P<size>[^']*)' to a tensor of size '(?P<want>[^']*)'|with dtype '(?P<dtype>\w+)')"),
    ),
]


def classify(exc: Any, message: str) -> tuple[str, re.Match | None]:
    """``(reason code, match)`` of the first pattern that fits ``message`` and the kind of
    ``exc`` (a message given without an exception fits every kind); ``("unknown_error", None)``."""
    text_only = not isinstance(exc, BaseException)
    if text_only or isinstance(exc, RuntimeError):
        for code, pattern in AUTOGRAD:
            match = pattern.search(message)
            if match:
                return code, match
    for code, kinds, pattern in MORE + MISTAKES:
        if text_only or isinstance(exc, kinds):
            match = pattern.search(message)
            if match:
                return code, match
    return "unknown_error", None


def simple(code: str, sentence: str, fix: str):
    """A handler whose answer is the message's meaning alone (its groups fill ``sentence``)."""

    def handler(message, match, g, trace, ctx) -> Explanation:
        groups = {k: v for k, v in (match.groupdict() if match else {}).items() if v is not None}
        try:
            text = sentence.format_map(_Groups(groups))
        except (KeyError, ValueError, IndexError):
            text = sentence
        return Explanation([code], [text], fix=fix, graph=g, message=message, line=ctx.line or None, lineno=ctx.lineno)

    return handler


class _Groups(dict):
    def __missing__(self, key: str) -> str:
        return ""


#: The answers that need the message alone.
SIMPLE_HANDLERS = {
    "input_not_requiring_grad": simple(
        "input_not_requiring_grad",
        "torch.autograd.grad was asked for the gradient of a tensor that does not require grad.",
        "Create that input with requires_grad=True (or call .requires_grad_()) before computing the output.",
    ),
    "grad_shape_mismatch": simple(
        "grad_shape_mismatch",
        "The gradient given to backward has shape {given}, but the output it belongs to has shape {want}.",
        "Pass a gradient of the output's own shape, e.g. torch.ones_like(out).",
    ),
    "optimizer_empty": simple(
        "optimizer_empty",
        "The optimizer was given no parameters at all: the list or iterator passed to it was empty.",
        "Pass the parameters of a model that has some (model.parameters()); tensors kept in a plain Python list on a "
        "module are not registered (use nn.ModuleList / nn.ParameterList), and a parameters() iterator is empty once "
        "it has been used (wrap it in list(...) to use it twice).",
    ),
    "optimizer_params_type": simple(
        "optimizer_params_type",
        "The optimizer takes an iterable (a list) of tensors or of parameter-group dicts, each of them a tensor; it "
        "was given a {given}{what} where a tensor or that list belongs.",
        "Pass a list of the tensors to optimize, e.g. torch.optim.SGD([w, b], lr=0.1) or model.parameters() "
        "(a single tensor w goes in as [w]).",
    ),
    "view_inplace_no_grad": simple(
        "view_inplace_no_grad",
        "A view taken in {mode} mode was changed in place outside that mode (or its base, or another view of its "
        "base, was): PyTorch cannot tell whether the change should be tracked for gradients, so it refuses.",
        "Take the view and change it in the same mode: both inside the no_grad block (the change is not tracked) "
        "or both outside it (the change is tracked); or change a clone() of the view.",
    ),
    "inference_tensor_outside": simple(
        "inference_tensor_outside",
        "A tensor made inside torch.inference_mode() was used outside it in a way autograd must track "
        "({what} it): inference tensors carry no version counter and no graph.",
        "Make the tensor under torch.no_grad() instead of inference_mode(), or use a clone() of it outside "
        "inference_mode().",
    ),
    "nonleaf_grad_access": simple(
        "nonleaf_grad_access",
        "PyTorch warned that .grad was read on a tensor that is not a leaf (it was computed from other tensors): "
        "backward keeps a gradient only on leaves, so that .grad is None unless retain_grad() was called on the "
        "tensor before backward.",
        "Read .grad of the leaf the tensor was computed from (a parameter, or the input made with requires_grad=True), "
        "or call t.retain_grad() before backward to keep the gradient of t; graphlens.explain(t, loss) names the "
        "leaf and the path.",
    ),
    "save_for_backward_nontensor": simple(
        "save_for_backward_nontensor",
        "ctx.save_for_backward was given a {type} (argument {index}): it saves tensors (or None) only.",
        "Save the tensors with ctx.save_for_backward(...) and keep the other values as attributes of ctx "
        "(ctx.k = k).",
    ),
    "grad_assignment_mismatch": simple(
        "grad_assignment_mismatch",
        "A tensor assigned to .grad must have the shape, dtype and device of the tensor it belongs to; the one "
        "assigned here does not.",
        "Assign a gradient made like the tensor (torch.zeros_like(w)), or convert it first (g.to(w)).",
    ),
}
