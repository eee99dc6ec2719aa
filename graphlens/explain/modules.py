"""Modules the caller's code holds: a parameter of a submodule kept in a plain list or dict is not registered."""

from __future__ import annotations

import inspect
import re
from types import FrameType
from typing import Iterator, NamedTuple

import torch

from ..names import _CO_OPTIMIZED, frame_objects_where
from .evidence import in_optimizer
from .kinds import Cut

__all__ = ["Unregistered", "frame_modules", "frame_optimizer", "missing_from_optimizer", "stale_in_optimizer", "stale_hint", "unowned", "attribute_path", "unregistered_owner", "tied_names", "MadeInForward", "made_in_forward", "own_forwards", "unregistered_hint"]

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
    return issubclass(type(value), torch.nn.Module)  # (by its type alone: a proxy's __class__ is its own code)


def _is_optimizer(value) -> bool:
    return issubclass(type(value), torch.optim.Optimizer)


def frame_optimizer(frame: FrameType | None, tensor) -> torch.optim.Optimizer | None:
    """The optimizer of a parameter the caller asks about without ``optimizer=``: among
    the optimizers the caller's variables hold (locals, then globals), the one that holds
    ``tensor``, else the first (which then does not hold it: none does); None when ``tensor`` is
    no ``nn.Parameter`` (an input leaf belongs in no optimizer) or the caller holds no optimizer."""
    if frame is None or not isinstance(tensor, torch.nn.Parameter):
        return None
    found: list = frame_objects_where(frame, _is_optimizer, with_globals=False)
    if frame.f_code.co_flags & _CO_OPTIMIZED:
        found.extend((k, v) for k, v in list(frame.f_globals.items()) if isinstance(k, str) and not k.startswith("_") and _is_optimizer(v))
    for _, opt in found:
        if in_optimizer(opt, tensor, None):
            return opt
    return found[0][1] if found else None


def stale_in_optimizer(tensor: torch.Tensor, optimizer: torch.optim.Optimizer, modules, tensors=()) -> tuple[str, int] | None:
    """``(module variable, count)`` when ``optimizer`` holds Parameters that no module among the
    caller's ``modules`` has (nor any of its ``tensors``) while one of those modules has
    ``tensor``: what an optimizer built before its model's layers were replaced or moved holds."""
    owners = []
    known: set[int] = {id(t) for t in tensors}
    for name, mod in modules:
        try:
            own = {id(p) for p in mod.parameters()}
        except Exception:  # noqa: BLE001 - a module whose parameters cannot be listed says nothing
            continue
        known |= own
        if id(tensor) in own:
            owners.append(name)
    stale = [p for group in optimizer.param_groups for p in group["params"] if id(p) not in known]
    return (owners[0], len(stale)) if owners and stale else None


def attribute_path(tensor, modules) -> str | None:
    """``model.layers.0.alpha``: where a module among the caller's variables keeps ``tensor`` as a
    plain attribute (not a registered Parameter or buffer), whatever name the caller uses for it."""
    for name, mod in modules:
        try:
            subs = list(mod.named_modules())[:512]
        except Exception:  # noqa: BLE001 - a module that cannot list its submodules says nothing
            continue
        for sub, m in subs:
            for attr, value in list(vars(m).items())[:_MAX_ATTRS]:
                if value is tensor and not attr.startswith("_"):
                    return ".".join(x for x in (name, sub, attr) if x)
    return None


def stale_hint(live, optimizer, frame: FrameType | None) -> tuple | None:
    """For a parameter ``optimizer`` does not hold, read from the caller's frame: :func:`stale_in_optimizer`'s
    ``(model, count)``, else ``(module, optimizers that hold the same parameters)`` when no optimizer
    among the caller's variables holds any parameter of the module that has it (:func:`unowned`)."""
    from ..names import frame_candidates

    if optimizer is None or frame is None or not isinstance(live, torch.nn.Parameter) or in_optimizer(optimizer, live, None):
        return None
    modules = frame_modules(frame)
    return stale_in_optimizer(live, optimizer, modules, [t for _, t in frame_candidates(frame)]) or unowned(live, modules, frame)


def unowned(t: torch.Tensor, modules: list[tuple[str, torch.nn.Module]], frame: FrameType) -> tuple[str, list[str]] | None:
    """``(module, optimizers)``: the smallest module among the caller's that has ``t``, when no optimizer
    among the caller's variables holds any of its parameters, with the optimizers (two or more) that
    hold exactly the same parameters as each other (one of them was likely built from the wrong module)."""
    found: list = frame_objects_where(frame, _is_optimizer, with_globals=False)
    if frame.f_code.co_flags & _CO_OPTIMIZED:
        found.extend((k, v) for k, v in list(frame.f_globals.items()) if isinstance(k, str) and not k.startswith("_") and _is_optimizer(v))
    held = {name: frozenset(id(p) for g in opt.param_groups for p in g["params"]) for name, opt in found}
    owners = []
    for name, mod in modules:
        try:
            own = [id(p) for p in mod.parameters()]
        except Exception:  # noqa: BLE001 - a module whose parameters cannot be listed says nothing
            continue
        if id(t) in own:
            owners.append((len(own), name, frozenset(own)))
    if not owners or not held:
        return None
    _, owner, own = min(owners)
    if any(own & ids for ids in held.values()):
        return None
    twins = [n for n, ids in held.items() if sum(ids == other for other in held.values()) > 1]
    return owner, twins


def missing_from_optimizer(who: str, stale: tuple | None) -> tuple[str, str]:
    """``(sentence, fix)`` for parameter ``who`` that the optimizer does not hold; ``stale`` is what
    :func:`stale_hint` found (the sentence is empty without it)."""
    from .context import as_code

    code = as_code(who)  # (model.0.weight is model[0].weight in Python)
    add = (f"give it to the optimizer: include {code} in the parameters it is built from, or add it with "
           f"optimizer.add_param_group({{'params': [{code}]}}).")
    if stale is None:
        return "", add[0].upper() + add[1:]
    if isinstance(stale[1], list):  # (a module none of whose parameters any optimizer holds)
        module, twins = stale
        both = " and ".join(twins) if len(twins) == 2 else ", ".join(twins)
        return (
            f"No optimizer among your variables holds any parameter of {module}, the module {who} belongs to"
            + (f"; {both} hold exactly the same parameters: if one of them is meant for {module}, it was built from the "
               f"wrong module." if twins else "."),
            f"Build the optimizer meant for {module} from {module}.parameters()"
            + (f" (one of {both}, which now hold the same parameters)" if twins else "") + ", so that its step updates them.",
        )
    model, n = stale
    return (
        f"The optimizer holds {n} Parameter{'s' if n != 1 else ''} that no module among your variables has: if "
        f"{'they are' if n != 1 else 'it is'} what {model}'s layers held before they were replaced or moved (.to() or a "
        f"dtype change can make new Parameters), the optimizer was built before that change and updates the old ones.",
        f"Build the optimizer after the last change to {model} (replacing layers, moving it with .to()), from "
        f"{model}.parameters() as they are then; else {add}",
    )


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


class MadeInForward(NamedTuple):
    """A Parameter no module among the caller's variables registers, where one of their
    ``forward`` methods creates a layer of a kind that has such a Parameter."""

    model: str  # the caller's variable holding the model (``model``)
    owner: str  # the class whose forward creates the layer (``InvertedResidualBlock``)
    layer: str  # the layer created (``nn.Conv2d``)
    lineno: int  # the line in the class's file
    code: str  # that line's text
    name: None = None  # (no name to give the tensor: it is the caller's own variable)

    def sentence(self) -> str:
        return (
            f"It is a Parameter that no module among your variables registers ({self.model}.parameters() does not hold "
            f"it), and {self.owner}.forward creates a layer at line {self.lineno} ({self.code}): a layer made inside forward "
            f"is a new one, with new random weights, at every call: the step updates nothing that the next call uses, and "
            f"an optimizer built from {self.model}.parameters() never holds it."
        )

    def as_cut(self) -> Cut:
        return Cut("unregistered_module", self.layer, None, None, self.lineno, self.code, self.sentence(), known=False)

    def fix(self) -> str:
        return (
            f"Create the layer once in {self.owner}.__init__ (self.proj = {self.layer}(...)) and call it in forward "
            f"(self.proj(x)): it is then registered, in {self.model}.parameters(), and trained."
        )


#: Layer constructors a forward may call, with the dimensions of their Parameters.
_LAYER_DIMS = {"Linear": (1, 2), "Bilinear": (1, 3), "Conv1d": (1, 3), "Conv2d": (1, 4), "Conv3d": (1, 5),
               "ConvTranspose1d": (1, 3), "ConvTranspose2d": (1, 4), "ConvTranspose3d": (1, 5), "Embedding": (2,),
               "BatchNorm1d": (1,), "BatchNorm2d": (1,), "BatchNorm3d": (1,), "LayerNorm": (1, 2, 3, 4), "GroupNorm": (1,),
               "InstanceNorm2d": (1,), "PReLU": (1,), "LSTM": (1, 2), "GRU": (1, 2), "RNN": (1, 2), "MultiheadAttention": (1, 2)}
_LAYER_CALL = re.compile(r"\b(?:torch\.)?nn\.([A-Z]\w*)\(")


def own_forwards(classes) -> Iterator[tuple[type, list[str], int]]:
    """``(class, source lines, first line number)`` of the ``forward`` each of ``classes`` defines itself,
    for the program's own classes (not torch's), each class once, where its source can be read."""
    for cls in dict.fromkeys(classes):
        forward = cls.__dict__.get("forward")
        if forward is None or (cls.__module__ or "").startswith("torch."):
            continue
        try:
            lines, first = inspect.getsourcelines(forward)
        except (OSError, TypeError):
            continue
        yield cls, lines, first


def made_in_forward(t: torch.Tensor, modules: list[tuple[str, torch.nn.Module]]) -> MadeInForward | None:
    """Where ``t``, an ``nn.Parameter`` that none of ``modules`` registers, may come from: a line
    of one of their own classes' ``forward`` (not torch's) that creates a layer whose Parameters
    have ``t``'s number of dimensions.  None without such a line (nothing is guessed)."""
    if not isinstance(t, torch.nn.Parameter) or not modules:
        return None
    dims = t.dim()
    for var, mod in modules:
        try:
            if any(p is t for p in mod.parameters()):
                return None  # (registered: not this case)
            classes = list(dict.fromkeys(type(m) for m in list(mod.modules())[:512]))
        except Exception:  # noqa: BLE001 - a broken module says nothing
            continue
        for cls, lines, first in own_forwards(classes):
            for k, text in enumerate(lines):
                for found in _LAYER_CALL.finditer(text.split("#", 1)[0]):
                    if dims in _LAYER_DIMS.get(found.group(1), ()):
                        return MadeInForward(var, cls.__qualname__, f"nn.{found.group(1)}", first + k, text.strip())
    return None


def unregistered_hint(t: torch.Tensor, optimizer, modules: list[tuple[str, torch.nn.Module]]) -> Unregistered | MadeInForward | None:
    """Why a leaf that requires grad and that an optimizer (``optimizer``, when given) does not hold
    is not among the parameters of the caller's ``modules``: a submodule kept in a plain container
    (:func:`unregistered_owner`), or a layer made inside a forward (:func:`made_in_forward`)."""
    if not (t.is_leaf and t.requires_grad) or (optimizer is not None and in_optimizer(optimizer, t, None)):
        return None
    return unregistered_owner(t, modules) or made_in_forward(t, modules)


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
