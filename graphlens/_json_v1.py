"""Reading graphs written by schema 1, whose records held display strings, as numbers."""

from __future__ import annotations

import ast
import math
import re
from typing import Any

from .values import FREED, LIVE, MODIFIED, UNREADABLE, SavedEntry, Summary

__all__ = ["summary_from_text", "saved_from_text"]

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
    numel = math.prod(shape)
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
