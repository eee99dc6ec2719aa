"""Claims, verdicts and the registry that runs them, one isolated check at a time."""

from __future__ import annotations

import difflib
import functools
import importlib
import inspect
import math
import textwrap
import traceback
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

import torch

from ..graph import Graph
from .claim_notes import NOTES
from .notes import annotate_evidence
# (the statuses are defined in .status; importable from here as before)
from .status import ERRATUM, ERROR, HOLDS, NUANCED, REFUTED, STATUSES

# ``all`` is public (graphlens.claims.all()) but left out of __all__ so that a star

#: The article graphlens checks (its title, as published; the claims restate it in graphlens's own words).
ARTICLE = "Understand dynamic calculation diagram, requires_grad, zero_grad"
# import never shadows the builtin.
__all__ = [
    "HOLDS", "NUANCED", "REFUTED", "ERRATUM", "ERROR", "STATUSES", "SECTIONS",
    "Verdict", "Claim", "UnknownClaimError", "ids", "get", "check", "check_all", "run",
]

#: The article's sections, in order, as claims cite them.
SECTIONS = ("intro", "1", "2", "3", "4", "5", "6", "7")

#: What a program hands back: plain observed values, and optionally ``"evidence"``
#: (a tuple of :class:`~graphlens.Graph`) to draw.
Facts = dict

#: A judge reads the facts (and nothing else) and returns ``(status, observed text)``.
Judge = Callable[[Facts], "tuple[str, str]"]


@dataclass(frozen=True)
class Verdict:
    """What a check found.

    ``status`` is one of :data:`STATUSES`; ``observed`` says in words and values what
    torch did (its first line is a one-line summary); ``expected`` what the article
    leads one to expect; ``evidence`` holds graphs to draw; ``details`` the raw observed
    values (plain lists, numbers and strings, ready for JSON).
    """

    id: str
    status: str
    observed: str
    expected: str
    evidence: tuple[Graph, ...] = ()
    details: Mapping[str, Any] = field(default_factory=dict)

    @property
    def summary(self) -> str:
        """The first line of ``observed``."""
        return self.observed.split("\n", 1)[0]

    def to_dict(self, *, evidence: bool = False) -> dict[str, Any]:
        """A JSON-ready dict; the graphs are included (as ``Graph.to_dict()``) only
        with ``evidence=True``, otherwise just counted."""
        out: dict[str, Any] = {
            "id": self.id,
            "status": self.status,
            "summary": self.summary,
            "observed": self.observed,
            "expected": self.expected,
            "details": _plain(self.details),
            "evidence": [g.to_dict() for g in self.evidence] if evidence else len(self.evidence),
        }
        return out


@dataclass(frozen=True)
class Claim:
    """One statement of the article, as a check.

    ``program`` builds a small real torch program, observes it and returns the facts
    (a dict of plain values, plus ``"evidence"`` graphs); ``judge`` turns the facts
    into ``(status, observed)``.  :meth:`check` runs both; pass ``program=`` to run the
    same judge on an altered program.
    """

    id: str
    section: str
    chart: int | None
    statement: str
    expected: str
    program: Callable[..., Facts] = field(repr=False)
    judge: Judge = field(repr=False)
    #: the claim's own notes on its evidence graphs, from what the run observed (see claims.notes)
    notes: Callable[..., Any] | None = field(default=None, repr=False)
    #: for a claim about a difference: ``(i, j, label_i, label_j)``, the two evidence graphs to
    #: draw side by side (graphlens.compare)
    compare: tuple[int, int, str, str] | None = None

    def __post_init__(self) -> None:
        if self.section not in SECTIONS:
            raise ValueError(f"claim {self.id!r}: unknown section {self.section!r} (must be one of {list(SECTIONS)})")
        if self.chart is not None and self.chart not in range(1, 7):
            raise ValueError(f"claim {self.id!r}: chart must be 1 to 6 or None, not {self.chart!r}")

    @property
    def code(self) -> str:
        """The source of the program that the check runs (for display)."""
        return program_code(self.program)

    def check(self, *, program: Callable[..., Facts] | None = None) -> Verdict:
        """Run ``program`` (default: the claim's own) and judge what it observed.

        Never raises for a failing program or judge: that gives status ``"error"``
        with a traceback summary.  Grad mode is on while it runs and the global random
        state is restored afterwards."""
        run_program = self.program if program is None else program
        try:
            with torch.random.fork_rng(devices=[]), torch.enable_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.manual_seed(0)
                facts = run_program()
                if not isinstance(facts, dict):
                    raise TypeError(f"the program of claim {self.id!r} must return a dict of facts, not {type(facts).__name__}")
                facts = dict(facts)
                evidence = tuple(facts.pop("evidence", ()) or ())
                bad = [type(g).__name__ for g in evidence if not isinstance(g, Graph)]
                if bad:
                    raise TypeError(f"the evidence of claim {self.id!r} must be graphlens Graphs, not {bad}")
                status, observed = self.judge(facts)
                notes = self.notes or NOTES.get(self.id)
                evidence = tuple(annotate_evidence(g, facts, k, notes) for k, g in enumerate(evidence))
            if status not in STATUSES:
                raise ValueError(f"the judge of claim {self.id!r} gave status {status!r} (must be one of {list(STATUSES)})")
        except Exception as exc:  # noqa: BLE001 - one broken check must not stop the others
            return _error_verdict(self, exc)
        return Verdict(self.id, status, observed, self.expected, evidence, _plain(facts))


def program_code(program: Callable[..., Any]) -> str:
    """The dedented source of ``program``; for a ``functools.partial`` the source of its
    function followed by a comment with the arguments it is run with."""
    target = getattr(program, "func", program)
    try:
        code = textwrap.dedent(inspect.getsource(target))
    except (OSError, TypeError):
        return f"# source of {getattr(target, '__qualname__', target)!r} is not available\n"
    if isinstance(program, functools.partial):
        args = [repr(a) for a in program.args] + [f"{k}={v!r}" for k, v in program.keywords.items()]
        code += f"\n# run as {target.__name__}({', '.join(args)})\n"
    return code


def _error_verdict(claim: Claim, exc: BaseException) -> Verdict:
    frames = traceback.extract_tb(exc.__traceback__)
    where = [f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno} in {f.name}" for f in frames[-3:]]
    message = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    observed = f"the check failed: {message}\nat " + " <- ".join(reversed(where))
    details = {"exception": type(exc).__name__, "message": str(exc), "traceback": where}
    return Verdict(claim.id, ERROR, observed, claim.expected, (), details)


def _plain(value: Any) -> Any:
    """``value`` as JSON-ready data: tuples -> lists, tensors -> lists, non-finite
    floats -> strings, anything else unknown -> its ``str``."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, torch.Tensor):
        return _plain(value.detach().tolist())
    return str(value)


# -- the registry ---------------------------------------------------------------------
#: The modules that define claims, in the article's order; each has a ``CLAIMS`` tuple.
MODULES = (
    "dynamic", "leaf", "requires_grad", "detach", "accumulate", "retain_grad", "no_grad", "optimizer", "errata",
)
_REGISTRY: dict[str, Claim] = {}


def _registry() -> dict[str, Claim]:
    if not _REGISTRY:
        found: dict[str, Claim] = {}
        for name in MODULES:
            module = importlib.import_module(f"{__package__}.{name}")
            for claim in module.CLAIMS:
                if claim.id in found:
                    raise RuntimeError(f"claim id {claim.id!r} is defined twice (second time in {module.__name__})")
                found[claim.id] = claim
        _REGISTRY.update(found)
    return _REGISTRY


def all() -> tuple[Claim, ...]:  # noqa: A001 - the public name is graphlens.claims.all()
    """Every claim, in the article's order (the errata last)."""
    return tuple(_registry().values())


def ids() -> tuple[str, ...]:
    """Every claim id, in the article's order."""
    return tuple(_registry())


def get(id: str) -> Claim:
    """The claim with this id; an unknown id raises :class:`UnknownClaimError` naming
    the nearest ids."""
    registry = _registry()
    try:
        return registry[id]
    except (KeyError, TypeError):
        raise UnknownClaimError(id, tuple(registry)) from None


class UnknownClaimError(LookupError):
    """No claim has the id that was asked for."""

    def __init__(self, id: object, known: tuple[str, ...]) -> None:
        self.id = id
        text = str(id)
        near = difflib.get_close_matches(text, known, n=3, cutoff=0.5)
        near += [k for k in known if text and k.startswith(text) and k not in near][: max(0, 5 - len(near))]
        hint = f"did you mean {', '.join(repr(n) for n in near)}?" if near else f"known ids: {', '.join(known)}"
        super().__init__(f"unknown claim id: {id!r} ({hint} graphlens.claims.ids() lists them all)")


def check(id: str, *, program: Callable[..., Facts] | None = None) -> Verdict:
    """Check one claim by id (see :meth:`Claim.check`).

    >>> import graphlens.claims as claims
    >>> v = claims.check("detach.is_copy")
    >>> v.status, v.details["same_storage"]
    ('refuted', True)
    """
    return get(id).check(program=program)


def run(claims: Iterable[Claim], progress: Callable[[Claim], Any] | None = None) -> tuple[Verdict, ...]:
    """Check each of ``claims`` in turn, calling ``progress(claim)`` before each one."""
    out = []
    for claim in claims:
        if progress is not None:
            progress(claim)
        out.append(claim.check())
    return tuple(out)


def check_all(progress: Callable[[Claim], Any] | None = None) -> tuple[Verdict, ...]:
    """Check every claim in the article's order; ``progress(claim)`` is called before
    each check.  A failing check gives an ``"error"`` verdict and the others still run."""
    return run(all(), progress)
