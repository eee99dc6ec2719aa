"""Section 4: backward passes add into .grad, so zero_grad() is needed between updates."""

from __future__ import annotations

import inspect

import torch

from ..snapshot import snapshot
from ..trace import trace
from ._observe import grad_of, same, values
from .registry import HOLDS, NUANCED, REFUTED, Claim

__all__ = ["CLAIMS", "two_backwards_program", "without_zero_grad_program", "sets_zero_program"]


# -- accumulate.two_backwards ----------------------------------------------------------------
def two_backwards_program(*, between=None) -> dict:
    """Chart 5: two forward passes share p1 and p2; backward each loss, then compare
    with one backward of their sum on fresh copies of the same weights."""
    with trace() as tr:
        p1 = torch.tensor([0.5, -1.0], requires_grad=True)
        p2 = torch.tensor([2.0, 1.0], requires_grad=True)
        xa = torch.tensor([1.0, 2.0])
        xb = torch.tensor([3.0, -1.0])
        ya = xa * p1 + p2
        loss1 = torch.sigmoid(ya).sum()
        yb = xb * p1 + p2
        loss2 = torch.sigmoid(yb).sum()
        loss1.backward()
        after_one = tr.graph()  # (a graph reads the tensors when it is taken)
        if between is not None:
            between(p1, p2)
        loss2.backward()
    separate = {"p1": grad_of(p1), "p2": grad_of(p2)}

    q1 = torch.tensor([0.5, -1.0], requires_grad=True)
    q2 = torch.tensor([2.0, 1.0], requires_grad=True)
    (torch.sigmoid(xa * q1 + q2).sum() + torch.sigmoid(xb * q1 + q2).sum()).backward()
    summed = {"p1": grad_of(q1), "p2": grad_of(q2)}
    bitwise = all(torch.equal(torch.tensor(separate[k]), torch.tensor(summed[k])) for k in separate if separate[k] and summed[k])
    return {"two_backwards": separate, "backward_of_sum": summed, "bitwise_equal": bitwise, "evidence": (tr.graph(), after_one)}


def two_backwards_judge(facts: dict) -> tuple[str, str]:
    a, b = facts["two_backwards"], facts["backward_of_sum"]
    text = f"loss1.backward(); loss2.backward() -> {a}; (loss1 + loss2).backward() -> {b}; bitwise equal: {facts['bitwise_equal']}"
    if all(same(a[k], b[k], tol=1e-5) for k in a):
        return HOLDS, f"two backward calls leave the same grads as one backward of the sum (within float rounding)\n{text}"
    return REFUTED, f"the grads of two backward calls differ from those of the summed loss\n{text}"


# -- accumulate.without_zero_grad -----------------------------------------------------------
def without_zero_grad_program(*, between=lambda optimizer: None) -> dict:
    """Two updates with SGD: once without zero_grad() in between, once with it."""
    xa = torch.tensor([1.0, 2.0])
    xb = torch.tensor([3.0, -1.0])
    arms = {}
    evidence = []
    for arm, clear in (("without", between), ("with", lambda optimizer: optimizer.zero_grad())):
        p = torch.tensor([0.5, -1.0], requires_grad=True)
        optimizer = torch.optim.SGD([p], lr=0.1)
        (xa * p).sum().backward()
        g1 = grad_of(p)
        optimizer.step()
        clear(optimizer)
        loss2 = torch.sigmoid(xb * p).sum()
        g2_alone = values(torch.autograd.grad(loss2, p, retain_graph=True)[0])
        loss2.backward()
        evidence.append(snapshot(loss2))  # p's grad row: what the second step will use
        arms[arm] = {"first_grad": g1, "loss2_alone": g2_alone, "grad_at_second_step": grad_of(p)}
        optimizer.step()
    return {"arms": arms, "evidence": tuple(evidence)}


def without_zero_grad_judge(facts: dict) -> tuple[str, str]:
    w, z = facts["arms"]["without"], facts["arms"]["with"]
    plus = [round(a + b, 6) for a, b in zip(w["first_grad"], w["loss2_alone"])]
    text = (
        f"without zero_grad the second step used {w['grad_at_second_step']} (first grad {w['first_grad']} + "
        f"loss2's own {w['loss2_alone']} = {plus}); with zero_grad it used {z['grad_at_second_step']} "
        f"(loss2's own {z['loss2_alone']})"
    )
    leaked = same(w["grad_at_second_step"], plus, tol=1e-5) and not same(w["grad_at_second_step"], w["loss2_alone"], tol=1e-5)
    clean = same(z["grad_at_second_step"], z["loss2_alone"], tol=1e-5)
    if leaked and clean:
        return HOLDS, f"without zero_grad() the second update's gradient still contains the first loss's; with it, only loss2's\n{text}"
    return REFUTED, f"the second update's gradient did not carry the first loss's over\n{text}"


# -- zero_grad.sets_zero ---------------------------------------------------------------------
def sets_zero_program() -> dict:
    """Call optimizer.zero_grad() with its default, then with set_to_none=False."""
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.tensor([[1.0, 2.0, 3.0]])
    outcome, evidence = {}, []
    for label, kwargs in (("default", {}), ("set_to_none=False", {"set_to_none": False})):
        loss = model(x).sum()
        loss.backward()
        optimizer.zero_grad(**kwargs)
        evidence.append(snapshot(loss, module=model))
        outcome[label] = {n: grad_of(p) for n, p in model.named_parameters()}
    parameter = inspect.signature(optimizer.zero_grad).parameters.get("set_to_none")
    default = None if parameter is None or parameter.default is inspect.Parameter.empty else parameter.default
    return {
        "after_zero_grad": outcome,
        "set_to_none_default": default,
        "torch": torch.__version__,
        "evidence": tuple(evidence),
    }


def _all_zero(grads: dict) -> bool:
    def zero(v):
        return all(zero(x) for x in v) if isinstance(v, list) else v == 0

    return all(g is not None and zero(g) for g in grads.values())


def sets_zero_judge(facts: dict) -> tuple[str, str]:
    out = facts["after_zero_grad"]
    default, explicit = out["default"], out["set_to_none=False"]
    text = (
        f"after zero_grad(): {', '.join(f'{n}.grad = {g}' for n, g in default.items())}; "
        f"after zero_grad(set_to_none=False): zeros = {_all_zero(explicit)}; set_to_none defaults to {facts['set_to_none_default']}"
    )
    if _all_zero(default):
        return HOLDS, f"zero_grad() fills the grads with zeros\n{text}"
    if all(g is None for g in default.values()) and _all_zero(explicit):
        return NUANCED, f"zero_grad() sets .grad to None by default; zeros only with set_to_none=False\n{text}"
    return REFUTED, f"zero_grad() left non-zero gradients\n{text}"


CLAIMS = (
    Claim(
        id="accumulate.two_backwards",
        section="4",
        chart=5,
        statement="Calling backward on two losses in turn leaves the same grads as one backward of their sum.",
        expected="the grads of loss1.backward(); loss2.backward() equal those of (loss1 + loss2).backward()",
        program=two_backwards_program,
        judge=two_backwards_judge,
        compare=(1, 0, "after loss1.backward()", "after loss2.backward() too"),
    ),
    Claim(
        id="accumulate.without_zero_grad",
        section="4",
        chart=5,
        statement="If the grads are not cleared between two updates, the second update still carries the first loss's gradient.",
        expected="the grad at the second step is the first grad plus loss2's own; with zero_grad() only loss2's",
        program=without_zero_grad_program,
        judge=without_zero_grad_judge,
    ),
    Claim(
        id="zero_grad.sets_zero",
        section="4",
        chart=None,
        statement="optimizer.zero_grad() resets the registered parameters' gradients to zero.",
        expected="every registered parameter's .grad is a tensor of zeros after zero_grad()",
        program=sets_zero_program,
        judge=sets_zero_judge,
    ),
)
