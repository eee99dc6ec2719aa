"""Naming tensors after the user's variables, parameters and explicit names."""

from __future__ import annotations

import dis
import os
import sys
import weakref
from collections import OrderedDict
from types import FrameType
from typing import Any, Iterator, Mapping

import torch

from ._live.guard import node_unsafe

__all__ = [
    "NameBook", "user_frame", "own_dict", "parsed", "source_line", "strip_comment", "frame_candidates", "frame_values", "frame_objects_where", "store_targets", "loop_variables", "is_internal", "is_library",
    "INTERNAL_MODULES", "CALLER_NAME",
]

#: Modules (and packages, with every module below them) whose frames are never "the
#: caller" when names are inferred: graphlens's machinery.  The claims and demos are
#: user programs and are not listed.
INTERNAL_MODULES = frozenset({
    "graphlens.snapshot", "graphlens.trace", "graphlens.names", "graphlens._util", "graphlens._checks",
    "graphlens._live", "graphlens.explain", "graphlens.replay", "contextlib",
})
#: The name of the one-line function through which a trace calls torch at the user's
#: line (so torch's warnings name that line): its frame looks like the user's, but is not.
CALLER_NAME = "_graphlens_call"
_CO_OPTIMIZED = 0x1
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_MAX_CONTAINER = 64


def is_internal(module: str | None) -> bool:
    """Whether frames of ``module`` (a ``__name__``) belong to graphlens's machinery."""
    if not module:
        return False
    if module in INTERNAL_MODULES:
        return True
    head = module.rpartition(".")[0]
    while head:
        if head in INTERNAL_MODULES:
            return True
        head = head.rpartition(".")[0]
    return False


def _library_dirs() -> tuple[str, ...]:
    import sysconfig

    dirs = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            dirs.add(os.path.realpath(path) + os.sep)
            dirs.add(path + os.sep)
    return tuple(sorted(dirs, key=len, reverse=True))


_LIBRARY_DIRS = _library_dirs()


def is_library(filename: str) -> bool:
    """Whether ``filename`` is installed library code (the standard library, site-packages:
    ``transformers``' loss functions) rather than the user's own: its local variables never
    name the user's tensors."""
    return filename.startswith(_LIBRARY_DIRS)


def user_frame(depth: int = 1) -> FrameType | None:
    """The innermost frame, ``depth`` levels up, that is neither torch's nor one of
    :data:`INTERNAL_MODULES`."""
    frame = sys._getframe(depth + 1)
    while frame is not None:
        filename = frame.f_code.co_filename
        internal = filename.startswith(_TORCH_DIR) or frame.f_code.co_name == CALLER_NAME or (
            # (a doctest runs in a copy of its module's globals, but it is user code)
            not filename.startswith("<") and is_internal(frame.f_globals.get("__name__"))
        )
        if not internal:
            break
        frame = frame.f_back
    return frame


def source_line(filename: str, lineno: int) -> str | None:
    """Line ``lineno`` of ``filename``, stripped and without a trailing comment (None if unknown)."""
    import linecache

    return strip_comment(linecache.getline(filename, lineno)) or None


def parsed(filename: str) -> tuple:
    """``(tree, lines)`` of the source file ``filename``: its :mod:`ast` and its lines as
    :mod:`linecache` holds them (``tree`` None where it does not parse, ``lines`` empty where
    the file is not known)."""
    import ast
    import linecache

    lines = linecache.getlines(filename)
    try:
        return ast.parse("".join(lines)), lines
    except (SyntaxError, ValueError):
        return None, lines


def strip_comment(line: str) -> str:
    """A source line, stripped, without its trailing comment (a ``#`` outside quotes)."""
    quote = None
    for k, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#":
            return line[:k].strip()
    return line.strip()


def _items(mapping: Mapping[str, Any], prefix: str = "", models: list | None = None) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, tensor)`` for the tensors directly in ``mapping``, then one level into
    lists, tuples, dicts and modules; with ``models``, a module (and one an object of the
    program holds) is not walked but appended there as ``(name, module)``."""
    later: list[tuple[str, torch.Tensor]] = []

    def model(name: str, module: torch.nn.Module) -> None:
        if models is None:
            later.extend(_module_items(name, module))
        else:
            models.append((name, module))

    for key, value in list(mapping.items()):
        if type(key) is not str or key.startswith("_") or not key.isidentifier():
            continue  # (private, or a tool's own: pytest's assertion rewriting stores in @py_assert1)
        name = prefix + key
        cls = type(value)  # (by its type alone: a proxy's __class__ is its own code, never run by graphlens)
        if issubclass(cls, torch.Tensor):
            yield name, value
        elif issubclass(cls, torch.nn.Module):
            model(name, value)
        elif issubclass(cls, (list, tuple)) and 0 < len(value) <= _MAX_CONTAINER:
            later.extend((f"{name}[{i}]", t) for i, t in enumerate(value) if issubclass(type(t), torch.Tensor))
        elif issubclass(cls, dict) and 0 < len(value) <= _MAX_CONTAINER:
            later.extend((f"{name}[{k!r}]", t) for k, t in value.items() if issubclass(type(t), torch.Tensor))
        elif issubclass(cls, _Optimizer):
            try:
                OPTIMIZERS.setdefault(value, name)  # (its state is named as the block ends: see state_names)
            except TypeError:  # (an optimizer class that cannot be weakly referenced or hashed: not named)
                pass
        elif cls not in _PLAIN_ATTRS and (held := own_dict(value)) is not None:
            # An object of the program's own that holds models (agent.actor, trainer.model): their parameters by that path.
            for attr, sub in list(held.items())[:_MAX_CONTAINER]:
                if issubclass(type(sub), _Module) and type(attr) is str and not attr.startswith("_"):
                    model(f"{name}.{attr}", sub)
    yield from later


_Optimizer = torch.optim.Optimizer
#: The optimizers seen in a scanned frame, by the variable that held them (weakly: an optimizer
#: is not kept alive by having been seen).
OPTIMIZERS: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()


def state_names(param_name: Any) -> dict[int, tuple[Any, str]]:
    """``{id(s): (weakref to s, "opt.state[w]['exp_avg_sq']")}`` for the tensors in the state of
    each optimizer seen in a scanned frame; ``param_name(p)`` names its parameter ``p`` (``None``:
    the parameter's position, ``param_groups[0]['params'][3]``)."""
    out: dict[int, tuple[Any, str]] = {}
    for opt, oname in list(OPTIMIZERS.items()):
        try:
            for gi, group in enumerate(opt.param_groups):
                for k, p in enumerate(group["params"]):
                    st = opt.state.get(p)
                    if not st:
                        continue
                    pname = param_name(p) or f"{oname}.param_groups[{gi}]['params'][{k}]"
                    for key, v in st.items():
                        if isinstance(v, torch.Tensor) and v.dim() > 0:
                            out.setdefault(id(v), (weakref.ref(v), f"{oname}.state[{pname}][{key!r}]"))
        except Exception:  # noqa: BLE001 - a broken optimizer must not break naming
            continue
    return out


_Module = torch.nn.Module
#: Values whose attributes are never searched for models: types, functions, modules of code, tensors and models themselves.
_NOT_HOLDERS = (type, type(sys), type(_items), torch.Tensor, torch.nn.Module)


def own_dict(value: Any) -> dict | None:
    """The instance dict of an object of a class of its own, read without running any of its code
    (no ``__getattr__``, property or ``__class__`` of a proxy object); None for a type, a function,
    a module of code, a tensor, a model, or an object without one."""
    cls = type(value)
    if not getattr(cls, "__dictoffset__", 0) or issubclass(cls, _NOT_HOLDERS):
        return None
    try:
        held = object.__getattribute__(value, "__dict__")
    except Exception:  # noqa: BLE001 - an object that keeps none
        return None
    return held if type(held) is dict else None
#: the types of module attributes that never hold a tensor (the settings, the dicts of
#: parameters, buffers, submodules and hooks): skipped by type alone
_PLAIN_ATTRS = frozenset({type(None), bool, int, float, str, dict, OrderedDict, set})


def _module_items(name: str, module: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """``(name, tensor)`` for the parameters of ``module`` (as ``named_parameters()`` lists
    them), then its submodules' buffers (``running_var``) and the tensors they keep as plain
    public attributes (``self.hidden = ...``: a state carried between calls), found in one
    walk of its submodules."""
    params: list[tuple[str, torch.Tensor]] = []
    attrs: list[tuple[str, torch.Tensor]] = []
    try:
        own = type(module).named_parameters is _Module.named_parameters  # (else: the module's own listing)
        if not own:
            params.extend((f"{name}.{p}", t) for p, t in module.named_parameters())
        memo: set[int] = set()
        for sub_name, sub in module.named_modules():
            held = vars(sub)
            dot = f"{name}.{sub_name}." if sub_name else f"{name}."
            if own:
                for p, t in held.get("_parameters", {}).items():
                    if t is not None and id(t) not in memo:
                        memo.add(id(t))
                        params.append((dot + p, t))
            for b, t in held.get("_buffers", {}).items():  # (running_var, a mask registered as a buffer)
                if isinstance(t, torch.Tensor) and id(t) not in memo:
                    memo.add(id(t))
                    attrs.append((dot + b, t))
            for attr, t in list(held.items())[:_MAX_CONTAINER]:
                if type(t) in _PLAIN_ATTRS or attr.startswith("_"):
                    continue
                if isinstance(t, torch.Tensor):
                    attrs.append((dot + attr, t))
                elif isinstance(t, (tuple, list)) and 0 < len(t) <= 8 and not _PLAIN_ATTRS.issuperset(map(type, t)):  # (h, c) of an LSTM
                    attrs.extend((f"{dot}{attr}[{i}]", x) for i, x in enumerate(t) if isinstance(x, torch.Tensor))
    except Exception:  # noqa: BLE001 - a broken module must not break naming
        return params
    return params + attrs


def frame_candidates(frame: FrameType | None, *, with_globals: bool = True, readable: bool = False,
                     models: list | None = None) -> list[tuple[str, torch.Tensor]]:
    """The named tensors visible in ``frame``: its locals first, then its globals;
    ``readable``: only those whose node can be read without changing the program (see
    :func:`graphlens._live.guard.node_unsafe`); ``models``: the models among them are not
    walked but appended there as ``(name, module)``, to be read later (:func:`_module_items`).

    On Python < 3.13 reading ``f_locals`` of a function frame fills a dict cached on the
    frame, the very one ``locals()`` returns.  When nobody else holds that dict it is
    emptied again, so it keeps no local alive; a dict the program holds (``d = locals()``)
    is left as it is, never emptied.
    """
    if frame is None:
        return []
    out: list[tuple[str, torch.Tensor]] = []
    is_function = bool(frame.f_code.co_flags & _CO_OPTIMIZED)
    local_map = frame.f_locals
    try:
        loops = loop_variables(frame.f_code)
        if loops:
            # A loop variable (for p in model.parameters()) is left holding whatever it met
            # last: it names a tensor only where nothing else does (a module's qualified
            # parameter name, model.fc.bias, wins over the leftover p).
            found = list(_items(local_map, models=models))
            out.extend(item for item in found if item[0] not in loops)
            out.extend(item for item in found if item[0] in loops)
            if models:
                models.sort(key=lambda item: item[0].partition(".")[0] in loops)  # (stable: a loop's leftover last)
        else:
            out.extend(_items(local_map, models=models))
    finally:
        if is_function:
            _let_go(frame, local_map)
        del local_map
    if with_globals and is_function:
        out.extend(_items(frame.f_globals))
    if readable:
        out = [item for item in out if not node_unsafe(item[1])]
    return out


#: ``sys.getrefcount`` of a frame's cached locals dict that only the frame holds, read in
#: :func:`_let_go` (the frame, the caller's variable, its parameter and the call's argument).
_UNHELD_REFS = 4


def _let_go(frame: FrameType, local_map: Any) -> None:
    """After a function frame's variables were read through ``frame.f_locals`` (before 3.13 a
    dict the frame caches): empty that dict when nobody else holds it (see :func:`_forget`),
    so it keeps no local alive."""
    if local_map is not frame.f_globals and sys.version_info < (3, 13):
        if type(local_map) is dict and sys.getrefcount(local_map) <= _UNHELD_REFS:
            _forget(frame, local_map)


def _forget(frame: FrameType, local_map: dict) -> None:
    """Empty a function frame's cached locals dict that nobody else holds (so it keeps no
    local alive), unless it holds names that live only there (made by ``exec`` in the
    function): those are the program's, and reading ``locals()`` again would not bring them back."""
    code = frame.f_code
    try:
        own = _OWN.get(code)
    except TypeError:  # (a code object without weak references: not cached)
        own = None
    if own is None:
        own = frozenset(code.co_varnames) | frozenset(code.co_cellvars) | frozenset(code.co_freevars)
        try:
            _OWN[code] = own
        except TypeError:
            pass
    if own.issuperset(local_map):
        local_map.clear()


#: code object -> the names its frame's cached locals dict may hold (read once per code)
_OWN: "weakref.WeakKeyDictionary[Any, frozenset]" = weakref.WeakKeyDictionary()


def frame_values(frame: FrameType, names: tuple[str, ...]) -> list[Any]:
    """The values ``frame``'s variables ``names`` hold now (``None`` for an unbound one),
    leaving the frame as :func:`frame_candidates` does: no cached locals dict kept alive,
    none the program holds emptied."""
    is_function = bool(frame.f_code.co_flags & _CO_OPTIMIZED)
    local_map = frame.f_locals
    try:
        return [local_map.get(n) for n in names]
    finally:
        if is_function:
            _let_go(frame, local_map)
        del local_map


def frame_objects_where(frame: FrameType, wanted, *, with_globals: bool = True) -> list[tuple[str, Any]]:
    """``(name, value)`` of ``frame``'s variables whose value ``wanted(value)`` accepts (its
    locals, then, for a function frame, its globals), leaving the frame as
    :func:`frame_candidates` does: no cached locals dict kept alive, none the program holds emptied."""
    is_function = bool(frame.f_code.co_flags & _CO_OPTIMIZED)
    local_map = frame.f_locals
    try:
        out = [(k, v) for k, v in list(local_map.items()) if isinstance(k, str) and wanted(v)]
    finally:
        if is_function:
            _let_go(frame, local_map)
        del local_map
    if with_globals and is_function:
        out.extend((k, v) for k, v in list(frame.f_globals.items()) if isinstance(k, str) and wanted(v))
    return out


_STORES = frozenset({"STORE_FAST", "STORE_NAME", "STORE_GLOBAL", "STORE_DEREF"})
_LOOPS: "weakref.WeakKeyDictionary[Any, frozenset]" = weakref.WeakKeyDictionary()


def loop_variables(code: Any) -> frozenset:
    """The names a ``for`` loop of ``code`` binds (the stores right after each ``FOR_ITER``,
    unpacked targets included), read once per code object."""
    try:
        hit = _LOOPS.get(code)
    except TypeError:
        hit = None
    if hit is not None:
        return hit
    names: set = set()
    try:
        ins = list(dis.get_instructions(code))
    except Exception:  # noqa: BLE001
        ins = []
    for k, one in enumerate(ins):
        if one.opname != "FOR_ITER":
            continue
        j = k + 1
        if j < len(ins) and ins[j].opname == "UNPACK_SEQUENCE" and isinstance(ins[j].argval, int):
            for x in ins[j + 1:j + 1 + ins[j].argval]:
                if x.opname in _STORES:
                    names.add(x.argval)
        elif j < len(ins) and ins[j].opname in _STORES:
            names.add(ins[j].argval)
    out = frozenset(n for n in names if isinstance(n, str))
    try:
        _LOOPS[code] = out
    except TypeError:
        pass
    return out
_TARGETS: "weakref.WeakKeyDictionary[Any, dict[int, tuple[str, ...]]]" = weakref.WeakKeyDictionary()


def store_targets(code: Any) -> dict[int, tuple[str, ...]]:
    """For each instruction of ``code`` whose result the next instruction stores in
    variables (``y = y * 2``, ``a, b = t.chunk(2)``): its offset (``f_lasti`` while it
    runs) -> those variables' names.  Read once per code object: a trace then names the
    tensor a call made by looking at one variable, not at every variable of the frame."""
    try:
        hit = _TARGETS.get(code)
    except TypeError:  # (a code object without weak references: not cached)
        hit = None
    if hit is not None:
        return hit
    out: dict[int, tuple[str, ...]] = {}
    try:
        ins = list(dis.get_instructions(code))
    except Exception:  # noqa: BLE001 - odd code: names come from the full scans only
        ins = []
    for k in range(len(ins) - 1):
        nxt = ins[k + 1]
        names: tuple = ()
        if nxt.opname in _STORES:
            names = (nxt.argval,)
        elif nxt.opname in ("STORE_FAST_LOAD_FAST", "STORE_FAST_STORE_FAST") and isinstance(nxt.argval, tuple):
            names = nxt.argval[:1] if nxt.opname == "STORE_FAST_LOAD_FAST" else nxt.argval
        elif nxt.opname == "UNPACK_SEQUENCE" and isinstance(nxt.argval, int):
            stores = ins[k + 2:k + 2 + nxt.argval]
            if len(stores) == nxt.argval and all(x.opname in _STORES for x in stores):
                names = tuple(x.argval for x in stores)
        if names and all(isinstance(n, str) and n.isidentifier() for n in names):
            # (while a call into Python code runs, the caller's f_lasti may point past the
            # call's inline caches, at the unit just before the store: 3.11 does)
            out[ins[k].offset] = out[nxt.offset - 2] = names
    try:
        _TARGETS[code] = out
    except TypeError:
        pass
    return out


class NameBook:
    """Maps live tensors to names: explicit names win, then a module's parameter names,
    then the caller's variables.  Leaves are found by identity; non-leaves by their
    ``(grad_fn, output_nr)``, since a backward walk meets only their node.

    The book holds the tensors it was given only until :meth:`close`.
    """

    def __init__(self) -> None:
        self._by_id: dict[int, str] = {}
        self._by_fn: dict[Any, dict[int, tuple[str, torch.Tensor]]] = {}
        self._keep: list[torch.Tensor] = []

    def add(self, name: str, t: torch.Tensor, *, override: bool = False) -> None:
        """Name ``t`` unless it already has a name (or ``override``)."""
        key = id(t)
        if override or key not in self._by_id:
            self._by_id[key] = name
            self._keep.append(t)
        if node_unsafe(t):
            # (a retained view changed in place since it was made, through an alias: reading its
            # grad_fn would rebuild its node now and move its retain_grad hook off the node
            # backward will run, so its .grad would stay None. Left unnamed in the graph instead.)
            return
        try:
            fn = t.grad_fn
        except RuntimeError:  # e.g. a view made in no_grad whose base changed in place since
            return
        if fn is not None:
            outputs = self._by_fn.setdefault(fn, {})
            if override or t.output_nr not in outputs:
                outputs[t.output_nr] = (name, t)

    def add_explicit(self, names: Mapping[str, Any] | None) -> None:
        """Explicit ``names={"w": w}``; a list/tuple/dict value names each element."""
        if names is None:
            return
        if not isinstance(names, Mapping):
            raise TypeError(
                f"names must be a dict from name to tensor, e.g. names={{'w': w}}, not {type(names).__name__}"
            )
        for name, value in names.items():
            if isinstance(value, torch.Tensor):
                self.add(str(name), value, override=True)
            elif isinstance(value, (list, tuple)):
                for i, t in enumerate(value):
                    if isinstance(t, torch.Tensor):
                        self.add(f"{name}[{i}]", t, override=True)
            elif isinstance(value, torch.nn.Module):
                self.add_module(value, prefix=f"{name}.")
            else:
                raise TypeError(f"names[{name!r}] must be a tensor, not {type(value).__name__}")

    def add_module(self, module: Any, *, prefix: str = "") -> None:
        """The parameter (and buffer) names of ``module``."""
        if module is None:
            return
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"module must be an nn.Module (the model whose parameters to name), not {type(module).__name__}")
        for pname, p in module.named_parameters():
            self.add(prefix + pname, p)
        for bname, b in module.named_buffers():
            self.add(prefix + bname, b)

    def add_frame(self, frame: FrameType | None) -> None:
        """The caller's variables (locals, then globals)."""
        for name, t in frame_candidates(frame):
            self.add(name, t)

    def name_of(self, t: torch.Tensor) -> str | None:
        """The name of a live tensor, if known."""
        return self._by_id.get(id(t))

    def outputs_by_node(self) -> dict[Any, Any]:
        """The nodes that produced a named non-leaf (a dict to test membership in)."""
        return self._by_fn

    def named_outputs(self, fn: Any) -> list[tuple[int, str, torch.Tensor]]:
        """The named non-leaf tensors that ``fn`` produced, as ``(output_nr, name, tensor)``."""
        outputs = self._by_fn.get(fn)
        if not outputs:
            return []
        return [(nr, name, t) for nr, (name, t) in sorted(outputs.items(), key=lambda kv: kv[0])]

    def close(self) -> None:
        """Drop every reference the book holds."""
        self._by_id.clear()
        self._by_fn.clear()
        self._keep.clear()
