"""The league table: a played cross-play matrix with its meta-game analysis and the TrueSkill ladder beside it.

:func:`analyse_league` takes a :class:`~unstable.eval.crossplay.CrossPlayResult` with every cell
played and adds, from :mod:`unstable.samplers.metagame`: the Nash averaging (max-entropy Nash mixture, its
support, each entry's payoff against it), α-Rank, and the cycles of the "beats" relation, where ``i``
beats ``j`` when the cell's 95% interval lies above 0. The TrueSkill ratings (the run's registry)
rank the entries by the games they happened to play; :meth:`LeagueTable.disagreements` lists the pairs
whose order TrueSkill gets wrong according to the table. ``unstable league-table RUN`` prints it and
writes ``league_table.json`` (:meth:`LeagueTable.to_dict`) and a heat map.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from unstable.eval.crossplay import CrossPlayResult
from unstable.samplers.metagame import AlphaRank, NashAverage, Transitivity, alpha_rank, nash_averaging, transitivity


@dataclass(frozen=True)
class LeagueTable:
    """A pool's cross-play table and its meta-game analysis (see the module docstring)."""

    env_id: str
    crossplay: CrossPlayResult
    nash: NashAverage
    alpharank: AlphaRank
    transitivity: Transitivity
    trueskill: dict[str, tuple[float, float]] = field(default_factory=dict)  # uid -> (mu, sigma), where rated
    settings: dict[str, Any] = field(default_factory=dict)  # how the games were played (for the JSON)

    @property
    def players(self) -> tuple[str, ...]:
        """The entries' uids, in matrix order."""
        return self.crossplay.players

    def disagreements(self) -> list[tuple[str, str]]:
        """Pairs ``(a, b)`` that TrueSkill ranks ``a`` above ``b`` (higher mu) while ``b`` beats ``a`` in the table
        (the cell's 95% interval lies above 0 from ``b``'s side)."""
        _, lower, _ = self.crossplay.matrices()
        out = []
        for i, a in enumerate(self.players):
            for j, b in enumerate(self.players):
                if a in self.trueskill and b in self.trueskill and self.trueskill[a][0] > self.trueskill[b][0] \
                        and lower[j, i] > 0:
                    out.append((a, b))
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the entries, the matrix with its intervals, each cell's counts, the analyses."""
        return {
            **crossplay_dict(self.crossplay, self.env_id),
            "nash": {**asdict(self.nash), "support": [self.players[i] for i in self.nash.support]},
            "alpharank": {**asdict(self.alpharank), "ranking": [self.players[i] for i in self.alpharank.ranking]},
            "transitivity": {"beats": [[self.players[i], self.players[j]] for i, j in self.transitivity.beats],
                             "three_cycles": [[self.players[i] for i in c] for c in self.transitivity.three_cycles],
                             "is_transitive": self.transitivity.is_transitive,
                             "cyclic_share": self.transitivity.cyclic_share,
                             "ratings": list(self.transitivity.ratings)},
            "trueskill": {uid: {"mu": mu, "sigma": sigma} for uid, (mu, sigma) in self.trueskill.items()},
            "disagreements": [list(p) for p in self.disagreements()],
            "settings": dict(self.settings),
        }

    def tables(self) -> list[Any]:
        """Rich tables: the matrix (cells with their intervals) and the ladder (Nash, α-Rank, TrueSkill)."""
        from rich import box
        from rich.markup import escape
        from rich.table import Table

        payoffs, lower, upper = self.crossplay.matrices()
        names = self.players
        matrix = Table(title=escape(f"cross-play on {self.env_id}: row's win rate - loss rate [95% interval], "
                                    f"{self.crossplay.games_per_cell} games per cell"),
                       box=box.SIMPLE_HEAD, show_edge=False, collapse_padding=True)
        matrix.add_column("row \\ col", no_wrap=True)
        for name in names:
            matrix.add_column(escape(name), justify="right", no_wrap=True)
        for i, name in enumerate(names):
            matrix.add_row(escape(name), *[_cell(payoffs[i, j], lower[i, j], upper[i, j], i == j)
                                           for j in range(len(names))])
        ladder = Table(title="ladder: Nash averaging, α-Rank and TrueSkill", box=box.SIMPLE_HEAD, show_edge=False,
                       caption=escape(self._caption()), collapse_padding=True)
        for col in ("entry", "Nash mass", "vs Nash", "α-Rank π", "α-Rank #", "mean payoff", "TrueSkill μ±σ",
                    "TrueSkill #"):
            ladder.add_column(col, justify="left" if col == "entry" else "right", no_wrap=True)
        ts_order = sorted(self.trueskill, key=lambda u: -self.trueskill[u][0])
        pi = [round(x, 6) for x in self.alpharank.pi]  # entries within 1e-6 share a rank
        ar_rank = {i: 1 + sum(p > pi[i] for p in pi) for i in range(len(names))}
        order = sorted(range(len(names)), key=lambda i: (-self.nash.nash_average[i], -self.nash.mixture[i],
                                                         -self.transitivity.ratings[i], i))
        for i in order:
            ts = self.trueskill.get(names[i])
            ladder.add_row(escape(names[i]), f"{self.nash.mixture[i]:.3f}", f"{self.nash.nash_average[i]:+.3f}",
                           f"{self.alpharank.pi[i]:.3f}", str(ar_rank[i]), f"{self.transitivity.ratings[i]:+.3f}",
                           "-" if ts is None else f"{ts[0]:.1f}±{ts[1]:.1f}",
                           "-" if ts is None else str(ts_order.index(names[i]) + 1))
        return [matrix, ladder]

    def _caption(self) -> str:
        names, t = self.players, self.transitivity
        cycles = "; ".join(" > ".join(names[i] for i in (*c, c[0])) for c in t.three_cycles[:5])
        ranked = [i for i in self.alpharank.ranking if self.alpharank.pi[i] >= 1e-6]
        rest = len(names) - len(ranked)
        lines = [f"Nash support: {', '.join(names[i] for i in self.nash.support)}",
                 f"α-Rank (alpha {self.alpharank.alpha:g}, m {self.alpharank.population_size}): "
                 + " > ".join(f"{names[i]} ({self.alpharank.pi[i]:.3f})" for i in ranked)
                 + (f"; {rest} more below 1e-6" if rest else ""),
                 f"{'transitive' if t.is_transitive else 'NOT transitive'}: {len(t.three_cycles)} 3-cycles"
                 f"{f' ({cycles})' if cycles else ''}; cyclic share of the matrix {t.cyclic_share:.2f}"]
        disagree = self.disagreements()
        if len(self.trueskill) < 2:
            lines.append("no TrueSkill ladder to compare (fewer than two entries rated)")
        else:
            lines.append("TrueSkill disagrees with the table on: " + ", ".join(f"{a} above {b}" for a, b in disagree)
                         if disagree else "TrueSkill's order contradicts no significant cell")
        if self.crossplay.failures:
            lines.append(f"{len(self.crossplay.failures)} failed games (not counted)")
        return "\n".join(lines)

    def print(self) -> None:
        """Print :meth:`tables` to the terminal."""
        from rich.console import Console

        console = Console(width=max(100, 16 * (len(self.players) + 1) + 4))
        for table in self.tables():
            console.print(table)


def crossplay_dict(crossplay: CrossPlayResult, env_id: str) -> dict[str, Any]:
    """The played table as JSON-ready dicts: the entries, the matrix with its intervals (``None``: not played),
    each cell's counts, the failed games."""
    payoffs, lower, upper = crossplay.matrices()

    def rows(m: np.ndarray) -> list[list[float | None]]:
        return [[None if math.isnan(x) else float(x) for x in row] for row in m]

    return {
        "env_id": env_id,
        "players": list(crossplay.players),
        "payoff": "win rate minus loss rate of the row entry against the column entry, seats alternating",
        "payoffs": rows(payoffs), "payoffs_ci95_lower": rows(lower), "payoffs_ci95_upper": rows(upper),
        "cells": [{**asdict(c), "games": c.games} for c in crossplay.cells],
        "games_per_cell": crossplay.games_per_cell, "failures": list(crossplay.failures),
        "wall_s": crossplay.wall_s,
    }


def _cell(x: float, lo: float, hi: float, diagonal: bool) -> str:
    from rich.markup import escape

    if diagonal:
        return "·"
    if math.isnan(x):
        return "-"
    return escape(f"{x:+.2f}\n[{lo:+.2f},{hi:+.2f}]")


def analyse_league(crossplay: CrossPlayResult, env_id: str, trueskill: dict[str, tuple[float, float]] | None = None,
                   alpha: float = 100.0, population_size: int = 50,
                   settings: dict[str, Any] | None = None) -> LeagueTable:
    """The :class:`LeagueTable` of a fully played cross-play matrix (a cell without a finished game is an error:
    the meta-game needs every payoff)."""
    payoffs, lower, _ = crossplay.matrices()
    missing = [(crossplay.players[i], crossplay.players[j]) for i, j in np.argwhere(np.isnan(payoffs)) if i < j]
    if missing:
        raise ValueError(f"the cross-play matrix has cells without a finished game: {missing[:5]}; play them (more "
                         "games per cell, or look at the failed games) before the meta-game analysis")
    trueskill = {u: tuple(v) for u, v in (trueskill or {}).items() if u in crossplay.players}
    return LeagueTable(env_id, crossplay, nash_averaging(payoffs), alpha_rank(payoffs, alpha, population_size),
                       transitivity(payoffs, beats=lower > 0), trueskill, dict(settings or {}))
