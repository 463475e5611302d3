"""Confidence intervals for evaluation results (pure functions, standard library only).

* :func:`wilson_interval` for a rate such as a win rate: the Wilson score interval stays inside
  [0, 1] and keeps close to its nominal coverage for few games and rates near 0 or 1, where the
  textbook normal interval ``p +- z sqrt(p(1-p)/n)`` collapses to a point or spills outside.
* :func:`mean_interval` for a mean such as the mean reward: Student's t interval, with the t
  quantile computed exactly (:func:`t_quantile`), so no SciPy is needed.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

Z95 = statistics.NormalDist().inv_cdf(0.975)  # 1.959963984540054
_EXACT_T_MAX_DF = 1000  # above this, the Cornish-Fisher expansion is exact to ~1e-12


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion ``successes / n``; ``(0, 1)`` when ``n == 0``."""
    if n < 0 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n, got successes={successes}, n={n}")
    if n == 0:
        return 0.0, 1.0
    return _wilson(successes / n, n, z, at_zero=successes == 0, at_one=successes == n)


def _wilson(p: float, n: int, z: float, *, at_zero: bool, at_one: bool) -> tuple[float, float]:
    """The Wilson score interval around the proportion ``p`` of ``n`` trials; an end the data reach
    (``at_zero``, ``at_one``) is exact, with no rounding dust at 0 or 1."""
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    lo = 0.0 if at_zero else max(0.0, centre - half)
    hi = 1.0 if at_one else min(1.0, centre + half)
    return lo, hi


def _t_central_mass(t: float, df: int) -> float:
    """P(|T| < t) for Student's t with integer ``df`` (Abramowitz & Stegun 26.7.3, a finite sum)."""
    theta = math.atan(t / math.sqrt(df))
    c2 = math.cos(theta) ** 2
    if df % 2 == 0:
        term = total = 1.0
        for k in range(1, (df - 2) // 2 + 1):
            term *= (2 * k - 1) / (2 * k) * c2
            total += term
        return math.sin(theta) * total
    if df == 1:
        return 2 * theta / math.pi
    term = total = math.cos(theta)
    for k in range(1, (df - 3) // 2 + 1):
        term *= (2 * k) / (2 * k + 1) * c2
        total += term
    return 2 / math.pi * (theta + math.sin(theta) * total)


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile (``p`` in [0.5, 1)) of Student's t with ``df`` degrees of freedom."""
    if not 0.5 <= p < 1 or df < 1:
        raise ValueError(f"need 0.5 <= p < 1 and df >= 1, got p={p}, df={df}")
    if df > _EXACT_T_MAX_DF:  # A&S 26.7.5
        z = statistics.NormalDist().inv_cdf(p)
        g = [(z**3 + z) / 4, (5 * z**5 + 16 * z**3 + 3 * z) / 96,
             (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384,
             (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160]
        return z + sum(gi / df ** (i + 1) for i, gi in enumerate(g))
    mass, lo, hi = 2 * p - 1, 0.0, 1.0
    while _t_central_mass(hi, df) < mass:
        hi *= 2
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _t_central_mass(mid, df) < mass else (lo, mid)
    return (lo + hi) / 2


def mean_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """Student's t interval for the mean of ``values``; NaNs when there are fewer than two."""
    n = len(values)
    if n < 2:
        return math.nan, math.nan
    mean = statistics.fmean(values)
    half = t_quantile(0.5 + confidence / 2, n - 1) * statistics.stdev(values) / math.sqrt(n)
    return mean - half, mean + half


def score_interval(wins: int, draws: int, losses: int, z: float = Z95) -> tuple[float, float]:
    """A 95% interval for the expected score ``q = (wins + draws / 2) / n`` (a win scores 1, a draw 1/2):
    the Wilson score interval (Wilson 1927) with ``wins + draws / 2`` successes in ``n`` games.

    Conservative when there are draws: a game's score lies in [0, 1], so its variance is at most
    ``q (1 - q)`` (``s² <= s`` there), the Bernoulli variance the Wilson interval assumes; without
    draws it is :func:`wilson_interval`. ``(0, 1)`` when ``n == 0``."""
    if min(wins, draws, losses) < 0:
        raise ValueError(f"need counts >= 0, got wins={wins}, draws={draws}, losses={losses}")
    n = wins + draws + losses
    if n == 0:
        return 0.0, 1.0
    return _wilson((wins + draws / 2) / n, n, z, at_zero=wins == draws == 0, at_one=losses == draws == 0)


def compare_intervals(before: tuple[float, float], after: tuple[float, float]) -> str:
    """How ``after`` stands against ``before``, two 95% intervals: ``"higher"`` or ``"lower"`` when they do not
    overlap (the change is more than the noise), ``"overlap"`` when they do."""
    if after[0] > before[1]:
        return "higher"
    if after[1] < before[0]:
        return "lower"
    return "overlap"


def comparison_line(change: str, what: str = "win rate") -> str:
    """The quickstarts' verdict on the final checkpoint against the warm start, from :func:`compare_intervals`'
    ``change``."""
    return {"higher": f"the final {what} is higher: the intervals do not overlap",
            "lower": f"the final {what} is LOWER than the warm start's: the intervals do not overlap",
            "overlap": "the intervals overlap: no change beyond the noise"}[change]
