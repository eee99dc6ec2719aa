"""Diagnostics: why a tensor's ``.grad`` is (or will be) None, and what a classic autograd error means."""

from __future__ import annotations

import linecache
import re
import weakref
from collections import deque
from types import FrameType, TracebackType
from typing import Any, Iterable, Mapping, Sequence

import torch

from . import names as _names
from ._facts import dtype_name, summarize
from .graph import Graph, OpNode, TensorNode
from .names import frame_candidates, user_frame
from .snapshot import snapshot
from .trace import Trace

__all__ = ["explain", "explain_error", "Explanation", "GRAD_REASONS", "ERROR_REASONS", "REASONS"]

# Snapshots taken on the user's behalf name tensors after the *user's* variables.

#: Reason codes of :func:`explain` for a tensor, with what each one means.  The first code of
#: ``Explanation.reasons`` is the main reason; later codes add detail.
GRAD_REASONS: dict[str, str] = {
    "grad_ok": "the tensor has (or will get) a gradient; the path from the root says where it comes from",
    "will_accumulate": "it already holds a gradient from an earlier backward, and the next backward adds to it",
    "backward_not_run": "the tensor will get a gradient, but backward has not run through the root yet",
    "zero_grad_set_none": "backward ran, yet .grad is None: it was reset afterwards (zero_grad() sets None by default)",
    "retain_grad_too_late": "a non-leaf retains grad but has none although backward ran (retain_grad() came after it)",
    "nonleaf_not_retained": "a non-leaf tensor: its gradient flows through and is discarded unless retain_grad() was called",
    "is_a_copy": "a non-leaf standing in for a leaf, e.g. randn(..., requires_grad=True) * 2 or .to()/.double(): "
    "the gradient lands on an unnamed leaf",
    "requires_grad_false": "the tensor does not require grad, so no gradient is computed for it",
    "created_in_no_grad": "the tensor was made inside torch.no_grad() (or inference_mode)",
    "made_by_detach": "the tensor came from detach() (or .data): a new leaf that does not require grad",
    "integer_dtype": "the tensor has an integer or bool dtype, which can never require grad",
    "not_reachable": "the root's backward graph never reaches the tensor",
    "cut_by_detach": "a detach() between the tensor and the root cuts the gradient path",
    "cut_by_no_grad": "an operation run inside torch.no_grad() between the tensor and the root cuts the path",
    "feeds_other_root": "the tensor only feeds another output (another loss or branch), not this root",
    "not_in_optimizer": "the given optimizer does not hold the tensor, so its step() never updates it",
    "no_root": "no root was given or found, so reachability could not be checked",
}

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
    "unknown_error": "an error graphlens does not recognise; its message is quoted",
}

#: Every reason code graphlens can give.
REASONS: dict[str, str] = {**GRAD_REASONS, **ERROR_REASONS}

_INTEGER_DTYPES = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


class Explanation:
    """The answer of :func:`explain` / :func:`explain_error`.

    ``str()`` gives a few plain sentences; ``reasons`` the machine-readable codes (see
    :data:`REASONS`), main reason first; ``tensor_name`` the tensor the answer is about;
    ``graph`` the :class:`~graphlens.Graph` it was read from (``None`` when there was none);
    ``path`` the node ids and ``edges`` the ``(src, dst)`` pairs to highlight in a diagram.
    An explanation holds no tensor.
    """

    __slots__ = ("reasons", "tensor_name", "graph", "path", "edges", "sentences", "fix", "tensor_id", "message")

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

    def _repr_markdown_(self) -> str:
        return str(self).replace("\n", "\n\n")

    def to_dot(self, **opts: Any):
        """The graph as a ``graphviz.Digraph`` with :attr:`path` and :attr:`edges`
        highlighted; ``opts`` go to the renderer (``view=``, ...)."""
        if self.graph is None:
            raise ValueError(
                "this explanation has no graph to draw: pass the root or a trace, e.g. explain(w, loss) or explain_error(exc, tr)"
            )
        extra = tuple(opts.pop("highlight", None) or ())
        highlight = self.highlight + extra
        method = getattr(self.graph, "to_dot", None)
        if method is not None:
            return method(highlight=highlight, **opts)
        from .render import to_dot  # the renderer, when Graph has no to_dot of its own yet

        return to_dot(self.graph, highlight=highlight, **opts)


# ---------------------------------------------------------------------------------------
# Reading a Graph: reachability and paths
# ---------------------------------------------------------------------------------------


class _View:
    """Indexes of one graph used by the analysis (built once per explanation)."""

    def __init__(self, g: Graph) -> None:
        self.g = g
        self.next: dict[str, list[str]] = {}
        self.inputs: dict[str, list[str]] = {}  # op -> its input tensors
        self.consumers: dict[str, list[str]] = {}  # tensor -> ops it is input to
        self.detached: dict[str, list[str]] = {}  # tensor -> tensors detached from it
        self.outputs: dict[str, list[str]] = {}  # op -> tensors it produced
        self.acc: dict[str, str] = {}  # leaf tensor -> its AccumulateGrad op
        self.pairs: set[tuple[str, str]] = set()
        for e in g.edges:
            self.pairs.add((e.src, e.dst))
            if e.kind == "next":
                self.next.setdefault(e.src, []).append(e.dst)
            elif e.kind == "input":
                self.inputs.setdefault(e.dst, []).append(e.src)
                self.consumers.setdefault(e.src, []).append(e.dst)
            elif e.kind == "output":
                self.outputs.setdefault(e.src, []).append(e.dst)
            elif e.kind == "detach":
                self.detached.setdefault(e.src, []).append(e.dst)
        for o in g.ops:
            if o.is_accumulate_grad and o.variable is not None:
                self.acc.setdefault(o.variable, o.id)

    def t(self, id: str) -> TensorNode:
        return self.g.node(id)  # type: ignore[return-value]

    def o(self, id: str) -> OpNode:
        return self.g.node(id)  # type: ignore[return-value]

    def backward_children(self, node: str) -> list[str]:
        """Where a gradient goes next from ``node`` (a tensor or an op), backward."""
        if node.startswith("t"):
            t = self.t(node)
            if t.op is not None and t.op in self.g and self.o(t.op).name is not None:
                return [t.op]
            return []
        op = self.o(node)
        if op.is_accumulate_grad:
            return [op.variable] if op.variable else []
        out = [i for i in self.inputs.get(node, ()) if self.t(i).requires_grad]
        out.extend(self.next.get(node, ()))
        return out

    def bfs(self, starts: Iterable[str], goal: str | None = None) -> tuple[dict[str, str | None], list[str]]:
        """Backward breadth-first walk from ``starts``: (parents, path to ``goal`` or [])."""
        parents: dict[str, str | None] = {}
        queue = deque()
        for s in starts:
            if s not in parents:
                parents[s] = None
                queue.append(s)
        while queue:
            node = queue.popleft()
            if node == goal:
                break
            for child in self.backward_children(node):
                if child not in parents:
                    parents[child] = node
                    queue.append(child)
        path: list[str] = []
        if goal is not None and goal in parents:
            node: str | None = goal
            while node is not None:
                path.append(node)
                node = parents[node]
            path.reverse()
        return parents, path

    def forward_bfs(self, start: str, goals: set[str]) -> list[str]:
        """A forward path (input, output and detach edges) from ``start`` to one of ``goals``."""
        parents: dict[str, str | None] = {start: None}
        queue = deque([start])
        hit = None
        while queue:
            node = queue.popleft()
            if node in goals and node != start:
                hit = node
                break
            nxt = self.consumers.get(node, []) + self.detached.get(node, []) if node.startswith("t") else self.outputs.get(node, [])
            for child in nxt:
                if child not in parents:
                    parents[child] = node
                    queue.append(child)
        if hit is None:
            return []
        path = []
        node: str | None = hit
        while node is not None:
            path.append(node)
            node = parents[node]
        return path[::-1]

    def forward_sinks(self, start: str) -> list[str]:
        """The tensors reachable forward from ``start`` that nothing consumes."""
        seen = {start}
        queue = deque([start])
        sinks = []
        while queue:
            node = queue.popleft()
            nxt = self.consumers.get(node, []) + self.detached.get(node, []) if node.startswith("t") else self.outputs.get(node, [])
            if node.startswith("t") and not nxt and node != start:
                sinks.append(node)
            for child in nxt:
                if child not in seen:
                    seen.add(child)
                    queue.append(child)
        return sinks

    def highlight_edges(self, path: Sequence[str]) -> list[tuple[str, str]]:
        """The graph's edges along a path (either direction), plus ``next`` edges between
        consecutive ops of the path, so both diagram views light up."""
        out = []
        for a, b in zip(path, path[1:]):
            if (a, b) in self.pairs:
                out.append((a, b))
            if (b, a) in self.pairs:
                out.append((b, a))
        ops = [p for p in path if p.startswith("op")]
        for a, b in zip(ops, ops[1:]):
            if (a, b) in self.pairs:
                out.append((a, b))
            if (b, a) in self.pairs:
                out.append((b, a))
        return out

    def label(self, id: str) -> str:
        node = self.g.node(id)
        if isinstance(node, TensorNode):
            return node.name or f"an unnamed tensor ({id})"
        return node.label

    def chain(self, path: Sequence[str]) -> str:
        """The backward node names along a path: ``SumBackward0 -> MulBackward0``."""
        names = [self.o(p).label for p in path if p.startswith("op")]
        return " -> ".join(names)


def _grad_summary_is_value(text: str | None) -> bool:
    return text is not None and text not in ("-", "None")


# ---------------------------------------------------------------------------------------
# explain(tensor, root)
# ---------------------------------------------------------------------------------------


def explain(
    tensor: Any,
    root: Any = None,
    *,
    names: Mapping[str, Any] | None = None,
    optimizer: torch.optim.Optimizer | None = None,
) -> Explanation:
    """Why ``tensor.grad`` is (or will be) None after ``root.backward()``, or where it comes from.

    ``tensor`` is a tensor, or its name (looked up in ``root`` when that is a graph or a
    trace, else among the caller's variables).  ``root`` is the loss (a tensor or a tuple of
    them), a :class:`~graphlens.Graph`, or a :func:`graphlens.trace` (richer: it knows about
    detach() and no_grad regions).  Without a root, the caller's 0-d outputs are tried.
    ``optimizer=`` also checks that the tensor is one of its parameters.  An exception as
    ``tensor`` is handed to :func:`explain_error`.  Nothing is changed: grads, flags,
    versions and hooks stay as they were.

    >>> import torch
    >>> from graphlens.explain import explain
    >>> w = torch.tensor([1.0, 2.0], requires_grad=True)
    >>> h = w * 3
    >>> loss = h.sum()
    >>> loss.backward()
    >>> explain(h, loss).reasons
    ('nonleaf_not_retained',)
    >>> explain(w, loss).reasons
    ('grad_ok',)
    """
    if isinstance(tensor, BaseException):
        return explain_error(tensor, root)
    if names is not None and not isinstance(names, Mapping):
        raise TypeError(f"names must be a dict from name to tensor, e.g. names={{'w': w}}, not {type(names).__name__}")
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer (the one that updates the tensor), not {type(optimizer).__name__}")
    frame = user_frame(1)
    try:
        if isinstance(root, (Trace, Graph)):
            return _explain_recorded(tensor, root, names=names, optimizer=optimizer)
        return _explain_live(tensor, root, names=names, optimizer=optimizer, frame=frame)
    finally:
        del frame


def _explain_recorded(tensor: Any, root: Trace | Graph, *, names, optimizer) -> Explanation:
    trace = root if isinstance(root, Trace) else None
    g = root.graph() if trace is not None else root
    view = _View(g)
    live = None
    if isinstance(tensor, str):
        try:
            node = g.find(tensor)
        except KeyError as exc:
            raise KeyError(f"tensor {tensor!r} is not in this graph: {exc.args[0]}") from None
        if not isinstance(node, TensorNode):
            raise TypeError(f"tensor {tensor!r} names an operation ({node.label}), not a tensor: name a tensor of the graph")
        tid = node.id
        live = g.tensor(tid)
    elif isinstance(tensor, torch.Tensor):
        live = tensor
        tid = _find_live(g, tensor)
        if tid is None:
            # Not in the recorded graph (a snapshot only sees what the roots reach): re-read
            # the live roots when they still exist, else answer from the tensor alone.
            roots_live = [g.tensor(r.id) for r in g.roots]
            roots_live = [r for r in roots_live if r is not None]
            if roots_live:
                return _explain_live(tensor, tuple(roots_live), names=names, optimizer=optimizer, frame=None)
            return _explain_live(tensor, None, names=names, optimizer=optimizer, frame=None, no_frame_roots=True)
    else:
        raise TypeError(f"tensor must be a torch.Tensor or a tensor's name in the graph, not {type(tensor).__name__}")
    roots = [r.id for r in g.roots]
    ran = _backward_ran_recorded(g, view, roots, trace)
    return _analyse(view, tid, roots, live=live, ran=ran, optimizer=optimizer, hints={})


def _find_live(g: Graph, t: torch.Tensor) -> str | None:
    found = None
    for node in g.tensors:
        if g.tensor(node.id) is t:
            found = node.id  # the latest record of the tensor wins
    return found


def _backward_ran_recorded(g: Graph, view: _View, roots: list[str], trace: Trace | None) -> bool | None:
    """True when backward evidently ran through the roots, False when evidently not, None when unknown."""
    if any(_grad_summary_is_value(f) for r in roots for f in view.t(r).flowed):
        return True
    if trace is not None and trace.backward_passes:
        return True
    reach, _ = view.bfs(roots)
    saved = [v for o in reach if o.startswith("op") for _, v in view.o(o).saved]
    if any(v == "freed" for v in saved):
        return True
    if saved and g.source == "snapshot":
        return False
    if g.source == "trace":
        return False
    return None


def _tensors_of(obj: Any) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in _tensors_of(o)]
    if isinstance(obj, dict):
        return [t for o in obj.values() for t in _tensors_of(o)]
    return []


def _reaches(starts: list, target: torch.Tensor, *, limit: int = 500_000) -> bool:
    """Whether the live backward graph below ``starts`` reaches ``target``."""
    goal = target.grad_fn
    seen = set()
    stack = [fn for fn in starts if fn is not None]
    while stack and len(seen) < limit:
        fn = stack.pop()
        if fn in seen:
            continue
        seen.add(fn)
        if goal is not None and fn is goal:
            return True
        if goal is None and type(fn).__name__ == "AccumulateGrad" and fn.variable is target:
            return True
        for child, _ in fn.next_functions:
            if child is not None and child not in seen:
                stack.append(child)
    return False


def _shares_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    try:
        pa, pb = a.untyped_storage().data_ptr(), b.untyped_storage().data_ptr()
    except Exception:  # noqa: BLE001 - odd tensors (meta, sparse) share nothing we can see
        return False
    return pa != 0 and pa == pb


def _explain_live(tensor, root, *, names, optimizer, frame: FrameType | None, no_frame_roots: bool = False) -> Explanation:
    candidates = frame_candidates(frame) if frame is not None else []
    try:
        if isinstance(tensor, str):
            by_name = dict(reversed(candidates))
            by_name.update((k, v) for k, v in (names or {}).items() if isinstance(v, torch.Tensor))
            if tensor not in by_name:
                raise KeyError(
                    f"no tensor named {tensor!r} among your variables: pass the tensor itself, "
                    f"or a graph or trace as root (explain({tensor!r}, tr))"
                )
            tensor = by_name[tensor]
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"tensor must be a torch.Tensor (or an exception to explain), not {type(tensor).__name__}")
        roots = _tensors_of(root)
        if root is not None and not roots:
            raise TypeError(
                f"root must be the output tensor (e.g. the loss), a tuple of them, a Graph or a trace, not {type(root).__name__}"
            )
        guessed = False
        if not roots:
            held = _grad_already_there(tensor, candidates, names)
            if held is not None:
                return held
        if not roots and not no_frame_roots:
            outs = [t for _, t in candidates if t.grad_fn is not None and t.dim() == 0 and t is not tensor]
            outs = list({id(t): t for t in outs}.values())
            reaching = [t for t in outs if _reaches([t.grad_fn], tensor)]
            # A root that reaches the tensor; else the only scalar output there is.
            roots = reaching[:1] or (outs if len(outs) == 1 else [])
            guessed = bool(roots)
        hints: dict[str, Any] = {"guessed_root": guessed}
        extra: list[torch.Tensor] = []
        reach = bool(roots) and _reaches([r.grad_fn for r in roots], tensor)
        if roots and not reach and tensor.requires_grad:
            # What cut it?  Other outputs that use the tensor, and detached copies of it
            # or of anything computed from it, among the caller's variables.
            users = [
                (n, t) for n, t in candidates
                if t.grad_fn is not None and t is not tensor and all(t is not r for r in roots)
                and _reaches([t.grad_fn], tensor)
            ]
            family = [tensor] + [t for _, t in users]
            detached = [
                (n, t) for n, t in candidates
                if not t.requires_grad and t is not tensor and any(_shares_memory(t, f) for f in family)
            ]
            users_named = {id(t): n for n, t in users}
            sinks = [
                (n, t) for n, t in users
                if not any(u is not t and _reaches([u.grad_fn], t) for _, u in users)
            ]
            hints["detached"] = [(n, next((users_named.get(id(f)) or "it") for f in family if _shares_memory(t, f))) for n, t in detached]
            hints["sinks"] = [n for n, _ in sinks]
            extra = [t for _, t in sinks]
        target_grad = tensor.grad if (tensor.is_leaf or tensor.retains_grad) else None
        g = _snapshot_for(roots, tensor, extra, names=names)
        view = _View(g)
        root_ids = [r.id for r in g.roots]
        tid = _find_live(g, tensor)
        ran = _backward_ran_recorded(g, view, root_ids, None) if roots else None
        hints["grad"] = target_grad is not None
        del target_grad
        return _analyse(view, tid, root_ids, live=tensor, ran=ran, optimizer=optimizer, hints=hints)
    finally:
        candidates.clear()


def _grad_already_there(tensor: torch.Tensor, candidates: list, names) -> Explanation | None:
    """With no root given, a tensor that holds a ``.grad`` right now is answered as such:
    its value, and that it is the sum of every backward pass since it was last cleared."""
    try:
        keeps = tensor.is_leaf or tensor.retains_grad
    except RuntimeError:
        return None
    grad = tensor.grad if keeps else None
    if grad is None:
        return None
    name = next((n for n, t in candidates if t is tensor), None)
    if names:
        name = next((str(n) for n, t in names.items() if t is tensor), name)
    who = name or "the tensor"
    value = summarize(grad)
    del grad
    g = snapshot(tensor, names={who: tensor})
    tid = g.roots[0].id
    sentences = [
        f"{who}.grad is set: {value}.",
        f"It holds the sum of the gradients of every backward pass that reached {who} since its "
        "gradient was last cleared: PyTorch adds each new gradient to .grad, it does not replace it.",
    ]
    fix = (
        f"If {who}.grad is larger than you expect (doubled, say), an earlier backward added to it: call "
        f"optimizer.zero_grad() (or set {who}.grad = None) before each backward. Pass the loss as root, "
        f"explain({who}, loss), to see the path the gradient takes."
    )
    return Explanation(("grad_ok",), sentences, fix=fix, tensor_name=name, tensor_id=tid, graph=g, path=(tid,))


def _snapshot_for(roots: list[torch.Tensor], tensor: torch.Tensor, extra: list[torch.Tensor], *, names) -> Graph:
    """A snapshot of the roots, the tensor and ``extra`` tensors, whose roots are ``roots`` only."""
    all_roots = list(roots) + [tensor] + list(extra)
    g = snapshot(*all_roots, names=names)
    n_roots = len({id(r) for r in roots})
    root_ids = [r.id for r in g.roots][:n_roots]
    refs = {}
    for node in g.tensors:
        t = g.tensor(node.id)
        if t is not None:
            refs[node.id] = weakref.ref(t)
    return Graph(g.tensors, g.ops, g.edges, root_ids, source=g.source, refs=refs)


def _analyse(view: _View, tid: str | None, roots: list[str], *, live, ran, optimizer, hints) -> Explanation:
    g = view.g
    node = view.t(tid) if tid is not None else None
    name = (node.name if node is not None else None) or "the tensor"
    who = name if node is None or node.name else f"the tensor {tid}"
    if live is not None:
        is_leaf, requires_grad, retains = live.is_leaf, live.requires_grad, bool(live.retains_grad)
        has_grad = hints.get("grad") if "grad" in hints else (live.grad is not None if (is_leaf or retains) else False)
        dtype = live.dtype
        is_param = isinstance(live, torch.nn.Parameter)
    else:
        assert node is not None
        is_leaf, requires_grad, retains, has_grad = node.is_leaf, node.requires_grad, node.retains_grad, node.has_grad
        dtype = getattr(torch, node.dtype, None)
        is_param = node.is_parameter
    root_name = " and ".join(view.label(r) for r in roots) if roots else None
    backward = f"{root_name}.backward()" if root_name else "backward"
    will = "is None" if ran else ("will be None after " + backward if ran is False else "is or will be None")
    reasons: list[str] = []
    sentences: list[str] = []
    fix = None
    path: list[str] = []
    edges: list[tuple[str, str]] = []
    if hints.get("guessed_root") and root_name:
        sentences.append(f"(No root was given; graphlens used {root_name}, found among your variables.)")

    # Which part of the root's graph reaches the tensor?
    reach_parents, reach_path = view.bfs(roots, tid) if roots and tid is not None else ({}, [])
    reachable = bool(reach_path)
    if node is not None and is_leaf and not reachable and tid in view.acc and view.acc[tid] in reach_parents:
        reachable = True
        _, reach_path = view.bfs(roots, view.acc[tid])
        reach_path = reach_path + [tid]
    reach_path = _with_acc(view, reach_path)

    if not requires_grad:
        reasons.append("requires_grad_false")
        sentences.append(f"{who}.grad {will} because {who} does not require grad, so no gradient is computed for it.")
        if dtype in _INTEGER_DTYPES:
            reasons.append("integer_dtype")
            sentences.append(f"It has dtype {dtype_name(dtype)}, and only floating point or complex tensors can require grad.")
            fix = f"Make it a float tensor first, e.g. {name} = {name}.float().requires_grad_()."
        elif node is not None and node.detached_from is not None:
            src = node.detached_from
            reasons.append("made_by_detach")
            sentences.append(
                f"It was made by {view.label(src)}.detach() (or .data): a new leaf that shares the memory "
                f"of {view.label(src)} but is cut from its graph."
            )
            path = [src, tid]
            edges = view.highlight_edges(path)
            fix = f"Use {view.label(src)} itself where you need the gradient, and detach only what must stay constant."
        elif node is not None and node.region is not None:
            reasons.append("created_in_no_grad")
            op = node.op
            ins = [i for i in view.inputs.get(op, ())] if op else []
            grad_ins = [i for i in ins if view.t(i).requires_grad]
            region = node.region.split("#")[0]
            made = f" by {view.o(op).label}" if op else ""
            sentences.append(f"It was made{made} inside torch.{region}(), where PyTorch records no graph.")
            if grad_ins:
                sentences.append(
                    "Its input " + ", ".join(view.label(i) for i in grad_ins)
                    + f" requires grad, but no graph links {who} back to it."
                )
            path = grad_ins + ([op] if op else []) + [tid]
            edges = view.highlight_edges(path)
            fix = f"Compute {name} outside the torch.{region}() block if a gradient must flow through it."
        elif is_param:
            sentences.append("It is a parameter whose requires_grad was set to False (frozen).")
            fix = f"Call {name}.requires_grad_(True) before the forward pass if it should learn."
        else:
            sentences.append(
                "A tensor made directly starts with requires_grad=False; so does one made by detach(), inside "
                "torch.no_grad(), or only from tensors that do not require grad."
            )
            fix = (
                f"Create it with requires_grad=True (or call {name}.requires_grad_() on the leaf) before computing "
                f"the loss; run the code under graphlens.trace() to see where a detach() or no_grad cut it."
            )
            path = [tid] if tid else []
    elif not roots:
        reasons.append("no_root")
        sentences.append(
            f"graphlens cannot tell whether {who} will get a gradient: no root was given and none was found among your variables."
        )
        if not is_leaf and not retains:
            reasons.append("nonleaf_not_retained")
            sentences.append(f"In any case {who} is not a leaf, so PyTorch will not keep its .grad.")
        fix = f"Pass the loss: graphlens.explain({name}, loss)."
        path = [tid] if tid else []
    elif not reachable:
        reasons.append("not_reachable")
        sentences.append(f"{who}.grad {will} because {root_name} does not depend on {who} through any gradient-carrying path.")
        cut = _find_cut(view, tid, roots) if tid is not None else None
        if cut is not None:
            code, text, cpath = cut
            reasons.append(code)
            sentences.append(text)
            path, edges = cpath, view.highlight_edges(cpath)
        elif hints.get("detached"):
            reasons.append("cut_by_detach")
            d, src = hints["detached"][0]
            sentences.append(
                f"{d} shares memory with {src} but does not require grad: it most likely came from {src}.detach() "
                f"(or .data), which cuts the gradient path."
            )
            path = [tid] if tid else []
        elif node is not None and view.forward_sinks(tid):
            others = [s for s in view.forward_sinks(tid) if s not in roots and view.t(s).requires_grad]
            if others:
                reasons.append("feeds_other_root")
                sentences.append(f"{who} is used only by {', '.join(view.label(s) for s in others)}, not by {root_name}.")
                fpath = view.forward_bfs(tid, set(others))
                path, edges = fpath, view.highlight_edges(fpath)
        if len(reasons) == 1 and hints.get("sinks"):
            reasons.append("feeds_other_root")
            sentences.append(f"{who} feeds {', '.join(hints['sinks'])}, not {root_name}.")
            sinks = [n.id for n in g.tensors if n.name in hints["sinks"]]
            _, spath = view.bfs(sinks[:1], tid) if sinks and tid else ({}, [])
            path, edges = spath[::-1], view.highlight_edges(spath)
        if len(reasons) == 1:
            sentences.append("No path in the recorded graph connects them; graphlens.trace() would show a detach() or no_grad cut.")
        if not is_leaf and not retains:
            reasons.append("nonleaf_not_retained")
            sentences.append(f"Even when reached, {who} is not a leaf, so PyTorch would not keep its .grad without retain_grad().")
        if "feeds_other_root" in reasons:
            fix = f"Backpropagate the output that uses {name} too (e.g. (loss1 + loss2).backward()), or compute {root_name} from {name}."
        elif "cut_by_detach" in reasons:
            fix = f"Remove the detach() (or .data) between {name} and {root_name} if the gradient should reach {name}."
        elif "cut_by_no_grad" in reasons:
            fix = f"Move the computation that links {name} to {root_name} out of the torch.no_grad() block."
        else:
            fix = f"Compute {root_name} from {name} without detach() or torch.no_grad() in between."
        if not path and tid:
            path = [tid]
    elif not is_leaf and not retains:
        leaves = _leaves_below(view, tid)
        copy_leaf = leaves[0] if len(leaves) == 1 and view.t(leaves[0]).name is None and view.t(leaves[0]).requires_grad else None
        if copy_leaf is not None:
            reasons += ["is_a_copy", "nonleaf_not_retained"]
            _, cpath = view.bfs([tid], copy_leaf)
            cpath = _with_acc(view, cpath)
            kind = " -> ".join(view.o(p).label for p in cpath if p.startswith("op") and not view.o(p).is_accumulate_grad)
            is_to = any(p.startswith("op") and (view.o(p).name or "").startswith("ToCopyBackward") for p in cpath)
            how = "a copy made by .to(), .double(), .float() or .cuda()" if is_to else f"the output of {kind or 'an operation'}"
            sentences.append(
                f"{who}.grad {will} because {who} is not a leaf: it is {how}, computed from a leaf tensor that "
                f"you have no variable for (the leaf made by requires_grad=True was never stored)."
            )
            sentences.append(
                f"PyTorch puts the gradient on that unnamed leaf ({copy_leaf}) and discards the one passing through {who}."
            )
            path, edges = cpath, view.highlight_edges(cpath)
            example = (
                f"{name} = torch.randn(3, dtype=torch.float64, requires_grad=True), or {name} = x.to(device).requires_grad_()"
                if is_to else f"{name} = (torch.randn(3) * 2).requires_grad_()"
            )
            fix = (
                f"Make {name} itself the leaf: do the arithmetic or conversion first and ask for the gradient last, "
                f"e.g. {example}; or call {name}.retain_grad() before backward."
            )
        else:
            reasons.append("nonleaf_not_retained")
            op = view.o(node.op).label if node is not None and node.op else "an operation"
            sentences.append(
                f"{who}.grad {will} because {who} is not a leaf (it was computed by {op}) and did not call retain_grad()."
            )
            sentences.append(
                f"The gradient does flow through {who} on its way to the leaves, but PyTorch keeps .grad only on leaves."
            )
            path, edges = reach_path, view.highlight_edges(reach_path)
            fix = f"Call {name}.retain_grad() before {backward}, or read the gradient with a hook or torch.autograd.grad."
    else:
        chain = view.chain(reach_path)
        path, edges = reach_path, view.highlight_edges(reach_path)
        what = "a leaf that requires grad" if is_leaf else "a non-leaf that retains its grad"
        grad_text = node.grad if node is not None and node.grad else None
        if has_grad:
            reasons.append("grad_ok")
            value = f" ({grad_text})" if grad_text else ""
            sentences.append(
                f"{who}.grad is set{value}: {who} is {what}, and {root_name} reaches it through {chain}."
            )
            if ran is False:
                reasons.append("will_accumulate")
                sentences.append(
                    f"Backward has not run through {root_name} yet, so that gradient comes from an earlier backward; "
                    f"{backward} will add to it."
                )
                fix = "Call optimizer.zero_grad() (or set .grad = None) before the backward if you do not want to accumulate."
        elif ran:
            node_flowed = node is not None and any(_grad_summary_is_value(f) for f in node.flowed)
            if is_leaf:
                reasons.append("zero_grad_set_none")
                sentences.append(
                    f"{who}.grad is None although {who} is {what}, {root_name} reaches it through {chain}, "
                    f"and backward already ran ("
                    + ("a gradient flowed into it" if node_flowed else "its graph's saved tensors are freed")
                    + ")."
                )
                in_opt = optimizer is not None and _in_optimizer(optimizer, live, node)
                if in_opt:
                    sentences.append(
                        f"{who} is a parameter of the optimizer, whose zero_grad() sets .grad to None by default (set_to_none=True)."
                    )
                else:
                    sentences.append(
                        "Something reset it afterwards: most often optimizer.zero_grad() or model.zero_grad(), which set "
                        ".grad to None by default, or an explicit .grad = None."
                    )
                    if not node_flowed:
                        sentences.append(
                            "(torch.autograd.grad() and backward(inputs=...) also leave .grad untouched.)"
                        )
                fix = f"Read {name}.grad after backward and before zero_grad(); use zero_grad(set_to_none=False) to keep zeros instead."
            else:
                reasons.append("retain_grad_too_late")
                sentences.append(
                    f"{who} retains its grad but has none although backward already ran: retain_grad() was called "
                    f"after the backward, or its .grad was set to None."
                )
                fix = f"Call {name}.retain_grad() before {backward}."
        else:
            reasons.append("backward_not_run")
            if ran is False:
                sentences.append(
                    f"{who}.grad is None for now because {backward} has not run yet; {who} is {what} and will get "
                    f"its gradient through {chain}."
                )
            else:
                sentences.append(
                    f"{who} is {what} and {root_name} reaches it through {chain}, so {backward} gives it a gradient. "
                    f"Its .grad is None now: either backward has not run yet, or (graphlens cannot tell, the graph "
                    f"saved no tensors) a zero_grad() set it to None afterwards."
                )
            fix = f"Call {backward}, then read {name}.grad."
    if optimizer is not None and requires_grad and is_leaf and not _in_optimizer(optimizer, live, node):
        reasons.append("not_in_optimizer")
        sentences.append(f"Note: {who} is not among the optimizer's parameters, so optimizer.step() never updates it.")
    if not reasons:  # pragma: no cover - every branch above adds one
        reasons.append("grad_ok")
    return Explanation(
        reasons,
        sentences,
        fix=fix,
        tensor_name=node.name if node is not None else None,
        tensor_id=tid,
        graph=g,
        path=[p for p in path if p in g],
        edges=edges,
    )


def _with_acc(view: _View, path: list[str]) -> list[str]:
    """Fill a backward path in for both diagram views: the tensor between two ops joined by
    a ``next`` edge (when the graph knows it), and the leaf's AccumulateGrad node before the
    leaf at the end."""
    out: list[str] = []
    for i, node in enumerate(path):
        if out and node.startswith("op") and out[-1].startswith("op"):
            a = out[-1]
            between = [t for t in view.inputs.get(a, ()) if view.t(t).op == node]
            if between:
                out.append(between[0])
        out.append(node)
    path = out
    if len(path) >= 2 and path[-1].startswith("t") and path[-2].startswith("op"):
        acc = view.acc.get(path[-1])
        if acc is not None and acc != path[-2] and (path[-2], acc) in view.pairs:
            return path[:-1] + [acc, path[-1]]
    return path


def _in_optimizer(optimizer, live, node) -> bool:
    if live is None:
        return False
    return any(p is live for group in optimizer.param_groups for p in group["params"])


def _leaves_below(view: _View, tid: str) -> list[str]:
    """The leaf tensors requiring grad that a gradient through ``tid`` reaches."""
    parents, _ = view.bfs([tid])
    return [n for n in parents if n.startswith("t") and n != tid and view.t(n).is_leaf and view.t(n).requires_grad]


def _find_cut(view: _View, tid: str, roots: list[str]):
    """In a traced graph: the detach() or no_grad op on a forward path from ``tid`` to a root."""
    fpath = view.forward_bfs(tid, set(roots))
    if not fpath:
        return None
    for a, b in zip(fpath, fpath[1:]):
        if a.startswith("t") and b.startswith("t"):  # a detach edge
            text = (
                f"On the way, {view.label(b)} = {view.label(a)}.detach() cuts the gradient path: "
                f"{view.label(b)} is a new leaf that does not require grad."
            )
            return "cut_by_detach", text, fpath
        if b.startswith("op") and view.o(b).name is None and view.o(b).region is not None:
            op = view.o(b)
            region = op.region.split("#")[0]
            outs = [o for o in view.outputs.get(b, ()) if o in fpath]
            made = f" made {view.label(outs[0])}" if outs else ""
            text = (
                f"On the way, {op.forward or 'an operation'}{made} inside torch.{region}(), which records "
                f"no graph, so the gradient path stops there."
            )
            return "cut_by_no_grad", text, fpath
    return None


# ---------------------------------------------------------------------------------------
# explain_error(exc, graph_or_trace)
# ---------------------------------------------------------------------------------------

_PATTERNS: list[tuple[str, re.Pattern]] = [
    ("graph_freed", re.compile(r"Trying to backward through the graph a second time")),
    (
        "inplace_saved",
        re.compile(
            r"modified by an inplace operation: \[(?P<type>[\w.]+) \[(?P<shape>[^\]]*)\]\]"
            r"(?:, which is output (?P<nr>\d+) of (?P<op>\w+),)? is at version (?P<ver>\d+); "
            r"expected version (?P<exp>\d+)"
        ),
    ),
    ("inplace_leaf", re.compile(r"a (?P<view>view of a )?leaf Variable that requires grad is being used in an in-place operation")),
    ("requires_grad_nonleaf", re.compile(r"you can only change requires_grad flags of leaf variables")),
    ("requires_grad_dtype", re.compile(r"only Tensors of floating point (?:and complex )?dtype can require gradients")),
    ("retain_grad_no_requires_grad", re.compile(r"can't retain_grad on Tensor that has requires_grad=False")),
    ("nonscalar_backward", re.compile(r"grad can be implicitly created only for scalar outputs")),
    ("no_grad_fn", re.compile(r"element (?P<index>\d+) of tensors does not require grad and does not have a grad_fn")),
    (
        "view_inplace_multi_output",
        re.compile(r"Output (?P<nr>\d+) of (?P<op>\w+) is a view and is being modified inplace\. This view is the output of a function that returns multiple views"),
    ),
    ("inference_tensor_saved", re.compile(r"Inference tensors cannot be saved for backward")),
    ("unused_input", re.compile(r"The differentiated Tensor at index (?P<index>\d+) appears to not have been used in the graph")),
    ("input_not_requiring_grad", re.compile(r"One of the differentiated Tensors does not require grad")),
    (
        "grad_shape_mismatch",
        re.compile(r"Mismatch in shape: grad_output\[(?P<index>\d+)\] has a shape of (?P<given>.*?) and output\[\d+\] has a shape of (?P<want>.*?)\.$", re.M),
    ),
]

_TENSOR_SUMMARY = re.compile(r"^\w+\[[\d, ]*\]$")  # how _facts summarises a saved tensor: float32[3]

_TENSOR_TYPES = {
    "FloatTensor": "float32", "DoubleTensor": "float64", "HalfTensor": "float16", "BFloat16Tensor": "bfloat16",
    "LongTensor": "int64", "IntTensor": "int32", "ShortTensor": "int16", "CharTensor": "int8",
    "ByteTensor": "uint8", "BoolTensor": "bool", "ComplexFloatTensor": "complex64", "ComplexDoubleTensor": "complex128",
}


class _Context:
    """What the exception's traceback tells: the user's frame and line, and the root of a failed backward."""

    def __init__(self, exc: BaseException | None, caller: FrameType | None = None) -> None:
        self.line = ""
        self.candidates: list[tuple[str, torch.Tensor]] = []
        self.root: list[torch.Tensor] = []
        tb: TracebackType | None = getattr(exc, "__traceback__", None)
        user = None
        while tb is not None:
            frame = tb.tb_frame
            module = frame.f_globals.get("__name__", "") or ""
            if module == "torch" or module.startswith("torch."):
                if frame.f_code.co_name in ("backward", "grad", "_engine_run_backward") and not self.root:
                    local = frame.f_locals
                    for key in ("t_outputs", "tensors", "outputs", "self"):
                        if key in local:
                            self.root = _tensors_of(local[key])
                            if self.root:
                                break
                    del local
            elif not _names.is_internal(module) and not module.startswith("graphlens."):
                user = (frame, tb.tb_lineno)
            tb = tb.tb_next
        if user is not None:
            frame, lineno = user
            self.line = linecache.getline(frame.f_code.co_filename, lineno).strip()
            self.candidates = frame_candidates(frame)
        if caller is not None and (user is None or caller is not user[0]):
            # The frame that asks for the explanation often holds the variables (the error
            # may have been raised in a helper that it called).
            self.candidates.extend(frame_candidates(caller))

    def in_line(self, keep) -> list[tuple[str, torch.Tensor]]:
        """Candidates that ``keep`` accepts and whose name appears in the failing line,
        the one right before an in-place call or assignment first."""
        if not self.line:
            return []
        tokens = re.findall(r"[A-Za-z_][\w.]*", self.line)
        out = []
        for name, t in self.candidates:
            if keep(t) and any(tok == name or tok.startswith(name + ".") for tok in tokens):
                out.append((name, t))
        return out

    def name_of(self, t: torch.Tensor) -> str | None:
        for name, c in self.candidates:
            if c is t:
                return name
        return None

    def close(self) -> None:
        self.candidates.clear()
        self.root.clear()


def explain_error(exc: Any, graph_or_trace: Graph | Trace | None = None) -> Explanation:
    """What a classic autograd ``RuntimeError`` means for this program, in plain words.

    Recognises (see :data:`ERROR_REASONS`): backward through a freed graph, an in-place change
    to a tensor saved for backward (naming the tensor, the op that made it and the versions),
    an in-place change to a leaf that requires grad, requires_grad changed on a non-leaf,
    backward on a non-scalar, backward on a tensor without grad_fn, and a few more.  Names
    come from ``graph_or_trace`` when given, else from the variables of the frame that raised.
    Any other error gets ``"unknown_error"`` and its message quoted.  This function never
    raises: a partial trace or an odd object still gives an explanation.

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
        return _explain_error(exc, message, graph_or_trace, frame)
    except Exception:  # noqa: BLE001 - explaining must never raise
        code = next((c for c, p in _PATTERNS if p.search(message)), "unknown_error")
        if code == "unknown_error":
            sentences = [f"graphlens does not recognise this error: {_short(message)!r}."]
        else:
            sentences = [f"PyTorch raised: {_short(message)!r}.", ERROR_REASONS[code][0].upper() + ERROR_REASONS[code][1:] + "."]
        return Explanation([code], sentences, message=message)
    finally:
        del frame


def _graph_of(graph_or_trace) -> tuple[Graph | None, Trace | None]:
    if isinstance(graph_or_trace, Graph):
        return graph_or_trace, None
    if isinstance(graph_or_trace, Trace):
        try:
            return graph_or_trace.graph(), graph_or_trace
        except Exception:  # noqa: BLE001 - a trace that cannot build a graph yet
            return None, graph_or_trace
    return None, None


def _explain_error(exc: Any, message: str, graph_or_trace, caller: FrameType | None) -> Explanation:
    code, match = "unknown_error", None
    for c, pattern in _PATTERNS:
        match = pattern.search(message)
        if match:
            code = c
            break
    g, trace = _graph_of(graph_or_trace)
    ctx = _Context(exc if isinstance(exc, BaseException) else None, caller)
    try:
        handler = _HANDLERS.get(code, _unknown)
        return handler(message, match, g, trace, ctx)
    finally:
        ctx.close()


def _short(message: str) -> str:
    text = message.strip().splitlines()[0] if message.strip() else ""
    return text if len(text) <= 160 else text[:157] + "..."


def _root_graph(g: Graph | None, ctx: _Context) -> Graph | None:
    """The given graph, else a snapshot of the failed backward's root (named after the user's variables)."""
    if g is not None:
        return g
    if ctx.root:
        names = {n: t for n, t in ctx.candidates if any(t is r for r in ctx.root) or t.grad_fn is not None or t.requires_grad}
        return snapshot(*ctx.root, names=names)
    return None


def _root_label(g: Graph | None, ctx: _Context) -> str:
    if ctx.root:
        n = ctx.name_of(ctx.root[0])
        if n:
            return n
    if g is not None and g.roots:
        return " and ".join(r.label for r in g.roots)
    return "the output"


def _on_graph(g: Graph, tensor: torch.Tensor | None) -> str | None:
    return _find_live(g, tensor) if tensor is not None else None


def _graph_freed(message, match, g, trace, ctx) -> Explanation:
    g = _root_graph(g, ctx)
    root = _root_label(g, ctx)
    call = f"{root}.backward()" if root != "the output" else "backward()"
    sentences = [
        f"{call} went through a part of the graph a second time, but the first backward "
        f"already freed the tensors that part saved for computing gradients."
    ]
    path: list[str] = []
    edges: list = []
    if g is not None:
        view = _View(g)
        freed = [o for o in g.ops if any(v == "freed" for _, v in o.saved)]
        kept = [o for o in g.ops if any(_TENSOR_SUMMARY.match(v) for _, v in o.saved)]
        if not freed and trace is not None:
            # A trace records saved tensors when the op runs: the ops that saved any are the candidates.
            freed, kept = [o for o in g.ops if o.name and o.saved], []
        if freed:
            def describe(o: OpNode) -> str:
                made = [view.t(t).name for t in view.outputs.get(o.id, ()) if view.t(t).name]
                what = ", ".join(k for k, _ in o.saved)
                return f"{o.label}" + (f" (made {made[0]}; saved {what})" if made else f" (saved {what})")

            shown = [describe(o) for o in freed[:4]]
            more = f" and {len(freed) - 4} more" if len(freed) > 4 else ""
            sentences.append(f"Saved tensors freed: {', '.join(shown)}{more}.")
            path = [r.id for r in g.roots] + [o.id for o in freed]
            for o in freed:
                path.extend(view.outputs.get(o.id, ()))
        if freed and kept:
            sentences.append(
                "Part of this graph is new and part was built before the earlier backward: a tensor carried over "
                "from a previous iteration (a hidden state, a running total) still links to the old graph."
            )
            fix = "detach() the carried-over tensor at the end of each iteration (e.g. h = h.detach()), or recompute it."
        else:
            fix = None
    else:
        fix = None
    fix = fix or (
        "Recompute the forward pass before each backward (the usual training loop), add the losses and call "
        "backward once, or pass retain_graph=True to the first backward if you really need two passes. "
        "In a loop, a tensor carried over from the previous iteration (a hidden state, a running total) "
        "also links to the old graph: detach() it at the end of each iteration."
    )
    return Explanation(["graph_freed"], sentences, fix=fix, graph=g, path=path, edges=edges, message=message,
                       tensor_name=root if root != "the output" else None)


def _inplace_saved(message, match, g, trace, ctx) -> Explanation:
    ttype = match.group("type").split(".")[-1]
    dtype = _TENSOR_TYPES.get(ttype, ttype)
    shape = tuple(int(s) for s in match.group("shape").replace(" ", "").split(",") if s)
    op = match.group("op")
    ver, exp = int(match.group("ver")), int(match.group("exp"))
    backward_op = f"{op}Backward" if op else None
    name = None
    tid = None
    path: list[str] = []
    savers: list[str] = []
    modifier = None
    if g is not None:
        view = _View(g)
        recs = [t for t in g.tensors if t.shape == shape and t.dtype == dtype]
        if backward_op:
            made = [t for t in recs if t.op and (view.o(t.op).name or "").startswith(backward_op)]
        else:
            made = [t for t in recs if t.op is None or view.o(t.op).name is None]
        # Prefer the record of the saved version that a later record (the in-place change) follows.
        for t in made:
            later = [c for c in recs if c.name is not None and c.name == t.name and c.version == ver and c.id != t.id]
            cons = [c for c in view.consumers.get(t.id, ()) if (view.o(c).forward or "").endswith("_")]
            det = [d for d in view.detached.get(t.id, ())]
            det_cons = [c for d in det for c in view.consumers.get(d, ()) if (view.o(c).forward or "").endswith("_")]
            if later or cons or det_cons or t.version == ver:
                tid = t.id
                name = t.name
                mod = (cons or det_cons or [None])[0]
                if mod is not None:
                    modifier = view.o(mod)
                    path.append(mod)
                    if det_cons and not cons:
                        d = next(d for d in det if mod in view.consumers.get(d, ()))
                        path.append(d)
                        modifier_note = f" through {view.label(d)}, which {view.label(d)} = {t.name or t.id}.detach() made to share its memory"
                    else:
                        modifier_note = ""
                break
        else:
            modifier_note = ""
        if tid is not None:
            prod = view.o(view.t(tid).op) if view.t(tid).op else None
            if prod is not None and any(k == "result" for k, _ in prod.saved):
                savers.append(prod.label)
                path.append(prod.id)
            summary = f"{dtype}{list(shape)}"
            for c in view.consumers.get(tid, ()):
                o = view.o(c)
                if o.name and any(v in (summary, "freed") for _, v in o.saved) and o.label not in savers:
                    savers.append(o.label)
                    path.append(c)
            path.insert(0, tid)
    else:
        modifier_note = ""
    if name is None:
        def fits(t: torch.Tensor) -> bool:
            if tuple(t.shape) != shape or dtype_name(t.dtype) != dtype or t._version != ver:
                return False
            if backward_op is None:
                return t.grad_fn is None
            fn = t.grad_fn
            for _ in range(8):  # the in-place ops' nodes sit on top of the producer
                if fn is None:
                    return False
                if type(fn).__name__.startswith(backward_op):
                    return True
                fn = fn.next_functions[0][0] if fn.next_functions else None
            return False

        found = [(n, t) for n, t in ctx.candidates if fits(t)]
        if len(found) > 1 and backward_op is None:
            modifier_note = f" (it is one of your variables {', '.join(n for n, _ in found[:4])})"
            found = []
        if found:
            name = found[0][0]
            shared = [n for n, t in ctx.candidates if n != name and t._version == ver and _shares_memory(t, found[0][1])]
            if shared and not modifier_note:
                modifier_note = f" through {shared[0]}, which shares its memory and version counter (as {shared[0]} = {name}.detach() does)"
    g = _root_graph(g, ctx)
    if g is not None and not savers and backward_op:
        # The producer's backward node saved its own output (sigmoid, exp, tanh, ...).
        for o in g.ops:
            if (o.name or "").startswith(backward_op) and any(k == "result" for k, _ in o.saved):
                savers.append(o.label)
                path.append(o.id)
                break
    what = f"output {match.group('nr')} of {op}" if op else "a tensor that no recorded operation produced (a leaf or an input)"
    who = name or f"a {dtype}{list(shape)} tensor"
    sentences = [
        f"{who} ({what}) was saved for backward at version {exp}; it was then changed in place{modifier_note}, "
        f"and is now at version {ver}, so backward can no longer use it."
    ]
    if modifier is not None:
        sentences.append(f"The in-place operation was {modifier.forward or modifier.label}.")
    if savers:
        sentences.append(f"It was saved by {', '.join(savers)}.")
    elif backward_op:
        sentences.append(f"{op}'s backward or an operation that used {who} saved it.")
    return Explanation(
        ["inplace_saved"], sentences, tensor_name=name, tensor_id=tid, graph=g, path=[p for p in path if g is not None and p in g],
        edges=_View(g).highlight_edges(path) if g is not None and path else (), message=message,
        fix=f"Use an out-of-place operation ({name or 'y'} = {name or 'y'} * 2 instead of .mul_(2)), or clone() "
        f"before changing it; torch.autograd.set_detect_anomaly(True) shows which forward line saved it.",
    )


def _named_in_line(ctx: _Context, g: Graph | None, keep, rec_keep) -> tuple[str | None, str | None]:
    found = ctx.in_line(keep)
    if found:
        name = found[0][0]
        tid = _on_graph(g, found[0][1]) if g is not None else None
        return name, tid
    if g is not None:
        tokens = set(re.findall(r"[A-Za-z_]\w*", ctx.line))
        recs = [t for t in g.tensors if rec_keep(t) and (t.name in tokens or not tokens)]
        if len(recs) >= 1:
            return recs[-1].name, recs[-1].id
    return None, None


def _inplace_leaf(message, match, g, trace, ctx) -> Explanation:
    view_of = bool(match.group("view"))
    name, tid = _named_in_line(
        ctx, g,
        lambda t: t.requires_grad and (t.is_leaf or (t._base is not None and t._base.is_leaf)),
        lambda r: r.is_leaf and r.requires_grad,
    )
    who = name or "a leaf tensor that requires grad"
    kind = "a view of " if view_of else ""
    sentences = [
        f"An in-place operation was applied to {kind}{who}, a leaf that requires grad. PyTorch forbids it: "
        f"the leaf's values are what its gradient is taken with respect to, and no graph records the change."
    ]
    if ctx.line:
        sentences.append(f"The failing line: {ctx.line}")
    return Explanation(
        ["inplace_leaf"], sentences, tensor_name=name, tensor_id=tid, graph=g, path=[tid] if tid else (), message=message,
        fix=f"To update a parameter, do it inside `with torch.no_grad():`; to compute something new, use an "
        f"out-of-place operation ({name or 'w'} + 1) or work on {name or 'w'}.clone().",
    )


def _requires_grad_nonleaf(message, match, g, trace, ctx) -> Explanation:
    name, tid = _named_in_line(ctx, g, lambda t: not t.is_leaf, lambda r: not r.is_leaf)
    who = name or "a non-leaf tensor"
    sentences = [
        f"The requires_grad flag of {who} was changed, but {who} is not a leaf: it was computed from tensors that "
        f"require grad, and only a leaf's flag can be set."
    ]
    return Explanation(
        ["requires_grad_nonleaf"], sentences, tensor_name=name, tensor_id=tid, graph=g, path=[tid] if tid else (), message=message,
        fix=f"Use {name or 'y'}.detach() for a copy without gradient, or set requires_grad on the leaves it comes from.",
    )


def _requires_grad_dtype(message, match, g, trace, ctx) -> Explanation:
    name, tid = _named_in_line(ctx, g, lambda t: t.dtype in _INTEGER_DTYPES, lambda r: r.dtype in ("int64", "int32", "bool"))
    who = name or "the tensor"
    return Explanation(
        ["requires_grad_dtype"],
        [f"{who} has an integer or bool dtype; only floating point and complex tensors can require grad."],
        tensor_name=name, tensor_id=tid, graph=g, path=[tid] if tid else (), message=message,
        fix=f"Convert it first: {name or 'x'} = {name or 'x'}.float().requires_grad_(), or create it with a float dtype.",
    )


def _retain_no_rg(message, match, g, trace, ctx) -> Explanation:
    name, tid = _named_in_line(ctx, g, lambda t: not t.requires_grad, lambda r: not r.requires_grad)
    who = name or "the tensor"
    return Explanation(
        ["retain_grad_no_requires_grad"],
        [f"retain_grad() was called on {who}, which does not require grad, so there is no gradient to keep."],
        tensor_name=name, tensor_id=tid, graph=g, path=[tid] if tid else (), message=message,
        fix=f"Make the leaves {who} is computed from require grad (or ask graphlens.explain({name or 'x'}) why it does not).",
    )


def _nonscalar(message, match, g, trace, ctx) -> Explanation:
    root = ctx.root[0] if ctx.root else None
    name = ctx.name_of(root) if root is not None else None
    g2 = _root_graph(g, ctx)
    tid = _on_graph(g2, root) if g2 is not None else None
    shape = list(root.shape) if root is not None else None
    who = name or ("the output" + (f" of shape {shape}" if shape else ""))
    sentences = [
        f"backward() was called on {who}" + (f", of shape {shape}," if name and shape is not None else "")
        + " without a gradient argument. PyTorch can start backward on its own only from a single number."
    ]
    return Explanation(
        ["nonscalar_backward"], sentences, tensor_name=name, tensor_id=tid, graph=g2, path=[tid] if tid else (), message=message,
        fix=f"Reduce it to a scalar first ({name or 'out'}.sum().backward() or .mean()), or pass the gradient "
        f"yourself: {name or 'out'}.backward(torch.ones_like({name or 'out'})).",
    )


def _no_grad_fn(message, match, g, trace, ctx) -> Explanation:
    index = int(match.group("index"))
    root = ctx.root[index] if index < len(ctx.root) else None
    name = ctx.name_of(root) if root is not None else None
    tid = None
    if g is not None and root is not None:
        tid = _find_live(g, root)
    if tid is None and g is not None and trace is not None:
        recs = [t for t in g.tensors if not t.requires_grad and (name is None or t.name == name)]
        if recs:
            tid, name = recs[-1].id, recs[-1].name or name
    who = name or f"output {index}"
    sentences = [f"backward was called on {who}, which does not require grad and has no grad_fn: no graph leads back from it."]
    reasons = ["no_grad_fn"]
    path: list[str] = [tid] if tid else []
    edges: list = []
    if g is not None and tid is not None:
        view = _View(g)
        node = view.t(tid)
        sub = _analyse(view, tid, [], live=g.tensor(tid), ran=None, optimizer=None, hints={})
        detail = [r for r in sub.reasons if r in ("created_in_no_grad", "made_by_detach", "integer_dtype")]
        reasons += detail
        if detail:
            sentences += sub.sentences[1:2]
            path, edges = list(sub.path) or path, list(sub.edges)
        elif node.op is not None and view.o(node.op).name is None:
            sentences.append("None of the tensors it was computed from required grad.")
    else:
        sentences.append(
            "Either none of the tensors it was computed from required grad, or it was computed inside "
            "torch.no_grad(), or it came from detach()."
        )
    return Explanation(
        reasons, sentences, tensor_name=name, tensor_id=tid, graph=g, path=path, edges=edges, message=message,
        fix="Create the parameters with requires_grad=True and compute the loss outside torch.no_grad() and without detach().",
    )


def _simple(code: str, sentence: str, fix: str):
    def handler(message, match, g, trace, ctx) -> Explanation:
        groups = match.groupdict() if match else {}
        return Explanation([code], [sentence.format(**groups)], fix=fix, graph=g, message=message)

    return handler


def _unknown(message, match, g, trace, ctx) -> Explanation:
    return Explanation(
        ["unknown_error"],
        [f"graphlens does not recognise this error, so it cannot relate it to the graph. PyTorch said: {_short(message)!r}."],
        graph=g, message=message,
        fix="Search for the message, or run the code under torch.autograd.set_detect_anomaly(True) to see which operation failed.",
    )


_HANDLERS = {
    "graph_freed": _graph_freed,
    "inplace_saved": _inplace_saved,
    "inplace_leaf": _inplace_leaf,
    "requires_grad_nonleaf": _requires_grad_nonleaf,
    "requires_grad_dtype": _requires_grad_dtype,
    "retain_grad_no_requires_grad": _retain_no_rg,
    "nonscalar_backward": _nonscalar,
    "no_grad_fn": _no_grad_fn,
    "view_inplace_multi_output": _simple(
        "view_inplace_multi_output",
        "Output {nr} of {op} is one of several views that one function returned, and it was changed in place; "
        "PyTorch cannot track such a change for gradients.",
        "Clone the view before changing it (a = a.clone()), or use an out-of-place operation.",
    ),
    "inference_tensor_saved": _simple(
        "inference_tensor_saved",
        "A tensor made inside torch.inference_mode() was used in a computation whose gradient is needed; "
        "such tensors can never be saved for backward.",
        "Use torch.no_grad() instead of inference_mode() for tensors you later use with autograd, or clone() them outside it.",
    ),
    "unused_input": _simple(
        "unused_input",
        "torch.autograd.grad was asked for the gradient of input {index}, but the output does not depend on it.",
        "Check that the output is computed from that input, or pass allow_unused=True to get None for it.",
    ),
    "input_not_requiring_grad": _simple(
        "input_not_requiring_grad",
        "torch.autograd.grad was asked for the gradient of a tensor that does not require grad.",
        "Create that input with requires_grad=True (or call .requires_grad_()) before computing the output.",
    ),
    "grad_shape_mismatch": _simple(
        "grad_shape_mismatch",
        "The gradient given to backward has shape {given}, but the output it belongs to has shape {want}.",
        "Pass a gradient of the output's own shape, e.g. torch.ones_like(out).",
    ),
}
