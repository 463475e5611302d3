"""Argument checks shared by the reward transforms: fail at construction with a message saying what to do."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any


def check_finite(value: Any, name: str) -> float:
    """Return ``value`` as a float, or raise if it is not a finite real number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return float(value)


def check_tau(tau: Any) -> float:
    """EMA step size: in (0, 1]; 1 means the baseline is just the previous reward."""
    tau = check_finite(tau, "tau")
    if not 0.0 < tau <= 1.0:
        raise ValueError(f"tau must be in (0, 1], got {tau!r} (SPIRAL's decay 0.95 is tau=0.05)")
    return tau


def check_callables(transforms: Iterable[Callable], what: str) -> list[Callable]:
    """Return the transforms as a list, or raise if one of them cannot be called."""
    if isinstance(transforms, str) or not isinstance(transforms, Iterable):
        raise ValueError(f"{what} takes a list of transforms, got {transforms!r}")
    out = list(transforms)
    for t in out:
        if not callable(t):
            raise ValueError(f"{what}: {t!r} is not callable")
    return out
