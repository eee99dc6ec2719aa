"""What graphlens reads of tensor values: Summary (numbers, never text) and saved entries."""

from __future__ import annotations

import enum
import math
from typing import Any, Mapping, NamedTuple

__all__ = [
    "Summary", "SavedState", "SavedEntry", "LIVE", "FREED", "MODIFIED", "HIDDEN", "UNREADABLE",
    "PRECISION", "format_number",
]

#: Significant digits a value shows unless a ``precision=`` option says otherwise.
PRECISION = 4


def format_number(v: Any, precision: int = PRECISION) -> str:
    """One number as the diagrams show it: ``0.5``, ``24.7``, ``1e+06``, ``nan``, ``True``."""
    cls = type(v)
    if cls is float:
        return "0" if v == 0 else format(v, f".{precision}g")  # nan/inf spell as str() does; -0.0 -> 0
    if cls is int or cls is bool:
        return str(v)
    if cls is complex:
        return f"{format_number(v.real, precision)}{'+' if not v.imag < 0 else '-'}{format_number(abs(v.imag), precision)}j"
    return str(v)


def _nan_key(v: Any) -> Any:
    """A stand-in that compares equal for two NaNs (a value read twice is the same value)."""
    if type(v) is float and v != v:
        return ("nan",)
    if type(v) is complex and (v.real != v.real or v.imag != v.imag):
        return ("nan", _nan_key(v.real), _nan_key(v.imag))
    return v


class Summary(NamedTuple):
    """What graphlens read of one tensor's contents: numbers, never display text.

    ``head`` holds the first elements in row-major order as Python numbers (``float``,
    ``int``, ``bool`` or ``complex``): all of them for a small tensor, the first
    ``max_elements`` otherwise; ``None`` when the values were not read (sparse, meta or
    quantized tensors, and saved tensors, of which only shape and dtype are known).
    ``min``, ``max`` and ``mean`` are floats where they apply and were read, else
    ``None``.  ``str(summary)`` is the compact text the diagrams show; :meth:`format`
    takes a precision.

    >>> s = Summary((2,), "float32", 2, (18.0, 64.0), 18.0, 64.0, 41.0)
    >>> str(s), s.format(precision=2), s.head
    ('[18, 64]', '[18, 64]', (18.0, 64.0))
    >>> Summary((), "float32", 1, (24.70413,)).format(precision=6)
    '24.7041'
    """

    shape: tuple[int, ...]
    dtype: str
    numel: int
    head: tuple | None = ()
    min: float | None = None
    max: float | None = None
    mean: float | None = None

    @property
    def complete(self) -> bool:
        """Whether ``head`` holds every element."""
        return self.head is not None and len(self.head) >= self.numel

    def format(self, precision: int = PRECISION, max_elements: int | None = None) -> str:
        """The values as text, ``precision`` significant digits: ``"[0.5, 1, … (9 elements)]"``.

        At most ``max_elements`` numbers are shown (all that were read when ``None``); a
        0-d tensor gives one bare number; unread values give ``"<float32[2, 3]>"``."""
        head = self.head
        if head is None:
            return f"<{self.dtype}[{', '.join(map(str, self.shape))}]>"
        if self.shape == () and head:
            return format_number(head[0], precision)
        if max_elements is not None and max_elements < len(head):
            head = head[:max(max_elements, 0)]
        body = ", ".join(format_number(v, precision) for v in head)
        if self.numel > len(head):
            body = (body + ", " if body else "") + f"… ({self.numel} elements)"
        return f"[{body}]"

    def __str__(self) -> str:
        return self.format()

    def __repr__(self) -> str:
        extra = "".join(f", {k}={getattr(self, k)!r}" for k in ("min", "max", "mean") if getattr(self, k) is not None)
        return f"Summary({self.shape!r}, {self.dtype!r}, {self.numel!r}, head={self.head!r}{extra})"

    def _key(self) -> tuple:
        head = None if self.head is None else tuple(map(_nan_key, self.head))
        return (self.shape, self.dtype, self.numel, head, _nan_key(self.min), _nan_key(self.max), _nan_key(self.mean))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Summary):
            return NotImplemented
        return self._key() == other._key()

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self) -> int:
        return hash(self._key())

    # -- JSON ---------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values: non-finite floats as ``"nan"``/``"inf"``/``"-inf"``, complex
        numbers as ``{"re": .., "im": ..}``."""
        return {
            "shape": list(self.shape), "dtype": self.dtype, "numel": self.numel,
            "head": None if self.head is None else [_json_number(v) for v in self.head],
            "min": _json_number(self.min), "max": _json_number(self.max), "mean": _json_number(self.mean),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Summary":
        """The inverse of :meth:`to_dict`; a ``ValueError`` names what is wrong."""
        if not isinstance(data, Mapping):
            raise ValueError(f"a summary must be a JSON object, not {type(data).__name__}")
        unknown = sorted(set(data) - set(cls._fields))
        if unknown:
            raise ValueError(f"unknown Summary field(s) {unknown} (must be among {list(cls._fields)})")
        try:
            head = data.get("head", ())
            return cls(
                tuple(n if isinstance(n, str) else int(n) for n in data["shape"]), str(data["dtype"]), int(data["numel"]),
                None if head is None else tuple(_from_json_number(v) for v in head),
                *(_from_json_number(data.get(k)) for k in ("min", "max", "mean")),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"bad summary {dict(data)!r}: {exc}") from None


def _json_number(v: Any) -> Any:
    if type(v) is float and not math.isfinite(v):
        return "nan" if v != v else ("inf" if v > 0 else "-inf")
    if type(v) is complex:
        return {"re": _json_number(v.real), "im": _json_number(v.imag)}
    return v


def _from_json_number(v: Any) -> Any:
    if isinstance(v, str):
        if v in ("nan", "inf", "-inf"):
            return float(v)
        raise ValueError(f"not a number: {v!r}")
    if isinstance(v, Mapping):
        return complex(_from_json_number(v["re"]), _from_json_number(v["im"]))
    if v is not None and not isinstance(v, (int, float, bool)):
        raise ValueError(f"not a number: {v!r}")
    return v


class SavedState(str, enum.Enum):
    """What became of one value a backward node saved."""

    #: still held: backward can use it
    LIVE = "live"
    #: released by a backward pass (a second backward through this node fails)
    FREED = "freed"
    #: the saved tensor was changed in place after it was saved (backward would fail)
    MODIFIED = "modified in place"
    #: saved-tensor hooks hold it; graphlens does not run a user's unpack hook to look
    HIDDEN = "hidden by saved-tensor hooks"
    #: torch refused to hand it over for another reason
    UNREADABLE = "unreadable"

    def __str__(self) -> str:
        return self.value


LIVE, FREED, MODIFIED, HIDDEN, UNREADABLE = SavedState


class SavedEntry(NamedTuple):
    """One attribute a backward node saved for backward (``MulBackward0._saved_self``).

    ``name`` is the attribute without its prefix (``"self"``, ``"other"``, ``"result"``);
    ``state`` a :class:`SavedState`; ``tensor`` the id of the tensor node it saved, where
    graphlens knows it (so a diagram can say ``self = x``); ``summary`` the saved
    tensor's shape and dtype (a :class:`Summary`), where one was read; ``value`` a plain
    saved value that is not a tensor (a number, a tuple of sizes, a short text)."""

    name: str
    state: SavedState = SavedState.LIVE
    tensor: str | None = None
    summary: Summary | None = None
    value: Any = None

    @property
    def is_tensor(self) -> bool:
        """Whether a tensor was saved (live or not), as opposed to a plain value."""
        return self.summary is not None or self.tensor is not None or (self.state is not LIVE and self.value is None)

    def format(self, precision: int = PRECISION) -> str:
        """What is known of the value, as text: ``"float32[3]"``, ``"(2, 3)"``, ``"freed"``."""
        if self.state is not LIVE:
            return self.state.value
        if self.summary is not None:
            return f"{self.summary.dtype}[{', '.join(map(str, self.summary.shape))}]"
        v = self.value
        if isinstance(v, (float, int, complex)) and not isinstance(v, bool):
            return format_number(v, precision)
        if isinstance(v, tuple):
            return "(" + ", ".join(map(str, v)) + ("," if len(v) == 1 else "") + ")"
        return str(v)

    def __str__(self) -> str:
        return self.format()

    def to_dict(self) -> dict[str, Any]:
        value = self.value
        if isinstance(value, tuple):
            value = {"tuple": [_json_number(v) for v in value]}
        else:
            value = _json_number(value)
        return {
            "name": self.name, "state": self.state.value, "tensor": self.tensor,
            "summary": None if self.summary is None else self.summary.to_dict(), "value": value,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "SavedEntry":
        if not isinstance(data, Mapping):
            raise ValueError(f"a saved entry must be a JSON object, not {type(data).__name__}")
        unknown = sorted(set(data) - set(cls._fields))
        if unknown:
            raise ValueError(f"unknown SavedEntry field(s) {unknown} (must be among {list(cls._fields)})")
        try:
            state = SavedState(data.get("state", "live"))
        except ValueError:
            raise ValueError(
                f"unknown saved state: {data.get('state')!r} (must be one of {[s.value for s in SavedState]})"
            ) from None
        value = data.get("value")
        if isinstance(value, Mapping) and "tuple" in value:
            value = tuple(_from_json_number(v) for v in value["tuple"])
        elif not isinstance(value, str):
            value = _from_json_number(value)
        summary = data.get("summary")
        return cls(str(data["name"]), state, data.get("tensor"), None if summary is None else Summary.from_dict(summary), value)
