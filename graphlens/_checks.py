"""Argument checks shared by every public entry point, with messages that name the fix."""

from __future__ import annotations

from typing import Any

__all__ = ["check_flag", "check_count", "check_choice", "check_optional_flag", "article"]


def article(name: str) -> str:
    """``"an int"``, ``"a str"``: the type name with its article, for messages."""
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def check_flag(name: str, value: Any) -> bool:
    """``value`` if it is a bool, else a ``TypeError`` naming the option."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, not {value!r}")
    return value


def check_optional_flag(name: str, value: Any) -> bool | None:
    """Like :func:`check_flag`, but ``None`` (automatic) is accepted too."""
    if value is not None and not isinstance(value, bool):
        raise TypeError(f"{name} must be True, False or None (automatic), not {value!r}")
    return value


def check_count(name: str, value: Any, *, minimum: int = 0, allow_none: bool = False) -> int | None:
    """``value`` if it is an int of at least ``minimum`` (or ``None`` when allowed)."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        extra = " or None" if allow_none else ""
        raise TypeError(f"{name} must be an int >= {minimum}{extra}, not {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, not {value!r}")
    return value


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    """``value`` if it is one of ``choices``, else ``unknown name: 'x' (must be one of [...])``."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"unknown {name}: {value!r} (must be one of {list(choices)})")
    return value
