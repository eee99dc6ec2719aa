"""Each claim's own notes on its evidence: the observed facts of its run, put beside the nodes they are about."""

from __future__ import annotations

from typing import Any, Mapping

from ..graph import Graph
from .notes import NoteMaker, freed_notes, region_notes, released_notes

__all__ = ["NOTES"]


def _v(x: Any) -> str:
    """A fact as short text: a list of numbers as ``[1, 2.5]``, None as ``None``."""
    if isinstance(x, list):
        return "[" + ", ".join(_v(v) for v in x[:4]) + (", …" if len(x) > 4 else "") + "]"
    if isinstance(x, float):
        return format(x, ".4g")
    return str(x)


def _flags(f: Mapping[str, Any]) -> str:
    parts = ["leaf" if f.get("is_leaf") else "non-leaf"]
    if "requires_grad" in f:
        parts.append("requires grad" if f["requires_grad"] else "requires_grad=False")
    parts.append(f"grad_fn {f['grad_fn']}" if f.get("grad_fn") else "no grad_fn")
    return ", ".join(parts)


def _flag_notes(key: str, names: tuple[str, ...] | None = None) -> NoteMaker:
    def notes(facts, g, k):
        flags = facts.get(key, {})
        return {n: _flags(f) for n, f in flags.items() if names is None or n in names}
    return notes


def _short(text: Any, n: int = 60) -> str:
    text = str(text)
    return text if len(text) <= n else text[: n - 1] + "…"


def _dynamic(facts, g: Graph, k: int):
    run = facts["runs"][k]
    branch = "tanh" if "TanhBackward0" in run["ops"] else "y * y"
    return {
        "z": f"x1 = {_v(run['input'][0])}: this run took the {branch} branch",
        "y": f"grad_fn {run['grad_fn_right_after_mul']} existed right after the mul ran",
    }


def _backprop_ends(facts, g: Graph, k: int):
    out = {}
    for o in g.ops:
        if o.is_accumulate_grad and o.variable is not None:
            name = g.node(o.variable).label
            if name in facts["accumulated_into"]:
                out[o.id] = f"backward ends here: stores {name}.grad"
    return out


def _defaults(facts, g: Graph, k: int):
    p = facts["parameters"]
    user = facts["user_tensors"]
    return {
        "weight": f"a parameter: requires_grad={p.get('Linear.weight')} by default",
        "out": f"tensors made with torch.tensor / randn / zeros: requires_grad={any(user.values())} by default",
    }


def _propagates(facts, g: Graph, k: int):
    rg, on_path = facts["requires_grad"], facts["on_path_from_params"]
    out = {n: f"requires grad: on a path from p1 or p2" for n in ("y1", "loss") if n in on_path and rg.get(n)}
    if "xx" in rg:
        out["xx"] = f"requires_grad={rg['xx']}: made only from x"
    return out


def _nonleaf_locked(facts, g: Graph, k: int):
    attempts = facts["attempts"]
    first = next(iter(attempts.items()), None)
    return {"y1": f"non-leaf; {first[0]}: {_short(first[1], 48)}" if first else "non-leaf"}


def _freeze_leaf(facts, g: Graph, k: int):
    if k == 0:  # the run with p1 frozen (the facts are this run's)
        rg = facts["requires_grad"]
        return {
            "p1": f"frozen: requires_grad={rg['p1']}, grad {_v(facts['p1.grad'])}",
            "y1": f"requires_grad={rg['y1']}: computed from p1 and x only",
            "y3": f"requires_grad={rg['y3']}: p2 joins here",
        }
    # the same program without freezing, read off its own graph
    out = {}
    for p1 in g.find_all("p1")[-1:]:
        out["p1"] = f"not frozen: requires_grad={p1.requires_grad}, grad {p1.grad}"
    for y1 in g.find_all("y1")[-1:]:
        out["y1"] = f"requires_grad={y1.requires_grad}: p1 requires grad"
    return out


def _is_copy(facts, g: Graph, k: int):
    return {
        "d": f"same storage as y: {facts['same_storage']}; d.mul_(10) made y {_v(facts['y_after_changing_d'])}",
        "y": f"backward: {_short(facts['backward'], 56)}",
    }


def _two_losses(facts, g: Graph, k: int):
    a1, a2, both = facts["loss1_alone"], facts["loss2_alone"], facts["after_both"]
    return {
        "p1": f"grad {_v(both['p1'])}; from loss1 alone: {_v(a1['p1'])}",
        "p2": f"grad {_v(both['p2'])}; from loss2 alone: {_v(a2['p2'])}",
    }


def _two_backwards(facts, g: Graph, k: int):
    return {"loss2": f"grads after loss1.backward(); loss2.backward() equal (loss1 + loss2).backward(): {facts['bitwise_equal']}"}


def _without_zero_grad(facts, g: Graph, k: int):
    arm = facts["arms"]["without" if k == 0 else "with"]
    how = "no zero_grad() between the steps" if k == 0 else "zero_grad() between the steps"
    return {"p": f"{how}: grad at step 2 {_v(arm['grad_at_second_step'])}, loss2 alone gives {_v(arm['loss2_alone'])}"}


def _zero_grad(facts, g: Graph, k: int):
    arm = ("default", "set_to_none=False")[k] if k < 2 else None
    after = facts["after_zero_grad"].get(arm, {})
    grad = after.get("weight")
    return {"weight": f"after zero_grad({'' if k == 0 else 'set_to_none=False'}): .grad = {'None' if grad is None else 'zeros'}"}


def _nonleaf_discarded(facts, g: Graph, k: int):
    return released_notes(g, ("y1", "y2", "y3"))


def _graph_freed(facts, g: Graph, k: int):
    if k == 0:
        out = dict(freed_notes(g))
        out["loss"] = f"second backward: {_short(facts['second_backward'], 48)}"
        return out
    return {"additions": f"saved nothing; second backward: {_short(facts['second_backward_additions_only'])}"}


def _no_graph(facts, g: Graph, k: int):
    out = dict(region_notes(g))
    view = facts["tensors"].get("view")
    if view is not None:
        out["view"] = f"a view made in no_grad: {_flags(view)}"
    return out


def _saves_memory(facts, g: Graph, k: int):
    arm = facts["without" if k == 0 else "with"]
    key = "out" if k == 0 else "evaluated"
    return {key: f"saved for backward: {arm['saved_tensors']} tensors, {arm['saved_bytes']} bytes"}


def _freeze_all_same(facts, g: Graph, k: int):
    f = facts["frozen_input_requires_grad"]
    return {"out_fr_input": f"frozen parameters, input requires grad: {_flags({'is_leaf': False, **f})}"}


def _optimizer(facts, g: Graph, k: int):
    out = {}
    for name in facts["before"]:
        moved = facts["before"][name] != facts["after_step"][name]
        registered = name in facts["registered"]
        out[name] = (
            f"{'registered' if registered else 'not registered'}: {_v(facts['before'][name])} -> "
            f"{_v(facts['after_step'][name])}{'' if moved else ' (unchanged)'}"
        )
    return out


def _erratum(facts, g: Graph, k: int):
    first = next((t.name for t in g.tensors if t.name), None)
    note = f"as printed: {_short(facts['as_printed'], 44)}; corrected: {_short(facts['corrected'], 20)}"
    return {first: note} if first else {}


#: Claim id -> its note maker.
NOTES: dict[str, NoteMaker] = {
    "graph.dynamic": _dynamic,
    "leaf.user_created": _flag_notes("tensors"),
    "leaf.derived_nonleaf": _flag_notes("derived", ("y1", "loss")),
    "leaf.no_grad_inputs": _flag_notes("tensors", ("x", "xx")),
    "leaf.backprop_ends": _backprop_ends,
    "defaults.requires_grad": _defaults,
    "requires_grad.propagates": _propagates,
    "requires_grad.nonleaf_locked": _nonleaf_locked,
    "requires_grad.freeze_leaf": _freeze_leaf,
    "detach.is_copy": _is_copy,
    "detach.two_losses": _two_losses,
    "accumulate.two_backwards": _two_backwards,
    "accumulate.without_zero_grad": _without_zero_grad,
    "zero_grad.sets_zero": _zero_grad,
    "retain_grad.nonleaf_discarded": _nonleaf_discarded,
    "retain_grad.keeps": lambda facts, g, k: released_notes(g, ("y1", "y3")),
    "retain_grad.graph_freed": _graph_freed,
    "no_grad.no_graph": _no_graph,
    "no_grad.saves_memory": _saves_memory,
    "no_grad.freeze_all_same": _freeze_all_same,
    "optimizer.registered_params": _optimizer,
    "erratum.undefined_p": _erratum,
    "erratum.back_ward": _erratum,
    "erratum.nograd": _erratum,
}
