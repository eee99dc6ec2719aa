"""The article's claims as live checks against the installed torch.

Each :class:`Claim` runs a small real torch program, observes what torch does and
judges it into a :class:`Verdict` (``holds``, ``nuanced``, ``refuted``, ``erratum`` or,
when the check itself broke, ``error``)::

    import graphlens.claims as claims
    for verdict in claims.check_all():
        print(verdict.id, verdict.status, verdict.summary)
    claims.check("detach.is_copy").details["same_storage"]   # True: detach() shares storage
"""

from .expected import Drift, drift, expected_range, expected_statuses
from .registry import (
    ARTICLE, ERRATUM, ERROR, HOLDS, NUANCED, REFUTED, STATUSES, Claim, UnknownClaimError, Verdict,
    all, check, check_all, get, ids, run,
)
from .status import STATUS, Status

# ``all`` is public (graphlens.claims.all()) but left out of __all__ so that a star
# import never shadows the builtin.
__all__ = [
    "Claim", "Verdict", "UnknownClaimError", "Drift",
    "ids", "get", "check", "check_all", "run", "expected_statuses", "expected_range", "drift",
    "STATUSES", "HOLDS", "NUANCED", "REFUTED", "ERRATUM", "ERROR", "STATUS", "Status", "ARTICLE",
]
