"""Running a script for the explorer page: its trace, every op named by the module path that ran it."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

from .replay import ScriptRun, replay_script

__all__ = ["module_scopes", "explore_script"]


@contextmanager
def module_scopes() -> Iterator[None]:
    """While the block runs, every ``nn.Module`` call gives the ops a trace records inside it
    that module's dotted path (``transformer.h.0.attn``), as ``trace(module=model)`` does, for
    the traces open on this thread that were given no ``module=`` of their own (those name
    their scopes themselves).  The outermost module called is the model: paths are below it,
    from its ``named_modules()``.  Global module hooks do it, removed on exit (also on an error);
    they only read, so the program's numbers are unchanged."""
    import torch

    from .trace import _OPEN

    local = threading.local()
    owner = threading.get_ident()

    def traces() -> list:
        if threading.get_ident() != owner:
            return []
        return [t for t in _OPEN.get() if t._module is None and t._recording and t._thread == owner]

    def pre(mod, _args) -> None:
        stack = getattr(local, "stack", None)
        if stack is None:
            stack = local.stack = []
        if not stack:  # the model: its submodules are named below it
            stack.append((mod, {id(m): q for q, m in mod.named_modules() if q}, None, ()))
            return
        names = stack[0][1]
        name = names.get(id(mod))
        pushed = ()
        if name is not None:
            pushed = tuple(traces())
            for t in pushed:
                t._rec.scopes.append(name)
        stack.append((mod, names, name, pushed))

    def post(mod, _args, _out) -> None:
        stack = getattr(local, "stack", None)
        if not stack or stack[-1][0] is not mod:
            return
        _, _, name, pushed = stack.pop()
        for t in pushed:
            scopes = t._rec.scopes
            if scopes and scopes[-1] == name:
                scopes.pop()

    hooks = torch.nn.modules.module
    handles = [hooks.register_module_forward_pre_hook(pre)]
    try:
        handles.append(hooks.register_module_forward_hook(post, always_call=True))
        yield
    finally:
        while handles:
            handles.pop().remove()


def explore_script(path: str, argv: tuple[str, ...] = ()) -> ScriptRun:
    """Run the script at ``path`` as :func:`graphlens.replay.replay_script` does (its exit,
    its exception and its variables' names alike), with the ops of every module call named by
    module path (:func:`module_scopes`), so the explorer page opens by module."""
    with module_scopes():
        return replay_script(path, argv)
