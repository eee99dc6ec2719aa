"""The program model the laws run: steps, programs, executed runs, and your own function as a subject."""

from __future__ import annotations

import contextlib
import inspect
import sys
import warnings
from typing import Any, Callable, Iterable, NamedTuple

import torch

from ._live.safety import KEEP_MIN_NODES, keep_children

__all__ = ["LEAF_KINDS", "OP_KINDS", "Step", "Program", "Executed", "FunctionProgram", "backward_nodes"]


# ---------------------------------------------------------------------------------------
# Programs: plain data that runs, prints as Python and runs again the same way
# ---------------------------------------------------------------------------------------

#: Step kinds that make a leaf tensor (a plain constant, a leaf requiring grad, a Parameter).
LEAF_KINDS = ("leaf", "constant", "parameter")

#: The families of operations a program draws from, simplest first (see :mod:`graphlens.strategies`).
OP_KINDS = ("unary", "binary", "reduce", "view", "index", "matmul", "cat", "multi", "inplace", "detach", "retain_grad")


class Step(NamedTuple):
    """One statement of a :class:`Program`.

    ``code`` is one line of Python (``"h2 = w0 * x1"``); ``inputs`` the variables it
    reads, ``outputs`` the ones it binds (none for ``h1.retain_grad()``; the modified
    tensor for an in-place statement such as ``h1.add_(w0)``); ``no_grad`` whether it runs
    inside ``torch.no_grad()``.  ``kind`` is one of :data:`LEAF_KINDS` or the family of
    the operation (``"unary"``, ``"view"``, ``"inplace"``, ``"loss"`` ...).
    """

    code: str
    kind: str
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    no_grad: bool = False

    @property
    def binds(self) -> tuple[str, ...]:
        """The names this statement assigns (an in-place statement assigns none)."""
        return () if self.kind in ("inplace", "retain_grad") else self.outputs


class Program:
    """A small autograd program: statements that make leaves, compute, and end in losses.

    It is plain data: equal steps make equal programs.  :meth:`run` executes the
    statements one by one (each exactly as :meth:`source` prints it) and returns an
    :class:`Executed`; the values are literals, so every run computes the same numbers.
    ``repr(program)`` is the source: a script you can paste and run.

    >>> p = Program([Step("w0 = torch.tensor([1.0, 2.0], requires_grad=True)", "leaf", (), ("w0",)),
    ...              Step("loss0 = (w0 * w0).sum()", "loss", ("w0",), ("loss0",))], losses=["loss0"])
    >>> ex = p.run(); ex.backward(); ex.tensors["w0"].grad
    tensor([2., 4.])
    >>> print(p.source(backward=False))
    import torch
    <BLANKLINE>
    w0 = torch.tensor([1.0, 2.0], requires_grad=True)
    loss0 = (w0 * w0).sum()
    """

    __slots__ = ("steps", "losses", "_compiled")

    def __init__(self, steps: Iterable[Step], *, losses: Iterable[str]) -> None:
        self.steps: tuple[Step, ...] = tuple(Step(*s) for s in steps)
        self.losses: tuple[str, ...] = tuple(losses)
        bound = [n for s in self.steps for n in s.binds]
        if len(set(bound)) != len(bound):
            raise ValueError(f"steps bind a name twice ({bound}): each step must bind fresh names")
        missing = [n for n in self.losses if n not in bound]
        if not self.losses or missing:
            raise ValueError(f"losses must name variables the steps bind; unknown: {missing or 'none given'}")
        self._compiled: list | None = None

    @property
    def leaves(self) -> tuple[str, ...]:
        """The names of the leaf tensors the program makes directly, in order."""
        return tuple(n for s in self.steps if s.kind in LEAF_KINDS for n in s.outputs)

    def run(
        self,
        *,
        before: Callable[[int, Step], None] | None = None,
        after: Callable[[int, Step, dict], None] | None = None,
    ) -> "Executed":
        """Execute the statements; ``before(i, step)`` / ``after(i, step, namespace)`` are
        called around each one (a law uses them to watch the program step by step)."""
        if self._compiled is None:
            self._compiled = [compile(s.code, f"<graphlens program, step {i}>", "exec") for i, s in enumerate(self.steps)]
        ns: dict[str, Any] = {"torch": torch}
        for i, (step, code) in enumerate(zip(self.steps, self._compiled)):
            if before is not None:
                before(i, step)
            with torch.no_grad() if step.no_grad else contextlib.nullcontext():
                exec(code, ns)  # noqa: S102 - the program's own statements, as printed by source()
            if after is not None:
                after(i, step, ns)
        names = [n for s in self.steps for n in s.binds]
        tensors = {n: ns[n] for n in names if isinstance(ns.get(n), torch.Tensor)}
        return Executed(self, tensors, tuple(ns[n] for n in self.losses), self.leaves)

    def source(self, *, backward: bool = True) -> str:
        """The program as a standalone Python script; with ``backward`` it ends by calling
        backward on the losses and printing every leaf's gradient."""
        lines = ["import torch", ""]
        in_block = False
        for s in self.steps:
            if s.no_grad and not in_block:
                lines.append("with torch.no_grad():")
            in_block = s.no_grad
            lines.append(("    " if s.no_grad else "") + s.code)
        if backward:
            lines.append(f"torch.autograd.backward([{', '.join(self.losses)}])")
            for name in self.leaves:
                lines.append(f'print("{name}.grad =", {name}.grad)')
        return "\n".join(lines) + "\n"

    def __str__(self) -> str:
        return self.source()

    __repr__ = __str__

    def _repr_pretty_(self, printer, cycle) -> None:  # hypothesis / IPython pretty printers
        printer.text(self.source())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Program):
            return NotImplemented
        return self.steps == other.steps and self.losses == other.losses

    def __hash__(self) -> int:
        return hash((self.steps, self.losses))

    def __len__(self) -> int:
        return len(self.steps)


class Executed:
    """One run of a subject: its named tensors, its losses and its leaves (all live)."""

    __slots__ = ("subject", "tensors", "losses", "leaf_names")

    def __init__(self, subject: Any, tensors: dict[str, torch.Tensor], losses: tuple, leaf_names: Iterable[str]) -> None:
        self.subject = subject
        self.tensors = tensors
        self.losses: tuple[torch.Tensor, ...] = losses
        self.leaf_names = tuple(leaf_names)

    @property
    def leaves(self) -> dict[str, torch.Tensor]:
        """The leaves the program made directly, by name."""
        return {n: self.tensors[n] for n in self.leaf_names if n in self.tensors}

    @property
    def parameters(self) -> list[torch.Tensor]:
        """The ``nn.Parameter`` leaves (unique, in order)."""
        return _unique(t for t in self.leaves.values() if isinstance(t, torch.nn.Parameter))

    def backward(self, *, retain_graph: bool = False) -> None:
        """Backward from all losses at once."""
        torch.autograd.backward(list(self.losses), retain_graph=retain_graph)

    def name_of(self, t: Any) -> str:
        """The variable name of a tensor (or of the tensor whose ``grad_fn`` is ``t``)."""
        for name, v in self.tensors.items():
            if v is t:
                return name
        for name, v in self.tensors.items():
            if v.grad_fn is not None and v.grad_fn is t:
                return name
        return "<unnamed>"

    def grads(self) -> dict[str, torch.Tensor | None]:
        """``.grad`` of every named leaf and every tensor that retains its grad."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return {n: t.grad for n, t in self.tensors.items() if t.is_leaf or t.retains_grad}

    def source(self) -> str:
        """The subject's source, for messages."""
        return _source_of(self.subject)


class FunctionProgram:
    """Your own function as a subject: ``fn()`` builds tensors and returns a scalar loss
    (or a tuple/list of scalar losses).

    Tensors are named after ``fn``'s local variables at return; leaves it reaches but
    does not name (a closure's parameters) are named ``leaf0``, ``leaf1``...  Each run
    seeds torch's generator with ``seed``; grads left on such outside leaves by the laws'
    backward passes are reset after each run and put back by :meth:`restore`.
    """

    def __init__(self, fn: Callable[[], Any], *, seed: int = 0) -> None:
        if not callable(fn):
            raise TypeError(f"fn must be a function of no arguments returning a scalar loss, not {type(fn).__name__}")
        self.fn = fn
        self.seed = seed
        self._stash: dict[int, tuple[torch.Tensor, torch.Tensor | None]] = {}
        self.steps = (Step(f"loss = {getattr(fn, '__name__', 'fn')}()", "function", (), ("loss",)),)

    def run(self, *, before=None, after=None) -> Executed:
        """Call the function once (seeded) and collect its tensors."""
        if before is not None:
            before(0, self.steps[0])
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            out, local_tensors = _call_keeping_locals(self.fn)
        if after is not None:
            after(0, self.steps[0], local_tensors)
        pairs: list = []
        _tensors_in(out, pairs)
        if not pairs or isinstance(out, (str, bytes)):
            raise TypeError(f"{_fn_name(self.fn)} must return a scalar loss tensor (or a tuple of them), not {type(out).__name__}")
        for t in pairs:
            if t.numel() != 1:
                raise ValueError(f"{_fn_name(self.fn)} must return scalar losses, not a tensor of shape {tuple(t.shape)}: reduce it (.sum())")
        if not any(t.requires_grad for t in pairs):
            raise ValueError(
                f"{_fn_name(self.fn)} returned no loss that requires grad, so there is no graph to check: "
                f"make a leaf with requires_grad=True (or use a module's parameters) inside it"
            )
        tensors = dict(local_tensors)
        for k, t in enumerate(pairs):
            name = next((n for n, v in tensors.items() if v is t), None)
            if name is None:
                name = f"loss{k}" if len(pairs) > 1 else "loss"
                tensors[name] = t
        nodes, _ = backward_nodes(pairs)
        leaf_names = [n for n, t in tensors.items() if t.is_leaf]
        extra = 0
        for fn in nodes:
            if type(fn).__name__ == "AccumulateGrad":
                v = fn.variable
                if not any(v is t for t in tensors.values()):
                    tensors[f"leaf{extra}"] = v
                    leaf_names.append(f"leaf{extra}")
                    extra += 1
        for t in tensors.values():  # an outside leaf keeps earlier grads: stash and reset them
            if t.is_leaf and t.requires_grad:
                if id(t) not in self._stash:
                    self._stash[id(t)] = (t, t.grad)
                t.grad = None
        del nodes
        return Executed(self, tensors, tuple(pairs), leaf_names)

    def restore(self) -> None:
        """Give the leaves the function reached back the grads they had before the laws ran."""
        for t, g in self._stash.values():
            t.grad = g
        self._stash.clear()

    def source(self) -> str:
        """The function's source code, if Python can find it."""
        try:
            return inspect.getsource(self.fn)
        except (OSError, TypeError):
            return repr(self.fn)

    def __repr__(self) -> str:
        return f"FunctionProgram({_fn_name(self.fn)})"


def _fn_name(fn: Any) -> str:
    return f"{getattr(fn, '__qualname__', None) or getattr(fn, '__name__', None) or repr(fn)}()"


def _call_keeping_locals(fn: Callable[[], Any]) -> tuple[Any, dict[str, torch.Tensor]]:
    """Call ``fn()`` and return its result with the tensors in its local variables at return."""
    code = getattr(fn, "__code__", None)
    captured: dict[str, torch.Tensor] = {}
    if code is None:
        return fn(), captured
    previous = sys.getprofile()

    def profile(frame, event, arg):
        if event == "return" and frame.f_code is code:
            captured.clear()
            captured.update((k, v) for k, v in frame.f_locals.items() if isinstance(v, torch.Tensor) and not k.startswith("_"))

    sys.setprofile(profile)
    try:
        out = fn()
    finally:
        sys.setprofile(previous)
    return out, captured


def _tensors_in(obj: Any, out: list) -> None:
    """Append the tensors in ``obj`` (itself, or nested in lists and tuples at any depth) to ``out``, in order."""
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            _tensors_in(item, out)


def _unique(items: Iterable[Any]) -> list:
    out: list = []
    for x in items:
        if not any(x is y for y in out):
            out.append(x)
    return out


def _subject(obj: Any) -> Any:
    if isinstance(obj, Executed):
        return obj.subject
    if isinstance(obj, (Program, FunctionProgram)):
        return obj
    if callable(obj):
        return FunctionProgram(obj)
    raise TypeError(
        f"subject must be a Program, an Executed run, or a function of no arguments returning a loss, not {type(obj).__name__}"
    )


def _source_of(subject: Any) -> str:
    try:
        return subject.source() if isinstance(subject, FunctionProgram) else subject.source(backward=False)
    except Exception:  # noqa: BLE001 - a message must never fail
        return repr(subject)


def backward_nodes(roots: Iterable[torch.Tensor]) -> tuple[list, dict]:
    """A plain iterative walk of ``grad_fn.next_functions`` from ``roots``: the nodes in
    the order first reached, and for each node its ``(input_nr, child, output_nr)``
    entries that are not None.  Independent of graphlens's own walk."""
    nodes: list = []
    seen: set = set()
    edges: dict = {}
    stack = [t.grad_fn for t in reversed(list(roots)) if t.grad_fn is not None]
    while stack:
        fn = stack.pop()
        if fn in seen:
            continue
        seen.add(fn)
        nodes.append(fn)
        nf = fn.next_functions if len(seen) < KEEP_MIN_NODES else keep_children(fn)
        edges[fn] = [(i, c, nr) for i, (c, nr) in enumerate(nf) if c is not None]
        for c, _ in reversed(nf):
            if c is not None and c not in seen:
                stack.append(c)
    return nodes, edges
