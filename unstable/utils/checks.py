"""Argument checks shared by the config layers; each error names the argument and what is allowed."""

from __future__ import annotations

import math
from typing import Any

INT64_MAX = 2**63 - 1
"""The largest integer torch, numpy and the C code under them take (a 64-bit signed integer): the
ceiling of every integer setting that says no tighter one."""


def check_int(name: str, value: Any, minimum: int | None, *, allow_none: bool = False,
              maximum: int | None = None) -> None:
    """``value`` must be an ``int`` (not a bool) ``>= minimum`` (``None``: no lower bound but -:data:`INT64_MAX`)
    and ``<= maximum`` (default :data:`INT64_MAX`), or ``None`` when allowed."""
    if value is None and allow_none:
        return
    or_none = " or None" if allow_none else ""
    if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum):
        low = "" if minimum is None else f" >= {minimum}"
        bound = "" if maximum is None else f" and <= {maximum}"
        raise ValueError(f"{name} must be an integer{low}{bound}{or_none}, got {value!r}")
    top = INT64_MAX if maximum is None else maximum
    if value > top or value < -INT64_MAX:
        bounds = f" >= {minimum} and <= {top}" if minimum is not None else f" from -{top} to {top}"
        raise ValueError(f"{name} must be an integer{bounds}{or_none}, got {value!r} (too large)")


def check_positive(name: str, value: Any) -> None:
    """``value`` must be a finite real number ``> 0``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a number > 0, got {value!r}")


def check_number(name: str, value: Any, low: float, high: float = math.inf, *, low_open: bool = False,
                 high_open: bool = False, allow_none: bool = False) -> None:
    """``value`` must be a finite real number (not a bool) in the interval from ``low`` to ``high``."""
    if value is None and allow_none:
        return
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (value > low if low_open else value >= low) and (value < high if high_open else value <= high)
    if not ok:
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open or high == math.inf else ']'}"
        where = "" if (low, high) == (-math.inf, math.inf) else f" in {interval}"
        raise ValueError(f"{name} must be a finite number{where}{' or None' if allow_none else ''}, got {value!r}")


def check_bool(name: str, value: Any, *, allow_none: bool = False) -> None:
    """``value`` must be ``True`` or ``False`` (not 0/1 or a string like ``"yes"``)."""
    if not isinstance(value, bool) and not (value is None and allow_none):
        raise ValueError(f"{name} must be true or false{' or None' if allow_none else ''}, got {value!r}")


def check_str(name: str, value: Any, *, allow_none: bool = False, what: str = "a non-empty string") -> None:
    """``value`` must be a non-blank ``str`` (or ``None`` when allowed)."""
    if value is None and allow_none:
        return
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name} must be {what}{' or None' if allow_none else ''}, got {value!r}")


def check_choice(name: str, value: Any, allowed: tuple[str, ...]) -> None:
    """``value`` must be one of ``allowed`` (compared as strings, so lists and dicts fail cleanly)."""
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{name} must be one of {list(allowed)}, got {value!r}")
