"""The answer of an explanation (:class:`Explanation`) and the reason codes it may give."""

from __future__ import annotations

import html
import re
from typing import Any, Iterable, Sequence

from ..graph import Graph

__all__ = ["Explanation", "GRAD_REASONS", "ERROR_REASONS", "NONFINITE_REASONS", "REASONS"]

#: Reason codes of :func:`explain` for a tensor, with what each one means.  The first code of
#: ``Explanation.reasons`` is the main reason; later codes add detail.
GRAD_REASONS: dict[str, str] = {
    "grad_ok": "the tensor has (or will get) a gradient; the path from the root says where it comes from",
    "will_accumulate": "it already holds a gradient from an earlier backward, and the next backward adds to it",
    "backward_not_run": "the tensor will get a gradient, but backward has not run through the root yet",
    "zero_grad_set_none": "backward ran, yet .grad is None: it was reset afterwards (zero_grad() sets None by default)",
    "clip_misplaced": "graphlens read the code: gradient clipping runs before the backward that computes the gradients, "
    "or after the step that used them, so the step uses unclipped gradients",
    "grad_discarded": "a trace saw .grad cleared between two backward passes with no update of the tensor in between: the "
    "earlier pass's gradient was thrown away before any step used it (a zero_grad() inside an accumulation)",
    "backward_stopped": "a traced backward pass stopped with an error before it reached the tensor, so its .grad was "
    "never written",
    "retain_grad_too_late": "a non-leaf retains grad but has none although backward ran (retain_grad() came after it)",
    "nonleaf_not_retained": "a non-leaf tensor: its gradient flows through and is discarded unless retain_grad() was called",
    "is_a_copy": "a non-leaf standing in for a leaf, e.g. randn(..., requires_grad=True) * 2 or .to()/.double(): "
    "the gradient lands on an unnamed leaf",
    "requires_grad_false": "the tensor does not require grad, so no gradient is computed for it",
    "created_in_no_grad": "the tensor was made inside torch.no_grad() (or inference_mode)",
    "made_by_detach": "the tensor came from detach() (or .data): a new leaf that does not require grad",
    "integer_dtype": "the tensor has an integer or bool dtype, which can never require grad",
    "not_reachable": "the root's backward graph never reaches the tensor",
    "retained_view_unread": "the tensor is a view that retains its grad and whose memory was changed in place: reading "
    "its grad_fn or is_leaf could make PyTorch rebuild its node and move the retain_grad hook off the graph backward "
    "runs, so graphlens does not read them and says only what is known without them",
    "grad_set_elsewhere": "the root does not reach the tensor, yet its .grad is set: that gradient came from a backward "
    "of another output (or an assignment to .grad), and this root's backward adds nothing to it",
    "cut_by_detach": "a detach() between the tensor and the root cuts the gradient path",
    "cut_by_no_grad": "an operation run inside torch.no_grad() between the tensor and the root cuts the path",
    "feeds_other_root": "the tensor only feeds another output (another loss or branch), not this root",
    "through_checkpoint": "the root's graph goes through a reentrant checkpoint, whose backward builds the graph it "
                          "goes through only then: whether it reaches the tensor cannot be read beforehand",
    "rewrapped_as_leaf": "a value computed from the tensor was wrapped into a new leaf (nn.Parameter(x), torch.tensor(x)), "
                         "which has no history: the root uses that leaf, not what it was computed from",
    "not_in_optimizer": "the given optimizer does not hold the tensor, so its step() never updates it",
    "no_root": "no root was given or found, so reachability could not be checked",
    "changed_after_trace": "the tensor's version changed after the trace's block ended: it was changed in place by code "
    "the trace did not see, so the answer says only what the trace saw",
    "unused_output": "the tensor is an output of an operation whose other output the root uses, but no operation takes "
    "this one: the root does not use it, so no gradient reaches it (as intended, if it is not needed)",
    "custom_fn_non_differentiable": "a custom autograd.Function returned the tensor without a grad_fn: its forward marked "
    "it with ctx.mark_non_differentiable (an integer output is always so)",
    "tied_parameter": "the parameter is registered under several names (tied weights, e.g. an embedding and an output "
    "layer): the gradient that reaches it is the sum of every use",
    "not_recorded": "the trace or graph given never recorded the tensor (made outside the trace's block, or in another "
    "trace): the answer says only what the live tensor shows",
    "cut_by_integer_op": "an operation with an integer or bool result (argmax, a comparison, .long(), round to int) "
    "stands between the tensor and the root: no gradient passes an integer",
    "cut_by_python_value": "the value left the graph as a Python or NumPy number (.item(), .tolist(), .numpy()) and "
    "came back as a new tensor (torch.tensor(...), torch.from_numpy(...)) without history",
    "rebound_leaf": "the variable was rebound to a new tensor (e.g. w = w - lr * w.grad), so it no longer names the "
    "leaf the gradient goes to",
    "frozen_in_optimizer": "the parameter no longer requires grad but is still in the optimizer, whose step() can "
    "still move it (momentum, weight decay) while it holds a .grad",
    "hook_changed_grad": "a hook registered on the tensor (register_hook) changed the gradient that reached it",
    "modified_through_data": "a value backward needed was changed through .data (or another alias autograd does not "
    "track), so the gradient is silently computed from the changed value",
    "ctx_attribute_changed": "a custom autograd.Function kept a tensor as a ctx attribute (not save_for_backward) and "
    "it was changed in place after the call, so its backward silently computes with the changed values",
    "cut_by_nondifferentiable_op": "an operation PyTorch does not differentiate (histc, bincount, unique, ...) stands "
    "between the tensor and the root: its result has no grad_fn although its input requires grad",
    "zero_derivative": "an operation whose derivative is zero almost everywhere (round, floor, ceil, trunc, sign) is on "
    "every path from the root to the tensor, so the gradient that reaches it is zero",
    "requires_grad_set_late": "requires_grad was switched on (requires_grad_() or requires_grad = True) after an "
    "operation had used the tensor: PyTorch records an operation only if an input requires grad when it runs",
    "grad_without_create_graph": "the tensor is a gradient computed by torch.autograd.grad (or backward) without "
    "create_graph=True: it has no graph of its own, so it cannot be differentiated again",
    "cut_by_checkpoint": "a reentrant torch.utils.checkpoint (use_reentrant=True) ran its function under no_grad and, as "
    "none of its tensor inputs requires grad, gave its output no graph: the parameters inside get no gradient",
    "leaf_root": "the root is a leaf (made by torch.tensor(..., requires_grad=True) from numbers, or by setting "
    "requires_grad on a value without history): backward from it reaches nothing but itself",
    "unregistered_module": "the parameter belongs to a submodule kept in a plain Python list or dict attribute: it is "
    "not registered, so model.parameters() and an optimizer built from it do not hold it",
    "grad_disabled": "gradient recording is off for the whole thread (torch.set_grad_enabled(False), inference mode), "
    "not only inside a with block: no operation records a graph until it is switched back on",
    "frozen_parameters": "every parameter the root was computed from is frozen (requires_grad=False), and nothing "
    "else it was computed from requires grad",
    "constant_gradient": "a gradient computed with create_graph=True has no graph because it is a constant: it depends "
    "on nothing that requires grad (the function is linear in the inputs), so its own derivative is zero",
    "gradient_without_graph": "the tensor holds a gradient (from torch.autograd.grad, or a .grad left by backward) that "
    "has no graph of its own: computed without create_graph=True, or a constant; either way it cannot be "
    "differentiated again",
}

#: Reason codes of the answers about a NaN or an infinity (graphlens/explain/nonfinite.py),
#: part of :data:`GRAD_REASONS`.
NONFINITE_REASONS: dict[str, str] = {
    "nonfinite_forward": "a value computed in the forward pass is NaN or infinite: the first op that made one is named",
    "nonfinite_backward": "a gradient is NaN or infinite while every value of the forward pass was finite: the first "
    "backward node that sent one (in the engine's order) is named",
    "nonfinite_input": "the tensor already held NaN or infinity when the trace first saw it (the input data, or made "
    "outside the block)",
    "nonfinite_parameter": "a parameter holds NaN or infinity, written into it in place (an optimizer step, often from a "
    "gradient that was already non-finite)",
    "nonfinite_grad_before": "the .grad was already NaN or infinite before the traced backward added to it",
    "nonfinite_unseen": "every value and gradient the trace saw was finite: the non-finite number came from something "
    "it did not see",
    "nonfinite_hook": "a gradient hook (Tensor.register_hook) returned a NaN or an infinity from a finite gradient: "
    "every backward node sent finite values, and what arrived after the hook was not",
    "nonfinite_grad_assigned": "the .grad holds values the program assigned to it (or changed in place) after backward, "
    "not what backward wrote: the op that made them is named",
    "infinite_derivative": "the op's derivative is infinite (or 0/0) at the input value there, so its backward sends "
    "inf or NaN although what arrived was finite",
    "where_unchosen_branch": "torch.where (or masked_fill) picked the other branch at that position, but the branch not "
    "chosen still runs its backward: 0 times its infinite derivative is NaN",
    "zero_times_inf": "the gradient that arrived at that element was 0 (a mask, an index or a selection after the op did "
    "not use it), but 0 times the op's infinite derivative is NaN: masking after the op cannot stop it",
    "clamp_rounded": "a clamp meant to keep the value away from where the op breaks did nothing: in the tensor's dtype "
    "its bound rounds to that very value (clamp(max=1 - 1e-6) is clamp(max=1) in bfloat16)",
    "overflow": "a finite input was too large for the dtype: the result overflowed to infinity",
    "diverged": "the loss the trace recorded at each step grew a million-fold before it overflowed: the training steps "
    "diverged (a learning rate too high), not one op",
    "log_of_zero": "log at 0 (log1p at -1) gives -inf",
    "division_by_zero": "a division (a reciprocal, rsqrt, a negative power) by 0 gives inf, and 0 / 0 gives NaN",
    "invalid_domain": "the input is outside the op's domain (log or sqrt of a negative number, acos/asin beyond ±1): NaN",
    "log_of_softmax": "log(softmax(x)): softmax underflowed to 0 for very negative logits, and log(0) = -inf; "
    "log_softmax computes the same thing without the underflow",
    "masked_infinity": "the infinity was written on purpose (masked_fill, torch.full, torch.where with float('-inf')): "
    "not an overflow; it reached the value because nothing removed the masked positions",
    "masked_softmax": "softmax of a row whose every element is -inf (every position masked) is 0 / 0 = NaN",
    "pole": "the op is infinite at that input by definition (atanh at ±1, lgamma and digamma at 0 and the negative "
    "integers, tan at odd multiples of pi/2): not an overflow",
    "std_of_one": "std or var with the default correction divides by N - 1: over a single element that is 0 / 0 = NaN",
    "impossible_alignment": "ctc_loss is inf where no alignment of the target fits the input (the input sequence is too "
    "short): the probability is exactly 0, not an overflow",
    "singular_matrix": "a log-determinant of a singular matrix (determinant 0) is -inf, of one with a negative "
    "determinant NaN: exact, not an overflow",
    "empty_reduction": "a mean over no elements (an empty selection, a loss whose every target is ignore_index) is "
    "0 / 0 = NaN",
    "zero_variance": "a normalisation (layer_norm, batch_norm, ...) of a constant row with eps = 0, or an eps the dtype "
    "cannot hold, divides 0 by 0",
    "eps_too_small": "the eps meant to keep a denominator away from 0 is 0, or rounds to 0 in the dtype (1e-12 in "
    "float16), so a zero vector gives 0 / 0",
    "underflow": "values too small for the dtype rounded to exactly 0 or 1 (every exp of a sum far below 0, a sigmoid "
    "saturated in bfloat16), and a log or a division of that is not finite",
    "label_smoothing": "cross_entropy with label_smoothing averages -log p over every class: a class masked with -inf "
    "(probability 0) makes the loss inf",
}
GRAD_REASONS.update(NONFINITE_REASONS)

#: Reason codes of :func:`explain_error`, one per kind of error, with what each one means.
ERROR_REASONS: dict[str, str] = {
    "graph_freed": "backward ran through a graph whose saved tensors an earlier backward already freed",
    "inplace_saved": "a tensor saved for backward was modified in place before backward used it",
    "inplace_leaf": "an in-place operation on a leaf that requires grad (or on a view of one)",
    "requires_grad_nonleaf": "requires_grad was changed on a non-leaf tensor",
    "requires_grad_dtype": "requires_grad was asked of an integer or bool tensor",
    "retain_grad_no_requires_grad": "retain_grad() on a tensor that does not require grad",
    "nonscalar_backward": "backward() without a gradient argument on an output with more than one element",
    "no_grad_fn": "backward on a tensor that does not require grad and has no grad_fn",
    "view_inplace_multi_output": "an in-place change to one of several views returned by one function (unbind, split, ...)",
    "inference_tensor_saved": "a tensor made in inference_mode was used where autograd must save it",
    "unused_input": "autograd.grad was asked for a tensor the output does not depend on",
    "input_not_requiring_grad": "autograd.grad was asked for a tensor that does not require grad",
    "grad_shape_mismatch": "the gradient given to backward has a different shape than the output",
    "numpy_requires_grad": "numpy() (or a NumPy function) was asked for the values of a tensor that requires grad; an "
    "array has no graph, so PyTorch refuses",
    "out_argument": "a tensor that requires grad was given as out= to an operation; out= results are not differentiable",
    "wrong_number_of_grads": "a custom autograd.Function's backward returned a different number of gradients than "
    "forward took inputs",
    "leaf_moved_interior": "a leaf that a graph uses was changed in place by an operation that gave it a grad_fn, so "
    "it is no longer a leaf",
    "float_has_no_backward": "backward() was called on a Python number (from .item(), or a wrong item of a returned "
    "tuple), not on a tensor",
    "grad_is_none": "a hand-written update used p.grad while it was None (the parameter got no gradient)",
    "parameter_assignment": "a plain tensor was assigned to a module attribute that holds an nn.Parameter",
    "carried_state": "a tensor carried over from an earlier iteration (a hidden state, a running value) still links "
    "to that iteration's graph, which its backward already freed",
    "graph_built_once": "a tensor computed once with grad on, before the loop that uses it (a dataset passed through a "
    "layer, a fixed embedding), links every step's loss to its one graph, which the first backward freed",
    "unknown_error": "an error graphlens does not recognise; its message is quoted",
    "optimizer_nonleaf": "a tensor given to an optimizer is not a leaf (it was computed from one: randn(..., "
    "requires_grad=True) * 0.01, a .to(device) copy), and an optimizer updates leaves only",
    "optimizer_step_inplace": "a parameter that backward needed was changed in place by an optimizer's step() after the "
    "forward that used it (a GAN's D step between two backward passes through D)",
    "inplace_activation": "an activation with inplace=True (nn.ReLU(inplace=True), F.relu(x, inplace=True)) made the "
    "in-place change",
    "backward_hook_inplace": "an in-place operation changed an input or output of a module that has a full backward "
    "hook (register_full_backward_hook wraps them in an autograd Function)",
    "custom_fn_view_inplace": "an output of a custom autograd.Function that is a view of its input (or the input "
    "itself) was changed in place",
    "view_inplace_no_grad": "a view taken in no_grad (or inference) mode was changed in place with grad mode on",
    "inference_tensor_outside": "a tensor made in inference_mode was changed in place, or given requires_grad, "
    "outside inference_mode",
    "anomaly_nan": "anomaly mode found NaN in the gradient a backward node returned: the node, the forward line that "
    "made it, and why its derivative is undefined there",
    "hook_changed_gradient": "a gradient hook returned a value of another shape, dtype or device than the gradient it "
    "replaces (or no tensor)",
    "hook_wrong_count": "a module backward hook returned a different number of gradients than it was given",
    "custom_fn_grad_shape": "a backward node (most often a custom autograd.Function's backward) returned, for one of "
    "its inputs, a gradient whose shape does not fit that input",
    "hook_no_requires_grad": "register_hook was called on a tensor that does not require grad (made under no_grad, or "
    "from data), so no gradient ever reaches it",
    "optimizer_empty": "an optimizer was given no parameters",
    "optimizer_params_type": "an optimizer was given something other than an iterable of tensors (a tensor alone, a "
    "number)",
    "save_for_backward_nontensor": "ctx.save_for_backward was given something that is not a tensor",
    "grad_assignment_mismatch": "a tensor assigned to .grad does not match the tensor's shape, dtype or device",
    "custom_fn_legacy": "a custom autograd.Function written the old way (forward an ordinary method, the Function "
    "called as an object, Fn()(x)), which PyTorch no longer runs",
    "custom_fn_once_differentiable": "backward needed the derivative of a custom Function's backward (a gradient computed "
    "with create_graph=True, differentiated again), and that backward is marked @once_differentiable: it records no graph",
    "custom_fn_no_backward": "backward reached a custom autograd.Function that defines no backward (nor vjp) method",
    "nonleaf_grad_access": "the warning that .grad was read on a non-leaf tensor, where PyTorch keeps no gradient unless "
    "retain_grad() was called",
}

#: Every reason code graphlens can give.
REASONS: dict[str, str] = {**GRAD_REASONS, **ERROR_REASONS}


_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~>])")


def _md(text: str) -> str:
    """``text`` as literal Markdown: HTML characters escaped, Markdown punctuation backslashed."""
    return _MD_SPECIAL.sub(r"\\\1", html.escape(text, quote=False))


#: What a diagram's note says at the node where each cause happens.
_NOTE_WORDS = {
    "cut_by_integer_op": "integer result, no gradient passes: cut here",
    "cut_by_python_value": "value left the graph here: cut",
    "cut_by_detach": "detach() cut here",
    "cut_by_no_grad": "made under no_grad: cut here",
    "rebound_leaf": "the variable was rebound here: a new tensor",
    "inplace_saved": "changed in place here, after it was saved",
    "created_in_no_grad": "made under no_grad: no graph",
    "modified_through_data": "changed through .data: gradient silently wrong",
    "ctx_attribute_changed": "kept a ctx tensor that was changed in place since: gradient silently wrong",
}


class Explanation:
    """The answer of :func:`explain` / :func:`explain_error`.

    ``str()`` gives a few plain sentences; ``reasons`` the machine-readable codes (see
    :data:`REASONS`), main reason first; ``tensor_name`` the tensor the answer is about;
    ``graph`` the :class:`~graphlens.Graph` it was read from (``None`` when there was none);
    ``path`` the node ids and ``edges`` the ``(src, dst)`` pairs to highlight in a diagram.
    The facts the answer names are fields too: ``op`` (the operation at fault, by its
    forward or backward name, e.g. ``"argmax"``, ``"ReluBackward0"``), ``line`` and
    ``lineno`` (the source line of the user's program where it happens, stripped), and
    ``cause`` (the id of the graph node where it happens, for a diagram to point at).
    ``facts`` are the premises its sentences state, as ``(subject, fact, value)`` triples:
    the subject is a node id of :attr:`graph` (``"t3"``, ``"op2"``) or, for a tensor the
    graph does not hold, its name; the facts are ``"requires_grad"``, ``"is_leaf"``,
    ``"reached"`` (whether the backward graph of the roots reaches the tensor),
    ``"has_grad"``, ``"is_parameter"`` (tensors) and ``"op"`` (an op's forward or
    backward name).  ``graphlens.explain.premises.check`` holds them against the graph.
    An explanation holds no tensor.
    """

    __slots__ = (
        "reasons", "tensor_name", "graph", "path", "edges", "sentences", "fix", "tensor_id", "message",
        "op", "line", "lineno", "cause", "facts",
    )

    def __init__(
        self,
        reasons: Sequence[str],
        sentences: Sequence[str],
        *,
        fix: str | None = None,
        tensor_name: str | None = None,
        tensor_id: str | None = None,
        graph: Graph | None = None,
        path: Iterable[str] = (),
        edges: Iterable[tuple[str, str]] = (),
        message: str | None = None,
        op: str | None = None,
        line: str | None = None,
        lineno: int | None = None,
        cause: str | None = None,
        facts: Iterable[tuple[str, str, Any]] = (),
    ) -> None:
        self.reasons: tuple[str, ...] = tuple(dict.fromkeys(reasons))
        self.sentences: tuple[str, ...] = tuple(s for s in sentences if s)
        self.fix = fix
        self.tensor_name = tensor_name
        self.tensor_id = tensor_id
        self.graph = graph
        self.path: tuple[str, ...] = tuple(dict.fromkeys(path))
        self.edges: tuple[tuple[str, str], ...] = tuple(dict.fromkeys(tuple(e) for e in edges))
        self.message = message
        self.op = op
        self.line = line
        self.lineno = lineno
        self.cause = cause
        self.facts: tuple[tuple[str, str, Any], ...] = tuple(dict.fromkeys(tuple(f) for f in facts))

    # pickle (every protocol) and copy: the fields; the graph copies as a plain record (see Graph)
    def __getstate__(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for k in self.__slots__:
            setattr(self, k, state.get(k, () if k == "facts" else None))

    @property
    def reason(self) -> str:
        """The main reason code (the first of :attr:`reasons`)."""
        return self.reasons[0]

    @property
    def ok(self) -> bool:
        """Whether the gradient is (or will be) there."""
        return self.reasons[0] in ("grad_ok", "backward_not_run")

    @property
    def highlight(self) -> tuple:
        """The node ids then the edges, as the diagrams' ``highlight=`` takes them."""
        return self.path + self.edges

    def __str__(self) -> str:
        text = " ".join(self.sentences)
        return f"{text}\nFix: {self.fix}" if self.fix else text

    def __repr__(self) -> str:
        who = self.tensor_name or self.tensor_id or "?"
        return f"<Explanation {who}: {', '.join(self.reasons)}>"

    def to_markdown(self) -> str:
        """The answer as Markdown, every name and error text escaped (a notebook shows it
        as text: a name like ``<img src=x>`` or ``[a](javascript:b)`` stays text)."""
        text = _md(" ".join(self.sentences))
        return f"{text}\n\n**Fix:** {_md(self.fix)}" if self.fix else text

    def to_html(self) -> str:
        """The answer as an HTML fragment, every name and error text escaped."""
        body = f"<p>{html.escape(' '.join(self.sentences))}</p>"
        return body + (f"<p><b>Fix:</b> {html.escape(self.fix)}</p>" if self.fix else "")

    def cause_note(self) -> str:
        """A few words for the node where the cause is (what a diagram puts beside it)."""
        code = next((r for r in reversed(self.reasons) if r in _NOTE_WORDS), self.reasons[0])
        words = _NOTE_WORDS.get(code, REASONS.get(code, code))
        op = f"{self.op}: " if self.op and code not in ("rebound_leaf",) else ""
        where = f" (line {self.lineno})" if self.lineno else ""
        return f"{op}{words}{where}"

    _repr_markdown_ = to_markdown
    _repr_html_ = to_html

    def to_dot(self, **opts: Any):
        """The graph as a ``graphviz.Digraph`` with :attr:`path` and :attr:`edges`
        highlighted; ``opts`` go to the renderer (``view=``, ...)."""
        if self.graph is None:
            raise ValueError(
                "this explanation has no graph to draw: pass the root or a trace, e.g. explain(w, loss) or explain_error(exc, tr)"
            )
        extra = tuple(opts.pop("highlight", None) or ())
        highlight = self.highlight + extra
        if "notes" not in opts and self.cause is not None and self.cause in self.graph:
            opts["notes"] = {self.cause: self.cause_note()}
        method = getattr(self.graph, "to_dot", None)
        if method is not None:
            return method(highlight=highlight, **opts)
        from ..render import to_dot  # the renderer, when Graph has no to_dot of its own yet

        return to_dot(self.graph, highlight=highlight, **opts)


