"""Section 1: which tensors are leaves, where backpropagation ends, the requires_grad defaults."""

from __future__ import annotations

import torch

from ..snapshot import snapshot
from ..trace import trace
from ._observe import backward_ends, fn_name, grad_of
from .registry import HOLDS, REFUTED, Claim

__all__ = [
    "CLAIMS",
    "user_created_program", "derived_program", "no_grad_inputs_program", "backprop_ends_program",
    "defaults_program",
]


def _flags(named: dict) -> dict:
    return {
        name: {"is_leaf": t.is_leaf, "requires_grad": t.requires_grad, "grad_fn": fn_name(t)}
        for name, t in named.items()
    }


def _listing(flags: dict) -> str:
    return ", ".join(
        f"{n}: {'leaf' if f['is_leaf'] else 'non-leaf'}, grad_fn={f['grad_fn']}" for n, f in flags.items()
    )


# -- leaf.user_created ------------------------------------------------------------------
def user_created_program() -> dict:
    """Make tensors directly, with and without requires_grad, and read their flags."""
    with trace() as tr:
        x = torch.tensor([4.0, 5.0, 6.0])
        p1 = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
        w = torch.randn(2, 3, requires_grad=True)
        b = torch.zeros(2)
    return {"tensors": _flags({"x": x, "p1": p1, "w": w, "b": b}), "evidence": (tr.graph(),)}


def user_created_judge(facts: dict) -> tuple[str, str]:
    flags = facts["tensors"]
    odd = [n for n, f in flags.items() if not f["is_leaf"] or f["grad_fn"] is not None]
    if not odd:
        return HOLDS, f"all {len(flags)} tensors made directly are leaves without grad_fn\n{_listing(flags)}"
    return REFUTED, f"made directly but not a plain leaf: {', '.join(odd)}\n{_listing(flags)}"


# -- leaf.derived_nonleaf -----------------------------------------------------------------
def derived_program() -> dict:
    """Chart 2: compute from leaves that require grad (the article's example, typo
    fixed), then run backward."""
    with trace() as tr:
        p1 = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
        p2 = torch.tensor([1.1, 2.2, 3.3], requires_grad=True)
        x = torch.tensor([4.0, 5.0, 6.0])
        xx = x**2
        y1 = p1 + xx
        y2 = torch.sigmoid(y1)
        y3 = y2 + p2
        y4 = torch.sigmoid(y3)
        loss = y4.mean()
        loss.backward()
    return {"derived": _flags({"y1": y1, "y2": y2, "y3": y3, "y4": y4, "loss": loss}), "evidence": (tr.graph(),)}


def derived_judge(facts: dict) -> tuple[str, str]:
    flags = facts["derived"]
    odd = [n for n, f in flags.items() if f["is_leaf"] or f["grad_fn"] is None]
    if not odd:
        return HOLDS, f"every tensor computed from p1/p2 is a non-leaf with a grad_fn\n{_listing(flags)}"
    return REFUTED, f"computed from a requires-grad leaf yet a leaf or without grad_fn: {', '.join(odd)}\n{_listing(flags)}"


# -- leaf.no_grad_inputs -------------------------------------------------------------------
def no_grad_inputs_program(*, x_requires_grad: bool = False) -> dict:
    """Compute ``xx = x**2`` from an input that does not require grad."""
    with trace() as tr:
        x = torch.tensor([4.0, 5.0, 6.0], requires_grad=x_requires_grad)
        xx = x**2
        p1 = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
        y1 = p1 + xx
    return {"tensors": _flags({"x": x, "xx": xx, "y1": y1}), "evidence": (tr.graph(),)}


def no_grad_inputs_judge(facts: dict) -> tuple[str, str]:
    xx = facts["tensors"]["xx"]
    listing = _listing(facts["tensors"])
    if xx["is_leaf"] and xx["grad_fn"] is None and not xx["requires_grad"]:
        return HOLDS, f"xx = x**2 is a leaf: no grad_fn, requires_grad False, though an op made it\n{listing}"
    return REFUTED, f"xx = x**2 is not a leaf here (grad_fn={xx['grad_fn']}, requires_grad={xx['requires_grad']})\n{listing}"


# -- leaf.backprop_ends ---------------------------------------------------------------------
def backprop_ends_program() -> dict:
    """Walk ``next_functions`` from the loss to where it stops, then run backward."""
    p1 = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    p2 = torch.tensor([1.1, 2.2, 3.3], requires_grad=True)
    x = torch.tensor([4.0, 5.0, 6.0])
    xx = x**2
    y1 = p1 + xx
    y2 = torch.sigmoid(y1)
    y3 = y2 + p2
    y4 = torch.sigmoid(y3)
    loss = y4.mean()
    named = {"p1": p1, "p2": p2, "x": x, "xx": xx, "y1": y1, "y2": y2, "y3": y3, "y4": y4, "loss": loss}
    name_of = {id(t): n for n, t in named.items()}
    ends, variables = backward_ends(loss)
    loss.backward()
    graph = snapshot(loss)
    return {
        "end_nodes": ends,
        "accumulated_into": [name_of.get(id(v), "?") if v is not None else None for v in variables],
        "leaves_requiring_grad": [n for n, t in named.items() if t.is_leaf and t.requires_grad],
        "with_grad": [n for n, t in named.items() if grad_of(t) is not None],
        "evidence": (graph,),
    }


def backprop_ends_judge(facts: dict) -> tuple[str, str]:
    ends, into = facts["end_nodes"], facts["accumulated_into"]
    leaves, with_grad = facts["leaves_requiring_grad"], facts["with_grad"]
    text = (
        f"the walk from loss ends at {ends} into {into}; leaves requiring grad: {leaves}; "
        f"tensors with .grad after backward: {with_grad}"
    )
    all_accumulate = bool(ends) and all(e == "AccumulateGrad" for e in ends)
    if all_accumulate and sorted(into) == sorted(leaves) == sorted(with_grad):
        return HOLDS, f"backward stops only at AccumulateGrad nodes of the leaves {sorted(leaves)}, and only they get .grad\n{text}"
    return REFUTED, f"backward does not end exactly at the requiring-grad leaves\n{text}"


# -- defaults.requires_grad -----------------------------------------------------------------
def defaults_program() -> dict:
    """Read requires_grad of freshly made tensors and of a module's parameters."""
    made = {
        "torch.tensor": torch.tensor([1.0, 2.0]),
        "torch.randn": torch.randn(2),
        "torch.zeros": torch.zeros(2),
        "torch.ones_like": torch.ones_like(torch.zeros(2)),
    }
    model = torch.nn.Linear(3, 2)
    params = {f"Linear.{n}": p for n, p in model.named_parameters()}
    params["nn.Parameter"] = torch.nn.Parameter(torch.zeros(2))
    x = torch.tensor([[1.0, 2.0, 3.0]])
    out = model(x).sum()
    return {
        "user_tensors": {n: t.requires_grad for n, t in made.items()},
        "parameters": {n: p.requires_grad for n, p in params.items()},
        "evidence": (snapshot(out, module=model),),
    }


def defaults_judge(facts: dict) -> tuple[str, str]:
    user, params = facts["user_tensors"], facts["parameters"]
    text = f"user tensors: {user}; parameters: {params}"
    if not any(user.values()) and all(params.values()):
        return HOLDS, f"tensors made by the user default to requires_grad False, parameters to True\n{text}"
    return REFUTED, f"the defaults differ from the article\n{text}"


CLAIMS = (
    Claim(
        id="leaf.user_created",
        section="1",
        chart=2,
        statement="A tensor created directly by user code is a leaf of the graph and carries no grad_fn.",
        expected="is_leaf True and grad_fn None for every tensor made directly, whether or not it requires grad",
        program=user_created_program,
        judge=user_created_judge,
    ),
    Claim(
        id="leaf.derived_nonleaf",
        section="1",
        chart=2,
        statement="A result computed from a leaf that requires grad is an inner (non-leaf) node with a grad_fn.",
        expected="is_leaf False and a grad_fn for y1, y2, y3, y4 and loss",
        program=derived_program,
        judge=derived_judge,
    ),
    Claim(
        id="leaf.no_grad_inputs",
        section="1",
        chart=2,
        statement="A result computed only from tensors that need no gradient (xx = x**2) is itself a leaf.",
        expected="xx.is_leaf True, xx.grad_fn None, xx.requires_grad False",
        program=no_grad_inputs_program,
        judge=no_grad_inputs_judge,
    ),
    Claim(
        id="leaf.backprop_ends",
        section="1",
        chart=2,
        statement="Backpropagation stops at the leaves: each requiring-grad leaf is reached through its AccumulateGrad node, the only place .grad is stored.",
        expected="the backward walk ends only at AccumulateGrad nodes of p1 and p2, and only they hold .grad afterwards",
        program=backprop_ends_program,
        judge=backprop_ends_judge,
    ),
    Claim(
        id="defaults.requires_grad",
        section="1",
        chart=None,
        statement="Tensors the user makes start with requires_grad False; parameters of an nn.Module start with True.",
        expected="requires_grad False for torch.tensor/randn/zeros results, True for nn.Linear weights and nn.Parameter",
        program=defaults_program,
        judge=defaults_judge,
    ),
)
