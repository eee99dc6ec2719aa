"""Section 6: inside torch.no_grad() no graph is recorded and nothing is saved for backward;
freezing every parameter is only sometimes the same thing."""

from __future__ import annotations

import torch

from ..snapshot import snapshot
from ..trace import trace
from ._observe import SavedBytes, attempt, fn_name, grad_of, same, short, values
from .registry import HOLDS, NUANCED, REFUTED, Claim

__all__ = ["CLAIMS", "no_graph_program", "saves_memory_program", "freeze_all_same_program"]


def _model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 1))


# -- no_grad.no_graph ----------------------------------------------------------------------------
def no_graph_program(*, context=torch.no_grad) -> dict:
    """Compute from a requires-grad leaf inside and outside the context; inside, also
    take a view of the leaf (views keep their base's requires_grad flag)."""
    with trace() as tr:
        p1 = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
        x = torch.tensor([4.0, 5.0, 6.0])
        outside = torch.sigmoid(p1 * x)
        with context():
            y = p1 * x
            z = torch.sigmoid(y)
            view = p1[:2]
        view_backward = attempt(lambda: (view * 1.0).sum().backward())
    flags = {
        name: {"requires_grad": t.requires_grad, "grad_fn": fn_name(t), "is_leaf": t.is_leaf}
        for name, t in (("y", y), ("z", z), ("view", view), ("outside", outside))
    }
    return {"tensors": flags, "view_backward": view_backward, "p1.grad": grad_of(p1), "evidence": (tr.graph(),)}


def no_graph_judge(facts: dict) -> tuple[str, str]:
    flags = facts["tensors"]
    text = "; ".join(f"{n}: requires_grad={f['requires_grad']}, grad_fn={f['grad_fn']}" for n, f in flags.items())
    text += f"; backward from the view: {short(facts['view_backward'], 80)}, p1.grad = {facts['p1.grad']}"
    computed = [flags["y"], flags["z"]]
    no_graph = all(not f["requires_grad"] and f["grad_fn"] is None for f in computed)
    if not (no_graph and flags["outside"]["grad_fn"]):
        return REFUTED, f"tensors made inside the block still joined the graph\n{text}"
    view = flags["view"]
    if view["grad_fn"] is None and view["requires_grad"]:
        return NUANCED, (
            "results of ops inside no_grad have requires_grad False and no grad_fn, but a view of a leaf "
            "taken inside keeps requires_grad True (a leaf of its own: no gradient reaches p1 through it)\n" + text
        )
    if view["grad_fn"] is None:
        return HOLDS, f"tensors made inside no_grad have requires_grad False and no grad_fn (the same op outside has one)\n{text}"
    return REFUTED, f"a view taken inside the block joined the graph\n{text}"


# -- no_grad.saves_memory -----------------------------------------------------------------------
def saves_memory_program(*, context=torch.no_grad) -> dict:
    """Count the bytes autograd saves for backward in one forward pass of a small
    model, without and with the context (saved_tensors_hooks see every saved tensor)."""
    model = _model()
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0], [0.5, -1.0, 0.0, 2.0]])

    without = SavedBytes()
    with without.measure():
        out = model(x).sum()
    graph = snapshot(out, module=model)

    with_context = SavedBytes()
    with with_context.measure():
        with context():
            out_ng = model(x).sum()

    with trace(module=model) as tr:
        with context():
            evaluated = model(x).sum()
    return {
        "without": without.as_dict(),
        "with": with_context.as_dict(),
        "same_output": same(values(out), values(out_ng)) and same(values(out), values(evaluated)),
        "evidence": (graph, tr.graph()),
    }


def saves_memory_judge(facts: dict) -> tuple[str, str]:
    a, b = facts["without"], facts["with"]
    text = (
        f"without no_grad: {a['saved_tensors']} tensors saved for backward, {a['saved_bytes']} bytes "
        f"({a['leaf_bytes']} of them in leaves such as weights and input, alive anyway); "
        f"inside no_grad: {b['saved_tensors']} tensors, {b['saved_bytes']} bytes; same output: {facts['same_output']}"
    )
    if a["saved_bytes"] > 0 and b["saved_bytes"] == 0 and b["saved_tensors"] == 0:
        return HOLDS, f"no_grad saved 0 bytes for backward where the normal pass saved {a['saved_bytes']}\n{text}"
    if 0 < b["saved_bytes"] < a["saved_bytes"]:
        return NUANCED, f"no_grad saved less, but not nothing\n{text}"
    return REFUTED, f"no_grad did not reduce what is saved for backward\n{text}"


# -- no_grad.freeze_all_same -------------------------------------------------------------------
def freeze_all_same_program() -> dict:
    """Evaluate a model under no_grad, then with every parameter's requires_grad set
    False instead -- with a plain input and with an input that requires grad."""
    model = _model()
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    x_needs_grad = x.clone().requires_grad_(True)  # e.g. an adversarial input, or a GAN's fake batch

    def run(inp, how):
        meter = SavedBytes()
        with meter.measure():
            if how == "no_grad":
                with torch.no_grad():
                    out = model(inp)
            else:
                out = model(inp)
        return out, {"requires_grad": out.requires_grad, "grad_fn": fn_name(out), "saved_bytes": meter.bytes}

    with trace() as seen_ng:
        out_ng, ng = run(x, "no_grad")
    out_ng_input, ng_input = run(x_needs_grad, "no_grad")
    for p in model.parameters():
        p.requires_grad_(False)
    with trace() as seen_fr:
        out_fr, frozen = run(x, "frozen")
    out_fr_input, frozen_input = run(x_needs_grad, "frozen")
    still_frozen = sum(not p.requires_grad for p in model.parameters())
    graph = snapshot(out_fr_input, module=model)
    return {
        "no_grad": ng,
        "frozen": frozen,
        "no_grad_input_requires_grad": ng_input,
        "frozen_input_requires_grad": frozen_input,
        "same_output": same(values(out_ng), values(out_fr)),
        "parameters_still_frozen_afterwards": still_frozen,
        "parameters": sum(1 for _ in model.parameters()),
        "evidence": (seen_ng.graph(), seen_fr.graph(), graph),
    }


def freeze_all_same_judge(facts: dict) -> tuple[str, str]:
    ng, fr = facts["no_grad"], facts["frozen"]
    ngi, fri = facts["no_grad_input_requires_grad"], facts["frozen_input_requires_grad"]
    text = (
        f"plain input: no_grad -> {ng}, frozen -> {fr}; input requiring grad: no_grad -> {ngi}, frozen -> {fri}; "
        f"parameters still frozen afterwards: {facts['parameters_still_frozen_afterwards']} of {facts['parameters']}"
    )

    def same_effect(a, b):
        return a["requires_grad"] == b["requires_grad"] and a["grad_fn"] == b["grad_fn"] and a["saved_bytes"] == b["saved_bytes"]

    if not (same_effect(ng, fr) and facts["same_output"]):
        return REFUTED, f"freezing the parameters does not act like no_grad even with a plain input\n{text}"
    conditions = []
    if not same_effect(ngi, fri):
        conditions.append(
            f"an input that requires grad still builds a graph with frozen parameters ({fri['saved_bytes']} bytes saved, "
            f"grad_fn {fri['grad_fn']}) while no_grad builds none"
        )
    if facts["parameters_still_frozen_afterwards"]:
        conditions.append("the flags stay False after evaluation and must be switched back before training")
    if conditions:
        return NUANCED, "same as no_grad only with a plain input: " + "; ".join(conditions) + f"\n{text}"
    return HOLDS, f"freezing every parameter acts exactly like no_grad\n{text}"


CLAIMS = (
    Claim(
        id="no_grad.no_graph",
        section="6",
        chart=None,
        statement="Inside torch.no_grad() results are not recorded: they have requires_grad False and no grad_fn.",
        expected="y and z made inside no_grad: requires_grad False, grad_fn None",
        program=no_graph_program,
        judge=no_graph_judge,
    ),
    Claim(
        id="no_grad.saves_memory",
        section="6",
        chart=None,
        statement="no_grad spares the memory backward would need: nothing is kept for a backward pass.",
        expected="bytes saved for backward > 0 in a normal forward pass, 0 inside no_grad",
        program=saves_memory_program,
        judge=saves_memory_judge,
    ),
    Claim(
        id="no_grad.freeze_all_same",
        section="6",
        chart=None,
        statement="Setting requires_grad False on every parameter has the same effect as evaluating under no_grad.",
        expected="same outputs, no grad_fn and nothing saved either way",
        program=freeze_all_same_program,
        judge=freeze_all_same_judge,
        compare=(0, 1, "under torch.no_grad()", "parameters frozen instead"),
    ),
)
