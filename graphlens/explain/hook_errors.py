"""Errors of the code a user plugs into backward: hooks and custom Functions that return the wrong thing, hooks on tensors without grad, in-place changes under a module's full backward hook."""

from __future__ import annotations

import ast
import inspect
import linecache
import textwrap
from typing import Any

import torch

from ..names import parsed
from .context import Context, as_code, line_op
from .types import Explanation

__all__ = [
    "custom_fn_once_differentiable",
    "backward_hook_inplace", "custom_fn_view_inplace", "hook_changed_gradient", "hook_wrong_count",
    "custom_fn_grad_shape", "hook_no_requires_grad", "inplace_activation", "return_line", "no_grad_block",
    "custom_fn_legacy", "custom_fn_no_backward",
]

#: The nn.functional activations that take ``inplace=`` (their in-place torch call is ``name_``).
_INPLACE_FUNCTIONS = ("relu", "relu6", "leaky_relu", "elu", "selu", "celu", "hardtanh", "threshold", "silu", "mish",
                      "hardsigmoid", "hardswish", "rrelu", "dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout")


def _function_name(fn: Any) -> str:
    inner = getattr(fn, "__wrapped__", fn)
    return getattr(inner, "__name__", None) or type(inner).__name__


def return_line(fn: Any) -> tuple[int | None, str | None]:
    """``(lineno, text)`` of the last ``return`` of function ``fn`` (of its line, for a
    lambda), read from its source; ``(None, None)`` when the source cannot be read."""
    fn = getattr(fn, "__wrapped__", fn)
    fn = getattr(fn, "__func__", fn)
    try:
        lines, start = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return None, None
    if getattr(fn, "__name__", "") == "<lambda>":
        return start, lines[0].strip()
    try:
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except SyntaxError:
        return start, lines[0].strip()
    rets = [n for n in ast.walk(tree) if isinstance(n, ast.Return)]
    if not rets:
        return start, lines[0].strip()
    last = max(rets, key=lambda n: n.lineno)
    return start + last.lineno - 1, lines[last.lineno - 1].strip()


def _hook_owners(ctx: Context, hook: str | None) -> list[tuple[str, str, Any, Any]]:
    """``(kind, owner name, owner, hook function)`` of the hooks named ``hook`` (any, for
    None) that the user's tensors and modules hold: ``kind`` is ``"tensor"``,
    ``"full"`` (register_full_backward_hook), ``"pre"`` (register_full_backward_pre_hook)
    or ``"legacy"`` (register_backward_hook)."""
    out: list[tuple[str, str, Any, Any]] = []
    seen: set[tuple[int, int]] = set()  # (hook, owner): a tensor named twice (w and model.w) counts once
    for name, t in ctx.candidates:
        hooks = getattr(t, "_backward_hooks", None) or {}
        for fn in list(hooks.values()):
            if (hook is None or _function_name(fn) == hook) and (id(fn), id(t)) not in seen:
                seen.add((id(fn), id(t)))
                out.append(("tensor", name, t, fn))
    for name, m in ctx.objects(torch.nn.Module):
        full = bool(getattr(m, "_is_full_backward_hook", False))
        for kind, hooks in (("full" if full else "legacy", getattr(m, "_backward_hooks", {})),
                            ("pre", getattr(m, "_backward_pre_hooks", {}))):
            for fn in list((hooks or {}).values()):
                if (hook is None or _function_name(fn) == hook) and (id(fn), id(m)) not in seen:
                    seen.add((id(fn), id(m)))
                    out.append((kind, name, m, fn))
    return out


def _where(fn: Any) -> tuple[int | None, str | None, str]:
    lineno, line = return_line(fn)
    return lineno, line, f" (line {lineno}: {line})" if line else ""


def inplace_activation(ctx: Context) -> tuple[str | None, str | None, Any]:
    """``(module name, op, module)`` of the activation with ``inplace=True`` that the
    traceback shows changing a tensor in place: the innermost ``forward`` of a module with
    ``inplace`` set (``nn.ReLU(inplace=True)``), else an ``nn.functional`` call made with
    ``inplace=True`` (module None); ``(None, None, None)`` when the traceback shows none."""
    op = None
    for frame in reversed(ctx.torch_frames):
        code = frame.f_code
        if code.co_name in _INPLACE_FUNCTIONS and frame.f_globals.get("__name__") == "torch.nn.functional":
            if frame.f_locals.get("inplace") is True and op is None:
                op = code.co_name + "_"
        elif code.co_name == "forward":
            module = frame.f_locals.get("self")
            if isinstance(module, torch.nn.Module) and getattr(module, "inplace", None) is True:
                name = ctx.object_name(module)
                return name, op or f"{type(module).__name__.lower()}_", module
    return None, op, None


def backward_hook_inplace(message, match, g, trace, ctx: Context) -> Explanation:
    hooked = [(n, m) for kind, n, m, _ in _hook_owners(ctx, None) if kind in ("full", "pre")]
    hooked = list({id(m): (n, m) for n, m in hooked}.values())
    act_name, op, act = inplace_activation(ctx)
    reasons = ["backward_hook_inplace"]
    if act is not None or op is not None:
        reasons.append("inplace_activation")
        who = act_name or "an activation"
        changer = (f"{who} ({type(act).__name__}(inplace=True))" if act is not None else f"{op.rstrip('_')}(..., inplace=True)")
    else:
        op, target = line_op(ctx.line)
        changer = f"the in-place operation {op} on {target}" if op else "an in-place operation"
    owner = (" and ".join(n for n, _ in hooked[:2]) + ("'s" if len(hooked) == 1 else "'")) if hooked else "a module's"
    if changer.startswith(("an ", "the ")):
        changer = changer[0].upper() + changer[1:]
    sentences = [
        f"{changer} changed in place a tensor that {owner} full backward hook wraps "
        f"(register_full_backward_hook passes a module's inputs and outputs through an autograd Function, "
        f"BackwardHookFunction, so that the hook sees their gradients). PyTorch forbids changing that Function's "
        f"outputs in place: the change would bypass the hook's backward and give wrong gradients."
    ]
    if not hooked:
        sentences.append("(graphlens did not find the hooked module among your variables: it may be a global hook, "
                         "torch.nn.modules.module.register_module_full_backward_hook.)")
    if ctx.line:
        sentences.append(f"The failing line: {ctx.line}.")
    if act is not None:
        fix = (f"Make {act_name or 'the activation'} out of place ({type(act).__name__}(inplace=False), or "
               f"{as_code(act_name) + '.inplace = False' if act_name else 'set its inplace flag to False'}), or clone "
               f"the tensor before it; or hook the gradient without wrapping the module: a forward hook that calls "
               f"output.register_hook(...) sees the same gradient of the output.")
    else:
        fix = ("Change a clone of the hooked module's output (y = y.clone() before the in-place operation), or use the "
               "out-of-place form (y = y + z, torch.relu(y)).")
    return Explanation(reasons, sentences, fix=fix, graph=g, message=message, op=op, line=ctx.line or None,
                       lineno=ctx.lineno, tensor_name=None)


def _function_class(ctx: Context, node_name: str) -> Any:
    """The custom autograd.Function class behind a backward node named ``node_name``
    (``PadBackward`` -> ``Pad``): found on the failed backward's graph, else among the
    user's classes."""
    stack = [t.grad_fn for t in ctx.root if t.grad_fn is not None]
    seen: set[int] = set()
    while stack and len(seen) < 50_000:
        fn = stack.pop()
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        if type(fn).__name__ == node_name and getattr(fn, "_forward_cls", None) is not None:
            return fn._forward_cls
        stack.extend(c for c, _ in fn.next_functions if c is not None)
    base = node_name[: -len("Backward")] if node_name.endswith("Backward") else node_name
    return next((c for n, c in ctx.objects(type) if c.__name__ in (base, node_name)), None)


def custom_fn_view_inplace(message, match, g, trace, ctx: Context) -> Explanation:
    node = match.group("op")
    cls = _function_class(ctx, node) or next((c for n, c in ctx.objects(type) if c.__name__ == node), None)
    name = cls.__name__ if cls is not None else node.removesuffix("Backward")
    lineno, line = return_line(cls.forward) if cls is not None else (None, None)
    op, target = line_op(ctx.line)
    sentences = [
        f"Output {match.group('nr')} of the custom autograd.Function {name} is a view of one of its inputs (or the input "
        f"itself, returned as-is), and it was changed in place" + (f" ({ctx.line})" if ctx.line else "") + f": the change "
        f"would bypass {name}'s backward, so PyTorch refuses."
    ]
    if line:
        sentences.append(f"{name}.forward returns at line {lineno}: {line}.")
    v = target or "y"
    return Explanation(
        ["custom_fn_view_inplace"], sentences, graph=g, message=message, op=op or node, line=ctx.line or line or None,
        lineno=ctx.lineno or lineno, tensor_name=target,
        fix=f"Return a new tensor from {name}.forward (x.clone(), or compute the output out of place), or change a "
        f"clone of the output: {v} = {name}.apply(...).clone() before {op or 'the in-place operation'}.",
    )


def hook_changed_gradient(message, match, g, trace, ctx: Context) -> Explanation:
    hook = match.group("hook")
    what = match.group("what") or "type"
    owners = _hook_owners(ctx, hook) if hook else []
    label = f"The hook {hook!r}" if hook else "A gradient hook"
    reasons = ["hook_changed_gradient"]
    lineno = line = None
    tensor = None
    op = hook or None
    if match.group("returned"):
        change = f"returned a {match.group('returned')} where a gradient (a tensor, or None) belongs"
    elif what == "type" and match.group("was"):
        change = f"returned a gradient of another type ({match.group('got')} instead of {match.group('was')})"
    else:
        change = f"returned a gradient of another {what} than the gradient it replaces"
    if len(owners) == 1:
        kind, owner, obj, fn = owners[0]
        lineno, line, where = _where(fn)
        if kind == "tensor":
            tensor = owner
            shape = list(obj.shape)
            sentences = [
                f"{label}, registered on {owner} (shape {shape}) with register_hook, {change}{where}. A tensor hook "
                f"must return None or a gradient like the one it receives: the shape, dtype and device of {owner}."
            ]
            fix = (f"Make {hook} return a gradient of {owner}'s shape {shape} (and dtype, device), or None to keep the "
                   f"gradient as it is.")
        else:
            how = {"full": "register_full_backward_hook", "pre": "register_full_backward_pre_hook", "legacy": "register_backward_hook"}[kind]
            grads = "grad_output" if kind == "pre" else "grad_input"
            sentences = [
                f"{label}, registered on the module {owner} with {how}, {change}{where}. A module's backward hook "
                f"returns None or a tuple with one entry per {grads}, each None or of that gradient's shape; a bare "
                f"tensor (return grad instead of (grad,)) is read as a sequence of its rows."
            ]
            fix = f"Return a tuple from {hook}: (new_grad,) + tuple({grads}[1:]), each entry of its {grads}'s shape, or None."
    else:
        sentences = [
            f"{label} {change}. A hook must return None or a gradient of the same shape, dtype and device as the one "
            f"it receives (a module's backward hook: a tuple of them, one per gradient)."
        ]
        if hook and not owners:
            sentences.append(f"(graphlens did not find a tensor or module of yours that holds a hook named {hook!r}: it may "
                             f"be registered on a grad_fn, or inside a library.)")
        elif owners:
            sentences.append(f"Hooks named {hook!r} are registered on {', '.join(o[1] for o in owners[:3])}.")
        fix = "Return the gradient with its shape, dtype and device unchanged (or None), and a tuple from a module's backward hook."
    return Explanation(reasons, sentences, fix=fix, graph=g, message=message, op=op, tensor_name=tensor,
                       line=line or ctx.line or None, lineno=lineno or ctx.lineno)


def hook_wrong_count(message, match, g, trace, ctx: Context) -> Explanation:
    hook = match.group("hook")
    got = int(match.group("got") or match.group("got2"))
    want = int(match.group("want") or match.group("want2"))
    pre = bool(match.group("pre"))
    if hook:  # torch's C++ check: register_backward_hook (or a grad_fn hook)
        owners = [o for o in _hook_owners(ctx, hook) if o[0] != "tensor"]
    else:  # torch/utils/hooks.py: register_full_backward_hook / _pre_hook
        owners = [o for o in _hook_owners(ctx, None) if o[0] == ("pre" if pre else "full")]
    grads = "grad_output" if pre else "grad_input"
    lineno = line = None
    fn_name = hook
    sentences = []
    if len(owners) == 1:
        kind, owner, module, fn = owners[0]
        fn_name = _function_name(fn)
        lineno, line, where = _where(fn)
        if kind == "legacy":
            sentences.append(
                f"The backward hook {fn_name!r}, registered on {owner} ({type(module).__name__}) with register_backward_hook, "
                f"returned {got} value(s){where}, but its grad_in holds {want}. A hook registered that way sees the "
                f"grad_input of the last operation inside the module's forward (its inputs, weights and biases), not of "
                f"the module's own inputs, and must return exactly as many values."
            )
            fix = (f"Return all {want} values from {fn_name}, changing only the ones you mean to: e.g. "
                   f"return (new_grad,) + tuple(grad_in[1:]); or use register_full_backward_hook, whose grad_input holds "
                   f"one gradient per input of the module's forward.")
        else:
            how = "register_full_backward_pre_hook" if pre else "register_full_backward_hook"
            sentences.append(
                f"The backward hook {fn_name!r}, registered on {owner} with {how}, returned {got} value(s){where}, but "
                f"{owner} has {want} {grads} entr{'y' if want == 1 else 'ies'}: one per "
                f"{'output' if pre else 'tensor input'} of its forward."
            )
            fix = f"Return None, or a tuple of {want} value(s) from {fn_name}: one per {grads} entry (None where it needs none)."
    else:
        who = f"The hook {hook!r}" if hook else f"A module's backward {'pre ' if pre else ''}hook"
        sentences.append(f"{who} returned {got} value(s), but {want} were expected: a backward hook must return None or "
                         f"one value per gradient it was given.")
        fix = f"Return None, or exactly {want} value(s): one per {grads if not hook else 'gradient the hook receives'}."
    return Explanation(["hook_wrong_count"], sentences, fix=fix, graph=g, message=message, op=fn_name,
                       line=line or ctx.line or None, lineno=lineno or ctx.lineno)


def custom_fn_grad_shape(message, match, g, trace, ctx: Context) -> Explanation:
    node, index = match.group("fn"), int(match.group("index"))
    got, want = f"[{match.group('got')}]", f"[{match.group('want')}]"
    cls = _function_class(ctx, node)
    if cls is not None:
        name = cls.__name__
        lineno, line = return_line(cls.backward)
        sentences = [
            f"The backward of the custom autograd.Function {name} returned, at position {index} (the gradient for input "
            f"{index} of its forward), a tensor of shape {got}, but that input has shape {want}: backward must return, "
            f"for each input of forward, a gradient of that input's shape (or None)."
        ]
        if line:
            sentences.append(f"{name}.backward returns at line {lineno}: {line}.")
        fix = (f"Make {name}.backward return a gradient of shape {want} at position {index}: map the output's gradient "
               f"back onto the input, undoing what forward did to the shape (slice off padding, .sum() over broadcast or "
               f"expanded dimensions, .reshape() to the input's shape).")
        return Explanation(["custom_fn_grad_shape"], sentences, fix=fix, graph=g, message=message, op=node, line=line,
                           lineno=lineno)
    sentences = [
        f"The backward node {node} computed, for its input {index}, a gradient of shape {got} where the input has shape "
        f"{want}. graphlens found no custom autograd.Function of that name among your variables. With a built-in node "
        f"this happens when the gradient arriving at it had the wrong shape: a hook (register_hook on a tensor, a "
        f"module's backward hook, a grad_fn hook) or a C++/CUDA extension changed it; graphlens cannot see which."
    ]
    return Explanation(["custom_fn_grad_shape"], sentences, graph=g, message=message, op=node, line=ctx.line or None,
                       lineno=ctx.lineno,
                       fix="Check the hooks around that operation (they must return gradients of unchanged shape) and the "
                       "backward of any extension that computes it.")


def no_grad_block(frame, lineno: int) -> tuple[int, str] | None:
    """``(line, text)`` of the ``with torch.no_grad():`` (or ``inference_mode()``,
    ``set_grad_enabled(False)``) block of ``frame``'s source that line ``lineno`` runs
    inside, read from the code; None when it runs in none."""
    tree, lines = parsed(frame.f_code.co_filename)
    if tree is None:
        return None
    best = None
    for node in ast.walk(tree):
        if isinstance(node, (ast.With, ast.AsyncWith)) and node.lineno < lineno <= (node.end_lineno or 0):
            for item in node.items:
                call = item.context_expr
                text = ast.unparse(call)
                if ("no_grad" in text or "inference_mode" in text
                        or ("set_grad_enabled" in text and "False" in text)):
                    if best is None or node.lineno > best[0]:
                        best = (node.lineno, lines[node.lineno - 1].strip())
    return best


def hook_no_requires_grad(message, match, g, trace, ctx: Context) -> Explanation:
    t = ctx.torch_local("register_hook", "self")
    t = t if isinstance(t, torch.Tensor) else None
    name = ctx.name_of(t) if t is not None else None
    if name is None and t is not None:
        name = next((n for n, c in ctx.candidates if c is t), None)
    who = name or "the tensor"
    reasons = ["hook_no_requires_grad"]
    sentences = [
        f"register_hook was called on {who}, which does not require grad: no gradient will ever be computed for it, so "
        f"there is nothing for a hook to see." + (f" The failing line: {ctx.line}." if ctx.line else "")
    ]
    block = None
    for frame, lineno in reversed(ctx.user_frames):
        block = no_grad_block(frame, lineno)
        if block:
            call = linecache.getline(frame.f_code.co_filename, lineno).strip()
            break
    if t is not None and t.is_inference():
        reasons.append("created_in_no_grad")
        sentences.append(f"{who} was made inside torch.inference_mode().")
        fix = "Run the forward you want gradients of outside inference_mode(), or register the hook only when " \
              f"{name or 't'}.requires_grad is True."
    elif block is not None:
        reasons.append("created_in_no_grad")
        sentences.append(f"It is computed by line {lineno} ({call}), which runs inside `{block[1]}` (line {block[0]}): "
                         f"nothing computed there requires grad.")
        fix = (f"Run the forward outside {block[1].removeprefix('with ').rstrip(':')} when you need its gradients "
               f"(model.eval() alone keeps the graph), or register the hook only if {name or 'output'}.requires_grad.")
    elif t is not None and t.is_leaf and isinstance(t, torch.nn.Parameter):
        # (a Parameter: never computed; frozen, by requires_grad_(False) or a constructor that freezes it)
        reasons.append("requires_grad_false")
        sentences.append(f"{who} is a Parameter that was frozen (requires_grad=False: requires_grad_(False), or a "
                         f"constructor that freezes it, as nn.Embedding.from_pretrained does by default).")
        fix = (f"Register hooks only on the parameters that require grad (if {name or 'p'}.requires_grad: ...); if "
               f"{who} should train, unfreeze it ({name or 'p'}.requires_grad_(True), or from_pretrained(..., freeze=False)).")
    else:
        sentences.append(
            f"Either {who} was computed inside torch.no_grad() (or inference_mode), or from tensors none of which "
            f"requires grad (input data, frozen parameters)."
        )
        fix = (f"Register the hook only on tensors that require grad (if {name or 't'}.requires_grad: "
               f"{name or 't'}.register_hook(...)), or compute {who} from tensors that require grad, outside no_grad.")
    return Explanation(reasons, sentences, fix=fix, tensor_name=name, graph=g, message=message, op="register_hook",
                       line=ctx.line or None, lineno=ctx.lineno)


def _defined_at(cls: Any) -> tuple[int | None, str | None]:
    """``(lineno, text)`` of the ``class`` line of ``cls`` (``(None, None)`` without source)."""
    try:
        lines, start = inspect.getsourcelines(cls)
    except (OSError, TypeError):
        return None, None
    return start, lines[0].strip()


def custom_fn_legacy(message, match, g, trace, ctx: Context) -> Explanation:
    """An autograd.Function written the old way (instance methods, called as ``Fn()(x)``)."""
    obj = ctx.torch_local("__call__", "self")
    cls = type(obj) if isinstance(obj, torch.autograd.Function) else None
    name = cls.__name__ if cls is not None else None
    lineno, line = _defined_at(cls) if cls is not None else (None, None)
    who = f"the custom autograd.Function {name}" if name else "a custom autograd.Function"
    sentences = [
        f"{who[0].upper() + who[1:]} was written the old way: forward is an ordinary method and the Function was "
        f"called as an object" + (f" ({ctx.line})" if ctx.line else "") + ". PyTorch no longer runs such Functions: "
        "forward and backward must be static methods that take ctx first, and the Function is called through .apply."
    ]
    if line:
        sentences.append(f"{name} is defined at line {lineno}: {line}")
    n = name or "MyFunction"
    return Explanation(
        ["custom_fn_legacy"], sentences, graph=g, message=message, op=name, line=ctx.line or None, lineno=ctx.lineno,
        fix=f"Mark forward and backward of {n} with @staticmethod, give each ctx as its first argument (save tensors "
        f"with ctx.save_for_backward(...) instead of self), and call {n}.apply(x) instead of {n}()(x).",
    )


def custom_fn_no_backward(message, match, g, trace, ctx: Context) -> Explanation:
    """backward ran through a custom autograd.Function that defines no ``backward`` (nor ``vjp``)."""
    node = ctx.torch_local("backward", "ctx")
    cls = getattr(node, "_forward_cls", None)
    name = cls.__name__ if isinstance(cls, type) else None
    own = [k for k, v in vars(cls).items() if k.lower().startswith("back") and k != "backward"] if name else []
    lineno, line = _defined_at(cls) if name else (None, None)
    who = f"the custom autograd.Function {name}" if name else "a custom autograd.Function"
    sentences = [
        f"Backward reached {who}, which defines forward but no backward method: PyTorch cannot compute the "
        f"gradient of its inputs."
    ]
    if own:
        sentences.append(f"{name} has a method named {own[0]}, not backward, so PyTorch does not use it.")
    if line:
        sentences.append(f"{name} is defined at line {lineno}: {line}")
    n = name or "MyFunction"
    fix = (f"Rename {n}.{own[0]} to backward (a @staticmethod taking ctx and one gradient per output of forward)."
           if own else
           f"Add to {n} a @staticmethod backward(ctx, grad_output) that returns one gradient per input of forward "
           f"(None for inputs that need none); or, if {n}'s output needs no gradient, compute it under torch.no_grad().")
    return Explanation(
        ["custom_fn_no_backward"], sentences, graph=g, message=message, op=name, line=line, lineno=lineno, fix=fix,
    )



def _forward_classes(roots: list, limit: int = 100_000) -> set:
    """The custom Function classes whose nodes the backward graph below ``roots`` holds."""
    from .._live.guard import node_unsafe

    found: set = set()
    seen: set = set()
    stack = [r.grad_fn for r in roots if isinstance(r, torch.Tensor) and not node_unsafe(r)]
    while stack and len(seen) < limit:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        cls = getattr(fn, "_forward_cls", None)
        if isinstance(cls, type):
            found.add(cls)
        stack.extend(c for c, _ in fn.next_functions)
    return found


def _marked_in_frames(ctx: Context) -> set:
    """The custom Function classes with a ``@once_differentiable`` backward that the user's frames hold (their
    variables and globals, private names too: a Function is often a module's ``_Helper``)."""
    from ..names import frame_objects_where

    wanted = lambda v: issubclass(type(v), type) and issubclass(v, torch.autograd.Function) and _once_differentiable(v)  # noqa: E731
    frames = [f for f, _ in ctx.user_frames] + [ctx.backward_caller, ctx.caller]
    return {c for f in frames if f is not None for _, c in frame_objects_where(f, wanted)}


def _once_differentiable(cls: type) -> bool:
    """Whether ``cls``'s backward is wrapped by ``torch.autograd.function.once_differentiable`` (the wrapper
    keeps the function's name: its code is torch's)."""
    fn = cls.__dict__.get("backward")
    fn = getattr(fn, "__func__", fn)
    code = getattr(fn, "__code__", None)
    return getattr(fn, "__wrapped__", None) is not None and code is not None and \
        code.co_filename.replace("\\", "/").endswith("torch/autograd/function.py")


def custom_fn_once_differentiable(message, match, g, trace, ctx: Context) -> Explanation:
    """A second derivative through a custom Function whose backward is marked ``@once_differentiable``."""
    marked = {c for c in _forward_classes(ctx.root) if _once_differentiable(c)} or _marked_in_frames(ctx)
    cls = next(iter(marked)) if len(marked) == 1 else None  # (one such Function: it; several: none named)
    name = cls.__name__ if cls is not None else None
    lineno, line = _defined_at(cls) if cls is not None else (None, None)
    who = f"the custom autograd.Function {name}" if name else "a custom autograd.Function"
    sentences = [
        f"Backward needed the derivative of the backward of {who} (a second derivative: a gradient computed with "
        f"create_graph=True through it, then differentiated again, as a gradient penalty or a normal taken with "
        f"torch.autograd.grad does), and that backward is marked @once_differentiable: it runs without recording a "
        f"graph, so what it returned cannot be differentiated."
    ]
    if line:
        sentences.append(f"{name} is defined at line {lineno}: {line}")
    n = name or "that Function"
    return Explanation(
        ["custom_fn_once_differentiable"], sentences, graph=g, message=message, op=name, line=line, lineno=lineno,
        fix=(f"Keep the gradient through {n} out of what is differentiated again (compute it without create_graph=True, "
             f"or detach it), approximate it (finite differences), or use an implementation whose backward is made of "
             f"differentiable torch operations (without @once_differentiable)."),
    )
