"""Shared helpers of the real-world corpus: run a user's program, get graphlens's answer, check it.

Each case file keeps only the user's program and its assertions; what every case does the
same way (catching the error, explaining it with or without a trace, reading the note that
``trace(explain_errors=True)`` attaches, comparing an answer with the facts it must name)
lives here.
"""

from __future__ import annotations

import contextlib
from typing import Callable

import pytest

import graphlens as gl
from graphlens.explain import REASONS, Explanation

#: The two ways of asking about an error that most cases test: ``explain_error(exc)`` alone,
#: and ``explain_error(exc, tr)`` with the program run inside ``gl.trace()``.
HOW = ("plain", "traced")


def raised(fn: Callable, *args, **kwargs) -> BaseException:
    """The exception ``fn(*args, **kwargs)`` raises; the test fails if it raises none."""
    try:
        fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the user's program may raise any error
        return exc
    pytest.fail(f"{getattr(fn, '__name__', fn)}() raised nothing: the case no longer reproduces its error")


def traced_error(fn: Callable, *args, **kwargs) -> tuple[BaseException, gl.Trace]:
    """Run ``fn`` inside ``gl.trace(explain_errors=True)``, let its error escape the block (as
    in the user's program), and return the error and the trace."""
    try:
        with gl.trace(explain_errors=True) as tr:
            fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001
        return exc, tr
    pytest.fail(f"{getattr(fn, '__name__', fn)}() raised nothing inside the trace")


def explained(fn: Callable, how: str = "plain", *args, **kwargs) -> Explanation:
    """graphlens's explanation of the error ``fn()`` raises: ``how="plain"`` is
    ``explain_error(exc)``, ``how="traced"`` is ``explain_error(exc, tr)`` after running ``fn``
    inside a trace."""
    if how == "plain":
        return gl.explain_error(raised(fn, *args, **kwargs))
    if how == "traced":
        exc, tr = traced_error(fn, *args, **kwargs)
        return gl.explain_error(exc, tr)
    raise ValueError(f"how must be one of {HOW}, not {how!r}")


def explained_in(program: Callable, how: str = "plain") -> Explanation:
    """graphlens's explanation of the error ``program(ctx)`` raises, for a program that opens the
    block itself at its own line (``with ctx:`` around the user's loop, after the setup):
    ``how="traced"`` passes ``gl.trace(explain_errors=True)`` and asks ``explain_error(exc, tr)``,
    ``how="plain"`` passes a context that does nothing and asks ``explain_error(exc)``."""
    if how not in HOW:
        raise ValueError(f"how must be one of {HOW}, not {how!r}")
    tr = gl.trace(explain_errors=True) if how == "traced" else None
    try:
        program(tr if tr is not None else contextlib.nullcontext())
    except Exception as exc:  # noqa: BLE001 - the user's program may raise any error
        return gl.explain_error(exc, tr) if tr is not None else gl.explain_error(exc)
    pytest.fail(f"{getattr(program, '__name__', program)}() raised nothing: the case no longer reproduces its error")


def note(fn: Callable, *args, **kwargs) -> str:
    """The note(s) ``trace(explain_errors=True)`` attached to the error escaping ``fn()``,
    joined; ``""`` when graphlens attached none."""
    exc, _ = traced_error(fn, *args, **kwargs)
    return "\n".join(n for n in getattr(exc, "__notes__", ()) if n.startswith("graphlens"))


_ANY = object()


def _has(text: str, words: str | tuple[str, ...]) -> bool:
    """Whether ``text`` contains ``words`` (a tuple: any one of them)."""
    return any(w in text for w in words) if isinstance(words, tuple) else words in text


def _text(answer: Explanation | str) -> str:
    return answer if isinstance(answer, str) else str(answer)


def expect(
    answer: Explanation | str,
    *,
    reason: str | None = None,
    reasons: tuple[str, ...] = (),
    not_reasons: tuple[str, ...] = (),
    tensor=_ANY,
    op: str | tuple[str, ...] | None = None,
    line: str | tuple[str, ...] | None = None,
    says: tuple[str | tuple[str, ...], ...] = (),
    fix: tuple[str | tuple[str, ...], ...] = (),
    never: tuple[str, ...] = (),
    never_fix: tuple[str, ...] = (),
) -> None:
    """Check an answer (an :class:`Explanation`, or a note's text) against the facts of a case.

    ``reason`` is the main code, ``reasons`` codes that must be among ``e.reasons`` and
    ``not_reasons`` codes that must not; ``tensor`` the expected ``e.tensor_name`` (or a tuple
    of acceptable names); ``op`` the operation at fault (``e.op``, one of a tuple of
    acceptable spellings); ``line`` a distinctive part of ``e.line`` (or a tuple of
    alternatives); ``says`` words that must be in ``str(e)``, ``fix`` words that must be in
    ``e.fix`` (an entry that is a tuple of words is met by any one of them: the same fact said
    in other words); ``never`` words that must not be in ``str(e)``, ``never_fix`` words that
    must not be in ``e.fix``.  Every failed fact is listed, with the answer's text.
    """
    problems: list[str] = []
    for code in (reason,) + tuple(reasons) + tuple(not_reasons):
        assert code is None or code in REASONS, f"the case uses an unknown reason code {code!r}"
    text = _text(answer)
    if isinstance(answer, Explanation):
        e = answer
        if reason is not None and e.reason != reason:
            problems.append(f"main reason is {e.reason!r}, expected {reason!r}")
        problems += [f"{c!r} is not among the reasons {e.reasons}" for c in reasons if c not in e.reasons]
        problems += [f"{c!r} is among the reasons {e.reasons}, wrongly" for c in not_reasons if c in e.reasons]
        if tensor is not _ANY:
            ok = e.tensor_name in tensor if isinstance(tensor, tuple) else e.tensor_name == tensor
            if not ok:
                problems.append(f"tensor_name is {e.tensor_name!r}, expected {tensor!r}")
        if op is not None:
            accepted = (op,) if isinstance(op, str) else tuple(op)
            if e.op not in accepted:
                problems.append(f"op is {e.op!r}, expected one of {accepted}")
        if line is not None:
            parts = (line,) if isinstance(line, str) else tuple(line)
            if not any(p in (e.line or "") for p in parts):
                problems.append(f"line is {e.line!r}, expected it to contain one of {parts}")
        problems += [f"the fix does not say {w!r}" for w in fix if not _has(e.fix or "", w)]
        problems += [f"the fix says {w!r}, wrongly" for w in never_fix if w in (e.fix or "")]
    else:
        assert not (reason or reasons or not_reasons or op or line or fix or never_fix or tensor is not _ANY), (
            "a note is text: check it with says= and never= only"
        )
        if not text:
            problems.append("graphlens attached no note")
    problems += [f"it does not say {w!r}" for w in says if not _has(text, w)]
    problems += [f"it says {w!r}, wrongly" for w in never if w in text]
    if problems:
        facts = ""
        if isinstance(answer, Explanation):
            facts = f"\n[reasons={answer.reasons} tensor_name={answer.tensor_name!r} op={answer.op!r} line={answer.line!r}]"
        pytest.fail("; ".join(problems) + f"\n--- graphlens said:\n{text}{facts}", pytrace=False)
