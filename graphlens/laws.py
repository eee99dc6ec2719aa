"""Ten laws of autograd as checks that run a program (a generated one or your own function).

A *subject* is a :class:`Program` (a list of Python statements, as drawn by
:mod:`graphlens.strategies`), an :class:`Executed` run of one, or any zero-argument
function of yours that builds its tensors and returns a scalar loss (or a tuple of
them).  Every law re-runs the subject as often as it needs, so the subject must be
deterministic: a function's random numbers are made repeatable by seeding torch's
generator before each call.  A broken law raises :class:`LawViolation` (an
``AssertionError``) naming the law, the tensor (by its variable name) and the values.

Check your own function with two lines:

>>> import torch
>>> from graphlens.laws import check_all
>>> def my_loss():
...     w = torch.tensor([1.0, -2.0], requires_grad=True)
...     h = torch.tanh(w) * 3
...     h.retain_grad()
...     return h.sum()
>>> check_all(my_loss)  # returns the laws that were checked, raises LawViolation if one breaks
(1, 2, 3, 4, 5, 6, 7, 8, 9, 10)

Or run every law over random programs with hypothesis (``pip install graphlens[test]``):

>>> from hypothesis import given, settings
>>> from graphlens.strategies import programs
>>> @settings(max_examples=5, database=None, deadline=None)
... @given(programs(max_ops=4))
... def test_autograd_laws(program):
...     check_all(program)
>>> test_autograd_laws()

A failing example prints as a standalone script (``repr(program)`` is its source).
To check your own layer on random inputs, wrap each call in a function of no arguments:

>>> from graphlens.strategies import shapes
>>> layer = torch.nn.Linear(3, 2)
>>> @settings(max_examples=5, database=None, deadline=None)
... @given(shapes(max_dims=1))
... def test_my_layer(batch):
...     check_all(lambda: layer(torch.ones(*batch, 3)).relu().sum())
>>> test_my_layer()
>>> layer.weight.grad is None  # the checks put back the grads they made
True

Where torch is subtler than a law's one-line statement, the law states the refinement
in its docstring: law 1 (a view made inside ``no_grad`` still requires grad), law 4
("reachable" means a next edge enters that very output), law 10 (saved Python numbers
and ``CopySlices`` count as saved).  A violation caused by a known PyTorch defect is a
:class:`TorchIssue` (see :data:`TORCH_ISSUES`).
"""

from __future__ import annotations

import contextlib
import inspect
import sys
import warnings
from typing import Any, Callable, Iterable, NamedTuple

import torch
from torch.overrides import TorchFunctionMode

__all__ = [
    "Law",
    "LAWS",
    "LawViolation",
    "TorchIssue",
    "TORCH_ISSUES",
    "Step",
    "Program",
    "Executed",
    "FunctionProgram",
    "check",
    "check_all",
    "match_snapshot",
    "backward_nodes",
]


# ---------------------------------------------------------------------------------------
# Programs: plain data that runs, prints as Python and runs again the same way
# ---------------------------------------------------------------------------------------

#: Step kinds that make a leaf tensor (a plain constant, a leaf requiring grad, a Parameter).
LEAF_KINDS = ("leaf", "constant", "parameter")


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
        _flatten(out, pairs)
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


def _flatten(obj: Any, out: list) -> None:
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, (tuple, list)):
        for item in obj:
            _flatten(item, out)


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


# ---------------------------------------------------------------------------------------
# Violations and small tools
# ---------------------------------------------------------------------------------------


class LawViolation(AssertionError):
    """A law broke: ``law`` (the :class:`Law`), ``tensor`` (variable name or None),
    ``detail`` (what was observed) and ``source`` (the program that broke it)."""

    def __init__(self, law: "Law", detail: str, *, tensor: str | None = None, source: str = "") -> None:
        self.law = law
        self.tensor = tensor
        self.detail = detail
        self.source = source
        where = f" on {tensor!r}" if tensor else ""
        text = f"law {law.number} ({law.name}) broke{where}: {detail}"
        if source:
            text += "\n\nprogram:\n" + source
        super().__init__(text)


class TorchIssue(LawViolation):
    """A law broke because of a known PyTorch defect, not because the law or graphlens is
    wrong; ``issue`` names it (see :data:`TORCH_ISSUES`)."""

    def __init__(self, law: "Law", detail: str, *, issue: str, tensor: str | None = None, source: str = "") -> None:
        self.issue = issue
        super().__init__(law, f"{detail} [known PyTorch issue {issue!r}: {TORCH_ISSUES[issue]}]", tensor=tensor, source=source)


#: PyTorch defects the laws recognise and report as :class:`TorchIssue`.
TORCH_ISSUES = {
    "aliased-grads": (
        "after one backward, two tensors' .grad share storage (AccumulateGrad kept two views of "
        "one incoming gradient, e.g. w1.sum() + w0.sum() with 0-d w0, w1), so a second backward "
        "adds into both and the grads are wrong; seen on torch 2.13"
    ),
}


def _fail(number: int, subject: Any, detail: str, tensor: str | None = None) -> LawViolation:
    return LawViolation(LAWS[number - 1], detail, tensor=tensor, source=_source_of(subject))


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
        nf = fn.next_functions
        edges[fn] = [(i, c, nr) for i, (c, nr) in enumerate(nf) if c is not None]
        for c, _ in reversed(nf):
            if c is not None and c not in seen:
                stack.append(c)
    return nodes, edges


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's raw bits as integers (NaN payloads and signed zeros included)."""
    t = t.detach().contiguous()
    ints = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.int8}
    if t.is_floating_point() or t.is_complex():
        return t.view(ints[t.element_size()] if not t.is_complex() else torch.int64)
    return t


def _bitwise_equal(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(_bits(a), _bits(b))


def _close(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and torch.allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=True)


def _close_where_finite(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    """Like :func:`_close`, but an element that is not finite on one side need only be
    not finite on the other: where a local derivative is infinite (``sqrt`` at 0), a pass
    that carries a zero gradient there makes ``0 * inf = nan``, while the summed pass
    carries a non-zero one and makes ``inf``."""
    if a is None or b is None or a.shape != b.shape:
        return _close(a, b)
    bad_a, bad_b = ~torch.isfinite(a), ~torch.isfinite(b)
    if not torch.equal(bad_a, bad_b):
        return False
    return torch.allclose(a[~bad_a], b[~bad_b], rtol=1e-5, atol=1e-6)


def _show(t: Any) -> str:
    if t is None:
        return "None"
    if isinstance(t, torch.Tensor):
        return str(t.detach().tolist())
    return repr(t)


@contextlib.contextmanager
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _grad(t: torch.Tensor) -> torch.Tensor | None:
    with _quiet():
        return t.grad


# ---------------------------------------------------------------------------------------
# Watching every torch call (laws 1, 6 and 10)
# ---------------------------------------------------------------------------------------

#: Calls law 1 does not apply to: they are not differentiable functions of their tensor
#: arguments (they read only a shape or a flag, or cut the graph on purpose).
NOT_DIFFERENTIABLE = frozenset(
    {
        "__get__", "__set__", "__repr__", "__format__", "__str__", "detach", "detach_", "requires_grad_",
        "retain_grad", "backward", "zeros_like", "ones_like", "empty_like", "full_like", "rand_like",
        "randn_like", "randint_like", "new_zeros", "new_ones", "new_empty", "new_full", "new_tensor",
        "size", "dim", "numel", "item", "tolist", "register_hook", "_make_subclass",
    }
)


def _tensors_in(obj: Any, out: list) -> None:
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            _tensors_in(item, out)


class _Watch(TorchFunctionMode):
    """Calls ``on_call(func, args, inputs, requires_grad_before, grad_mode, out)`` after
    every torch call made inside it."""

    def __init__(self, on_call: Callable[..., None]) -> None:
        super().__init__()
        self.on_call = on_call

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in ("__get__", "__set__", "__repr__", "__format__", "__str__"):
            return func(*args, **kwargs)
        ins: list = []
        _tensors_in(args, ins)
        _tensors_in(list(kwargs.values()), ins)
        before = [t.requires_grad for t in ins]
        grad_mode = torch.is_grad_enabled()
        out = func(*args, **kwargs)
        self.on_call(func, args, ins, before, grad_mode, out)
        return out


# ---------------------------------------------------------------------------------------
# The laws
# ---------------------------------------------------------------------------------------


def law_requires_grad_propagates(subject: Any, **_: Any) -> None:
    """Law 1: an op's output requires grad iff grad mode is on and an input requires grad.

    Two refinements the plain statement misses: an in-place op's target keeps requiring
    grad if it did (also inside ``no_grad``), and inside ``no_grad`` a *view* of a tensor
    that requires grad still requires grad (it is a leaf without ``grad_fn``: backward
    never reaches it, see law 3)."""
    subject = _subject(subject)
    where: list = [None]
    problems: list[str] = []
    names: dict[int, str] = {}

    def before(i, step):
        where[0] = (i, step)

    def after(i, step, ns):
        for k, v in ns.items():
            if isinstance(v, torch.Tensor):
                names.setdefault(id(v), k)

    def on_call(func, args, ins, rg_before, grad_mode, out):
        name = getattr(func, "__name__", repr(func))
        if not ins or name in NOT_DIFFERENTIABLE or name.startswith("new_"):
            return
        target = args[0] if args and isinstance(args[0], torch.Tensor) else None
        inplace = target is not None and (out is target or name == "__setitem__")
        outs: list = []
        _tensors_in(target if inplace else out, outs)
        expected = (inplace and rg_before[0]) or (grad_mode and any(rg_before))
        for t in outs:
            if not (t.is_floating_point() or t.is_complex()):
                continue
            # Inside no_grad a view of a tensor that requires grad still requires grad: it is
            # a leaf without grad_fn, which backward never reaches (torch 2.x behaviour).
            want = expected or (not grad_mode and not inplace and t._is_view() and rg_before[0])
            if t.requires_grad != want:
                expected = want
                _, step = where[0] or (None, None)
                inputs = ", ".join(f"{names.get(id(x), '?')}:{r}" for x, r in zip(ins, rg_before))
                problems.append(step)
                problems.append(
                    f"{name} in step `{step.code if step else '?'}` gave requires_grad={t.requires_grad}, expected "
                    f"{expected} (grad mode {'on' if grad_mode else 'off'}, inputs' requires_grad {inputs}"
                    f"{', in-place' if inplace else ''})"
                )

    with _Watch(on_call):
        ex = subject.run(before=before, after=after)
    if problems:
        step = problems[0]
        raise _fail(1, subject, problems[1], tensor=step.outputs[0] if step is not None and step.outputs else None)
    del ex


def law_leaf_definition(subject: Any, **_: Any) -> None:
    """Law 2: ``t.is_leaf == (not t.requires_grad) or (t.grad_fn is None)`` for every tensor,
    before and after backward."""
    subject = _subject(subject)
    ex = subject.run()
    for phase in ("before backward", "after backward"):
        for name, t in ex.tensors.items():
            expected = (not t.requires_grad) or (t.grad_fn is None)
            if t.is_leaf != expected:
                raise _fail(
                    2, subject,
                    f"{phase}: is_leaf={t.is_leaf} but requires_grad={t.requires_grad}, grad_fn={type(t.grad_fn).__name__ if t.grad_fn else None}",
                    tensor=name,
                )
        if phase == "before backward":
            ex.backward()


def _snapshot_fn(snapshot: Callable | None) -> Callable:
    if snapshot is None:
        from .snapshot import snapshot as default

        return default
    return snapshot


def _take(snapshot: Callable, ex: Executed):
    return snapshot(*ex.losses, names=dict(ex.tensors))


def match_snapshot(graph: Any, roots: Iterable[torch.Tensor], *, subject: Any = None) -> dict[str, Any]:
    """Match a snapshot's ops one-to-one with the live backward nodes behind ``roots``.

    The match starts from the roots (the snapshot's root tensors are the live ``roots``,
    by identity) and follows each op's ``next`` edges in ``input_nr`` order alongside the
    node's ``next_functions``.  Returns ``{op id: node}``; raises :class:`LawViolation`
    (law 7) where a class name, an edge, an ``AccumulateGrad`` variable or the number of
    ops differs from what :func:`backward_nodes` sees.
    """
    roots = list(roots)
    ex_name = subject.name_of if isinstance(subject, Executed) else (lambda fn: "<unnamed>")
    subj = subject.subject if isinstance(subject, Executed) else subject

    def fail(detail: str, tensor: str | None = None) -> LawViolation:
        return _fail(7, subj, detail, tensor) if subj is not None else LawViolation(LAWS[6], detail, tensor=tensor)

    nodes, walk_edges = backward_nodes(roots)
    ops = {o.id: o for o in graph.ops}
    nexts: dict[str, list] = {o: [] for o in ops}
    for e in graph.edges:
        if e.kind == "next":
            if e.src not in ops or e.dst not in ops:
                raise fail(f"the snapshot has a next edge {e.src} -> {e.dst} between unknown ops")
            nexts[e.src].append(e)
    for lst in nexts.values():
        lst.sort(key=lambda e: e.input_nr)
    op_of: dict[Any, str] = {}
    node_of: dict[str, Any] = {}
    queue: list[tuple[str, Any]] = []

    def pair(op_id: str, node: Any, how: str) -> None:
        known = node_of.get(op_id)
        if known is not None and known is not node:
            raise fail(f"snapshot op {op_id} stands for two different nodes ({type(known).__name__}, {type(node).__name__}) {how}")
        other = op_of.get(node)
        if other is not None and other != op_id:
            raise fail(f"node {type(node).__name__} ({ex_name(node)}) appears twice in the snapshot, as {other} and {op_id}")
        if known is None:
            node_of[op_id] = node
            op_of[node] = op_id
            queue.append((op_id, node))

    graph_roots = list(graph.roots)
    for t in roots:
        if t.grad_fn is None:
            continue
        match = [r for r in graph_roots if graph.tensor(r.id) is t]
        if not match:
            raise fail(f"root tensor {ex_name(t)} is not among the snapshot's roots", ex_name(t))
        if match[0].op is None or match[0].op not in ops:
            raise fail(f"the snapshot's root {match[0].id} has no producing op, but it has grad_fn {type(t.grad_fn).__name__}", ex_name(t))
        pair(match[0].op, t.grad_fn, f"(root {ex_name(t)})")
    while queue:
        op_id, node = queue.pop()
        op = ops[op_id]
        kind = type(node).__name__
        label = f"{kind} ({ex_name(node)})"
        if op.name != kind:
            raise fail(f"snapshot op {op_id} is named {op.name} but the node there is {label}")
        if kind == "AccumulateGrad":
            var = graph.tensor(op.variable) if op.variable is not None else None
            if var is not node.variable:
                raise fail(f"snapshot op {op_id} (AccumulateGrad) does not point at its leaf {ex_name(node.variable)}", ex_name(node.variable))
        want = walk_edges.get(node, [])
        have = nexts[op_id]
        if [(i, nr) for i, _, nr in want] != [(e.input_nr, e.output_nr) for e in have]:
            raise fail(
                f"{label} has next_functions entries (input_nr, output_nr) {[(i, nr) for i, _, nr in want]} -> "
                f"{[type(c).__name__ for _, c, _ in want]}, but snapshot op {op_id} has next edges "
                f"{[(e.input_nr, e.output_nr) for e in have]} -> {[ops[e.dst].name for e in have]}"
            )
        for (i, child, nr), e in zip(want, have):
            pair(e.dst, child, f"(input {i} of {label})")
    if len(node_of) != len(ops) or len(op_of) != len(nodes):
        extra = sorted(set(ops) - set(node_of))
        missing = [f"{type(n).__name__} ({ex_name(n)})" for n in nodes if n not in op_of]
        raise fail(f"the snapshot has {len(ops)} ops for {len(nodes)} backward nodes: unmatched ops {extra}, missing nodes {missing}")
    for t in graph.tensors:  # each captured tensor is the live tensor of its op
        live = graph.tensor(t.id)
        if live is None:
            continue
        if t.op is not None:
            if live.grad_fn is not node_of.get(t.op) or live.output_nr != t.output_nr:
                raise fail(f"snapshot tensor {t.id} says it comes from {t.op} output {t.output_nr}, but its grad_fn differs", t.name)
        if (t.is_leaf, t.requires_grad) != (live.is_leaf, live.requires_grad):
            raise fail(f"snapshot tensor {t.id} records is_leaf={t.is_leaf}, requires_grad={t.requires_grad}; the tensor has {live.is_leaf}, {live.requires_grad}", t.name)
    return node_of


def _reachability(graph: Any, node_of: dict[str, Any]) -> tuple[list, set]:
    """Leaves with an AccumulateGrad op, and the (node, output_nr) pairs some next edge enters."""
    leaves = [graph.tensor(o.variable) for o in graph.ops if o.name == "AccumulateGrad" and o.variable is not None]
    entered = {(id(node_of[e.dst]), e.output_nr) for e in graph.edges if e.kind == "next"}
    return leaves, entered


def law_leaf_grad_iff_reachable(subject: Any, *, snapshot: Callable | None = None, **_: Any) -> None:
    """Law 3: after backward a leaf has ``.grad`` iff it requires grad and the snapshot reaches it."""
    subject = _subject(subject)
    ex = subject.run()
    g = _take(_snapshot_fn(snapshot), ex)
    node_of = match_snapshot(g, ex.losses, subject=ex)
    reached, _ = _reachability(g, node_of)
    del node_of
    ex.backward()
    for name, t in ex.tensors.items():
        if not t.is_leaf:
            continue
        reachable = any(r is t for r in reached)
        expected = t.requires_grad and reachable
        if (t.grad is not None) != expected:
            raise _fail(
                3, subject,
                f"requires_grad={t.requires_grad}, reachable in the snapshot={reachable}, but .grad is {_show(t.grad)}",
                tensor=name,
            )


def law_nonleaf_grad_iff_retained(subject: Any, *, snapshot: Callable | None = None, **_: Any) -> None:
    """Law 4: after backward a non-leaf has ``.grad`` iff it retains grad and is reachable
    (a root, or the output a next edge of the snapshot enters)."""
    subject = _subject(subject)
    ex = subject.run()
    g = _take(_snapshot_fn(snapshot), ex)
    node_of = match_snapshot(g, ex.losses, subject=ex)
    _, entered = _reachability(g, node_of)
    facts = {}
    for name, t in ex.tensors.items():
        if not t.is_leaf:
            fn = t.grad_fn
            reachable = any(t is r for r in ex.losses) or (id(fn), t.output_nr) in entered
            facts[name] = reachable
    del node_of
    ex.backward()
    for name, reachable in facts.items():
        t = ex.tensors[name]
        expected = bool(t.retains_grad) and reachable
        grad = _grad(t)
        if (grad is not None) != expected:
            raise _fail(
                4, subject,
                f"retains_grad={t.retains_grad}, reachable in the snapshot={reachable}, but .grad is {_show(grad)}",
                tensor=name,
            )


def _check_no_aliased_grads(number: int, subject: Any, ex: Executed) -> None:
    """Raise :class:`TorchIssue` if two different tensors' ``.grad`` share memory."""
    seen: dict[int, str] = {}
    for name, g in ex.grads().items():
        if g is None or g.numel() == 0:
            continue
        ptr = g.untyped_storage().data_ptr()
        other = seen.get(ptr)
        if other is not None and ex.tensors[other] is not ex.tensors[name]:
            raise TorchIssue(
                LAWS[number - 1],
                f"after the first backward {other}.grad and {name}.grad share storage",
                issue="aliased-grads", tensor=name, source=_source_of(subject),
            )
        seen[ptr] = name


def law_backward_accumulates(subject: Any, **_: Any) -> None:
    """Law 5: backward once per loss (or twice for one loss) accumulates the same grads as
    one backward of the sum of those losses (allclose where finite; where a derivative is
    infinite, both sides are non-finite, though ``nan`` on one may be ``inf`` on the other)."""
    subject = _subject(subject)
    a = subject.run()
    passes = list(a.losses) if len(a.losses) > 1 else [a.losses[0], a.losses[0]]
    for k, loss in enumerate(passes):
        loss.backward(retain_graph=k < len(passes) - 1)
        if k == 0:
            _check_no_aliased_grads(5, subject, a)
    ga = a.grads()
    b = subject.run()
    parts = list(b.losses) if len(b.losses) > 1 else [b.losses[0], b.losses[0]]
    total = parts[0]
    for p in parts[1:]:
        total = total + p
    total.backward()
    gb = b.grads()
    how = "two backward passes" if len(a.losses) > 1 else "backward twice"
    for name in ga.keys() | gb.keys():
        if not _close_where_finite(ga.get(name), gb.get(name)):
            raise _fail(
                5, subject,
                f"{how} gave .grad {_show(ga.get(name))}, one backward of the sum gave {_show(gb.get(name))}",
                tensor=name,
            )


def law_detach_cuts(subject: Any, **_: Any) -> None:
    """Law 6: ``detach()`` gives a leaf that does not require grad, has no grad_fn (no path
    back) and shares storage and version counter with the original."""
    subject = _subject(subject)
    pairs: list = []
    where: list = [None]
    problems: list[str] = []

    def before(i, step):
        where[0] = step

    def on_call(func, args, ins, rg_before, grad_mode, out):
        if getattr(func, "__name__", "") != "detach" or not ins or not isinstance(out, torch.Tensor):
            return
        src = ins[0]
        step = where[0]
        code = step.code if step is not None else "?"
        if not out.is_leaf or out.requires_grad or out.grad_fn is not None:
            problems.append(f"`{code}` gave is_leaf={out.is_leaf}, requires_grad={out.requires_grad}, grad_fn={out.grad_fn}")
        if out.data_ptr() != src.data_ptr() or out.untyped_storage().data_ptr() != src.untyped_storage().data_ptr():
            problems.append(f"`{code}` gave a tensor with its own storage, not the original's")
        if out._version != src._version or not torch.equal(_bits(out), _bits(src)):
            problems.append(f"`{code}` gave version {out._version} / values {_show(out)}, original has {src._version} / {_show(src)}")
        pairs.append((step, src, out))

    with _Watch(on_call):
        ex = subject.run(before=before)
    if problems:
        raise _fail(6, subject, problems[0])
    for step, src, out in pairs:  # later in-place changes show in both: one storage, one version counter
        name = step.outputs[0] if step is not None and step.outputs else None
        if out.untyped_storage().data_ptr() != src.untyped_storage().data_ptr() or out._version != src._version:
            raise _fail(6, subject, f"at the end the detached tensor (version {out._version}) and its original (version {src._version}) no longer share storage", name)
    del ex


def law_snapshot_is_next_functions(subject: Any, *, snapshot: Callable | None = None, **_: Any) -> None:
    """Law 7: the snapshot's ops and next edges are exactly the nodes and ``next_functions``
    entries a plain walk sees (before and after backward)."""
    subject = _subject(subject)
    ex = subject.run()
    take = _snapshot_fn(snapshot)
    g = _take(take, ex)
    match_snapshot(g, ex.losses, subject=ex)
    ex.backward()
    g2 = _take(take, ex)
    match_snapshot(g2, ex.losses, subject=ex)
    strip = lambda graph: ([(o.id, o.name, o.variable) for o in graph.ops], [e for e in graph.edges if e.kind == "next"])  # noqa: E731
    if strip(g) != strip(g2):
        raise _fail(7, subject, "the snapshot taken after backward has other ops or next edges than the one taken before")


def law_transparent(subject: Any, **_: Any) -> None:
    """Law 8: values and grads are bitwise identical (NaNs included) with and without
    ``graphlens.trace()`` and ``graphlens.snapshot()``."""
    from .snapshot import snapshot
    from .trace import trace

    subject = _subject(subject)
    plain = subject.run()
    plain.backward()
    runs = {}
    try:
        with trace():
            traced = subject.run()
            traced.backward()
        runs["graphlens.trace()"] = traced
    except Exception as exc:  # noqa: BLE001 - a crash of the recorder is a broken law
        raise _fail(8, subject, f"graphlens.trace() raised {type(exc).__name__}: {exc}") from exc
    if torch._C._is_torch_function_mode_enabled():
        raise _fail(8, subject, "graphlens.trace() left a TorchFunctionMode active")
    snap = subject.run()
    try:
        snapshot(*snap.losses, names=dict(snap.tensors))
    except Exception as exc:  # noqa: BLE001
        raise _fail(8, subject, f"graphlens.snapshot() raised {type(exc).__name__}: {exc}") from exc
    snap.backward()
    runs["graphlens.snapshot()"] = snap
    want = plain.grads()
    for how, run in runs.items():
        for name, t in plain.tensors.items():
            other = run.tensors.get(name)
            if other is None or not _bitwise_equal(t, other):
                raise _fail(8, subject, f"under {how} the value is {_show(other)}, plainly {_show(t)}", name)
        got = run.grads()
        for name in want.keys() | got.keys():
            if not _bitwise_equal(want.get(name), got.get(name)):
                raise _fail(8, subject, f"under {how} .grad is {_show(got.get(name))}, plainly {_show(want.get(name))}", name)


def law_zero_grad(subject: Any, **_: Any) -> None:
    """Law 9: ``optimizer.zero_grad()`` sets every registered parameter's grad to None
    (zeros with ``set_to_none=False``) and touches no other tensor's grad."""
    subject = _subject(subject)
    ex = subject.run()
    rg_leaves = _unique(t for t in ex.leaves.values() if t.is_leaf and t.requires_grad)  # in-place may make a leaf a non-leaf
    params = [p for p in ex.parameters if p.is_leaf] or rg_leaves
    if not params:
        return
    others = [t for t in rg_leaves if not any(t is p for p in params)]
    opt = torch.optim.SGD(params, lr=0.1)
    ex.backward(retain_graph=True)
    first = [None if p.grad is None else p.grad.clone() for p in params]
    kept = [None if t.grad is None else t.grad.clone() for t in others]
    opt.zero_grad()
    for p in params:
        if p.grad is not None:
            raise _fail(9, subject, f"after zero_grad() .grad is {_show(p.grad)}, expected None", ex.name_of(p))
    for t, g in zip(others, kept):
        if not _bitwise_equal(t.grad, g):
            raise _fail(9, subject, f"zero_grad() changed the grad of a tensor not registered with the optimizer: {_show(g)} -> {_show(t.grad)}", ex.name_of(t))
    ex.backward(retain_graph=True)
    for p, g in zip(params, first):
        if not _bitwise_equal(p.grad, g):
            raise _fail(9, subject, f"backward after zero_grad() gave .grad {_show(p.grad)}, the first backward {_show(g)}", ex.name_of(p))
    had = [p.grad is not None for p in params]
    opt.zero_grad(set_to_none=False)
    for p, h in zip(params, had):
        g = p.grad
        if h and (g is None or g.shape != p.shape or bool((g != 0).any())):
            raise _fail(9, subject, f"after zero_grad(set_to_none=False) .grad is {_show(g)}, expected zeros", ex.name_of(p))
        if not h and g is not None:
            raise _fail(9, subject, f"zero_grad(set_to_none=False) made a grad {_show(g)} where there was none", ex.name_of(p))


_SAVED_KEY = "graphlens.laws.saved"


def _holds_saved_tensor(fn: Any) -> bool:
    """Whether a node holds a tensor among its ``_saved_*`` attributes (before backward)."""
    for attr in dir(fn):
        if attr.startswith("_saved_"):
            try:
                value = getattr(fn, attr)
            except RuntimeError:
                return True  # already freed: it did hold one
            items = value if isinstance(value, (tuple, list)) else (value,)
            if any(isinstance(v, torch.Tensor) for v in items):
                return True
    return False


def law_saved_freed(subject: Any, **_: Any) -> None:
    """Law 10: a second backward raises iff some node it would run saved a tensor during
    forward; with ``retain_graph=True`` it never raises.

    "Saved" is what ``saved_tensors_hooks`` see being packed, plus two things the plain
    statement misses: the Python numbers an op keeps as 0-d "wrapped number" tensors
    (``w * 0.5`` keeps ``0.5``; backward frees them, but the hooks never see them), and a
    ``CopySlices`` node (``h[0] = y``), which saves no tensor but drops the node it wraps
    when backward releases the graph."""
    subject = _subject(subject)
    packed = [0]
    marked: list = []

    def pack(t):
        packed[0] += 1
        return t

    def on_call(func, args, ins, rg_before, grad_mode, out):
        if packed[0] == 0:
            return
        packed[0] = 0
        outs: list = []
        _tensors_in(out, outs)
        target = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if target is not None and (out is target or getattr(func, "__name__", "") == "__setitem__"):
            outs.append(target)  # an in-place op: its node is the target's new grad_fn
        for t in outs:
            if t.grad_fn is not None:
                t.grad_fn.metadata[_SAVED_KEY] = True
                marked.append(t.grad_fn)

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), _Watch(on_call):
        a = subject.run()
    nodes, _ = backward_nodes(a.losses)
    saving = [n for n in nodes if n.metadata.get(_SAVED_KEY)]
    # A Python number an op saved (w * 0.5 keeps 0.5 as a 0-d "wrapped number" tensor)
    # is freed by backward like any saved tensor, but saved_tensors_hooks never see it.
    wrapped = [n for n in nodes if not n.metadata.get(_SAVED_KEY) and _holds_saved_tensor(n)]
    # CopySlices (an in-place op on a view, x[0] = y) saves no tensor, but backward drops
    # the node it wraps, so it cannot run twice either.
    copies = [n for n in nodes if type(n).__name__ == "CopySlices"]
    saved = bool(saving or wrapped or copies)
    what = ", ".join(
        [f"{type(n).__name__} ({a.name_of(n)})" for n in saving[:3]]
        + [f"{type(n).__name__} ({a.name_of(n)}, a saved Python number)" for n in wrapped[:3]]
        + [f"CopySlices ({a.name_of(n)}, drops its wrapped node)" for n in copies[:3]]
    ) or "no node"
    del nodes, saving, marked, a

    b = subject.run()
    b.backward()
    try:
        b.backward()
        raised = None
    except RuntimeError as exc:
        raised = exc
    if saved and raised is None:
        raise _fail(10, subject, f"{what} saved tensors during forward, yet a second backward ran without error")
    if not saved and raised is not None:
        raise _fail(10, subject, f"nothing reachable saved a tensor, yet a second backward raised: {raised}")
    if raised is not None and "second time" not in str(raised):
        raise _fail(10, subject, f"the second backward raised an unexpected error: {raised}")
    c = subject.run()
    try:
        c.backward(retain_graph=True)
        c.backward(retain_graph=True)
        c.backward()
    except RuntimeError as exc:
        raise _fail(10, subject, f"backward with retain_graph=True then backward again raised: {exc}") from exc


class Law(NamedTuple):
    """One law: its number, a short name, a one-line statement and its check."""

    number: int
    name: str
    statement: str
    check: Callable[..., None]


#: The ten laws of the design brief, in order.
LAWS: tuple[Law, ...] = (
    Law(1, "requires-grad-propagates", "An op's output requires grad iff grad mode is on and an input requires grad.", law_requires_grad_propagates),
    Law(2, "leaf-definition", "t.is_leaf == (not t.requires_grad) or (t.grad_fn is None).", law_leaf_definition),
    Law(3, "leaf-grad-iff-reachable", "After backward a leaf has .grad iff it requires grad and the snapshot reaches it.", law_leaf_grad_iff_reachable),
    Law(4, "nonleaf-grad-iff-retained", "After backward a non-leaf has .grad iff it retains grad and is reachable.", law_nonleaf_grad_iff_retained),
    Law(5, "backward-accumulates", "Two backward passes accumulate: grads equal one backward of the sum.", law_backward_accumulates),
    Law(6, "detach-cuts", "detach() gives a leaf with no path to the original and the same storage.", law_detach_cuts),
    Law(7, "snapshot-is-next-functions", "The snapshot's ops and edges are exactly what next_functions exposes.", law_snapshot_is_next_functions),
    Law(8, "transparent", "Grads and values are bitwise identical with and without trace/snapshot.", law_transparent),
    Law(9, "zero-grad", "zero_grad() leaves registered params' grads None (set_to_none=False: zeros).", law_zero_grad),
    Law(10, "saved-freed", "A second backward raises iff something was saved (or a CopySlices ran), unless retain_graph=True.", law_saved_freed),
)


def _law(law: int | str | Law) -> Law:
    if isinstance(law, Law):
        return law
    for entry in LAWS:
        if law == entry.number or law == entry.name:
            return entry
    raise ValueError(f"unknown law: {law!r} (must be a number 1-{len(LAWS)} or one of {[x.name for x in LAWS]})")


def check(law: int | str | Law, subject: Any, *, snapshot: Callable | None = None) -> None:
    """Check one law (by number, name or :class:`Law`) on ``subject``; raise
    :class:`LawViolation` if it breaks.  ``snapshot`` replaces :func:`graphlens.snapshot`
    for laws 3, 4 and 7 (to test a wrapper of your own)."""
    entry = _law(law)
    subj = _subject(subject)
    try:
        entry.check(subj, snapshot=snapshot)
    finally:
        if isinstance(subj, FunctionProgram):
            subj.restore()


def check_all(subject: Any, *, laws: Iterable[int | str | Law] | None = None, snapshot: Callable | None = None) -> tuple[int, ...]:
    """Check every law (or those in ``laws``) on ``subject`` in order; raise the first
    :class:`LawViolation`, else return the numbers of the laws checked."""
    chosen = [_law(x) for x in (laws if laws is not None else LAWS)]
    subj = _subject(subject)
    try:
        for entry in chosen:
            entry.check(subj, snapshot=snapshot)
    finally:
        if isinstance(subj, FunctionProgram):
            subj.restore()
    return tuple(x.number for x in chosen)
