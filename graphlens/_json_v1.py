"""Reading graphs written by schema 1, whose records held display strings, as numbers."""

from __future__ import annotations

import ast
import math
import re
from typing import Any

from .values import FREED, LIVE, MODIFIED, UNREADABLE, Kind, SavedEntry, Summary, describe

__all__ = ["summary_from_text", "saved_from_text", "V1_TEXTS", "V1_SAVED", "tensor_v1"]

_V1_TENSOR = re.compile(r"^(\w+)\[([\d, ]*)\]$")  # how version 1 spelled a saved tensor: float32[3]


def _v1_number(text: str) -> Any:
    text = text.strip()
    if text in ("True", "False"):
        return text == "True"
    if text.endswith("j"):
        try:
            return complex(text)
        except ValueError:
            pass
    try:
        return int(text)
    except ValueError:
        return float(text)


def summary_from_text(text: Any, shape: tuple, dtype: str) -> Summary | None:
    """A version-1 summary (``"[0.5, 1, … (9 elements)]"``, ``"3"``, ``"<float32[2]>"``)
    as numbers: the digits version 1 kept (4 significant ones), the tensor's shape and dtype."""
    if text is None or text in ("-", "None"):
        return None
    text = str(text)
    numel = math.prod(shape) if all(type(n) is int for n in shape) else -1
    try:
        if text.startswith("<"):
            return Summary(tuple(shape), dtype, numel, None)
        if not text.startswith("["):
            return Summary(tuple(shape), dtype, numel, (_v1_number(text),))
        body = text[1:-1]
        more = re.search(r"… \((\d+) elements\)$", body)
        if more:
            numel = int(more.group(1))
            body = body[: more.start()].rstrip(", ")
        head = tuple(_v1_number(v) for v in body.split(", ")) if body else ()
        return Summary(tuple(shape), dtype, numel, head)
    except ValueError:
        return Summary(tuple(shape), dtype, numel, None)


def saved_from_text(name: str, text: str) -> SavedEntry:
    """A version-1 saved pair (``("self", "freed")``, ``("other", "float32[3]")``)."""
    for state in (FREED, MODIFIED):
        if text == state.value:
            return SavedEntry(name, state)
    if text.startswith("<unreadable"):
        return SavedEntry(name, UNREADABLE)
    m = _V1_TENSOR.match(text)
    if m:
        shape = tuple(int(n) for n in m.group(2).split(", ") if n)
        return SavedEntry(name, LIVE, None, Summary(shape, m.group(1), math.prod(shape), None))
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        value = text
    if value is not None and not isinstance(value, (int, float, complex, bool, tuple, str)):
        value = text
    return SavedEntry(name, LIVE, None, None, value)


def _saved_pairs(v: Any, where: str, field: str) -> tuple:
    for i, pair in enumerate(v):
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
            raise ValueError(f"{where}: field '{field}[{i}]' must be a pair of texts (name, value), not {describe(pair)}")
    return tuple(saved_from_text(k, v) for k, v in v)


def _texts(v: Any, where: str, field: str) -> tuple:
    for i, text in enumerate(v):
        if not (text is None or isinstance(text, str)):
            raise ValueError(f"{where}: field '{field}[{i}]' must be a text or null, not {describe(text)}")
    return tuple(v)


#: How version 1 wrote a tensor's ``flowed`` grads (display texts) and an op's ``saved`` pairs.
V1_TEXTS = Kind("a list of texts", lambda v: v is None or isinstance(v, (list, tuple)), lambda v, where, field: _texts(v or (), where, field))
V1_SAVED = Kind("a list of (name, value) pairs", lambda v: v is None or isinstance(v, (list, tuple)),
                lambda v, where, field: _saved_pairs(v or (), where, field))


def tensor_v1(values: dict) -> dict:
    """The checked fields of a version-1 tensor with its display texts read back as summaries."""
    shape, dtype = values.get("shape", ()), values.get("dtype", "float32")
    for key in ("value", "grad"):
        values[key] = summary_from_text(values.get(key), shape, dtype)
    values["flowed"] = tuple(summary_from_text(f, shape, dtype) for f in values.get("flowed", ()))
    return values
