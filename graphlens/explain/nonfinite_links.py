"""The graph as the NaN/inf answers read it: who made and used each tensor, values at a position, and the kinds of ops."""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from ..graph import Graph, OpNode, TensorNode
from ..values import Summary, format_number

__all__ = [
    "value_read", "read_live",
    "Links", "Cause", "bad", "kind", "index", "value_at", "position", "positional", "base", "named_like", "limit", "trained", "live_as_recorded",
    "CONTRACTIONS", "FILLS", "SOFTMAXES", "ATTENTIONS", "DIVS", "CASTS", "HALF", "hidden_by_exp",
]


def _floating(dtype: str) -> bool:
    return dtype.startswith(("float", "complex", "bfloat"))


def bad(s: Summary | None) -> bool:
    """Whether the summary ``s`` says its tensor holds a NaN or an infinity."""
    return s is not None and s.finite is False


def kind(v: Any) -> str:
    """``"NaN"``, ``"inf"`` or ``"-inf"`` for a number (a complex one: NaN if a part is)."""
    if type(v) is complex:
        return "NaN" if v != v else "inf"
    if type(v) is float:
        return "NaN" if v != v else ("inf" if v > 0 else "-inf")
    return "a NaN or an infinity"


def index(shape: tuple, flat: int | None) -> str:
    """``[i, j]`` for the flat row-major index ``flat`` of a tensor of ``shape`` (``""`` for a
    0-d tensor or an unknown position)."""
    if flat is None or not shape:
        return ""
    if any(type(n) is not int for n in shape):
        return f"[flat {flat}]"
    out = []
    for n in reversed(shape):
        out.append(flat % n if n else 0)
        flat = flat // n if n else 0
    return "[" + ", ".join(map(str, reversed(out))) + "]"


def value_at(s: Summary | None, flat: int | None, shape: tuple) -> Any:
    """The value summarised by ``s`` at the flat position ``flat`` of a tensor of ``shape``,
    where it can be told: the element broadcasting puts there (a one-element tensor, a
    tensor of that shape, or one that broadcasts to it), when it was read."""
    if s is None or s.head is None or flat is None:
        return None
    if s.numel == 1 and s.head:
        return s.head[0]
    p = position(tuple(shape), flat, tuple(s.shape))
    if p is not None and p < len(s.head):
        return s.head[p]
    if p is not None and p == s.nonfinite_at:  # (past the head: the first non-finite element is recorded too)
        return s.nonfinite_value
    return None


def position(shape: tuple, flat: int, of: tuple) -> int | None:
    """The flat position, in a tensor of shape ``of``, of the element broadcasting uses at
    flat position ``flat`` of a result of ``shape`` (None: ``of`` does not broadcast to it).

    >>> position((3, 2), 5, (3, 2)), position((3, 2), 5, (2,)), position((3, 2), 5, (3, 1)), position((3, 2), 1, (3,))
    (5, 1, 2, None)
    """
    if of == shape:
        return flat
    if len(of) > len(shape) or any(type(n) is not int for n in shape + of):
        return None
    idx = []
    for n in reversed(shape):
        idx.append(flat % n if n else 0)
        flat = flat // n if n else 0
    idx.reverse()
    out, lead = 0, len(shape) - len(of)
    for k, size in enumerate(of):
        i = idx[lead + k] if size == shape[lead + k] else 0 if size == 1 else None
        if i is None:
            return None
        out = out * size + i
    return out


#: Forward ops whose result at a position is not computed from their inputs at that position
#: (a sum over products, a convolution): an input's value "there" means nothing.
CONTRACTIONS = frozenset({
    "addmm", "mm", "matmul", "bmm", "baddbmm", "addbmm", "addmv", "mv", "linear", "einsum", "tensordot", "dot", "vdot",
    "inner", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "convolution",
    "bilinear", "scaled_dot_product_attention", "multi_head_attention_forward", "embedding", "cdist", "chain_matmul",
    "multi_dot", "kron", "cross",
})


def positional(name: str | None) -> bool:
    """Whether an op's inputs can be read at the position of one element of its result."""
    return base(name) not in CONTRACTIONS


def base(name: str | None) -> str:
    """An op's plain name: ``torch.log`` -> ``log``, ``add_`` -> ``add``, ``__truediv__`` -> ``truediv``."""
    return (name or "").rsplit(".", 1)[-1].strip("_")


def _in_place(forward: str | None) -> bool:
    """Whether a call name is an in-place write (``add_``, ``__iadd__``), not a reflected op (``__rdiv__``)."""
    name = (forward or "").rsplit(".", 1)[-1]
    if name.startswith("__"):
        return name.startswith("__i") and name.endswith("__") and name not in ("__index__", "__int__", "__invert__")
    return name.endswith("_")


class Links:
    """The graph's structure as the searches need it: who made each tensor, who used it, and
    where each backward node sends its gradients."""

    def __init__(self, g: Graph) -> None:
        self.g = g
        self.order = {t.id: k for k, t in enumerate(g.tensors)}
        self.inputs: dict[str, list[tuple[int, str]]] = {}  # op -> [(input_nr, tensor)]
        self.maker: dict[str, str] = {}  # tensor -> op that made it
        self.made: dict[str, dict[int, str]] = {}  # op -> {output_nr: tensor}
        self.nexts: dict[str, dict[int, tuple[str, int]]] = {}  # op -> {input_nr: (child op, output_nr)}
        self.parents: dict[str, list[str]] = {}  # op -> ops whose next edges point at it
        self.consumers: dict[str, list[str]] = {}  # tensor -> ops it fed
        self.detached: dict[str, str] = {}  # tensor -> the tensor it was detached from (the same data)
        for e in g.edges:
            if e.kind == "input":
                self.inputs.setdefault(e.dst, []).append((e.input_nr, e.src))
                self.consumers.setdefault(e.src, []).append(e.dst)
            elif e.kind == "output":
                self.maker[e.dst] = e.src
                self.made.setdefault(e.src, {})[e.output_nr] = e.dst
            elif e.kind == "detach":
                self.detached[e.dst] = e.src
            elif e.kind == "next":
                self.nexts.setdefault(e.src, {})[e.input_nr] = (e.dst, e.output_nr)
                self.parents.setdefault(e.dst, []).append(e.src)
        for rows in self.inputs.values():
            rows.sort()

    def forward_inputs(self, op: str) -> list[str]:
        return [t for _, t in self.inputs.get(op, ())]

    def made_by(self, tid: str | None) -> str:
        """The plain forward name of the op that made ``tid`` (``""``: none)."""
        op = self.maker.get(tid) if tid else None
        return base(self.g.node(op).forward) if op is not None else ""

    def ancestors(self, tid: str) -> list[str]:
        """``tid`` and every tensor its value was computed from (through ops), in program order."""
        seen, stack = set(), [tid]
        while stack:
            t = stack.pop()
            if t in seen:
                continue
            seen.add(t)
            op = self.maker.get(t)
            if op is not None:
                stack.extend(self.forward_inputs(op))
            if t in self.detached:  # (detach() shares the data: its values were made where the original's were)
                stack.append(self.detached[t])
        return sorted(seen, key=lambda t: self.order.get(t, 0))

    def tainted(self, tid: str) -> list[str]:
        """The non-finite tensors ``tid``'s non-finite values came through, in program order: the
        walk back from ``tid`` follows only inputs that were not finite (or not checked), so a NaN
        or an infinity that an op dropped (a ``where`` that did not choose it, a cast to integers)
        is not taken for the source of one made later."""
        seen, stack, out = set(), [tid], []
        while stack:
            t = stack.pop()
            if t in seen:
                continue
            seen.add(t)
            s = self.g.node(t).value
            if s is not None and s.finite is True:
                continue
            if bad(s):
                out.append(t)
            op = self.maker.get(t)
            if op is not None:
                stack.extend(self.forward_inputs(op))
            if t in self.detached:
                stack.append(self.detached[t])
        return sorted(out, key=lambda t: self.order.get(t, 0))

    def tainted_at(self, tid: str, at: int | None) -> list[str]:
        """:meth:`tainted`, for the element at flat position ``at`` of ``tid`` where assignments
        made ``tid`` (``t[i] = v``, one after another) and the trace saw which positions each
        wrote: the element came from the value of the latest one that wrote it (from the
        assignment itself for a Python number), else from what the first target held; any
        other case is :meth:`tainted`."""
        kept, cur, source = set(), tid, None
        while True:
            op, written = self._assignment(cur, at)
            ins = self.forward_inputs(op) if written is not None else ()
            if not ins:
                break
            kept.add(cur)
            if at in written:
                floats = [t for t in ins[1:] if _floating(self.g.node(t).dtype)]
                source = floats[-1] if floats else ""
                break
            cur = ins[0]  # (the element was there before: what made the target)
        if not kept:
            return self.tainted(tid)
        kept.update(self.tainted(source if source is not None else cur) if source != "" else ())
        return [t for t in self.tainted(tid) if t in kept]

    def kept_from(self, tid: str, at: int | None) -> set[str]:
        """The tensors the element at ``at`` of ``tid`` came from, where assignments made ``tid``
        and none wrote that element (what the first target held, and where that came from)."""
        cur = tid
        while True:
            op, written = self._assignment(cur, at)
            ins = self.forward_inputs(op) if written is not None and at not in written else ()
            if not ins:
                return set(self.ancestors(cur)) if cur != tid else set()
            cur = ins[0]

    def _assignment(self, tid: str, at: int | None) -> tuple[str | None, tuple | None]:
        """``(op, positions it wrote)`` where an assignment the trace saw write known positions made ``tid``."""
        op = self.maker.get(tid)
        written = None if op is None or at is None else getattr(self.g.node(op), "written", None)
        return op, written

    def upstream(self, op: str) -> set[str]:
        """The backward nodes from which ``op`` is reached along next edges (``op`` too): those
        whose gradients can end up at it."""
        seen, stack = set(), [op]
        while stack:
            o = stack.pop()
            if o not in seen:
                seen.add(o)
                stack.extend(self.parents.get(o, ()))
        return seen

    def target_of(self, op: str, input_nr: int) -> str | None:
        """The tensor the gradient ``op`` sends along its ``input_nr``-th next edge is for."""
        child = self.nexts.get(op, {}).get(input_nr)
        if child is None:
            return None
        node = self.g.node(child[0])
        if isinstance(node, OpNode) and node.variable is not None:
            return node.variable
        return self.made.get(child[0], {}).get(child[1])

    def read_at(self, t: TensorNode) -> tuple | None:
        """Where in ``t`` (an embedding table) the non-finite value that went on was: the row the
        first non-finite lookup read, not the table's first non-finite element (a NaN in a row no
        batch reads is not the one the loss was computed from)."""
        if len(t.shape) != 2 or not t.shape[1]:
            return None
        for c in self.consumers.get(t.id, ()):
            if base(self.g.node(c).forward) != "embedding":
                continue
            ins = self.forward_inputs(c)
            outs = list(self.made.get(c, {}).values())
            idx = next((i for i in ins if i != t.id), None)
            if idx is None or not outs or not bad(self.g.node(outs[0]).value):
                continue
            out = self.g.node(outs[0]).value
            width = t.shape[1]
            k = out.nonfinite_at // width if out.nonfinite_at is not None else None
            head = self.g.node(idx).value.head if self.g.node(idx).value is not None else None
            if k is None or not head or k >= len(head) or type(head[k]) is not int:
                continue
            row = head[k] if head[k] >= 0 else head[k] + t.shape[0]
            v = out.head[out.nonfinite_at] if out.head and out.nonfinite_at < len(out.head) else out.nonfinite_value
            return row * width + out.nonfinite_at % width, v
        return None

    def label(self, tid: str | None) -> str:
        """What an answer calls a tensor: its variable name, the name of a later in-place version
        of it, else what made it (``log's result``), else its id."""
        if tid is None:
            return "its input"
        node = self.g.node(tid)
        if isinstance(node, TensorNode) and node.name:
            return node.name
        later, seen = tid, set()
        while later not in seen:  # (w updated in place by an optimizer: its later version has the name)
            seen.add(later)
            nxt = [self.made.get(op, {}).get(0) for op in self.consumers.get(later, ())
                   if _in_place(self.g.node(op).forward) and self.forward_inputs(op)[:1] == [later]]
            nxt = [t for t in nxt if t is not None]
            if not nxt:
                break
            later = nxt[0]
            if self.g.node(later).name:
                return self.g.node(later).name
        fwd = self.made_by(tid)
        if not fwd and tid in self.maker:  # (a backward node made it: a gradient computed with create_graph=True)
            fwd = self.g.node(self.maker[tid]).name or ""
        return f"{fwd}'s result" if fwd else tid


class Cause(NamedTuple):
    """Why an op made a non-finite number: a reason code, one sentence, the fix (``more``: further codes)."""

    code: str
    why: str
    fix: str
    more: tuple = ()


#: Ops that write a value the program gives them (a mask's -inf is written, not computed).
FILLS = frozenset({"masked_fill", "fill", "full", "full_like", "new_full", "index_fill", "where", "fill_diagonal",
                   "masked_scatter", "index_put", "setitem"})
#: Ops that turn a row of -inf into NaN (0 / 0), and only then: their results are never infinite.
SOFTMAXES = frozenset({"softmax", "_softmax", "log_softmax", "_log_softmax"})
#: Attention recorded as one call (its softmax inside): a query whose every key is masked gives NaN.
ATTENTIONS = frozenset({"multi_head_attention_forward", "_native_multi_head_attention"})
DIVS = {"div", "true_divide", "truediv", "rdiv", "rtruediv", "divide"}
CASTS = {"to", "half", "bfloat16", "float", "double", "type", "type_as"}
HALF = {"float16", "bfloat16"}


def limit(dtype: str) -> str:
    try:
        return format_number(float(torch.finfo(getattr(torch, dtype)).max), 5)
    except (AttributeError, TypeError):
        return "its largest value"


def live_as_recorded(g: Graph, tid: str) -> torch.Tensor | None:
    """The live tensor of record ``tid`` while it is still the version the trace recorded (its
    values then are the ones the records describe), else None."""
    t, node = g.tensor(tid), g.node(tid)
    try:
        return t if t is not None and isinstance(node, TensorNode) and int(t._version) == node.version else None
    except RuntimeError:  # (an inference tensor has no version counter)
        return None


def value_read(g: Graph, tid: str, flat: int | None, shape: tuple) -> Any:
    """The value of record ``tid`` at flat position ``flat`` of a result of ``shape`` (broadcast as
    :func:`value_at`): from the record's head, else, past it, from the live tensor while it is still
    the version the trace recorded (None where neither can say)."""
    v = value_at(g.node(tid).value, flat, shape)
    if v is not None or flat is None:
        return v

    def at(t: torch.Tensor) -> Any:
        p = position(tuple(shape), flat, tuple(t.shape))
        return None if p is None or p >= t.numel() else t.reshape(-1)[p].item()

    return read_live(g, tid, at)


def read_live(g: Graph, tid: str, reader, default: Any = None) -> Any:
    """``reader(t)`` of record ``tid``'s live tensor (detached, a plain strided real tensor) while it is still
    the version the trace recorded, read unseen by the user's modes and traces; ``default`` otherwise."""
    t = live_as_recorded(g, tid)
    if t is None:
        return default
    from .._live.guard import quiet

    try:
        with quiet():  # (graphlens's own read: no mode or trace of the user's sees it)
            if type(t) is not torch.Tensor or t.layout is not torch.strided or t.is_complex():
                return default
            return reader(t.detach())
    except Exception:  # noqa: BLE001 - a tensor that cannot be read says nothing
        return default


def trained(g: Graph, links: Links, op: str | None = None) -> bool:
    """Whether the values of op ``op``'s inputs (of any op, without ``op``) were computed from a
    parameter the trace saw written in place (an optimizer step, a manual update under no_grad):
    only then can a learning rate be what made them large."""
    if op is None:
        todo = list(links.maker)
    else:
        todo = [a for t in links.forward_inputs(op) for a in links.ancestors(t)]
    for t in todo:  # (a leaf given a new value by an op: changed in place, under no_grad)
        if t not in links.maker:
            continue
        n = g.node(t)
        if n.is_parameter or (n.is_leaf and n.requires_grad):
            return True
    return False


def named_like(label: str) -> bool:
    """Whether an answer's label for a tensor is a name a fix can use in code (not ``log's result``, ``t7``)."""
    return label.replace(".", "_").isidentifier() and not (label[:1] == "t" and label[1:].isdigit())


def hidden_by_exp(g: Graph, links: Links, log_op: str) -> TensorNode | None:
    """The input of the exps under ``log(sum(exp(x)))`` when it holds -inf (their 0 was no underflow),
    or of a sigmoid or exp the log takes directly (``log(sigmoid(x))``) when ``x`` held -inf there: the
    0 it made hid an infinity that came first."""
    ins = links.forward_inputs(log_op)
    if ins and links.made_by(ins[0]) in ("sigmoid", "exp") and links.maker.get(ins[0]) is not None:
        x = links.forward_inputs(links.maker[ins[0]])
        if x and bad(g.node(x[0]).value) and links.tainted_at(x[0], g.node(x[0]).value.nonfinite_at):
            return g.node(x[0])
    if not ins or links.made_by(ins[0]) not in ("sum", "mean") or links.maker.get(ins[0]) is None:
        return None
    for t in links.forward_inputs(links.maker[ins[0]]):
        if links.made_by(t) == "exp" and links.maker.get(t) is not None:
            x = links.forward_inputs(links.maker[t])
            if x and bad(g.node(x[0]).value) and links.tainted_at(x[0], g.node(x[0]).value.nonfinite_at):
                return g.node(x[0])
    return None
