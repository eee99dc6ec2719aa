"""Node labels: the HTML-like text of tensor and op nodes, and how record numbers become text."""

from __future__ import annotations

import html
import re
from typing import Any, Mapping

from ..flowed import last_flowed as _last_flowed
from ..graph import OpNode, TensorNode
from ..values import FREED, PRECISION, SavedEntry, Summary  # noqa: F401 - FREED: doctest
from .style import FADED, GRAD_BORDER, GRAD_TEXT, NONFINITE, RELEASED

__all__ = ["value_text", "last_flowed", "printable", "esc", "plural", "shape_text", "tensor_label", "op_text", "op_label", "saved_text"]


def value_text(summary: Summary | None, max_elements: int | None = None, precision: int = PRECISION) -> str | None:
    """The text of a summary in the records (a tensor's ``value``, ``grad`` or ``flowed``
    grad): at most ``max_elements`` numbers, ``precision`` significant digits.  This is
    the one place render turns numbers into text; ``None`` stays ``None``.

    >>> s = Summary((9,), "float32", 9, head=(1.0, 2.5, 3.14159))
    >>> value_text(s, 2), value_text(s, precision=6), value_text(None)
    ('[1, 2.5, … (9 elements)]', '[1, 2.5, 3.14159, … (9 elements)]', None)
    """
    if summary is None:
        return None
    return summary.format(precision, max_elements)


def last_flowed(t: TensorNode) -> Summary | None:
    """The summary of the last gradient that flowed into ``t`` in a traced backward pass,
    or ``None`` (passes where none flowed hold ``None``)."""
    return _last_flowed(t.flowed)


#: Longest text one label line shows; longer names are cut with an ellipsis.
MAX_TEXT = 160
_UNPRINTABLE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\ud800-\udfff\ufffe\uffff]")


def printable(text: Any) -> str:
    r"""``text`` as Graphviz can take it: control characters spelled ``\x07``, at most
    :data:`MAX_TEXT` characters (a longer text ends in ``…``).

    >>> printable("a\x00b"), len(printable("x" * 20000))
    ('a\\x00b', 160)
    """
    text = str(text)
    if _UNPRINTABLE.search(text):
        text = _UNPRINTABLE.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 256 else f"\\u{ord(m.group()):04x}", text)
    if len(text) > MAX_TEXT:
        text = text[: MAX_TEXT - 1] + "…"
    return text


def esc(text: Any) -> str:
    """``text`` escaped for an HTML-like label or attribute (and made :func:`printable`)."""
    return html.escape(printable(text), quote=True)


def plural(n: int, word: str) -> str:
    """``"1 op"``, ``"1,024 ops"``."""
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def shape_text(t: TensorNode) -> str:
    """``"shape [2, 3]"`` (or ``"scalar"``), with dtype and device when not float32 on cpu."""
    if not t.shape:
        text = "scalar"
    else:
        text = "shape [" + ", ".join(str(s) for s in t.shape) + "]"
    if t.dtype != "float32":
        text += f" {t.dtype}"
    if t.device != "cpu":
        text += f" {t.device}"
    return text


def _nonfinite_word(s: Summary) -> str:
    """``"(NaN at [0])"``: what is not finite, and where the first one is, for a label."""
    at = s.nonfinite_at
    v = s.head[at] if s.head and at is not None and at < len(s.head) else s.nonfinite_value
    what = "NaN" if type(v) is float and v != v else (("inf" if v > 0 else "-inf") if type(v) is float else "NaN/inf")
    if at is None or s.numel <= 1:
        return f"({what})"
    shape, index = s.shape, []
    if shape and all(type(n) is int and n > 0 for n in shape):
        flat = at
        for n in reversed(shape):
            index.append(flat % n)
            flat //= n
        return f"({what} at [{', '.join(map(str, reversed(index)))}])"
    return f"({what} at flat index {at})"


def tensor_label(
    t: TensorNode, *, values: bool, grads: bool, max_elements: int | None, hl: bool, precision: int = PRECISION
) -> str:
    """A tensor's label: its name (or faded id), shape, value row and grad row."""
    name = t.name if t.name is not None else t.id
    rows = []
    if t.name:
        rows.append(f'<TR><TD><B>{esc(name)}</B></TD></TR>')
    elif t.name is not None:  # named by an empty string: say so rather than draw nothing
        rows.append(f'<TR><TD><FONT COLOR="{FADED}">"" ({esc(t.id)})</FONT></TD></TR>')
    else:
        rows.append(f'<TR><TD><FONT COLOR="{FADED}">{esc(name)}</FONT></TD></TR>')
    rows.append(f'<TR><TD><FONT POINT-SIZE="9" COLOR="#444444">{esc(shape_text(t))}</FONT></TD></TR>')
    if values and t.value is not None:
        text = esc(value_text(t.value, max_elements, precision))
        if t.value.finite is False:  # NaN or infinity: red, and said (a learner scans for the first one)
            text = f'<FONT COLOR="{NONFINITE}"><B>{text}</B> {esc(_nonfinite_word(t.value))}</FONT>'
        rows.append(f'<TR><TD><FONT POINT-SIZE="9">{text}</FONT></TD></TR>')
    if grads:
        if t.grad is not None:
            text = value_text(t.grad, max_elements, precision)
            color = NONFINITE if t.grad.finite is False else GRAD_TEXT
            extra = f" {esc(_nonfinite_word(t.grad))}" if t.grad.finite is False else ""
            rows.append(f'<TR><TD><FONT POINT-SIZE="9" COLOR="{color}"><B>grad</B> {esc(text)}{extra}</FONT></TD></TR>')
        else:
            flowed = last_flowed(t)
            if flowed is not None:
                text = value_text(flowed, max_elements, precision)
                color = NONFINITE if flowed.finite is False else RELEASED
                extra = f" {esc(_nonfinite_word(flowed))}" if flowed.finite is False else ""
                rows.append(
                    f'<TR><TD><FONT POINT-SIZE="9" COLOR="{color}"><I>grad {esc(text)} (released){extra}</I></FONT></TD></TR>'
                )
    inner = "".join(rows)
    if hl and t.requires_grad:  # keep the requires_grad mark inside the red highlight border
        return f'<<TABLE BORDER="2" COLOR="{GRAD_BORDER}" CELLBORDER="0" CELLSPACING="0" CELLPADDING="1">{inner}</TABLE>>'
    return f'<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="1">{inner}</TABLE>>'


def op_text(op: OpNode, view: str) -> str:
    """An op's name as the view shows it: ``"mul / MulBackward0"`` in the data view."""
    if view == "function":
        return op.name or op.forward or op.id
    if op.forward and op.name:
        return f"{op.forward} / {op.name}"
    return op.forward or op.name or op.id


def op_label(op: OpNode, text: str, *, saved: bool, names: Mapping[str, str] | None = None, precision: int = PRECISION) -> str:
    """An op's label: ``text``, and one row per saved value when ``saved``:
    ``self = x  float32[3]`` when the saved tensor is a node of the graph (``names`` maps
    tensor ids to what the diagram calls them), ``freed`` once backward released it."""
    rows = [f"<TR><TD>{esc(text)}</TD></TR>"]
    if saved and op.saved:
        for entry in op.saved:
            rows.append(f'<TR><TD><FONT POINT-SIZE="8" COLOR="#555555">{esc(saved_text(entry, names, precision))}</FONT></TD></TR>')
    if len(rows) == 1:
        return f"<{esc(text)}>"
    return '<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="0">' + "".join(rows) + "</TABLE>>"


def saved_text(entry: SavedEntry, names: Mapping[str, str] | None = None, precision: int = PRECISION) -> str:
    """One saved value as a row: ``"saved self = x: float32[3]"``, ``"saved other: 2.5"``.

    >>> saved_text(SavedEntry("self", tensor="t0", summary=Summary((3,), "float32", 3)), {"t0": "x"})
    'saved self = x: float32[3]'
    >>> saved_text(SavedEntry("other", value=2.5)), saved_text(SavedEntry("self", FREED, tensor="t0"), {"t0": "x"})
    ('saved other: 2.5', 'saved self = x: freed')
    """
    who = names.get(entry.tensor) if names and entry.tensor is not None else None
    head = f"saved {entry.name}" + (f" = {who}" if who else "")
    return f"{head}: {entry.format(precision)}"
