"""Typos in the article's code: each misspelling is run for real, then the corrected spelling."""

from __future__ import annotations

from typing import Callable

import torch

from ..trace import trace
from ._observe import attempt, failed
from .registry import ERRATUM, HOLDS, REFUTED, Claim

__all__ = ["CLAIMS", "undefined_p_program", "back_ward_program", "nograd_program"]


def _errata_judge(kinds: tuple[str, ...], spelled: str, fixed: str) -> Callable[[dict], tuple[str, str]]:
    """A judge: ``erratum`` when the printed spelling fails with one of ``kinds`` and
    the corrected one runs; ``holds`` when the printed spelling runs."""

    def judge(facts: dict) -> tuple[str, str]:
        printed, corrected = facts["as_printed"], facts["corrected"]
        text = f"as printed ({spelled}): {printed}; corrected ({fixed}): {corrected}"
        if any(failed(printed, k) for k in kinds) and not failed(corrected):
            return ERRATUM, f"the article's {spelled} fails with {printed.split(':')[0]}; {fixed} runs\n{text}"
        if not failed(printed):
            return HOLDS, f"the article's spelling {spelled} runs on this torch\n{text}"
        return REFUTED, f"the corrected spelling does not run either (or the failure is of another kind)\n{text}"

    return judge


# -- erratum.undefined_p -------------------------------------------------------------------
def undefined_p_program() -> dict:
    """The article's section-1 code adds ``p``, a name it never defines."""
    with trace() as tr:
        p1 = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
        x = torch.tensor([4.0, 5.0, 6.0], requires_grad=False)
        xx = x**2
        printed_outcome = attempt(lambda: p + xx)  # noqa: F821 - the article's spelling, run to show it fails
        corrected_outcome = attempt(lambda: p1 + xx)
    return {"as_printed": printed_outcome, "corrected": corrected_outcome, "evidence": (tr.graph(),)}


# -- erratum.back_ward -------------------------------------------------------------------------
def back_ward_program() -> dict:
    """Section 4's code calls ``back_ward()`` on the losses."""
    with trace() as tr:
        p1 = torch.tensor([0.5, -1.0], requires_grad=True)
        xa = torch.tensor([1.0, 2.0])
        xb = torch.tensor([3.0, -1.0])
        loss1 = (xa * p1).sum()
        loss2 = (xb * p1).sum()
        printed_outcome = attempt(lambda: (loss1 + loss2).back_ward())
        corrected_outcome = attempt(lambda: (loss1 + loss2).backward())
    return {"as_printed": printed_outcome, "corrected": corrected_outcome, "evidence": (tr.graph(),)}


# -- erratum.nograd ------------------------------------------------------------------------------
def nograd_program() -> dict:
    """Section 6 names the context manager ``torch.nograd()``."""
    p1 = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)

    def as_printed():
        with torch.nograd():
            return p1 * 2

    def corrected():
        with torch.no_grad():
            return p1 * 2

    with trace() as tr:
        printed_outcome = attempt(as_printed)
        corrected_outcome = attempt(corrected)
    return {"as_printed": printed_outcome, "corrected": corrected_outcome, "evidence": (tr.graph(),)}


CLAIMS = (
    Claim(
        id="erratum.undefined_p",
        section="1",
        chart=2,
        statement="The section-1 code adds `p`, which is never defined; `p1` is meant.",
        expected="`p + xx` raises NameError; `p1 + xx` runs",
        program=undefined_p_program,
        judge=_errata_judge(("NameError",), "p + xx", "p1 + xx"),
    ),
    Claim(
        id="erratum.back_ward",
        section="4",
        chart=5,
        statement="The section-4 code calls `back_ward()`; the tensor method is `backward()`.",
        expected="`loss.back_ward()` raises AttributeError; `loss.backward()` runs",
        program=back_ward_program,
        judge=_errata_judge(("AttributeError",), "loss.back_ward()", "loss.backward()"),
    ),
    Claim(
        id="erratum.nograd",
        section="6",
        chart=None,
        statement="Section 6 names `torch.nograd()`; the context manager is `torch.no_grad()`.",
        expected="`torch.nograd()` raises AttributeError; `torch.no_grad()` runs",
        program=nograd_program,
        judge=_errata_judge(("AttributeError",), "torch.nograd()", "torch.no_grad()"),
    ),
)
