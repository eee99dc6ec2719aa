"""Hypothesis strategies that draw small random autograd programs which print as runnable Python.

A drawn :class:`~graphlens.programs.Program` makes a few leaves from literal values (some
requiring grad, some ``nn.Parameter``), applies a random sequence of operations
(elementwise with broadcasting, reductions, matmul, views, indexing, cat/stack,
multi-output ``split``/``unbind``/``chunk``, in-place ops, ``detach()``,
``retain_grad()``), some of them inside ``torch.no_grad()`` blocks, and ends in one or
two scalar losses.  Its ``repr`` is its source, so hypothesis shows a failing example
as a script you can paste and run.

Programs are built by running them while they are drawn, so every step fits the real
shapes, every drawn program runs and backward through it succeeds.  Left out on purpose
(rather than checked as programs that raise):

- a statement that raises (in-place on a leaf that requires grad, on a view made by a
  multi-output op, ...) is not kept;
- an in-place statement is only drawn on a tensor whose storage no backward node has
  saved (otherwise backward raises "modified by an inplace operation");
- a statement after which PyTorch refuses to read some tensor's ``grad_fn`` (a view made
  inside ``no_grad`` whose base is then modified in place) is not kept: the laws speak
  of ``is_leaf`` and ``grad_fn``, which then raise.

>>> from hypothesis import given, settings
>>> from graphlens.strategies import programs
>>> @settings(max_examples=3, database=None, deadline=None)
... @given(programs(max_ops=3))
... def test_runs(program):
...     ex = program.run()
...     ex.backward()
>>> test_runs()
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any

import torch
from hypothesis import assume
from hypothesis import strategies as st

from .programs import LEAF_KINDS, OP_KINDS, Executed, Program, Step

__all__ = ["VALUES", "OP_KINDS", "shapes", "leaves", "programs", "Program", "Step", "Executed"]

#: The literal values leaves are made of (hypothesis shrinks towards the first one).
VALUES = (1.0, -0.5, 2.0, 0.5, -1.0, 1.5, -2.0, 0.25, 3.0, 0.0)

_UNARY = (
    "{x}.tanh()", "torch.sigmoid({x})", "-{x}", "{x} * 0.5", "{x} + 1.0", "{x}.exp()", "{x}.sin()", "{x}.relu()",
    "{x}.abs()", "{x} ** 2", "{x}.clamp(-1.0, 1.0)", "{x}.clone()", "{x}.sqrt()", "{x}.log()",
)
_BINARY = ("{x} + {y}", "{x} * {y}", "{x} - {y}", "{x} / {y}", "torch.maximum({x}, {y})", "torch.where({x} > {y}, {x}, {y})")


def shapes(*, max_dims: int = 3, max_side: int = 3) -> st.SearchStrategy[tuple[int, ...]]:
    """Tensor shapes with up to ``max_dims`` dimensions of 1 to ``max_side`` elements
    (``()``, a 0-d scalar, is the simplest)."""
    if max_dims < 0 or max_side < 1:
        raise ValueError(f"max_dims must be >= 0 and max_side >= 1, not {max_dims} and {max_side}")
    return st.lists(st.integers(1, max_side), max_size=max_dims).map(tuple)


def _nest(flat: list[float], shape: tuple[int, ...]) -> Any:
    if not shape:
        return flat[0]
    step = len(flat) // shape[0]
    return [_nest(flat[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]


@st.composite
def leaves(
    draw,
    *,
    min_leaves: int = 1,
    max_leaves: int = 3,
    max_dims: int = 3,
    max_side: int = 3,
    kinds: tuple[str, ...] = LEAF_KINDS,
    require_grad: bool = True,
) -> tuple[Step, ...]:
    """Steps that make leaf tensors from literals: ``w0 = torch.tensor(..., requires_grad=True)``
    (kind ``"leaf"``), ``x1 = torch.tensor(...)`` (``"constant"``) and
    ``p2 = torch.nn.Parameter(torch.tensor(...))`` (``"parameter"``).  With
    ``require_grad`` at least one of them requires grad."""
    bad = [k for k in kinds if k not in LEAF_KINDS]
    if bad or not kinds:
        raise ValueError(f"unknown leaf kinds {bad or kinds!r} (must be among {list(LEAF_KINDS)})")
    if not 1 <= min_leaves <= max_leaves:
        raise ValueError(f"min_leaves and max_leaves must satisfy 1 <= min_leaves <= max_leaves, not {min_leaves}, {max_leaves}")
    n = draw(st.integers(min_leaves, max_leaves))
    out = []
    for i in range(n):
        kind = draw(st.sampled_from(kinds))
        if require_grad and i == n - 1 and all(s.kind == "constant" for s in out) and kind == "constant":
            kind = next((k for k in kinds if k != "constant"), "leaf")
        shape = draw(shapes(max_dims=max_dims, max_side=max_side))
        size = 1
        for s in shape:
            size *= s
        values = draw(st.lists(st.sampled_from(VALUES), min_size=size, max_size=size))
        literal = repr(_nest(values, shape))
        name = {"leaf": "w", "constant": "x", "parameter": "p"}[kind] + str(i)
        if kind == "leaf":
            code = f"{name} = torch.tensor({literal}, requires_grad=True)"
        elif kind == "constant":
            code = f"{name} = torch.tensor({literal})"
        else:
            code = f"{name} = torch.nn.Parameter(torch.tensor({literal}))"
        out.append(Step(code, kind, (), (name,)))
    return tuple(out)


class _Builder:
    """Runs a program while it is drawn, so each new step fits the live tensors."""

    def __init__(self) -> None:
        self.steps: list[Step] = []
        self.ns: dict[str, Any] = {}
        self.saved: set[int] = set()
        self.count = 0
        self._reset()

    def _reset(self) -> None:
        self.ns = {"torch": torch}
        self.saved = set()

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        self.saved.add(t.untyped_storage().data_ptr())
        return t

    def _exec(self, step: Step) -> None:
        with warnings.catch_warnings(), torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t):
            warnings.simplefilter("ignore")
            with torch.no_grad() if step.no_grad else contextlib.nullcontext():
                exec(compile(step.code, "<graphlens strategy>", "exec"), self.ns)  # noqa: S102

    def add(self, step: Step) -> bool:
        """Run and keep ``step``; if it raises, forget it and rebuild the state."""
        try:
            self._exec(step)
            for s in self.steps:  # PyTorch refuses to read grad_fn of some views: leave those out
                for n in s.binds:
                    t = self.ns.get(n)
                    if isinstance(t, torch.Tensor):
                        t.grad_fn  # noqa: B018
        except Exception:  # noqa: BLE001 - an illegal statement is simply not drawn
            self._reset()
            for s in self.steps:
                self._exec(s)
            return False
        self.steps.append(step)
        return True

    def tensors(self) -> list[tuple[str, torch.Tensor]]:
        return [(n, self.ns[n]) for s in self.steps for n in s.binds if isinstance(self.ns.get(n), torch.Tensor)]

    def fresh(self, prefix: str = "h") -> str:
        name = f"{prefix}{self.count}"
        self.count += 1
        return name

    def is_saved(self, t: torch.Tensor) -> bool:
        return t.untyped_storage().data_ptr() in self.saved


def _pick(draw, items: list) -> Any:
    """One of ``items``, shrinking towards the last (the most recent tensor)."""
    return items[len(items) - 1 - draw(st.integers(0, len(items) - 1))]


def _broadcasts(a: tuple, b: tuple) -> tuple | None:
    try:
        return tuple(torch.broadcast_shapes(a, b))
    except RuntimeError:
        return None


def _fits(kind: str, t: torch.Tensor, b: _Builder) -> bool:
    """Whether ``t`` can be the main input of an op of family ``kind`` (so that the choice
    of input, not luck, decides, and hypothesis can delete earlier steps when shrinking)."""
    if kind in ("index", "matmul"):
        return t.dim() >= 1
    if kind == "multi":
        return any(s >= 2 for s in t.shape)
    if kind == "inplace":
        return not b.is_saved(t)
    if kind == "retain_grad":
        return t.requires_grad and not t.is_leaf and not t.retains_grad
    return True


def _draw_op(draw, kind: str, b: _Builder, live: list) -> tuple[str, tuple, int] | None:
    """An expression (or statement) of family ``kind``, its inputs and how many names it
    binds (0 for a statement); None when no live tensor fits."""
    fits = [(n, t) for n, t in live if _fits(kind, t, b)]
    if not fits:
        return None
    xn, x = _pick(draw, fits)
    shape, dim = tuple(x.shape), x.dim()
    if kind == "unary":
        return draw(st.sampled_from(_UNARY)).format(x=xn), (xn,), 1
    if kind == "binary":
        ys = [(n, t) for n, t in live if _broadcasts(shape, tuple(t.shape)) is not None]
        yn, _ = _pick(draw, ys)
        return draw(st.sampled_from(_BINARY)).format(x=xn, y=yn), (xn, yn), 1
    if kind == "reduce":
        forms = ["{x}.sum()", "{x}.mean()", "{x}.prod()", "{x}.norm()"]
        if dim:
            forms += ["{x}.sum(dim={d})", "{x}.mean(dim={d}, keepdim=True)", "{x}.amax(dim={d})"]
        d = draw(st.integers(0, max(dim - 1, 0)))
        return draw(st.sampled_from(forms)).format(x=xn, d=d), (xn,), 1
    if kind == "view":
        forms = ["{x}.reshape(-1)", "{x}.view(-1)", "{x}.unsqueeze(0)", "{x}.flatten()"]
        forms.append("{x}.expand(2" + "".join(f", {s}" for s in shape) + ")")
        if dim >= 2:
            forms += ["{x}.transpose(0, 1)", f"{{x}}.permute({', '.join(str(i) for i in reversed(range(dim)))})"]
        if dim <= 2:
            forms.append("{x}.t()")
        if dim and shape[0] == 1:
            forms.append("{x}.squeeze(0)")
        if x.numel() % 2 == 0:
            forms.append("{x}.view(2, -1)")
        return draw(st.sampled_from(forms)).format(x=xn), (xn,), 1
    if kind == "index":
        if not dim:
            return None
        n0 = shape[0]
        i = draw(st.integers(0, n0 - 1))
        j = draw(st.integers(i + 1, n0))
        d = draw(st.integers(0, dim - 1))
        k = draw(st.integers(0, shape[d] - 1))
        forms = [f"{{x}}[{i}]", f"{{x}}[{i}:{j}]", "{x}[::2]", f"{{x}}.select({d}, {k})",
                 f"{{x}}.narrow({d}, {k}, {shape[d] - k})", "{x}[..., -1]"]
        if dim >= 2:
            forms.append(f"{{x}}[:, {min(k, shape[1] - 1)}]")
        return draw(st.sampled_from(forms)).format(x=xn), (xn,), 1
    if kind == "matmul":
        if dim == 0:
            return None
        if dim == 1:
            ys = [(n, t) for n, t in live if tuple(t.shape) == shape or (t.dim() == 2 and t.shape[0] == shape[0])]
        else:
            ys = [(n, t) for n, t in live if t.dim() in (1, 2) and t.shape[0] == shape[-1]] if dim == 2 else []
        choices = [f"{xn} @ {yn}" for yn, _ in ys]
        if dim >= 2:
            choices.append(f"{xn} @ {xn}.transpose(-1, -2)")
        expr = draw(st.sampled_from(choices))
        used = tuple(dict.fromkeys([xn] + [n for n, _ in ys if expr.endswith(" " + n)]))
        return expr, used, 1
    if kind == "cat":
        d = draw(st.integers(0, max(dim - 1, 0)))
        if dim and draw(st.booleans()):
            ys = [(n, t) for n, t in live if t.dim() == dim and all(a == c for k, (a, c) in enumerate(zip(shape, t.shape)) if k != d)]
            yn, _ = _pick(draw, ys)
            return f"torch.cat([{xn}, {yn}], dim={d})", (xn, yn), 1
        ys = [(n, t) for n, t in live if tuple(t.shape) == shape]
        yn, _ = _pick(draw, ys)
        return f"torch.stack([{xn}, {yn}])", (xn, yn), 1
    if kind == "multi":
        ds = [d for d in range(dim) if shape[d] >= 2]
        if not ds:
            return None
        d = draw(st.sampled_from(ds))
        forms = [f"{xn}.unbind({d})", f"{xn}.split(1, dim={d})", f"{xn}.chunk(2, dim={d})", f"{xn}.split([1, {shape[d] - 1}], dim={d})"]
        expr = draw(st.sampled_from(forms))
        with torch.no_grad():
            n = len(eval(expr, b.ns))  # noqa: S307 - our own expression, to count its outputs
        return expr, (xn,), n
    if kind == "inplace":  # only on tensors no node saved: else backward would raise
        ys = [(n, t) for n, t in live if t is not x and _broadcasts(shape, tuple(t.shape)) == shape]
        forms = ["{x}.add_(1.0)", "{x}.mul_(2.0)", "{x}.tanh_()", "{x}.relu_()", "{x}.zero_()"]
        if ys:
            forms += ["{x}.add_({y})", "{x}.mul_({y})", "{x}.copy_({y})"]
        if dim:
            forms.append("{x}[%d] = {y}" % draw(st.integers(0, shape[0] - 1)) if ys else "{x}[0] = 0.0")
        form = draw(st.sampled_from(forms))
        yn = _pick(draw, ys)[0] if "{y}" in form else None
        if yn is not None and "[" in form:
            idx = int(form.split("[")[1].split("]")[0])
            if _broadcasts(tuple(x[idx].shape), tuple(b.ns[yn].shape)) != tuple(x[idx].shape):
                return None
        return form.format(x=xn, y=yn), (xn,) + ((yn,) if yn else ()), 0
    if kind == "detach":
        return f"{xn}.detach()", (xn,), 1
    if kind == "retain_grad":
        return f"{xn}.retain_grad()", (xn,), 0
    raise ValueError(f"unknown op kind: {kind!r} (must be one of {list(OP_KINDS)})")


@st.composite
def programs(
    draw,
    *,
    max_leaves: int = 3,
    max_ops: int = 8,
    max_losses: int = 2,
    max_dims: int = 3,
    max_side: int = 3,
    kinds: tuple[str, ...] = OP_KINDS,
    allow_inplace: bool = True,
    allow_no_grad: bool = True,
    allow_detach: bool = True,
    allow_retain_grad: bool = True,
) -> Program:
    """Random autograd programs: leaves (see :func:`leaves`), up to ``max_ops`` operations
    drawn from ``kinds`` (see :data:`OP_KINDS`), optionally inside ``torch.no_grad()``
    blocks, then 1 to ``max_losses`` scalar losses, each a sum of ``.sum()``/``.mean()``
    of tensors that require grad.  Every drawn program runs and backpropagates."""
    unknown = [k for k in kinds if k not in OP_KINDS]
    if unknown:
        raise ValueError(f"unknown op kinds {unknown} (must be among {list(OP_KINDS)})")
    if max_ops < 0 or not 1 <= max_losses <= 2:
        raise ValueError(f"max_ops must be >= 0 and max_losses 1 or 2, not {max_ops} and {max_losses}")
    off = {"inplace": allow_inplace, "detach": allow_detach, "retain_grad": allow_retain_grad}
    kinds = tuple(k for k in kinds if off.get(k, True))
    b = _Builder()
    for step in draw(leaves(max_leaves=max_leaves, max_dims=max_dims, max_side=max_side)):
        b.add(step)
    no_grad = False
    n_ops = draw(st.integers(0, max_ops)) if kinds else 0
    for _ in range(n_ops):
        if allow_no_grad and draw(st.integers(0, 4)) == 4:
            no_grad = not no_grad
        kind = draw(st.sampled_from(kinds))
        try:
            op = _draw_op(draw, kind, b, b.tensors())
        except RuntimeError:  # a live tensor refused an operation: draw something else
            op = None
        if op is None:
            continue
        expr, inputs, n_out = op
        if n_out == 0:
            b.add(Step(expr, kind, inputs, inputs[:1], no_grad))
            continue
        names = tuple(b.fresh("d" if kind == "detach" else "h") for _ in range(n_out))
        target = names[0] if n_out == 1 else ", ".join(names)
        b.add(Step(f"{target} = {expr}", kind, inputs, names, no_grad))
    losses = []
    for k in range(draw(st.integers(1, max_losses))):
        cands = [(n, t) for n, t in b.tensors() if t.requires_grad]
        assume(cands)
        chosen = list(dict.fromkeys(_pick(draw, cands)[0] for _ in range(draw(st.integers(1, min(3, len(cands)))))))
        terms = [f"{n}.{draw(st.sampled_from(('sum', 'mean')))}()" for n in chosen]
        name = f"loss{k}"
        if b.add(Step(f"{name} = {' + '.join(terms)}", "loss", tuple(chosen), (name,))):
            losses.append(name)
    assume(losses)
    program = Program(b.steps, losses=losses)
    try:  # backward must work on a fresh run (the saved-storage rule makes this the rule)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program.run().backward()
    except RuntimeError:
        assume(False)
    return program
