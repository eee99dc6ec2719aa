"""Laws 1, 2 and 6: the flags torch gives tensors (requires_grad, is_leaf) and what detach() hands back."""

from __future__ import annotations

from typing import Any

import torch

from ..programs import _subject, _tensors_in
from ._base import NOT_DIFFERENTIABLE, _bits, _fail, _show, _Watch

__all__ = ["law_requires_grad_propagates", "law_leaf_definition", "law_detach_cuts"]


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
