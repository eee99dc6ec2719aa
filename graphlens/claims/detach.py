"""Section 3: detach() makes a leaf cut from the graph, shares the original's storage,
and lets two losses train two parameter sets separately."""

from __future__ import annotations

import torch

from ..trace import trace
from ._observe import attempt, backward_ends, failed, fn_name, grad_list, grad_of, same, short, values
from .registry import HOLDS, REFUTED, Claim

__all__ = ["CLAIMS", "leaf_cut_program", "is_copy_program", "two_losses_program"]


# -- detach.leaf_cut -------------------------------------------------------------------------
def leaf_cut_program(*, cut=torch.Tensor.detach) -> dict:
    """The article's example: ``y1`` is detached before it feeds ``y2``."""
    with trace() as tr:
        p1 = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
        p2 = torch.tensor([1.1, 2.2, 3.3], requires_grad=True)
        x = torch.tensor([4.0, 5.0, 6.0])
        xx = x**2
        y1 = p1 + xx
        y1 = cut(y1)
        cut_flags = {"is_leaf": y1.is_leaf, "requires_grad": y1.requires_grad, "grad_fn": fn_name(y1)}
        y2 = torch.sigmoid(y1)
        y3 = y2 + p2
        y4 = torch.sigmoid(y3)
        loss = y4.mean()
        _, reached = backward_ends(loss)
        loss.backward()
    return {
        "detached": cut_flags,
        "p1_reached_from_loss": any(v is p1 for v in reached),
        "p1.grad": grad_of(p1),
        "p2.grad": grad_of(p2),
        "evidence": (tr.graph(),),
    }


def leaf_cut_judge(facts: dict) -> tuple[str, str]:
    d = facts["detached"]
    text = (
        f"detached y1: is_leaf={d['is_leaf']}, requires_grad={d['requires_grad']}, grad_fn={d['grad_fn']}; "
        f"p1 reachable from loss: {facts['p1_reached_from_loss']}; p1.grad = {facts['p1.grad']}; p2.grad = {facts['p2.grad']}"
    )
    cut = d["is_leaf"] and not d["requires_grad"] and d["grad_fn"] is None
    if cut and not facts["p1_reached_from_loss"] and facts["p1.grad"] is None and facts["p2.grad"] is not None:
        return HOLDS, f"the detached tensor is a leaf without grad; no gradient reaches p1 through it\n{text}"
    return REFUTED, f"the cut tensor still links to the graph\n{text}"


# -- detach.is_copy ----------------------------------------------------------------------------
def is_copy_program(*, cut=torch.Tensor.detach) -> dict:
    """Detach the output of sigmoid (which backward needs), change the detached
    tensor in place, then look at the original and run backward."""
    with trace() as tr:
        p1 = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
        y = torch.sigmoid(p1)  # SigmoidBackward0 saves its output y
        d = cut(y)
        same_storage = d.data_ptr() == y.data_ptr()
        y_before, versions_before = values(y), (y._version, d._version)
        d.mul_(10)
        y_after, versions_after = values(y), (y._version, d._version)
        backward = attempt(lambda: y.sum().backward())
    return {
        "same_storage": same_storage,
        "y_before": y_before,
        "y_after_changing_d": y_after,
        "versions_before": list(versions_before),
        "versions_after": list(versions_after),
        "backward": backward,
        "p1.grad": grad_of(p1),
        "evidence": (tr.graph(),),
    }


def is_copy_judge(facts: dict) -> tuple[str, str]:
    shared = facts["same_storage"]
    seen = not same(facts["y_before"], facts["y_after_changing_d"])
    counter = facts["versions_after"][0] != facts["versions_before"][0]
    broke = failed(facts["backward"])
    text = (
        f"same data_ptr: {shared}; original y {facts['y_before']} -> {facts['y_after_changing_d']} after d.mul_(10); "
        f"versions (y, d) {facts['versions_before']} -> {facts['versions_after']}; backward: {short(facts['backward'], 150)}"
    )
    if shared or seen or counter or broke:
        effects = [s for s, on in (
            ("shares the original's storage", shared),
            ("shares its version counter", counter),
            ("an in-place change to it shows in the original", seen),
            ("backward then fails", broke),
        ) if on]
        return REFUTED, f"not a copy: the detached tensor {', '.join(effects)}\n{text}"
    return HOLDS, f"a real copy: own storage, the original untouched, backward fine\n{text}"


# -- detach.two_losses -----------------------------------------------------------------------
def two_losses_program(*, cut=torch.Tensor.detach) -> dict:
    """Chart 4: loss1 trains p1; loss2 trains p2 on a detached copy of y2.  What each
    loss alone gives is measured on a second, untraced run of the same forward pass."""
    with trace() as tr:
        x = torch.tensor([1.0, 2.0, 3.0])
        p1 = torch.tensor([0.5, -0.5, 1.0], requires_grad=True)
        p2 = torch.tensor([0.1, 0.2, 0.3], requires_grad=True)
        y1 = x * p1
        y2 = torch.sigmoid(y1)
        loss1 = y2.mean()
        y2d = cut(y2)
        y3 = y2d * p2
        loss2 = y3.sum()
        loss1.backward()
        after_loss1 = {"p1": grad_list(p1), "p2": grad_list(p2)}  # plain lists: nothing traced
        loss2.backward()
    after_both = {"p1": grad_of(p1), "p2": grad_of(p2)}

    q1, q2 = p1.detach().clone().requires_grad_(), p2.detach().clone().requires_grad_()
    z2 = torch.sigmoid(x * q1)
    alone1 = torch.autograd.grad(z2.mean(), (q1, q2), retain_graph=True, allow_unused=True)
    alone2 = torch.autograd.grad((cut(z2) * q2).sum(), (q1, q2), retain_graph=True, allow_unused=True)
    return {
        "loss1_alone": {"p1": values(alone1[0]), "p2": values(alone1[1])},
        "loss2_alone": {"p1": values(alone2[0]), "p2": values(alone2[1])},
        "after_loss1": after_loss1,
        "after_both": after_both,
        "evidence": (tr.graph(),),
    }


def two_losses_judge(facts: dict) -> tuple[str, str]:
    a1, a2, both = facts["loss1_alone"], facts["loss2_alone"], facts["after_both"]
    text = (
        f"loss1 alone gives p1 {a1['p1']}, p2 {a1['p2']}; loss2 alone gives p1 {a2['p1']}, p2 {a2['p2']}; "
        f"after both backward calls p1.grad = {both['p1']}, p2.grad = {both['p2']}"
    )
    separate = a1["p2"] is None and a2["p1"] is None
    if separate and same(both["p1"], a1["p1"]) and same(both["p2"], a2["p2"]):
        return HOLDS, f"loss1 reaches only p1 and loss2 only p2: their gradients do not mix\n{text}"
    leaks = [f"loss{i} reaches {name}" for i, name, g in ((1, "p2", a1["p2"]), (2, "p1", a2["p1"])) if g is not None]
    return REFUTED, f"the two losses' gradients mix: {', '.join(leaks) or 'the accumulated grads differ'}\n{text}"


CLAIMS = (
    Claim(
        id="detach.leaf_cut",
        section="3",
        chart=4,
        statement="detach() hands back a leaf that does not require grad and is cut off: backward cannot cross it.",
        expected="the detached y1 is a leaf with requires_grad False and no grad_fn; p1 gets no gradient",
        program=leaf_cut_program,
        judge=leaf_cut_judge,
    ),
    Claim(
        id="detach.is_copy",
        section="3",
        chart=4,
        statement="What detach() returns is a copy of the tensor.",
        expected="separate storage: changing the detached tensor leaves the original, and its backward, untouched",
        program=is_copy_program,
        judge=is_copy_judge,
    ),
    Claim(
        id="detach.two_losses",
        section="3",
        chart=4,
        statement="A detach between two losses lets each loss train its own parameters without disturbing the other (as in a GAN).",
        expected="p1.grad equals loss1's gradient alone, p2.grad equals loss2's gradient alone",
        program=two_losses_program,
        judge=two_losses_judge,
    ),
)
