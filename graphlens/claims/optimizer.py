"""Section 7: an optimizer updates and clears exactly the parameters registered with it."""

from __future__ import annotations

import torch

from ..snapshot import snapshot
from ._observe import grad_of, same, values
from .registry import HOLDS, REFUTED, Claim

__all__ = ["CLAIMS", "registered_params_program"]


def registered_params_program(*, register=lambda p1, p2, p3: [p1, p2]) -> dict:
    """Three parameters all get gradients; SGD is given only some of them."""
    p1 = torch.tensor([1.0, 2.0], requires_grad=True)
    p2 = torch.tensor([0.5, -0.5], requires_grad=True)
    p3 = torch.tensor([3.0, 1.0], requires_grad=True)
    named = {"p1": p1, "p2": p2, "p3": p3}
    lr = 0.5
    optimizer = torch.optim.SGD(register(p1, p2, p3), lr=lr)
    registered = [n for n, p in named.items() if any(p is q for g in optimizer.param_groups for q in g["params"])]

    loss = (p1 * p2 * p3).sum() + (p3**2).sum()
    graph = snapshot(loss)
    loss.backward()
    before = {n: values(p) for n, p in named.items()}
    grads = {n: grad_of(p) for n, p in named.items()}
    optimizer.step()
    after = {n: values(p) for n, p in named.items()}
    optimizer.zero_grad()
    grads_after_zero_grad = {n: grad_of(p) for n, p in named.items()}
    return {
        "registered": registered,
        "lr": lr,
        "before": before,
        "grad": grads,
        "after_step": after,
        "grad_after_zero_grad": grads_after_zero_grad,
        "evidence": (graph,),
    }


def registered_params_judge(facts: dict) -> tuple[str, str]:
    lr, reg = facts["lr"], facts["registered"]
    before, grad, after, cleared = facts["before"], facts["grad"], facts["after_step"], facts["grad_after_zero_grad"]
    report, wrong = [], []
    for name in before:
        moved = not same(before[name], after[name])
        if name in reg:
            want = [b - lr * g for b, g in zip(before[name], grad[name])]
            ok = same(after[name], want, tol=1e-5) and cleared[name] is None
        else:
            ok = not moved and cleared[name] is not None
        report.append(
            f"{name} ({'registered' if name in reg else 'not registered'}): {before[name]} -> {after[name]} "
            f"with grad {grad[name]}, grad after zero_grad {cleared[name]}"
        )
        if not ok:
            wrong.append(name)
    text = "; ".join(report)
    if not wrong and len(reg) < len(before):
        return HOLDS, f"step() moved exactly the registered {reg} by -lr*grad and zero_grad() cleared only theirs\n{text}"
    if not wrong:
        return REFUTED, f"every parameter was registered here, so nothing shows that others are left alone\n{text}"
    return REFUTED, f"the optimizer touched parameters other than the registered ones, or missed one: {wrong}\n{text}"


CLAIMS = (
    Claim(
        id="optimizer.registered_params",
        section="7",
        chart=None,
        statement="An optimizer changes only the parameters it was built with, using their .grad, and zero_grad() clears only theirs.",
        expected="registered parameters move by -lr * grad and lose their grad on zero_grad(); the unregistered one keeps value and grad",
        program=registered_params_program,
        judge=registered_params_judge,
    ),
)
