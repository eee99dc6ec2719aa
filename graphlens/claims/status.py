"""The verdict statuses, once: their words, their order, what each means and how each is shown."""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["HOLDS", "NUANCED", "REFUTED", "ERRATUM", "ERROR", "STATUSES", "Status", "STATUS"]

HOLDS = "holds"  #: torch behaves as the article says
NUANCED = "nuanced"  #: true only under a condition the article leaves out
REFUTED = "refuted"  #: the installed torch behaves otherwise
ERRATUM = "erratum"  #: the article's code has a typo: its spelling fails, the fix runs
ERROR = "error"  #: the check itself failed (a bug, or torch raised something new)

#: Every status a verdict can have, in the order tables and tallies list them.
STATUSES = (HOLDS, NUANCED, REFUTED, ERRATUM, ERROR)


class Status(NamedTuple):
    """How one status reads and shows: ``meaning`` (one line, e.g. a tooltip), ``legend``
    (the shorter gloss of the tour's legend line; empty for a status it leaves out),
    ``ansi`` (the terminal's SGR colour code) and ``color`` (the tour's CSS colour)."""

    word: str
    meaning: str
    legend: str
    ansi: str
    color: str


#: Each status's display, by word, in :data:`STATUSES` order.
STATUS: dict[str, Status] = {
    s.word: s
    for s in (
        Status(HOLDS, "torch behaves as the article says", "as the article says", "32", "#2e7d32"),  # green
        Status(NUANCED, "true only under a condition the article leaves out",
               "true only under a condition it leaves out", "33", "#b26a00"),  # yellow
        Status(REFUTED, "the installed torch behaves otherwise", "torch behaves otherwise", "31", "#c62828"),  # red
        Status(ERRATUM, "a typo in the article's code: its spelling fails, the fix runs",
               "a typo in the article's code", "36", "#6a1b9a"),  # cyan / purple
        Status(ERROR, "the check itself failed", "", "1;31", "#616161"),  # bold red / grey
    )
}
assert tuple(STATUS) == STATUSES
