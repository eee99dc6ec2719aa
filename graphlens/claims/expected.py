"""The verdicts each claim is expected to get, per range of torch versions, and drift."""

from __future__ import annotations

import re
from typing import Iterable, Mapping, NamedTuple

import torch

from .registry import Verdict
from .status import ERRATUM, HOLDS, NUANCED, REFUTED

__all__ = ["EXPECTED", "Drift", "parse_version", "expected_statuses", "expected_range", "drift"]

_BY_CLAIMS_MD = {
    "graph.dynamic": HOLDS,
    "leaf.user_created": HOLDS,
    "leaf.derived_nonleaf": HOLDS,
    "leaf.no_grad_inputs": HOLDS,
    "leaf.backprop_ends": HOLDS,
    "defaults.requires_grad": HOLDS,
    "requires_grad.propagates": HOLDS,
    "requires_grad.nonleaf_locked": HOLDS,
    "requires_grad.freeze_leaf": HOLDS,
    "detach.leaf_cut": HOLDS,
    "detach.is_copy": REFUTED,
    "detach.two_losses": HOLDS,
    "accumulate.two_backwards": HOLDS,
    "accumulate.without_zero_grad": HOLDS,
    "zero_grad.sets_zero": NUANCED,  # set_to_none=True became the default in torch 2.0
    "retain_grad.nonleaf_discarded": HOLDS,
    "retain_grad.keeps": HOLDS,
    "retain_grad.graph_freed": NUANCED,
    "no_grad.no_graph": NUANCED,
    "no_grad.saves_memory": HOLDS,
    "no_grad.freeze_all_same": NUANCED,
    "optimizer.registered_params": HOLDS,
    "erratum.undefined_p": ERRATUM,
    "erratum.back_ward": ERRATUM,
    "erratum.nograd": ERRATUM,
}

#: ``(lowest version, first version not covered, {claim id: status})``, checked in order.
#: torch 2.x was checked by hand on 2.13 (see CLAIMS.md).  Before 2.0, zero_grad()
#: filled zeros by default, so ``zero_grad.sets_zero`` would hold there.
EXPECTED: tuple[tuple[tuple[int, ...], tuple[int, ...], Mapping[str, str]], ...] = (
    ((2, 0), (3, 0), _BY_CLAIMS_MD),
)


def parse_version(text: str) -> tuple[int, ...]:
    """``"2.13.0+cpu"`` -> ``(2, 13, 0)``; pre-release tags are ignored.

    >>> parse_version("2.13.0+cpu"), parse_version("2.5.0a0+git1234")
    ((2, 13, 0), (2, 5, 0))
    """
    numbers = []
    for part in str(text).split("+", 1)[0].split("."):
        m = re.match(r"\d+", part)
        if m is None:
            break
        numbers.append(int(m.group()))
        if m.end() < len(part):
            break
    if not numbers:
        raise ValueError(f"unreadable torch version: {text!r} (must look like '2.13.0')")
    return tuple(numbers)


def expected_statuses(version: str | None = None) -> dict[str, str] | None:
    """The expected status of every claim for torch ``version`` (default: the installed
    one), or ``None`` when no range of :data:`EXPECTED` covers it."""
    v = parse_version(torch.__version__ if version is None else version)
    for low, high, table in EXPECTED:
        if low <= v < high:
            return dict(table)
    return None


def expected_range(version: str | None = None) -> str | None:
    """The range of :data:`EXPECTED` that covers torch ``version`` (default: the
    installed one) as text, e.g. ``"torch >=2.0,<3.0"``; ``None`` when none does."""
    v = parse_version(torch.__version__ if version is None else version)
    for low, high, _ in EXPECTED:
        if low <= v < high:
            return f"torch >={'.'.join(map(str, low))},<{'.'.join(map(str, high))}"
    return None


class Drift(NamedTuple):
    """A verdict that differs from the expected one (``expected`` is None when the
    table has no entry for the claim)."""

    id: str
    expected: str | None
    got: str
    summary: str


def drift(verdicts: Iterable[Verdict], expected: Mapping[str, str]) -> list[Drift]:
    """The verdicts whose status differs from ``expected``; an ``error`` always drifts."""
    out = []
    for v in verdicts:
        want = expected.get(v.id)
        if v.status != want:
            out.append(Drift(v.id, want, v.status, v.summary))
    return out
