"""Argument checks shared by the config layers; each error names the argument and what is allowed."""

from __future__ import annotations

import math
from typing import Any


def check_int(name: str, value: Any, minimum: int, *, allow_none: bool = False) -> None:
    """``value`` must be an ``int`` (not a bool) ``>= minimum`` (or ``None`` when allowed)."""
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}{' or None' if allow_none else ''}, got {value!r}")


def check_positive(name: str, value: Any) -> None:
    """``value`` must be a finite real number ``> 0``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a number > 0, got {value!r}")
