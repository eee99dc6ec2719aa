"""What flowed into a tensor in each backward pass, kept only where something did."""

from __future__ import annotations

from operator import index
from typing import Any, Iterator, Sequence

from .values import Kind, Summary, Where, describe, read_summary

__all__ = ["Flowed", "flowed_items", "last_flowed", "flowed_json", "FLOWED"]


class Flowed(Sequence):
    """A tensor's ``flowed``: one entry per backward pass of its trace, the :class:`Summary` of the
    gradient that flowed into the tensor in that pass, or ``None``.  It reads as the tuple of all
    those entries (``len``, indexing, slicing, iteration, ``==`` with a tuple), and keeps only
    the passes where something flowed: a training loop of ``n`` steps traced whole gives each
    of its ``n * k`` tensors ``n`` entries, almost all ``None``, which as tuples cost memory and
    time in ``n * n * k``.  :meth:`items` gives the kept passes.

    >>> f = Flowed(4, ((1, Summary((1,), "float32", 1, head=(2.0,))),))
    >>> len(f), f[0], f[1].head, f[-3].head, list(f.items())[0][0]
    (4, None, (2.0,), (2.0,), 1)
    """

    __slots__ = ("_n", "_at", "_index")

    def __init__(self, passes: int = 0, at: Sequence[tuple[int, Summary]] = ()) -> None:
        self._n = passes
        self._at = tuple(at)  # ((pass, Summary), ...) by pass, each pass once
        self._index: dict[int, Summary] | None = None

    @classmethod
    def of(cls, entries: Sequence[Summary | None]) -> "Flowed":
        """The Flowed of ``entries``, one per pass (a tuple of them, as JSON gives)."""
        if isinstance(entries, Flowed):
            return entries
        return cls(len(entries), tuple((k, s) for k, s in enumerate(entries) if s is not None))

    def items(self) -> tuple[tuple[int, Summary], ...]:
        """``(pass, Summary)`` for each pass in which a gradient flowed in, in pass order."""
        return self._at

    def last(self) -> Summary | None:
        """The gradient that flowed in last, or ``None``."""
        return self._at[-1][1] if self._at else None

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, k: Any) -> Any:
        if isinstance(k, slice):
            return tuple(self)[k]
        try:
            k = index(k)  # (any integer, as a tuple takes: numpy's too)
        except TypeError:
            raise TypeError(f"Flowed indices must be integers or slices, not {type(k).__name__}") from None
        if k < 0:
            k += self._n
        if not 0 <= k < self._n:
            raise IndexError("Flowed index out of range")
        if self._index is None:
            self._index = dict(self._at)
        return self._index.get(k)

    def __iter__(self) -> Iterator[Summary | None]:
        last = 0
        for k, s in self._at:
            yield from (None,) * (k - last)
            yield s
            last = k + 1
        yield from (None,) * (self._n - last)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Flowed):
            return self._n == other._n and self._at == other._at
        if isinstance(other, (tuple, list)):
            return len(other) == self._n and tuple(self) == tuple(other)
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self) -> int:
        return hash(tuple(self))  # (equal to a tuple of the same entries: the same hash)

    def __bool__(self) -> bool:
        return self._n > 0

    def __repr__(self) -> str:
        return f"Flowed({self._n}, {self._at!r})"

    def __reduce__(self):
        return (Flowed, (self._n, self._at))


def flowed_items(flowed: Sequence[Summary | None]) -> tuple[tuple[int, Summary], ...]:
    """``(pass, Summary)`` of each pass in which something flowed, of a :class:`Flowed` or of a
    plain tuple of entries (a record made by hand, or changed with ``_replace``)."""
    return Flowed.of(flowed).items()


def last_flowed(flowed: Sequence[Summary | None]) -> Summary | None:
    """The last gradient that flowed in, of a :class:`Flowed` or of a plain tuple of entries."""
    return Flowed.of(flowed).last()


def flowed_json(flowed: Sequence[Summary | None]) -> Any:
    """``flowed`` as JSON (schema 3): ``{"passes": n, "at": [[pass, summary], ...]}``, the passes
    where something flowed; ``[]`` for a tensor of no pass.  (Schema 2 wrote a list of ``n``
    entries, ``null`` where nothing flowed: ``n`` per tensor, the square of a loop's steps.)"""
    if not len(flowed):
        return []
    return {"passes": len(flowed), "at": [[k, s.to_dict()] for k, s in flowed_items(flowed)]}


def _read(v: Any, where: str, field: str) -> Flowed:
    if not isinstance(v, dict):  # (schema 2, and schema 3's empty one: an entry per pass)
        entries = list(v or ())
        for k in [k for k, s in enumerate(entries) if s is not None]:
            entries[k] = read_summary(entries[k], Where(lambda k=k: f"{where}: field '{field}[{k}]' is a bad summary"))
        return Flowed.of(entries)
    bad = sorted(str(k) for k in v if k not in ("passes", "at"))
    passes, at = v.get("passes"), v.get("at")
    if bad or type(passes) is not int or passes < 0 or not isinstance(at, list):
        raise ValueError(f"{where}: field {field!r} must be {FLOWED.expected}, not {describe(v)}")
    out, last = [], -1
    for n, pair in enumerate(at):
        if not (isinstance(pair, list) and len(pair) == 2 and type(pair[0]) is int and last < pair[0] < passes):
            raise ValueError(f"{where}: field '{field}.at[{n}]' must be [pass, summary], each pass once, in order, "
                             f"below {passes}, not {describe(pair)}")
        last = pair[0]
        out.append((last, read_summary(pair[1], Where(lambda n=n: f"{where}: field '{field}.at[{n}]' is a bad summary"))))
    return Flowed(passes, out)


#: A tensor's ``flowed`` in JSON: a list of summaries or null, one per pass (schema 2), or
#: ``{"passes": n, "at": [[pass, summary], ...]}`` (schema 3).
FLOWED = Kind('a list of summaries (JSON objects or null), or {"passes": n, "at": [[pass, summary], ...]}',
              lambda v: v is None or isinstance(v, (list, tuple, dict)), _read)
