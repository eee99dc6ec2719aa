"""What graphlens reads of tensor values: Summary (numbers, never text) and saved entries, and their JSON
(read back field by field: every error names the record and the field)."""

from __future__ import annotations

import enum
import math
import reprlib
from typing import Any, Callable, Mapping, NamedTuple

__all__ = [
    "Summary", "SavedState", "SavedEntry", "SavedStorage", "STORAGE_KINDS", "LIVE", "FREED", "MODIFIED", "HIDDEN",
    "UNREADABLE", "PRECISION", "format_number", "same_head",
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


def same_head(a: tuple | None, b: tuple | None) -> bool:
    """Whether two heads of values hold the same numbers, a NaN the same as a NaN (a tensor
    read twice holds the same value; ``==`` on tuples says a NaN differs from itself).

    >>> a, b = (float("nan"), 1.0), (float("nan"), 1.0)
    >>> same_head(a, b), a == b, same_head(a, (1.0, 1.0))
    (True, False, False)
    """
    if a is None or b is None:
        return a is b
    return len(a) == len(b) and all(x == y or _nan_key(x) == _nan_key(y) for x, y in zip(a, b))


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
    ``None``.  ``finite`` says whether every element is finite (no NaN, no infinity; ``None``
    where it was not checked: integer and bool tensors, other devices, and a large tensor a
    trace saw only as an input from before its block, which nothing non-finite was made
    from and which changed or was freed before the graph was built) and ``nonfinite_at``
    the flat row-major index of the first element that is not, ``nonfinite_value`` that
    element (NaN, inf or -inf) where it was read.  ``unread`` says why the
    values were not read, where graphlens could not
    (``"a quantized tensor"``, ``"a LoggingTensor: a tensor subclass with its own
    __torch_dispatch__"``).  ``str(summary)`` is the compact text the diagrams show;
    :meth:`format` takes a precision.

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
    unread: str | None = None
    finite: bool | None = None
    nonfinite_at: int | None = None
    nonfinite_value: Any = None

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
        extra = "".join(
            f", {k}={getattr(self, k)!r}" for k in ("min", "max", "mean", "unread", "finite", "nonfinite_at", "nonfinite_value")
            if getattr(self, k) is not None and not (k == "finite" and self.finite)
        )
        return f"Summary({self.shape!r}, {self.dtype!r}, {self.numel!r}, head={self.head!r}{extra})"

    def _key(self) -> tuple:
        head = None if self.head is None else tuple(map(_nan_key, self.head))
        return (self.shape, self.dtype, self.numel, head, _nan_key(self.min), _nan_key(self.max), _nan_key(self.mean), self.unread,
                self.finite, self.nonfinite_at, _nan_key(self.nonfinite_value))

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
        out = {
            "shape": list(self.shape), "dtype": self.dtype, "numel": self.numel,
            "head": None if self.head is None else [_json_number(v) for v in self.head],
            "min": _json_number(self.min), "max": _json_number(self.max), "mean": _json_number(self.mean),
        }
        if self.unread is not None:
            out["unread"] = self.unread
        if self.finite is not None:
            out["finite"] = self.finite
        if self.nonfinite_at is not None:
            out["nonfinite_at"] = self.nonfinite_at
        if self.nonfinite_value is not None:
            out["nonfinite_value"] = _json_number(self.nonfinite_value)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Summary":
        """The inverse of :meth:`to_dict`; a ``ValueError`` names the field that is wrong."""
        return read_summary(data, "bad summary")


def _json_number(v: Any) -> Any:
    if type(v) is float and not math.isfinite(v):
        return "nan" if v != v else ("inf" if v > 0 else "-inf")
    if type(v) is complex:
        return {"re": _json_number(v.real), "im": _json_number(v.imag)}
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


#: What a saved tensor's storage is, for :class:`SavedStorage` (see :mod:`graphlens.memory`).
STORAGE_KINDS = ("activation", "untracked", "parameter", "number")


class SavedStorage(NamedTuple):
    """The memory behind one saved tensor, as plain numbers (no tensor is kept).

    ``number`` names the storage within its graph: two saved tensors with the same number
    share memory (the same tensor saved by two ops, a view of another saved tensor), so it
    is counted once.  ``nbytes`` is the size of the whole storage (a saved view keeps all of
    it alive).  ``kind`` is one of :data:`STORAGE_KINDS`: ``"activation"`` when the tensor
    (or the tensor it is a view of) has autograd history (a ``grad_fn``); ``"parameter"``
    when that is a leaf that requires grad; ``"untracked"`` for a tensor with neither (the
    program's inputs, buffers, masks or indices made during the forward); ``"number"`` for a
    Python number torch wrapped into a 0-d tensor (``x * 0.5`` saves ``0.5``)."""

    number: int
    nbytes: int
    kind: str = "activation"


class SavedEntry(NamedTuple):
    """One attribute a backward node saved for backward (``MulBackward0._saved_self``).

    ``name`` is the attribute without its prefix (``"self"``, ``"other"``, ``"result"``);
    ``state`` a :class:`SavedState`; ``tensor`` the id of the tensor node it saved, where
    graphlens knows it (so a diagram can say ``self = x``); ``summary`` the saved
    tensor's shape and dtype (a :class:`Summary`), where one was read; ``value`` a plain
    saved value that is not a tensor (a number, a tuple of sizes, a short text);
    ``storages`` the :class:`SavedStorage` of each saved tensor (one, or one per tensor of a
    saved list), as read while the tensor was held (they stay when backward frees it later;
    empty where graphlens did not read them); for a tensor hidden by the hooks of
    ``torch.utils.checkpoint``, what those hooks keep instead: the checkpointed region's inputs."""

    name: str
    state: SavedState = SavedState.LIVE
    tensor: str | None = None
    summary: Summary | None = None
    value: Any = None
    storages: tuple[SavedStorage, ...] = ()

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
        out = {
            "name": self.name, "state": self.state.value, "tensor": self.tensor,
            "summary": None if self.summary is None else self.summary.to_dict(), "value": value,
        }
        if self.storages:
            out["storages"] = [s._asdict() for s in self.storages]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "SavedEntry":
        """The inverse of :meth:`to_dict`; a ``ValueError`` names the field that is wrong."""
        return read_saved(data, "bad saved entry")


# -- reading JSON: every field checked, every error one sentence naming the record and field ----------
class BareLiteral:
    """A ``NaN``, ``Infinity`` or ``-Infinity`` literal of JSON text: ``json.loads`` takes them,
    JSON and the schema do not (it spells non-finite numbers ``"nan"``, ``"inf"``, ``"-inf"``).
    :meth:`Graph.from_json <graphlens.Graph.from_json>` reads such a literal as one of these, so
    that the error names the field that holds it."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother, _SHORT.maxlist, _SHORT.maxdict = 2, 60, 60, 6, 4


def describe(value: Any) -> str:
    """A JSON value as an error message shows it, cut short: ``int 5``, ``str 'x'``, ``null``."""
    if isinstance(value, BareLiteral):
        return (f"the bare JSON literal {value.text} (JSON has no such number: the schema writes non-finite "
                f'numbers as the strings "nan", "inf" and "-inf")')
    if value is None:
        return "null"
    return f"{type(value).__name__} {_SHORT.repr(value)}"


def short(text: Any) -> str:
    """``repr(text)``, cut short (an id or a name in an error message)."""
    return _SHORT.repr(text)


class Where:
    """The words that open an error about one record (``"bad tensor 't3'"``), made only when
    an error needs them (a large graph reads many records and fails at most once)."""

    __slots__ = ("make",)

    def __init__(self, make: Callable[[], str]) -> None:
        self.make = make

    def __str__(self) -> str:  # (f"{where}: ..." calls it)
        return self.make()


_SCALARS = frozenset({str, int, float, bool, list, tuple, type(None)})


def _is_object(v: Any) -> bool:
    t = type(v)
    return t is dict or (t not in _SCALARS and isinstance(v, Mapping))


class Kind:
    """What one JSON field must hold: a test, the words for it (``"a text or null"``) and how
    to turn the JSON value into the record's (``None`` keeps it as it is)."""

    __slots__ = ("expected", "test", "convert")

    def __init__(self, expected: str, test: Callable[[Any], bool], convert: Callable[..., Any] | None = None) -> None:
        self.expected, self.test, self.convert = expected, test, convert

    def __call__(self, value: Any, where: str | Where, field: str) -> Any:
        if not self.test(value):
            raise ValueError(f"{where}: field {field!r} must be {self.expected}, not {describe(value)}")
        return value if self.convert is None else self.convert(value, where, field)

    def or_null(self) -> "Kind":
        """The same kind, or ``null``."""
        convert = self.convert
        return Kind(f"{self.expected} or null", lambda v: v is None or self.test(v),
                    None if convert is None else lambda v, where, field: None if v is None else convert(v, where, field))


def read_fields(data: Any, cls: type, kinds: Mapping[str, Kind], where: str | Where, noun: str) -> dict[str, Any]:
    """The fields of ``data``, a JSON object for one ``cls`` record, each checked by its kind; a
    field left out takes the record's default.  ``where`` opens every error (``"bad tensor 't3'"``)."""
    if not _is_object(data):
        raise ValueError(f"{where}: a {noun} must be a JSON object, not {describe(data)}")
    unknown = [k for k in data if k not in kinds]
    if unknown:
        raise ValueError(f"{where}: unknown {cls.__name__} field(s) {sorted(map(str, unknown))} (must be among {list(cls._fields)})")
    out: dict[str, Any] = {}
    for name, kind in kinds.items():
        if name in data:  # (Kind.__call__, inlined: a large graph reads a million fields)
            v = data[name]
            if not kind.test(v):
                kind(v, where, name)  # raises
            out[name] = v if kind.convert is None else kind.convert(v, where, name)
        elif name not in cls._field_defaults:
            raise ValueError(f"{where}: field {name!r} is missing (it must be {kind.expected})")
    return out


def kinds_of(cls: type, **kinds: Kind) -> dict[str, Kind]:
    """The kind of every field of record class ``cls``, in the record's order."""
    assert set(kinds) == set(cls._fields), cls
    return {f: kinds[f] for f in cls._fields}


def read_records(cls: type, kinds: Mapping[str, Kind], items: Any, noun: str, *ends: str, convert=None) -> list:
    """The ``cls`` records of one list of a document, every field checked (:func:`read_fields`),
    each error naming the record by ``ends`` (see :func:`record_where`); ``convert`` edits the fields."""
    out = []
    for k, data in enumerate(items):
        values = read_fields(data, cls, kinds, record_where(noun, data, k, *ends), noun)
        out.append(cls(**(values if convert is None else convert(values))))
    return out


def _is_text(v: Any) -> bool:
    return isinstance(v, str)


def _is_int(v: Any) -> bool:
    return type(v) is int


def _is_list(v: Any) -> bool:
    return isinstance(v, (list, tuple))


TEXT = Kind("a text", _is_text)
TEXT_OR_NULL = TEXT.or_null()
FLAG = Kind("true or false", lambda v: v is True or v is False)
INTEGER = Kind("an integer", _is_int)
INTEGER_OR_NULL = INTEGER.or_null()
COUNT = Kind("an integer >= 0", lambda v: type(v) is int and v >= 0)
POSITIONS_OR_NULL = Kind(
    "a list of positions (integers >= 0)", lambda v: _is_list(v) and all(type(n) is int and n >= 0 for n in v),
    lambda v, where, field: tuple(v),
).or_null()
SHAPE = Kind(
    "a list of sizes (integers >= 0, or texts for symbolic sizes)",
    lambda v: _is_list(v) and all((type(n) is int and n >= 0) or isinstance(n, str) for n in v),
    lambda v, where, field: tuple(v),
)

_NONFINITE = ("nan", "inf", "-inf")
_A_NUMBER = 'a number (or "nan", "inf", "-inf"; a complex one as {"re": .., "im": ..})'


def _real(v: Any) -> bool:
    return isinstance(v, (int, float)) or (isinstance(v, str) and v in _NONFINITE)


def _is_number(v: Any) -> bool:
    if type(v) is float or type(v) is int:
        return True
    if _is_object(v):
        return len(v) == 2 and "re" in v and "im" in v and _real(v["re"]) and _real(v["im"])
    return _real(v)


def _number(v: Any, where: str = "", field: str = "") -> Any:
    if isinstance(v, str):
        return float(v)
    if _is_object(v):
        return complex(_number(v["re"]), _number(v["im"]))
    return v


NUMBER_OR_NULL = Kind(_A_NUMBER, _is_number, _number).or_null()


def _head(v: Any, where: str, field: str) -> tuple:
    for i, item in enumerate(v):
        if not _is_number(item):
            raise ValueError(f"{where}: field '{field}[{i}]' must be {_A_NUMBER}, not {describe(item)}")
    return tuple(map(_number, v))


HEAD = Kind("a list of numbers", _is_list, _head).or_null()


def read_summary(data: Any, where: str | Where) -> Summary:
    """A :class:`Summary` from its JSON object (see :meth:`Summary.from_dict`)."""
    return Summary(**read_fields(data, Summary, _SUMMARY_KINDS, where, "summary"))


_SUMMARY_KINDS = {"shape": SHAPE, "dtype": TEXT, "numel": Kind("an integer >= -1", lambda v: type(v) is int and v >= -1),
                  "head": HEAD, "min": NUMBER_OR_NULL, "max": NUMBER_OR_NULL, "mean": NUMBER_OR_NULL,
                  "unread": TEXT_OR_NULL, "finite": FLAG.or_null(), "nonfinite_at": COUNT.or_null(),
                  "nonfinite_value": NUMBER_OR_NULL}

SUMMARY_OR_NULL = Kind("a summary (a JSON object) or null", lambda v: True,
                       lambda v, where, field: None if v is None else read_summary(v, Where(lambda: f"{where}: field {field!r} is a bad summary")))


def one_of(noun: str, choices: Any, convert: Callable[[str], Any] = str) -> Kind:
    """A field that holds one of the texts ``choices``, read as ``convert(text)`` (an error
    says ``unknown {noun}: ...``)."""
    texts = [str(c) for c in choices]

    def check(v: Any, where: str, field: str) -> Any:
        if not isinstance(v, str) or v not in texts:
            raise ValueError(f"{where}: unknown {noun}: {short(v)} (field {field!r} must be one of {texts})")
        return convert(v)

    return Kind(f"one of {texts}", lambda v: True, check)


def _is_plain(v: Any) -> bool:
    if _is_object(v) and list(v) == ["tuple"]:
        return _is_list(v["tuple"]) and all(map(_is_number, v["tuple"]))
    return v is None or isinstance(v, str) or _is_number(v)


def _plain(v: Any, where: str, field: str) -> Any:
    if _is_object(v) and list(v) == ["tuple"]:
        return tuple(map(_number, v["tuple"]))
    return v if v is None or isinstance(v, str) else _number(v)


_STORAGE_KINDS = {"number": COUNT, "nbytes": COUNT, "kind": one_of("storage kind", STORAGE_KINDS)}


def _storages(v: Any, where: str, field: str) -> tuple:
    return tuple(SavedStorage(**read_fields(s, SavedStorage, _STORAGE_KINDS, Where(
        lambda i=i: f"{where}: field '{field}[{i}]' is a bad saved storage"), "saved storage")) for i, s in enumerate(v or ()))


_SAVED_KINDS = {
    "name": TEXT, "state": one_of("saved state", [s.value for s in SavedState], SavedState), "tensor": TEXT_OR_NULL,
    "summary": SUMMARY_OR_NULL, "value": Kind(f'{_A_NUMBER}, a text, {{"tuple": [numbers]}} or null', _is_plain, _plain),
    "storages": Kind("a list of saved storages (JSON objects)", lambda v: v is None or _is_list(v), _storages),
}


def read_saved(data: Any, where: str | Where) -> SavedEntry:
    """A :class:`SavedEntry` from its JSON object (see :meth:`SavedEntry.from_dict`)."""
    return SavedEntry(**read_fields(data, SavedEntry, _SAVED_KINDS, where, "saved entry"))


SAVED = Kind("a list of saved entries (JSON objects)", lambda v: v is None or _is_list(v), lambda v, where, field: tuple(
    read_saved(e, Where(lambda i=i: f"{where}: field '{field}[{i}]' is a bad saved entry")) for i, e in enumerate(v or ())))


def record_where(noun: str, data: Any, k: int, *ends: str) -> Where:
    """How an error names record ``k`` of a list: by its id (``bad tensor 't3'``), an edge by its
    ends (``bad edge #0 ('op0' -> 'op1')``), else by its place (``bad tensor #3``)."""

    def make() -> str:
        ids = [data.get(e) for e in ends] if _is_object(data) else [None]
        if not all(isinstance(i, str) for i in ids):
            return f"bad {noun} #{k}"
        return f"bad {noun} {short(ids[0])}" if len(ids) == 1 else f"bad {noun} #{k} ({' -> '.join(map(short, ids))})"

    return Where(make)


def read_ids(data: Any, field: str, noun: str, expected: str) -> list[str]:
    """A list of node ids (a graph's roots): each must be a text."""
    for k, v in enumerate(data):
        if not isinstance(v, str):
            raise ValueError(f"bad {field}: {noun} #{k} must be {expected} (a text), not {describe(v)}")
    return list(data)


def read_notes(data: Any) -> dict[str, tuple[str, ...]]:
    """A graph's notes: an object from node id to a list of texts (or one text)."""
    if not isinstance(data, Mapping):
        raise ValueError(f"bad notes: notes must be an object from node id to a list of texts, not {describe(data)}")
    out = {}
    for k, v in data.items():
        texts = [v] if isinstance(v, str) else v
        if not isinstance(texts, (list, tuple)) or not all(isinstance(t, str) for t in texts):
            raise ValueError(f"bad notes: the notes of {short(k)} must be a list of texts, not {describe(v)}")
        out[str(k)] = tuple(texts)
    return out
