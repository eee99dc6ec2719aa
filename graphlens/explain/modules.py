"""Modules the caller's code holds: a parameter of a submodule kept in a plain list or dict is not registered."""

from __future__ import annotations

from types import FrameType
from typing import NamedTuple

import torch

from ..names import _CO_OPTIMIZED, frame_objects_where

__all__ = ["Unregistered", "frame_modules", "unregistered_owner", "tied_names"]

#: How many attributes, and how deep into registered submodules, a module is searched.
_MAX_ATTRS, _MAX_DEPTH = 200, 6


class Unregistered(NamedTuple):
    """A parameter reached through a plain container attribute of a module the caller holds."""

    model: str  # the caller's variable holding the module (``model``)
    attribute: str  # the dotted path to the container attribute (``model.layers``)
    container: str  # ``list``, ``tuple`` or ``dict``
    name: str  # the parameter's full name through the container (``model.layers[0].weight``)

    def sentence(self) -> str:
        return (
            f"{self.name} belongs to a module kept in {self.attribute}, a plain Python {self.container}: nn.Module "
            f"registers submodules assigned as attributes or held in nn.ModuleList / nn.ModuleDict, not those in a "
            f"plain {self.container}, so {self.name} is not among {self.model}.parameters() and an optimizer built "
            f"from {self.model}.parameters() never updates it (nor do {self.model}.to(), .state_dict() or .zero_grad() "
            f"see it)."
        )

    def fix(self) -> str:
        kind = "nn.ModuleDict" if self.container == "dict" else "nn.ModuleList"
        return (
            f"Hold the submodules in an {kind}: {self.attribute} = {kind}(...) in __init__ (plain {self.container} -> "
            f"{kind}); {self.model}.parameters() then includes them, and so does the optimizer built from it."
        )


def frame_modules(frame: FrameType | None) -> list[tuple[str, torch.nn.Module]]:
    """The ``nn.Module`` objects the frame's variables hold (its locals, then its globals),
    read without leaving a cached locals dict behind (as :func:`graphlens.names.frame_candidates`)."""
    if frame is None:
        return []
    out: list[tuple[str, torch.nn.Module]] = frame_objects_where(frame, _is_module, with_globals=False)
    if frame.f_code.co_flags & _CO_OPTIMIZED:
        out.extend((k, v) for k, v in list(frame.f_globals.items()) if isinstance(k, str) and not k.startswith("_") and _is_module(v))
    return out


def _is_module(value) -> bool:
    return isinstance(value, torch.nn.Module)


def _containers(mod: torch.nn.Module, prefix: str, depth: int = 0):
    """``(path, kind, item name, module)`` for each submodule held in a plain list, tuple or
    dict attribute of ``mod`` or of its registered submodules."""
    if depth > _MAX_DEPTH:
        return
    for attr, value in list(vars(mod).items())[:_MAX_ATTRS]:
        if attr.startswith("_"):
            continue
        if isinstance(value, (list, tuple)):
            items = [(f"[{i}]", v) for i, v in enumerate(value)]
        elif isinstance(value, dict):
            items = [(f"[{k!r}]", v) for k, v in value.items()]
        else:
            continue
        for key, sub in items[:_MAX_ATTRS]:
            if isinstance(sub, torch.nn.Module):
                yield f"{prefix}.{attr}", type(value).__name__, f"{prefix}.{attr}{key}", sub
            elif isinstance(sub, (list, tuple)):  # [[Linear, ReLU], ...]: one level further
                for j, inner in enumerate(sub):
                    if isinstance(inner, torch.nn.Module):
                        yield f"{prefix}.{attr}", type(value).__name__, f"{prefix}.{attr}{key}[{j}]", inner
    for name, child in mod.named_children():
        yield from _containers(child, f"{prefix}.{name}", depth + 1)


def unregistered_owner(t: torch.Tensor, modules: list[tuple[str, torch.nn.Module]]) -> Unregistered | None:
    """Where ``t`` sits when it is a parameter of a submodule that one of ``modules`` holds in
    a plain container attribute, and is not among that module's registered parameters."""
    for var, mod in modules:
        try:
            if any(p is t for p in mod.parameters()):
                continue
            for attribute, kind, item, sub in _containers(mod, var):
                for pname, p in sub.named_parameters():
                    if p is t:
                        return Unregistered(var, attribute, kind, f"{item}.{pname}")
        except Exception:  # noqa: BLE001 - a broken module must not break the answer
            continue
    return None


def tied_names(tensor: torch.Tensor, modules: list[tuple[str, torch.nn.Module]]) -> list[str]:
    """Every qualified name one module registers ``tensor`` under (``transformer.wte.weight``
    and ``lm_head.weight``: tied weights), for the first module that registers it under
    several; ``[]`` when none does."""
    seen: set[int] = set()
    for _, module in modules:
        if id(module) in seen:
            continue
        seen.add(id(module))
        try:
            names = [n for n, p in module.named_parameters(remove_duplicate=False) if p is tensor]
        except Exception:  # noqa: BLE001 - a module whose parameters cannot be listed: nothing to say
            continue
        if len(names) > 1:
            return names
    return []
